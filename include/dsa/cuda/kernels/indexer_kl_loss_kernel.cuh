// Kernels of indexer_kl_loss_dense and indexer_kl_loss_sparse on the CUDA backend.
//
// One block per query row (grid-stride over rows), the CPU backend's passes over the row's
// entries (its range, or its top-k selection), each entry owned by thread e % Threads in every
// pass, with the per-element arithmetic of dsa/numerics/indexer_kl_loss.hpp:
//   A  head sum of attn over the heads in order (fp32, exactly the CPU's), the row total of head
//      sums (double) and the max of the index scores;
//   B  the softmax sum of exp(I - max) (double);
//   C  p, q, the loss term (double) and the gradient of each entry;
//   then the row loss goes to the workspace, and kl_loss_total_kernel adds the row losses.
// Reductions are fixed trees (warp butterflies, then warps in order): deterministic, but not the
// CPU's sequential order, so the doubles can differ in their last bits and a float rounded from
// them by one ulp (tolerance: docs/cuda.md).
//
// Where the head sums wait between passes: dense, in the row's own grad cells (a key is one
// entry, read and rewritten by the thread that stashed it); sparse, in the workspace (one float
// per entry), because a key may be listed twice. Duplicate keys: pass A counts each key's entries
// with integer atomics in the zeroed grad row (order-independent), pass C turns the entry's
// gradient into the key's total kl_grad_repeated(g, count) (the CPU's entry-order sum, exactly),
// and pass D writes it; entries of one key write identical bits (atomicExch, no float atomics).
//
// Device-side values the front-end cannot read: a range is clamped to 0 <= start <= end <= n; a
// top-k entry outside [0, n) is unused (the -1 padding). Nothing is read or written out of bounds.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cuda/arch/warp.cuh"
#include "dsa/numerics/indexer_kl_loss.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

struct indexer_kl_params {
  const float* attn = nullptr;  // [m, h, n], unit-stride keys
  index_t attn_stride0 = 0;
  index_t attn_stride1 = 0;
  index_t heads = 0;
  const float* scores = nullptr;  // [m, n]
  index_t score_stride = 0;
  const std::int32_t* keys = nullptr;  // ranges [m, 2] (dense) or topk [m, k] (sparse)
  index_t key_stride = 0;
  index_t m = 0;
  index_t n = 0;
  index_t k = 0;  // sparse: entries per row
  float* grad = nullptr;  // [m, n]
  index_t grad_stride = 0;
  double* row_loss = nullptr;       // workspace: [m]
  float* entry_scratch = nullptr;   // workspace, sparse only: [m, k]
};


template <int Threads>
struct reduce_storage {
  double sum[Threads / 32];
  float max[Threads / 32];
};

/// Sum over the block: warp butterflies, then the warp totals in warp order, read by every thread
/// (so every thread returns the same bits). Every thread must call it; the storage may be reused
/// when it returns.
template <int Threads>
DSA_DEVICE double block_sum(double v, reduce_storage<Threads>& st) {
  v = cuda_arch::warp_reduce_sum(v);
  if (threadIdx.x % 32 == 0) st.sum[threadIdx.x / 32] = v;
  __syncthreads();
  double total = 0.0;
#pragma unroll
  for (int w = 0; w < Threads / 32; ++w) total += st.sum[w];
  __syncthreads();
  return total;
}

/// Max over the block, NaN if any thread's value is NaN (kl_score_max), so the result does not
/// depend on the order.
template <int Threads>
DSA_DEVICE float block_max(float v, reduce_storage<Threads>& st) {
  v = cuda_arch::warp_reduce_max_propagate_nan(v);
  if (threadIdx.x % 32 == 0) st.max[threadIdx.x / 32] = v;
  __syncthreads();
  float m = st.max[0];
#pragma unroll
  for (int w = 1; w < Threads / 32; ++w) m = kl_score_max(m, st.max[w]);
  __syncthreads();
  return m;
}

/// sum_h attn[t, h, key] in head order, fp32: the CPU backend's head sum, bit for bit.
DSA_DEVICE DSA_FORCEINLINE float head_sum(const float* DSA_RESTRICT a, index_t head_stride, index_t heads) {
  float s = 0.0f;
  for (index_t h = 0; h < heads; ++h) s += a[h * head_stride];
  return s;
}


/// Dense (Sparse = false: keys = ranges) or sparse (keys = top-k entries) loss and gradient, one
/// block per row; writes p.row_loss[t].
template <int Threads, bool Sparse>
__global__ void __launch_bounds__(Threads) indexer_kl_loss_kernel(const indexer_kl_params p) {
  static_assert(Threads % 32 == 0 && Threads <= 1024);
  __shared__ reduce_storage<Threads> red;
  const index_t tid = threadIdx.x;
  const index_t n = p.n;

  for (index_t t = blockIdx.x; t < p.m; t += gridDim.x) {
    const float* attn_row = p.attn + t * p.attn_stride0;  // offset only, dereferenced at valid keys
    const float* x = p.scores + t * p.score_stride;
    float* g = p.grad + t * p.grad_stride;
    // Dense: entries e are keys start + e. Sparse: entries are topk[t, e], valid when in [0, n).
    index_t start = 0;
    index_t count = 0;
    const std::int32_t* sel = nullptr;
    float* scratch = nullptr;
    if constexpr (Sparse) {
      sel = p.keys + t * p.key_stride;
      scratch = p.entry_scratch + t * p.k;
      count = p.k;
    } else {
      start = p.keys[t * p.key_stride];
      index_t end = p.keys[t * p.key_stride + 1];
      start = start < 0 ? 0 : (start > n ? n : start);
      end = end < start ? start : (end > n ? n : end);
      count = end - start;
    }
    auto key_of = [&](index_t e) -> index_t {
      if constexpr (Sparse) {
        const index_t j = sel[e];
        return j >= 0 && j < n ? j : -1;
      } else {
        return start + e;
      }
    };
    // The grad row as 32-bit words: counts (sparse, pass A) and then the gradient bits.
    unsigned* gw = reinterpret_cast<unsigned*>(g);

    // Zero what no entry will write (dense: outside the range; sparse: the whole row, which then
    // holds the per-key entry counts).
    for (index_t c = tid; c < n; c += Threads) {
      if (Sparse || c < start || c >= start + count) gw[c] = 0u;
    }
    if constexpr (Sparse) __syncthreads();

    // A: head sums (stashed), their total and the max of the index scores.
    double total = 0.0;
    float mx = detail::neg_inf_f32();
    for (index_t e = tid; e < count; e += Threads) {
      const index_t j = key_of(e);
      if (j < 0) continue;
      const float hs = head_sum(attn_row + j, p.attn_stride1, p.heads);
      if constexpr (Sparse) {
        scratch[e] = hs;
        atomicAdd(gw + j, 1u);
      } else {
        g[j] = hs;
      }
      total += hs;
      const float xj = x[j];
      mx = kl_score_max(mx, xj);
    }
    total = block_sum<Threads>(total, red);
    mx = block_max<Threads>(mx, red);

    // B: the softmax sum.
    double sum_exp = 0.0;
    for (index_t e = tid; e < count; e += Threads) {
      const index_t j = key_of(e);
      if (j >= 0) sum_exp += kl_softmax_weight(mx, x[j]);
    }
    sum_exp = block_sum<Threads>(sum_exp, red);
    const kl_softmax_stats st = kl_make_softmax_stats(mx, static_cast<float>(sum_exp));
    const float row_total = static_cast<float>(total);
    const bool has_mass = kl_row_has_mass(row_total);

    // C: loss terms and gradients.
    double loss = 0.0;
    for (index_t e = tid; e < count; e += Threads) {
      const index_t j = key_of(e);
      if (j < 0) continue;
      const float xj = x[j];
      const float hs = Sparse ? scratch[e] : g[j];
      const float pj = kl_normalize_p(hs, row_total);
      loss += kl_term(pj, kl_log_q(st, xj));
      const float grad = kl_grad(kl_softmax_q_from_weight(st, kl_softmax_weight(mx, xj)), pj, has_mass);
      if constexpr (Sparse) {
        scratch[e] = kl_grad_repeated(grad, gw[j]);  // the key's entry count, complete after A
      } else {
        g[j] = kl_grad_repeated(grad, 1u);
      }
    }
    // Also orders every read of the counts (C) before the first gradient write (D).
    loss = block_sum<Threads>(loss, red);
    if (tid == 0) p.row_loss[t] = loss;

    // D (sparse): each key's total gradient; entries of one key carry identical bits.
    if constexpr (Sparse) {
      for (index_t e = tid; e < count; e += Threads) {
        const index_t j = key_of(e);
        if (j >= 0) atomicExch(gw + j, __float_as_uint(scratch[e]));
      }
    }
  }
}

/// loss = the row losses added by one block (a fixed tree), rounded to fp32; 0 for m = 0.
template <int Threads>
__global__ void __launch_bounds__(Threads) kl_loss_total_kernel(const double* row_loss, index_t m, float* loss) {
  __shared__ reduce_storage<Threads> red;
  double v = 0.0;
  for (index_t t = threadIdx.x; t < m; t += Threads) v += row_loss[t];
  v = block_sum<Threads>(v, red);
  if (threadIdx.x == 0) *loss = static_cast<float>(v);
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
