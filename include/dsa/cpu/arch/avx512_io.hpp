// Loading and storing 16 fp32 lanes of an AVX-512 register as float or bf16, shared by the CPU
// kernels that keep fp32 in registers (Hadamard, FP8 quantizers). Narrowing to bf16 is
// bf16::from_float_bits on every lane (round to nearest even, NaN kept quiet), so a kernel's
// results do not depend on which of these paths it takes. Empty unless DSA_CPU_HAS_AVX512.
#pragma once

#include "dsa/cpu/arch/isa.hpp"

#if DSA_CPU_HAS_AVX512
#include <immintrin.h>

#include "dsa/core/config.hpp"
#include "dsa/core/types.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

/// x[0, 16) widened to fp32 (bf16 exactly: its bits in the upper half).
DSA_FORCEINLINE __m512 avx512_load16(const float* x) { return _mm512_loadu_ps(x); }
DSA_FORCEINLINE __m512 avx512_load16(const bf16* x) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))), 16));
}

/// v narrowed to 16 bf16 like bf16::from_float_bits on every lane.
DSA_FORCEINLINE __m256i avx512_narrow16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), _mm512_and_si512(hi, _mm512_set1_epi32(1))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40))));
}

/// (lo, hi), two registers of 16 consecutive values, narrowed to 32 consecutive bf16.
DSA_FORCEINLINE __m512i avx512_narrow32(__m512 lo, __m512 hi) {
#if DSA_CPU_HAS_AVX512BF16
  // VCVTNE2PS2BF16 rounds to nearest even and quiets NaNs exactly as bf16::from_float_bits does
  // (checked over all 2^32 inputs), one instruction for 32 lanes instead of about ten per 16,
  // but it flushes subnormal inputs to zero: registers holding one take the integer path.
  constexpr int subnormal = 0x20;  // VFPCLASSPS category
  if ((_mm512_fpclass_ps_mask(lo, subnormal) | _mm512_fpclass_ps_mask(hi, subnormal)) == 0) {
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
  }
#endif
  return _mm512_inserti64x4(_mm512_castsi256_si512(avx512_narrow16(lo)), avx512_narrow16(hi), 1);
}

/// y[0, 16) = v, narrowed like bf16::from_float_bits for bf16.
DSA_FORCEINLINE void avx512_store16(float* y, __m512 v) { _mm512_storeu_ps(y, v); }
DSA_FORCEINLINE void avx512_store16(bf16* y, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), avx512_narrow16(v));
}

/// y[0, 32) = (lo, hi), two registers of 16 consecutive values.
DSA_FORCEINLINE void avx512_store32(float* y, __m512 lo, __m512 hi) {
  _mm512_storeu_ps(y, lo);
  _mm512_storeu_ps(y + 16, hi);
}
DSA_FORCEINLINE void avx512_store32(bf16* y, __m512 lo, __m512 hi) { _mm512_storeu_si512(y, avx512_narrow32(lo, hi)); }

/// avx512_store32 as one non-temporal store (cpu/arch/streaming_stores.hpp): y must be 64-byte
/// aligned.
DSA_FORCEINLINE void avx512_stream32(bf16* y, __m512 lo, __m512 hi) {
  _mm512_stream_si512(reinterpret_cast<__m512i*>(y), avx512_narrow32(lo, hi));
}

}  // namespace cpu_detail
DSA_NAMESPACE_END

#endif
