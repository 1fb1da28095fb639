// fp8_linear's prefill micro-kernels (t > 4 rows; cpu/fp8_linear.hpp has the overview): a
// block's pair tile (kernels/fp8_pair_tile.hpp) widened once into a T tile [128][NR], then MR
// rows x NR outputs per call with x broadcast, each lane summing the block in ascending k from
// +0 (the order of the decode micro-kernels, so prefill and decode give the same bits), and every
// block's sum promoted into the output accumulators in block order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cpu/arch/vec.hpp"
#include "dsa/cpu/kernels/fp8_block_dot.hpp"
#include "dsa/numerics/linear.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

/// Prefill: the pair tile of one block widened into tile[k][NR] of T (once per block, shared by
/// every row of the chunk).
template <class T, index_t NR>
DSA_FORCEINLINE void widen_tile(const std::uint32_t* DSA_RESTRICT pt, T* DSA_RESTRICT tile) {
  using V = typename vec_of<T>::type;
  constexpr index_t G = group_rows;
  constexpr index_t W = G / lanes<T>;
  for (index_t g = 0; g < NR / G; ++g) {
    for (index_t q = 0; q < quads; ++q) {
      const std::uint32_t* p = pt + g * pair_tile_dwords + (2 * q) * G;
      vfloat f[4];
      widen_pairs(p, f[0], f[2]);
      widen_pairs(p + G, f[1], f[3]);
      for (index_t c = 0; c < 4; ++c) {
        V w[W];
        to_lanes<T>(f[c], w);
        for (index_t v = 0; v < W; ++v) {
          std::memcpy(tile + (4 * q + c) * NR + g * G + v * lanes<T>, &w[v], sizeof(V));
        }
      }
    }
  }
}

/// Prefill: d[i][j] = fl32(sum over the block of x[i][k] * tile[k][j]) for MR rows and NR
/// outputs (x broadcast, NR / lanes vectors per row), each lane in ascending k from +0.
template <class T, int MR, index_t NR>
DSA_FORCEINLINE void gemm_micro(const T* DSA_RESTRICT x, index_t ldx, const T* DSA_RESTRICT tile,
                                float* DSA_RESTRICT d) {
  using V = typename vec_of<T>::type;
  constexpr index_t L = lanes<T>;
  constexpr index_t NV = NR / L;
  V acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (index_t v = 0; v < NV; ++v) acc[i][v] = V{};
  }
#pragma GCC unroll 2
  for (index_t k = 0; k < block; ++k) {
    V w[NV];
#pragma GCC unroll 8
    for (index_t v = 0; v < NV; ++v) w[v] = *reinterpret_cast<const V*>(tile + k * NR + v * L);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const T xi = x[i * ldx + k];
#pragma GCC unroll 8
      for (index_t v = 0; v < NV; ++v) acc[i][v] += xi * w[v];
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (index_t v = 0; v < NV; ++v) {
#pragma GCC unroll 16
      for (index_t l = 0; l < L; ++l) d[i * NR + v * L + l] = static_cast<float>(acc[i][v][l]);
    }
  }
}

template <class T, index_t NR, int M>
DSA_FORCEINLINE void gemm_micro_dispatch(int mr, const T* x, index_t ldx, const T* tile, float* d) {
  if constexpr (M >= 1) {
    if (mr < M) {
      gemm_micro_dispatch<T, NR, M - 1>(mr, x, ldx, tile, d);
    } else {
      gemm_micro<T, M, NR>(x, ldx, tile, d);
    }
  }
}

/// One k-block of a prefill panel for every row of the chunk: MR rows at a time through the
/// micro-kernel, each product promoted into acc[rows][NR] in block order. Out of line and shared
/// by both weight forms' fp8_gemm, as gemv_micro_call (one call per panel and block).
template <class T, index_t NR, int MR>
[[gnu::noinline]] void gemm_block_rows(index_t rows, const T* xb, const T* tile, float* d, float* acc,
                                       const float* xs, index_t nkb, index_t kb, float wscale) {
  for (index_t i0 = 0; i0 < rows; i0 += MR) {
    const int mr = static_cast<int>(std::min<index_t>(MR, rows - i0));
    gemm_micro_dispatch<T, NR, MR>(mr, xb + i0 * block, block, tile, d);
    for (int i = 0; i < mr; ++i) {
      promote<NR>(acc + (i0 + i) * NR, d + i * NR, fp8_linear_block_scale(xs[(i0 + i) * nkb + kb], wscale));
    }
  }
}

}  // namespace cpu_detail
DSA_NAMESPACE_END
