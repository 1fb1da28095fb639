// Slow, obviously-correct references for the dense building blocks (linear, norms, RoPE,
// SwiGLU): plain loops, double precision where the op's result is compared with a tolerance,
// and exact integer arithmetic where it is compared bit for bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "dsa/core/types.hpp"
#include "dsa/numerics/fp8_quant.hpp"

namespace dsa_test {

// fl32(a * b) without any chance of fusion with a later addition: fma(a, b, -0) rounds a * b
// once and is never contracted (a float product, even one formed in double, is folded and fused
// into an FMA by g++ -march=native).
inline float f32_mul(float a, float b) { return std::fma(a, b, -0.0f); }

/// Result of the FP8 linear reference for one output matrix.
struct fp8_linear_ref {
  std::vector<float> y;       // the op's specification evaluated literally (fp32, before output rounding)
  std::vector<float> y_fp32;  // the same with fp8_dot::fp32 block dots (ascending-k fp32 sums)
  std::vector<double> ideal;  // the same quantized operands, dequantized and summed in double
  std::vector<double> bound;  // an fp32-accumulation error bound for |y - ideal|
  std::vector<double> bound_fp32;  // the same for |y_fp32 - ideal|: + 127 u sum_k |p_k| |s| per block
};

/// x [t, in] (float values of X), w codes [out, in], ws [ceil(out/128), in/128]. The activation
/// is quantized exactly as the op does (act_quant_group); each block dot is computed in exact
/// integer arithmetic (an e4m3 value times 2^9 is an integer), rounded once to fp32.
template <class X>
fp8_linear_ref fp8_linear_reference(const std::vector<X>& x, std::int64_t t, std::int64_t in,
                                    const std::vector<std::uint8_t>& w, std::int64_t out, const std::vector<float>& ws,
                                    dsa::scale_format fmt) {
  const std::int64_t nkb = in / 128;
  std::vector<std::uint8_t> xq(static_cast<std::size_t>(t * in));
  std::vector<float> xs(static_cast<std::size_t>(t * nkb));
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t b = 0; b < nkb; ++b) {
      dsa::fp8_e4m3 q[128];
      xs[i * nkb + b] = dsa::act_quant_group(x.data() + i * in + b * 128, 128, q, fmt);
      for (int k = 0; k < 128; ++k) xq[i * in + b * 128 + k] = q[k].bits;
    }
  }
  auto val = [](std::uint8_t c) { return static_cast<double>(dsa::fp8_e4m3::from_bits(c).to_float()); };
  fp8_linear_ref r;
  r.y.assign(static_cast<std::size_t>(t * out), 0.0f);
  r.y_fp32.assign(static_cast<std::size_t>(t * out), 0.0f);
  r.ideal.assign(static_cast<std::size_t>(t * out), 0.0);
  r.bound.assign(static_cast<std::size_t>(t * out), 0.0);
  r.bound_fp32.assign(static_cast<std::size_t>(t * out), 0.0);
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t n = 0; n < out; ++n) {
      float acc = 0.0f, acc_fp32 = 0.0f;
      double ideal = 0.0, mag = 0.0, mag_products = 0.0;
      for (std::int64_t b = 0; b < nkb; ++b) {
        std::int64_t sum = 0, sum_abs = 0;
        float sum_fp32 = 0.0f;  // ascending k, every partial sum rounded to fp32
        bool nan = false;
        for (int k = 0; k < 128; ++k) {
          const std::uint8_t a = xq[i * in + b * 128 + k];
          const std::uint8_t c = w[n * in + b * 128 + k];
          if ((a & 0x7F) == 0x7F || (c & 0x7F) == 0x7F) nan = true;
          if (nan) continue;
          const std::int64_t p = static_cast<std::int64_t>(val(a) * 512.0) * static_cast<std::int64_t>(val(c) * 512.0);
          sum += p;
          sum_abs += p < 0 ? -p : p;
          // The product is exact in fp32 (|p| < 2^36 in units of 2^-18 has at most 8 significant bits).
          sum_fp32 = sum_fp32 + static_cast<float>(static_cast<double>(p) * 0x1p-18);
        }
        const float d = nan ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(sum) * 0x1p-18f;
        const float d_fp32 = nan ? std::numeric_limits<float>::quiet_NaN() : sum_fp32;
        const float s = f32_mul(xs[i * nkb + b], ws[(n / 128) * nkb + b]);
        acc = acc + f32_mul(d, s);
        acc_fp32 = acc_fp32 + f32_mul(d_fp32, s);
        const double term = static_cast<double>(sum) * 0x1p-18 * static_cast<double>(xs[i * nkb + b]) *
                            static_cast<double>(ws[(n / 128) * nkb + b]);
        ideal += term;
        mag += std::fabs(term);
        mag_products += static_cast<double>(sum_abs) * 0x1p-18 *
                        std::fabs(static_cast<double>(xs[i * nkb + b]) * static_cast<double>(ws[(n / 128) * nkb + b]));
      }
      r.y[i * out + n] = acc;
      r.y_fp32[i * out + n] = acc_fp32;
      r.ideal[i * out + n] = ideal;
      r.bound[i * out + n] = static_cast<double>(nkb + 2) * 0x1p-24 * mag + 1e-30;
      // Each fp32 block dot is within 127 roundings of sum |p_k| of the exact one.
      r.bound_fp32[i * out + n] = static_cast<double>(nkb + 2) * 0x1p-24 * mag + 128.0 * 0x1p-24 * mag_products + 1e-30;
    }
  }
  return r;
}

/// y[i, n] = sum_k x[i, k] w[n, k] in double, and sum_k |x w| (for error bounds).
inline void linear_reference(const std::vector<float>& x, std::int64_t t, std::int64_t in, const std::vector<float>& w,
                             std::int64_t out, std::vector<double>& y, std::vector<double>& mag) {
  y.assign(static_cast<std::size_t>(t * out), 0.0);
  mag.assign(static_cast<std::size_t>(t * out), 0.0);
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t n = 0; n < out; ++n) {
      double s = 0.0, m = 0.0;
      for (std::int64_t k = 0; k < in; ++k) {
        const double p = static_cast<double>(x[i * in + k]) * static_cast<double>(w[n * in + k]);
        s += p;
        m += std::fabs(p);
      }
      y[i * out + n] = s;
      mag[i * out + n] = m;
    }
  }
}

/// RMSNorm of one row in double: w * x / sqrt(mean(x^2) + eps).
inline std::vector<double> rms_norm_reference(const float* x, std::int64_t d, const float* w, double eps) {
  double ss = 0.0;
  for (std::int64_t k = 0; k < d; ++k) ss += static_cast<double>(x[k]) * x[k];
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
  std::vector<double> y(static_cast<std::size_t>(d));
  for (std::int64_t k = 0; k < d; ++k) y[k] = static_cast<double>(w[k]) * x[k] * r;
  return y;
}

/// LayerNorm of one row in double (biased variance).
inline std::vector<double> layer_norm_reference(const float* x, std::int64_t d, const float* w, const float* b,
                                                double eps) {
  double s = 0.0;
  for (std::int64_t k = 0; k < d; ++k) s += x[k];
  const double mean = s / static_cast<double>(d);
  double v = 0.0;
  for (std::int64_t k = 0; k < d; ++k) v += (x[k] - mean) * (x[k] - mean);
  const double r = 1.0 / std::sqrt(v / static_cast<double>(d) + eps);
  std::vector<double> y(static_cast<std::size_t>(d));
  for (std::int64_t k = 0; k < d; ++k) y[k] = (x[k] - mean) * r * w[k] + b[k];
  return y;
}

/// YaRN frequency of pair j straight from the formula, all in double (no fp32 rounding points).
inline double yarn_inv_freq_reference(double base, std::int64_t dim, double factor, double original, double beta_fast,
                                      double beta_slow, bool yarn, std::int64_t j) {
  const double pi = 3.14159265358979323846;
  const double f = std::pow(base, -2.0 * static_cast<double>(j) / static_cast<double>(dim));
  if (!yarn) return f;
  auto corr = [&](double r) {
    return static_cast<double>(dim) * std::log(original / (r * 2.0 * pi)) / (2.0 * std::log(base));
  };
  const double low = std::max(std::floor(corr(beta_fast)), 0.0);
  const double high = std::min(std::ceil(corr(beta_slow)), static_cast<double>(dim - 1));
  const double ramp = std::clamp((static_cast<double>(j) - low) / (high - low), 0.0, 1.0);
  return f / factor * ramp + f * (1.0 - ramp);
}

/// silu(g) * u in double.
inline double swiglu_reference(double g, double u) { return g / (1.0 + std::exp(-g)) * u; }

/// The bf16 neighbours distance: |a - b| in units of the bf16 ulp at b's magnitude.
inline double bf16_ulps(float a, double b) {
  if (b == 0.0) return a == 0.0f ? 0.0 : std::numeric_limits<double>::infinity();
  int e = 0;
  std::frexp(b, &e);  // |b| in [2^(e-1), 2^e): bf16 ulp there is 2^(e-1-7)
  return std::fabs(static_cast<double>(a) - b) / std::ldexp(1.0, e - 8);
}

}  // namespace dsa_test
