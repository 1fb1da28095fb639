// fp8_linear's decode micro-kernels (t <= 4 rows; cpu/fp8_linear.hpp has the overview):
//  - gemv_micro: t rows x NR outputs over NB k-blocks of pair tiles (kernels/fp8_pair_tile.hpp),
//    each pair widened to T (float or double) in registers, every block an independent chain;
//  - packed_gemv_fp32 (AVX-512, fp32 mode, packed weights) and packed_gemv8_fp32 (its AVX2
//    form, 2 to 4 rows): the same sums with each quad of codes decoded and multiplied in
//    registers, no tile stored.
// Every output lane sums its block in ascending k from +0, so both give the same bits.
#pragma once

#include <cstdint>
#include <type_traits>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cpu/arch/isa.hpp"
#include "dsa/cpu/arch/prefetch.hpp"
#include "dsa/cpu/arch/vec.hpp"
#include "dsa/cpu/kernels/fp8_block_dot.hpp"
#include "dsa/cpu/kernels/fp8_pair_tile.hpp"
#include "dsa/cpu/packed_fp8_weight.hpp"

#if DSA_CPU_HAS_AVX
#include <immintrin.h>
#endif

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

#if DSA_CPU_HAS_AVX512
/// acc[i] += the products of quad q of a packed block (16 rows x codes 4q..4q+3, at s) with x
/// row i (xr[i][0..3]: codes 4q..4q+3 of the block), in ascending k, for MR rows. The two
/// 512-bit ports do all of this loop's work and shifts can only use port 0 of them, so the moves
/// that need no arithmetic use port 5's byte shuffles instead: the low bytes reach the high byte
/// of their word by a byte shift of the 128-bit lanes (measured 2-3% faster at t = 2..4), and the
/// low bf16 of each pair reaches the high half of its fp32 lane by a byte shuffle rather than a
/// dword shift (2.6% at t = 4 in L2, docs/records/2026-11-25-v32-scale-cpu-passes.md "Ninth pass").
template <bool Special, int MR>
DSA_FORCEINLINE void packed_quad_fp32(const std::uint8_t* s, const float* const* xr, __m512* acc) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  _mm_prefetch(static_cast<const char*>(prefetch_address(s, packed_tile_prefetch)), _MM_HINT_T1);
  const __m512i quad = _mm512_loadu_si512(static_cast<const void*>(s));
  const __m512i a = decode_high_bytes<Special, true>(_mm512_bslli_epi128(quad, 1));  // codes 4q, 4q + 2
  const __m512i c = decode_high_bytes<Special, true>(quad);                          // codes 4q + 1, 4q + 3
  // Each dword's low word moved to its high word, the low word zeroed (control bytes 0x80).
  const __m512i low_to_high = _mm512_set4_epi32(0x0D0C8080, 0x09088080, 0x05048080, 0x01008080);
  const __m512 w0 = _mm512_castsi512_ps(_mm512_shuffle_epi8(a, low_to_high));
  const __m512 w1 = _mm512_castsi512_ps(_mm512_shuffle_epi8(c, low_to_high));
  const __m512 w2 = _mm512_castsi512_ps(_mm512_and_si512(a, high));
  const __m512 w3 = _mm512_castsi512_ps(_mm512_and_si512(c, high));
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    const float* xi = xr[i];
    __m512 r = acc[i];
    r = _mm512_fmadd_ps(_mm512_set1_ps(xi[0]), w0, r);
    r = _mm512_fmadd_ps(_mm512_set1_ps(xi[1]), w1, r);
    r = _mm512_fmadd_ps(_mm512_set1_ps(xi[2]), w2, r);
    r = _mm512_fmadd_ps(_mm512_set1_ps(xi[3]), w3, r);
    acc[i] = r;
  }
}

/// Quad q of blocks [B, NB) of a run (block b's at s + b * 64; row i's activations of block b at
/// xr[i] + b * 128) into acc[b], block b taking the slow-code decode when bit b of SlowBlocks is set.
template <unsigned SlowBlocks, int MR, int NB, int B = 0>
DSA_FORCEINLINE void packed_quad_blocks_fp32(const std::uint8_t* s, const float* const* xr, __m512 (*acc)[MR]) {
  const float* xb[MR];
  for (int i = 0; i < MR; ++i) xb[i] = xr[i] + B * block;
  packed_quad_fp32<((SlowBlocks >> B) & 1u) != 0, MR>(s + B * 64, xb, acc[B]);
  if constexpr (B + 1 < NB) packed_quad_blocks_fp32<SlowBlocks, MR, NB, B + 1>(s, xr, acc);
}

/// Quads [q0, q1) of a run's NB blocks (quad q of block b at src + q * stride + b * 64; x rows
/// ldx apart) into acc (packed_quad_blocks_fp32). Each row's activations are read through a
/// pointer of its own: Clang otherwise folds the rows into one induction variable and addresses x
/// as base + index, which splits each broadcast FMA into two uops on Intel cores (measured with
/// clang 14 at t = 4: 22.5 against 14.9 cycles per 64 codes); the empty asm keeps the pointers
/// apart there (GCC keeps them apart itself, and schedules the loop worse with the asm).
template <unsigned SlowBlocks, int MR, int NB>
DSA_FORCEINLINE void packed_quads_fp32(index_t q0, index_t q1, const std::uint8_t* src, index_t stride,
                                       const float* DSA_RESTRICT x, index_t ldx, __m512 (*acc)[MR]) {
  const float* xr[MR];
  for (int i = 0; i < MR; ++i) xr[i] = x + i * ldx + 4 * q0;
#pragma GCC unroll 2
  for (index_t q = q0; q < q1; ++q) {
    packed_quad_blocks_fp32<SlowBlocks, MR, NB>(src + q * stride, xr, acc);
    for (int i = 0; i < MR; ++i) {
      xr[i] += 4;
#if defined(__clang__)
      asm("" : "+r"(xr[i]));
#endif
    }
  }
}

/// quads per slow-code flag bit (cpu/packed_fp8_weight.hpp).
inline constexpr index_t packed_flag_quads = quads / 4;

/// A run with no slow code: one straight loop over its 32 quads, the accumulators in registers.
template <int MR, int NB>
[[gnu::noinline]] void packed_run_fp32(const std::uint8_t* src, index_t stride, const float* DSA_RESTRICT x, index_t ldx,
                                       float* DSA_RESTRICT d, index_t drows) {
  __m512 acc[NB][MR];
  for (int b = 0; b < NB; ++b) {
    for (int i = 0; i < MR; ++i) acc[b][i] = _mm512_setzero_ps();
  }
  packed_quads_fp32<0, MR, NB>(0, quads, src, stride, x, ldx, acc);
  for (int b = 0; b < NB; ++b) {
    for (int i = 0; i < MR; ++i) _mm512_store_ps(d + (b * drows + i) * 16, acc[b][i]);
  }
}

/// One flag range r (quads [8r, 8r + 8)) of a run that holds slow codes, the accumulators
/// passed in memory: a call per range keeps every loop straight and its registers its own.
template <unsigned SlowBlocks, int MR, int NB>
[[gnu::noinline]] void packed_range_fp32(index_t r, const std::uint8_t* src, index_t stride, const float* DSA_RESTRICT x,
                                         index_t ldx, __m512 (*acc_in_out)[MR]) {
  __m512 acc[NB][MR];
  for (int b = 0; b < NB; ++b) {
    for (int i = 0; i < MR; ++i) acc[b][i] = acc_in_out[b][i];
  }
  packed_quads_fp32<SlowBlocks, MR, NB>(r * packed_flag_quads, (r + 1) * packed_flag_quads, src, stride, x, ldx, acc);
  for (int b = 0; b < NB; ++b) {
    for (int i = 0; i < MR; ++i) acc_in_out[b][i] = acc[b][i];
  }
}

/// Decode with MR <= 8 rows in the fp32 mode from a packed weight: d[(b * drows + i) * 16 + j]
/// = the fp32 block dot of row i with group g, block kb0 + b0 + b, for NB blocks of one run from
/// its block b0 (x: the activations of block kb0 + b0; drows >= MR: the rows of d's blocks, of
/// which a call writes its MR). MR <= 4 takes the run's 4 blocks at
/// once; 5 to 8 rows (a batched decode) take it as two halves of 2 blocks (the 16 accumulators
/// of 8 rows x 2 blocks leave the decode its registers), the second half's codes from L1. Each
/// quad is decoded and widened in registers once for all rows (the pair tile is never stored):
/// the same values in the same order as decode_packed_run followed by gemv_micro<float, MR, 16,
/// NB>. With MR >= 2 the two 512-bit ports, which every decode operation and FMA needs, are the
/// bound (2 shifts, 4 bitwise operations, 3 byte moves and 4 MR FMAs per quad), so nothing else
/// may sit in the loop: a run without slow codes (about two thirds of a checkpoint-like weight's
/// runs: zero and the small subnormals are a few in 10^5 codes) takes one straight loop; any
/// other run goes range by range, each range a call specialised by which blocks hold slow codes
/// (more than one block: all take the slow decode). Branching on the flags inside one loop
/// instead, or inlining the ranges, made GCC keep the accumulators in memory or pick worse code
/// for the common case: measured 12-20% slower at t = 2..4 on checkpoint-like codes
/// (docs/records/2026-11-25-v32-scale-cpu-passes.md, "Eighth pass").
template <int MR, int NB>
DSA_FORCEINLINE void packed_gemv_fp32(const packed_fp8_weight& w, index_t g, index_t kb0, const float* DSA_RESTRICT x,
                                      index_t ldx, float* DSA_RESTRICT d, int b0 = 0, index_t drows = MR) {
  // The run: quad q of block b at src + q * stride + b * 64.
  const std::uint8_t* src = w.block_codes(g, kb0) + b0 * 64;
  const index_t stride = w.quad_stride(kb0);
  unsigned special[NB], any = 0;
  for (int b = 0; b < NB; ++b) {
    special[b] = w.special(g, kb0 + b0 + b);
    any |= special[b];
  }
  if (any == 0) {
    packed_run_fp32<MR, NB>(src, stride, x, ldx, d, drows);
    return;
  }
  alignas(64) __m512 acc[NB][MR];
  for (int b = 0; b < NB; ++b) {
    for (int i = 0; i < MR; ++i) acc[b][i] = _mm512_setzero_ps();
  }
  if constexpr (MR == 1) {
    // One row leaves the ports room: the flags tested in the loop cost less than the calls.
    for (index_t r = 0; r < 4; ++r) {
      for (index_t q = r * packed_flag_quads; q < (r + 1) * packed_flag_quads; ++q) {
        for (int b = 0; b < NB; ++b) {
          const std::uint8_t* s = src + q * stride + b * 64;
          const float* xb[1] = {x + b * block + 4 * q};
          if (((special[b] >> r) & 1u) == 0) {
            packed_quad_fp32<false, MR>(s, xb, acc[b]);
          } else {
            packed_quad_fp32<true, MR>(s, xb, acc[b]);
          }
        }
      }
    }
    for (int b = 0; b < NB; ++b) _mm512_store_ps(d + b * drows * 16, acc[b][0]);
    return;
  }
  constexpr unsigned all = (1u << NB) - 1;
  for (index_t r = 0; r < 4; ++r) {
    unsigned slow = 0;
    for (int b = 0; b < NB; ++b) slow |= ((special[b] >> r) & 1u) << b;
    switch (slow) {
      case 0: packed_range_fp32<0, MR, NB>(r, src, stride, x, ldx, acc); break;
      case 1: packed_range_fp32<1, MR, NB>(r, src, stride, x, ldx, acc); break;
      case 2: packed_range_fp32<2 & all, MR, NB>(r, src, stride, x, ldx, acc); break;
      case 4: packed_range_fp32<4 & all, MR, NB>(r, src, stride, x, ldx, acc); break;
      case 8: packed_range_fp32<8 & all, MR, NB>(r, src, stride, x, ldx, acc); break;
      default: packed_range_fp32<all, MR, NB>(r, src, stride, x, ldx, acc); break;
    }
  }
  for (int b = 0; b < NB; ++b) {
    for (int i = 0; i < MR; ++i) _mm512_store_ps(d + (b * drows + i) * 16, acc[b][i]);
  }
}
#endif

#if DSA_CPU_HAS_AVX2 && !DSA_CPU_HAS_AVX512
/// packed_quad_fp32 on 8 rows (AVX2, a packed group of 8 rows): quad q of one block (dword j:
/// codes 4q..4q+3 of row j, at s) decoded and widened in registers, then MR rows of FMAs in
/// ascending k: the values and order of decode_packed_tile followed by gemv_micro<float>.
template <bool Special, int MR>
DSA_FORCEINLINE void packed_quad8_fp32(const std::uint8_t* s, const float* const* xr, __m256* acc) {
  const __m256i quad = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
  const __m256i a = decode_high_bytes8<Special, true>(_mm256_slli_epi16(quad, 8));  // codes 4q, 4q + 2
  const __m256i c = decode_high_bytes8<Special, true>(quad);                        // codes 4q + 1, 4q + 3
  // Each dword's low word moved to its high word, the low word zeroed (control bytes 0x80).
  const __m256i low_to_high = _mm256_setr_epi32(0x01008080, 0x05048080, 0x09088080, 0x0D0C8080, 0x01008080, 0x05048080,
                                                0x09088080, 0x0D0C8080);
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m256 w0 = _mm256_castsi256_ps(_mm256_shuffle_epi8(a, low_to_high));
  const __m256 w1 = _mm256_castsi256_ps(_mm256_shuffle_epi8(c, low_to_high));
  const __m256 w2 = _mm256_castsi256_ps(_mm256_and_si256(a, high));
  const __m256 w3 = _mm256_castsi256_ps(_mm256_and_si256(c, high));
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    const float* xi = xr[i];
    __m256 r = acc[i];
    r = _mm256_fmadd_ps(_mm256_broadcast_ss(xi + 0), w0, r);
    r = _mm256_fmadd_ps(_mm256_broadcast_ss(xi + 1), w1, r);
    r = _mm256_fmadd_ps(_mm256_broadcast_ss(xi + 2), w2, r);
    r = _mm256_fmadd_ps(_mm256_broadcast_ss(xi + 3), w3, r);
    acc[i] = r;
  }
}

/// Quads [q0, q1) of NB blocks of one run for both packed groups of a 16-output panel (group
/// h's quad q of block b at src[h] + q * stride + b * 32; row i's activations of block b at
/// x + i * ldx + b * 128) into acc[b][h].
template <bool Special, int MR, int NB>
DSA_FORCEINLINE void packed_quads8_fp32(index_t q0, index_t q1, const std::uint8_t* const* src, index_t stride,
                                        const float* DSA_RESTRICT x, index_t ldx, __m256 (*acc)[2][MR]) {
  for (index_t q = q0; q < q1; ++q) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const std::uint8_t* line = src[h] + q * stride;
      // The stream NB * 32 bytes per quad: one prefetch per 64-byte line, a run ahead.
      for (int b = 0; b < NB; b += 2) {
        _mm_prefetch(static_cast<const char*>(prefetch_address(line + b * 32, packed_tile_prefetch)), _MM_HINT_T1);
      }
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) {
        const float* xr[MR];
        for (int i = 0; i < MR; ++i) xr[i] = x + i * ldx + b * block + 4 * q;
        packed_quad8_fp32<Special, MR>(line + b * 32, xr, acc[b][h]);
      }
    }
  }
}

/// The AVX2 form of packed_gemv_fp32: the fp32 block dots of MR <= 4 rows with the 16 outputs of
/// groups g, g + 1 for NB blocks from kb0 (within one run), into d[(b * MR + i) * 16 + j], the
/// codes decoded in registers. The 2 x NB x MR accumulators (gemv_nb's budget: at most 8 of the
/// 16 ymm) stay in registers; each range of 8 quads takes the slow-code decode when any of its
/// blocks holds a slow code. Against the pair tile stored and reloaded (x86-64-v3 build, 7168 ->
/// 2048 from DRAM, one thread): 8-13% faster for t = 2..4, 3-6% slower for t = 1, whose decode
/// operations, not the tile's loads and stores, bound both forms; fp8_linear uses it for t >= 2.
template <int MR, int NB>
DSA_FORCEINLINE void packed_gemv8_fp32(const packed_fp8_weight& w, index_t g, index_t kb0, const float* DSA_RESTRICT x,
                                       index_t ldx, float* DSA_RESTRICT d) {
  const std::uint8_t* src[2] = {w.block_codes(g, kb0), w.block_codes(g + 1, kb0)};
  const index_t stride = w.quad_stride(kb0);
  unsigned special = 0;  // bit r: range r of some block is slow
  for (int h = 0; h < 2; ++h) {
    for (int b = 0; b < NB; ++b) special |= w.special(g + h, kb0 + b);
  }
  __m256 acc[NB][2][MR];
  for (int b = 0; b < NB; ++b) {
    for (int h = 0; h < 2; ++h) {
      for (int i = 0; i < MR; ++i) acc[b][h][i] = _mm256_setzero_ps();
    }
  }
  if (special == 0) {
    packed_quads8_fp32<false, MR, NB>(0, quads, src, stride, x, ldx, acc);
  } else {
    for (index_t r = 0; r < 4; ++r) {
      const index_t q0 = r * (quads / 4), q1 = q0 + quads / 4;
      if (((special >> r) & 1u) == 0) {
        packed_quads8_fp32<false, MR, NB>(q0, q1, src, stride, x, ldx, acc);
      } else {
        packed_quads8_fp32<true, MR, NB>(q0, q1, src, stride, x, ldx, acc);
      }
    }
  }
  for (int b = 0; b < NB; ++b) {
    for (int i = 0; i < MR; ++i) {
      for (int h = 0; h < 2; ++h) _mm256_storeu_ps(d + (b * MR + i) * 16 + 8 * h, acc[b][h][i]);
    }
  }
}
#endif

/// Decode: d[(b * MR + i) * NR + j] = fl32(sum over k-block b of x[i][b * 128 + k] *
/// w[j][b * 128 + k]) for NB blocks, MR rows and NR outputs, from NB pair tiles (pt + b *
/// tile_stride). Every output lane sums its block in ascending k from +0 (the fp8_dot::fp32
/// order for T = float; exact for T = double); the NB x MR x NR / lanes sums are independent
/// chains. The products are exact in T, so FMA contraction cannot change a bit.
template <class T, int MR, index_t NR, int NB>
DSA_FORCEINLINE void gemv_micro(const T* DSA_RESTRICT x, index_t ldx, const std::uint32_t* DSA_RESTRICT pt,
                                index_t tile_stride, float* DSA_RESTRICT d, const std::uint8_t* ahead = nullptr) {
  using V = typename vec_of<T>::type;
  constexpr index_t G = group_rows;
  constexpr index_t NG = NR / G;
  constexpr index_t W = G / lanes<T>;  // T vectors per group
  V acc[NB][MR][NG * W];
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
      for (index_t v = 0; v < NG * W; ++v) acc[b][i][v] = V{};
    }
  }
  for (index_t q = 0; q < quads; ++q) {
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) {
      if (ahead != nullptr) __builtin_prefetch(ahead + (q * NB + b) * 64, 0, 2);
#pragma GCC unroll 4
      for (index_t g = 0; g < NG; ++g) {
        const std::uint32_t* p = pt + b * tile_stride + g * pair_tile_dwords + (2 * q) * G;
        vfloat f0, f1, f2, f3;  // codes 4q, 4q + 1, 4q + 2, 4q + 3
        widen_pairs(p, f0, f2);
        widen_pairs(p + G, f1, f3);
        V w0[W], w1[W], w2[W], w3[W];
        to_lanes<T>(f0, w0);
        to_lanes<T>(f1, w1);
        to_lanes<T>(f2, w2);
        to_lanes<T>(f3, w3);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          const T* xi = x + i * ldx + b * block + 4 * q;
#pragma GCC unroll 2
          for (index_t v = 0; v < W; ++v) {
            V a = acc[b][i][g * W + v];
            a += xi[0] * w0[v];
            a += xi[1] * w1[v];
            a += xi[2] * w2[v];
            a += xi[3] * w3[v];
            acc[b][i][g * W + v] = a;
          }
        }
      }
    }
  }
  constexpr index_t L = lanes<T>;
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
      for (index_t v = 0; v < NG * W; ++v) {
#pragma GCC unroll 16
        for (index_t l = 0; l < L; ++l) d[(b * MR + i) * NR + v * L + l] = static_cast<float>(acc[b][i][v][l]);
      }
    }
  }
}

/// gemv_micro for M rows and nb blocks: in one call when nb is the decode step's gemv_nb(M), else
/// (a panel's last, shorter step) one block at a time. Every block is an independent chain, so
/// both give the same bits, and only two block counts per row count are compiled (the decode
/// micro-kernels, fully unrolled, are most of fp8_linear's compile time).
template <class T, index_t NR, int M>
DSA_FORCEINLINE void gemv_micro_steps(int nb, const T* x, index_t ldx, const std::uint32_t* pt, index_t tile_stride,
                                      float* d, const std::uint8_t* ahead) {
  constexpr int NB = gemv_nb<T>(M);
  if (nb == NB) {
    gemv_micro<T, M, NR, NB>(x, ldx, pt, tile_stride, d, ahead);
    return;
  }
  for (int b = 0; b < nb; ++b) {
    gemv_micro<T, M, NR, 1>(x + b * block, ldx, pt + b * tile_stride, tile_stride, d + b * M * NR);
  }
}

/// gemv_micro_steps for t <= gemv_tile_rows<T> rows, out of line: fp8_gemv is instantiated once
/// per weight form (view and packed), and both call this one copy (one call per step of a panel,
/// next to the t * nb * 128 * NR products it runs). d[(b * t + i) * NR + j]: block b, row i.
template <class T, index_t NR>
[[gnu::noinline]] void gemv_micro_call(int t, int nb, const T* x, index_t ldx, const std::uint32_t* pt,
                                       index_t tile_stride, float* d, const std::uint8_t* ahead) {
  if constexpr (gemv_tile_rows<T> >= 8) {
    switch (t) {
      case 5: gemv_micro_steps<T, NR, 5>(nb, x, ldx, pt, tile_stride, d, ahead); return;
      case 6: gemv_micro_steps<T, NR, 6>(nb, x, ldx, pt, tile_stride, d, ahead); return;
      case 7: gemv_micro_steps<T, NR, 7>(nb, x, ldx, pt, tile_stride, d, ahead); return;
      case 8: gemv_micro_steps<T, NR, 8>(nb, x, ldx, pt, tile_stride, d, ahead); return;
      default: break;
    }
  }
  switch (t) {
    case 1: gemv_micro_steps<T, NR, 1>(nb, x, ldx, pt, tile_stride, d, ahead); break;
    case 2: gemv_micro_steps<T, NR, 2>(nb, x, ldx, pt, tile_stride, d, ahead); break;
    case 3: gemv_micro_steps<T, NR, 3>(nb, x, ldx, pt, tile_stride, d, ahead); break;
    default: gemv_micro_steps<T, NR, 4>(nb, x, ldx, pt, tile_stride, d, ahead); break;
  }
}

}  // namespace cpu_detail
DSA_NAMESPACE_END
