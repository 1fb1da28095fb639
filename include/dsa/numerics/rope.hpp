// The arithmetic of rotary position embeddings with YaRN (DeepSeek `precompute_freqs_cis`,
// `apply_rotary_emb`), shared by the CPU and CUDA backends.
//
// Frequencies, j in [0, dim/2), with the reference's fp32 rounding points:
//   e_j = fl32(2j / dim),  f_j = fl32(1 / fl32(base^e_j))
// YaRN, when max_position > original_max_position:
//   c(r)  = dim * ln(original / (2 pi r)) / (2 ln base)                       (double)
//   low   = max(floor(c(beta_fast)), 0),  high = min(ceil(c(beta_slow)), dim - 1)
//           (high += 0.001 when they are equal)
//   ramp  = clamp(fl32(fl32(j - low) / fl32(high - low)), 0, 1),  smooth = fl32(1 - ramp)
//   f'_j  = fl32(fl32(fl32(f_j / factor) * fl32(1 - smooth)) + fl32(f_j * smooth))
// Rotation of the pair (a, b) of position p:
//   angle = fl32(fl32(p) * f'_j);  c = fl32(cos(angle)), s = fl32(sin(angle)), evaluated in double;
//   (a', b') = (fl32(a c - b s), fl32(a s + b c)), products exact and the sums rounded in double.
//
// Why cos/sin in double: fp32 sinf/cosf differ between libm versions and CUDA by an ulp or two,
// so an fp32 evaluation cannot be reproduced across backends. Rounding the double-precision
// value (glibc: < 1 double ulp; CUDA: <= 2 double ulps) to fp32 gives the correctly rounded
// fp32 cos/sin unless the exact value lies within ~2^-52 relative of an fp32 rounding boundary,
// so the backends agree except with probability about 2^-28 per value; bit-exact agreement of
// transcendental functions across libraries is not guaranteed and is not claimed. Likewise
// base^e is evaluated with the double pow and rounded to fp32.
//
// Why the rotation in double: a bf16 (or fp32) value times an fp32 cos/sin is exact in double, so
// a c - b s has one double rounding before the fp32 one, whether or not the compiler fuses it.
// The reference's complex64 product rounds each product to fp32 first; the two differ by at most
// about an fp32 ulp of the larger product, far below the bf16 output rounding.
#pragma once

#include <cmath>
#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/fp32_ops.hpp"

DSA_NAMESPACE_BEGIN

/// Rotary embedding configuration (Hugging Face names in brackets): dim = the rotated width
/// (qk_rope_head_dim), base (rope_theta), and YaRN's factor, original_max_position
/// (original_max_position_embeddings), max_position (max_position_embeddings), beta_fast and
/// beta_slow. YaRN is on exactly when max_position > original_max_position.
struct rope_config {
  index_t dim = 64;
  float base = 10000;
  float factor = 1;
  index_t original_max_position = 4096;
  index_t max_position = 4096;
  float beta_fast = 32, beta_slow = 1;
};

/// Which elements form a rotated pair: `interleaved` = (2j, 2j+1), the MLA layout of DeepSeek;
/// `half` = (j, j + dim/2), the non-interleaved layout of the V3.2 indexer (and of NeoX/Llama).
enum class rope_layout { interleaved, half };

/// True when YaRN frequency interpolation (and the mscale attention factor) applies.
DSA_HOST_DEVICE DSA_FORCEINLINE bool rope_yarn_enabled(const rope_config& c) {
  return c.max_position > c.original_max_position;
}

/// YaRN's correction dimension c(r) = dim * ln(original / (2 pi r)) / (2 ln base), in double.
DSA_HOST_DEVICE inline double rope_yarn_correction_dim(const rope_config& c, double rotations) {
  constexpr double two_pi = 6.283185307179586476925286766559;
  return static_cast<double>(c.dim) *
         std::log(static_cast<double>(c.original_max_position) / (rotations * two_pi)) /
         (2.0 * std::log(static_cast<double>(c.base)));
}

/// The ramp's end points [low, high] over the frequency index, as the reference clamps them.
struct rope_yarn_range {
  double low;
  double high;
};

DSA_HOST_DEVICE inline rope_yarn_range rope_yarn_correction_range(const rope_config& c) {
  double low = std::floor(rope_yarn_correction_dim(c, static_cast<double>(c.beta_fast)));
  double high = std::ceil(rope_yarn_correction_dim(c, static_cast<double>(c.beta_slow)));
  low = low < 0.0 ? 0.0 : low;
  const double top = static_cast<double>(c.dim - 1);
  high = high > top ? top : high;
  if (low == high) high += 0.001;  // the reference's guard against a zero-width ramp
  return {low, high};
}

/// The unscaled frequency f_j = fl32(1 / fl32(base^fl32(2j / dim))).
DSA_HOST_DEVICE inline float rope_base_inv_freq(const rope_config& c, index_t j) {
  const float e = detail::div_rn(static_cast<float>(2 * j), static_cast<float>(c.dim));
  const float p = static_cast<float>(std::pow(static_cast<double>(c.base), static_cast<double>(e)));
  return detail::div_rn(1.0f, p);
}

/// YaRN's ramp weight of frequency j toward f_j / factor, in [0, 1].
DSA_HOST_DEVICE inline float rope_yarn_ramp(const rope_yarn_range& r, index_t j) {
  const float num = static_cast<float>(j) - static_cast<float>(r.low);
  const float v = detail::div_rn(num, static_cast<float>(r.high - r.low));
  return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
}

/// The frequency f'_j actually used for pair j (YaRN-interpolated when enabled).
DSA_HOST_DEVICE inline float rope_inv_freq(const rope_config& c, index_t j) {
  const float f = rope_base_inv_freq(c, j);
  if (!rope_yarn_enabled(c)) return f;
  const float smooth = 1.0f - rope_yarn_ramp(rope_yarn_correction_range(c), j);
  return detail::mul_rn(detail::div_rn(f, c.factor), 1.0f - smooth) + detail::mul_rn(f, smooth);
}

/// YaRN's attention temperature factor 0.1 * mscale * ln(factor) + 1 when YaRN is on, else 1
/// (DeepSeek multiplies the softmax scale by its square). `mscale` is rope_scaling.mscale.
DSA_HOST_DEVICE inline double rope_yarn_mscale(const rope_config& c, double mscale = 1.0) {
  if (!rope_yarn_enabled(c)) return 1.0;
  return 0.1 * mscale * std::log(static_cast<double>(c.factor)) + 1.0;
}

/// The MLA softmax scale fl32(head_dim^-0.5 * m * m), m = rope_yarn_mscale, in the reference's
/// double arithmetic rounded once.
DSA_HOST_DEVICE inline float rope_yarn_softmax_scale(index_t qk_head_dim, const rope_config& c,
                                                     double mscale = 1.0) {
  const double m = rope_yarn_mscale(c, mscale);
  return static_cast<float>(std::pow(static_cast<double>(qk_head_dim), -0.5) * m * m);
}

/// cos and sin of one rotation angle.
struct rope_cos_sin {
  float cos;
  float sin;
};

/// angle = fl32(fl32(position) * inv_freq); cos and sin evaluated in double, rounded to fp32.
DSA_HOST_DEVICE inline rope_cos_sin rope_cos_sin_at(std::int32_t position, float inv_freq) {
  const float angle = static_cast<float>(position) * inv_freq;
  const double a = static_cast<double>(angle);
  return {static_cast<float>(std::cos(a)), static_cast<float>(std::sin(a))};
}

/// Rotates the pair (re, im) by the angle whose cos/sin are given: (re c - im s, re s + im c).
DSA_HOST_DEVICE DSA_FORCEINLINE void rope_rotate(float& re, float& im, rope_cos_sin cs) {
  const double a = static_cast<double>(re);
  const double b = static_cast<double>(im);
  const double c = static_cast<double>(cs.cos);
  const double s = static_cast<double>(cs.sin);
  re = static_cast<float>(a * c - b * s);
  im = static_cast<float>(a * s + b * c);
}

DSA_NAMESPACE_END
