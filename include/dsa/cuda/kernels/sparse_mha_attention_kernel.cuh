// Kernel of sparse_mha_attention on the CUDA backend: one block per (query token, head),
// grid-stride, evaluating exactly the CPU backend's two-pass softmax with the shared numerics
// (dsa/numerics/sparse_mha_attention.hpp):
//   pass 1  every used entry's logit (sparse_mha_logit: one thread per entry, the dot in the
//           CPU's ascending order; bf16 products are exact in fp32, so an FMA rounds as the CPU's
//           multiply-add), into shared memory; the row maximum by block reduction
//           (sparse_mha_max propagates NaN whatever the order: the CPU loop's value);
//   pass 2  e_j = sparse_mha_exp(logit_j - m) in parallel, then their fp32 sum by one thread in
//           entry order (the CPU's order, so the same bits);
//   pass 3  p_j = sparse_mha_prob(e_j, sum), and out[c] = sum_j p_j v[j, c] by one thread per
//           column c in entry order with a product rounded on its own (sparse_mha_pv), as on
//           the CPU; lse = m + ln(sum).
// Entries are processed in chunks of 2048 (V3.2's top-k) held in shared memory; a longer index
// row recomputes its logits in each pass rather than needing a workspace. Each thread keeps up
// to 4 output columns in registers; wider values (d_v > 512) take further column groups.
//
// Parity: the arithmetic and every summation order are the CPU's, so out and lse are
// bit-identical except through the device's double exp and log (within an ulp of glibc's): an
// e_j can differ by one fp32 ulp when the exact value lies within ~2^-52 relative of a rounding
// boundary (probability ~2^-28 per entry), moving out by at most a bf16 ulp and lse by an fp32
// ulp or two.
//
// Device-side index values are guarded: an entry that is negative or >= n is unused (as on the
// CPU), so no key or value row outside [0, n) is ever read.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/arch/warp.cuh"
#include "dsa/numerics/fp32_ops.hpp"
#include "dsa/numerics/sparse_mha_attention.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

struct sparse_mha_params {
  const bf16* q = nullptr;
  index_t q_stride0 = 0, q_stride1 = 0;
  const bf16* k_nope = nullptr;
  index_t k_nope_stride0 = 0, k_nope_stride1 = 0;
  const bf16* k_rope = nullptr;
  index_t k_rope_stride0 = 0;
  const bf16* v = nullptr;
  index_t v_stride0 = 0, v_stride1 = 0;
  const std::int32_t* indices = nullptr;
  index_t indices_stride0 = 0;
  bf16* out = nullptr;
  index_t out_stride0 = 0, out_stride1 = 0;
  float* lse = nullptr;  // null: not wanted
  index_t lse_stride0 = 0, lse_stride1 = 0;
  index_t s = 0, h = 0, n = 0, k = 0;
  index_t d_nope = 0, d_rope = 0, d_v = 0;
  float scale = 0.0f;
  attention_rounding rounding = attention_rounding::bf16;
};

/// Threads of sparse_mha_kernel, entries per shared-memory chunk, output columns per thread.
inline constexpr int sparse_mha_threads = 128;
inline constexpr int sparse_mha_chunk = 2048;
inline constexpr int sparse_mha_cols_per_thread = 4;

template <int Threads>
__global__ void __launch_bounds__(Threads) sparse_mha_kernel(const sparse_mha_params p) {
  static_assert(Threads % 32 == 0 && Threads >= 32);
  constexpr int chunk = sparse_mha_chunk;
  constexpr int warps = Threads / 32;
  constexpr int cpt = sparse_mha_cols_per_thread;
  __shared__ float s_val[chunk];          // logits, then exponentials, then probabilities
  __shared__ std::int32_t s_row[chunk];   // the entry's key row, or -1 when unused
  __shared__ float s_wmax[warps];
  __shared__ float s_max;
  __shared__ float s_sum;

  const int tid = static_cast<int>(threadIdx.x);
  const index_t nchunks = (p.k + chunk - 1) / chunk;
  const bool resident = nchunks <= 1;  // the logits stay in shared memory across the passes

  for (index_t item = blockIdx.x; item < p.s * p.h; item += gridDim.x) {
    const index_t t = item / p.h;
    const index_t hh = item - t * p.h;
    const bf16* qh = p.q + t * p.q_stride0 + hh * p.q_stride1;
    const std::int32_t* idx = p.indices + t * p.indices_stride0;

    // The logits of entries [c0, c0 + cn) into this thread's slots (jj = tid, tid + Threads, ...).
    // Returns nothing; s_row marks unused entries with -1.
    auto fill_logits = [&](index_t c0, index_t cn, float& local_max) {
      for (index_t jj = tid; jj < cn; jj += Threads) {
        const std::int32_t r = idx[c0 + jj];
        if (!sparse_mha_index_valid(r, p.n)) {
          s_row[jj] = -1;
          continue;
        }
        const bf16* kr = p.d_rope > 0 ? p.k_rope + r * p.k_rope_stride0 : nullptr;
        const float l = sparse_mha_logit(qh, p.k_nope + r * p.k_nope_stride0 + hh * p.k_nope_stride1, p.d_nope, kr,
                                         p.d_rope, p.scale, p.rounding);
        s_val[jj] = l;
        s_row[jj] = r;
        local_max = sparse_mha_max(local_max, l);
      }
    };

    __syncthreads();  // the previous item's readers of the shared arrays are done

    // Pass 1: logits and the row maximum.
    float local_max = -__int_as_float(0x7F800000);  // -inf
    for (index_t c = 0; c < nchunks; ++c) {
      const index_t c0 = c * chunk;
      const index_t cn = p.k - c0 < chunk ? p.k - c0 : chunk;
      // Each thread rewrites only its own slots, so chunks need no barrier between them here.
      fill_logits(c0, cn, local_max);
    }
    {
      const float wmax = cuda_arch::warp_reduce_max_propagate_nan(local_max);
      if (tid % 32 == 0) s_wmax[tid / 32] = wmax;
      __syncthreads();
      if (tid == 0) {
        float m = s_wmax[0];
        for (int w = 1; w < warps; ++w) m = sparse_mha_max(m, s_wmax[w]);
        s_max = m;
      }
      __syncthreads();
    }
    const float m = s_max;
    bf16* o = p.out + t * p.out_stride0 + hh * p.out_stride1;
    if (sparse_mha_row_empty(m)) {
      // No used entry, or every logit -inf: out = 0, lse = +inf (a NaN maximum propagates).
      for (index_t c = tid; c < p.d_v; c += Threads) o[c] = bf16(0.0f);
      if (p.lse != nullptr && tid == 0) p.lse[t * p.lse_stride0 + hh * p.lse_stride1] = __int_as_float(0x7F800000);
      continue;  // uniform: every thread read the same shared values
    }

    // Pass 2: the exponentials and their sum in entry order.
    float sum = 0.0f;  // meaningful in thread 0
    for (index_t c = 0; c < nchunks; ++c) {
      const index_t c0 = c * chunk;
      const index_t cn = p.k - c0 < chunk ? p.k - c0 : chunk;
      if (!resident) {
        float lm = 0.0f;
        __syncthreads();  // thread 0 has summed the previous chunk
        fill_logits(c0, cn, lm);
      }
      for (index_t jj = tid; jj < cn; jj += Threads) {
        // Unused entries add +0: x + 0 == x for every x the sum (from +0, of values >= +0 or
        // NaN) can hold, so the bits are the CPU's, which skips them.
        s_val[jj] = s_row[jj] >= 0 ? sparse_mha_exp(s_val[jj] - m) : 0.0f;
      }
      __syncthreads();
      if (tid == 0) {
#pragma unroll 8
        for (index_t jj = 0; jj < cn; ++jj) sum += s_val[jj];
      }
    }
    if (tid == 0) s_sum = sum;
    __syncthreads();
    sum = s_sum;

    // Pass 3: probabilities and out = P . V, per column group of Threads * cpt columns.
    if (resident) {
      for (index_t jj = tid; jj < p.k; jj += Threads) {
        if (s_row[jj] >= 0) s_val[jj] = sparse_mha_prob(s_val[jj], sum, p.rounding);
      }
      __syncthreads();
    }
    const bf16* vh = p.v + hh * p.v_stride1;
    for (index_t g0 = 0; g0 < p.d_v; g0 += static_cast<index_t>(Threads) * cpt) {
      float acc[cpt];
#pragma unroll
      for (int i = 0; i < cpt; ++i) acc[i] = 0.0f;
      for (index_t c = 0; c < nchunks; ++c) {
        const index_t c0 = c * chunk;
        const index_t cn = p.k - c0 < chunk ? p.k - c0 : chunk;
        if (!resident) {
          float lm = 0.0f;
          __syncthreads();  // every thread is done with the previous chunk's probabilities
          fill_logits(c0, cn, lm);
          for (index_t jj = tid; jj < cn; jj += Threads) {
            if (s_row[jj] >= 0) s_val[jj] = sparse_mha_prob(sparse_mha_exp(s_val[jj] - m), sum, p.rounding);
          }
          __syncthreads();
        }
        for (index_t jj = 0; jj < cn; ++jj) {
          const std::int32_t r = s_row[jj];
          if (r < 0) continue;
          const float pj = s_val[jj];
          const bf16* vr = vh + r * p.v_stride0;
#pragma unroll
          for (int i = 0; i < cpt; ++i) {
            const index_t col = g0 + tid + static_cast<index_t>(Threads) * i;
            if (col < p.d_v) acc[i] += sparse_mha_pv(pj, vr[col].to_float());
          }
        }
      }
#pragma unroll
      for (int i = 0; i < cpt; ++i) {
        const index_t col = g0 + tid + static_cast<index_t>(Threads) * i;
        if (col < p.d_v) o[col] = bf16(acc[i]);
      }
    }
    if (p.lse != nullptr && tid == 0) {
      p.lse[t * p.lse_stride0 + hh * p.lse_stride1] = m + static_cast<float>(log(static_cast<double>(sum)));
    }
  }
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
