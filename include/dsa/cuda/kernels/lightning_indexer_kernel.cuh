// Kernels of lightning_indexer_scores (fp8 and fp32), lightning_indexer_scores_paged and
// lightning_indexer_backward on the CUDA backend.
//
// Over 600 lines by choice: the forward and backward kernels share the dot tile below; apart,
// the tile's staging and decode would be duplicated or exported for two users only.
//
// All of them are built on one block-level "dot tile" (256 threads): the dot products of 64
// row-heads (a query row's head vector q[t, h, :]) with 64 keys, every thread owning 4 row-heads
// x 4 keys in registers. q and k are staged through shared memory 32 columns at a time, loaded
// 16 values per thread (a 16-byte load of e4m3 codes, or four 4-byte words for the 132-byte
// cache rows, whose stride is not a multiple of 16) and decoded in registers with arch/fp8.cuh's
// vectorised decoders into transposed fp32 tiles; no decoded copy ever reaches global memory.
// Each dot runs over i = 0, 1, ..., d-1 in order from +0 (one fmaf per element), which is the
// normative order of dsa/numerics/lightning_indexer.hpp; columns past d are staged as +0 and
// add +0 * +0, which leaves every running sum unchanged (a sum that starts at +0 is never -0).
// With e4m3 inputs every product is exact, so the fmaf rounds exactly like the CPU's
// multiply-then-add and the dots are the CPU's bits.
//
// Forward: a block owns TM query rows x 64 keys (TM = 1, 4 or 16; 64 / TM heads per dot tile).
//   Each dot goes through lightning_indexer_head_term into a shared contribution tile, and the
//   thread that owns a (row, key) score adds the contributions head by head, h ascending from +0,
//   then multiplies by the key's scale once: the CPU's order, so the fp8 scores are bit-identical
//   to the CPU backend's. Tiles that no row's range reaches are written -inf without computing.
// Backward: grad_q / grad_w: a block per (query row, 64 heads, 128 columns) walks the row's range
//   in key tiles; grad_k: a block per (64 keys, 128 columns) walks every (row, head) in order.
//   Each gradient element is summed by one thread in the CPU's order (keys ascending; rows then
//   heads ascending), no atomics, so the results are bit-identical run to run.
//
// Device-resident values are guarded: ranges are clamped to 0 <= start <= end <= n; a paged key
// whose block-table entry is negative or whose slot is outside the cache is never read and scores
// -inf (lightning_indexer_paged_slot); keys outside a row's range are never read through its
// table.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/arch/fp8.cuh"
#include "dsa/numerics/fp32_ops.hpp"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/numerics/lightning_indexer.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

/// Forward parameters. T is fp8_e4m3 or float; the paged kernel reads `cache` through
/// `block_table` instead of `k` / `k_scale`.
template <class T>
struct indexer_scores_params {
  const T* q = nullptr;
  index_t q_stride0 = 0, q_stride1 = 0;
  const float* w = nullptr;
  index_t w_stride0 = 0;
  const T* k = nullptr;
  index_t k_stride0 = 0;
  const float* k_scale = nullptr;
  const std::uint8_t* cache = nullptr;
  index_t cache_stride0 = 0;
  index_t cache_rows = 0;
  const std::int32_t* block_table = nullptr;
  index_t table_stride0 = 0;
  index_t max_blocks = 0;
  index_t block_size = 1;
  const std::int32_t* ranges = nullptr;
  index_t range_stride0 = 0;
  float* scores = nullptr;
  index_t score_stride0 = 0;
  index_t m = 0, heads = 0, d = 0, n = 0;
};

/// Backward parameters (fp32). Absent outputs are null.
struct indexer_backward_params {
  const float* q = nullptr;
  index_t q_stride0 = 0, q_stride1 = 0;
  const float* w = nullptr;
  index_t w_stride0 = 0;
  const float* k = nullptr;
  index_t k_stride0 = 0;
  const float* k_scale = nullptr;
  const std::int32_t* ranges = nullptr;
  index_t range_stride0 = 0;
  const float* grad_scores = nullptr;
  index_t gs_stride0 = 0;
  float* grad_q = nullptr;
  index_t gq_stride0 = 0, gq_stride1 = 0;
  float* grad_w = nullptr;
  index_t gw_stride0 = 0;
  float* grad_k = nullptr;
  index_t gk_stride0 = 0;
  index_t m = 0, heads = 0, d = 0, n = 0;
};


inline constexpr int threads = 256;
inline constexpr int tile = 64;        // row-heads and keys per dot tile
inline constexpr int chunk = 32;       // columns staged per round
inline constexpr int out_cols = 128;   // gradient columns per backward block (4 rounds of 32)

/// The dot tile's shared memory: q and k columns transposed ([column][row-head or key]), so a
/// thread reads its 4 row-heads and 4 keys of a column as two float4s.
struct alignas(16) dot_smem {
  float q[chunk][tile];
  float k[chunk][tile];
};

/// Row [lo, hi) of a device range, clamped to 0 <= lo <= hi <= n.
DSA_DEVICE DSA_FORCEINLINE void clamp_range(const std::int32_t* r, index_t n, index_t& lo, index_t& hi) {
  index_t a = r[0], b = r[1];
  a = a < 0 ? 0 : (a > n ? n : a);
  b = b < a ? a : (b > n ? n : b);
  lo = a;
  hi = b;
}

/// v[j] = value j of the 16 at p, j < valid (> 0), +0 beyond. e4m3 codes: one 16-byte load when
/// aligned, four 4-byte words when 4-byte aligned (cache rows), else byte by byte.
DSA_DEVICE DSA_FORCEINLINE void load16(const fp8_e4m3* p, index_t valid, float (&v)[16]) {
  const auto* b = reinterpret_cast<const std::uint8_t*>(p);
  const auto addr = reinterpret_cast<std::uintptr_t>(b);
  if (valid >= 16 && addr % 16 == 0) {
    cuda_arch::e4m3x16_to_float(*reinterpret_cast<const uint4*>(b), v);
  } else if (valid >= 16 && addr % 4 == 0) {
    const auto* words = reinterpret_cast<const std::uint32_t*>(b);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 f = cuda_arch::e4m3x4_to_float4(words[j]);
      v[4 * j + 0] = f.x;
      v[4 * j + 1] = f.y;
      v[4 * j + 2] = f.z;
      v[4 * j + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = j < valid ? cuda_arch::e4m3_to_float(b[j]) : 0.0f;
  }
}

/// The same for fp32 values: four 16-byte loads when aligned, else element by element.
DSA_DEVICE DSA_FORCEINLINE void load16(const float* p, index_t valid, float (&v)[16]) {
  if (valid >= 16 && reinterpret_cast<std::uintptr_t>(p) % 16 == 0) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 f = reinterpret_cast<const float4*>(p)[j];
      v[4 * j + 0] = f.x;
      v[4 * j + 1] = f.y;
      v[4 * j + 2] = f.z;
      v[4 * j + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = j < valid ? p[j] : 0.0f;
  }
}

DSA_DEVICE DSA_FORCEINLINE void zero16(float (&v)[16]) {
#pragma unroll
  for (int j = 0; j < 16; ++j) v[j] = 0.0f;
}

/// dots[a][b] = q_(4ty+a) · k_(4tx+b) over i = 0 .. d-1 in order (ty = tid / 16, tx = tid % 16).
/// qrow(r) / krow(c) return a pointer to row-head r's / key c's first value, or null for a row
/// that does not exist (staged as zeros, never read). Every thread of the block must call it
/// (it synchronises); `compute` = false skips only the arithmetic.
template <class T, class QRow, class KRow>
DSA_DEVICE DSA_FORCEINLINE void dot_tile(float (&dots)[4][4], dot_smem& sm, const QRow& qrow, const KRow& krow,
                                         index_t d, bool compute) {
  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid % 16, ty = tid / 16;
#pragma unroll
  for (int a = 0; a < 4; ++a) {
#pragma unroll
    for (int b = 0; b < 4; ++b) dots[a][b] = 0.0f;
  }
  // Staging items: threads 0-127 stage q, 128-255 stage k (warp-uniform); item = (row, half).
  const bool stages_q = tid < 128;
  const int row = tid % tile;
  const int half = (tid % 128) / tile;
  const T* src = stages_q ? qrow(row) : krow(row);
  float (*dst)[tile] = stages_q ? sm.q : sm.k;
  for (index_t i0 = 0; i0 < d; i0 += chunk) {
    __syncthreads();  // the previous round's (or caller's) readers are done with sm
    {
      float v[16];
      const index_t col = i0 + 16 * half;
      if (src != nullptr && col < d) {
        load16(src + col, d - col, v);
      } else {
        zero16(v);
      }
#pragma unroll
      for (int j = 0; j < 16; ++j) dst[16 * half + j][row] = v[j];
    }
    __syncthreads();
    if (compute) {
#pragma unroll 8
      for (int i = 0; i < chunk; ++i) {
        const float4 qa = *reinterpret_cast<const float4*>(&sm.q[i][4 * ty]);
        const float4 kb = *reinterpret_cast<const float4*>(&sm.k[i][4 * tx]);
        const float qv[4] = {qa.x, qa.y, qa.z, qa.w};
        const float kv[4] = {kb.x, kb.y, kb.z, kb.w};
#pragma unroll
        for (int a = 0; a < 4; ++a) {
#pragma unroll
          for (int b = 0; b < 4; ++b) dots[a][b] = fmaf(qv[a], kv[b], dots[a][b]);
        }
      }
    }
  }
}


/// Forward scores; see the file comment. TM query rows per block (1, 4 or 16); Paged reads the
/// keys from the 132-byte cache rows through each row's block table (then TM = 1).
// (256, 2): at most 128 registers; without the minimum ptxas capped sm_80's fp8 1- and 4-row
// instantiations at 64 and spilled.
template <class T, bool Paged, int TM>
__global__ void __launch_bounds__(threads, 2) lightning_indexer_scores_kernel(
    const indexer_scores_params<T> p) {
  static_assert(TM == 1 || TM == 4 || TM == 16);
  static_assert(!Paged || (TM == 1 && std::is_same_v<T, fp8_e4m3>));
  constexpr int HC = tile / TM;                         // heads per dot tile
  constexpr int owned = TM * tile < threads ? 1 : TM * tile / threads;  // scores per thread
  constexpr int contrib_stride = tile + 16;            // rows 16 banks apart: conflict-free writes
  __shared__ dot_smem sm;
  __shared__ __align__(16) float contrib[tile][contrib_stride];
  __shared__ index_t row_lo[TM], row_hi[TM];
  __shared__ index_t key_slot[tile];  // paged: cache slot of each key of the tile, -1 unreadable
  __shared__ float key_scale[tile];

  const int tid = static_cast<int>(threadIdx.x);
  const int ty = tid / 16;
  const index_t row_tiles = (p.m + TM - 1) / TM;
  const index_t key_tiles = (p.n + tile - 1) / tile;
  const float neg_inf = __int_as_float(static_cast<int>(0xFF800000u));

  for (index_t item = blockIdx.x; item < row_tiles * key_tiles; item += gridDim.x) {
    const index_t t0 = (item / key_tiles) * TM;
    const index_t s0 = (item % key_tiles) * tile;
    __syncthreads();  // the previous item's readers of the shared arrays are done
    if (tid < TM) {
      index_t lo = 0, hi = 0;
      if (t0 + tid < p.m) clamp_range(p.ranges + (t0 + tid) * p.range_stride0, p.n, lo, hi);
      row_lo[tid] = lo;
      row_hi[tid] = hi;
    }
    __syncthreads();
    if (tid < tile) {
      const index_t s = s0 + tid;
      if constexpr (Paged) {
        // Only keys inside the row's range are looked up: table entries of other blocks may be -1.
        index_t slot = -1;
        if (s >= row_lo[0] && s < row_hi[0]) {
          slot = lightning_indexer_paged_slot(p.block_table + t0 * p.table_stride0, p.max_blocks, p.block_size, s,
                                              p.cache_rows);
        }
        key_slot[tid] = slot;
        key_scale[tid] = slot >= 0 ? indexer_cache_row_scale(p.cache + slot * p.cache_stride0) : 0.0f;
      } else {
        key_slot[tid] = s < p.n ? s : -1;
        key_scale[tid] = s < p.n ? p.k_scale[s] : 0.0f;
      }
    }
    // Does any row of the tile see any key of it? (Every thread computes the same answer.)
    bool any = false;
#pragma unroll
    for (int r = 0; r < TM; ++r) {
      const index_t lo = row_lo[r] > s0 ? row_lo[r] : s0;
      const index_t hi = row_hi[r] < s0 + tile ? row_hi[r] : s0 + tile;
      any = any || lo < hi;
    }
    __syncthreads();  // key_slot / key_scale visible

    float tot[owned];
#pragma unroll
    for (int j = 0; j < owned; ++j) tot[j] = 0.0f;
    if (any) {
      // This thread's 4 row-heads 4ty .. 4ty+3 all belong to tile row (4 ty) / HC.
      const int my_row = (4 * ty) / HC;
      const index_t my_lo = row_lo[my_row] > s0 ? row_lo[my_row] : s0;
      const index_t my_hi = row_hi[my_row] < s0 + tile ? row_hi[my_row] : s0 + tile;
      const bool compute = my_lo < my_hi;
      for (index_t h0 = 0; h0 < p.heads; h0 += HC) {
        // The owners' reads of the previous chunk's contributions are done (dot_tile has no
        // barrier of its own when d == 0).
        __syncthreads();
        const auto qrow = [&](int r) -> const T* {
          const index_t t = t0 + r / HC, h = h0 + r % HC;
          const int tr = r / HC;
          // Rows outside the matrix or with an empty range in this tile are not needed.
          if (t >= p.m || h >= p.heads || row_lo[tr] >= row_hi[tr]) return nullptr;
          return p.q + t * p.q_stride0 + h * p.q_stride1;
        };
        const auto krow = [&](int c) -> const T* {
          const index_t slot = key_slot[c];
          if (slot < 0) return nullptr;
          if constexpr (Paged) {
            return reinterpret_cast<const T*>(p.cache + slot * p.cache_stride0);
          } else {
            return p.k + slot * p.k_stride0;
          }
        };
        float dots[4][4];
        dot_tile<T>(dots, sm, qrow, krow, p.d, compute);
        if (compute) {
#pragma unroll
          for (int a = 0; a < 4; ++a) {
            const int r = 4 * ty + a;
            const index_t h = h0 + r % HC;
            const float w = h < p.heads ? p.w[(t0 + my_row) * p.w_stride0 + h] : 0.0f;
#pragma unroll
            for (int b = 0; b < 4; ++b) contrib[r][4 * (tid % 16) + b] = lightning_indexer_head_term(w, dots[a][b]);
          }
        }
        __syncthreads();
        // The owners add this chunk's heads in ascending order (the next dot_tile's first
        // barrier keeps contrib until they are done).
        const index_t hn = p.heads - h0 < HC ? p.heads - h0 : HC;
#pragma unroll
        for (int j = 0; j < owned; ++j) {
          const int pair = tid + threads * j;
          if (pair < TM * tile) {
            const int r = pair / tile, c = pair % tile;
            for (index_t hh = 0; hh < hn; ++hh) tot[j] += contrib[r * HC + hh][c];
          }
        }
      }
    }
    // Write the tile: in-range readable keys get tot · k_scale, everything else -inf.
#pragma unroll
    for (int j = 0; j < owned; ++j) {
      const int pair = tid + threads * j;
      if (pair < TM * tile) {
        const int r = pair / tile, c = pair % tile;
        const index_t t = t0 + r, s = s0 + c;
        if (t < p.m && s < p.n) {
          const bool in = s >= row_lo[r] && s < row_hi[r] && key_slot[c] >= 0;
          p.scores[t * p.score_stride0 + s] = in ? tot[j] * key_scale[c] : neg_inf;
        }
      }
    }
  }
}

/// grad_q and grad_w: a block per (query row t, 64 heads from h0, 128 columns from c0), walking
/// the row's range in tiles of 64 keys. Thread (ty, tx) owns grad_q of heads h0 + 4ty .. +3 at
/// columns c0 + 32 u + 2 tx + e (u < 4, e < 2); threads 0-63 own grad_w of head h0 + tid (only in
/// the blocks with c0 = 0).
/// A template (on the block size) only so that the header can be included by several
/// translation units: a non-template __global__ function would be defined in each.
template <int Threads>
__global__ void __launch_bounds__(Threads) lightning_indexer_grad_q_kernel(
    const indexer_backward_params p) {
  static_assert(Threads == threads, "the tiling assumes threads threads");
  __shared__ union {
    dot_smem dot;
    float k[tile][chunk];  // key-major column chunk for the accumulation
  } sm;
  __shared__ __align__(16) float z[tile][tile];  // z[key][head]
  __shared__ float g[tile];
  __shared__ bool key_on[tile];
  __shared__ __align__(16) float w[tile];

  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid % 16, ty = tid / 16;
  const index_t head_blocks = (p.heads + tile - 1) / tile;
  const index_t col_blocks = p.grad_q != nullptr ? (p.d + out_cols - 1) / out_cols : 1;
  const index_t items = p.m * head_blocks * col_blocks;

  for (index_t item = blockIdx.x; item < items; item += gridDim.x) {
    const index_t t = item / (head_blocks * col_blocks);
    const index_t h0 = (item / col_blocks) % head_blocks * tile;
    const index_t c0 = item % col_blocks * out_cols;
    index_t lo = 0, hi = 0;
    clamp_range(p.ranges + t * p.range_stride0, p.n, lo, hi);
    __syncthreads();  // the previous item's readers of w are done
    if (tid < tile) w[tid] = h0 + tid < p.heads ? p.w[t * p.w_stride0 + h0 + tid] : 0.0f;

    float gq[4][4][2];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
#pragma unroll
      for (int a = 0; a < 4; ++a) gq[u][a][0] = gq[u][a][1] = 0.0f;
    }
    float gw = 0.0f;

    for (index_t s0 = lo; s0 < hi; s0 += tile) {
      __syncthreads();  // the previous tile's readers of g / key_on / z are done
      bool on = false;
      if (tid < tile) {
        const index_t s = s0 + tid;
        float gs = 0.0f;
        if (s < hi) {
          gs = detail::mul_rn(p.grad_scores[t * p.gs_stride0 + s], p.k_scale[s]);
          on = gs != 0.0f;  // a zero upstream gradient contributes nothing (NaN does)
        }
        g[tid] = gs;
        key_on[tid] = on;
      }
      if (__syncthreads_or(on) == 0) continue;  // block-uniform
      const auto qrow = [&](int r) -> const float* {
        return h0 + r < p.heads ? p.q + t * p.q_stride0 + (h0 + r) * p.q_stride1 : nullptr;
      };
      const auto krow = [&](int c) -> const float* { return key_on[c] ? p.k + (s0 + c) * p.k_stride0 : nullptr; };
      float dots[4][4];
      dot_tile<float>(dots, sm.dot, qrow, krow, p.d, true);
#pragma unroll
      for (int a = 0; a < 4; ++a) {
#pragma unroll
        for (int b = 0; b < 4; ++b) z[4 * tx + b][4 * ty + a] = dots[a][b];
      }
      __syncthreads();
      if (p.grad_w != nullptr && c0 == 0 && tid < tile) {
        for (int c = 0; c < tile; ++c) {
          const float zc = z[c][tid];
          if (key_on[c] && lightning_indexer_relu_active(zc)) gw = fmaf(g[c], zc, gw);
        }
      }
      if (p.grad_q != nullptr) {
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          __syncthreads();  // the dot tile's (or previous round's) readers of sm are done
          {
            // Stage k[s0 + c, c0 + 32u .. +31] key-major: item = (key, half).
            const int c = tid % tile, half = (tid / tile) % 2;
            float v[16];
            const index_t col = c0 + chunk * u + 16 * half;
            if (tid < 128 && key_on[c] && col < p.d) {
              load16(p.k + (s0 + c) * p.k_stride0 + col, p.d - col, v);
            } else {
              zero16(v);
            }
            if (tid < 128) {
#pragma unroll
              for (int j = 0; j < 16; ++j) sm.k[c][16 * half + j] = v[j];
            }
          }
          __syncthreads();
          for (int c = 0; c < tile; ++c) {
            if (!key_on[c]) continue;  // block-uniform
            const float4 z4 = *reinterpret_cast<const float4*>(&z[c][4 * ty]);
            const float zv[4] = {z4.x, z4.y, z4.z, z4.w};
            const float2 kv = *reinterpret_cast<const float2*>(&sm.k[c][2 * tx]);
#pragma unroll
            for (int a = 0; a < 4; ++a) {
              if (lightning_indexer_relu_active(zv[a])) {
                const float coef = detail::mul_rn(g[c], w[4 * ty + a]);
                gq[u][a][0] = fmaf(coef, kv.x, gq[u][a][0]);
                gq[u][a][1] = fmaf(coef, kv.y, gq[u][a][1]);
              }
            }
          }
        }
      }
    }
    if (p.grad_q != nullptr) {
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        const index_t h = h0 + 4 * ty + a;
        if (h >= p.heads) continue;
        float* out = p.grad_q + t * p.gq_stride0 + h * p.gq_stride1;
#pragma unroll
        for (int u = 0; u < 4; ++u) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const index_t col = c0 + chunk * u + 2 * tx + e;
            if (col < p.d) out[col] = gq[u][a][e];
          }
        }
      }
    }
    if (p.grad_w != nullptr && c0 == 0 && tid < tile && h0 + tid < p.heads) {
      p.grad_w[t * p.gw_stride0 + h0 + tid] = gw;
    }
  }
}

/// grad_k: a block per (64 keys from s0, 128 columns from c0), walking the (row, head) pairs in
/// row-major order 64 at a time. Thread (ty, tx) owns keys s0 + 4ty .. +3 at columns
/// c0 + 32 u + 2 tx + e.
/// A template (on the block size) only so that the header can be included by several
/// translation units: a non-template __global__ function would be defined in each.
template <int Threads>
__global__ void __launch_bounds__(Threads) lightning_indexer_grad_k_kernel(
    const indexer_backward_params p) {
  static_assert(Threads == threads, "the tiling assumes threads threads");
  __shared__ union {
    dot_smem dot;
    float q[tile][chunk];  // row-head-major column chunk for the accumulation
  } sm;
  __shared__ __align__(16) float coef[tile][tile];        // coef[row-head][key]
  __shared__ __align__(16) std::uint8_t on[tile][tile];   // on[row-head][key]
  __shared__ index_t rh_row[tile], rh_head[tile];         // -1: no such row-head
  __shared__ index_t rh_lo[tile], rh_hi[tile];

  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid % 16, ty = tid / 16;
  const index_t key_tiles = (p.n + tile - 1) / tile;
  const index_t col_blocks = (p.d + out_cols - 1) / out_cols;
  const index_t pairs = p.m * p.heads;

  for (index_t item = blockIdx.x; item < key_tiles * col_blocks; item += gridDim.x) {
    const index_t s0 = item / col_blocks * tile;
    const index_t c0 = item % col_blocks * out_cols;
    float gk[4][4][2];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
#pragma unroll
      for (int a = 0; a < 4; ++a) gk[u][a][0] = gk[u][a][1] = 0.0f;
    }
    for (index_t f0 = 0; f0 < pairs; f0 += tile) {
      __syncthreads();  // the previous chunk's readers of the row-head arrays are done
      bool sees = false;
      if (tid < tile) {
        const index_t f = f0 + tid;
        index_t lo = 0, hi = 0, t = -1, h = -1;
        if (f < pairs) {
          t = f / p.heads;
          h = f % p.heads;
          clamp_range(p.ranges + t * p.range_stride0, p.n, lo, hi);
          sees = (lo > s0 ? lo : s0) < (hi < s0 + tile ? hi : s0 + tile);
        }
        rh_row[tid] = t;
        rh_head[tid] = h;
        rh_lo[tid] = lo;
        rh_hi[tid] = hi;
      }
      if (__syncthreads_or(sees) == 0) continue;  // block-uniform
      const auto qrow = [&](int r) -> const float* {
        return rh_row[r] >= 0 ? p.q + rh_row[r] * p.q_stride0 + rh_head[r] * p.q_stride1 : nullptr;
      };
      const auto krow = [&](int c) -> const float* {
        return s0 + c < p.n ? p.k + (s0 + c) * p.k_stride0 : nullptr;
      };
      float dots[4][4];
      dot_tile<float>(dots, sm.dot, qrow, krow, p.d, true);
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        const int r = 4 * ty + a;
        const index_t t = rh_row[r];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const int c = 4 * tx + b;
          const index_t s = s0 + c;
          bool active = false;
          float cf = 0.0f;
          if (t >= 0 && s >= rh_lo[r] && s < rh_hi[r]) {
            const float gs = detail::mul_rn(p.grad_scores[t * p.gs_stride0 + s], p.k_scale[s]);
            active = gs != 0.0f && lightning_indexer_relu_active(dots[a][b]);
            cf = detail::mul_rn(gs, p.w[t * p.w_stride0 + rh_head[r]]);
          }
          coef[r][c] = cf;
          on[r][c] = active ? 1 : 0;
        }
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        __syncthreads();  // coef / on complete; the previous readers of sm are done
        {
          const int r = tid % tile, half = (tid / tile) % 2;
          float v[16];
          const index_t col = c0 + chunk * u + 16 * half;
          const float* src = qrow(r);
          if (tid < 128 && src != nullptr && col < p.d) {
            load16(src + col, p.d - col, v);
          } else {
            zero16(v);
          }
          if (tid < 128) {
#pragma unroll
            for (int j = 0; j < 16; ++j) sm.q[r][16 * half + j] = v[j];
          }
        }
        __syncthreads();
        for (int r = 0; r < tile; ++r) {
          const float4 c4 = *reinterpret_cast<const float4*>(&coef[r][4 * ty]);
          const std::uint32_t on4 = *reinterpret_cast<const std::uint32_t*>(&on[r][4 * ty]);
          if (on4 == 0) continue;
          const float cv[4] = {c4.x, c4.y, c4.z, c4.w};
          const float2 qv = *reinterpret_cast<const float2*>(&sm.q[r][2 * tx]);
#pragma unroll
          for (int a = 0; a < 4; ++a) {
            if ((on4 >> (8 * a)) & 0xFFu) {
              gk[u][a][0] = fmaf(cv[a], qv.x, gk[u][a][0]);
              gk[u][a][1] = fmaf(cv[a], qv.y, gk[u][a][1]);
            }
          }
        }
      }
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const index_t s = s0 + 4 * ty + a;
      if (s >= p.n) continue;
      float* out = p.grad_k + s * p.gk_stride0;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const index_t col = c0 + chunk * u + 2 * tx + e;
          if (col < p.d) out[col] = gk[u][a][e];
        }
      }
    }
  }
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
