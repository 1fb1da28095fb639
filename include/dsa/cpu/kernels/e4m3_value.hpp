// fp8_e4m3::to_float on the code bits for the CPU kernels' row decodes: branch-free (the scalar
// form vectorises, the AVX-512 form widens 16 codes at once, the AVX2 one 8) and without a table.
//
// The exponent/mantissa fields move into fp32 position with the exponent rebiased (+120), which
// is the value of every normal code; a subnormal code (exponent field 0, value m 2^-9) then reads
// 2^-7 + m 2^-10, and adding (that - 2^-6) = m 2^-10 - 2^-7 gives m 2^-9 exactly (0 for code 0).
// Magnitude 0x7F is the format's NaN, returned as the quiet NaN with the code's sign.
// No subnormal fp32 is ever formed: a multiply by 2^120 of the magnitude shifted into an fp32
// pattern gives the same values, but its subnormal operands (codes of magnitude 1..7) cost a
// microcode assist of over 100 cycles each on x86, which made a 16-code decode with any such code
// in it dominate the lightning indexer's single-query scores; and DAZ/FTZ modes set by a host
// program cannot change the result.
#pragma once

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/isa.hpp"

#if DSA_CPU_HAS_AVX512 || DSA_CPU_HAS_AVX2
#include <immintrin.h>
#endif

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

DSA_FORCEINLINE float e4m3_value(std::uint32_t b) {
  const std::uint32_t mag = b & 0x7Fu;
  const float f = detail::bits_float((mag << 20) + (120u << 23));
  const std::uint32_t is_sub = 0u - static_cast<std::uint32_t>(mag < 8u);
  const float v = f + detail::bits_float(detail::float_bits(f - 0x1p-6f) & is_sub);
  const std::uint32_t bits = mag == 0x7Fu ? 0x7FC00000u : detail::float_bits(v);
  return detail::bits_float(bits | ((b & 0x80u) << 24));
}

#if DSA_CPU_HAS_AVX512
/// e4m3_value of 16 codes (one byte each).
DSA_FORCEINLINE __m512 e4m3_values16(__m128i codes) {
  const __m512i b = _mm512_cvtepu8_epi32(codes);
  const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7F));
  const __m512 f = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23)));
  const __mmask16 sub = _mm512_cmplt_epu32_mask(mag, _mm512_set1_epi32(8));
  const __m512 v = _mm512_mask_add_ps(f, sub, f, _mm512_sub_ps(f, _mm512_set1_ps(0x1p-6f)));
  const __mmask16 nan = _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7F));
  const __m512i bits = _mm512_mask_mov_epi32(_mm512_castps_si512(v), nan, _mm512_set1_epi32(0x7FC00000));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
  return _mm512_castsi512_ps(_mm512_or_si512(bits, sign));
}
#elif DSA_CPU_HAS_AVX2
/// e4m3_value of 8 codes (the low 8 bytes of `codes`), blends for the masks. Subnormal codes as
/// mantissa x 2^-9, an exact product of normal floats (no assist either): with AVX2 this form
/// measured 10% faster in act_dequant than the add of e4m3_value.
DSA_FORCEINLINE __m256 e4m3_values8(__m128i codes) {
  const __m256i b = _mm256_cvtepu8_epi32(codes);
  const __m256i mag = _mm256_and_si256(b, _mm256_set1_epi32(0x7F));
  const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23));
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-9f));
  __m256i m = _mm256_blendv_epi8(normal, _mm256_castps_si256(sub), _mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag));
  m = _mm256_blendv_epi8(m, _mm256_set1_epi32(0x7FC00000), _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7F)));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
  return _mm256_castsi256_ps(_mm256_or_si256(m, sign));
}
#endif

}  // namespace cpu_detail
DSA_NAMESPACE_END
