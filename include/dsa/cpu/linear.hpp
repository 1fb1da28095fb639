// CPU backend of dsa::linear and, through cpu/fp8_linear.hpp, of dsa::fp8_linear (both ops of
// ops/linear.hpp, and the packed-weight fp8_linear overload).
//
// linear: every output y[i, n] is summed over k in the target's vector lanes (L = 16 with AVX-512,
// 8 with AVX, 4 otherwise; lane l takes k = l, l + L, ...), each multiply-add fused where the
// target has FMA (simd::fma_lanes, whatever the optimisation level), the lanes reduced in a fixed
// tree and the k tail (in % L values) added in order, then rounded once to the output type. That
// order is one definition for every row count, so a row's result does not depend on how many
// rows the call has (batch invariance: the forward pass runs one sequence's tokens alone or
// beside others and must get the same bits, docs/design.md "Batches"), nor on the thread count
// (each output is computed by one thread). It does depend on the target's vector width and FMA
// (docs/decisions.md, "Dense building blocks").
// The kernel: the rows in blocks of linear_row_block, converted exactly to fp32 once per block
// (thread-local scratch); over the block, output groups of 4 split over the threads, each group's
// 4 weight rows streamed once per block (bf16 widened in registers, nothing converted in memory)
// against the block's rows 4 at a time: 4 x 4 lane accumulators. Decode (t <= 4: lm_head, the
// MoE gate, the absorbed MLA projections) keeps them in registers over the whole k range, one
// pass over the weight; a block of more rows (a batched decode, a prefill) walks k in chunks
// (linear_k_chunk), so that a chunk of the group's weight rows stays in L1 while every 4 rows
// of the block use it, the accumulators held in memory between chunks.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/cpu/arch/prefetch.hpp"
#include "dsa/cpu/arch/vec.hpp"
#include "dsa/cpu/fp8_linear.hpp"
#include "dsa/numerics/fp32_ops.hpp"
#include "dsa/ops/linear.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

// The SIMD vocabulary (arch/vec.hpp) the kernel is written in.
using simd::load_vec;
using simd::reduce_lanes;

/// How far ahead in each weight row linear_tile asks for the next line (into L1). The four
/// rows it streams at once are four sequential streams that the hardware prefetcher alone kept at
/// 74-78% of the read-only probe (bf16 lm_head, from DRAM); 1 KB ahead measured 85-90% on one and
/// two threads (512 B-2 KB within the noise of each other; 4 KB no better than none).
inline constexpr std::uintptr_t gemv_row_prefetch = 1024;

/// Rows per block: their fp32 copy (linear_row_block x in floats, 917 KB at in = 7168) is
/// converted once and read by every output group.
inline constexpr index_t linear_row_block = 32;

/// The k-chunk of a block of more than 4 rows: each output group's 4 weight rows are read over
/// one chunk (8 KB of bf16) by every 4 rows of the block in turn, from L1, while the block's rows
/// come from L2 one chunk (128 KB) at a time. Without chunks each 4-row tile streamed its
/// group's whole weight rows (57 KB at in = 7168, more than L1) and its rows (112 KB): both from
/// L2, and the block's 917 KB crowded the weights out of it, 22% of the FMA peak at 32 rows.
/// The chunks change where the sums pause, not their order: lane accumulators carry over.
inline constexpr index_t linear_k_chunk = 1024;

/// TR <= 4 rows of the fp32 block xf (row stride `in`) against one output group's G = 4 weight
/// rows wr, over k in [k0, k1) (multiples of the lane count): acc[i][j] += lanes of x_i * w_j,
/// in ascending k. Each weight row's line `prefetch_bytes` ahead of k is asked for.
template <int TR, class W>
DSA_FORCEINLINE void linear_lanes(const float* xf, index_t in, const W* const* wr, index_t k0, index_t k1,
                                  vfloat (&acc)[4][4], std::uintptr_t prefetch_bytes = gemv_row_prefetch) {
  constexpr index_t L = lanes<float>;
  constexpr index_t G = 4;
  for (index_t k = k0; k < k1; k += L) {
    vfloat wv[G];
#pragma GCC unroll 4
    for (index_t j = 0; j < G; ++j) {
      if (k % (64 / static_cast<index_t>(sizeof(W))) == 0) {
        __builtin_prefetch(prefetch_address(wr[j] + k, prefetch_bytes), 0, 3);
      }
      wv[j] = load_vec(wr[j] + k);
    }
#pragma GCC unroll 4
    for (int i = 0; i < TR; ++i) {
      const vfloat xk = simd::in_register(load_vec(xf + i * in + k));
#pragma GCC unroll 4
      for (index_t j = 0; j < G; ++j) simd::fma_lanes(acc[i][j], xk, wv[j]);
    }
  }
}

/// The outputs n0 .. n0 + nn - 1 of TR rows from their lane accumulators: the lanes reduced in a
/// fixed tree, the k tail (in % L values) added in order, one rounding to O; to y rows yrow0 ...
template <int TR, class W, class O>
DSA_FORCEINLINE void linear_store(const float* xf, index_t in, const W* const* wr, index_t nn, index_t n0,
                                  const vfloat (&acc)[4][4], const tensor_view<O, 2>& y, index_t yrow0) {
  const index_t inv = in / lanes<float> * lanes<float>;
  for (int i = 0; i < TR; ++i) {
    for (index_t j = 0; j < nn; ++j) {
      float s = reduce_lanes(acc[i][j]);
      for (index_t k = inv; k < in; ++k) s = detail::fma_if_fast(xf[i * in + k], to_float(wr[j][k]), s);
      y(yrow0 + i, n0 + j) = from_float<O>(s);
    }
  }
}

/// One output group over TR <= 4 rows, the whole k range in registers (a decode's one pass).
template <int TR, class W, class O>
DSA_FORCEINLINE void linear_tile(const float* xf, index_t in, const W* const* wr, index_t nn, index_t n0,
                                 const tensor_view<O, 2>& y, index_t yrow0) {
  vfloat acc[4][4] = {};
  linear_lanes<TR>(xf, in, wr, 0, in / lanes<float> * lanes<float>, acc);
  linear_store<TR>(xf, in, wr, nn, n0, acc, y, yrow0);
}

/// TR-row tile i0 of a chunked block: its accumulators from memory, one chunk, back to memory.
template <int TR, class W>
DSA_FORCEINLINE void linear_chunk_tile(const float* xf, index_t in, const W* const* wr, index_t k0, index_t k1,
                                       vfloat (*mem)[4], std::uintptr_t prefetch_bytes) {
  vfloat acc[4][4];
#pragma GCC unroll 4
  for (int i = 0; i < TR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[i][j] = mem[i][j];
  }
  linear_lanes<TR>(xf, in, wr, k0, k1, acc, prefetch_bytes);
#pragma GCC unroll 4
  for (int i = 0; i < TR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) mem[i][j] = acc[i][j];
  }
}

/// One output group over a block of `rows` (5 ... linear_row_block) rows: k in chunks of
/// linear_k_chunk, every 4 rows of the block per chunk, the accumulators kept in `mem`
/// [rows][4] between chunks.
template <class W, class O>
void linear_group_chunked(const float* xf, index_t in, index_t rows, const W* const* wr, index_t nn, index_t n0,
                          vfloat (*mem)[4], const tensor_view<O, 2>& y, index_t yrow0) {
  const index_t inv = in / lanes<float> * lanes<float>;
  for (index_t i = 0; i < rows; ++i) {
    for (int j = 0; j < 4; ++j) mem[i][j] = vfloat{};
  }
  // The first tile of a chunk streams the chunk's weights (asking 1 KB ahead); the others read
  // them from L1 and meanwhile ask for the next chunk's, so that memory is not idle while they
  // compute (a block of 8 rows: 1.25x).
  constexpr std::uintptr_t next_chunk = linear_k_chunk * sizeof(W);
  for (index_t k0 = 0; k0 < inv; k0 += linear_k_chunk) {
    const index_t k1 = std::min(inv, k0 + linear_k_chunk);
    index_t i = 0;
    for (; i + 4 <= rows; i += 4) {
      linear_chunk_tile<4>(xf + i * in, in, wr, k0, k1, mem + i, i == 0 ? gemv_row_prefetch : next_chunk);
    }
    switch (rows - i) {
      case 1: linear_chunk_tile<1>(xf + i * in, in, wr, k0, k1, mem + i, next_chunk); break;
      case 2: linear_chunk_tile<2>(xf + i * in, in, wr, k0, k1, mem + i, next_chunk); break;
      case 3: linear_chunk_tile<3>(xf + i * in, in, wr, k0, k1, mem + i, next_chunk); break;
      default: break;
    }
  }
  for (index_t i = 0; i < rows; i += 4) {
    vfloat acc[4][4] = {};
    const index_t tr = std::min<index_t>(4, rows - i);
    for (index_t r = 0; r < tr; ++r) {
      for (int j = 0; j < 4; ++j) acc[r][j] = mem[i + r][j];
    }
    switch (tr) {
      case 1: linear_store<1>(xf + i * in, in, wr, nn, n0, acc, y, yrow0 + i); break;
      case 2: linear_store<2>(xf + i * in, in, wr, nn, n0, acc, y, yrow0 + i); break;
      case 3: linear_store<3>(xf + i * in, in, wr, nn, n0, acc, y, yrow0 + i); break;
      default: linear_store<4>(xf + i * in, in, wr, nn, n0, acc, y, yrow0 + i); break;
    }
  }
}

template <class X, class W, class O>
void linear(const cpu_backend& be, const tensor_view<const X, 2>& x, const tensor_view<const W, 2>& w,
            const tensor_view<O, 2>& y) {
  constexpr index_t G = 4;
  const index_t t = x.extent(0);
  const index_t in = x.extent(1);
  const index_t out = w.extent(0);
  if (in == 0) {
    fill_zero(be, y);
    return;
  }
  const index_t groups = (out + G - 1) / G;
  float* xf = scratch<float, 6>(static_cast<std::size_t>(std::min(t, linear_row_block) * in));
  for (index_t r0 = 0; r0 < t; r0 += linear_row_block) {
    const index_t rows = std::min(linear_row_block, t - r0);
    for (index_t i = 0; i < rows; ++i) {
      const X* xr = x.row(r0 + i);
      for (index_t k = 0; k < in; ++k) xf[i * in + k] = to_float(xr[k]);
    }
    auto body = [&](index_t g0, index_t g1) {
      vfloat mem[linear_row_block][4];
      for (index_t g = g0; g < g1; ++g) {
        const index_t n0 = g * G;
        const index_t nn = std::min(G, out - n0);
        const W* wr[G];
        for (index_t j = 0; j < G; ++j) wr[j] = w.row(n0 + std::min(j, nn - 1));
        switch (rows) {
          case 1: linear_tile<1>(xf, in, wr, nn, n0, y, r0); break;
          case 2: linear_tile<2>(xf, in, wr, nn, n0, y, r0); break;
          case 3: linear_tile<3>(xf, in, wr, nn, n0, y, r0); break;
          case 4: linear_tile<4>(xf, in, wr, nn, n0, y, r0); break;
          default: linear_group_chunked(xf, in, rows, wr, nn, n0, mem, y, r0); break;
        }
      }
    };
    if (out * in * static_cast<index_t>(sizeof(W)) >= gemv_parallel_bytes || rows * out * in >= gemv_parallel_bytes * 64) {
      parallel_for(be, groups, 8, body);
    } else {
      body(0, groups);
    }
  }
}

}  // namespace cpu_detail

template <>
struct op_impl<cpu_backend, linear_op> {
  template <class X, class W, class O>
  static void run(const cpu_backend& be, tensor_view<const X, 2> x, tensor_view<const W, 2> w, tensor_view<O, 2> y) {
    cpu_detail::linear(be, x, w, y);
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CPU_OP_INSTANCES(DSA_LINEAR_INSTANCES)
