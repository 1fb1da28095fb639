// Kernels of sparse_mla_attention (bf16 and FP8 caches) on the CUDA backend.
//
// MQA attention: all heads of a token share its selected kv rows, so a block takes a token, a
// group of 16 heads and one split of the token's index entries (FlashMLA's split-k), and walks
// the split in tiles of 32 entries:
//   rows     the tile's indices, -1 for unused entries (negative or >= n: never followed);
//   gather   the 32 kv rows into shared memory as fp32 (bf16 widened, or the FP8 row decoded with
//            kv_fp8_row_latent / kv_fp8_row_rope: code · scale in fp32, RoPE widened), zeros for
//            unused entries, so no row is decoded into global memory;
//   logits   a warp per 4 keys x 16 heads: lanes stride over d_qk (conflict-free shared reads),
//            then a butterfly sum per logit; times softmax_scale, -inf for unused entries;
//   softmax  a warp per 2 heads, a lane per key: the tile's max, online_softmax_rescale,
//            online_softmax_weight (numerics/online_softmax.hpp, the CPU's functions);
//   P·V      a thread per 4 heads x 8 output columns (64-column stride), the fp32 accumulators
//            rescaled by the tile's factor, then the 32 weighted rows added in key order.
// With one split the block normalises (online_softmax_normalize, rounded once to O) and writes
// out and lse; with more it writes the unnormalised accumulator and (max, sum) to the workspace
// (layout: sparse_mla_workspace in numerics/sparse_mla_attention.hpp) and the combine kernel
// merges the splits in ascending order with online_softmax_merge.
// probs (optional) needs the final lse: a block per token and tile of 32 entries recomputes the
// logits for every head group and adds exp(x - lse) over 16-head blocks in the CPU's grouping.
//
// The arithmetic is SIMT fp32 (no tensor cores): logits are exact products summed in a fixed
// order, so everything is deterministic, and the result differs from the CPU backend only by
// fp32 summation order and the device expf / logf (tolerance: docs/decisions.md).
//
// Device-side values are guarded: an index outside [0, n) is an unused entry; nothing is read or
// written out of bounds whatever the indices say.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/arch/warp.cuh"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/numerics/online_softmax.hpp"
#include "dsa/numerics/sparse_mla_attention.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

/// Threads of every sparse-MLA block (8 warps).
inline constexpr int sparse_mla_threads = 256;
/// Heads per block (the group that shares each gathered tile).
inline constexpr int sparse_mla_heads = 16;
/// Index entries per tile (one lane per key in the softmax).
inline constexpr int sparse_mla_tile = 32;
/// Output columns a thread accumulates: 8 columns x 64 threads per head quad covers d_v <= 512.
inline constexpr int sparse_mla_cols = 8;
inline constexpr int sparse_mla_max_dv = sparse_mla_cols * 64;
/// Blocks of the attention kernel resident per SM, which caps its registers at 65536 / (256 ·
/// this): two on sm_90 (2 x 110 KB of shared memory fit its 228 KB; 128 registers, no spills),
/// one on sm_80 (164 KB hold one block, so capping the registers would only spill).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
inline constexpr int sparse_mla_min_blocks = 2;
#else
inline constexpr int sparse_mla_min_blocks = 1;
#endif
/// Threads of the combine kernel: 4 columns each covers d_v <= 512.
inline constexpr int sparse_mla_combine_threads = 128;

template <class O>
struct sparse_mla_params {
  const bf16* q = nullptr;  // [s, h, d_qk]
  index_t q_stride0 = 0;
  index_t q_stride1 = 0;
  const bf16* kv = nullptr;           // bf16 cache [n, d_qk] (bf16 kernels)
  const std::uint8_t* kv_fp8 = nullptr;  // FP8 cache [n, 656] (FP8 kernels)
  index_t kv_row_stride = 0;          // in elements of the cache's type
  index_t n = 0;
  const std::int32_t* indices = nullptr;  // [s, k]
  index_t index_row_stride = 0;
  index_t s = 0;
  index_t h = 0;
  index_t d_qk = 0;
  index_t d_v = 0;
  index_t k = 0;
  float scale = 0.0f;
  index_t num_splits = 1;
  O* out = nullptr;  // [s, h, d_v]
  index_t out_stride0 = 0;
  index_t out_stride1 = 0;
  float* lse = nullptr;  // [s, h]
  index_t lse_stride = 0;
  float* probs = nullptr;  // [s, k], or null
  index_t probs_stride = 0;
  float2* part_state = nullptr;  // [num_splits, s, h] (max, sum), num_splits > 1 only
  float* part_acc = nullptr;     // [num_splits, s, h, d_v]
};

/// Static shared memory of the attention kernel (rows [32], alpha, final_max, final_sum [16]),
/// the larger of the two kernels' (probs: rows [32]); the front-end adds it to the dynamic bytes.
inline constexpr index_t sparse_mla_static_smem_bytes =
    static_cast<index_t>(sizeof(int) * sparse_mla_tile + 3 * sizeof(float) * sparse_mla_heads);

/// Dynamic shared memory of the attention and probs kernels: the head group's queries and one
/// tile of kv rows in fp32 ([16 + 32, d_qk]), and the tile's logits / weights [16, 32].
DSA_HOST_DEVICE DSA_FORCEINLINE index_t sparse_mla_smem_bytes(index_t d_qk) {
  return ((sparse_mla_heads + sparse_mla_tile) * d_qk + sparse_mla_heads * sparse_mla_tile) *
         static_cast<index_t>(sizeof(float));
}


// Queries of heads [g0, g0 + 16) of token t into qs [16, d] (fp32), zeros past the last head.
template <class O>
DSA_DEVICE DSA_FORCEINLINE void load_queries(const sparse_mla_params<O>& p, index_t t, index_t g0, float* qs) {
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const index_t d = p.d_qk;
  for (int r = warp; r < sparse_mla_heads; r += sparse_mla_threads / 32) {
    if (g0 + r < p.h) {
      const bf16* src = p.q + t * p.q_stride0 + (g0 + r) * p.q_stride1;
      for (index_t c = lane; c < d; c += 32) qs[r * d + c] = src[c].to_float();
    } else {
      for (index_t c = lane; c < d; c += 32) qs[r * d + c] = 0.0f;
    }
  }
}

// The tile's kv rows (rows[j], -1 for unused) into ks [32, d] (fp32); zeros for unused entries,
// so that their zero weights never meet a NaN or inf of stale shared memory.
template <bool Fp8, class O>
DSA_DEVICE DSA_FORCEINLINE void load_rows(const sparse_mla_params<O>& p, const int* rows, float* ks) {
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const index_t d = p.d_qk;
  for (int j = warp; j < sparse_mla_tile; j += sparse_mla_threads / 32) {
    const int row = rows[j];
    float* dst = ks + j * d;
    if (row < 0) {
      for (index_t c = lane; c < d; c += 32) dst[c] = 0.0f;
    } else if constexpr (Fp8) {
      // d == kv_dim (checked by the front-end): 512 latent values, then 64 RoPE values.
      const std::uint8_t* src = p.kv_fp8 + row * p.kv_row_stride;
      for (index_t c = lane; c < kv_latent_dim; c += 32) dst[c] = kv_fp8_row_latent(src, c);
      for (index_t c = lane; c < kv_rope_dim; c += 32) dst[kv_latent_dim + c] = kv_fp8_row_rope(src, c).to_float();
    } else {
      const bf16* src = p.kv + row * p.kv_row_stride;
      for (index_t c = lane; c < d; c += 32) dst[c] = src[c].to_float();
    }
  }
}

// sl[r * 32 + j] = scale · (q_r · k_j) for the 16 heads and 32 keys of the tile, -inf where
// rows[j] < 0. Warp w computes keys 4w .. 4w + 3: lane l sums i = l, l + 32, ... in order, then a
// butterfly (arch/warp.cuh) adds the 32 lane sums; the same fixed order in every kernel.
DSA_DEVICE DSA_FORCEINLINE void tile_logits(const float* qs, const float* ks, index_t d, const int* rows, float scale,
                                            float* sl) {
  constexpr int keys = sparse_mla_tile / (sparse_mla_threads / 32);  // 4
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const float* kw = ks + static_cast<index_t>(warp * keys) * d;
  float acc[keys][sparse_mla_heads];
#pragma unroll
  for (int a = 0; a < keys; ++a)
#pragma unroll
    for (int r = 0; r < sparse_mla_heads; ++r) acc[a][r] = 0.0f;
  for (index_t i = lane; i < d; i += 32) {
    float kv[keys];
#pragma unroll
    for (int a = 0; a < keys; ++a) kv[a] = kw[a * d + i];
#pragma unroll
    for (int r = 0; r < sparse_mla_heads; ++r) {
      const float qv = qs[r * d + i];
#pragma unroll
      for (int a = 0; a < keys; ++a) acc[a][r] = fmaf(kv[a], qv, acc[a][r]);
    }
  }
#pragma unroll
  for (int a = 0; a < keys; ++a) {
    const int j = warp * keys + a;
    const bool used = rows[j] >= 0;
#pragma unroll
    for (int r = 0; r < sparse_mla_heads; ++r) {
      const float x = cuda_arch::warp_reduce_sum(acc[a][r]);  // every lane holds the same bits
      if (lane == ((a * sparse_mla_heads + r) & 31)) {
        sl[r * sparse_mla_tile + j] = used ? x * scale : detail::neg_inf_f32();
      }
    }
  }
}

// rows[j] for the entries [e0, e0 + 32) of token t that lie before `end`, -1 for unused ones.
// Called by threads 0 .. 31; returns whether the entry is used.
template <class O>
DSA_DEVICE DSA_FORCEINLINE bool load_tile_rows(const sparse_mla_params<O>& p, index_t t, index_t e0, index_t end,
                                               int* rows) {
  const int j = static_cast<int>(threadIdx.x);
  const index_t e = e0 + j;
  const std::int32_t idx = e < end ? p.indices[t * p.index_row_stride + e] : -1;
  const bool used = e < end && sparse_mla_index_valid(idx, p.n);
  rows[j] = used ? idx : -1;
  return used;
}


/// Attention over one split of the entries of (token, 16-head group) work items (grid-stride);
/// 256 threads, sparse_mla_smem_bytes(d_qk) of dynamic shared memory; d_v <= 512.
template <bool Fp8, class O>
__global__ void __launch_bounds__(sparse_mla_threads, sparse_mla_min_blocks)
    sparse_mla_attention_kernel(const sparse_mla_params<O> p) {
  extern __shared__ float4 sparse_mla_smem[];  // float4: 16-byte aligned
  // sparse_mla_static_smem_bytes
  __shared__ int rows[sparse_mla_tile];
  __shared__ float alpha[sparse_mla_heads];
  __shared__ float final_max[sparse_mla_heads];
  __shared__ float final_sum[sparse_mla_heads];
  constexpr int T = sparse_mla_tile;
  constexpr int H = sparse_mla_heads;
  constexpr int C = sparse_mla_cols;
  const index_t d = p.d_qk;
  float* qs = reinterpret_cast<float*>(sparse_mla_smem);  // [H, d]
  float* ks = qs + H * d;                                 // [T, d]
  float* sl = ks + T * d;                                 // [H, T]: logits, then weights
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  // P·V roles: heads 4·quad .. 4·quad + 3, columns col0 + 64·m.
  const int quad = warp / 2;
  const int col0 = (warp % 2) * 32 + lane;

  const index_t groups = (p.h + H - 1) / H;
  const index_t items = p.s * groups * p.num_splits;
  for (index_t item = blockIdx.x; item < items; item += gridDim.x) {
    const index_t split = item % p.num_splits;
    const index_t g0 = (item / p.num_splits) % groups * H;
    const index_t t = item / p.num_splits / groups;
    const sparse_mla_split_range range = sparse_mla_split(p.k, p.num_splits, split, T);

    __syncthreads();  // the previous item's readers of final_max / final_sum are done
    load_queries(p, t, g0, qs);
    // Softmax roles: warp w keeps the state of heads 2w and 2w + 1 (identical in every lane).
    online_softmax_state st[2];
    float acc[4][C];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int m = 0; m < C; ++m) acc[a][m] = 0.0f;

    for (index_t e0 = range.begin; e0 < range.end; e0 += T) {
      __syncthreads();  // the previous tile's readers of rows, ks and sl are done
      bool used = false;
      if (tid < T) used = load_tile_rows(p, t, e0, range.end, rows);
      if (__syncthreads_or(used) == 0) continue;  // block-uniform: a tile of unused entries adds nothing
      load_rows<Fp8>(p, rows, ks);
      __syncthreads();  // ks (and, on the first tile, qs) complete
      tile_logits(qs, ks, d, rows, p.scale, sl);
      __syncthreads();  // sl complete

#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = 2 * warp + i;
        const float x = sl[r * T + lane];
        const float a = online_softmax_rescale(st[i], cuda_arch::warp_reduce_max_propagate_nan(x));
        const float w = online_softmax_weight(st[i], x);
        st[i].sum += cuda_arch::warp_reduce_sum(w);
        sl[r * T + lane] = w;  // each lane rewrites only the value it read
        if (lane == 0) alpha[r] = a;
      }
      __syncthreads();  // weights and factors complete

#pragma unroll
      for (int a = 0; a < 4; ++a) {
        const float f = alpha[4 * quad + a];
#pragma unroll
        for (int m = 0; m < C; ++m) acc[a][m] *= f;
      }
      for (int j = 0; j < T; ++j) {
        float w[4];
#pragma unroll
        for (int a = 0; a < 4; ++a) w[a] = sl[(4 * quad + a) * T + j];
#pragma unroll
        for (int m = 0; m < C; ++m) {
          const index_t c = col0 + 64 * m;
          if (c < p.d_v) {
            const float v = ks[j * d + c];
#pragma unroll
            for (int a = 0; a < 4; ++a) acc[a][m] = fmaf(w[a], v, acc[a][m]);
          }
        }
      }
    }

    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        final_max[2 * warp + i] = st[i].max;
        final_sum[2 * warp + i] = st[i].sum;
      }
    }
    __syncthreads();  // final states visible

#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int r = 4 * quad + a;
      if (g0 + r >= p.h) continue;
      const online_softmax_state fs{final_max[r], final_sum[r]};
      if (p.num_splits == 1) {
        O* dst = p.out + t * p.out_stride0 + (g0 + r) * p.out_stride1;
#pragma unroll
        for (int m = 0; m < C; ++m) {
          const index_t c = col0 + 64 * m;
          if (c < p.d_v) dst[c] = from_float<O>(online_softmax_normalize(fs, acc[a][m]));
        }
        if (col0 == 0) p.lse[t * p.lse_stride + g0 + r] = online_softmax_lse(fs);
      } else {
        const index_t pi = (split * p.s + t) * p.h + g0 + r;
        float* dst = p.part_acc + pi * p.d_v;
#pragma unroll
        for (int m = 0; m < C; ++m) {
          const index_t c = col0 + 64 * m;
          if (c < p.d_v) dst[c] = acc[a][m];
        }
        if (col0 == 0) p.part_state[pi] = make_float2(fs.max, fs.sum);
      }
    }
  }
}

/// Merges the num_splits partial states of each (token, head) in ascending split order with
/// online_softmax_merge and writes out (rounded once to O) and lse. 128 threads, d_v <= 512.
template <class O>
__global__ void __launch_bounds__(sparse_mla_combine_threads) sparse_mla_combine_kernel(const sparse_mla_params<O> p) {
  constexpr int C = sparse_mla_max_dv / sparse_mla_combine_threads;  // 4
  const int tid = static_cast<int>(threadIdx.x);
  const index_t items = p.s * p.h;
  for (index_t item = blockIdx.x; item < items; item += gridDim.x) {
    const index_t t = item / p.h;
    const index_t hh = item % p.h;
    online_softmax_state st{};
    float acc[C];
#pragma unroll
    for (int m = 0; m < C; ++m) acc[m] = 0.0f;
    for (index_t sp = 0; sp < p.num_splits; ++sp) {
      const index_t pi = (sp * p.s + t) * p.h + hh;
      const float2 ps = p.part_state[pi];
      const online_softmax_merge_factors f = online_softmax_merge(st, online_softmax_state{ps.x, ps.y});
      const float* src = p.part_acc + pi * p.d_v;
#pragma unroll
      for (int m = 0; m < C; ++m) {
        const index_t c = tid + sparse_mla_combine_threads * m;
        if (c < p.d_v) acc[m] = acc[m] * f.scale_a + src[c] * f.scale_b;
      }
      st = f.merged;
    }
    O* dst = p.out + t * p.out_stride0 + hh * p.out_stride1;
#pragma unroll
    for (int m = 0; m < C; ++m) {
      const index_t c = tid + sparse_mla_combine_threads * m;
      if (c < p.d_v) dst[c] = from_float<O>(online_softmax_normalize(st, acc[m]));
    }
    if (tid == 0) p.lse[t * p.lse_stride + hh] = online_softmax_lse(st);
  }
}

/// probs[t, e] = sum over heads of exp(x_h,e - lse[t, h]) for the entries of (token, tile of 32)
/// work items, summed over blocks of 16 heads as the CPU does; 0 for unused entries. Runs after
/// lse is final. 256 threads, sparse_mla_smem_bytes(d_qk) of dynamic shared memory.
template <bool Fp8, class O>
__global__ void __launch_bounds__(sparse_mla_threads) sparse_mla_probs_kernel(const sparse_mla_params<O> p) {
  extern __shared__ float4 sparse_mla_smem[];
  __shared__ int rows[sparse_mla_tile];
  constexpr int T = sparse_mla_tile;
  constexpr int H = sparse_mla_heads;
  const index_t d = p.d_qk;
  float* qs = reinterpret_cast<float*>(sparse_mla_smem);
  float* ks = qs + H * d;
  float* sl = ks + T * d;
  const int tid = static_cast<int>(threadIdx.x);

  const index_t tiles = (p.k + T - 1) / T;
  const index_t items = p.s * tiles;
  for (index_t item = blockIdx.x; item < items; item += gridDim.x) {
    const index_t t = item / tiles;
    const index_t e0 = item % tiles * T;
    __syncthreads();  // the previous item's readers of rows and ks are done
    if (tid < T) load_tile_rows(p, t, e0, p.k, rows);
    __syncthreads();
    load_rows<Fp8>(p, rows, ks);
    float total = 0.0f;  // thread j < 32: entry e0 + j
    for (index_t g0 = 0; g0 < p.h; g0 += H) {
      load_queries(p, t, g0, qs);
      __syncthreads();  // qs (and ks) complete; the previous group's readers of sl are done
      tile_logits(qs, ks, d, rows, p.scale, sl);
      __syncthreads();  // sl complete; every reader of qs is done
      if (tid < T) {
        float part = 0.0f;
        const index_t hn = p.h - g0 < H ? p.h - g0 : H;
        for (index_t r = 0; r < hn; ++r) {
          part += online_softmax_probability_from_lse(sl[r * T + tid], p.lse[t * p.lse_stride + g0 + r]);
        }
        total += part;
      }
    }
    if (tid < T && e0 + tid < p.k) p.probs[t * p.probs_stride + e0 + tid] = total;
  }
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
