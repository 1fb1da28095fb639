// Register-blocked micro-kernels of the CPU attention ops (sparse_mla_attention,
// sparse_mha_attention): a tile of keys decoded to fp32 is shared by a group of queries (the
// heads of a token, or the tokens of a block for one head), which is what makes attention
// compute-bound. GCC vector extensions (arch/vec.hpp), lowered to AVX-512, AVX2 or SSE.
//   - logits, vectorised over the queries: S^T[j, h] = sum_i k[j, i] · q[h, i], i = 0, 1, ...
//     from +0, with the queries transposed once ([d, queries]) and each key value broadcast. bf16 x bf16
//     products (and FP8 values, which are bf16 values) are exact in fp32, so this is the same
//     sequential sum whether or not the compiler fuses it into FMAs;
//   - P·V, vectorised over the output columns, in two orders: `tile_pv` forms a partial sum per
//     tile (j ascending from +0) and adds it to the accumulator (sparse_mla_attention's online
//     softmax); `tile_pv_sequential` adds every product to the accumulator in entry order, each
//     product rounded on its own (sparse_mha_attention's acc += fl32(p · v)); and
//     `pv_gather_sequential`, the same for one query over rows gathered by index.
// Every output element is the same sequence of operations however heads and keys are blocked
// (the blocking only chooses which independent sums are in flight together).
#pragma once

#include <cstdint>
#include <cstring>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/isa.hpp"
#include "dsa/cpu/arch/vec.hpp"

// Keeps g++ from contracting a * b + c into an FMA in one function (its -ffp-contract=fast
// default would otherwise fuse a product that the numerics round on their own; clang does not
// contract across statements by default).
#if defined(__GNUC__) && !defined(__clang__)
#define DSA_NO_FP_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define DSA_NO_FP_CONTRACT
#endif

DSA_NAMESPACE_BEGIN
namespace cpu_detail::tiles {

/// Lanes of one micro-kernel vector; matrices the kernels touch are padded to a multiple.
inline constexpr index_t lanes = simd::tile_lanes;
inline constexpr index_t pad(index_t x) { return (x + lanes - 1) / lanes * lanes; }

// Register blocking of the two micro-kernels (accumulators = KEYS x HEADV and HEADS x COLV
// vectors of 16 floats: 1 zmm, 2 ymm or 4 xmm each), sized to the register file.
#if DSA_CPU_HAS_AVX512
inline constexpr int logit_keys = 6, logit_headv = 4;
inline constexpr int pv_heads = 6, pv_colv = 4;
#elif DSA_CPU_HAS_AVX
// 12 ymm accumulators, 2 operand vectors and a splat: 15 of 16 registers, no spill (g++ 12's
// inner loops are 12 FMAs, 6 broadcasts, 2 loads). 3 x 2 (17) spilled, 2 x 2 too; 6 x 1 made
// sparse MLA decode 6-8% faster than 4 x 1 (83% of Eigen's GEMM against 78%, one core).
inline constexpr int logit_keys = 6, logit_headv = 1;
inline constexpr int pv_heads = 6, pv_colv = 1;
#else
inline constexpr int logit_keys = 2, logit_headv = 1;
inline constexpr int pv_heads = 2, pv_colv = 1;
#endif

// The micro-kernels compute in the target's own vectors (arch/vec.hpp: 16 fp32 lanes with
// AVX-512, 8 with AVX, 4 otherwise), VPL of them per 16-lane unit of the tiles, not in one
// 16-lane vector type: g++ 12 splats a scalar to a vector wider than the registers lane by lane
// through the stack, which held the AVX2 build's tiles at 2% of their FMA rate. Every lane does
// the same operations in the same order whatever the width.
using vec = simd::vfloat;
inline constexpr index_t vl = simd::lanes<float>;
inline constexpr int VPL = simd::vectors_per_tile;

// dst[c] = float(src[c]) for c < d: bf16 -> fp32 is a 16-bit shift of the pattern, written on the
// integers so that it vectorises.
DSA_FORCEINLINE void widen_bf16(const bf16* DSA_RESTRICT src, index_t d, float* DSA_RESTRICT dst) {
  for (index_t c = 0; c < d; ++c) dst[c] = detail::bits_float(static_cast<std::uint32_t>(src[c].bits) << 16);
}

// st[j * hpad + h] = sum_i kt[j * kstride + i] · qt[i * hpad + h] for KEYS keys and HEADV * 16
// heads, i ascending from +0.
template <int KEYS, int HEADV>
DSA_FORCEINLINE void logits_block(const float* DSA_RESTRICT qt, index_t hpad, const float* DSA_RESTRICT kt,
                                  index_t kstride, index_t d, float* DSA_RESTRICT st) {
  constexpr int NV = HEADV * VPL;
  vec acc[KEYS][NV];
  for (int j = 0; j < KEYS; ++j)
    for (int v = 0; v < NV; ++v) acc[j][v] = vec{};
  for (index_t i = 0; i < d; ++i) {
    vec qv[NV];
    for (int v = 0; v < NV; ++v) std::memcpy(&qv[v], qt + i * hpad + v * vl, sizeof(vec));
    for (int j = 0; j < KEYS; ++j) {
      const float kj = kt[j * kstride + i];
      for (int v = 0; v < NV; ++v) acc[j][v] += kj * qv[v];
    }
  }
  for (int j = 0; j < KEYS; ++j)
    for (int v = 0; v < NV; ++v) {
      const vec x = acc[j][v];  // a copy: taking the accumulators' address would keep them in memory
      std::memcpy(st + j * hpad + v * vl, &x, sizeof x);
    }
}

template <int KEYS>
void logits_keys(const float* qt, index_t hpad, const float* kt, index_t kstride, index_t d, float* st) {
  index_t h = 0;
  for (; h + logit_headv * lanes <= hpad; h += logit_headv * lanes) {
    logits_block<KEYS, logit_headv>(qt + h, hpad, kt, kstride, d, st + h);
  }
  for (; h < hpad; h += lanes) logits_block<KEYS, 1>(qt + h, hpad, kt, kstride, d, st + h);
}

// S^T [jn, hpad] of the tile: blocks of logit_keys keys, then of 4 (a 64-key tile is 10 x 6 + 4),
// then single keys.
inline void tile_logits(const float* qt, index_t hpad, const float* kt, index_t kstride, index_t d, index_t jn,
                        float* st) {
  index_t j = 0;
  for (; j + logit_keys <= jn; j += logit_keys) logits_keys<logit_keys>(qt, hpad, kt + j * kstride, kstride, d, st + j * hpad);
  if constexpr (logit_keys > 4) {
    for (; j + 4 <= jn; j += 4) logits_keys<4>(qt, hpad, kt + j * kstride, kstride, d, st + j * hpad);
  }
  for (; j < jn; ++j) logits_keys<1>(qt, hpad, kt + j * kstride, kstride, d, st + j * hpad);
}

// acc[h * astride + c] += sum_j p[h * phs + j * pks] · kt[j * kstride + c] (the partial sum over
// j ascending from +0, then one addition) for HEADS heads and COLV * 16 columns.
template <int HEADS, int COLV>
DSA_FORCEINLINE void pv_block(const float* DSA_RESTRICT p, index_t phs, index_t pks, const float* DSA_RESTRICT kt,
                              index_t kstride, index_t jn, float* DSA_RESTRICT acc, index_t astride) {
  constexpr int NV = COLV * VPL;
  vec part[HEADS][NV];
  for (int h = 0; h < HEADS; ++h)
    for (int v = 0; v < NV; ++v) part[h][v] = vec{};
  for (index_t j = 0; j < jn; ++j) {
    vec vv[NV];
    for (int v = 0; v < NV; ++v) std::memcpy(&vv[v], kt + j * kstride + v * vl, sizeof(vec));
    for (int h = 0; h < HEADS; ++h) {
      const float ph = p[h * phs + j * pks];
      for (int v = 0; v < NV; ++v) part[h][v] += ph * vv[v];
    }
  }
  for (int h = 0; h < HEADS; ++h) {
    for (int v = 0; v < NV; ++v) {
      vec x;
      std::memcpy(&x, acc + h * astride + v * vl, sizeof x);
      x += part[h][v];
      std::memcpy(acc + h * astride + v * vl, &x, sizeof x);
    }
  }
}

template <int COLV>
void pv_cols(const float* p, index_t phs, index_t pks, const float* kt, index_t kstride, index_t jn, float* acc,
             index_t astride, index_t heads) {
  index_t h = 0;
  for (; h + pv_heads <= heads; h += pv_heads) {
    pv_block<pv_heads, COLV>(p + h * phs, phs, pks, kt, kstride, jn, acc + h * astride, astride);
  }
  for (; h < heads; ++h) pv_block<1, COLV>(p + h * phs, phs, pks, kt, kstride, jn, acc + h * astride, astride);
}

// acc [heads, dvpad] += P · V (V = the first dvpad columns of the tile), P's entry for head h and
// key j at p[h * phs + j * pks].
inline void tile_pv(const float* p, index_t phs, index_t pks, const float* kt, index_t kstride, index_t jn, float* acc,
                    index_t astride, index_t heads, index_t dvpad) {
  index_t c = 0;
  // Columns outer, heads inner: the tile's V slice (jn x 64 floats) stays in L1 over the heads.
  for (; c + pv_colv * lanes <= dvpad; c += pv_colv * lanes) pv_cols<pv_colv>(p, phs, pks, kt + c, kstride, jn, acc + c, astride, heads);
  for (; c < dvpad; c += lanes) pv_cols<1>(p, phs, pks, kt + c, kstride, jn, acc + c, astride, heads);
}


// acc[h * astride + c] += fl32(p[h * pstride + j] · v[j * vstride + c]) for j = 0, 1, ..., jn - 1
// in order (no partial sums, no fused multiply-add) for HEADS heads and COLV * 16 columns.
template <int HEADS, int COLV>
DSA_NO_FP_CONTRACT void pv_sequential_block(const float* DSA_RESTRICT p, index_t pstride, const float* DSA_RESTRICT v,
                                            index_t vstride, index_t jn, float* DSA_RESTRICT acc, index_t astride) {
  constexpr int NV = COLV * VPL;
  vec a[HEADS][NV];
  for (int h = 0; h < HEADS; ++h)
    for (int c = 0; c < NV; ++c) std::memcpy(&a[h][c], acc + h * astride + c * vl, sizeof(vec));
  for (index_t j = 0; j < jn; ++j) {
    vec vv[NV];
    for (int c = 0; c < NV; ++c) std::memcpy(&vv[c], v + j * vstride + c * vl, sizeof(vec));
    for (int h = 0; h < HEADS; ++h) {
      const float ph = p[h * pstride + j];
      for (int c = 0; c < NV; ++c) {
        const vec prod = ph * vv[c];
        a[h][c] += prod;
      }
    }
  }
  for (int h = 0; h < HEADS; ++h)
    for (int c = 0; c < NV; ++c) {
      const vec x = a[h][c];
      std::memcpy(acc + h * astride + c * vl, &x, sizeof x);
    }
}

template <int COLV>
void pv_sequential_cols(const float* p, index_t pstride, const float* v, index_t vstride, index_t jn, float* acc,
                        index_t astride, index_t heads) {
  index_t h = 0;
  for (; h + pv_heads <= heads; h += pv_heads) {
    pv_sequential_block<pv_heads, COLV>(p + h * pstride, pstride, v, vstride, jn, acc + h * astride, astride);
  }
  for (; h < heads; ++h) pv_sequential_block<1, COLV>(p + h * pstride, pstride, v, vstride, jn, acc + h * astride, astride);
}

// acc [heads, dvpad] += P [heads, jn] · V [jn, dvpad], product by product in entry order.
inline void tile_pv_sequential(const float* p, index_t pstride, const float* v, index_t vstride, index_t jn, float* acc,
                               index_t astride, index_t heads, index_t dvpad) {
  index_t c = 0;
  for (; c + pv_colv * lanes <= dvpad; c += pv_colv * lanes) {
    pv_sequential_cols<pv_colv>(p, pstride, v + c, vstride, jn, acc + c, astride, heads);
  }
  for (; c < dvpad; c += lanes) pv_sequential_cols<1>(p, pstride, v + c, vstride, jn, acc + c, astride, heads);
}

// acc[c] += fl32(p[e] · v[rows[e] * vstride + c]) for e = 0, 1, ..., cnt - 1 in order (one
// row of out = P · V over gathered rows, product by product) for COLV * 16 columns.
template <int COLV>
DSA_NO_FP_CONTRACT void pv_gather_block(const float* DSA_RESTRICT p, const std::int32_t* DSA_RESTRICT rows, index_t cnt,
                                        const float* DSA_RESTRICT v, index_t vstride, float* DSA_RESTRICT acc) {
  constexpr int NV = COLV * VPL;
  vec a[NV];
  for (int c = 0; c < NV; ++c) std::memcpy(&a[c], acc + c * vl, sizeof(vec));
  for (index_t e = 0; e < cnt; ++e) {
    const float pe = p[e];
    const float* row = v + static_cast<index_t>(rows[e]) * vstride;
    for (int c = 0; c < NV; ++c) {
      vec vv;
      std::memcpy(&vv, row + c * vl, sizeof vv);
      const vec prod = pe * vv;
      a[c] += prod;
    }
  }
  for (int c = 0; c < NV; ++c) {
    const vec x = a[c];
    std::memcpy(acc + c * vl, &x, sizeof x);
  }
}

// acc [dvpad] += sum_e p[e] · V[rows[e]], product by product in entry order.
inline void pv_gather_sequential(const float* p, const std::int32_t* rows, index_t cnt, const float* v, index_t vstride,
                                 float* acc, index_t dvpad) {
  index_t c = 0;
  for (; c + pv_colv * lanes <= dvpad; c += pv_colv * lanes) pv_gather_block<pv_colv>(p, rows, cnt, v + c, vstride, acc + c);
  for (; c < dvpad; c += lanes) pv_gather_block<1>(p, rows, cnt, v + c, vstride, acc + c);
}

}  // namespace cpu_detail::tiles
DSA_NAMESPACE_END
