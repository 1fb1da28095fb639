// The arithmetic of RMSNorm and LayerNorm (DeepSeek `RMSNorm`, `LayerNorm`), shared by the CPU
// and CUDA backends. Weights and bias are fp32, elementwise math is fp32, outputs are rounded once.
//
// RMSNorm over a row x[0, d):
//   ms  = fl32(sum x_k^2 / d)            the sum in double (see below)
//   r   = fl32(1 / sqrt_rn(fl32(ms + eps)))
//   y_k = fl32(w_k * fl32(x_k * r))       (torch: x * rsqrt(var + eps), then weight * x)
// Fused residual add (the reference's RMSNorm(x, residual)): h_k = fl32(x_k + residual_k); the
// norm is taken over the fp32 h, and the residual stream keeps bf16(h).
// LayerNorm over a row (biased variance, as F.layer_norm):
//   mean = fl32(sum x_k / d), var = fl32(sum (x_k - mean_d)^2 / d)   (double sums, mean_d the
//   unrounded double mean), r = fl32(1 / sqrt_rn(fl32(var + eps))),
//   y_k = fl32(fl32(fl32(fl32(x_k - mean) * r) * w_k) + b_k).
//
// The row reductions are accumulated in double: squares of fp32 values are exact in double, so
// the only error before the one rounding to fp32 is ~d * 2^-53 relative. The fp32 statistic is
// then the correctly rounded one except when it lies within that distance of a rounding
// boundary, which makes it (nearly always) independent of the summation order: a CUDA kernel
// that reduces in double in its own order gets the same bits with probability ~1 - d * 2^-29.
// Within one backend the order is fixed, so results are exactly reproducible.
#pragma once

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/fp32_ops.hpp"

DSA_NAMESPACE_BEGIN

/// The default epsilon of DeepSeek's RMSNorm and LayerNorm.
inline constexpr float norm_default_eps = 1e-6f;

/// RMSNorm's reciprocal root mean square from the (double) sum of squares of d values.
DSA_HOST_DEVICE inline float rms_norm_inv_rms(double sum_squares, index_t d, float eps) {
  const float mean_square = static_cast<float>(sum_squares / static_cast<double>(d));
  return detail::div_rn(1.0f, detail::sqrt_rn(mean_square + eps));
}

/// One RMSNorm output element before rounding to the output type: fl32(w * fl32(x * r)).
/// (Two plain products: with no addition after them there is nothing to contract.)
DSA_HOST_DEVICE DSA_FORCEINLINE float rms_norm_scale(float x, float inv_rms, float w) { return w * (x * inv_rms); }

// Row sums in double with a fixed order: element k goes to lane k mod 8, each lane in index
// order, then the lanes pairwise. (The CPU backend's order; it vectorises without reassociation.)
namespace detail {

DSA_HOST_DEVICE DSA_FORCEINLINE double combine_lanes(const double* s) {
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/// fl64(c * c) that is never fused with the following addition. LayerNorm's deviations are not
/// fp32 values, so their squares are inexact in double and an FMA would round differently; nvcc
/// contracts by default, hence the explicit __dmul_rn on the device. (The squares of fp32 values
/// in the RMSNorm and mean sums are exact, so contraction cannot change those.)
DSA_HOST_DEVICE DSA_FORCEINLINE double square_rn(double c) {
#if DSA_DEVICE_COMPILE
  return __dmul_rn(c, c);
#else
  return c * c;
#endif
}

}  // namespace detail

/// sum x_k^2 of a row in double (the squares are exact).
template <class T>
DSA_HOST_DEVICE inline double norm_sum_squares(const T* x, index_t d) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  index_t k = 0;
  for (; k + 8 <= d; k += 8) {
    for (index_t l = 0; l < 8; ++l) {
      const double v = static_cast<double>(to_float(x[k + l]));
      s[l] += v * v;
    }
  }
  for (; k < d; ++k) {
    const double v = static_cast<double>(to_float(x[k]));
    s[k & 7] += v * v;
  }
  return detail::combine_lanes(s);
}

/// LayerNorm's row statistics: the fp32 mean and reciprocal standard deviation.
struct layer_norm_stats {
  float mean;
  float inv_std;
};

/// LayerNorm statistics from the double sums: sum x_k and sum (x_k - sum/d)^2.
DSA_HOST_DEVICE inline layer_norm_stats layer_norm_finish(double sum, double sum_sq_dev, index_t d, float eps) {
  const double n = static_cast<double>(d);
  const float var = static_cast<float>(sum_sq_dev / n);
  return {static_cast<float>(sum / n), detail::div_rn(1.0f, detail::sqrt_rn(var + eps))};
}

/// LayerNorm statistics of a row: sum x_k, then sum (x_k - sum/d)^2, both in double.
template <class T>
DSA_HOST_DEVICE inline layer_norm_stats layer_norm_row_stats(const T* x, index_t d, float eps) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  index_t k = 0;
  for (; k + 8 <= d; k += 8) {
    for (index_t l = 0; l < 8; ++l) s[l] += static_cast<double>(to_float(x[k + l]));
  }
  for (; k < d; ++k) s[k & 7] += static_cast<double>(to_float(x[k]));
  const double sum = detail::combine_lanes(s);
  const double mean = sum / static_cast<double>(d);
  double v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  k = 0;
  for (; k + 8 <= d; k += 8) {
    for (index_t l = 0; l < 8; ++l) {
      const double c = static_cast<double>(to_float(x[k + l])) - mean;
      v[l] += detail::square_rn(c);
    }
  }
  for (; k < d; ++k) {
    const double c = static_cast<double>(to_float(x[k])) - mean;
    v[k & 7] += detail::square_rn(c);
  }
  return layer_norm_finish(sum, detail::combine_lanes(v), d, eps);
}

/// One LayerNorm output element before rounding: fl32(fl32(fl32(fl32(x - mean) * r) * w) + b).
DSA_HOST_DEVICE DSA_FORCEINLINE float layer_norm_scale(float x, const layer_norm_stats& st, float w, float b) {
  return detail::mul_rn(detail::mul_rn(x - st.mean, st.inv_std), w) + b;
}

DSA_NAMESPACE_END
