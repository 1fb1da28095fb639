// Loading and storing 8 fp32 lanes of an AVX register as float or bf16: avx512_io.hpp for the
// kernels' AVX2 paths (x86-64-v3). Narrowing to bf16 is bf16::from_float_bits on every lane (round
// to nearest even, NaN kept quiet), so a kernel's results do not depend on which path it takes.
// Empty unless DSA_CPU_HAS_AVX2 (and unused where DSA_CPU_HAS_AVX512 gives the wider paths).
#pragma once

#include "dsa/cpu/arch/isa.hpp"

#if DSA_CPU_HAS_AVX2
#include <immintrin.h>

#include "dsa/core/config.hpp"
#include "dsa/core/types.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

/// x[0, 8) widened to fp32 (bf16 exactly: its bits in the upper half).
DSA_FORCEINLINE __m256 avx2_load8(const float* x) { return _mm256_loadu_ps(x); }
DSA_FORCEINLINE __m256 avx2_load8(const bf16* x) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x))), 16));
}

/// v as 8 bf16 patterns, one in the low half of each 32-bit lane, like bf16::from_float_bits.
DSA_FORCEINLINE __m256i avx2_narrow_lanes(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i hi = _mm256_srli_epi32(u, 16);
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), _mm256_and_si256(hi, _mm256_set1_epi32(1))), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}

/// (lo, hi), two registers of 8 consecutive values, narrowed to 16 consecutive bf16.
DSA_FORCEINLINE __m256i avx2_narrow16(__m256 lo, __m256 hi) {
  // packus interleaves the 128-bit halves (lo 0-3, hi 0-3, lo 4-7, hi 4-7); the permute restores
  // the order. Every lane is < 2^16, so the unsigned saturation never applies.
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(avx2_narrow_lanes(lo), avx2_narrow_lanes(hi)), 0xD8);
}

/// v narrowed to 8 bf16.
DSA_FORCEINLINE __m128i avx2_narrow8(__m256 v) {
  const __m256i lanes = avx2_narrow_lanes(v);
  return _mm_packus_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
}

/// y[0, 8) = v, narrowed like bf16::from_float_bits for bf16.
DSA_FORCEINLINE void avx2_store8(float* y, __m256 v) { _mm256_storeu_ps(y, v); }
DSA_FORCEINLINE void avx2_store8(bf16* y, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(y), avx2_narrow8(v));
}

/// y[0, 8) = v narrowed, as one non-temporal store (cpu/arch/streaming_stores.hpp): y 16-byte
/// aligned. bf16 only, as avx512_stream32: fp32 rows are not streamed.
DSA_FORCEINLINE void avx2_stream8(bf16* y, __m256 v) {
  _mm_stream_si128(reinterpret_cast<__m128i*>(y), avx2_narrow8(v));
}

/// The lanes of v that hold a NaN, as a bit mask (0 when none).
DSA_FORCEINLINE int avx2_nan_lanes(__m256 v) { return _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)); }

}  // namespace cpu_detail
DSA_NAMESPACE_END

#endif
