// Determinism (docs/design.md "Determinism"): the same inputs give bit-identical outputs run to run and for every
// thread count. One sweep over every public op (tests/support/op_suite.hpp) and over the whole
// forward pass of the tiny model (prefill, then decode steps).
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/model/transformer.hpp"
#include "support/op_suite.hpp"

namespace {

const std::filesystem::path tiny_dir = std::filesystem::path(DSA_TEST_DATA_DIR) / "tiny-dsv32";

bool any_nonzero(const std::vector<std::byte>& b) {
  return std::any_of(b.begin(), b.end(), [](std::byte x) { return x != std::byte{0}; });
}

void check_same(const std::vector<dsa_test::op_output>& a, const std::vector<dsa_test::op_output>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].name);
    REQUIRE(a[i].name == b[i].name);
    CHECK(a[i].bytes == b[i].bytes);
  }
}

// Logits of a prefill and two decode steps, plus every layer's top-k selection of the prefill.
struct forward_result {
  std::vector<std::vector<float>> logits;
  std::vector<std::int32_t> topk;
};

forward_result run_forward(int threads) {
  auto m = dsa::model::transformer<dsa::cpu_backend>::load(tiny_dir, dsa::cpu_backend{threads});
  auto seq = m.new_sequence(64);
  const std::vector<std::int32_t> prompt = {511, 466, 496, 272, 227, 33, 397, 303, 317, 232, 256, 309, 298, 275, 396,
                                            114, 5,   17,  42,  99,  3,  250, 7,   1,   300, 301, 302, 303, 304, 305,
                                            306, 307, 308, 309, 310, 311, 312, 313, 314, 315};
  forward_result r;
  dsa::model::forward_options opt;
  opt.observer = [&](const dsa::model::layer_trace& t) {
    for (dsa::index_t i = 0; i < t.topk.extent(0); ++i) {
      for (dsa::index_t j = 0; j < t.topk.extent(1); ++j) r.topk.push_back(t.topk(i, j));
    }
  };
  r.logits.push_back(m.forward(seq, prompt, opt));
  for (std::int32_t tok : {7, 123}) r.logits.push_back(m.forward(seq, std::span<const std::int32_t>(&tok, 1)));
  return r;
}

}  // namespace

TEST_CASE("every op: bit-identical outputs for 1, 2, 3 and 8 threads and repeated runs") {
  const auto reference = dsa_test::run_op_suite(dsa::cpu_backend{1});
  REQUIRE(reference.size() == 49);  // every output of every op in the suite
  // A suite whose outputs were left zero would compare equal trivially.
  for (const auto& o : reference) {
    CAPTURE(o.name);
    CHECK(any_nonzero(o.bytes));
  }
  for (int threads : {1, 2, 3, 8}) {
    CAPTURE(threads);
    for (int run = 0; run < 2; ++run) {
      CAPTURE(run);
      check_same(reference, dsa_test::run_op_suite(dsa::cpu_backend{threads}));
    }
  }
  // dsa::cpu (every hardware thread) as well.
  check_same(reference, dsa_test::run_op_suite(dsa::cpu));
}

TEST_CASE("forward pass: bit-identical logits and top-k for 1, 2, 3 and 8 threads and repeated runs") {
  const auto reference = run_forward(1);
  REQUIRE(reference.logits.size() == 3);
  REQUIRE(reference.topk.size() == 3u * 40u * 32u);  // 3 layers x 40 prompt tokens x index_topk
  for (const auto& l : reference.logits) {
    REQUIRE(l.size() == 512);
    CHECK(std::any_of(l.begin(), l.end(), [](float x) { return x != 0.0f; }));
  }
  for (int threads : {1, 2, 3, 8}) {
    CAPTURE(threads);
    const auto r = run_forward(threads);
    CHECK(r.topk == reference.topk);
    REQUIRE(r.logits.size() == reference.logits.size());
    for (std::size_t s = 0; s < r.logits.size(); ++s) {
      CAPTURE(s);
      // Bitwise: memcmp-equal floats, NaN included.
      CHECK(std::equal(r.logits[s].begin(), r.logits[s].end(), reference.logits[s].begin(), reference.logits[s].end(),
                       [](float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }));
    }
  }
}
