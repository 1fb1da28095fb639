// dsa::rms_norm, dsa::add_rms_norm and dsa::layer_norm: front-end checks and CPU results
// against double-precision references.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "dsa/cpu/norm.hpp"
#include "dsa/ops/norm.hpp"
#include "support/dense_reference.hpp"
#include "support/random.hpp"

namespace {

using dsa::bf16;
using dsa::index_t;

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Every output within one bf16 rounding (plus fp32 slack) of the double reference, and nearly
// all of them equal to the reference rounded to bf16.
struct agreement {
  std::size_t total = 0, exact = 0, far = 0;
  void add(bf16 y, double ref) {
    ++total;
    if (y.bits == bf16(static_cast<float>(ref)).bits) ++exact;
    if (std::fabs(static_cast<double>(y.to_float()) - ref) > 0x1p-8 * std::fabs(ref) * (1 + 0x1p-12) + 1e-30) ++far;
  }
};

}  // namespace

TEST_CASE("rms_norm matches the double reference for bf16 and fp32 rows") {
  for (index_t d : {index_t{1}, index_t{7}, index_t{64}, index_t{513}, index_t{7168}}) {
    CAPTURE(d);
    const index_t t = 9;
    std::vector<float> x = dsa_test::normal(static_cast<std::size_t>(t * d), 1 + d, 3.0f);
    const std::vector<float> w = dsa_test::uniform(static_cast<std::size_t>(d), 2 + d, 0.5f, 1.5f);
    const std::vector<bf16> xb = dsa_test::convert<bf16>(x);
    const std::vector<float> xr = dsa_test::to_floats(xb);
    std::vector<bf16> yb(x.size()), yf(x.size());
    dsa::rms_norm(dsa::cpu, dsa::make_view(xb.data(), {t, d}), dsa::make_view(w.data(), {d}),
                  dsa::make_view(yb.data(), {t, d}));
    dsa::rms_norm(dsa::cpu, dsa::make_view(x.data(), {t, d}), dsa::make_view(w.data(), {d}),
                  dsa::make_view(yf.data(), {t, d}), 1e-5f);
    agreement ab, af;
    for (index_t i = 0; i < t; ++i) {
      const auto rb = dsa_test::rms_norm_reference(xr.data() + i * d, d, w.data(), 1e-6);
      const auto rf = dsa_test::rms_norm_reference(x.data() + i * d, d, w.data(), 1e-5);
      for (index_t k = 0; k < d; ++k) {
        ab.add(yb[i * d + k], rb[k]);
        af.add(yf[i * d + k], rf[k]);
      }
    }
    CHECK(ab.far == 0);
    CHECK(af.far == 0);
    CHECK(ab.exact >= ab.total * 99 / 100);
    CHECK(af.exact >= af.total * 99 / 100);
  }
}

TEST_CASE("rms_norm: eps matters for tiny rows, in place works, threads do not change bits") {
  const index_t t = 33, d = 300;
  std::vector<bf16> x = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(t * d), 11, 1e-4f));
  const std::vector<float> w(static_cast<std::size_t>(d), 1.0f);
  std::vector<bf16> y1(x.size()), y2(x.size()), y3(x.size());
  dsa::rms_norm(dsa::cpu_backend{1}, dsa::make_view(x.data(), {t, d}), dsa::make_view(w.data(), {d}),
                dsa::make_view(y1.data(), {t, d}));
  dsa::rms_norm(dsa::cpu_backend{2}, dsa::make_view(x.data(), {t, d}), dsa::make_view(w.data(), {d}),
                dsa::make_view(y2.data(), {t, d}));
  CHECK(same_bits(y1, y2));
  // With |x| ~ 1e-4 the mean square (1e-8) is far below eps = 1e-6: y ~ x / 1e-3.
  const std::vector<float> xr = dsa_test::to_floats(x);
  const auto ref = dsa_test::rms_norm_reference(xr.data(), d, w.data(), 1e-6);
  CHECK(std::fabs(y1[0].to_float() - ref[0]) <= 0x1p-8 * std::fabs(ref[0]) * 1.001);
  // In place.
  y3 = x;
  dsa::rms_norm(dsa::cpu_backend{3}, dsa::make_view(y3.data(), {t, d}), dsa::make_view(w.data(), {d}),
                dsa::make_view(y3.data(), {t, d}));
  CHECK(same_bits(y1, y3));
  // A zero row gives zeros (0 * rsqrt(eps)), a row with inf gives NaN/inf, not a crash.
  std::vector<bf16> z(static_cast<std::size_t>(d)), zy(z.size());
  dsa::rms_norm(dsa::cpu, dsa::make_view(z.data(), {1, d}), dsa::make_view(w.data(), {d}), dsa::make_view(zy.data(), {1, d}));
  for (const auto& v : zy) CHECK(v.bits == 0);
}

TEST_CASE("add_rms_norm: fp32 sum, bf16 residual stream, norm of the unrounded sum") {
  const index_t t = 17, d = 256;
  const std::vector<float> xf = dsa_test::normal(static_cast<std::size_t>(t * d), 21, 2.0f);
  const std::vector<float> rf = dsa_test::normal(static_cast<std::size_t>(t * d), 22, 5.0f);
  const std::vector<float> w = dsa_test::uniform(static_cast<std::size_t>(d), 23, 0.5f, 1.5f);
  const std::vector<bf16> x = dsa_test::convert<bf16>(xf);
  const std::vector<bf16> r0 = dsa_test::convert<bf16>(rf);
  std::vector<bf16> res = r0, y(x.size());
  dsa::add_rms_norm(dsa::cpu, dsa::make_view(x.data(), {t, d}), dsa::make_view(res.data(), {t, d}),
                    dsa::make_view(w.data(), {d}), dsa::make_view(y.data(), {t, d}));
  agreement a;
  bool residual_ok = true;
  for (index_t i = 0; i < t; ++i) {
    std::vector<float> h(static_cast<std::size_t>(d));
    for (index_t k = 0; k < d; ++k) {
      h[k] = x[i * d + k].to_float() + r0[i * d + k].to_float();
      residual_ok = residual_ok && res[i * d + k].bits == bf16(h[k]).bits;
    }
    const auto ref = dsa_test::rms_norm_reference(h.data(), d, w.data(), 1e-6);
    for (index_t k = 0; k < d; ++k) a.add(y[i * d + k], ref[k]);
  }
  CHECK(residual_ok);
  CHECK(a.far == 0);
  CHECK(a.exact >= a.total * 99 / 100);
  // y in place over x, and thread counts: identical bits.
  std::vector<bf16> res2 = r0, x2 = x;
  dsa::add_rms_norm(dsa::cpu_backend{3}, dsa::make_view(x2.data(), {t, d}), dsa::make_view(res2.data(), {t, d}),
                    dsa::make_view(w.data(), {d}), dsa::make_view(x2.data(), {t, d}));
  CHECK(same_bits(x2, y));
  CHECK(same_bits(res2, res));
}

TEST_CASE("layer_norm matches the double reference") {
  for (index_t d : {index_t{1}, index_t{5}, index_t{128}, index_t{1000}}) {
    CAPTURE(d);
    const index_t t = 11;
    std::vector<float> x = dsa_test::normal(static_cast<std::size_t>(t * d), 31 + d, 2.0f);
    for (auto& v : x) v += 10.0f;  // a large mean: the two-pass variance must not cancel badly
    const std::vector<float> w = dsa_test::uniform(static_cast<std::size_t>(d), 32, 0.5f, 1.5f);
    const std::vector<float> b = dsa_test::uniform(static_cast<std::size_t>(d), 33, -0.5f, 0.5f);
    const std::vector<bf16> xb = dsa_test::convert<bf16>(x);
    const std::vector<float> xr = dsa_test::to_floats(xb);
    std::vector<bf16> yb(x.size()), yf(x.size()), y2(x.size());
    dsa::layer_norm(dsa::cpu, dsa::make_view(xb.data(), {t, d}), dsa::make_view(w.data(), {d}),
                    dsa::make_view(b.data(), {d}), dsa::make_view(yb.data(), {t, d}));
    dsa::layer_norm(dsa::cpu, dsa::make_view(x.data(), {t, d}), dsa::make_view(w.data(), {d}),
                    dsa::make_view(b.data(), {d}), dsa::make_view(yf.data(), {t, d}));
    dsa::layer_norm(dsa::cpu_backend{2}, dsa::make_view(x.data(), {t, d}), dsa::make_view(w.data(), {d}),
                    dsa::make_view(b.data(), {d}), dsa::make_view(y2.data(), {t, d}));
    CHECK(same_bits(yf, y2));
    agreement ab, af;
    std::size_t far_abs = 0;
    for (index_t i = 0; i < t; ++i) {
      const auto rb = dsa_test::layer_norm_reference(xr.data() + i * d, d, w.data(), b.data(), 1e-6);
      const auto rf = dsa_test::layer_norm_reference(x.data() + i * d, d, w.data(), b.data(), 1e-6);
      for (index_t k = 0; k < d; ++k) {
        ab.add(yb[i * d + k], rb[k]);
        af.add(yf[i * d + k], rf[k]);
        // x - mean rounds in fp32 at |x| ~ 10: allow that absolute error through the scale.
        if (std::fabs(yf[i * d + k].to_float() - rf[k]) > 0x1p-8 * std::fabs(rf[k]) + 1e-5 * 1.5 * 10.0) ++far_abs;
      }
    }
    CHECK(far_abs == 0);
    CHECK(ab.exact >= ab.total * 97 / 100);
    CHECK(af.exact >= af.total * 97 / 100);
  }
}

TEST_CASE("norms reject bad arguments with a clear message") {
  std::vector<bf16> x(4 * 8), y(4 * 8), r(4 * 8);
  std::vector<float> w(8), b(8);
  const auto xv = dsa::make_view(x.data(), {4, 8});
  const auto yv = dsa::make_view(y.data(), {4, 8});
  const auto rv = dsa::make_view(r.data(), {4, 8});
  const auto wv = dsa::make_view(w.data(), {8});
  const auto bv = dsa::make_view(b.data(), {8});
  CHECK_NOTHROW(dsa::rms_norm(dsa::cpu, xv, wv, yv));
  CHECK_THROWS_WITH_AS(dsa::rms_norm(dsa::cpu, xv, wv, yv, 0.0f), doctest::Contains("dsa::rms_norm: eps = 0; expected a positive"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(dsa::rms_norm(dsa::cpu, xv, wv, yv, -1e-6f), doctest::Contains("dsa::rms_norm: eps = -1e-06"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::rms_norm(dsa::cpu, xv, wv, yv, std::numeric_limits<float>::quiet_NaN()),
                       doctest::Contains("dsa::rms_norm: eps = nan"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::rms_norm(dsa::cpu, xv, dsa::make_view(w.data(), {7}), yv),
                       doctest::Contains("dsa::rms_norm: weight.extent(0) = 7; expected 8"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::rms_norm(dsa::cpu, xv, wv, dsa::make_view(y.data(), {4, 7})),
                       doctest::Contains("dsa::rms_norm: y.extent(1) = 7; expected 8"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::rms_norm(dsa::cpu, xv, wv, dsa::make_view(y.data(), {3, 8})),
                       doctest::Contains("dsa::rms_norm: y.extent(0) = 3; expected 4"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::rms_norm(dsa::cpu, dsa::make_view(x.data(), {4, 0}), wv, dsa::make_view(y.data(), {4, 0})),
                       doctest::Contains("dsa::rms_norm: x.extent(1) = 0; expected at least 1"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::rms_norm(dsa::cpu, xv, dsa::host_view<const float, 1>(w.data(), {8}, {2}), yv),
                       doctest::Contains("dsa::rms_norm: weight.stride(0) = 2"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::rms_norm(dsa::cpu, xv, wv, dsa::make_view(x.data() + 1, {4, 8})),
                       doctest::Contains("dsa::rms_norm: y = a view overlapping x; expected either exactly x (in place)"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(dsa::rms_norm(dsa::cpu, xv, wv, dsa::host_view<bf16, 2>(y.data(), {4, 8}, {4, 1})),
                       doctest::Contains("dsa::rms_norm: y.stride(0) = 4"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::rms_norm(dsa::cpu, dsa::host_view<const bf16, 2>(nullptr, {4, 8}), wv, yv),
                       doctest::Contains("dsa::rms_norm: x.data = null"), dsa::error);

  CHECK_NOTHROW(dsa::add_rms_norm(dsa::cpu, xv, rv, wv, yv));
  CHECK_THROWS_WITH_AS(dsa::add_rms_norm(dsa::cpu, xv, dsa::make_view(r.data(), {4, 7}), wv, yv),
                       doctest::Contains("dsa::add_rms_norm: residual.extent(1) = 7; expected 8"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::add_rms_norm(dsa::cpu, xv, rv, wv, rv),
                       doctest::Contains("dsa::add_rms_norm: residual = a view overlapping y"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::add_rms_norm(dsa::cpu, xv, dsa::make_view(x.data(), {4, 8}), wv, yv),
                       doctest::Contains("dsa::add_rms_norm: residual = a view overlapping x"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::add_rms_norm(dsa::cpu, xv, rv, wv, yv, 0.0f), doctest::Contains("dsa::add_rms_norm: eps = 0"),
                       dsa::error);

  CHECK_NOTHROW(dsa::layer_norm(dsa::cpu, xv, wv, bv, yv));
  CHECK_THROWS_WITH_AS(dsa::layer_norm(dsa::cpu, xv, wv, dsa::make_view(b.data(), {6}), yv),
                       doctest::Contains("dsa::layer_norm: bias.extent(0) = 6; expected 8"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::layer_norm(dsa::cpu, xv, wv, bv, yv, -2.0f), doctest::Contains("dsa::layer_norm: eps = -2"),
                       dsa::error);
  // fp32 x and a bf16 y over the same bytes cannot be in place.
  std::vector<float> xf(4 * 8);
  CHECK_THROWS_WITH_AS(dsa::layer_norm(dsa::cpu, dsa::make_view(xf.data(), {4, 8}), wv, bv,
                                       dsa::make_view(reinterpret_cast<bf16*>(xf.data()), {4, 8})),
                       doctest::Contains("dsa::layer_norm: y = a view overlapping x"), dsa::error);
}
