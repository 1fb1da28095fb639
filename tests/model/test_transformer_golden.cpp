// The golden replay of the tiny DeepSeek-V3.2 model (tests/data/tiny-dsv32, produced by DeepSeek's
// own reference code): the acceptance criteria of ../shared/golden/README.md.
#include <doctest/doctest.h>

#include <unistd.h>

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

}  // namespace

TEST_CASE("tiny-dsv32 golden replay meets the README criteria") {
  const auto r = dsa_validate::run_model_case(dsa::cpu_backend{2}, tiny_dir);
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
                             ("expected.safetensors: prompt + generated = 8193 + 0 tokens" + expected).c_str()),
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
                         doctest::Contains("expected.safetensors: step3.logits = missing; expected [1, 512] (one per "
                                           "step: the prompt's and each of the 100 generated tokens')"),
                         dsa_validate::input_error);
  }
}
