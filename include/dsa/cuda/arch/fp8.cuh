// Vectorised FP8 <-> fp32 conversions for kernels: four or sixteen codes from one 32- or 128-bit
// load.
//
// Every function here gives exactly the bits of the shared scalar numerics in core/types.hpp
// (dsa::fp8_e4m3, dsa::fp8_e5m2), which the CPU backend uses, so kernels stay bit-identical with
// it. The *_sw variants are those scalar conversions applied lane by lane; the unsuffixed ones may
// use the sm_89+ hardware instruction instead where it gives the same bits. Tests run both against
// the host on every e4m3 code.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/types.hpp"

// The hardware e4m3x2 -> f16x2 conversion exists from sm_89 (Ada, Hopper and later). Define
// DSA_CUDA_NO_HW_FP8_CVT to force the software path everywhere (e.g. to bisect a mismatch).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890 && !defined(DSA_CUDA_NO_HW_FP8_CVT)
#define DSA_CUDA_HAS_FP8_CVT 1
#else
#define DSA_CUDA_HAS_FP8_CVT 0
#endif

DSA_NAMESPACE_BEGIN
namespace cuda_arch {

// ---- decode -------------------------------------------------------------------------------------
// Lane order: the byte at the lowest address (bits 0-7 of the little-endian word) is .x.

DSA_HOST_DEVICE DSA_FORCEINLINE float e4m3_to_float(std::uint32_t byte) {
  return fp8_e4m3::from_bits(static_cast<std::uint8_t>(byte)).to_float();
}

DSA_HOST_DEVICE DSA_FORCEINLINE float2 e4m3x2_to_float2_sw(std::uint32_t packed) {
  return make_float2(e4m3_to_float(packed & 0xFFu), e4m3_to_float((packed >> 8) & 0xFFu));
}

DSA_HOST_DEVICE DSA_FORCEINLINE float4 e4m3x4_to_float4_sw(std::uint32_t packed) {
  return make_float4(e4m3_to_float(packed & 0xFFu), e4m3_to_float((packed >> 8) & 0xFFu),
                     e4m3_to_float((packed >> 16) & 0xFFu), e4m3_to_float(packed >> 24));
}

#if DSA_CUDA_HAS_FP8_CVT
namespace detail {
// One cvt.rn.f16x2.e4m3x2 and two exact f16 -> f32 widenings. Every e4m3 value is a normal f16
// (2^-9 >= 2^-14), so no flush-to-zero setting can change them. The one difference from the
// scalar numerics is the NaN payload, which is patched to the canonical quiet NaN (sign kept).
DSA_DEVICE DSA_FORCEINLINE float2 e4m3x2_to_float2_hw(std::uint32_t packed) {
  std::uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(static_cast<unsigned short>(packed & 0xFFFFu)));
  float lo, hi;
  asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"(static_cast<unsigned short>(h2 & 0xFFFFu)));
  asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"(static_cast<unsigned short>(h2 >> 16)));
  if ((packed & 0x7Fu) == 0x7Fu) lo = __uint_as_float(((packed & 0x80u) << 24) | 0x7FC00000u);
  if ((packed & 0x7F00u) == 0x7F00u) hi = __uint_as_float(((packed & 0x8000u) << 16) | 0x7FC00000u);
  return make_float2(lo, hi);
}
}  // namespace detail
#endif

/// Two e4m3 codes (bits 0-15 of `packed`) to floats.
DSA_DEVICE DSA_FORCEINLINE float2 e4m3x2_to_float2(std::uint32_t packed) {
#if DSA_CUDA_HAS_FP8_CVT
  return detail::e4m3x2_to_float2_hw(packed);
#else
  return e4m3x2_to_float2_sw(packed);
#endif
}

/// Four e4m3 codes (one 32-bit word) to floats.
DSA_DEVICE DSA_FORCEINLINE float4 e4m3x4_to_float4(std::uint32_t packed) {
#if DSA_CUDA_HAS_FP8_CVT
  const float2 a = detail::e4m3x2_to_float2_hw(packed);
  const float2 b = detail::e4m3x2_to_float2_hw(packed >> 16);
  return make_float4(a.x, a.y, b.x, b.y);
#else
  return e4m3x4_to_float4_sw(packed);
#endif
}

/// Sixteen e4m3 codes (one 128-bit load, e.g. from a 16-byte aligned uint4*) to floats.
DSA_DEVICE DSA_FORCEINLINE void e4m3x16_to_float(const uint4& packed, float (&out)[16]) {
  const std::uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 v = e4m3x4_to_float4(words[i]);
    out[4 * i + 0] = v.x;
    out[4 * i + 1] = v.y;
    out[4 * i + 2] = v.z;
    out[4 * i + 3] = v.w;
  }
}

DSA_HOST_DEVICE DSA_FORCEINLINE float4 e5m2x4_to_float4(std::uint32_t packed) {
  auto f = [](std::uint32_t b) { return fp8_e5m2::from_bits(static_cast<std::uint8_t>(b)).to_float(); };
  return make_float4(f(packed & 0xFFu), f((packed >> 8) & 0xFFu), f((packed >> 16) & 0xFFu), f(packed >> 24));
}

// ---- encode -------------------------------------------------------------------------------------
// Round to nearest even, saturating to +-448 (docs/design.md "Number formats"); the scalar numerics, lane by lane. The
// sm_89+ cvt.rn.satfinite.e4m3x2.f32 is not used: its NaN sign is not specified to match.

/// Four floats to four e4m3 codes packed into one word (.x in bits 0-7).
DSA_HOST_DEVICE DSA_FORCEINLINE std::uint32_t float4_to_e4m3x4(float4 v) {
  return static_cast<std::uint32_t>(fp8_e4m3::from_float_bits(v.x)) |
         (static_cast<std::uint32_t>(fp8_e4m3::from_float_bits(v.y)) << 8) |
         (static_cast<std::uint32_t>(fp8_e4m3::from_float_bits(v.z)) << 16) |
         (static_cast<std::uint32_t>(fp8_e4m3::from_float_bits(v.w)) << 24);
}

/// Sixteen floats to sixteen e4m3 codes, ready for one 128-bit store.
DSA_HOST_DEVICE DSA_FORCEINLINE uint4 float_to_e4m3x16(const float (&in)[16]) {
  uint4 r;
  r.x = float4_to_e4m3x4(make_float4(in[0], in[1], in[2], in[3]));
  r.y = float4_to_e4m3x4(make_float4(in[4], in[5], in[6], in[7]));
  r.z = float4_to_e4m3x4(make_float4(in[8], in[9], in[10], in[11]));
  r.w = float4_to_e4m3x4(make_float4(in[12], in[13], in[14], in[15]));
  return r;
}

}  // namespace cuda_arch
DSA_NAMESPACE_END
