// The lightning indexer's key-tile micro-kernels (cpu/lightning_indexer.hpp runs them): a tile of
// key_tile = 16 keys decoded to fp32 and transposed into [d, 16] (each key row decoded with
// kernels/e4m3_value.hpp, or, with AVX-512 or AVX2, 16 x 16 codes transposed in registers
// first), then for a block of heads one 16-lane accumulator per head, fed by broadcast multiply-adds (GCC
// vectors, arch/vec.hpp). Each lane is one key's dot product over i = 0..d-1 in ascending order
// from +0, with the rounding of detail::fma_if_fast, and the head sum runs over h = 0..H-1 with
// the product rounded first: the normative order of dsa/numerics/lightning_indexer.hpp. The
// blocking only decides which independent sums are in flight together. The backward's
// accumulate_rows sums its terms in the order given, one output element per lane.
#pragma once

#include <cstdint>
#include <cstring>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/isa.hpp"
#include "dsa/cpu/arch/vec.hpp"
#include "dsa/cpu/kernels/e4m3_value.hpp"
#include "dsa/numerics/fp32_ops.hpp"
#include "dsa/numerics/lightning_indexer.hpp"

#if DSA_CPU_HAS_AVX512 || DSA_CPU_HAS_AVX2
#include <immintrin.h>
#endif

DSA_NAMESPACE_BEGIN
namespace cpu_detail::indexer {

inline constexpr index_t key_tile = simd::tile_lanes;  // keys per micro-kernel call
// Heads per micro-kernel call: enough independent accumulators to hide the FMA latency
// without spilling (one 16-key accumulator is 1 zmm, 2 ymm or 4 xmm registers).
#if DSA_CPU_HAS_AVX512
inline constexpr index_t head_block = 8;
#elif DSA_CPU_HAS_AVX
inline constexpr index_t head_block = 4;
#else
inline constexpr index_t head_block = 2;
#endif

#if defined(__GNUC__)
// A key tile is VPT of the target's own vectors (arch/vec.hpp: 16 lanes with AVX-512, 8 with
// AVX, 4 otherwise), GCC/Clang vectors: guaranteed to vectorise over the keys (never across a
// sum). Not one 16-lane vector type: wider than the registers, g++ 12 built its splats and FMAs lane
// by lane (the AVX2 build's indexer at 4 GFLOP/s).
using tile_vec = simd::vfloat;
inline constexpr index_t tile_vec_lanes = simd::lanes<float>;
inline constexpr int VPT = simd::vectors_per_tile;

// acc = acc + a · kv lane by lane, rounded as detail::fma_if_fast (fused where the target has
// FMA, whatever the optimisation level).
DSA_FORCEINLINE void fma_lanes(tile_vec& acc, float a, const tile_vec& kv) {
#if DSA_CPU_HAS_AVX512
  // The builtin on GCC's own vector type: through the intrinsics' may-alias __m512, GCC kept
  // the accumulator arrays in memory (a store per multiply-add, the backward 40% slower).
  const tile_vec av = {a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a};
  acc = __builtin_ia32_vfmaddps512_mask(av, kv, acc, static_cast<__mmask16>(-1), _MM_FROUND_CUR_DIRECTION);
#elif DSA_CPU_HAS_AVX && DSA_CPU_HAS_FMA
  const tile_vec av = {a, a, a, a, a, a, a, a};
  acc = __builtin_ia32_vfmaddps256(av, kv, acc);
#elif DSA_CPU_HAS_SCALAR_FMA
  for (index_t s = 0; s < tile_vec_lanes; ++s) acc[s] = detail::fma_if_fast(a, kv[s], acc[s]);
#else
  acc += a * kv;
#endif
}

// z[hb * key_tile + s] = qf[hb] · kt[:, s] for the HB heads (qf is [HB, d] row-major, kt the
// transposed key tile [d, key_tile]): each lane sums over i in ascending order from +0.
template <index_t HB>
DSA_FORCEINLINE void head_block_dots(const float* DSA_RESTRICT qf, index_t d, const float* DSA_RESTRICT kt,
                                     float* DSA_RESTRICT z) {
  tile_vec acc[HB][VPT];
  for (index_t hb = 0; hb < HB; ++hb)
    for (int v = 0; v < VPT; ++v) acc[hb][v] = tile_vec{};
  for (index_t i = 0; i < d; ++i) {
    tile_vec kv[VPT];  // loaded with memcpy: no alignment assumed
    for (int v = 0; v < VPT; ++v) std::memcpy(&kv[v], kt + i * key_tile + v * tile_vec_lanes, sizeof(tile_vec));
    for (index_t hb = 0; hb < HB; ++hb) {
      const float a = qf[hb * d + i];
      for (int v = 0; v < VPT; ++v) fma_lanes(acc[hb][v], a, kv[v]);
    }
  }
  if constexpr (VPT == 1) {
    std::memcpy(z, acc, sizeof acc);  // with AVX-512, 1-3% faster than the copies below
  } else {
    for (index_t hb = 0; hb < HB; ++hb)
      for (int v = 0; v < VPT; ++v) {
        const tile_vec x = acc[hb][v];  // a copy: taking the accumulators' address kept them in memory
        std::memcpy(z + hb * key_tile + v * tile_vec_lanes, &x, sizeof x);
      }
  }
}
#else
template <index_t HB>
DSA_FORCEINLINE void head_block_dots(const float* DSA_RESTRICT qf, index_t d, const float* DSA_RESTRICT kt,
                                     float* DSA_RESTRICT z) {
  float acc[HB][key_tile];
  for (index_t hb = 0; hb < HB; ++hb) {
    for (index_t s = 0; s < key_tile; ++s) acc[hb][s] = 0.0f;
  }
  for (index_t i = 0; i < d; ++i) {
    const float* DSA_RESTRICT kr = kt + i * key_tile;
    for (index_t hb = 0; hb < HB; ++hb) {
      const float qv = qf[hb * d + i];
      for (index_t s = 0; s < key_tile; ++s) acc[hb][s] = detail::fma_if_fast(qv, kr[s], acc[hb][s]);
    }
  }
  std::memcpy(z, acc, sizeof acc);
}
#endif

// tot[s] += sum over the HB heads of w[h] · ReLU(qf[h] · kt[:, s]), heads in ascending order.
template <index_t HB>
DSA_FORCEINLINE void head_block_scores(const float* DSA_RESTRICT qf, index_t d, const float* DSA_RESTRICT kt,
                                       const float* DSA_RESTRICT w, float* DSA_RESTRICT tot) {
  float dots[HB * key_tile];
  head_block_dots<HB>(qf, d, kt, dots);
  for (index_t hb = 0; hb < HB; ++hb) {
    for (index_t s = 0; s < key_tile; ++s) tot[s] += detail::mul_rn(w[hb], lightning_indexer_relu(dots[hb * key_tile + s]));
  }
}

// tot[s] = sum_h w[h] · ReLU(qf[h] · kt[:, s]) for the key_tile keys of the tile, heads in
// ascending order.
inline void tile_scores(const float* qf, index_t heads, index_t d, const float* w, const float* kt, float* tot) {
  for (index_t s = 0; s < key_tile; ++s) tot[s] = 0.0f;
  index_t h = 0;
  for (; h + head_block <= heads; h += head_block) head_block_scores<head_block>(qf + h * d, d, kt, w + h, tot);
  for (; h < heads; ++h) head_block_scores<1>(qf + h * d, d, kt, w + h, tot);
}

// z[h * key_tile + s] = qf[h] · kt[:, s] for every head (qf [heads, d] row-major). Out of line:
// inlined into the backward's loops, GCC stored the accumulators on every step.
[[gnu::noinline]] inline void tile_dots(const float* qf, index_t heads, index_t d, const float* kt, float* z) {
  index_t h = 0;
  for (; h + head_block <= heads; h += head_block) head_block_dots<head_block>(qf + h * d, d, kt, z + h * key_tile);
  for (; h < heads; ++h) head_block_dots<1>(qf + h * d, d, kt, z + h * key_tile);
}

// One row of d values to fp32.
DSA_FORCEINLINE void decode_row(const fp8_e4m3* DSA_RESTRICT src, index_t d, float* DSA_RESTRICT dst) {
  for (index_t i = 0; i < d; ++i) dst[i] = e4m3_value(src[i].bits);
}
DSA_FORCEINLINE void decode_row(const std::uint8_t* DSA_RESTRICT src, index_t d, float* DSA_RESTRICT dst) {
  for (index_t i = 0; i < d; ++i) dst[i] = e4m3_value(src[i]);
}
DSA_FORCEINLINE void decode_row(const float* DSA_RESTRICT src, index_t d, float* DSA_RESTRICT dst) {
  for (index_t i = 0; i < d; ++i) dst[i] = src[i];
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
// GCC 12 reports its own _mm512_undefined_ps() inside the shuffle intrinsics as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// kt[i * key_tile + j] = rows[j * d + i]: the key_tile decoded rows transposed into the tile.
inline void transpose_tile(const float* DSA_RESTRICT rows, index_t d, float* DSA_RESTRICT kt) {
  index_t i0 = 0;
#if DSA_CPU_HAS_AVX512
  static_assert(key_tile == 16);
  // 16 x 16 blocks in registers: 2-, 4-, 8- and 16-lane interleaves.
  for (; i0 + 16 <= d; i0 += 16) {
    __m512 r[16], t[16];
    for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_ps(rows + j * d + i0);
    for (int j = 0; j < 16; j += 2) {
      t[j] = _mm512_unpacklo_ps(r[j], r[j + 1]);
      t[j + 1] = _mm512_unpackhi_ps(r[j], r[j + 1]);
    }
    for (int j = 0; j < 16; j += 4) {
      r[j] = _mm512_shuffle_ps(t[j], t[j + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[j + 1] = _mm512_shuffle_ps(t[j], t[j + 2], _MM_SHUFFLE(3, 2, 3, 2));
      r[j + 2] = _mm512_shuffle_ps(t[j + 1], t[j + 3], _MM_SHUFFLE(1, 0, 1, 0));
      r[j + 3] = _mm512_shuffle_ps(t[j + 1], t[j + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int j = 0; j < 16; j += 8) {
      for (int u = 0; u < 4; ++u) {
        t[j + u] = _mm512_shuffle_f32x4(r[j + u], r[j + u + 4], 0x88);
        t[j + u + 4] = _mm512_shuffle_f32x4(r[j + u], r[j + u + 4], 0xDD);
      }
    }
    for (int u = 0; u < 8; ++u) {
      r[u] = _mm512_shuffle_f32x4(t[u], t[u + 8], 0x88);
      r[u + 8] = _mm512_shuffle_f32x4(t[u], t[u + 8], 0xDD);
    }
    for (int i = 0; i < 16; ++i) _mm512_storeu_ps(kt + (i0 + i) * key_tile, r[i]);
  }
#endif
  for (index_t i = i0; i < d; ++i) {
    for (index_t j = 0; j < key_tile; ++j) kt[i * key_tile + j] = rows[j * d + i];
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#if DSA_CPU_HAS_AVX512
// kt[(i0 + c) * key_tile + j] = value of code i0 + c of row j, for c < 16 and the 16 rows: the
// 16 x 16 bytes transposed in registers (byte and word unpacks within 128-bit lanes, then one
// dword permute across them) before they are widened, which costs about a third of decoding the
// rows to fp32 first and transposing 16 x 16 floats.
DSA_FORCEINLINE void decode_codes16_transposed(const std::uint8_t* const* rows, index_t i0, float* DSA_RESTRICT kt) {
  static_assert(key_tile == 16);
  __m512i z[4];  // z[a], 128-bit lane q: the 16 codes of row 4q + a
  for (int a = 0; a < 4; ++a) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[a] + i0)));
    for (int q = 1; q < 4; ++q) {
      const __m128i r = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[4 * q + a] + i0));
      switch (q) {
        case 1: v = _mm512_inserti32x4(v, r, 1); break;
        case 2: v = _mm512_inserti32x4(v, r, 2); break;
        default: v = _mm512_inserti32x4(v, r, 3); break;
      }
    }
    z[a] = v;
  }
  // Per lane q: t0/t1 interleave rows 4q, 4q + 1 (codes 0-7 / 8-15), t2/t3 rows 4q + 2, 4q + 3;
  // u[g] dword c then holds code 4g + c of rows 4q .. 4q + 3.
  const __m512i t0 = _mm512_unpacklo_epi8(z[0], z[1]), t1 = _mm512_unpackhi_epi8(z[0], z[1]);
  const __m512i t2 = _mm512_unpacklo_epi8(z[2], z[3]), t3 = _mm512_unpackhi_epi8(z[2], z[3]);
  const __m512i u[4] = {_mm512_unpacklo_epi16(t0, t2), _mm512_unpackhi_epi16(t0, t2), _mm512_unpacklo_epi16(t1, t3),
                        _mm512_unpackhi_epi16(t1, t3)};
  // Dword 4c + q of the result = dword 4q + c of u[g]: lane c is code 4g + c of rows 0 .. 15.
  const __m512i across = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (int g = 0; g < 4; ++g) {
    const __m512i w = _mm512_permutexvar_epi32(across, u[g]);
    float* dst = kt + (i0 + 4 * g) * key_tile;
    _mm512_storeu_ps(dst, e4m3_values16(_mm512_castsi512_si128(w)));
    _mm512_storeu_ps(dst + key_tile, e4m3_values16(_mm512_extracti32x4_epi32(w, 1)));
    _mm512_storeu_ps(dst + 2 * key_tile, e4m3_values16(_mm512_extracti32x4_epi32(w, 2)));
    _mm512_storeu_ps(dst + 3 * key_tile, e4m3_values16(_mm512_extracti32x4_epi32(w, 3)));
  }
}
#elif DSA_CPU_HAS_AVX2
// The same on 256-bit registers, 8 rows at a time: per half, z[a]'s 128-bit lane q holds row
// 4q + a, the unpacks leave code 4g + c of rows 4q .. 4q + 3 in dword c of u[g]'s lane q, and a
// dword permute puts code 4g + c of the 8 rows in qword c, widened 8 codes at a time.
DSA_FORCEINLINE void decode_codes16_transposed(const std::uint8_t* const* rows, index_t i0, float* DSA_RESTRICT kt) {
  static_assert(key_tile == 16);
  for (int half = 0; half < 2; ++half) {
    const std::uint8_t* const* r = rows + 8 * half;
    __m256i z[4];
    for (int a = 0; a < 4; ++a) {
      z[a] = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r[a] + i0))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[4 + a] + i0)), 1);
    }
    const __m256i t0 = _mm256_unpacklo_epi8(z[0], z[1]), t1 = _mm256_unpackhi_epi8(z[0], z[1]);
    const __m256i t2 = _mm256_unpacklo_epi8(z[2], z[3]), t3 = _mm256_unpackhi_epi8(z[2], z[3]);
    const __m256i u[4] = {_mm256_unpacklo_epi16(t0, t2), _mm256_unpackhi_epi16(t0, t2),
                          _mm256_unpacklo_epi16(t1, t3), _mm256_unpackhi_epi16(t1, t3)};
    const __m256i across = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int g = 0; g < 4; ++g) {
      const __m256i w = _mm256_permutevar8x32_epi32(u[g], across);
      const __m128i lo = _mm256_castsi256_si128(w), hi = _mm256_extracti128_si256(w, 1);
      float* dst = kt + (i0 + 4 * g) * key_tile + 8 * half;
      _mm256_storeu_ps(dst, e4m3_values8(lo));
      _mm256_storeu_ps(dst + key_tile, e4m3_values8(_mm_srli_si128(lo, 8)));
      _mm256_storeu_ps(dst + 2 * key_tile, e4m3_values8(hi));
      _mm256_storeu_ps(dst + 3 * key_tile, e4m3_values8(_mm_srli_si128(hi, 8)));
    }
  }
}
#endif

// kt [d, key_tile]: the values of the code rows src[0 .. key_tile) (d codes each), transposed;
// `rows` [key_tile, d] is scratch for the generic path (decode, then transpose_tile).
inline void decode_code_tile(const std::uint8_t* const* src, index_t d, float* DSA_RESTRICT rows, float* DSA_RESTRICT kt) {
#if DSA_CPU_HAS_AVX512 || DSA_CPU_HAS_AVX2
  if (d % 16 == 0) {
    for (index_t i0 = 0; i0 < d; i0 += 16) decode_codes16_transposed(src, i0, kt);
    return;
  }
#endif
  for (index_t j = 0; j < key_tile; ++j) decode_row(src[j], d, rows + j * d);
  transpose_tile(rows, d, kt);
}

// ---- the backward's accumulation ---------------------------------------------------------------

#if defined(__GNUC__)
// dst[i0, i0 + U key_tile) += c[a] · src[a][same] for a = 0 .. count - 1, in that order, the
// chunk held in U vectors across the terms. Out of line, as tile_dots: inlined into the
// backward's loops, GCC stored the accumulators on every term.
template <int U>
[[gnu::noinline]] inline void accumulate_chunk(float* DSA_RESTRICT dst, const float* const* src, const float* c,
                                               index_t count, index_t i0) {
  tile_vec acc[U * VPT];
  std::memcpy(acc, dst + i0, sizeof acc);
  for (index_t a = 0; a < count; ++a) {
    const float* DSA_RESTRICT x = src[a] + i0;
    const float ca = c[a];
    for (int u = 0; u < U * VPT; ++u) {
      tile_vec v;  // one vector at a time: an array of them went through the stack
      std::memcpy(&v, x + u * tile_vec_lanes, sizeof v);
      fma_lanes(acc[u], ca, v);
    }
  }
  std::memcpy(dst + i0, acc, sizeof acc);
}
#endif

// dst[i] += c[a] · src[a][i] for a = 0 .. count - 1 in that order, for i in [0, d).
inline void accumulate_rows(float* DSA_RESTRICT dst, index_t d, const float* const* src, const float* c, index_t count) {
  if (count == 0) return;
  index_t i0 = 0;
#if defined(__GNUC__)
  for (; i0 + 8 * key_tile <= d; i0 += 8 * key_tile) accumulate_chunk<8>(dst, src, c, count, i0);
  for (; i0 + key_tile <= d; i0 += key_tile) accumulate_chunk<1>(dst, src, c, count, i0);
#endif
  for (; i0 < d; ++i0) {
    float acc = dst[i0];
    for (index_t a = 0; a < count; ++a) acc = detail::fma_if_fast(c[a], src[a][i0], acc);
    dst[i0] = acc;
  }
}

}  // namespace cpu_detail::indexer
DSA_NAMESPACE_END
