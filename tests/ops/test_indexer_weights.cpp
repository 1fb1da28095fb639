// dsa::lightning_indexer_weights: front-end checks and CPU results against the normative
// left-to-right fp32 evaluation and a double-precision oracle.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "dsa/cpu/indexer_weights.hpp"
#include "dsa/ops/indexer_weights.hpp"
#include "support/random.hpp"

namespace {

using dsa::index_t;

// V3.2's constants: 64 heads (the tiny model has 8), head_dim 128.
const float head_scale = static_cast<float>(1.0 / std::sqrt(64.0));
const float dim_scale = static_cast<float>(1.0 / std::sqrt(128.0));

struct problem {
  index_t m, h;
  std::vector<float> proj, q_scale;
  problem(index_t m_, index_t h_, std::uint64_t seed) : m(m_), h(h_) {
    proj = dsa_test::normal(static_cast<std::size_t>(m * h), seed, 3.0f);
    // act_quant ue8m0 scales: powers of two; plus some fp32-format scales (any positive value).
    q_scale = dsa_test::uniform(static_cast<std::size_t>(m * h), seed + 1, 1e-4f, 0.05f);
    for (std::size_t i = 0; i < q_scale.size(); i += 2) q_scale[i] = std::ldexp(1.0f, -static_cast<int>(i % 17) - 3);
  }
  auto proj_view() const { return dsa::make_view(proj.data(), {m, h}); }
  auto scale_view() const { return dsa::make_view(q_scale.data(), {m, h}); }
};

std::vector<float> run(const problem& p, dsa::cpu_backend be = dsa::cpu_backend{2}) {
  std::vector<float> w(p.proj.size(), std::numeric_limits<float>::quiet_NaN());
  dsa::lightning_indexer_weights(be, p.proj_view(), p.scale_view(), dsa::make_view(w.data(), {p.m, p.h}), head_scale,
                                 dim_scale);
  return w;
}

// fl32 of a product of two floats: exact in double, then one rounding.
float mul(float a, float b) { return static_cast<float>(double(a) * double(b)); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("lightning_indexer_weights is the reference's left-to-right fp32 product") {
  const problem p(50, 8, 61);
  const auto w = run(p);
  int differs_from_other_order = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const float want = mul(mul(mul(p.proj[i], head_scale), p.q_scale[i]), dim_scale);
    CHECK(std::memcmp(&w[i], &want, sizeof(float)) == 0);
    // Against the exact product: three roundings, each at most half an fp32 ulp.
    const double exact = double(p.proj[i]) * head_scale * p.q_scale[i] * dim_scale;
    CHECK(std::fabs(w[i] - exact) <= 3.0 * std::ldexp(std::fabs(exact), -24) * 1.0001);
    // Folding the constants first (another valid-looking order) rounds differently somewhere,
    // so the bit-exact check above pins the order.
    const float folded = mul(p.proj[i], mul(mul(head_scale, dim_scale), p.q_scale[i]));
    differs_from_other_order += std::memcmp(&w[i], &folded, sizeof(float)) != 0;
  }
  CHECK(differs_from_other_order > 0);
}

TEST_CASE("lightning_indexer_weights in place, strided, and bit-identical for every thread count") {
  const problem p(1000, 8, 63);
  const auto want = run(p, dsa::cpu_backend{1});
  for (int threads : {2, 3, 8}) {
    CAPTURE(threads);
    CHECK(same_bits(want, run(p, dsa::cpu_backend{threads})));
  }
  std::vector<float> inplace = p.proj;
  dsa::lightning_indexer_weights(dsa::cpu, dsa::make_view(static_cast<const float*>(inplace.data()), {p.m, p.h}),
                                 p.scale_view(), dsa::make_view(inplace.data(), {p.m, p.h}), head_scale, dim_scale);
  CHECK(same_bits(inplace, want));
  // Rows taken from a wider [m, h + 3] buffer, written into one.
  std::vector<float> wide(static_cast<std::size_t>(p.m * (p.h + 3)), -1.0f), out(wide.size(), 5.0f);
  for (index_t t = 0; t < p.m; ++t) std::memcpy(&wide[static_cast<std::size_t>(t * (p.h + 3))], &p.proj[static_cast<std::size_t>(t * p.h)], sizeof(float) * p.h);
  const dsa::host_view<const float, 2> pv(wide.data(), {p.m, p.h}, {p.h + 3, 1});
  const dsa::host_view<float, 2> ov(out.data(), {p.m, p.h}, {p.h + 3, 1});
  dsa::lightning_indexer_weights(dsa::cpu, pv, p.scale_view(), ov, head_scale, dim_scale);
  for (index_t t = 0; t < p.m; ++t) {
    for (index_t h = 0; h < p.h; ++h) CHECK(ov(t, h) == want[static_cast<std::size_t>(t * p.h + h)]);
    for (index_t h = p.h; h < p.h + 3; ++h) CHECK(out[static_cast<std::size_t>(t * (p.h + 3) + h)] == 5.0f);  // padding untouched
  }
}

TEST_CASE("lightning_indexer_weights propagates non-finite projections and handles no tokens") {
  std::vector<float> proj = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -0.0f, 1e30f};
  std::vector<float> qs = {0.5f, 0.5f, 0.5f, 1e30f};
  std::vector<float> w(4);
  dsa::lightning_indexer_weights(dsa::cpu, dsa::make_view(proj.data(), {1, 4}), dsa::make_view(qs.data(), {1, 4}),
                                 dsa::make_view(w.data(), {1, 4}), head_scale, dim_scale);
  CHECK(std::isnan(w[0]));
  CHECK(w[1] == std::numeric_limits<float>::infinity());
  CHECK((w[2] == 0.0f && std::signbit(w[2])));
  CHECK(std::isinf(w[3]));  // overflow is IEEE, not clamped
  dsa::lightning_indexer_weights(dsa::cpu, dsa::host_view<const float, 2>(nullptr, {0, 8}),
                                 dsa::host_view<const float, 2>(nullptr, {0, 8}), dsa::host_view<float, 2>(nullptr, {0, 8}),
                                 head_scale, dim_scale);
}

TEST_CASE("lightning_indexer_weights rejects bad arguments") {
  const problem p(4, 8, 65);
  std::vector<float> w(p.proj.size() + 8);
  const auto pv = p.proj_view();
  const auto sv = p.scale_view();
  const auto wv = dsa::make_view(w.data(), {p.m, p.h});
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(dsa::lightning_indexer_weights(dsa::cpu, pv, sv, wv, bad, dim_scale),
                         doctest::Contains("dsa::lightning_indexer_weights: head_scale = "), dsa::error);
    CHECK_THROWS_WITH_AS(dsa::lightning_indexer_weights(dsa::cpu, pv, sv, wv, head_scale, bad),
                         doctest::Contains("dsa::lightning_indexer_weights: dim_scale = "), dsa::error);
  }
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_weights(dsa::cpu, pv, sv, wv, -1.0f, dim_scale),
                       doctest::Contains("head_scale = -1; expected a finite value > 0"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_weights(dsa::cpu, pv, dsa::make_view(p.q_scale.data(), {p.m - 1, p.h}), wv,
                                                      head_scale, dim_scale),
                       doctest::Contains("dsa::lightning_indexer_weights: q_scale.extent(0) = 3; expected 4"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_weights(dsa::cpu, pv, dsa::make_view(p.q_scale.data(), {p.m / 2, p.h * 2}),
                                                      wv, head_scale, dim_scale),
                       doctest::Contains("dsa::lightning_indexer_weights: q_scale.extent(0) = 2; expected 4"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_weights(dsa::cpu, pv, dsa::make_view(p.q_scale.data(), {p.m, p.h - 1}), wv,
                                                      head_scale, dim_scale),
                       doctest::Contains("dsa::lightning_indexer_weights: q_scale.extent(1) = 7; expected 8"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_weights(dsa::cpu, pv, sv, dsa::make_view(w.data(), {p.m + 1, p.h}),
                                                      head_scale, dim_scale),
                       doctest::Contains("dsa::lightning_indexer_weights: w.extent(0) = 5; expected 4"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_weights(dsa::cpu, pv, sv, dsa::make_view(w.data(), {p.m, p.h + 1}),
                                                      head_scale, dim_scale),
                       doctest::Contains("dsa::lightning_indexer_weights: w.extent(1) = 9; expected 8"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_weights(dsa::cpu, dsa::host_view<const float, 2>(p.proj.data(), {p.m, p.h / 2}, {p.h, 2}),
                                                      dsa::make_view(p.q_scale.data(), {p.m, p.h / 2}),
                                                      dsa::make_view(w.data(), {p.m, p.h / 2}), head_scale, dim_scale),
                       doctest::Contains("dsa::lightning_indexer_weights: proj.stride(1) = 2; expected 1"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_weights(dsa::cpu, dsa::host_view<const float, 2>(nullptr, {p.m, p.h}), sv, wv,
                                                      head_scale, dim_scale),
                       doctest::Contains("dsa::lightning_indexer_weights: proj.data = null"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_weights(dsa::cpu, pv, sv, dsa::host_view<float, 2>(w.data(), {p.m, p.h}, {0, 1}),
                                                      head_scale, dim_scale),
                       doctest::Contains("dsa::lightning_indexer_weights: w.stride(0) = 0; expected |stride| >= 8"),
                       dsa::error);
  // Exact aliasing of proj is in place; a shifted alias, or any alias of q_scale, is not.
  std::vector<float> buf(p.proj.size() + 8);
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_weights(dsa::cpu, dsa::make_view(static_cast<const float*>(buf.data()), {p.m, p.h}),
                                                      sv, dsa::make_view(buf.data() + 1, {p.m, p.h}), head_scale, dim_scale),
                       doctest::Contains("dsa::lightning_indexer_weights: w = a view overlapping proj; expected either "
                                         "exactly proj (in place) or memory disjoint from it"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_weights(dsa::cpu, pv, dsa::make_view(static_cast<const float*>(buf.data()), {p.m, p.h}),
                                                      dsa::make_view(buf.data(), {p.m, p.h}), head_scale, dim_scale),
                       doctest::Contains("dsa::lightning_indexer_weights: w = a view overlapping q_scale; expected memory "
                                         "disjoint from q_scale"),
                       dsa::error);
}
