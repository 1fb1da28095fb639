// The tensor-core kernel of sparse_mla_attention (bf16 and FP8 caches), run by default where the
// device has mma.sync (sm_80+) and the shapes fit (cuda/sparse_mla_attention.cuh); the exact SIMT
// kernels (sparse_mla_attention_kernel.cuh) stay the reference it is checked against.
//
// A block takes a token, 64 heads and one split of the token's index entries (FlashMLA's split-k)
// and walks the split in tiles of 64 entries (lanes and shared memory:
// sparse_mla_attention_fast_layout.hpp):
//   gather   the tile's used cache rows into a swizzled bf16 tile with cp.async, zero rows for
//            unused entries (never read). FP8 rows: 16 codes at a time decoded exactly to bf16
//            (code · power-of-two scale is a bf16 value), the bf16 RoPE copied. With `Prefetch`
//            the next tile's rows are in flight while this one is computed (a second bf16 tile,
//            or a raw FP8 staging tile decoded in shared memory);
//   S        bf16 mma.sync.m16n8k16 with fp32 accumulators, times softmax_scale, -inf for unused
//            entries (whatever Q holds);
//   softmax  online, in fp32 (numerics/online_softmax.hpp): the tile's row maximum (NaN
//            propagating) across both halves of the head block, the factor, the weights
//            exp(x - max) summed in fp32;
//   P V      P rounded to bf16 (the only rounding the fast path adds before the output's), the
//            fp32 accumulators rescaled, then bf16 mma.sync over the tile's 64 rows.
// One split: out = acc / sum rounded once to O, lse = max + ln(sum); more: the unnormalised
// accumulator and (max, sum) go to the workspace, and the exact path's combine kernel merges them.
// A head without a used entry gets out 0 and lse +inf; a NaN in a used row or in a head's query
// reaches exactly the heads whose logits read it, as in the exact kernels.
//
// Deterministic: fixed tiles, fixed reduction orders, no atomics.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/arch/fp8.cuh"
#include "dsa/cuda/arch/mma.cuh"
#include "dsa/cuda/arch/warp.cuh"
#include "dsa/cuda/kernels/sparse_mla_attention_fast_layout.hpp"
#include "dsa/cuda/kernels/sparse_mla_attention_kernel.cuh"
#include "dsa/numerics/fp32_ops.hpp"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/numerics/online_softmax.hpp"
#include "dsa/numerics/sparse_mla_attention.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

/// 16 e4m3 codes times a power-of-two scale as 16 bf16 values (two 16-byte chunks): exactly
/// kv_fp8_row_latent's fp32 values, which bf16 represents (4 significant bits).
DSA_DEVICE DSA_FORCEINLINE void mla_decode_fp8_chunk(const uint4 codes, float scale, uint4& lo, uint4& hi) {
  const std::uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
  std::uint32_t out[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = cuda_arch::e4m3x2_to_float2(w[i] & 0xFFFFu);
    const float2 b = cuda_arch::e4m3x2_to_float2(w[i] >> 16);
    out[2 * i] = cuda_arch::pack_bf16x2(a.x * scale, a.y * scale);
    out[2 * i + 1] = cuda_arch::pack_bf16x2(b.x * scale, b.y * scale);
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

/// Tensor-core sparse MLA attention; see the file comment. 256 threads,
/// mla_fast_smem(d_qk, Fp8, Prefetch).bytes of dynamic shared memory. Requires d_qk a multiple of
/// 64 up to 576, d_v a multiple of 32 up to 512, 16-byte aligned q rows and cache rows (the
/// launcher checks).
template <bool Fp8, bool Prefetch, class O>
__global__ void __launch_bounds__(mla_fast_threads, 1) sparse_mla_attention_fast_kernel(const sparse_mla_params<O> p) {
  extern __shared__ float4 mla_fast_dynamic_smem[];  // float4: 16-byte aligned
  unsigned char* const smem = reinterpret_cast<unsigned char*>(mla_fast_dynamic_smem);
  constexpr int T = mla_fast_tile;
  constexpr int H = mla_fast_heads;
  constexpr int NB = mla_fast_max_out_blocks;
  const mla_fast_smem_layout L = mla_fast_smem(static_cast<int>(p.d_qk), Fp8, Prefetch);
  const int rc = static_cast<int>(p.d_qk) / 8;  // 16-byte chunks per row
  const int kgroups = static_cast<int>(p.d_qk) / 64;  // groups of four k-steps
  const int d_v = static_cast<int>(p.d_v);
  const int out_blocks = d_v / 16;  // n-blocks of 8 columns per half
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int hb = mla_fast_head_block(warp), half = mla_fast_half(warp);
  const std::uint32_t q_s = cuda_arch::smem_address(smem + L.q);
  const std::uint32_t p_s = cuda_arch::smem_address(smem + L.p);
  const std::uint32_t raw_s = cuda_arch::smem_address(smem + L.raw);
  float* const red_max = reinterpret_cast<float*>(smem + L.red);  // [2][64]
  float* const red_sum = red_max + 2 * H;                         // [2][64]
  int* const rows = reinterpret_cast<int*>(smem + L.rows);        // [2][64]
  const unsigned char* const raw = smem + L.raw;

  // This lane's ldmatrix offsets of k-steps 0..3 (later groups: + 128 bytes each).
  int qa_off[4], kb_off[2][4];
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    qa_off[ks] = mla_qk_a_offset(lane, hb, ks, rc);
#pragma unroll
    for (int np = 0; np < 2; ++np) kb_off[np][ks] = mla_qk_b_offset(lane, half, np, ks, rc);
  }

  const index_t groups = (p.h + H - 1) / H;
  const index_t items = p.s * groups * p.num_splits;
  for (index_t item = blockIdx.x; item < items; item += gridDim.x) {
    const index_t split = item % p.num_splits;
    const index_t g0 = (item / p.num_splits) % groups * H;
    const index_t t = item / p.num_splits / groups;
    const sparse_mla_split_range range = sparse_mla_split(p.k, p.num_splits, split, T);
    const index_t tiles = (range.end - range.begin + T - 1) / T;

    // The tile's cache rows into rows[buf] (threads 0..63): -1 for unused entries.
    const auto fill_rows = [&](index_t tile, int buf) {
      if (tid < T) {
        const index_t e = range.begin + tile * T + tid;
        const std::int32_t idx = e < range.end ? p.indices[t * p.index_row_stride + e] : -1;
        rows[buf * T + tid] = sparse_mla_index_valid(idx, p.n) ? idx : -1;
      }
    };
    // cp.async of the tile's rows (rows[buf]) into the bf16 tile at `k_s`, or (FP8 with
    // Prefetch) the raw rows into the staging tile; zeros for unused rows. Warp w takes rows
    // w, w + 8, ...; an unused row's copies read nothing (src-size 0; the source named is q).
    const auto issue_tile = [&](int buf, std::uint32_t k_s) {
      for (int j = warp; j < T; j += mla_fast_threads / 32) {
        const int row = rows[buf * T + j];
        if constexpr (Fp8) {
          const std::uint8_t* src = p.kv_fp8 + static_cast<index_t>(row < 0 ? 0 : row) * p.kv_row_stride;
          for (int c = lane; c < mla_fp8_row_chunks; c += 32) {
            cuda_arch::cp_async_16_or_zero(raw_s + (j * mla_fp8_row_chunks + c) * 16, row >= 0 ? src + 16 * c : nullptr, p.q);
          }
        } else {
          const bf16* src = p.kv + static_cast<index_t>(row < 0 ? 0 : row) * p.kv_row_stride;
          for (int c = lane; c < rc; c += 32) {
            cuda_arch::cp_async_16_or_zero(k_s + mla_tile_offset(j, c, rc), row >= 0 ? src + 8 * c : nullptr, p.q);
          }
        }
      }
    };
    // Decodes the tile's FP8 rows into the bf16 tile at `k`: from the staging tile (Prefetch) or
    // straight from global memory; zeros for unused rows.
    const auto decode_tile = [&](int buf, unsigned char* k) {
      for (int v = tid; v < T * mla_fp8_units; v += mla_fast_threads) {
        const int j = v / mla_fp8_units, u = v % mla_fp8_units;
        const int row = rows[buf * T + j];
        uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
        if (row >= 0) {
          const std::uint8_t* src;
          if constexpr (Prefetch) {
            src = raw + j * static_cast<int>(kv_fp8_row_bytes);
          } else {
            src = p.kv_fp8 + static_cast<index_t>(row) * p.kv_row_stride;
          }
          lo = *reinterpret_cast<const uint4*>(src + 16 * mla_fp8_unit_source_chunk(u));
          if (mla_fp8_unit_is_latent(u)) mla_decode_fp8_chunk(lo, kv_fp8_row_scale(src, mla_fp8_unit_scale_group(u)), lo, hi);
        }
        *reinterpret_cast<uint4*>(k + mla_tile_offset(j, mla_fp8_unit_dest_chunk(u, 0), rc)) = lo;
        if (mla_fp8_unit_is_latent(u)) *reinterpret_cast<uint4*>(k + mla_tile_offset(j, mla_fp8_unit_dest_chunk(u, 1), rc)) = hi;
      }
    };

    __syncthreads();  // the previous item's readers of every shared array are done
    // The group's queries (zeros past the last head), in the first cp.async group.
    for (int r = warp; r < H; r += mla_fast_threads / 32) {
      const bool head = g0 + r < p.h;
      const bf16* src = p.q + t * p.q_stride0 + (head ? g0 + r : 0) * p.q_stride1;
      for (int c = lane; c < rc; c += 32) cuda_arch::cp_async_16_or_zero(q_s + mla_tile_offset(r, c, rc), head ? src + 8 * c : nullptr, p.q);
    }
    if (tiles > 0) fill_rows(0, 0);
    __syncthreads();  // rows[0] visible
    if constexpr (Prefetch) {
      if (tiles > 0) issue_tile(0, cuda_arch::smem_address(smem + L.k0));
    }
    cuda_arch::cp_async_commit();

    // Softmax state of this lane's rows groupID and groupID + 8 (the same in both halves and in
    // the four lanes of a group; `sum` holds this lane's share only).
    online_softmax_state st[2];
    float acc[NB][4];
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;

    for (index_t i = 0; i < tiles; ++i) {
      const int cur = static_cast<int>(i & 1);
      const bool next = i + 1 < tiles;
      unsigned char* const kt = smem + (Prefetch && !Fp8 && cur == 1 ? L.k1 : L.k0);
      const std::uint32_t k_s = cuda_arch::smem_address(kt);
      // ---- stage tile i; start fetching tile i + 1 ----
      if constexpr (!Fp8 && Prefetch) {
        // Tile i was issued one iteration ago (or in the prologue) into kt.
        if (next) fill_rows(i + 1, cur ^ 1);  // rows[cur ^ 1]'s last readers passed tile i - 1's barriers
        cuda_arch::cp_async_wait<0>();
        __syncthreads();  // tile i (and the queries) visible, rows[cur ^ 1] visible
        if (next) issue_tile(cur ^ 1, cuda_arch::smem_address(smem + (cur == 0 ? L.k1 : L.k0)));
        cuda_arch::cp_async_commit();
      } else if constexpr (!Fp8) {
        __syncthreads();  // every reader of kt (tile i - 1's P V) is done
        issue_tile(cur, k_s);
        cuda_arch::cp_async_commit();
        if (next) fill_rows(i + 1, cur ^ 1);
        cuda_arch::cp_async_wait<0>();
        __syncthreads();  // tile i visible
      } else if constexpr (Prefetch) {
        cuda_arch::cp_async_wait<0>();
        __syncthreads();  // raw tile i visible; every reader of kt (tile i - 1's P V) is done
        decode_tile(cur, kt);
        if (next) fill_rows(i + 1, cur ^ 1);
        __syncthreads();  // kt complete, the raw tile consumed, rows[cur ^ 1] visible
        if (next) issue_tile(cur ^ 1, k_s);
        cuda_arch::cp_async_commit();
      } else {
        __syncthreads();  // every reader of kt (tile i - 1's P V) is done
        decode_tile(cur, kt);
        if (next) fill_rows(i + 1, cur ^ 1);
        cuda_arch::cp_async_wait<0>();  // the queries, on the first tile
        __syncthreads();  // kt complete, rows[cur ^ 1] visible
      }

      // ---- S = Q K^T for 16 heads x 32 keys ----
      float sacc[4][4];
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) sacc[nb][0] = sacc[nb][1] = sacc[nb][2] = sacc[nb][3] = 0.0f;
      for (int kg = 0; kg < kgroups; ++kg) {
        const std::uint32_t step = static_cast<std::uint32_t>(kg * mla_kstep_group_bytes);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          std::uint32_t a[4];
          cuda_arch::ldmatrix_x4(a, q_s + qa_off[ks] + step);
#pragma unroll
          for (int np = 0; np < 2; ++np) {
            std::uint32_t b[4];
            cuda_arch::ldmatrix_x4(b, k_s + kb_off[np][ks] + step);
            const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
            cuda_arch::mma_bf16_16816(sacc[2 * np], a, b0);
            cuda_arch::mma_bf16_16816(sacc[2 * np + 1], a, b1);
          }
        }
      }
      // Scaled logits, -inf for unused entries; this half's row maxima.
      float rmax[2] = {detail::neg_inf_f32(), detail::neg_inf_f32()};
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool used = rows[cur * T + mla_s_key(lane, half, nb, e)] >= 0;
          const float x = used ? sacc[nb][e] * p.scale : detail::neg_inf_f32();
          sacc[nb][e] = x;
          rmax[e >> 1] = detail::max_propagate_nan(rmax[e >> 1], x);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        rmax[r] = detail::max_propagate_nan(rmax[r], __shfl_xor_sync(cuda_arch::full_warp_mask, rmax[r], 1));
        rmax[r] = detail::max_propagate_nan(rmax[r], __shfl_xor_sync(cuda_arch::full_warp_mask, rmax[r], 2));
        if ((lane & 3) == 0) red_max[half * H + mla_s_head(lane, hb, 2 * r)] = rmax[r];
      }
      __syncthreads();  // both halves' maxima visible

      // ---- online softmax; P (bf16) to shared memory ----
      float alpha[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int head = mla_s_head(lane, hb, 2 * r);
        const float tile_max = detail::max_propagate_nan(red_max[head], red_max[H + head]);
        alpha[r] = online_softmax_rescale(st[r], tile_max);
      }
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) {
#pragma unroll
        for (int pr = 0; pr < 2; ++pr) {
          const float w0 = online_softmax_weight(st[pr], sacc[nb][2 * pr]);
          const float w1 = online_softmax_weight(st[pr], sacc[nb][2 * pr + 1]);
          st[pr].sum += w0;
          st[pr].sum += w1;
          *reinterpret_cast<std::uint32_t*>(smem + L.p + mla_p_store_offset(lane, hb, half, nb, pr)) =
              cuda_arch::pack_bf16x2(w0, w1);
        }
      }
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        acc[nb][0] *= alpha[0];
        acc[nb][1] *= alpha[0];
        acc[nb][2] *= alpha[1];
        acc[nb][3] *= alpha[1];
      }
      __syncthreads();  // P complete

      // ---- O += P V over the tile's 64 keys, this half's columns ----
      const int col_base = mla_out_col_base(half, d_v);
#pragma unroll
      for (int ks = 0; ks < T / 16; ++ks) {
        std::uint32_t a[4];
        cuda_arch::ldmatrix_x4(a, p_s + mla_pv_a_offset(lane, hb, ks));
#pragma unroll
        for (int np = 0; np < NB / 2; ++np) {
          if (2 * np < out_blocks) {
            std::uint32_t b[4];
            cuda_arch::ldmatrix_x4_trans(b, k_s + mla_pv_b_offset(lane, ks, col_base + 16 * np, rc));
            const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
            cuda_arch::mma_bf16_16816(acc[2 * np], a, b0);
            cuda_arch::mma_bf16_16816(acc[2 * np + 1], a, b1);
          }
        }
      }
    }
    cuda_arch::cp_async_wait<0>();  // nothing of this item may land after the next one starts

    // ---- the two halves' sums, then out and lse (or the split's partial state) ----
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float s = st[r].sum;
      s += __shfl_xor_sync(cuda_arch::full_warp_mask, s, 1);
      s += __shfl_xor_sync(cuda_arch::full_warp_mask, s, 2);
      if ((lane & 3) == 0) red_sum[half * H + mla_s_head(lane, hb, 2 * r)] = s;
    }
    __syncthreads();  // both halves' sums visible
    online_softmax_state fs[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int head = mla_s_head(lane, hb, 2 * r);
      fs[r] = online_softmax_state{st[r].max, red_sum[head] + red_sum[H + head]};
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const index_t head = g0 + mla_s_head(lane, hb, 2 * r);
      if (head >= p.h) continue;
      if (p.num_splits == 1) {
        O* const dst = p.out + t * p.out_stride0 + head * p.out_stride1;
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          if (nb < out_blocks) {
            const int c = mla_out_col(lane, half, d_v, nb, 2 * r);
            dst[c] = from_float<O>(online_softmax_normalize(fs[r], acc[nb][2 * r]));
            dst[c + 1] = from_float<O>(online_softmax_normalize(fs[r], acc[nb][2 * r + 1]));
          }
        }
        if (half == 0 && (lane & 3) == 0) p.lse[t * p.lse_stride + head] = online_softmax_lse(fs[r]);
      } else {
        const index_t pi = (split * p.s + t) * p.h + head;
        float* const dst = p.part_acc + pi * p.d_v;
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          if (nb < out_blocks) {
            const int c = mla_out_col(lane, half, d_v, nb, 2 * r);
            dst[c] = acc[nb][2 * r];
            dst[c + 1] = acc[nb][2 * r + 1];
          }
        }
        if (half == 0 && (lane & 3) == 0) p.part_state[pi] = make_float2(fs[r].max, fs[r].sum);
      }
    }
  }
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
