// The tensor-core kernel of lightning_indexer_scores (FP8) and lightning_indexer_scores_paged,
// run by default where the device has mma.sync (sm_80+) and the shapes fit
// (cuda/lightning_indexer.cuh); the exact kernel (lightning_indexer_kernel.cuh), bit-identical
// with the CPU, stays the reference it is checked against.
//
// A block item is up to 64 query rows x 256 keys (lanes and shared memory:
// lightning_indexer_fast_layout.hpp):
//   keys     each key's slot and scale (plain: key s itself; paged: through the row's block
//            table, only for keys inside the row's range, lightning_indexer_paged_slot), then
//            the 256 rows of e4m3 codes into shared memory with cp.async (16-byte copies, or
//            4-byte ones for rows that are not 16-byte aligned, e.g. the 132-byte cache rows);
//            unreadable keys are zero-filled and score -inf. An item no row's range reaches is
//            written -inf without computing;
//   frags    every warp converts its 32 keys' codes to f16 A fragments once (exact: every e4m3
//            value is an f16), kept in registers for all the item's rows;
//   queries  two rows' heads at a time, converted to f16 into a swizzled shared tile (two
//            buffers: the next rows' codes are loaded into registers while these are computed);
//   scores   per row and n-block of 8 heads, f16 mma.sync.m16n8k16 over d = 128 with fp32
//            accumulators gives q·k of 32 keys x 8 heads; ReLU, the head's weight
//            (lightning_indexer_head_term, NaN propagating) and the head sum in registers, then
//            over the four lanes of a group; times k_scale once; -inf outside the row's range.
// Differences from the exact kernel: the tensor cores sum each dot's 128 exact products in their
// own order and precision (fp32 accumulation), and the heads are summed in another order; the
// result is checked against the exact kernel with DeepGEMM's calc_diff (docs/cuda.md).
//
// Deterministic: fixed tiles and orders, no atomics.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/arch/mma.cuh"
#include "dsa/cuda/arch/warp.cuh"
#include "dsa/cuda/kernels/lightning_indexer_fast_layout.hpp"
#include "dsa/cuda/kernels/lightning_indexer_kernel.cuh"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/numerics/lightning_indexer.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

/// The exact kernel's parameters (fp8), the rows of a block item and how key rows are copied.
struct indexer_fast_params {
  indexer_scores_params<fp8_e4m3> base;
  int rows_per_item = 1;     ///< 1..64 (paged: 1, each row reads its own table)
  bool key_copy16 = false;   ///< key rows 16-byte aligned (else 4-byte copies)
};

/// Scores of the items (grid-stride); see the file comment. 256 threads,
/// indexer_fast_smem().bytes of dynamic shared memory; heads <= 64, d = 128, q rows 16-byte
/// aligned, key rows 4-byte aligned (the launcher checks). One block per SM: the 64 registers of
/// key fragments, the next rows' query codes and four accumulator chains take ~190 registers
/// (capping them at 128 for two blocks spilled).
template <bool Paged>
__global__ void __launch_bounds__(indexer_fast_threads, 1) lightning_indexer_fast_kernel(const indexer_fast_params fp) {
  extern __shared__ float4 indexer_fast_dynamic_smem[];  // float4: 16-byte aligned
  unsigned char* const smem = reinterpret_cast<unsigned char*>(indexer_fast_dynamic_smem);
  constexpr indexer_fast_smem_layout L = indexer_fast_smem();
  constexpr int NK = indexer_fast_keys;
  constexpr int HMAX = indexer_fast_max_heads;
  constexpr int SR = indexer_fast_stage_rows;
  const indexer_scores_params<fp8_e4m3>& p = fp.base;
  float* const key_scale = reinterpret_cast<float*>(smem + L.scale);
  index_t* const key_slot = reinterpret_cast<index_t*>(smem + L.slot);
  int* const row_range = reinterpret_cast<int*>(smem + L.range);
  const std::uint32_t keys_s = cuda_arch::smem_address(smem + L.keys);
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int heads = static_cast<int>(p.heads);
  const index_t tm = fp.rows_per_item;
  const index_t row_tiles = (p.m + tm - 1) / tm;
  const index_t key_tiles = (p.n + NK - 1) / NK;
  const float neg_inf = __int_as_float(static_cast<int>(0xFF800000u));

  for (index_t item = blockIdx.x; item < row_tiles * key_tiles; item += gridDim.x) {
    const index_t t0 = item / key_tiles * tm;
    const index_t s0 = item % key_tiles * NK;
    const int rows = static_cast<int>(p.m - t0 < tm ? p.m - t0 : tm);
    __syncthreads();  // the previous item's readers of every shared array are done

    // ---- the rows' ranges; each key's slot and scale ----
    bool sees = false;
    if (tid < rows) {
      index_t lo, hi;
      clamp_range(p.ranges + (t0 + tid) * p.range_stride0, p.n, lo, hi);
      row_range[2 * tid] = static_cast<int>(lo);
      row_range[2 * tid + 1] = static_cast<int>(hi);
      sees = (lo > s0 ? lo : s0) < (hi < s0 + NK ? hi : s0 + NK);
    }
    {
      const index_t s = s0 + tid;
      index_t slot = -1;
      float scale = 0.0f;
      if constexpr (Paged) {
        // Only keys inside the row's range are looked up: table entries of other blocks may be -1.
        index_t lo, hi;
        clamp_range(p.ranges + t0 * p.range_stride0, p.n, lo, hi);
        if (s >= lo && s < hi) {
          slot = lightning_indexer_paged_slot(p.block_table + t0 * p.table_stride0, p.max_blocks, p.block_size, s,
                                              p.cache_rows);
        }
        if (slot >= 0) scale = indexer_cache_row_scale(p.cache + slot * p.cache_stride0);
      } else if (s < p.n) {
        slot = s;
        scale = p.k_scale[s];
      }
      key_slot[tid] = slot;
      key_scale[tid] = scale;
    }
    if (__syncthreads_or(sees) == 0) {  // block-uniform; also makes the slots visible
      const index_t s = s0 + tid;
      if (s < p.n) {
        for (int r = 0; r < rows; ++r) p.scores[(t0 + r) * p.score_stride0 + s] = neg_inf;
      }
      continue;
    }

    // ---- the key codes into the key tile (zeros for unreadable keys) ----
    const auto key_row = [&](index_t slot) -> const std::uint8_t* {
      if constexpr (Paged) {
        return p.cache + slot * p.cache_stride0;
      } else {
        return reinterpret_cast<const std::uint8_t*>(p.k + slot * p.k_stride0);
      }
    };
    if (fp.key_copy16) {
      // Eight consecutive threads copy one key's 128 bytes.
      for (int u = tid; u < NK * 8; u += indexer_fast_threads) {
        const int key = u / 8, chunk = u % 8;
        const index_t slot = key_slot[key];
        cuda_arch::cp_async_16_or_zero(keys_s + indexer_key_offset(key, chunk),
                                       slot >= 0 ? key_row(slot) + 16 * chunk : nullptr, p.q);
      }
    } else {
      // A warp copies one key's 32 words.
      for (int u = tid; u < NK * 32; u += indexer_fast_threads) {
        const int key = u / 32, word = u % 32;
        const index_t slot = key_slot[key];
        const bool ok = slot >= 0;
        cuda_arch::cp_async_4(keys_s + indexer_key_offset(key, word / 4) + 4 * (word % 4),
                              ok ? static_cast<const void*>(key_row(slot) + 4 * word) : p.q, ok);
      }
    }
    cuda_arch::cp_async_commit();

    // ---- the queries of stage rows [2 round, 2 round + 2): codes into registers, then f16 ----
    // Thread unit u = tid + 256 i (i < 4): stage row u / 512, head u / 8 % 64, 16 codes u % 8.
    constexpr int units = SR * HMAX * 8 / indexer_fast_threads;
    const auto load_queries = [&](int round, uint4 (&codes)[units]) {
#pragma unroll
      for (int i = 0; i < units; ++i) {
        const int u = tid + indexer_fast_threads * i;
        const int r = SR * round + u / (HMAX * 8), head = u / 8 % HMAX, chunk = u % 8;
        codes[i] = make_uint4(0, 0, 0, 0);
        if (r < rows && head < heads) {
          codes[i] = *reinterpret_cast<const uint4*>(p.q + (t0 + r) * p.q_stride0 + head * p.q_stride1 + 16 * chunk);
        }
      }
    };
    const auto store_queries = [&](int buffer, const uint4 (&codes)[units]) {
      unsigned char* const tile = smem + L.queries + buffer * SR * HMAX * indexer_query_row_bytes;
#pragma unroll
      for (int i = 0; i < units; ++i) {
        const int u = tid + indexer_fast_threads * i;
        const int row = u / 8, chunk = u % 8;  // stage row * 64 + head
        const std::uint32_t w[4] = {codes[i].x, codes[i].y, codes[i].z, codes[i].w};
        std::uint32_t h[8];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          h[2 * j] = cuda_arch::e4m3x2_to_f16x2(w[j] & 0xFFFFu);
          h[2 * j + 1] = cuda_arch::e4m3x2_to_f16x2(w[j] >> 16);
        }
        *reinterpret_cast<uint4*>(tile + indexer_query_offset(row, 2 * chunk)) = make_uint4(h[0], h[1], h[2], h[3]);
        *reinterpret_cast<uint4*>(tile + indexer_query_offset(row, 2 * chunk + 1)) = make_uint4(h[4], h[5], h[6], h[7]);
      }
    };
    {
      uint4 codes[units] = {};
      load_queries(0, codes);
      store_queries(0, codes);
    }
    cuda_arch::cp_async_wait<0>();
    __syncthreads();  // the key tile and the first queries visible

    // ---- this warp's keys as f16 A fragments: a[mb][slab][k-step][register] ----
    std::uint32_t a[2][indexer_fast_slabs][4][4];
#pragma unroll
    for (int mb = 0; mb < 2; ++mb) {
#pragma unroll
      for (int slab = 0; slab < indexer_fast_slabs; ++slab) {
        std::uint32_t ld[2][4];
#pragma unroll
        for (int load = 0; load < 2; ++load) {
          const uint4 v = *reinterpret_cast<const uint4*>(
              smem + L.keys + indexer_key_offset(indexer_a_key(warp, lane, mb, load), indexer_a_chunk(lane, slab)));
          ld[load][0] = v.x;
          ld[load][1] = v.y;
          ld[load][2] = v.z;
          ld[load][3] = v.w;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
          for (int r = 0; r < 4; ++r) a[mb][slab][j][r] = cuda_arch::e4m3x2_to_f16x2(cuda_arch::fp8_a_pair(ld[0], ld[1], j, r));
        }
      }
    }

    // ---- one row: 32 keys of this warp x every head ----
    const index_t wk0 = s0 + indexer_fast_warp_keys * warp;
    const auto score_row = [&](int r, int buffer) {
      const index_t t = t0 + r;
      const index_t lo = row_range[2 * r], hi = row_range[2 * r + 1];
      const int sr = r % SR;
      if (!((lo > wk0 ? lo : wk0) < (hi < wk0 + indexer_fast_warp_keys ? hi : wk0 + indexer_fast_warp_keys))) {
        if (wk0 + lane < p.n) p.scores[t * p.score_stride0 + wk0 + lane] = neg_inf;  // warp-uniform branch
        return;
      }
      const unsigned char* const tile = smem + L.queries + buffer * SR * HMAX * indexer_query_row_bytes;
      const float* const w = p.w + t * p.w_stride0;
      float part[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};  // [m-block][row groupID / groupID + 8]
#pragma unroll
      for (int nb = 0; nb < HMAX / 8; ++nb) {
        if (8 * nb >= heads) break;  // warp-uniform
        std::uint32_t b[indexer_fast_slabs][4][2];
#pragma unroll
        for (int slab = 0; slab < indexer_fast_slabs; ++slab) {
          std::uint32_t words[8];
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const uint4 v = *reinterpret_cast<const uint4*>(
                tile + indexer_query_offset(indexer_b_row(lane, sr, nb), indexer_b_chunk(lane, slab, half)));
            words[4 * half + 0] = v.x;
            words[4 * half + 1] = v.y;
            words[4 * half + 2] = v.z;
            words[4 * half + 3] = v.w;
          }
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            b[slab][j][0] = words[cuda_arch::f16_b_word(j, 0)];
            b[slab][j][1] = words[cuda_arch::f16_b_word(j, 1)];
          }
        }
        // One accumulator per (m-block, slab): four independent mma chains, added once.
        float acc[2][indexer_fast_slabs][4];
#pragma unroll
        for (int mb = 0; mb < 2; ++mb) {
#pragma unroll
          for (int slab = 0; slab < indexer_fast_slabs; ++slab) {
            acc[mb][slab][0] = acc[mb][slab][1] = acc[mb][slab][2] = acc[mb][slab][3] = 0.0f;
          }
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
          for (int mb = 0; mb < 2; ++mb) {
#pragma unroll
            for (int slab = 0; slab < indexer_fast_slabs; ++slab) {
              cuda_arch::mma_f16_16816(acc[mb][slab], a[mb][slab][j], b[slab][j]);
            }
          }
        }
        // ReLU, weight and head sum: heads indexer_c_head(lane, nb, i) for i = 0, 1 (and 2, 3).
        const int h0 = indexer_c_head(lane, nb, 0), h1 = indexer_c_head(lane, nb, 1);
        const float w0 = h0 < heads ? w[h0] : 0.0f, w1 = h1 < heads ? w[h1] : 0.0f;
#pragma unroll
        for (int mb = 0; mb < 2; ++mb) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const bool head_in = (i & 1) == 0 ? h0 < heads : h1 < heads;
            const float term = lightning_indexer_head_term((i & 1) == 0 ? w0 : w1, acc[mb][0][i] + acc[mb][1][i]);
            part[mb][i >> 1] += head_in ? term : 0.0f;
          }
        }
      }
#pragma unroll
      for (int mb = 0; mb < 2; ++mb) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          part[mb][h] += __shfl_xor_sync(cuda_arch::full_warp_mask, part[mb][h], 1);
          part[mb][h] += __shfl_xor_sync(cuda_arch::full_warp_mask, part[mb][h], 2);
        }
      }
      const int mb = indexer_store_mblock(lane), h = indexer_store_half(lane);
      const float sum = mb == 0 ? (h == 0 ? part[0][0] : part[0][1]) : (h == 0 ? part[1][0] : part[1][1]);
      const int key = indexer_store_key(warp, lane);
      const index_t s = s0 + key;
      if (s < p.n) {
        const bool in = s >= lo && s < hi && key_slot[key] >= 0;
        p.scores[t * p.score_stride0 + s] = in ? sum * key_scale[key] : neg_inf;
      }
    };

    const int rounds = (rows + SR - 1) / SR;
    for (int round = 0; round < rounds; ++round) {
      const bool next = round + 1 < rounds;
      uint4 codes[units] = {};
      if (next) load_queries(round + 1, codes);  // in flight while this round computes
#pragma unroll
      for (int sr = 0; sr < SR; ++sr) {
        if (SR * round + sr < rows) score_row(SR * round + sr, round & 1);
      }
      if (next) store_queries((round + 1) & 1, codes);  // the other buffer: last read a round ago
      __syncthreads();  // this round's readers done; the next round's queries visible
    }
  }
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
