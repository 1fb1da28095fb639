// The golden replay of the tiny DeepSeek-V3.2 model (tests/data/tiny-dsv32, produced by DeepSeek's
// own reference code): the acceptance criteria of ../shared/golden/README.md.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/model/safetensors.hpp"
#include "validate/model_cases.hpp"

namespace {
const std::filesystem::path tiny_dir = std::filesystem::path(DSA_TEST_DATA_DIR) / "tiny-dsv32";

// A golden directory with the tiny model's config and weights and a crafted expected file: the
// prompt and generated tokens given, and step0.logits .. step<logit_steps - 1>.logits (zeros).
struct crafted_golden {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("dsa_test_golden_crafted_" + std::to_string(::getpid()));
  crafted_golden(dsa::index_t prompt_len, dsa::index_t generated_len, dsa::index_t logit_steps) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(tiny_dir / "config.json", dir / "config.json");
    // A copy: the loader refuses shards that resolve outside the checkpoint directory.
    std::filesystem::copy_file(tiny_dir / "model.safetensors", dir / "model.safetensors");
    const std::vector<std::int64_t> prompt(static_cast<std::size_t>(prompt_len), 5);
    const std::vector<std::int64_t> gen(static_cast<std::size_t>(generated_len), 7);
    const std::vector<float> logits(512, 0.0f);
    std::vector<dsa::safetensors_entry> e = {
        {"prompt", dsa::dtype::i64, {1, prompt_len}, std::as_bytes(std::span(prompt))},
        {"generated", dsa::dtype::i64, {1, generated_len}, std::as_bytes(std::span(gen))},
    };
    for (dsa::index_t s = 0; s < logit_steps; ++s) {
      const std::string name = "step" + std::to_string(s) + ".logits";
      e.push_back({name, dsa::dtype::f32, {1, 512}, std::as_bytes(std::span(logits))});
    }
    dsa::write_safetensors(dir / "expected.safetensors", e);
  }
  ~crafted_golden() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  crafted_golden(const crafted_golden&) = delete;
  crafted_golden& operator=(const crafted_golden&) = delete;
};

// A golden directory whose expected file holds the tiny model's golden row twice: batch 2, every
// [1, ...] tensor stacked along dim 0. `edit` may change the stacked bytes of a tensor (by name).
struct batched_golden {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("dsa_test_golden_batched_" + std::to_string(::getpid()));
  std::vector<std::vector<std::byte>> owned;
  template <class Edit>
  explicit batched_golden(Edit edit) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(tiny_dir / "config.json", dir / "config.json");
    std::filesystem::copy_file(tiny_dir / "model.safetensors", dir / "model.safetensors");
    const auto src = dsa::safetensors_file::open(tiny_dir / "expected.safetensors");
    std::vector<dsa::safetensors_entry> e;
    owned.reserve(src.tensors().size());
    for (const dsa::tensor_info& t : src.tensors()) {
      const auto bytes = src.bytes(t);
      auto& b = owned.emplace_back(bytes.begin(), bytes.end());
      std::vector<dsa::index_t> shape = t.shape;
      if (!shape.empty() && shape[0] == 1) {
        b.insert(b.end(), bytes.begin(), bytes.end());
        shape[0] = 2;
      }
      edit(t.name, b);
      e.push_back({t.name, t.type, shape, std::span<const std::byte>(b)});
    }
    dsa::write_safetensors(dir / "expected.safetensors", e);
  }
  ~batched_golden() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  batched_golden(const batched_golden&) = delete;
  batched_golden& operator=(const batched_golden&) = delete;
};

const dsa_validate::comparison* find_comparison(const dsa_validate::model_case_result& r, const std::string& name,
                                                const std::string& metric) {
  for (const auto& c : r.result.comparisons) {
    if (c.tensor == name && c.metric == metric) return &c;
  }
  return nullptr;
}

// The golden README's criteria on the tiny model's replay (9 steps, 3 layers), checked one by one.
void check_readme_criteria(const dsa_validate::model_case_result& r) {
  for (const auto& line : r.diagnostics) MESSAGE(line);
  REQUIRE(r.cosines.size() == 9);
  for (std::size_t s = 0; s < r.cosines.size(); ++s) {
    CAPTURE(s);
    CHECK(r.cosines[s] >= dsa_validate::model_min_cosine);
  }
  const int agree = std::accumulate(r.argmax_match.begin(), r.argmax_match.end(), 0);
  CHECK(agree >= static_cast<int>(r.argmax_match.size()) - 1);
  REQUIRE(r.topk_agreement.size() == 3);
  for (std::size_t l = 0; l < r.topk_agreement.size(); ++l) {
    CAPTURE(l);
    CHECK(r.topk_agreement[l] >= dsa_validate::model_min_topk_agreement);
  }
  CHECK(r.result.pass());
}

}  // namespace

TEST_CASE("tiny-dsv32 golden replay meets the README criteria") {
  const auto r = dsa_validate::run_model_case(dsa::cpu_backend{2}, tiny_dir);
  check_readme_criteria(r);
}

TEST_CASE("tiny-dsv32 golden replay meets the README criteria with fp32 FP8 block dots") {
  // cpu_backend::fp8_block_dot = fp32 (ascending-k fp32 block sums instead of exact ones): the
  // same criteria; and, the mode being batch-invariant too, a chunked prefill gives the same bits.
  dsa::cpu_backend be{2};
  be.fp8_block_dot = dsa::fp8_dot::fp32;
  const auto r = dsa_validate::run_model_case(be, tiny_dir);
  check_readme_criteria(r);
  const auto chunked = dsa_validate::run_model_case(be, tiny_dir, 16);
  REQUIRE(chunked.result.outputs.size() == r.result.outputs.size());
  for (std::size_t i = 0; i < r.result.outputs.size(); ++i) {
    CAPTURE(r.result.outputs[i].name);
    CHECK(chunked.result.outputs[i].bytes == r.result.outputs[i].bytes);
  }
}

TEST_CASE("a prefill in chunks replays to the same outputs as one piece") {
  // dsa_validate prefills in balanced chunks of at most max_chunk tokens (4096 by default), so
  // that a long golden prompt does not cost prompt^2 floats of index scores at once; the traces
  // of the chunks are reassembled into the expected file's shapes.
  const auto one = dsa_validate::run_model_case(dsa::cpu_backend{2}, tiny_dir);
  const auto chunked = dsa_validate::run_model_case(dsa::cpu_backend{2}, tiny_dir, 16);  // 80 tokens: 5 chunks
  CHECK(chunked.result.pass());
  REQUIRE(chunked.result.outputs.size() == one.result.outputs.size());
  for (std::size_t i = 0; i < one.result.outputs.size(); ++i) {
    const auto& a = one.result.outputs[i];
    const auto& b = chunked.result.outputs[i];
    CAPTURE(a.name);
    CHECK(b.name == a.name);
    CHECK(b.shape == a.shape);
    CHECK(b.bytes == a.bytes);
  }
  // 80 tokens in chunks of at most 79: balanced as 40 + 40, never 79 + 1 (a one-token chunk would
  // take the decode path).
  const auto balanced = dsa_validate::run_model_case(dsa::cpu_backend{2}, tiny_dir, 79);
  CHECK(balanced.cosines == one.cosines);
}

TEST_CASE("golden token counts beyond max_position_embeddings are an input_error before anything is sized by them") {
  // Issue 14: a 480 KB expected file (a 60K-token prompt) asked for 14 GB in one prefill; a long
  // `generated` ran for hours before the missing logits of its steps were noticed.
  const std::string expected = "; expected a prompt of at least 1 token and at most max_position_embeddings = 8192 "
                               "tokens in all (config.json)";
  {
    crafted_golden g(8193, 0, 1);
    CHECK_THROWS_WITH_AS(dsa_validate::run_model_case(dsa::cpu_backend{2}, g.dir),
                         doctest::Contains(
                             ("expected.safetensors': prompt + generated = 8193 + 0 tokens" + expected).c_str()),
                         dsa_validate::input_error);
  }
  {
    crafted_golden g(4, 8189, 1);
    CHECK_THROWS_WITH_AS(dsa_validate::run_model_case(dsa::cpu_backend{2}, g.dir),
                         doctest::Contains(("prompt + generated = 4 + 8189 tokens" + expected).c_str()),
                         dsa_validate::input_error);
  }
  {
    crafted_golden g(0, 3, 4);
    CHECK_THROWS_WITH_AS(dsa_validate::run_model_case(dsa::cpu_backend{2}, g.dir),
                         doctest::Contains("prompt + generated = 0 + 3 tokens"), dsa_validate::input_error);
  }
  {
    // Within the context, but the logits of steps 3 .. 100 are missing: refused before any step.
    crafted_golden g(4, 100, 3);
    CHECK_THROWS_WITH_AS(dsa_validate::run_model_case(dsa::cpu_backend{2}, g.dir),
                         doctest::Contains("expected.safetensors': step3.logits = missing; expected [1, 512] (one per "
                                           "step: the prompt's and each of the 100 generated tokens')"),
                         dsa_validate::input_error);
  }
}

TEST_CASE("a golden file with batch 2 replays each row as its own sequence and dumps in the same layout") {
  const auto one = dsa_validate::run_model_case(dsa::cpu_backend{2}, tiny_dir);
  SUBCASE("the golden row twice: both rows pass, outputs are the batch-1 outputs stacked") {
    batched_golden g([](const std::string&, std::vector<std::byte>&) {});
    const auto two = dsa_validate::run_model_case(dsa::cpu_backend{2}, g.dir);
    CHECK(two.batch == 2);
    CHECK(two.result.pass());
    REQUIRE(two.cosines.size() == 2 * one.cosines.size());
    REQUIRE(find_comparison(two, "step0.logits[1]", "1 - cosine") != nullptr);
    REQUIRE(find_comparison(two, "step*.logits[0]", "argmax mismatches") != nullptr);
    REQUIRE(find_comparison(two, "step0.layer2.topk[1]", "1 - mean set agreement") != nullptr);
    CHECK(find_comparison(two, "step0.logits", "1 - cosine") == nullptr);
    REQUIRE(two.result.outputs.size() == one.result.outputs.size());
    for (std::size_t i = 0; i < one.result.outputs.size(); ++i) {
      const auto& a = one.result.outputs[i];
      const auto& b = two.result.outputs[i];
      CAPTURE(a.name);
      CHECK(b.name == a.name);
      REQUIRE(b.shape.size() == a.shape.size());
      CHECK(b.shape[0] == 2);
      REQUIRE(b.bytes.size() == 2 * a.bytes.size());
      CHECK(std::equal(a.bytes.begin(), a.bytes.end(), b.bytes.begin()));
      CHECK(std::equal(a.bytes.begin(), a.bytes.end(), b.bytes.begin() + static_cast<std::ptrdiff_t>(a.bytes.size())));
    }
  }
  SUBCASE("row 1's own prompt is replayed: changing it fails row 1 only") {
    batched_golden g([](const std::string& name, std::vector<std::byte>& b) {
      if (name != "prompt") return;
      std::int64_t* row1 = reinterpret_cast<std::int64_t*>(b.data()) + 80;
      for (int i = 0; i < 80; ++i) row1[i] = (row1[i] * 7 + 3) % 512;  // another prompt, same length
    });
    const auto two = dsa_validate::run_model_case(dsa::cpu_backend{2}, g.dir);
    CHECK_FALSE(two.result.pass());
    for (const auto& c : two.result.comparisons) {
      CAPTURE(c.tensor);
      if (c.tensor.find("[0]") != std::string::npos) CHECK(c.pass);
    }
    const auto* row1 = find_comparison(two, "step0.layer0.topk[1]", "1 - mean set agreement");
    REQUIRE(row1 != nullptr);
    CHECK_FALSE(row1->pass);
  }
  SUBCASE("a wrong expected logit row fails that row's step only") {
    batched_golden g([](const std::string& name, std::vector<std::byte>& b) {
      if (name != "step3.logits") return;
      float* row1 = reinterpret_cast<float*>(b.data()) + 512;
      for (int i = 0; i < 512; ++i) row1[i] = -row1[i];
    });
    const auto two = dsa_validate::run_model_case(dsa::cpu_backend{2}, g.dir);
    CHECK_FALSE(two.result.pass());
    CHECK(find_comparison(two, "step3.logits[0]", "1 - cosine")->pass);
    CHECK_FALSE(find_comparison(two, "step3.logits[1]", "1 - cosine")->pass);
    CHECK(find_comparison(two, "step4.logits[1]", "1 - cosine")->pass);
  }
  SUBCASE("prompt and generated with different batch sizes are an input_error") {
    batched_golden g([](const std::string&, std::vector<std::byte>&) {});
    // Rewrite with generated of batch 1 only.
    const auto src = dsa::safetensors_file::open(g.dir / "expected.safetensors");
    std::vector<std::vector<std::byte>> keep;
    std::vector<dsa::safetensors_entry> e;
    for (const dsa::tensor_info& t : src.tensors()) {
      const auto bytes = src.bytes(t);
      auto& b = keep.emplace_back(bytes.begin(), bytes.end());
      std::vector<dsa::index_t> shape = t.shape;
      if (t.name == "generated") {
        b.resize(b.size() / 2);
        shape[0] = 1;
      }
      e.push_back({t.name, t.type, shape, std::span<const std::byte>(b)});
    }
    dsa::write_safetensors(g.dir / "expected.safetensors", e);
    CHECK_THROWS_WITH_AS(dsa_validate::run_model_case(dsa::cpu_backend{2}, g.dir),
                         doctest::Contains("prompt [2, 80] and generated [1, 8]; expected [B, T] and [B, S] with the same B >= 1"),
                         dsa_validate::input_error);
  }
}
