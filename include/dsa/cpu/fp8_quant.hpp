// CPU backend of the FP8 quantizers: the shared numerics, split over independent rows (or
// 128-row block rows for weights), so results are bit-identical for every thread count.
//
// With AVX-512 the group loops run 16 elements per instruction: the amax is an unsigned max of
// the |x| bit patterns (NaN-propagating, as numerics/fp8_quant.hpp defines it), the encode is
// the branch-free integer form of fp8_quant_encode_clamped lane by lane, and the decode is the
// kernels' e4m3 decode (kernels/e4m3_value.hpp: each value built from its code's bits, no table). Every lane performs exactly the scalar
// operations, so the results are bit-identical to the scalar path (tested over every bf16
// pattern, special values and random floats, and odd group lengths). With AVX2 (x86-64-v3) the
// same loops run 8 lanes per instruction, blends in place of the mask registers.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/avx2_io.hpp"
#include "dsa/cpu/arch/avx512_io.hpp"
#include "dsa/cpu/arch/isa.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/cpu/arch/prefetch.hpp"
#include "dsa/cpu/kernels/e4m3_value.hpp"
#include "dsa/numerics/fp8_quant.hpp"
#include "dsa/ops/fp8_quant.hpp"

#if DSA_CPU_HAS_AVX512
#include <immintrin.h>
#endif

DSA_NAMESPACE_BEGIN

namespace cpu_detail {

// Rows per task so that a task touches about 64K elements.
inline index_t fp8_quant_grain(index_t cols) { return std::max<index_t>(1, (index_t{1} << 16) / std::max<index_t>(cols, 1)); }

// fp8_e4m3(v).bits for the already clamped quotient v (|v| <= 448 or NaN), without branches so
// that the quantize loops vectorise. Bit-identical to the conversion of core/types.hpp
// (tested): normal codes round the 20 dropped mantissa bits to nearest even on the integer
// pattern; below 2^-6, adding 2^14 makes the FPU round |v| to a multiple of 2^-9 (the e4m3
// subnormal step) under the default round-to-nearest-even mode, and the low bits of the sum
// count those steps. A NaN gives 0x7F, as quantize_e4m3 does.
DSA_FORCEINLINE std::uint8_t fp8_quant_encode_clamped(float v) {
  const std::uint32_t u = detail::float_bits(v);
  const std::uint32_t sign = (u >> 24) & 0x80u;
  const std::uint32_t a = u & 0x7FFFFFFFu;
  const std::uint32_t normal = ((a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20) - ((127u - 7u) << 3);
  const std::uint32_t subnormal = detail::float_bits(detail::bits_float(a) + 16384.0f) - 0x46800000u;
  std::uint32_t code = a >= 0x3C800000u ? normal : subnormal;
  code = code > 0x7Eu ? 0x7Eu : code;
  return static_cast<std::uint8_t>(a > 0x7F800000u ? 0x7Fu : (sign | code));
}

#if DSA_CPU_HAS_AVX2
// The 16-bit paths of bf16 groups with a power-of-two scale 2^k (fp8_quant_bf16_pow2_*,
// fp8_dequant_bf16_pow2_*) run twice the lanes of the fp32 ones, which they equal bit for bit:
// - Quantize: x * 2^-k is exact, so its bf16 pattern is x's minus k << 7 (saturating at 0 and
//   at 0x7FFF, both ending where the fp32 path ends: code 0 and the 448 clamp), and with the low
//   16 bits zero the fp32 encode's normal formula runs on 16 bits. Blocks that hold an e4m3
//   subnormal quotient (2^-10 < |v| < 2^-6: at or below 2^-10 the code is 0, which the normal
//   formula gives too), an inf or a NaN go through the fp32 encode instead. k >= -116 keeps every
//   bf16 subnormal x below 2^-10 after the scaling (its pattern is not exponent + mantissa).
// - Dequantize, -117 <= k <= 119: every product is a normal float with at most 4 significant
//   bits, so it and its bf16 are exact; the pattern is the code's bits moved into place (normal
//   codes), a lookup of the subnormal codes' patterns (a byte shuffle selecting both bytes of a
//   16-bit entry), or the NaN that the fp32 path gives.
// Each returns how many leading values it converted; the fp32 loops do the rest.
inline constexpr int fp8_bf16_pow2_quant_min_k = -116;
inline constexpr int fp8_bf16_pow2_dequant_min_k = -117, fp8_bf16_pow2_dequant_max_k = 119;

// bf16 patterns of the subnormal codes' values m x 2^(k - 9), m = 0..7.
DSA_FORCEINLINE __m128i e4m3_subnormal_bf16_patterns(int k) {
  const __m128i at_k0 = _mm_setr_epi16(0, 0x3B00, 0x3B80, 0x3BC0, 0x3C00, 0x3C20, 0x3C40, 0x3C60);
  const __m128i nonzero = _mm_setr_epi16(0, -1, -1, -1, -1, -1, -1, -1);
  return _mm_add_epi16(at_k0, _mm_and_si128(nonzero, _mm_set1_epi16(static_cast<short>(k << 7))));
}
#endif

#if DSA_CPU_HAS_AVX512
// The clamp of fp8_quant_group and fp8_quant_encode_clamped on 16 lanes; the 16 codes. The
// clamp to +-448 is folded into the final min(code, 0x7E): the normal-range formula is monotonic
// in |v| and gives 0x7E at 448, so every |v| >= 448 (inf included) ends at 0x7E either way.
DSA_FORCEINLINE __m128i fp8_quant_encode16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
  // Normal range: round the 20 dropped mantissa bits to nearest even, rebias by 127 - 7
  // (subtracted before the shift: a >= 2^-6 keeps the sum positive).
  const __m512i normal = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(0x7FFFF - ((127 - 7) << 23))),
                       _mm512_and_si512(_mm512_srli_epi32(a, 20), _mm512_set1_epi32(1))),
      20);
  // Below 2^-6: the FPU rounds |v| + 2^14 to a multiple of 2^-9 (round to nearest even).
  const __m512i subnormal = _mm512_sub_epi32(
      _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(16384.0f))), _mm512_set1_epi32(0x46800000));
  __m512i code = _mm512_mask_mov_epi32(subnormal, _mm512_cmpge_epu32_mask(a, _mm512_set1_epi32(0x3C800000)), normal);
  code = _mm512_min_epu32(code, _mm512_set1_epi32(0x7E));
  // | sign (bit 31 -> bit 7); NaN -> 0x7F whatever its sign.
  code = _mm512_ternarylogic_epi32(code, _mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80), 0xF8);  // a | (b & c)
  code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7F800000)), _mm512_set1_epi32(0x7F));
  return _mm512_cvtepi32_epi8(code);
}

// The 16-bit quantize path (above) on 32 lanes.
inline index_t fp8_quant_bf16_pow2_avx512(const bf16* x, index_t len, int k, fp8_e4m3* q) {
  if (k < fp8_bf16_pow2_quant_min_k) return 0;
  const __m512i up = _mm512_set1_epi16(static_cast<short>(k < 0 ? -k << 7 : 0));
  const __m512i down = _mm512_set1_epi16(static_cast<short>(k > 0 ? k << 7 : 0));
  const __m512 inv = _mm512_castsi512_ps(_mm512_set1_epi32((127 - k) << 23));
  index_t i = 0;
  for (; i + 32 <= len; i += 32) {
    const __m512i raw = _mm512_loadu_si512(static_cast<const void*>(x + i));
    const __m512i a = _mm512_and_si512(raw, _mm512_set1_epi16(0x7FFF));
    const __m512i v = _mm512_subs_epu16(_mm512_adds_epi16(a, up), down);  // |x * 2^-k|'s pattern
    const __mmask32 special =
        _mm512_mask_cmpgt_epi16_mask(_mm512_cmpgt_epi16_mask(v, _mm512_set1_epi16(117 << 7)), _mm512_set1_epi16(121 << 7), v) |
        _mm512_cmpgt_epi16_mask(a, _mm512_set1_epi16(0x7F7F));
    if (special == 0) [[likely]] {
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi16(1));
      __m512i code = _mm512_srli_epi16(_mm512_add_epi16(_mm512_add_epi16(v, _mm512_set1_epi16(7)), lsb), 4);
      code = _mm512_min_epu16(_mm512_subs_epu16(code, _mm512_set1_epi16((127 - 7) << 3)), _mm512_set1_epi16(0x7E));
      code = _mm512_ternarylogic_epi32(code, _mm512_srli_epi16(raw, 8), _mm512_set1_epi16(0x80), 0xF8);  // a | (b & c)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), _mm512_cvtepi16_epi8(code));
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), fp8_quant_encode16(_mm512_mul_ps(avx512_load16(x + i), inv)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i + 16),
                       fp8_quant_encode16(_mm512_mul_ps(avx512_load16(x + i + 16), inv)));
    }
  }
  return i;
}

// The 16-bit dequantize path (above) on 32 lanes.
inline index_t fp8_dequant_bf16_pow2_avx512(const fp8_e4m3* q, index_t len, int k, bf16* y) {
  if (k < fp8_bf16_pow2_dequant_min_k || k > fp8_bf16_pow2_dequant_max_k) return 0;
  const __m512i sub_table = _mm512_broadcast_i32x4(e4m3_subnormal_bf16_patterns(k));
  const __m512i bias = _mm512_set1_epi16(static_cast<short>((120 + k) << 7));
  index_t i = 0;
  for (; i + 32 <= len; i += 32) {
    const __m512i c = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + i)));
    const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi16(0x7F));
    __m512i v = _mm512_add_epi16(_mm512_slli_epi16(mag, 4), bias);
    // Byte indices 2m and 2m + 1 select subnormal entry m (only lanes with m < 8 use it).
    const __m512i index = _mm512_add_epi16(_mm512_mullo_epi16(mag, _mm512_set1_epi16(0x0202)), _mm512_set1_epi16(0x0100));
    v = _mm512_mask_blend_epi16(_mm512_cmplt_epu16_mask(mag, _mm512_set1_epi16(8)), v, _mm512_shuffle_epi8(sub_table, index));
    v = _mm512_mask_mov_epi16(v, _mm512_cmpeq_epi16_mask(mag, _mm512_set1_epi16(0x7F)), _mm512_set1_epi16(0x7FC0));
    v = _mm512_ternarylogic_epi32(v, _mm512_slli_epi16(c, 8), _mm512_set1_epi16(static_cast<short>(0x8000)), 0xF8);
    _mm512_storeu_si512(static_cast<void*>(y + i), v);
  }
  return i;
}

#elif DSA_CPU_HAS_AVX2
// fp8_quant_encode16 on 8 lanes (x86-64-v3): the same integer formulas, with blends for the
// masks. |v|'s pattern has its sign bit clear, so the signed compares order it as unsigned.
DSA_FORCEINLINE __m256i fp8_quant_encode8(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i normal = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(0x7FFFF - ((127 - 7) << 23))),
                       _mm256_and_si256(_mm256_srli_epi32(a, 20), _mm256_set1_epi32(1))),
      20);
  const __m256i subnormal = _mm256_sub_epi32(
      _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(16384.0f))), _mm256_set1_epi32(0x46800000));
  __m256i code = _mm256_blendv_epi8(subnormal, normal, _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x3C7FFFFF)));
  code = _mm256_min_epu32(code, _mm256_set1_epi32(0x7E));
  code = _mm256_or_si256(code, _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80)));
  return _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7F), _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000)));
}

// Two registers of 8 codes (one per 32-bit lane, < 256) as 16 consecutive bytes.
DSA_FORCEINLINE __m128i fp8_quant_pack16(__m256i lo, __m256i hi) {
  // packus interleaves the 128-bit halves; the permutes restore the order.
  const __m256i words = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi16(words, words), 0x08));
}

// q[0, 16) = the codes of x[0, 16) * iv (iv = 1 / s for a power-of-two s: fp8_quant_group).
template <class T>
DSA_FORCEINLINE void fp8_quant_pow2_16(const T* x, __m256 iv, fp8_e4m3* q) {
  const __m256i lo = fp8_quant_encode8(_mm256_mul_ps(avx2_load8(x), iv));
  const __m256i hi = fp8_quant_encode8(_mm256_mul_ps(avx2_load8(x + 8), iv));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), fp8_quant_pack16(lo, hi));
}

// The 16-bit quantize path (above) on 16 lanes, blocks of 32.
inline index_t fp8_quant_bf16_pow2_avx2(const bf16* x, index_t len, int k, fp8_e4m3* q) {
  if (k < fp8_bf16_pow2_quant_min_k) return 0;
  const __m256i up = _mm256_set1_epi16(static_cast<short>(k < 0 ? -k << 7 : 0));
  const __m256i down = _mm256_set1_epi16(static_cast<short>(k > 0 ? k << 7 : 0));
  const __m256 inv = _mm256_castsi256_ps(_mm256_set1_epi32((127 - k) << 23));
  auto encode16 = [&](__m256i raw, __m256i& special) {
    const __m256i a = _mm256_and_si256(raw, _mm256_set1_epi16(0x7FFF));
    const __m256i v = _mm256_subs_epu16(_mm256_adds_epi16(a, up), down);  // |x * 2^-k|'s pattern
    special = _mm256_or_si256(special, _mm256_and_si256(_mm256_cmpgt_epi16(v, _mm256_set1_epi16(117 << 7)),
                                                        _mm256_cmpgt_epi16(_mm256_set1_epi16(121 << 7), v)));
    special = _mm256_or_si256(special, _mm256_cmpgt_epi16(a, _mm256_set1_epi16(0x7F7F)));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi16(1));
    __m256i code = _mm256_srli_epi16(_mm256_add_epi16(_mm256_add_epi16(v, _mm256_set1_epi16(7)), lsb), 4);
    code = _mm256_min_epu16(_mm256_subs_epu16(code, _mm256_set1_epi16((127 - 7) << 3)), _mm256_set1_epi16(0x7E));
    return _mm256_or_si256(code, _mm256_and_si256(_mm256_srli_epi16(raw, 8), _mm256_set1_epi16(0x80)));
  };
  index_t i = 0;
  for (; i + 32 <= len; i += 32) {
    __m256i special = _mm256_setzero_si256();
    const __m256i lo = encode16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), special);
    const __m256i hi = encode16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 16)), special);
    if (_mm256_testz_si256(special, special)) [[likely]] {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i),
                          _mm256_permute4x64_epi64(_mm256_packus_epi16(lo, hi), 0xD8));
    } else {
      fp8_quant_pow2_16(x + i, inv, q + i);
      fp8_quant_pow2_16(x + i + 16, inv, q + i + 16);
    }
  }
  return i;
}

// The 16-bit dequantize path (above) on 16 lanes.
inline index_t fp8_dequant_bf16_pow2_avx2(const fp8_e4m3* q, index_t len, int k, bf16* y) {
  if (k < fp8_bf16_pow2_dequant_min_k || k > fp8_bf16_pow2_dequant_max_k) return 0;
  const __m256i sub_table = _mm256_broadcastsi128_si256(e4m3_subnormal_bf16_patterns(k));
  const __m256i bias = _mm256_set1_epi16(static_cast<short>((120 + k) << 7));
  index_t i = 0;
  for (; i + 16 <= len; i += 16) {
    const __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i)));
    const __m256i mag = _mm256_and_si256(c, _mm256_set1_epi16(0x7F));
    __m256i v = _mm256_add_epi16(_mm256_slli_epi16(mag, 4), bias);
    // Byte indices 2m and 2m + 1 select subnormal entry m (only lanes with m < 8 use it).
    const __m256i index = _mm256_add_epi16(_mm256_mullo_epi16(mag, _mm256_set1_epi16(0x0202)), _mm256_set1_epi16(0x0100));
    v = _mm256_blendv_epi8(v, _mm256_shuffle_epi8(sub_table, index), _mm256_cmpgt_epi16(_mm256_set1_epi16(8), mag));
    v = _mm256_blendv_epi8(v, _mm256_set1_epi16(0x7FC0), _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7F)));
    v = _mm256_or_si256(v, _mm256_slli_epi16(_mm256_and_si256(c, _mm256_set1_epi16(0x80)), 8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), v);
  }
  return i;
}
#endif

// abs_max(x, len) of numerics/fp8_quant.hpp: the unsigned max of the |x| bit patterns.
template <class T>
float fp8_quant_abs_max(const T* x, index_t len) {
  std::uint32_t m = 0;
  index_t i = 0;
#if DSA_CPU_HAS_AVX512
  if constexpr (std::is_same_v<T, bf16>) {
    // On the 16-bit patterns directly, 32 per instruction (abs_bits is the same max shifted).
    if (len >= 32) {
      const __m512i abs_mask = _mm512_set1_epi16(0x7FFF);
      __m512i mv = _mm512_setzero_si512();
      for (; i + 32 <= len; i += 32) {
        mv = _mm512_max_epu16(mv, _mm512_and_si512(_mm512_loadu_si512(static_cast<const void*>(x + i)), abs_mask));
      }
      const __m512i wide = _mm512_max_epu32(_mm512_srli_epi32(mv, 16), _mm512_and_si512(mv, _mm512_set1_epi32(0xFFFF)));
      m = _mm512_reduce_max_epu32(wide) << 16;
    }
  } else {
    if (len >= 16) {
      const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
      __m512i mv = _mm512_setzero_si512();
      for (; i + 16 <= len; i += 16) mv = _mm512_max_epu32(mv, _mm512_and_si512(_mm512_castps_si512(avx512_load16(x + i)), abs_mask));
      m = _mm512_reduce_max_epu32(mv);
    }
  }
#elif DSA_CPU_HAS_AVX2
  __m256i mv = _mm256_setzero_si256();
  if constexpr (std::is_same_v<T, bf16>) {
    for (; i + 16 <= len; i += 16) {
      mv = _mm256_max_epu16(mv, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)),
                                                 _mm256_set1_epi16(0x7FFF)));
    }
    mv = _mm256_max_epu32(_mm256_srli_epi32(mv, 16), _mm256_and_si256(mv, _mm256_set1_epi32(0xFFFF)));
    mv = _mm256_slli_epi32(mv, 16);
  } else {
    for (; i + 8 <= len; i += 8) {
      mv = _mm256_max_epu32(mv, _mm256_and_si256(_mm256_castps_si256(_mm256_loadu_ps(x + i)), _mm256_set1_epi32(0x7FFFFFFF)));
    }
  }
  __m128i m4 = _mm_max_epu32(_mm256_castsi256_si128(mv), _mm256_extracti128_si256(mv, 1));
  m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0x4E));
  m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0xB1));
  m = static_cast<std::uint32_t>(_mm_cvtsi128_si32(m4));
#endif
  for (; i < len; ++i) {
    const std::uint32_t a = abs_bits(x[i]);
    m = a > m ? a : m;
  }
  return detail::bits_float(m);
}

// quantize_e4m3(x, s) for a whole group: the quotient and clamp of numerics/fp8_quant.hpp, then
// the branch-free encode. A power-of-two s with a normal reciprocal (every ue8m0 scale) divides
// by multiplying with 1 / s: both round the same exact value x * 2^-k, so the bits agree.
template <class T>
void fp8_quant_group(const T* x, index_t len, float s, fp8_e4m3* q) {
  const std::uint32_t sb = detail::float_bits(s);
  const std::uint32_t exp = (sb >> 23) & 0xFFu;
  const bool pow2 = (sb & 0x807FFFFFu) == 0u && exp >= 1u && exp <= 253u;
  const float inv = detail::bits_float((254u - exp) << 23);
  index_t i = 0;
#if DSA_CPU_HAS_AVX512
  if constexpr (std::is_same_v<T, bf16>) {
    if (pow2) i = fp8_quant_bf16_pow2_avx512(x, len, static_cast<int>(exp) - 127, q);
  }
  if (pow2) {
    const __m512 iv = _mm512_set1_ps(inv);
    for (; i + 16 <= len; i += 16) {
      const __m512 v = _mm512_mul_ps(avx512_load16(x + i), iv);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), fp8_quant_encode16(v));
    }
  } else {
    const __m512 sv = _mm512_set1_ps(s);
    for (; i + 16 <= len; i += 16) {
      const __m512 v = _mm512_div_ps(avx512_load16(x + i), sv);  // IEEE division
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), fp8_quant_encode16(v));
    }
  }
#elif DSA_CPU_HAS_AVX2
  if constexpr (std::is_same_v<T, bf16>) {
    if (pow2) i = fp8_quant_bf16_pow2_avx2(x, len, static_cast<int>(exp) - 127, q);
  }
  if (pow2) {
    const __m256 iv = _mm256_set1_ps(inv);
    for (; i + 16 <= len; i += 16) fp8_quant_pow2_16(x + i, iv, q + i);
  } else {
    const __m256 sv = _mm256_set1_ps(s);
    for (; i + 16 <= len; i += 16) {
      const __m256i lo = fp8_quant_encode8(_mm256_div_ps(avx2_load8(x + i), sv));  // IEEE division
      const __m256i hi = fp8_quant_encode8(_mm256_div_ps(avx2_load8(x + i + 8), sv));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), fp8_quant_pack16(lo, hi));
    }
  }
#endif
  if (pow2) {
    for (; i < len; ++i) {
      float v = to_float(x[i]) * inv;
      v = v < -e4m3_max ? -e4m3_max : v;
      v = v > e4m3_max ? e4m3_max : v;
      q[i].bits = fp8_quant_encode_clamped(v);
    }
  } else {
    for (; i < len; ++i) {
      float v = detail::div_rn(to_float(x[i]), s);
      v = v < -e4m3_max ? -e4m3_max : v;
      v = v > e4m3_max ? e4m3_max : v;
      q[i].bits = fp8_quant_encode_clamped(v);
    }
  }
}

// Every e4m3 code's value: dequantization is a lookup and one multiply.
inline const float* fp8_quant_e4m3_values() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<std::size_t>(c)] = fp8_e4m3::from_bits(static_cast<std::uint8_t>(c)).to_float();
    return t;
  }();
  return table.data();
}

// y[i] = from_float<T>(dequantize_e4m3(q[i], s)) for i in [0, len).
template <class T>
void fp8_dequant_range(const fp8_e4m3* q, index_t len, float s, T* y, const float* values) {
  index_t i = 0;
#if DSA_CPU_HAS_AVX2
  if constexpr (std::is_same_v<T, bf16>) {
    const std::uint32_t sb = detail::float_bits(s);
    if ((sb & 0x807FFFFFu) == 0u && (sb >> 23) != 0u) {  // 2^k, k normal (inf fails the k range)
#if DSA_CPU_HAS_AVX512
      i = fp8_dequant_bf16_pow2_avx512(q, len, static_cast<int>(sb >> 23) - 127, y);
#else
      i = fp8_dequant_bf16_pow2_avx2(q, len, static_cast<int>(sb >> 23) - 127, y);
#endif
    }
  }
#endif
#if DSA_CPU_HAS_AVX512
  // A NaN scale stays on the scalar loop: NaN code * NaN scale returns one of the two NaNs, and
  // which one depends on the operand order the compiler picks for each loop.
  const __m512 sv = _mm512_set1_ps(s);
  const bool nan_scale = (detail::float_bits(s) & 0x7FFFFFFFu) > 0x7F800000u;
  for (; !nan_scale && i + 16 <= len; i += 16) {
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i));
    avx512_store16(y + i, _mm512_mul_ps(e4m3_values16(c), sv));
  }
#elif DSA_CPU_HAS_AVX2
  const __m256 sv = _mm256_set1_ps(s);
  const bool nan_scale = (detail::float_bits(s) & 0x7FFFFFFFu) > 0x7F800000u;  // as above
  auto values8 = [&](const fp8_e4m3* c) {
    return _mm256_mul_ps(e4m3_values8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c))), sv);
  };
  if constexpr (std::is_same_v<T, bf16>) {
    // Two registers per narrowing: one pack and one permute for 16 values.
    for (; !nan_scale && i + 16 <= len; i += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), avx2_narrow16(values8(q + i), values8(q + i + 8)));
    }
  }
  for (; !nan_scale && i + 8 <= len; i += 8) avx2_store8(y + i, values8(q + i));
#endif
  for (; i < len; ++i) y[i] = from_float<T>(values[q[i].bits] * s);
}

}  // namespace cpu_detail

template <>
struct op_impl<cpu_backend, act_quant_op> {
  template <class T>
  static void run(const cpu_backend& be, tensor_view<const T, 2> x, tensor_view<fp8_e4m3, 2> q,
                  tensor_view<float, 2> s, act_quant_config cfg) {
    const index_t cols = x.extent(1);
    const index_t g = cfg.group_size;
    cpu_detail::parallel_for(be, x.extent(0), cpu_detail::fp8_quant_grain(cols), [&](index_t begin, index_t end) {
      for (index_t r = begin; r < end; ++r) {
        const T* xr = x.row(r);
        fp8_e4m3* qr = q.row(r);
        float* sr = s.row(r);
        // All the row's scales first, then all its groups: the scale of a group is a long
        // dependency chain (the amax reduction, then the scalar act_quant_scale), and computed
        // back to back the chains of different groups overlap instead of stalling each
        // group's quantization. The row (14 KB of bf16 at V3.2's 7168) stays in L1 between.
        for (index_t k = 0; k * g < cols; ++k) {
          sr[k] = act_quant_scale(cpu_detail::fp8_quant_abs_max(xr + k * g, g), cfg.format);
        }
        // The next row is prefetched group by group meanwhile: its amax pass starts with a long
        // chain per group and would otherwise wait on memory at every group.
        const T* next = r + 1 < end ? x.row(r + 1) : nullptr;
        for (index_t k = 0; k * g < cols; ++k) {
          if (next != nullptr) cpu_detail::prefetch_read(next + k * g, g * static_cast<index_t>(sizeof(T)));
          cpu_detail::fp8_quant_group(xr + k * g, g, sr[k], qr + k * g);
        }
      }
    });
  }
};

template <>
struct op_impl<cpu_backend, act_dequant_op> {
  template <class T>
  static void run(const cpu_backend& be, tensor_view<const fp8_e4m3, 2> q, tensor_view<const float, 2> s,
                  tensor_view<T, 2> y, index_t group_size) {
    const index_t cols = q.extent(1);
    const float* values = cpu_detail::fp8_quant_e4m3_values();
    cpu_detail::parallel_for(be, q.extent(0), cpu_detail::fp8_quant_grain(cols), [&](index_t begin, index_t end) {
      for (index_t r = begin; r < end; ++r) {
        const fp8_e4m3* qr = q.row(r);
        const float* sr = s.row(r);
        T* yr = y.row(r);
        const fp8_e4m3* next = r + 1 < end ? q.row(r + 1) : nullptr;
        for (index_t k = 0; k * group_size < cols; ++k) {
          if (next != nullptr) cpu_detail::prefetch_read(next + k * group_size, group_size);
          cpu_detail::fp8_dequant_range(qr + k * group_size, group_size, sr[k], yr + k * group_size, values);
        }
      }
    });
  }
};

template <>
struct op_impl<cpu_backend, weight_quant_op> {
  template <class T>
  static void run(const cpu_backend& be, tensor_view<const T, 2> w, tensor_view<fp8_e4m3, 2> q,
                  tensor_view<float, 2> s) {
    constexpr index_t blk = weight_quant_block;
    const index_t rows = w.extent(0), cols = w.extent(1);
    const index_t block_cols = s.extent(1);
    cpu_detail::parallel_for(be, s.extent(0), 1, [&](index_t begin, index_t end) {
      std::vector<std::uint32_t> amax(static_cast<std::size_t>(block_cols));
      for (index_t br = begin; br < end; ++br) {
        const index_t r0 = br * blk, r1 = std::min(rows, r0 + blk);
        // Row by row through the block row: the bit-pattern max of |w| (NaN-propagating).
        std::fill(amax.begin(), amax.end(), 0u);
        for (index_t r = r0; r < r1; ++r) {
          const T* wr = w.row(r);
          for (index_t bc = 0; bc < block_cols; ++bc) {
            const index_t c0 = bc * blk, c1 = std::min(cols, c0 + blk);
            std::uint32_t m = amax[static_cast<std::size_t>(bc)];
            for (index_t c = c0; c < c1; ++c) {
              const std::uint32_t a = abs_bits(wr[c]);
              m = a > m ? a : m;
            }
            amax[static_cast<std::size_t>(bc)] = m;
          }
        }
        float* sr = s.row(br);
        for (index_t bc = 0; bc < block_cols; ++bc) {
          sr[bc] = weight_quant_scale(detail::bits_float(amax[static_cast<std::size_t>(bc)]));
        }
        for (index_t r = r0; r < r1; ++r) {
          const T* wr = w.row(r);
          fp8_e4m3* qr = q.row(r);
          for (index_t bc = 0; bc < block_cols; ++bc) {
            const index_t c0 = bc * blk;
            cpu_detail::fp8_quant_group(wr + c0, std::min(blk, cols - c0), sr[bc], qr + c0);
          }
        }
      }
    });
  }
};

template <>
struct op_impl<cpu_backend, weight_dequant_op> {
  template <class T>
  static void run(const cpu_backend& be, tensor_view<const fp8_e4m3, 2> q, tensor_view<const float, 2> s,
                  tensor_view<T, 2> w) {
    constexpr index_t blk = weight_quant_block;
    const index_t cols = q.extent(1);
    const float* values = cpu_detail::fp8_quant_e4m3_values();
    cpu_detail::parallel_for(be, q.extent(0), cpu_detail::fp8_quant_grain(cols), [&](index_t begin, index_t end) {
      for (index_t r = begin; r < end; ++r) {
        const fp8_e4m3* qr = q.row(r);
        const float* sr = s.row(r / blk);
        T* wr = w.row(r);
        for (index_t c0 = 0; c0 < cols; c0 += blk) {
          cpu_detail::fp8_dequant_range(qr + c0, std::min(blk, cols - c0), sr[c0 / blk], wr + c0, values);
        }
      }
    });
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CPU_OP_INSTANCES(DSA_FP8_QUANT_INSTANCES)
