// cpu/kernels/exp_via_double.hpp: the vectorised exp gives the bits of the scalar sparse_mha_exp
// for every input class: samples of every binade of either sign that the fast path takes, the edges
// of that path, the inputs it leaves to the scalar function (subnormal, overflowing, infinite,
// NaN), in place and out of place, for lengths around the block size.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "dsa/cpu/kernels/exp_via_double.hpp"
#include "dsa/numerics/sparse_mha_attention.hpp"

namespace {

using dsa::index_t;

// The number of i with exp_via_double's y[i] != sparse_mha_exp(x[i]) bit for bit (NaN: any NaN).
index_t mismatches(const std::vector<float>& x, bool in_place) {
  std::vector<float> y = x;
  if (in_place) {
    dsa::cpu_detail::exp_via_double(y.data(), y.data(), static_cast<index_t>(y.size()));
  } else {
    dsa::cpu_detail::exp_via_double(x.data(), y.data(), static_cast<index_t>(x.size()));
  }
  index_t bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float want = dsa::sparse_mha_exp(x[i]);
    if (std::isnan(want) ? !std::isnan(y[i]) : std::bit_cast<std::uint32_t>(want) != std::bit_cast<std::uint32_t>(y[i])) {
      if (bad < 8) MESSAGE("x = " << x[i] << " (0x" << std::hex << std::bit_cast<std::uint32_t>(x[i]) << "): got 0x"
                                  << std::bit_cast<std::uint32_t>(y[i]) << ", want 0x" << std::bit_cast<std::uint32_t>(want));
      ++bad;
    }
  }
  return bad;
}

}  // namespace

TEST_CASE("exp_via_double: the scalar exp's bits in every binade of the fast path, both signs") {
  std::mt19937 rng(7);
  std::vector<float> x;
  // |x| in [2^e, 2^(e+1)) for e = -40 .. 6 (the fast path ends at 88 < 2^7), 2^16 samples each.
  for (int e = -40; e <= 6; ++e) {
    std::uniform_real_distribution<float> u(std::ldexp(1.0f, e), std::ldexp(1.0f, e + 1));
    for (int s = 0; s < 1 << 16; ++s) {
      const float v = u(rng);
      x.push_back(v <= 88.0f ? v : 88.0f);
      x.push_back(-v);
    }
  }
  CHECK(mismatches(x, false) == 0);
  CHECK(mismatches(x, true) == 0);
}

TEST_CASE("exp_via_double: the edges of the fast path and what it leaves to the scalar exp") {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f, -0.0f, -87.0f, 88.0f, -87.00001f, 88.00001f, -87.5f, -88.7f, -89.0f,
                          -103.0f, -104.0f, -150.0f, 88.7f, 88.72f, 88.73f, 89.0f, 1000.0f, -1000.0f, inf, -inf,
                          std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min(), std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::lowest(), std::numeric_limits<float>::epsilon()};
  // Every float in [-88, -86] on a fine grid: where the fast path hands over to the scalar exp
  // and float results approach the subnormals.
  for (float v = -88.0f; v <= -86.0f; v = std::nextafter(v, 0.0f)) {
    if (std::bit_cast<std::uint32_t>(v) % 61 == 0) x.push_back(v);
  }
  CHECK(mismatches(x, false) == 0);
  CHECK(mismatches(x, true) == 0);
}

TEST_CASE("exp_via_double: lengths around the block, a NaN among finite lanes") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-30.0f, 0.0f);
  for (const index_t n : {1, 2, 15, 63, 64, 65, 127, 128, 129, 1000}) {
    CAPTURE(n);
    std::vector<float> x(static_cast<std::size_t>(n));
    for (float& v : x) v = u(rng);
    CHECK(mismatches(x, false) == 0);
    x[static_cast<std::size_t>(n / 2)] = std::numeric_limits<float>::quiet_NaN();
    CHECK(mismatches(x, true) == 0);
  }
}

TEST_CASE("exp_via_double: inputs whose exp lies next to a float rounding midpoint") {
  // The hard cases of the rounding, which the guard sends to the scalar exp: found by search
  // (about 1 input in 65000), 64 of them spread over [-80, 80].
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-80.0f, 80.0f);
  std::vector<float> x;
  for (int tries = 0; x.size() < 64 && tries < 1 << 26; ++tries) {
    const float v = u(rng);
    if (dsa::cpu_detail::near_float_midpoint(std::exp(static_cast<double>(v)))) x.push_back(v);
  }
  REQUIRE(x.size() == 64);
  CHECK(mismatches(x, false) == 0);
}

TEST_CASE("near_float_midpoint: a double at a float midpoint is near, one at a float is not") {
  using dsa::cpu_detail::near_float_midpoint;
  const double one_and_half_ulp = 1.0 + std::ldexp(1.0, -24);  // midway between 1 and 1 + 2^-23
  CHECK(near_float_midpoint(one_and_half_ulp));
  CHECK(near_float_midpoint(std::nextafter(one_and_half_ulp, 2.0)));
  CHECK(!near_float_midpoint(1.0));
  CHECK(!near_float_midpoint(1.0 + std::ldexp(1.0, -23)));
  // 2^13 double ulps from the midpoint: outside the guard.
  CHECK(!near_float_midpoint(one_and_half_ulp + std::ldexp(1.0, -52 + 13)));
}
