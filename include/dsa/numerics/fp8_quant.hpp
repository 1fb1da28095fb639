// The arithmetic of the FP8 (E4M3) quantizers, shared by the CPU and CUDA backends.
//
// Activations (DeepSeek act_quant), per 1 x group_size group:
//   amax = max |x|;  amax = max(amax, 1e-4);  v = fl32(amax * fl32(1/448));
//   s = 2^ceil(log2 v) (scale_format::ue8m0) or v (scale_format::fp32);
//   q = e4m3(clamp(x / s, -448, 448)), x / s an IEEE fp32 division.
// Weights, per 128 x 128 block: s = max(amax, 1e-8) / 448 (IEEE fp32 division), q = e4m3(w / s).
// Dequantization: x = q * s in fp32.
//
// Non-finite inputs. amax is taken on the IEEE bit patterns of |x| (an integer max), so a NaN in
// a group makes amax NaN and +-inf makes it inf, as torch's amax does, independently of the
// reduction order. The scale is then non-finite (a NaN group gets the canonical quiet NaN
// 0x7FC00000, an inf group gets NaN for ue8m0 and inf for fp32), its codes are NaN (always 0x7F) or
// +-0, and the whole group dequantizes to NaN: a poisoned group is never silently finite.
#pragma once

#include <cstdint>
#include <type_traits>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"

DSA_NAMESPACE_BEGIN

/// How act_quant stores its group scales: a power of two (UE8M0-representable, the V3.2 default
/// and what the FP8 KV cache uses) or the plain fp32 quotient amax / 448.
enum class scale_format { ue8m0, fp32 };

/// Largest finite e4m3 magnitude.
inline constexpr float e4m3_max = 448.0f;
/// act_quant's floor on the group amax.
inline constexpr float act_quant_amax_floor = 1e-4f;
/// weight_quant's floor on the block amax.
inline constexpr float weight_quant_amax_floor = 1e-8f;
/// weight_quant's block edge.
inline constexpr index_t weight_quant_block = 128;

namespace detail {

inline constexpr std::uint32_t canonical_nan_bits = 0x7FC00000u;

DSA_HOST_DEVICE DSA_FORCEINLINE bool is_nan_bits(std::uint32_t abs_bits) { return abs_bits > 0x7F800000u; }

}  // namespace detail

/// |x| as fp32 bits. For non-negative floats the bit patterns order like the values, with every
/// NaN above inf, so an unsigned max over these is a NaN-propagating amax.
template <class T>
DSA_HOST_DEVICE DSA_FORCEINLINE std::uint32_t abs_bits(T x) {
  if constexpr (std::is_same_v<T, bf16>) {
    return static_cast<std::uint32_t>(x.bits & 0x7FFFu) << 16;
  } else {
    return detail::float_bits(to_float(x)) & 0x7FFFFFFFu;
  }
}

/// The NaN-propagating absolute maximum of x[0, len) (0 for len = 0).
template <class T>
DSA_HOST_DEVICE inline float abs_max(const T* x, index_t len) {
  std::uint32_t m = 0;
  for (index_t i = 0; i < len; ++i) {
    const std::uint32_t a = abs_bits(x[i]);
    m = a > m ? a : m;
  }
  return detail::bits_float(m);
}

/// The act_quant group scale for a group amax (>= 0 or NaN).
DSA_HOST_DEVICE inline float act_quant_scale(float amax, scale_format format) {
  const std::uint32_t a = detail::float_bits(amax) & 0x7FFFFFFFu;
  if (detail::is_nan_bits(a)) return detail::bits_float(detail::canonical_nan_bits);
  const float m = amax > act_quant_amax_floor ? amax : act_quant_amax_floor;
  const float v = m * (1.0f / e4m3_max);
  if (format == scale_format::fp32) return v;
  return ue8m0::ceil_pow2(v).to_float();  // inf -> exponent 0xFF -> NaN
}

/// The weight_quant block scale (a multiplier: w = q * s) for a block amax (>= 0 or NaN).
DSA_HOST_DEVICE inline float weight_quant_scale(float amax) {
  const std::uint32_t a = detail::float_bits(amax) & 0x7FFFFFFFu;
  if (detail::is_nan_bits(a)) return detail::bits_float(detail::canonical_nan_bits);
  const float m = amax > weight_quant_amax_floor ? amax : weight_quant_amax_floor;
  return detail::div_rn(m, e4m3_max);
}

/// e4m3(clamp(x / s, -448, 448)) with an IEEE division. A NaN quotient gives the code 0x7F
/// whatever NaN the hardware's division returns, so both backends agree bit for bit.
DSA_HOST_DEVICE DSA_FORCEINLINE fp8_e4m3 quantize_e4m3(float x, float s) {
  float v = detail::div_rn(x, s);
  if (detail::is_nan_bits(detail::float_bits(v) & 0x7FFFFFFFu)) return fp8_e4m3::from_bits(0x7Fu);
  v = v < -e4m3_max ? -e4m3_max : v;
  v = v > e4m3_max ? e4m3_max : v;
  return fp8_e4m3(v);
}

/// q * s in fp32.
DSA_HOST_DEVICE DSA_FORCEINLINE float dequantize_e4m3(fp8_e4m3 q, float s) { return q.to_float() * s; }

/// Quantizes one activation group x[0, len) into q[0, len) and returns its scale.
template <class T>
DSA_HOST_DEVICE inline float act_quant_group(const T* x, index_t len, fp8_e4m3* q, scale_format format) {
  const float s = act_quant_scale(abs_max(x, len), format);
  for (index_t i = 0; i < len; ++i) q[i] = quantize_e4m3(to_float(x[i]), s);
  return s;
}

DSA_NAMESPACE_END
