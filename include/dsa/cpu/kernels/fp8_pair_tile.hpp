// fp8_linear's decoders (cpu/fp8_linear.hpp has the overview): the e4m3 codes of one 128-wide
// k-block of NR weight rows into the bf16 pair tile (layout: kernels/fp8_block_dot.hpp), from the
// checkpoint's row-major codes (transposed on the fly: 16 x 16 dwords with AVX-512, 8 x 8 with
// AVX2, a table lookup per code otherwise) or from a packed weight (cpu/packed_fp8_weight.hpp:
// loaded as they are). Every path gives the same tile bits; the SIMD decoders take a short path
// for groups without subnormal, zero or NaN codes.
#pragma once

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cpu/arch/isa.hpp"
#include "dsa/cpu/arch/prefetch.hpp"
#include "dsa/cpu/kernels/fp8_block_dot.hpp"
#include "dsa/cpu/packed_fp8_weight.hpp"

#if DSA_CPU_HAS_AVX
#include <immintrin.h>
#endif

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

#if DSA_CPU_HAS_AVX512
// The codes in the high byte of each 16-bit lane (the low byte ignored) as bf16 values times
// 2^8, with integer operations only: an arithmetic shift puts the 7 code bits at bf16 bits
// 10..4 with copies of the sign above them, and one bitwise select keeps the sign (bit 15) and
// those 7 bits and sets bit 14: exponent field 128 + e, mantissa m, which is 2^8 times the
// value of every normal code. Special (a group holding a code this misses: exponent 0 or NaN)
// then replaces exponent-0 codes by their value times 2^8 (a table lookup, exact: 2^8 * m * 2^-9
// for the checkpoint's codes; Packed: the packed form's table; the sign put back for all lanes at
// once) and turns NaN codes, which the select made 2^16 * 1.875 (bits 0x47F0 and the sign), into
// a quiet NaN (adding 0x3800: 0x7FF0), signs kept. No subnormal is formed, so neither DAZ nor
// denormal-operand assists (over 100 cycles each on x86) play a part.
template <bool Special, bool Packed = false>
DSA_FORCEINLINE __m512i decode_high_bytes(__m512i u) {
  const __m512i a = _mm512_srai_epi16(u, 4);
  // Bitwise c ? a : b with b = bit 14, c = the sign and code bits (truth table 0xE4).
  __m512i bits = _mm512_ternarylogic_epi32(a, _mm512_set1_epi16(0x4000), _mm512_set1_epi16(static_cast<short>(0x87F0)), 0xE4);
  if constexpr (Special) {
    // Word m of the table: subnormal_tile_bf16 (bf16(m / 2) for the checkpoint's codes); only
    // m < 8 is looked up (the index's bits 3 and 4 are exponent bits, zero in the lanes replaced).
    alignas(64) static constexpr auto table = [] {
      std::array<std::uint16_t, 32> w{};
      const auto t = subnormal_tile_bf16<Packed>();
      for (std::size_t m = 0; m < t.size(); ++m) w[m] = t[m];
      return w;
    }();
    const __m512i sub_values = _mm512_load_si512(table.data());
    const __mmask32 sub = _mm512_testn_epi16_mask(a, _mm512_set1_epi16(0x0780));
    bits = _mm512_mask_permutexvar_epi16(bits, sub, _mm512_srli_epi16(a, 4), sub_values);
    // bits | (a & sign): the sign again where the table wrote, a no-op elsewhere (truth table 0xF8).
    bits = _mm512_ternarylogic_epi32(bits, a, _mm512_set1_epi16(static_cast<short>(0x8000)), 0xF8);
    const __m512i nan_bits = _mm512_set1_epi16(0x07F0);
    const __mmask32 nan = _mm512_cmpeq_epi16_mask(_mm512_and_si512(a, nan_bits), nan_bits);
    bits = _mm512_mask_add_epi16(bits, nan, bits, _mm512_set1_epi16(0x3800));
  }
  return bits;
}

// One quad (dword j: codes 4q..4q+3 of row j) into the pair vectors A (low bytes: codes 4q,
// 4q + 2) and B (high bytes: 4q + 1, 4q + 3) at pt and pt + 16.
template <bool Special, bool Packed = false>
DSA_FORCEINLINE void decode_quad16(__m512i quad, std::uint32_t* pt) {
  _mm512_store_si512(pt, decode_high_bytes<Special, Packed>(_mm512_slli_epi16(quad, 8)));
  _mm512_store_si512(pt + 16, decode_high_bytes<Special, Packed>(quad));
}

// 16 rows x 64 codes (r[j]: row j) into quads [0, 16) of a group's pair tile: transposed as a
// 16 x 16 matrix of 4-code dwords (unpacks, then 128-bit lane shuffles); dword column c holds
// codes 4c..4c+3 of every row, and its high bytes (codes 4c + 1, 4c + 3) and low bytes (4c,
// 4c + 2) decode into B and A.
template <bool Special>
DSA_FORCEINLINE void decode_group16(const __m512i* r, std::uint32_t* pt) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4q + c]: in 128-bit lane L, rows 4q..4q+3 of dword 4L + c.
  __m512i u[16];
  for (int q = 0; q < 4; ++q) {
    u[4 * q + 0] = _mm512_unpacklo_epi64(t[4 * q + 0], t[4 * q + 2]);
    u[4 * q + 1] = _mm512_unpackhi_epi64(t[4 * q + 0], t[4 * q + 2]);
    u[4 * q + 2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
    u[4 * q + 3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
  }
  auto column = [&](__m512i col, index_t c) { decode_quad16<Special>(col, pt + (2 * c) * 16); };
  for (int c = 0; c < 4; ++c) {
    const __m512i s0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88);
    const __m512i s1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xDD);
    const __m512i s2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88);
    const __m512i s3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xDD);
    column(_mm512_shuffle_i32x4(s0, s2, 0x88), c);
    column(_mm512_shuffle_i32x4(s1, s3, 0x88), 4 + c);
    column(_mm512_shuffle_i32x4(s0, s2, 0xDD), 8 + c);
    column(_mm512_shuffle_i32x4(s1, s3, 0xDD), 12 + c);
  }
}
#endif

#if DSA_CPU_HAS_AVX2 && !DSA_CPU_HAS_AVX512
// decode_high_bytes for 16 lanes (AVX2 has no bitwise select and no word permute: and/or, and a
// byte shuffle for the subnormal table).
template <bool Special, bool Packed = false>
DSA_FORCEINLINE __m256i decode_high_bytes8(__m256i u) {
  const __m256i a = _mm256_srai_epi16(u, 4);
  __m256i bits = _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi16(static_cast<short>(0x87F0))), _mm256_set1_epi16(0x4000));
  if constexpr (Special) {
    const __m256i sign = _mm256_and_si256(a, _mm256_set1_epi16(static_cast<short>(0x8000)));
    // Bytes 0..7: low bytes of subnormal_tile_bf16, bytes 8..15: high bytes (in both 128-bit lanes).
    alignas(32) static constexpr auto bytes = [] {
      std::array<std::uint8_t, 32> b{};
      const auto t = subnormal_tile_bf16<Packed>();
      for (std::size_t lane = 0; lane < 32; lane += 16) {
        for (std::size_t m = 0; m < 8; ++m) {
          b[lane + m] = static_cast<std::uint8_t>(t[m] & 0xFFu);
          b[lane + 8 + m] = static_cast<std::uint8_t>(t[m] >> 8);
        }
      }
      return b;
    }();
    const __m256i table = _mm256_load_si256(reinterpret_cast<const __m256i*>(bytes.data()));
    const __m256i m = _mm256_and_si256(_mm256_srli_epi16(a, 4), _mm256_set1_epi16(7));
    const __m256i idx = _mm256_add_epi16(_mm256_or_si256(m, _mm256_slli_epi16(m, 8)), _mm256_set1_epi16(0x0800));
    const __m256i sv = _mm256_shuffle_epi8(table, idx);
    const __m256i sub = _mm256_cmpeq_epi16(_mm256_and_si256(a, _mm256_set1_epi16(0x0780)), _mm256_setzero_si256());
    bits = _mm256_blendv_epi8(bits, _mm256_or_si256(sv, sign), sub);
    const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(a, _mm256_set1_epi16(0x07F0)), _mm256_set1_epi16(0x07F0));
    bits = _mm256_blendv_epi8(bits, _mm256_or_si256(sign, _mm256_set1_epi16(0x7FC0)), nan);
  }
  return bits;
}

// decode_quad16 for 8 rows.
template <bool Special, bool Packed = false>
DSA_FORCEINLINE void decode_quad8(__m256i quad, std::uint32_t* pt) {
  _mm256_store_si256(reinterpret_cast<__m256i*>(pt), decode_high_bytes8<Special, Packed>(_mm256_slli_epi16(quad, 8)));
  _mm256_store_si256(reinterpret_cast<__m256i*>(pt + 8), decode_high_bytes8<Special, Packed>(quad));
}

// 8 rows x 32 codes into quads [0, 8) of a group's pair tile, as decode_group16.
template <bool Special>
DSA_FORCEINLINE void decode_group8(const __m256i* r, std::uint32_t* pt) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int q = 0; q < 2; ++q) {
    u[4 * q + 0] = _mm256_unpacklo_epi64(t[4 * q + 0], t[4 * q + 2]);
    u[4 * q + 1] = _mm256_unpackhi_epi64(t[4 * q + 0], t[4 * q + 2]);
    u[4 * q + 2] = _mm256_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
    u[4 * q + 3] = _mm256_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
  }
  auto column = [&](__m256i col, index_t c) { decode_quad8<Special>(col, pt + (2 * c) * 8); };
  for (int c = 0; c < 4; ++c) {
    column(_mm256_permute2x128_si256(u[c], u[4 + c], 0x20), c);
    column(_mm256_permute2x128_si256(u[c], u[4 + c], 0x31), 4 + c);
  }
}
#endif

/// How far ahead of the codes it decodes decode_pair_tile asks for the next ones (into L2): two
/// blocks, the next decode step of the GEMV. The hardware prefetcher alone left the decode 20%
/// slower from DRAM (measured: 7.5-8.0 against 9.0-9.5 GB/s on one thread, 14-15 against 18-19
/// on two); into L1, or further ahead, measured slower. A prefetch never faults: past the end of
/// a row it only names another address (formed as an integer).
inline constexpr std::uintptr_t pair_tile_prefetch = 2 * block;

/// The pair tile of one block for NR rows: pt[g * pair_tile_dwords + ...] for the groups
/// g = 0 .. NR / group_rows - 1, rows[j] the block's 128 codes of row j. A group of rows x codes
/// holding no subnormal, zero or NaN code (almost all of them in real weights) takes the short
/// decode; the test for one is 2c + 2 <= 16 in byte arithmetic (c + c drops the sign: mag 0..7
/// give 2..16, mag 127 wraps to 0).
template <index_t NR>
DSA_FORCEINLINE void decode_pair_tile(const std::uint8_t* const* rows, std::uint32_t* DSA_RESTRICT pt) {
  static_assert(NR % group_rows == 0);
#if DSA_CPU_HAS_AVX512
  const __m512i two = _mm512_set1_epi8(2);
  for (index_t g = 0; g < NR / 16; ++g) {
    for (index_t h = 0; h < 2; ++h) {
      __m512i r[16];
      __m512i lowest = _mm512_set1_epi8(static_cast<char>(0xFF));
      for (int j = 0; j < 16; ++j) {
        r[j] = _mm512_loadu_si512(static_cast<const void*>(rows[g * 16 + j] + h * 64));
        _mm_prefetch(static_cast<const char*>(prefetch_address(rows[g * 16 + j], h * 64 + pair_tile_prefetch)), _MM_HINT_T1);
        lowest = _mm512_min_epu8(lowest, _mm512_add_epi8(_mm512_add_epi8(r[j], r[j]), two));
      }
      std::uint32_t* dst = pt + g * pair_tile_dwords + h * 16 * 2 * 16;
      if (_mm512_cmple_epu8_mask(lowest, _mm512_set1_epi8(16)) == 0) {
        decode_group16<false>(r, dst);
      } else {
        decode_group16<true>(r, dst);
      }
    }
  }
#elif DSA_CPU_HAS_AVX2
  const __m256i two = _mm256_set1_epi8(2);
  const __m256i sixteen = _mm256_set1_epi8(16);
  for (index_t g = 0; g < NR / 8; ++g) {
    for (index_t h = 0; h < 4; ++h) {
      __m256i r[8];
      __m256i lowest = _mm256_set1_epi8(static_cast<char>(0xFF));
      for (int j = 0; j < 8; ++j) {
        r[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[g * 8 + j] + h * 32));
        if (h % 2 == 0) {
          _mm_prefetch(static_cast<const char*>(prefetch_address(rows[g * 8 + j], h * 32 + pair_tile_prefetch)), _MM_HINT_T1);
        }
        lowest = _mm256_min_epu8(lowest, _mm256_add_epi8(_mm256_add_epi8(r[j], r[j]), two));
      }
      std::uint32_t* dst = pt + g * pair_tile_dwords + h * 8 * 2 * 8;
      // lowest <= 16 in some byte <=> min(lowest, 16) == lowest there.
      if (_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_min_epu8(lowest, sixteen), lowest)) == 0) {
        decode_group8<false>(r, dst);
      } else {
        decode_group8<true>(r, dst);
      }
    }
  }
#else
  const std::uint16_t* bf = e4m3_tile_bf16();
  constexpr index_t G = group_rows;
  for (index_t g = 0; g < NR / G; ++g) {
    std::uint32_t* dst = pt + g * pair_tile_dwords;
    for (index_t j = 0; j < G; ++j) {
      const std::uint8_t* c = rows[g * G + j];
      for (index_t q = 0; q < quads; ++q) {
        dst[(2 * q) * G + j] = bf[c[4 * q]] | (static_cast<std::uint32_t>(bf[c[4 * q + 2]]) << 16);
        dst[(2 * q + 1) * G + j] = bf[c[4 * q + 1]] | (static_cast<std::uint32_t>(bf[c[4 * q + 3]]) << 16);
      }
    }
  }
#endif
}

/// How far ahead in the packed stream the decoders ask for the codes (into L2): two runs of one
/// group, 16 KB with AVX-512 (8, 16 and 32 KB measured within the noise of each other).
inline constexpr std::uintptr_t packed_tile_prefetch = 2 * packed_fp8_weight::block_run * block * group_rows;

/// The pair tile of one block for NR rows from a packed weight (cpu/packed_fp8_weight.hpp):
/// groups g0 .. g0 + NR / group_rows - 1, block kb. The quads are loaded as they are (no
/// transposition) and only the quad ranges the packing marked take the slow decode.
template <index_t NR>
DSA_FORCEINLINE void decode_packed_tile(const packed_fp8_weight& w, index_t g0, index_t kb,
                                        std::uint32_t* DSA_RESTRICT pt) {
  static_assert(NR % group_rows == 0);
  for (index_t g = 0; g < NR / group_rows; ++g) {
    const std::uint8_t* src = w.block_codes(g0 + g, kb);
    const index_t stride = w.quad_stride(kb);
    const unsigned special = w.special(g0 + g, kb);
    std::uint32_t* dst = pt + g * pair_tile_dwords;
#if DSA_CPU_HAS_AVX512
    for (index_t h = 0; h < 2; ++h) {
      const std::uint8_t* s = src + h * 16 * stride;
      std::uint32_t* d = dst + h * 16 * 2 * 16;
      for (int c = 0; c < 16; ++c) {
        _mm_prefetch(static_cast<const char*>(prefetch_address(s + c * stride, packed_tile_prefetch)), _MM_HINT_T1);
      }
      if (((special >> (2 * h)) & 3u) == 0) {
        for (int c = 0; c < 16; ++c) decode_quad16<false, true>(_mm512_loadu_si512(static_cast<const void*>(s + c * stride)), d + 2 * c * 16);
      } else {
        for (int c = 0; c < 16; ++c) decode_quad16<true, true>(_mm512_loadu_si512(static_cast<const void*>(s + c * stride)), d + 2 * c * 16);
      }
    }
#elif DSA_CPU_HAS_AVX2
    for (index_t h = 0; h < 4; ++h) {
      const std::uint8_t* s = src + h * 8 * stride;
      std::uint32_t* d = dst + h * 8 * 2 * 8;
      for (int c = 0; c < 8; ++c) {
        _mm_prefetch(static_cast<const char*>(prefetch_address(s + c * stride, packed_tile_prefetch)), _MM_HINT_T1);
      }
      if (((special >> h) & 1u) == 0) {
        for (int c = 0; c < 8; ++c) decode_quad8<false, true>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + c * stride)), d + 2 * c * 8);
      } else {
        for (int c = 0; c < 8; ++c) decode_quad8<true, true>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + c * stride)), d + 2 * c * 8);
      }
    }
#else
    (void)special;
    const std::uint16_t* bf = packed_tile_bf16();
    constexpr index_t G = group_rows;
    for (index_t q = 0; q < quads; ++q) {
      for (index_t j = 0; j < G; ++j) {
        const std::uint8_t* c = src + q * stride + j * 4;
        dst[(2 * q) * G + j] = bf[c[0]] | (static_cast<std::uint32_t>(bf[c[2]]) << 16);
        dst[(2 * q + 1) * G + j] = bf[c[1]] | (static_cast<std::uint32_t>(bf[c[3]]) << 16);
      }
    }
#endif
  }
}

/// The pair tiles of blocks kb0 .. kb0 + nb - 1 (all in one run of the packed layout) for NR
/// rows into pt + b * tile_stride: decode_packed_tile for each block, in the order the run stores
/// its lines (quad by quad, the run's blocks side by side), so the codes stream sequentially.
template <index_t NR, bool Prefetch = true>
DSA_FORCEINLINE void decode_packed_run(const packed_fp8_weight& w, index_t g0, index_t kb0, int nb,
                                       std::uint32_t* DSA_RESTRICT pt, index_t tile_stride) {
#if DSA_CPU_HAS_AVX512
  for (index_t g = 0; g < NR / group_rows; ++g) {
    const std::uint8_t* src = w.block_codes(g0 + g, kb0);
    const index_t stride = w.quad_stride(kb0);
    unsigned special[packed_fp8_weight::block_run];
    for (int b = 0; b < nb; ++b) special[b] = w.special(g0 + g, kb0 + b);
    for (index_t q = 0; q < quads; ++q) {
      for (int b = 0; b < nb; ++b) {
        const std::uint8_t* s = src + q * stride + b * 64;
        if constexpr (Prefetch) _mm_prefetch(static_cast<const char*>(prefetch_address(s, packed_tile_prefetch)), _MM_HINT_T1);
        const __m512i quad = _mm512_loadu_si512(static_cast<const void*>(s));
        std::uint32_t* d = pt + b * tile_stride + g * pair_tile_dwords + 2 * q * 16;
        if (((special[b] >> (q / 8)) & 1u) == 0) {
          decode_quad16<false, true>(quad, d);
        } else {
          decode_quad16<true, true>(quad, d);
        }
      }
    }
  }
#else
  for (int b = 0; b < nb; ++b) decode_packed_tile<NR>(w, g0, kb0 + b, pt + b * tile_stride);
#endif
}

}  // namespace cpu_detail
DSA_NAMESPACE_END
