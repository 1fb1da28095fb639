// dsa::moe_route: front-end validation and CPU results against the sort-based oracle.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cpu/moe_routing.hpp"
#include "dsa/ops/moe_routing.hpp"
#include "support/moe_reference.hpp"
#include "support/random.hpp"

namespace {

struct routed {
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
};

routed route(const dsa::cpu_backend& be, const std::vector<float>& logits, int tokens, int E,
             const std::vector<float>& bias, const dsa::moe_routing_config& cfg) {
  routed r;
  r.ids.assign(static_cast<std::size_t>(tokens) * cfg.top_k, -7);
  r.weights.assign(r.ids.size(), -7.0f);
  dsa::tensor_view<const float, 1> bias_view;
  if (!bias.empty()) bias_view = dsa::make_view(bias.data(), {E});
  dsa::moe_route(be, dsa::make_view(logits.data(), {tokens, E}), bias_view,
                 dsa::make_view(r.ids.data(), {tokens, cfg.top_k}), dsa::make_view(r.weights.data(), {tokens, cfg.top_k}),
                 cfg);
  return r;
}

dsa_test::moe_reference_config to_reference(const dsa::moe_routing_config& cfg) {
  dsa_test::moe_reference_config r;
  r.top_k = static_cast<int>(cfg.top_k);
  r.n_group = static_cast<int>(cfg.n_group);
  r.topk_group = static_cast<int>(cfg.topk_group);
  r.softmax = cfg.scoring == dsa::moe_scoring::softmax;
  r.norm_topk_prob = cfg.norm_topk_prob;
  r.routed_scaling_factor = cfg.routed_scaling_factor;
  return r;
}

// Routes with the library and the oracle and requires identical ids and weights within a few
// fp32 roundings (the library normalises in fp32, the oracle in double).
void check_against_reference(const std::vector<float>& logits, int tokens, int E, const std::vector<float>& bias,
                             const dsa::moe_routing_config& cfg) {
  const routed got = route(dsa::cpu, logits, tokens, E, bias, cfg);
  const auto want = dsa_test::moe_reference_route(logits, tokens, E, bias, to_reference(cfg));
  int id_mismatches = 0;
  double max_rel = 0.0;
  for (std::size_t i = 0; i < got.ids.size(); ++i) {
    id_mismatches += got.ids[i] != want.ids[i];
    max_rel = std::max(max_rel, std::abs(got.weights[i] - want.weights[i]) / std::abs(want.weights[i]));
  }
  CHECK(id_mismatches == 0);
  CHECK(max_rel < 1e-6);
}

std::vector<float> logit_of(const std::vector<double>& p) {
  std::vector<float> x;
  for (double v : p) x.push_back(static_cast<float>(std::log(v / (1.0 - v))));
  return x;
}

dsa::moe_routing_config v32_config() {
  dsa::moe_routing_config cfg;
  cfg.top_k = 8;
  cfg.n_group = 8;
  cfg.topk_group = 4;
  cfg.scoring = dsa::moe_scoring::sigmoid;
  cfg.norm_topk_prob = true;
  cfg.routed_scaling_factor = 2.5f;
  return cfg;
}

dsa::moe_routing_config tiny_config() {
  dsa::moe_routing_config cfg;
  cfg.top_k = 4;
  cfg.n_group = 4;
  cfg.topk_group = 2;
  cfg.routed_scaling_factor = 2.5f;
  return cfg;
}

}  // namespace

TEST_CASE("moe_route: DeepSeek-V3.2 config (E = 256, 8 groups, top-4 groups, top-8) matches the oracle") {
  const int tokens = 384, E = 256;
  const auto logits = dsa_test::normal(static_cast<std::size_t>(tokens) * E, 101, 1.5f);
  const auto bias = dsa_test::uniform(E, 102, -0.1f, 0.1f);
  const auto cfg = v32_config();
  check_against_reference(logits, tokens, E, bias, cfg);

  // The data exercises both the bias and the group limit: without them the oracle routes
  // some tokens differently (otherwise the comparison above would not test them).
  const auto with = dsa_test::moe_reference_route(logits, tokens, E, bias, to_reference(cfg));
  auto no_groups = to_reference(cfg);
  no_groups.n_group = 1;
  no_groups.topk_group = 1;
  const auto ungrouped = dsa_test::moe_reference_route(logits, tokens, E, bias, no_groups);
  const auto unbiased = dsa_test::moe_reference_route(logits, tokens, E, std::vector<float>(E, 0.0f), to_reference(cfg));
  CHECK(with.ids != ungrouped.ids);
  CHECK(with.ids != unbiased.ids);

  // Structure: ascending distinct ids, drawn from at most topk_group groups.
  const routed got = route(dsa::cpu, logits, tokens, E, bias, cfg);
  for (int t = 0; t < tokens; ++t) {
    std::set<int> groups;
    for (int i = 0; i < 8; ++i) {
      const int id = got.ids[t * 8 + i];
      REQUIRE(id >= 0);
      REQUIRE(id < E);
      if (i > 0) REQUIRE(id > got.ids[t * 8 + i - 1]);
      groups.insert(id / 32);
    }
    REQUIRE(groups.size() <= 4);
  }
}

TEST_CASE("moe_route: tiny golden model config (E = 16, 4 groups, top-2 groups, top-4) matches the oracle") {
  const int tokens = 500, E = 16;
  const auto logits = dsa_test::normal(static_cast<std::size_t>(tokens) * E, 201, 1.0f);
  const auto bias = dsa_test::uniform(E, 202, -0.05f, 0.05f);
  check_against_reference(logits, tokens, E, bias, tiny_config());
  check_against_reference(logits, tokens, E, {}, tiny_config());
}

TEST_CASE("moe_route: other shapes and variants match the oracle") {
  SUBCASE("softmax scoring, no bias, group max") {
    dsa::moe_routing_config cfg;
    cfg.top_k = 6;
    cfg.n_group = 8;
    cfg.topk_group = 3;
    cfg.scoring = dsa::moe_scoring::softmax;
    const auto logits = dsa_test::normal(200 * 64, 301, 2.0f);
    cfg.norm_topk_prob = false;
    cfg.routed_scaling_factor = 16.0f;
    check_against_reference(logits, 200, 64, {}, cfg);
    cfg.norm_topk_prob = true;
    cfg.routed_scaling_factor = 1.0f;
    check_against_reference(logits, 200, 64, {}, cfg);
  }
  SUBCASE("softmax scoring with a bias (top-2 group sums)") {
    dsa::moe_routing_config cfg;
    cfg.top_k = 4;
    cfg.n_group = 4;
    cfg.topk_group = 2;
    cfg.scoring = dsa::moe_scoring::softmax;
    const auto logits = dsa_test::normal(200 * 32, 302, 2.0f);
    check_against_reference(logits, 200, 32, dsa_test::uniform(32, 303, -0.02f, 0.02f), cfg);
  }
  SUBCASE("n_group = 1 is a plain top-k, with and without bias") {
    dsa::moe_routing_config cfg;
    cfg.top_k = 6;
    const auto logits = dsa_test::normal(300 * 72, 304, 1.0f);
    check_against_reference(logits, 300, 72, dsa_test::uniform(72, 305, -0.2f, 0.2f), cfg);
    check_against_reference(logits, 300, 72, {}, cfg);
  }
  SUBCASE("top_k equal to every selectable expert") {
    dsa::moe_routing_config cfg;
    cfg.top_k = 8;
    cfg.n_group = 4;
    cfg.topk_group = 2;
    const auto logits = dsa_test::normal(100 * 16, 306, 1.0f);
    check_against_reference(logits, 100, 16, dsa_test::uniform(16, 307, -0.2f, 0.2f), cfg);
  }
  SUBCASE("sigmoid without normalisation") {
    auto cfg = v32_config();
    cfg.norm_topk_prob = false;
    const auto logits = dsa_test::normal(64 * 256, 308, 1.5f);
    check_against_reference(logits, 64, 256, dsa_test::uniform(256, 309, -0.1f, 0.1f), cfg);
  }
}

TEST_CASE("moe_route: the group limit excludes the best expert when its group loses") {
  // Expert 0 has the best score but its group {0, 1} has a poor top-2 sum (0.96), below the
  // groups {2, 3} (1.2) and {4, 5} (1.1): with two groups kept, expert 0 cannot be chosen.
  const int E = 8;
  const auto logits = logit_of({0.95, 0.01, 0.6, 0.6, 0.55, 0.55, 0.1, 0.1});
  dsa::moe_routing_config cfg;
  cfg.top_k = 2;
  cfg.n_group = 4;
  cfg.topk_group = 2;

  const routed biased = route(dsa::cpu, logits, 1, E, std::vector<float>(E, 0.0f), cfg);
  CHECK(biased.ids == std::vector<std::int32_t>{2, 3});
  CHECK(biased.weights == std::vector<float>{0.5f, 0.5f});  // s/(s+s) is exactly 1/2

  // Without a bias the group score is the group's max: group {0, 1} now wins (0.95).
  const routed unbiased = route(dsa::cpu, logits, 1, E, {}, cfg);
  CHECK(unbiased.ids == std::vector<std::int32_t>{0, 2});

  // Without group limiting the two best experts overall.
  cfg.n_group = 1;
  cfg.topk_group = 1;
  const routed plain = route(dsa::cpu, logits, 1, E, std::vector<float>(E, 0.0f), cfg);
  CHECK(plain.ids == std::vector<std::int32_t>{0, 2});
}

TEST_CASE("moe_route: the bias steers the selection, the weights come from the unbiased scores") {
  const auto logits = logit_of({0.9, 0.8, 0.7, 0.6});
  const std::vector<float> bias = {0.0f, 0.0f, 0.5f, 0.0f};  // b = {0.9, 0.8, 1.2, 0.6}
  dsa::moe_routing_config cfg;
  cfg.top_k = 2;
  cfg.routed_scaling_factor = 2.0f;
  const routed r = route(dsa::cpu, logits, 1, 4, bias, cfg);
  CHECK(r.ids == std::vector<std::int32_t>{0, 2});
  const float s0 = dsa::moe_sigmoid(logits[0]), s2 = dsa::moe_sigmoid(logits[2]);
  CHECK(r.weights[0] == doctest::Approx(0.9 / 1.6 * 2.0).epsilon(1e-6));
  CHECK(r.weights[1] == doctest::Approx(0.7 / 1.6 * 2.0).epsilon(1e-6));
  // Bit-exact: fl(fl(s / fl(s0 + s2)) * 2).
  CHECK(r.weights[0] == (s0 / (s0 + s2)) * 2.0f);
  CHECK(r.weights[1] == (s2 / (s0 + s2)) * 2.0f);
}

TEST_CASE("moe_route: ties go to the smaller index, for groups and for experts") {
  SUBCASE("all equal: the first groups, the first experts") {
    dsa::moe_routing_config cfg;
    cfg.top_k = 3;
    cfg.n_group = 4;
    cfg.topk_group = 2;
    const routed r = route(dsa::cpu, std::vector<float>(8, 0.25f), 1, 8, std::vector<float>(8, 0.0f), cfg);
    CHECK(r.ids == std::vector<std::int32_t>{0, 1, 2});
    for (float w : r.weights) CHECK(w == doctest::Approx(1.0 / 3.0).epsilon(1e-6));
    const routed nb = route(dsa::cpu, std::vector<float>(8, 0.25f), 1, 8, {}, cfg);
    CHECK(nb.ids == std::vector<std::int32_t>{0, 1, 2});
  }
  SUBCASE("equal group sums made of different members") {
    // Groups of 4; the top-2 sums of groups 1 and 3 are both 1.5 (b = 1.0 + 0.5 and
    // 0.75 + 0.75), group 0 and 2 lower. One group kept: group 1, the smaller index.
    std::vector<float> bias(16, -1.0f);
    bias[5] = 1.0f - 0.5f;
    bias[6] = 0.5f - 0.5f;
    bias[13] = 0.75f - 0.5f;
    bias[14] = 0.75f - 0.5f;
    dsa::moe_routing_config cfg;
    cfg.top_k = 2;
    cfg.n_group = 4;
    cfg.topk_group = 1;
    const routed r = route(dsa::cpu, std::vector<float>(16, 0.0f), 1, 16, bias, cfg);  // s = 0.5 exactly
    CHECK(r.ids == std::vector<std::int32_t>{5, 6});
  }
  SUBCASE("equal expert scores across groups") {
    std::vector<float> logits(8, -1.0f);
    logits[3] = 2.0f;
    logits[5] = 2.0f;
    dsa::moe_routing_config cfg;
    cfg.top_k = 1;
    CHECK(route(dsa::cpu, logits, 1, 8, {}, cfg).ids == std::vector<std::int32_t>{3});
    cfg.n_group = 4;
    cfg.topk_group = 2;
    CHECK(route(dsa::cpu, logits, 1, 8, {}, cfg).ids == std::vector<std::int32_t>{3});
  }
}

TEST_CASE("moe_route: normalised weights sum to routed_scaling_factor") {
  const int tokens = 256, E = 256;
  const auto logits = dsa_test::normal(static_cast<std::size_t>(tokens) * E, 401, 3.0f);
  const routed r = route(dsa::cpu, logits, tokens, E, dsa_test::uniform(E, 402, -0.1f, 0.1f), v32_config());
  for (int t = 0; t < tokens; ++t) {
    double sum = 0.0;
    for (int i = 0; i < 8; ++i) {
      REQUIRE(r.weights[t * 8 + i] > 0.0f);
      sum += r.weights[t * 8 + i];
    }
    REQUIRE(sum == doctest::Approx(2.5).epsilon(4e-7 * 8));
  }
}

TEST_CASE("moe_route: extreme and NaN logits never crash and keep the ids valid") {
  dsa::moe_routing_config cfg;
  cfg.top_k = 2;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();

  SUBCASE("a NaN score is not selected while numbers remain") {
    const std::vector<float> logits = {nan, -3.0f, 1.0f, nan, 0.5f, nan};
    const routed r = route(dsa::cpu, logits, 1, 6, {}, cfg);
    CHECK(r.ids == std::vector<std::int32_t>{2, 4});
    CHECK(std::isfinite(r.weights[0]));
    CHECK(std::isfinite(r.weights[1]));
    // Same inside group scoring: the NaN-holding group {0, 1} ranks last.
    cfg.n_group = 3;
    cfg.topk_group = 1;
    const routed g = route(dsa::cpu, {nan, 9.0f, 1.0f, 0.0f, 0.2f, 0.2f}, 1, 6, std::vector<float>(6, 0.0f), cfg);
    CHECK(g.ids == std::vector<std::int32_t>{2, 3});
  }
  SUBCASE("an all-NaN token still gets valid distinct ids, and NaN weights that show the bad input") {
    const routed r = route(dsa::cpu, std::vector<float>(6, nan), 1, 6, {}, cfg);
    CHECK(r.ids == std::vector<std::int32_t>{0, 1});
    CHECK(std::isnan(r.weights[0]));
    CHECK(std::isnan(r.weights[1]));
  }
  SUBCASE("softmax: one NaN logit poisons the row as in torch, ids stay valid") {
    cfg.scoring = dsa::moe_scoring::softmax;
    const routed r = route(dsa::cpu, {0.0f, 1.0f, nan, 2.0f}, 1, 4, {}, cfg);
    CHECK(r.ids == std::vector<std::int32_t>{0, 1});
    CHECK(std::isnan(r.weights[0]));
  }
  SUBCASE("infinite and huge logits") {
    const routed r = route(dsa::cpu, {-inf, inf, -1e30f, 1e30f, 0.0f}, 1, 5, {}, cfg);
    CHECK(r.ids == std::vector<std::int32_t>{1, 3});  // sigmoid = 1 for both: tie to the smaller id
    CHECK(r.weights == std::vector<float>{0.5f, 0.5f});
  }
  SUBCASE("every selected score underflows to zero: weights 0, not 0/0") {
    const routed r = route(dsa::cpu, {-200.0f, -300.0f, -400.0f}, 1, 3, {}, cfg);
    CHECK(r.ids == std::vector<std::int32_t>{0, 1});
    CHECK(r.weights == std::vector<float>{0.0f, 0.0f});
  }
}

TEST_CASE("moe_route: bit-identical for every thread count") {
  const int tokens = 1000, E = 256;
  const auto logits = dsa_test::normal(static_cast<std::size_t>(tokens) * E, 501, 1.5f);
  const auto bias = dsa_test::uniform(E, 502, -0.1f, 0.1f);
  const routed one = route(dsa::cpu_backend{1}, logits, tokens, E, bias, v32_config());
  for (int threads : {2, 3, 8, 0}) {
    CAPTURE(threads);
    const routed r = route(dsa::cpu_backend{threads}, logits, tokens, E, bias, v32_config());
    CHECK(r.ids == one.ids);
    CHECK(std::memcmp(r.weights.data(), one.weights.data(), r.weights.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("moe_route: strided views give the same result as contiguous ones") {
  const int tokens = 40, E = 256, ld = 300, ld_out = 11;
  const auto dense = dsa_test::normal(static_cast<std::size_t>(tokens) * E, 601, 1.5f);
  const auto bias = dsa_test::uniform(E, 602, -0.1f, 0.1f);
  std::vector<float> padded(static_cast<std::size_t>(tokens) * ld, 1e6f);
  for (int t = 0; t < tokens; ++t) std::memcpy(&padded[t * ld], &dense[t * E], E * sizeof(float));
  std::vector<std::int32_t> ids(tokens * ld_out, -9);
  std::vector<float> w(tokens * ld_out, -9.0f);
  dsa::moe_route(dsa::cpu, dsa::tensor_view<const float, 2>(padded.data(), {tokens, E}, {ld, 1}),
                 dsa::make_view(bias.data(), {E}), dsa::tensor_view<std::int32_t, 2>(ids.data(), {tokens, 8}, {ld_out, 1}),
                 dsa::tensor_view<float, 2>(w.data(), {tokens, 8}, {ld_out, 1}), v32_config());
  const routed want = route(dsa::cpu, dense, tokens, E, bias, v32_config());
  for (int t = 0; t < tokens; ++t) {
    for (int i = 0; i < 8; ++i) {
      REQUIRE(ids[t * ld_out + i] == want.ids[t * 8 + i]);
      REQUIRE(w[t * ld_out + i] == want.weights[t * 8 + i]);
    }
    for (int i = 8; i < ld_out; ++i) {
      REQUIRE(ids[t * ld_out + i] == -9);  // padding untouched
      REQUIRE(w[t * ld_out + i] == -9.0f);
    }
  }
}

TEST_CASE("moe_route: zero tokens is a no-op") {
  std::vector<float> logits;
  std::vector<std::int32_t> ids;
  std::vector<float> w;
  CHECK_NOTHROW(dsa::moe_route(dsa::cpu, dsa::make_view(logits.data(), {0, 256}), {},
                               dsa::make_view(ids.data(), {0, 8}), dsa::make_view(w.data(), {0, 8}), v32_config()));
}

TEST_CASE("moe_route: bad configurations and shapes are dsa::errors naming the field and value") {
  const int tokens = 4, E = 256;
  std::vector<float> logits(tokens * E, 0.0f), bias(E, 0.0f), w(tokens * 8, 0.0f);
  std::vector<std::int32_t> ids(tokens * 8, 0);
  auto call = [&](dsa::moe_routing_config cfg, bool with_bias = true) {
    dsa::tensor_view<const float, 1> b;
    if (with_bias) b = dsa::make_view(bias.data(), {E});
    dsa::moe_route(dsa::cpu, dsa::make_view(logits.data(), {tokens, E}), b,
                   dsa::tensor_view<std::int32_t, 2>(ids.data(), {tokens, cfg.top_k}, {cfg.top_k, 1}),
                   dsa::tensor_view<float, 2>(w.data(), {tokens, cfg.top_k}, {cfg.top_k, 1}), cfg);
  };
  auto expect = [&](dsa::moe_routing_config cfg, const char* what, bool with_bias = true) {
    CAPTURE(what);
    CHECK_THROWS_WITH_AS(call(cfg, with_bias), doctest::Contains("dsa::moe_route: "), dsa::error);
    CHECK_THROWS_WITH_AS(call(cfg, with_bias), doctest::Contains(what), dsa::error);
  };
  CHECK_NOTHROW(call(v32_config()));

  auto cfg = v32_config();
  cfg.n_group = 3;
  expect(cfg, "cfg.n_group = 3; expected a divisor of the number of experts (logits.extent(1) = 256)");
  cfg.n_group = 0;
  expect(cfg, "cfg.n_group = 0; expected >= 1");
  cfg = v32_config();
  cfg.topk_group = 9;
  expect(cfg, "cfg.topk_group = 9; expected 1 <= topk_group <= n_group = 8");
  cfg.topk_group = 0;
  expect(cfg, "cfg.topk_group = 0");
  cfg = v32_config();
  cfg.topk_group = 1;
  cfg.top_k = 33;  // one group of 32 experts
  expect(cfg, "cfg.top_k = 33; expected 1 <= top_k <= topk_group * (E / n_group) = 32");
  cfg.top_k = 0;
  expect(cfg, "cfg.top_k = 0");
  cfg = v32_config();
  cfg.n_group = 256;
  cfg.topk_group = 8;
  expect(cfg, "cfg.n_group = 256; expected groups of at least 2 experts when a bias is given");
  CHECK_NOTHROW(call(cfg, false));  // without a bias the group score is a max: groups of 1 are fine
  cfg = v32_config();
  cfg.routed_scaling_factor = std::numeric_limits<float>::infinity();
  expect(cfg, "cfg.routed_scaling_factor = inf; expected a finite number");
  cfg.routed_scaling_factor = std::numeric_limits<float>::quiet_NaN();
  expect(cfg, "cfg.routed_scaling_factor = nan");
  cfg = v32_config();
  cfg.scoring = static_cast<dsa::moe_scoring>(7);
  expect(cfg, "cfg.scoring = 7");

  const auto good = v32_config();
  const auto L = dsa::make_view(logits.data(), {tokens, E});
  const auto B = dsa::make_view(bias.data(), {E});
  const auto I = dsa::make_view(ids.data(), {tokens, 8});
  const auto W = dsa::make_view(w.data(), {tokens, 8});
  CHECK_THROWS_WITH_AS(dsa::moe_route(dsa::cpu, L, dsa::make_view(bias.data(), {E - 1}), I, W, good),
                       doctest::Contains("dsa::moe_route: bias.extent(0) = 255; expected 256"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::moe_route(dsa::cpu, L, B, dsa::make_view(ids.data(), {tokens - 1, 8}), W, good),
                       doctest::Contains("dsa::moe_route: expert_ids.extent(0) = 3; expected 4"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::moe_route(dsa::cpu, L, B, dsa::make_view(ids.data(), {tokens, 4}), W, good),
                       doctest::Contains("dsa::moe_route: expert_ids.extent(1) = 4; expected 8 (cfg.top_k)"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::moe_route(dsa::cpu, L, B, I, dsa::make_view(w.data(), {tokens, 7}), good),
                       doctest::Contains("dsa::moe_route: weights.extent(1) = 7; expected 8"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::moe_route(dsa::cpu, L, B, I, dsa::make_view(w.data(), {tokens + 1, 8}), good),
                       doctest::Contains("dsa::moe_route: weights.extent(0) = 5; expected 4"), dsa::error);
  CHECK_THROWS_WITH_AS(
      dsa::moe_route(dsa::cpu, dsa::tensor_view<const float, 2>(logits.data(), {tokens, E / 2}, {E, 2}), {}, I, W, good),
      doctest::Contains("dsa::moe_route: logits.stride(1) = 2; expected 1"), dsa::error);
  CHECK_THROWS_WITH_AS(
      dsa::moe_route(dsa::cpu, L, dsa::tensor_view<const float, 1>(bias.data(), {E}, {2}), I, W, good),
      doctest::Contains("dsa::moe_route: bias.stride(0) = 2; expected 1"), dsa::error);
  CHECK_THROWS_WITH_AS(
      dsa::moe_route(dsa::cpu, dsa::tensor_view<const float, 2>(nullptr, {tokens, E}), B, I, W, good),
      doctest::Contains("dsa::moe_route: logits.data = null; expected a non-null pointer"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::moe_route(dsa::cpu, L, dsa::tensor_view<const float, 1>(nullptr, {E}), I, W, good),
                       doctest::Contains("dsa::moe_route: bias.data = null"), dsa::error);
  CHECK_THROWS_WITH_AS(
      dsa::moe_route(dsa::cpu, L, B, dsa::tensor_view<std::int32_t, 2>(nullptr, {tokens, 8}), W, good),
      doctest::Contains("dsa::moe_route: expert_ids.data = null"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::moe_route(dsa::cpu, dsa::make_view(logits.data(), {tokens, 0}), {}, I, W, good),
                       doctest::Contains("dsa::moe_route: logits.extent(1) = 0; expected >= 1"), dsa::error);
  CHECK_THROWS_WITH_AS(
      dsa::moe_route(dsa::cpu, L, B, dsa::tensor_view<std::int32_t, 2>(ids.data(), {tokens, 8}, {0, 1}), W, good),
      doctest::Contains("dsa::moe_route: expert_ids.stride(0) = 0; expected >= cfg.top_k"), dsa::error);
  CHECK_THROWS_WITH_AS(
      dsa::moe_route(dsa::cpu, L, B, I, dsa::tensor_view<float, 2>(w.data(), {tokens, 8}, {4, 1}), good),
      doctest::Contains("dsa::moe_route: weights.stride(0) = 4"), dsa::error);
  CHECK_THROWS_WITH_AS(
      dsa::moe_route(dsa::cpu, dsa::tensor_view<const float, 2>(logits.data(), {-1, E}), B, I, W, good),
      doctest::Contains("dsa::moe_route: logits.shape = [-1, 256]; expected non-negative extents"), dsa::error);
}
