// The per-token routing numerics as a CUDA kernel would call them: raw pointers, caller scratch.
// Mirrors: moe_routing_kernel.cuh moe_route_kernel (element-wise scores over the lanes, then
// moe_route_select on lane 0).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "dsa/numerics/moe_routing.hpp"
#include "support/moe_reference.hpp"
#include "support/random.hpp"

TEST_CASE("moe_ranks_before is a strict total order: larger first, NaN last, ties to the smaller index") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(dsa::moe_ranks_before(2.0f, 5, 1.0f, 0));
  CHECK_FALSE(dsa::moe_ranks_before(1.0f, 0, 2.0f, 5));
  CHECK(dsa::moe_ranks_before(1.0f, 3, 1.0f, 4));
  CHECK_FALSE(dsa::moe_ranks_before(1.0f, 4, 1.0f, 3));
  CHECK_FALSE(dsa::moe_ranks_before(1.0f, 4, 1.0f, 4));  // irreflexive
  CHECK(dsa::moe_ranks_before(-inf, 9, nan, 0));
  CHECK_FALSE(dsa::moe_ranks_before(nan, 0, -inf, 9));
  CHECK(dsa::moe_ranks_before(nan, 1, nan, 2));
  CHECK_FALSE(dsa::moe_ranks_before(nan, 2, nan, 1));
  CHECK(dsa::moe_ranks_before(-0.0f, 1, 0.0f, 2));  // -0 == +0: index decides
  CHECK(dsa::moe_ranks_before(0.0f, 1, -0.0f, 2));
  CHECK(dsa::moe_ranks_before(inf, 7, 3.0e38f, 0));
}

TEST_CASE("moe_sigmoid stays in [0, 1] for every input and is exact where it can be") {
  CHECK(dsa::moe_sigmoid(0.0f) == 0.5f);
  CHECK(dsa::moe_sigmoid(std::numeric_limits<float>::infinity()) == 1.0f);
  CHECK(dsa::moe_sigmoid(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(dsa::moe_sigmoid(-1000.0f) == 0.0f);
  CHECK(dsa::moe_sigmoid(1000.0f) == 1.0f);
  CHECK(std::isnan(dsa::moe_sigmoid(std::numeric_limits<float>::quiet_NaN())));
  for (float x = -20.0f; x <= 20.0f; x += 0.37f) {
    const double want = 1.0 / (1.0 + std::exp(-static_cast<double>(x)));
    REQUIRE(std::abs(dsa::moe_sigmoid(x) - want) <= 4e-7 * want);
  }
}

TEST_CASE("moe_route_token uses exactly its scratch and writes exactly top_k outputs") {
  const int E = 256;
  dsa::moe_routing_config cfg;
  cfg.top_k = 8;
  cfg.n_group = 8;
  cfg.topk_group = 4;
  cfg.routed_scaling_factor = 2.5f;
  CHECK(dsa::moe_route_scratch_size(E, cfg.n_group) == E + 8);

  const auto logits = dsa_test::normal(E, 11, 1.5f);
  const auto bias = dsa_test::uniform(E, 12, -0.1f, 0.1f);
  // Heap blocks of exactly the documented sizes: an overrun is an ASan error.
  auto scratch = std::make_unique<float[]>(static_cast<std::size_t>(dsa::moe_route_scratch_size(E, cfg.n_group)));
  std::vector<std::int32_t> ids(10, -5);
  std::vector<float> w(10, -5.0f);
  dsa::moe_route_token(logits.data(), bias.data(), E, cfg, scratch.get(), ids.data(), w.data());
  CHECK(ids[8] == -5);
  CHECK(ids[9] == -5);
  CHECK(w[8] == -5.0f);
  CHECK(w[9] == -5.0f);

  dsa_test::moe_reference_config rc;
  rc.top_k = 8;
  rc.n_group = 8;
  rc.topk_group = 4;
  rc.routed_scaling_factor = 2.5;
  const auto want = dsa_test::moe_reference_route(logits, 1, E, bias, rc);
  for (int i = 0; i < 8; ++i) {
    CHECK(ids[i] == want.ids[i]);
    CHECK(w[i] == doctest::Approx(want.weights[i]).epsilon(1e-6));
  }
}

TEST_CASE("moe_route_token: softmax scores are a distribution; the weights are its top-k mass") {
  const int E = 64;
  dsa::moe_routing_config cfg;
  cfg.top_k = 64;  // every expert: the weights are the whole softmax, ascending id
  cfg.scoring = dsa::moe_scoring::softmax;
  cfg.norm_topk_prob = false;
  const auto logits = dsa_test::normal(E, 13, 3.0f);
  std::vector<float> scratch(static_cast<std::size_t>(dsa::moe_route_scratch_size(E, 1)));
  std::vector<std::int32_t> ids(E);
  std::vector<float> w(E);
  dsa::moe_route_token(logits.data(), nullptr, E, cfg, scratch.data(), ids.data(), w.data());
  double m = -1e30, z = 0.0, total = 0.0;
  for (float x : logits) m = std::max(m, static_cast<double>(x));
  for (float x : logits) z += std::exp(x - m);
  for (int e = 0; e < E; ++e) {
    REQUIRE(ids[e] == e);
    const double want = std::exp(logits[e] - m) / z;
    REQUIRE(std::abs(w[e] - want) <= 4e-6 * want);
    total += w[e];
  }
  CHECK(total == doctest::Approx(1.0).epsilon(1e-5));
}

TEST_CASE("moe_route_token is moe_route_scores then moe_route_select, as the CUDA kernel runs them") {
  // The kernel evaluates the scores element by element over a warp's lanes (moe_sigmoid, or
  // moe_softmax_numerator and div_rn around lane 0's moe_softmax_shift and _denominator) and then
  // runs moe_route_select on one lane: replayed here in that form, the bits equal the token call.
  const int E = 256;
  for (const auto scoring : {dsa::moe_scoring::sigmoid, dsa::moe_scoring::softmax}) {
    dsa::moe_routing_config cfg;
    cfg.top_k = 8;
    cfg.n_group = 8;
    cfg.topk_group = 4;
    cfg.scoring = scoring;
    cfg.routed_scaling_factor = 2.5f;
    auto logits = dsa_test::normal(E, 21, 1.5f);
    logits[17] = std::numeric_limits<float>::quiet_NaN();
    const auto bias = dsa_test::uniform(E, 22, -0.1f, 0.1f);
    std::vector<float> scratch(static_cast<std::size_t>(dsa::moe_route_scratch_size(E, cfg.n_group)));
    std::vector<std::int32_t> ids(8), ids2(8);
    std::vector<float> w(8), w2(8);
    dsa::moe_route_token(logits.data(), bias.data(), E, cfg, scratch.data(), ids.data(), w.data());

    std::vector<float> s(E);
    if (scoring == dsa::moe_scoring::sigmoid) {
      for (int lane = 0; lane < 32; ++lane) {
        for (int e = lane; e < E; e += 32) s[static_cast<std::size_t>(e)] = dsa::moe_sigmoid(logits[static_cast<std::size_t>(e)]);
      }
    } else {
      const float shift = dsa::moe_softmax_shift(logits.data(), E);
      for (int lane = 0; lane < 32; ++lane) {
        for (int e = lane; e < E; e += 32) {
          s[static_cast<std::size_t>(e)] = dsa::moe_softmax_numerator(logits[static_cast<std::size_t>(e)], shift);
        }
      }
      const float sum = dsa::moe_softmax_denominator(s.data(), E);
      for (float& v : s) v = dsa::detail::div_rn(v, sum);
    }
    std::vector<float> group(static_cast<std::size_t>(cfg.n_group));
    dsa::moe_route_select(s.data(), bias.data(), E, cfg, group.data(), ids2.data(), w2.data());
    CHECK(ids2 == ids);
    for (std::size_t i = 0; i < w.size(); ++i) {
      CHECK(std::memcmp(&w[i], &w2[i], sizeof(float)) == 0);
    }
  }
}
