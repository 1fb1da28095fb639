// Test oracle for sparse_mha_attention: the formulas of ops/sparse_mha_attention.hpp as plain
// double-precision loops, with each attention_rounding mode's bf16 rounding points applied to
// the double values (round-to-nearest-even straight from double, no intermediate fp32).
//
// The library rounds some quantities from fp32 intermediates (its dot products, exponentials
// and softmax sums are fp32). Where a double probability lies so close to a bf16 rounding
// midpoint that the fp32 value may round the other way, the oracle cannot know which neighbour
// the library picks: it reports the possible difference in `slack`, per output element, instead
// of widening every tolerance.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace dsa_test {

/// Rounds a finite double to the nearest bf16 value (8 significant bits), ties to even.
/// `near_tie` (optional) is set when x is within 1/256 of a bf16 ulp from a rounding midpoint.
inline double round_bf16(double x, bool* near_tie = nullptr) {
  if (near_tie) *near_tie = false;
  if (x == 0.0 || !std::isfinite(x)) return x;
  int e = 0;
  const double m = std::frexp(x, &e);  // |m| in [0.5, 1)
  const double scaled = std::ldexp(m, 8);
  const double r = std::nearbyint(scaled);  // default rounding mode: ties to even
  if (near_tie) *near_tie = std::fabs(std::fabs(scaled - std::floor(scaled)) - 0.5) < 1.0 / 256;
  return std::ldexp(r, e - 8);
}

/// Half a bf16 ulp of x (the largest error of rounding x to bf16).
inline double bf16_half_ulp(double x) {
  if (x == 0.0 || !std::isfinite(x)) return std::ldexp(1.0, -134);
  int e = 0;
  std::frexp(x, &e);
  return std::ldexp(1.0, e - 9);
}

enum class mha_rounding { fp32, bf16, bf16_split };

struct sparse_mha_reference_result {
  std::vector<double> out;    ///< [s, h, d_v] before the final bf16 rounding
  std::vector<double> slack;  ///< [s, h, d_v] possible extra error from near-tie probabilities
  std::vector<double> lse;    ///< [s, h]; +inf for a row without a used entry
};

/// q [s, h, d_nope + d_rope], k_nope [n, h, d_nope], k_rope [n, d_rope], v [n, h, d_v],
/// indices [s, k], all dense row-major doubles holding the exact bf16 input values.
inline sparse_mha_reference_result sparse_mha_reference(const std::vector<double>& q, const std::vector<double>& k_nope,
                                                        const std::vector<double>& k_rope, const std::vector<double>& v,
                                                        const std::vector<std::int32_t>& indices, std::int64_t s,
                                                        std::int64_t h, std::int64_t d_nope, std::int64_t d_rope,
                                                        std::int64_t n, std::int64_t k, std::int64_t d_v, float scale,
                                                        mha_rounding mode) {
  const std::int64_t d_qk = d_nope + d_rope;
  sparse_mha_reference_result r;
  r.out.assign(static_cast<std::size_t>(s * h * d_v), 0.0);
  r.slack.assign(r.out.size(), 0.0);
  r.lse.assign(static_cast<std::size_t>(s * h), std::numeric_limits<double>::infinity());
  const double sc = mode == mha_rounding::fp32 ? double(scale) : round_bf16(double(scale));
  for (std::int64_t t = 0; t < s; ++t) {
    std::vector<std::int64_t> rows;
    for (std::int64_t e = 0; e < k; ++e) {
      const std::int32_t j = indices[static_cast<std::size_t>(t * k + e)];
      if (j >= 0 && j < n) rows.push_back(j);
    }
    if (rows.empty()) continue;
    for (std::int64_t hh = 0; hh < h; ++hh) {
      const double* qh = &q[static_cast<std::size_t>((t * h + hh) * d_qk)];
      std::vector<double> x;
      for (std::int64_t j : rows) {
        double a = 0.0, b = 0.0;
        for (std::int64_t i = 0; i < d_nope; ++i) a += qh[i] * k_nope[static_cast<std::size_t>((j * h + hh) * d_nope + i)];
        for (std::int64_t i = 0; i < d_rope; ++i) b += qh[d_nope + i] * k_rope[static_cast<std::size_t>(j * d_rope + i)];
        double logit = 0.0;
        switch (mode) {
          case mha_rounding::fp32: logit = (a + b) * sc; break;
          case mha_rounding::bf16: logit = round_bf16(round_bf16(a + b) * sc); break;
          case mha_rounding::bf16_split: logit = round_bf16(round_bf16(round_bf16(a) + round_bf16(b)) * sc); break;
        }
        x.push_back(logit);
      }
      const double m = *std::max_element(x.begin(), x.end());
      double sum = 0.0;
      for (double xi : x) sum += std::exp(xi - m);
      r.lse[static_cast<std::size_t>(t * h + hh)] = m + std::log(sum);
      for (std::size_t e = 0; e < rows.size(); ++e) {
        double p = std::exp(x[e] - m) / sum;
        double slack_p = 0.0;
        if (mode != mha_rounding::fp32) {
          bool tie = false;
          p = round_bf16(p, &tie);
          if (tie) slack_p = 2.0 * bf16_half_ulp(p);
        }
        const double* vr = &v[static_cast<std::size_t>((rows[e] * h + hh) * d_v)];
        for (std::int64_t c = 0; c < d_v; ++c) {
          const std::size_t o = static_cast<std::size_t>((t * h + hh) * d_v + c);
          r.out[o] += p * vr[c];
          r.slack[o] += slack_p * std::fabs(vr[c]);
        }
      }
    }
  }
  return r;
}

}  // namespace dsa_test
