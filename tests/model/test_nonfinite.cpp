// Finite weights that overflow at run time (issue 33, class 1): the NaN or inf they produce
// reaches the outputs that depend on it, and forward() says where the values first stopped being
// finite (dsa/model/nonfinite.hpp) instead of returning plausible logits.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "dsa/model/transformer.hpp"
#include "support/checkpoint_edit.hpp"

namespace {

using dsa::index_t;
using dsa::model::nonfinite_stage;

std::vector<std::byte> bf16_bytes(float v) {
  const dsa::bf16 b(v);
  std::vector<std::byte> out(2);
  std::memcpy(out.data(), &b.bits, 2);
  return out;
}
std::vector<std::byte> f32_bytes(float v) {
  std::vector<std::byte> out(4);
  std::memcpy(out.data(), &v, 4);
  return out;
}

const std::vector<std::int32_t> prompt = {5, 17, 3, 99, 42, 7, 250, 1, 64, 300, 12, 8};

struct run_result {
  std::vector<float> logits;                                 // of the prefill (propagated)
  std::optional<dsa::model::nonfinite_site> site;            // the sequence's first site
  std::string error;                                         // forward()'s nonfinite_error, if any
  std::vector<std::vector<std::int32_t>> topk;               // layer 0's selection per token
};

// Loads `dir` and prefills `prompt` twice: once with the default policy (the error, if any), once
// propagating (the logits, the site and layer 0's top-k rows).
run_result run(const std::filesystem::path& dir, dsa::fp8_dot mode) {
  dsa::cpu_backend be{2};
  be.fp8_block_dot = mode;
  auto m = dsa::model::transformer<dsa::cpu_backend>::load(dir, be);
  run_result r;
  {
    auto seq = m.new_sequence(64);
    try {
      m.forward(seq, prompt);
    } catch (const dsa::model::nonfinite_error& e) {
      r.error = e.what();
      CHECK(seq.first_nonfinite() == e.site());
      CHECK(seq.length() == static_cast<index_t>(prompt.size()));  // the tokens are in the caches
    }
  }
  auto seq = m.new_sequence(64);
  dsa::model::forward_options opt;
  opt.on_nonfinite = dsa::model::nonfinite_policy::propagate;
  opt.observer = [&](const dsa::model::layer_trace& t) {
    if (t.layer != 0) return;
    for (index_t i = 0; i < t.topk.extent(0); ++i) {
      r.topk.emplace_back(t.topk.row(i), t.topk.row(i) + t.topk.extent(1));
    }
  };
  r.logits = m.forward(seq, prompt, opt);
  r.site = seq.first_nonfinite();
  return r;
}

bool all_finite(const std::vector<float>& v) {
  for (const float x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("the intact checkpoint has no non-finite site and finite logits") {
  const run_result r = run(dsa_test::tiny_dir, dsa::fp8_dot::exact);
  CHECK(r.error.empty());
  CHECK(!r.site);
  CHECK(all_finite(r.logits));
}

TEST_CASE("indexer weights_proj at +-3e38 (finite bf16): scores go NaN, top-k still selects, the site is reported") {
  // Each head's weight alternates sign at the largest bf16 magnitudes: w · ReLU(q·k) is +-inf per
  // head and their sum NaN. Top-k ranks NaN first (torch.topk's order), so every token still
  // attends to min(index_topk, its positions) keys: the attention does not vanish.
  for (const dsa::fp8_dot mode : {dsa::fp8_dot::exact, dsa::fp8_dot::fp32}) {
    CAPTURE(static_cast<int>(mode));
    dsa_test::temp_dir dir("dsa_test_nonfinite");
    dsa_test::checkpoint_tensors t;
    const std::string name = "model.layers.0.self_attn.indexer.weights_proj.weight";
    const dsa::safetensors_entry& e = *t.find(name);
    std::vector<std::byte> huge;
    for (index_t i = 0; i < e.shape[0] * e.shape[1]; ++i) {
      const auto b = bf16_bytes(((i / e.shape[1]) % 2 ? -1.0f : 1.0f) * 3.0e38f);
      huge.insert(huge.end(), b.begin(), b.end());
    }
    t.patch(name, 0, huge);
    dsa_test::write_checkpoint(dir.path, t);
    const run_result r = run(dir.path, mode);
    REQUIRE(r.site);
    CHECK(r.site->layer == 0);
    CHECK(r.site->stage == nonfinite_stage::index_scores);
    CHECK(r.site->position == 0);
    // Every token selected all of its causal positions (index_topk 32 > 12): nothing vanished.
    REQUIRE(r.topk.size() == prompt.size());
    for (std::size_t i = 0; i < r.topk.size(); ++i) {
      for (std::size_t j = 0; j < r.topk[i].size(); ++j) {
        CHECK(r.topk[i][j] == (j <= i ? static_cast<std::int32_t>(j) : -1));
      }
    }
  }
}

TEST_CASE("weight_scale_inv of 3e38 in q_b_proj: the attention output goes non-finite and forward() says where") {
  for (const dsa::fp8_dot mode : {dsa::fp8_dot::exact, dsa::fp8_dot::fp32}) {
    CAPTURE(static_cast<int>(mode));
    dsa_test::temp_dir dir("dsa_test_nonfinite");
    dsa_test::checkpoint_tensors t;
    t.fill("model.layers.1.self_attn.q_b_proj.weight_scale_inv", f32_bytes(3.0e38f));
    dsa_test::write_checkpoint(dir.path, t);
    const run_result r = run(dir.path, mode);
    REQUIRE(r.site);
    CHECK(r.site->layer == 1);
    CHECK(r.site->stage == nonfinite_stage::attention_output);
    CHECK(r.site->position == 0);
    CHECK(!all_finite(r.logits));  // propagated, not replaced by plausible numbers
    CHECK(r.error.find("dsa::model::transformer::forward: logits = ") == 0);
    CHECK(r.error.find("; expected finite logits; the sequence's values first stopped being finite in layer 1's "
                       "attention output at position 0") != std::string::npos);
  }
}

TEST_CASE("a huge indexer k-norm weight: the keys overflow, the index scores are reported, top-k still selects") {
  dsa_test::temp_dir dir("dsa_test_nonfinite");
  dsa_test::checkpoint_tensors t;
  t.fill("model.layers.2.self_attn.indexer.k_norm.weight", f32_bytes(3.0e38f));
  dsa_test::write_checkpoint(dir.path, t);
  const run_result r = run(dir.path, dsa::fp8_dot::exact);
  REQUIRE(r.site);
  CHECK(r.site->layer == 2);
  CHECK(r.site->stage == nonfinite_stage::index_scores);
}

TEST_CASE("a decode step after a non-finite prefill keeps the first site; reset() clears it") {
  dsa_test::temp_dir dir("dsa_test_nonfinite");
  dsa_test::checkpoint_tensors t;
  t.fill("model.layers.1.self_attn.q_b_proj.weight_scale_inv", f32_bytes(3.0e38f));
  dsa_test::write_checkpoint(dir.path, t);
  auto m = dsa::model::transformer<dsa::cpu_backend>::load(dir.path, dsa::cpu_backend{1});
  auto seq = m.new_sequence(64);
  dsa::model::forward_options opt;
  opt.on_nonfinite = dsa::model::nonfinite_policy::propagate;
  m.forward(seq, prompt, opt);
  const auto first = seq.first_nonfinite();
  REQUIRE(first);
  const std::int32_t next = 3;
  CHECK_THROWS_AS(m.forward(seq, std::span<const std::int32_t>(&next, 1)), dsa::model::nonfinite_error);
  CHECK(seq.first_nonfinite() == first);
  seq.reset();
  CHECK(!seq.first_nonfinite());
}

TEST_CASE("nonfinite_site keys order sites as they are computed and round-trip") {
  using dsa::model::detail::decode;
  using dsa::model::detail::encode;
  CHECK(encode(0, nonfinite_stage::ffn_output, 4000) < encode(1, nonfinite_stage::index_scores, 0));
  CHECK(encode(3, nonfinite_stage::index_scores, 9) < encode(3, nonfinite_stage::attention_output, 0));
  CHECK(encode(3, nonfinite_stage::residual_stream, 9) < encode(3, nonfinite_stage::ffn_output, 0));
  CHECK(encode(3, nonfinite_stage::ffn_output, 9) < encode(3, nonfinite_stage::logits, 0));
  const dsa::model::nonfinite_site s = decode(encode(1023, nonfinite_stage::residual_stream, 65535), 100);
  CHECK(s == dsa::model::nonfinite_site{1023, nonfinite_stage::residual_stream, 100 + 65535});
  CHECK(s.to_string() == "layer 1023's residual stream at position 65635");
}
