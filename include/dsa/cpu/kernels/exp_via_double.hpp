// fl32(exp(double(x))) over a run of floats at vector speed, bit for bit the scalar
// numerics/sparse_mha_attention.hpp `sparse_mha_exp` (the reference's double exp, then rounded to
// float), which sparse_mha_attention evaluates once per (entry, head).
//
// Eigen's vectorised double exp (a Cephes rational approximation, a few double ulps from exp)
// is rounded to float. Two exps a few double ulps apart round to different floats only when a
// float rounding midpoint lies between them, so wherever the vector result is farther than
// `exp_guard_ulps` double ulps from every midpoint its float is the scalar one's; the lanes
// nearer a midpoint (about 1 in 65000), and inputs whose float exp is subnormal, infinite or NaN,
// take the scalar function. tests/cpu/test_exp_via_double.cpp checks the bits against the
// scalar function over every binade of the input range.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/sparse_mha_attention.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

/// Floats per evaluation block (a multiple of every vector width).
inline constexpr index_t exp_block = 64;
/// Distance from a float rounding midpoint, in double ulps, below which a lane takes the scalar
/// exp: far above the vector exp's error (a few ulps) plus the scalar one's (under one).
inline constexpr std::uint64_t exp_guard_ulps = std::uint64_t{1} << 12;
/// Inputs whose float exp is a normal, finite number: exp(-87) > FLT_MIN, exp(88) < FLT_MAX.
inline constexpr double exp_fast_lo = -87.0;
inline constexpr double exp_fast_hi = 88.0;

/// Whether rounding the double d to float could depend on d's last `exp_guard_ulps` ulps: its
/// 29 bits below float precision lie that near their midpoint.
inline bool near_float_midpoint(double d) {
  constexpr std::uint64_t below = (std::uint64_t{1} << 29) - 1;
  constexpr std::uint64_t half = std::uint64_t{1} << 28;
  const std::uint64_t low = std::bit_cast<std::uint64_t>(d) & below;
  return (low > half ? low - half : half - low) <= exp_guard_ulps;
}

/// y[i] = sparse_mha_exp(x[i]) for i < n; y may be x.
inline void exp_via_double(const float* x, float* y, index_t n) {
  using run = Eigen::Array<double, Eigen::Dynamic, 1>;
  alignas(64) double d[exp_block];
  alignas(64) double e[exp_block];
  for (index_t i0 = 0; i0 < n; i0 += exp_block) {
    const index_t m = std::min(exp_block, n - i0);
    for (index_t i = 0; i < m; ++i) d[i] = static_cast<double>(x[i0 + i]);
    // Whole packets through the vector exp, a remainder through Eigen's scalar one (std::exp).
    Eigen::Map<run, Eigen::Aligned64>(e, m) = Eigen::Map<const run, Eigen::Aligned64>(d, m).exp();
    const auto slow = [&](index_t i) { return !(d[i] >= exp_fast_lo && d[i] <= exp_fast_hi) || near_float_midpoint(e[i]); };
    bool any_slow = false;
    for (index_t i = 0; i < m; ++i) {
      y[i0 + i] = static_cast<float>(e[i]);
      any_slow |= slow(i);
    }
    if (!any_slow) continue;
    // d holds the inputs exactly (y may have overwritten x).
    for (index_t i = 0; i < m; ++i) {
      if (slow(i)) y[i0 + i] = sparse_mha_exp(static_cast<float>(d[i]));
    }
  }
}

}  // namespace cpu_detail
DSA_NAMESPACE_END
