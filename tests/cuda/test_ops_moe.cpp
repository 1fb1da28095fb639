// The moe family (docs/architecture.md, "Op families"), MoE routing and the MoE combine, on the
// CUDA backend against the CPU backend.
//
// moe_route: V3.2's gate (256 experts, 8 groups, top-4 groups, top-8, sigmoid, bias, 2.5) for 4096
// tokens and the variants (no bias, no group limit, softmax, no normalisation, the tiny golden
// config, E = 1, E large enough for the one-warp and the opted-in shared-memory paths), strided
// logits, exact ties, NaN logits. The selection is the CPU's code; the scores use the device's
// expf, so the test data keeps a margin of 2^-18 (relative) at every selection boundary (the
// topk_group-th vs the next group score, the top_k-th vs the next candidate), which no ulp-level
// difference can cross: then the ids must be identical and the weights within 2^-19 relative (docs/cuda.md).
// moe_combine: bit-identical, incl. V3.2's 7168 features, the 16-byte and the element paths,
// shared expert or none, -1 rows and device-side rows outside [0, R) (contribute nothing).
// Front-end checks with device views run without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cuda/cuda_test.hpp"
#include "cuda/op_test.hpp"
#include "dsa/cpu/moe_combine.hpp"
#include "dsa/cpu/moe_routing.hpp"
#include "dsa/cuda/memory.hpp"
#include "dsa/cuda/ops.hpp"
#include "dsa/numerics/moe_routing.hpp"
#include "support/random.hpp"

namespace {

using dsa::bf16;
using dsa::index_t;
constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();

dsa::moe_routing_config v32_config() {
  dsa::moe_routing_config cfg;
  cfg.top_k = 8;
  cfg.n_group = 8;
  cfg.topk_group = 4;
  cfg.scoring = dsa::moe_scoring::sigmoid;
  cfg.routed_scaling_factor = 2.5f;
  return cfg;
}

// True when the values ranked `rank - 1` and `rank` (descending, NaN last) of `v` are within 2^-18
// of their magnitude: the only pairs whose order decides a selection of the `rank` best.
bool near_tie_at(std::vector<float> v, std::size_t rank) {
  if (rank == 0 || rank >= v.size()) return false;
  std::sort(v.begin(), v.end(), [](float a, float b) { return dsa::moe_ranks_before(a, 0, b, 1); });
  const float a = v[rank - 1], b = v[rank];
  if (std::isnan(a) || std::isnan(b)) return false;
  return std::abs(a - b) <= std::ldexp(std::max(std::abs(a), std::abs(b)), -18);
}

// Whether a token's selections (the kept groups, then the top-k of their experts) have a margin
// that no ulp-level difference of the scores can cross, by the shared host numerics.
bool separated(const float* logits, const float* bias, index_t E, const dsa::moe_routing_config& cfg) {
  std::vector<float> b(static_cast<std::size_t>(E));
  dsa::moe_route_scores(logits, E, cfg.scoring, b.data());
  if (bias != nullptr) {
    for (index_t e = 0; e < E; ++e) b[static_cast<std::size_t>(e)] += bias[e];
  }
  const index_t gs = E / cfg.n_group;
  std::vector<float> groups;
  for (index_t g = 0; g < cfg.n_group; ++g) {
    std::vector<float> m(b.begin() + g * gs, b.begin() + (g + 1) * gs);
    std::sort(m.begin(), m.end(), [](float x, float y) { return dsa::moe_ranks_before(x, 0, y, 1); });
    groups.push_back(bias != nullptr && gs >= 2 ? m[0] + m[1] : m[0]);
  }
  const bool limited = cfg.topk_group < cfg.n_group;
  if (limited && near_tie_at(groups, static_cast<std::size_t>(cfg.topk_group))) return false;
  std::vector<float> candidates;
  for (index_t g = 0; g < cfg.n_group; ++g) {
    index_t rank = 0;
    for (index_t h = 0; h < cfg.n_group; ++h) {
      rank += h != g && dsa::moe_ranks_before(groups[static_cast<std::size_t>(h)], h, groups[static_cast<std::size_t>(g)], g);
    }
    if (limited && rank >= cfg.topk_group) continue;
    candidates.insert(candidates.end(), b.begin() + g * gs, b.begin() + (g + 1) * gs);
  }
  return !near_tie_at(candidates, static_cast<std::size_t>(cfg.top_k));
}

// Logits [t, stride] with the rows' near-ties drawn again until there are none.
std::vector<float> make_logits(index_t t, index_t E, index_t stride, const std::vector<float>& bias,
                               const dsa::moe_routing_config& cfg, std::uint64_t seed) {
  std::vector<float> x(static_cast<std::size_t>(t * stride), 1e30f);  // padding the op must not read
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  for (index_t i = 0; i < t; ++i) {
    float* row = x.data() + i * stride;
    for (int attempt = 0;; ++attempt) {
      REQUIRE(attempt < 1000);
      for (index_t e = 0; e < E; ++e) row[e] = dist(rng);
      if (separated(row, bias.empty() ? nullptr : bias.data(), E, cfg)) break;
    }
  }
  return x;
}

struct routing {
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
};

routing route_cpu(const std::vector<float>& x, index_t t, index_t E, index_t stride, const std::vector<float>& bias,
                  const dsa::moe_routing_config& cfg) {
  routing r;
  r.ids.assign(static_cast<std::size_t>(t * cfg.top_k), -5);
  r.weights.assign(static_cast<std::size_t>(t * cfg.top_k), -5.0f);
  const dsa::host_view<const float, 2> lx(x.data(), {t, E}, {stride, 1});
  const dsa::host_view<const float, 1> lb = bias.empty() ? dsa::host_view<const float, 1>{} : dsa::make_view(bias.data(), {E});
  dsa::moe_route(dsa::cpu, lx, lb, dsa::make_view(r.ids.data(), {t, cfg.top_k}),
                 dsa::make_view(r.weights.data(), {t, cfg.top_k}), cfg);
  return r;
}

routing route_cuda(const std::vector<float>& x, index_t t, index_t E, index_t stride, const std::vector<float>& bias,
                   const dsa::moe_routing_config& cfg) {
  dsa_test::test_stream stream;
  auto dx = dsa_test::upload(x, stream.get());
  auto db = dsa_test::upload(bias, stream.get());
  auto di = dsa_test::upload(std::vector<std::int32_t>(static_cast<std::size_t>(t * cfg.top_k), -5), stream.get());
  auto dw = dsa_test::upload(std::vector<float>(static_cast<std::size_t>(t * cfg.top_k), -5.0f), stream.get());
  const dsa::device_view<const float, 2> vx(dx.data(), {t, E}, {stride, 1});
  const dsa::device_view<const float, 1> vb =
      bias.empty() ? dsa::device_view<const float, 1>{} : dsa::device_view<const float, 1>(db.data(), {E});
  dsa::moe_route(stream.backend(), vx, vb, di.view({t, cfg.top_k}), dw.view({t, cfg.top_k}), cfg);
  routing r;
  r.ids = dsa_test::download(di, stream.get());
  r.weights = dsa_test::download(dw, stream.get());
  return r;
}

void compare_routing(const routing& gpu, const routing& cpu) {
  dsa_test::check_bits_equal("expert_ids", gpu.ids, cpu.ids);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < cpu.weights.size(); ++i) {
    const float d = gpu.weights[i], c = cpu.weights[i];
    const bool ok = std::isnan(c) ? std::isnan(d) : std::abs(d - c) <= std::ldexp(std::abs(c), -19);
    if (!ok && ++bad <= 5) MESSAGE("weight " << i << ": device " << d << ", host " << c);
  }
  CHECK(bad == 0);
}

void check_route(index_t t, index_t E, index_t stride, bool with_bias, const dsa::moe_routing_config& cfg,
                 std::uint64_t seed) {
  CAPTURE(t);
  CAPTURE(E);
  CAPTURE(stride);
  CAPTURE(with_bias);
  CAPTURE(cfg.top_k);
  CAPTURE(cfg.n_group);
  CAPTURE(cfg.topk_group);
  CAPTURE(static_cast<int>(cfg.scoring));
  CAPTURE(cfg.norm_topk_prob);
  std::vector<float> bias;
  if (with_bias) bias = dsa_test::uniform(static_cast<std::size_t>(E), seed + 100, -0.05f, 0.05f);
  const auto x = make_logits(t, E, stride, bias, cfg, seed);
  compare_routing(route_cuda(x, t, E, stride, bias, cfg), route_cpu(x, t, E, stride, bias, cfg));
}

}  // namespace

TEST_CASE("cuda moe_route: DeepSeek-V3.2's gate for 4096 tokens, identical ids, weights within 2^-19") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  check_route(4096, 256, 256, true, v32_config(), 1);
  check_route(3, 256, 300, true, v32_config(), 2);  // strided rows
}

TEST_CASE("cuda moe_route: variants and expert counts match the CPU") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  dsa::moe_routing_config cfg = v32_config();
  check_route(200, 256, 256, false, cfg, 10);  // no bias: the group score is the max
  cfg.norm_topk_prob = false;
  check_route(200, 256, 256, true, cfg, 11);
  cfg = v32_config();
  cfg.scoring = dsa::moe_scoring::softmax;
  check_route(200, 256, 256, true, cfg, 12);
  cfg = dsa::moe_routing_config{};  // one group: no group limit
  cfg.top_k = 6;
  check_route(100, 64, 64, false, cfg, 13);
  check_route(100, 64, 64, true, cfg, 14);
  cfg.n_group = 4;  // every group kept
  cfg.topk_group = 4;
  check_route(100, 64, 64, true, cfg, 15);
  cfg = dsa::moe_routing_config{};  // the tiny golden model
  cfg.top_k = 4;
  cfg.n_group = 4;
  cfg.topk_group = 2;
  check_route(100, 16, 16, true, cfg, 16);
  cfg = dsa::moe_routing_config{};
  cfg.top_k = 1;
  check_route(10, 1, 1, false, cfg, 17);  // E = 1
  cfg.top_k = 40;
  cfg.n_group = 10;
  cfg.topk_group = 3;
  check_route(50, 3000, 3000, true, cfg, 18);  // one warp per block
  cfg.top_k = 8;
  cfg.n_group = 16;
  cfg.topk_group = 16;
  check_route(20, 20000, 20000, true, cfg, 19);  // 80 KB of scratch: opted-in shared memory
}

TEST_CASE("cuda moe_route: exact ties go to the smaller index, NaN logits rank last, as on the CPU") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  const index_t E = 256, t = 6;
  const dsa::moe_routing_config cfg = v32_config();
  std::vector<float> x(static_cast<std::size_t>(t * E), 0.5f);  // token 0: every expert equal
  for (index_t e = 0; e < E; ++e) {
    x[static_cast<std::size_t>(E + e)] = static_cast<float>(e % 4);         // token 1: repeated values
    x[static_cast<std::size_t>(2 * E + e)] = e % 3 == 0 ? nan_f : 1.0f;    // token 2: NaN among ties
    x[static_cast<std::size_t>(3 * E + e)] = nan_f;                        // token 3: all NaN
    x[static_cast<std::size_t>(4 * E + e)] = e < 250 ? nan_f : -1.0f;      // token 4: few numbers
    x[static_cast<std::size_t>(5 * E + e)] = e % 2 ? std::numeric_limits<float>::infinity() : -1e30f;
  }
  for (const bool with_bias : {false, true}) {
    CAPTURE(with_bias);
    std::vector<float> bias;
    if (with_bias) bias.assign(static_cast<std::size_t>(E), 0.25f);  // equal bias keeps the ties exact
    const routing cpu = route_cpu(x, t, E, E, bias, cfg);
    compare_routing(route_cuda(x, t, E, E, bias, cfg), cpu);
    // Token 0: the first groups, their first experts.
    const std::vector<std::int32_t> first(cpu.ids.begin(), cpu.ids.begin() + 8);
    CHECK(first == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  }
}

TEST_CASE("cuda moe_route: zero tokens launch nothing") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  const dsa::moe_routing_config cfg = v32_config();
  CHECK(route_cuda({}, 0, 256, 256, {}, cfg).ids.empty());
}

namespace {

struct combine_case {
  index_t t = 0, d = 0, k = 0, r = 0;
  index_t y_stride = 0, y_offset = 0;
  bool shared = true;
};

void check_combine(const combine_case& c, std::uint64_t seed, bool bad_device_rows = false) {
  CAPTURE(c.t);
  CAPTURE(c.d);
  CAPTURE(c.k);
  CAPTURE(c.y_stride);
  CAPTURE(c.y_offset);
  CAPTURE(c.shared);
  const auto expert = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(c.r * c.d), seed, 2.0f));
  const auto shared = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(c.t * c.d), seed + 1, 2.0f));
  const auto weights = dsa_test::uniform(static_cast<std::size_t>(c.t * c.k), seed + 2, 0.0f, 2.5f);
  std::mt19937_64 rng(seed + 3);
  std::vector<std::int32_t> rows(static_cast<std::size_t>(c.t * c.k));
  for (auto& row : rows) row = rng() % 7 == 0 ? -1 : static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(c.r));
  // What the device sees: some -1 replaced by values the front-end cannot check, which must act as -1.
  std::vector<std::int32_t> device_rows = rows;
  if (bad_device_rows) {
    std::size_t i = 0;
    for (auto& row : device_rows) {
      if (row == -1) row = (i++ % 2) ? static_cast<std::int32_t>(c.r) + 3 : std::numeric_limits<std::int32_t>::min();
    }
  }
  const std::size_t y_size = static_cast<std::size_t>(c.y_offset + c.t * c.y_stride);
  std::vector<bf16> expected(y_size, bf16::from_bits(0x7E7E));
  const dsa::host_view<const bf16, 2> hs =
      c.shared ? dsa::host_view<const bf16, 2>(shared.data(), {c.t, c.d}) : dsa::host_view<const bf16, 2>{};
  dsa::moe_combine(dsa::cpu, dsa::make_view(expert.data(), {c.r, c.d}), dsa::make_view(rows.data(), {c.t, c.k}),
                   dsa::make_view(weights.data(), {c.t, c.k}), hs,
                   dsa::host_view<bf16, 2>(expected.data() + c.y_offset, {c.t, c.d}, {c.y_stride, 1}));

  dsa_test::test_stream stream;
  auto de = dsa_test::upload(expert, stream.get());
  auto dr = dsa_test::upload(device_rows, stream.get());
  auto dw = dsa_test::upload(weights, stream.get());
  auto dsh = dsa_test::upload(shared, stream.get());
  auto dy = dsa_test::upload(std::vector<bf16>(y_size, bf16::from_bits(0x7E7E)), stream.get());
  const dsa::device_view<const bf16, 2> vs =
      c.shared ? dsa::device_view<const bf16, 2>(dsh.data(), {c.t, c.d}) : dsa::device_view<const bf16, 2>{};
  dsa::moe_combine(stream.backend(), de.view({c.r, c.d}), dr.view({c.t, c.k}), dw.view({c.t, c.k}), vs,
                   dsa::device_view<bf16, 2>(dy.data() + c.y_offset, {c.t, c.d}, {c.y_stride, 1}));
  dsa_test::check_bits_equal("y", dsa_test::download(dy, stream.get()), expected);
}

}  // namespace

TEST_CASE("cuda moe_combine: bit-identical to the CPU, 16-byte and element paths") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  std::uint64_t seed = 200;
  for (const bool shared : {true, false}) {
    check_combine({64, 7168, 8, 512, 7168, 0, shared}, ++seed);   // V3.2: 16-byte words
    check_combine({5, 7168, 8, 40, 7176, 8, shared}, ++seed);     // strided, still aligned
    check_combine({7, 7168, 8, 40, 7170, 2, shared}, ++seed);     // misaligned rows: element path
    check_combine({9, 100, 3, 20, 100, 0, shared}, ++seed);       // d % 8 != 0
    check_combine({3, 1, 1, 2, 1, 0, shared}, ++seed);
    check_combine({4, 64, 0, 2, 64, 0, shared}, ++seed);          // no routed expert: the shared one only
    check_combine({2000, 16, 6, 300, 16, 0, shared}, ++seed);
  }
}

TEST_CASE("cuda moe_combine: device-side rows outside [0, R) contribute nothing, like -1") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  check_combine({16, 256, 8, 30, 256, 0, true}, 300, true);
  check_combine({16, 77, 8, 30, 77, 0, false}, 301, true);
}

TEST_CASE("cuda moe ops: front-end checks with device views (no GPU needed)") {
  const dsa::cuda_backend be{};
  const index_t t = 4, E = 256;
  auto logits = dsa_test::fake_device_view<float, 2>({t, E});
  auto bias = dsa_test::fake_device_view<float, 1>({E});
  auto ids = dsa_test::fake_device_view<std::int32_t, 2>({t, 8});
  auto w = dsa_test::fake_device_view<float, 2>({t, 8});
  dsa::moe_routing_config cfg = v32_config();
  cfg.n_group = 7;
  CHECK_THROWS_WITH_AS(dsa::moe_route(be, logits, bias, ids, w, cfg),
                       doctest::Contains("dsa::moe_route: cfg.n_group = 7; expected a divisor of the number of experts"),
                       dsa::error);
  cfg = v32_config();
  cfg.top_k = 6;
  CHECK_THROWS_WITH_AS(dsa::moe_route(be, logits, bias, ids, w, cfg),
                       doctest::Contains("dsa::moe_route: expert_ids.extent(1) = 8; expected 6"), dsa::error);
  auto short_bias = dsa_test::fake_device_view<float, 1>({E - 1});
  CHECK_THROWS_WITH_AS(dsa::moe_route(be, logits, short_bias, ids, w, v32_config()),
                       doctest::Contains("dsa::moe_route: bias.extent(0) = 255; expected 256"), dsa::error);

  auto expert = dsa_test::fake_device_view<bf16, 2>({32, 64});
  auto rows = dsa_test::fake_device_view<std::int32_t, 2>({t, 8});
  auto rw = dsa_test::fake_device_view<float, 2>({t, 8});
  auto y = dsa_test::fake_device_view<bf16, 2>({t, 64});
  auto bad_y = dsa_test::fake_device_view<bf16, 2>({t, 65});
  CHECK_THROWS_WITH_AS(dsa::moe_combine(be, expert, rows, rw, {}, bad_y),
                       doctest::Contains("dsa::moe_combine: expert_out.extent(1) = 64; expected 65"), dsa::error);
  auto bad_rw = dsa_test::fake_device_view<float, 2>({t, 7});
  CHECK_THROWS_WITH_AS(dsa::moe_combine(be, expert, rows, bad_rw, {}, y),
                       doctest::Contains("dsa::moe_combine: weights.extent(1) = 7; expected 8"), dsa::error);
}
