// CUDA backend of lightning_indexer_scores (fp8 and fp32), lightning_indexer_scores_paged and
// lightning_indexer_backward (kernels: kernels/lightning_indexer_kernel.cuh). None of them needs
// scratch memory (the backward reduces each gradient element inside one thread, so grad_k needs
// no cross-block partials), so the CUDA signatures are the CPU's.
//
// The FP8 scores, plain and paged, have a second kernel on the tensor cores
// (kernels/lightning_indexer_fast_kernel.cuh), which runs when cuda_backend::kernels is
// cuda_kernel_path::fast, the device has mma.sync and the call is one it holds
// (kernel_choice.hpp: d = 128, at most 64 heads, 16-byte aligned q rows, 4-byte aligned key
// rows); it is checked against the exact kernel, not the CPU's bits. The fp32 scores and the
// backward have the exact kernel only.
//
// Parity with the CPU backend: the fp8 scores (dense and paged) are bit-identical (products of
// e4m3 values are exact, and the head sum runs in the CPU's order with the product rounded
// first). The fp32 scores and the gradients follow the CPU's order too, but the device fuses
// each multiply-add of a dot or gradient sum into one fmaf, whereas the CPU rounds the product
// first unless it is compiled with FMA contraction (-march=native): the two agree to within the
// summation's rounding error (docs/cuda.md), and exactly whenever the products are exact.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/kernel_choice.hpp"
#include "dsa/cuda/kernels/lightning_indexer_fast_kernel.cuh"
#include "dsa/cuda/kernels/lightning_indexer_kernel.cuh"
#include "dsa/cuda/launch.cuh"
#include "dsa/ops/lightning_indexer.hpp"

DSA_NAMESPACE_BEGIN

namespace cuda_detail {

/// Query rows per forward block: 16 for prefill-sized batches (a key tile is staged once for 16
/// rows), 4 or 1 for decode, so that few-row calls do not leave most of a block idle.
inline int indexer_rows_per_block(index_t m) { return m >= 16 ? 16 : (m >= 4 ? 4 : 1); }

template <class T, bool Paged, int TM>
void launch_indexer_scores(const cuda_backend& be, const cuda_kernels::indexer_scores_params<T>& p) {
  constexpr index_t key_tile = cuda_kernels::tile;
  const index_t items = (p.m + TM - 1) / TM * ((p.n + key_tile - 1) / key_tile);
  cuda_kernels::lightning_indexer_scores_kernel<T, Paged, TM>
      <<<grid_blocks(items, 1), cuda_kernels::threads, 0, be.stream>>>(p);
  DSA_CUDA_CHECK_LAUNCH();
}

template <class T>
cuda_kernels::indexer_scores_params<T> make_indexer_scores_params(
    tensor_view<const T, 3, device_space> q, tensor_view<const float, 2, device_space> w,
    tensor_view<const std::int32_t, 2, device_space> ranges, tensor_view<float, 2, device_space> scores) {
  cuda_kernels::indexer_scores_params<T> p;
  p.q = q.data_handle();
  p.q_stride0 = q.stride(0);
  p.q_stride1 = q.stride(1);
  p.w = w.data_handle();
  p.w_stride0 = w.stride(0);
  p.ranges = ranges.data_handle();
  p.range_stride0 = ranges.stride(0);
  p.scores = scores.data_handle();
  p.score_stride0 = scores.stride(0);
  p.m = q.extent(0);
  p.heads = q.extent(1);
  p.d = q.extent(2);
  p.n = scores.extent(1);
  return p;
}

/// The fast kernel if the backend asks for it and the call fits it (kernel_choice.hpp): true when
/// it was launched.
template <bool Paged>
bool launch_indexer_scores_fast(const cuda_backend& be, const cuda_kernels::indexer_scores_params<fp8_e4m3>& p,
                                const void* keys, index_t key_stride_bytes) {
  if (be.kernels != cuda_kernel_path::fast) return false;
  indexer_call c;
  c.heads = p.heads;
  c.d = p.d;
  c.q = p.q;
  c.q_stride0 = p.q_stride0;
  c.q_stride1 = p.q_stride1;
  c.keys = keys;
  c.key_stride = key_stride_bytes;
  const indexer_kernel kernel = choose_indexer_kernel(be.kernels, current_device_caps(), c);
  if (kernel == indexer_kernel::exact) return false;
  cuda_kernels::indexer_fast_params fp;
  fp.base = p;
  fp.rows_per_item = indexer_fast_rows_per_item(p.m, Paged);
  fp.key_copy16 = kernel == indexer_kernel::fast_copy16;
  constexpr index_t smem = cuda_kernels::indexer_fast_smem().bytes;
  auto* k = cuda_kernels::lightning_indexer_fast_kernel<Paged>;
  allow_dynamic_shared_memory(k, smem);
  const index_t items = (p.m + fp.rows_per_item - 1) / fp.rows_per_item *
                        ((p.n + cuda_kernels::indexer_fast_keys - 1) / cuda_kernels::indexer_fast_keys);
  k<<<grid_blocks(items, 1), cuda_kernels::indexer_fast_threads, static_cast<std::size_t>(smem), be.stream>>>(fp);
  DSA_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace cuda_detail

template <>
struct op_impl<cuda_backend, lightning_indexer_scores_op> {
  template <class T>
  static void run(const cuda_backend& be, tensor_view<const T, 3, device_space> q,
                  tensor_view<const float, 2, device_space> w, tensor_view<const T, 2, device_space> k,
                  tensor_view<const float, 1, device_space> k_scale,
                  tensor_view<const std::int32_t, 2, device_space> ranges, tensor_view<float, 2, device_space> scores) {
    static_assert(std::is_same_v<T, fp8_e4m3> || std::is_same_v<T, float>);
    cuda_detail::check_kernel_path("lightning_indexer_scores", be.kernels);
    if (scores.empty()) return;
    auto p = cuda_detail::make_indexer_scores_params<T>(q, w, ranges, scores);
    p.k = k.data_handle();
    p.k_stride0 = k.stride(0);
    p.k_scale = k_scale.data_handle();
    if constexpr (std::is_same_v<T, fp8_e4m3>) {
      if (cuda_detail::launch_indexer_scores_fast<false>(be, p, p.k, p.k_stride0)) return;
    }
    switch (cuda_detail::indexer_rows_per_block(p.m)) {
      case 16: cuda_detail::launch_indexer_scores<T, false, 16>(be, p); break;
      case 4: cuda_detail::launch_indexer_scores<T, false, 4>(be, p); break;
      default: cuda_detail::launch_indexer_scores<T, false, 1>(be, p); break;
    }
  }
};

template <>
struct op_impl<cuda_backend, lightning_indexer_scores_paged_op> {
  static void run(const cuda_backend& be, tensor_view<const fp8_e4m3, 3, device_space> q,
                  tensor_view<const float, 2, device_space> w, tensor_view<const std::uint8_t, 2, device_space> cache,
                  tensor_view<const std::int32_t, 2, device_space> block_table, index_t block_size,
                  tensor_view<const std::int32_t, 2, device_space> ranges, tensor_view<float, 2, device_space> scores) {
    cuda_detail::check_kernel_path("lightning_indexer_scores_paged", be.kernels);
    if (scores.empty()) return;
    // Each row reads its own block table, so a block holds one query row.
    auto p = cuda_detail::make_indexer_scores_params<fp8_e4m3>(q, w, ranges, scores);
    p.cache = cache.data_handle();
    p.cache_stride0 = cache.stride(0);
    p.cache_rows = cache.extent(0);
    p.block_table = block_table.data_handle();
    p.table_stride0 = block_table.stride(0);
    p.max_blocks = block_table.extent(1);
    p.block_size = block_size;
    if (cuda_detail::launch_indexer_scores_fast<true>(be, p, p.cache, p.cache_stride0)) return;
    cuda_detail::launch_indexer_scores<fp8_e4m3, true, 1>(be, p);
  }
};

template <>
struct op_impl<cuda_backend, lightning_indexer_backward_op> {
  static void run(const cuda_backend& be, tensor_view<const float, 3, device_space> q,
                  tensor_view<const float, 2, device_space> w, tensor_view<const float, 2, device_space> k,
                  tensor_view<const float, 1, device_space> k_scale,
                  tensor_view<const std::int32_t, 2, device_space> ranges,
                  tensor_view<const float, 2, device_space> grad_scores, tensor_view<float, 3, device_space> grad_q,
                  tensor_view<float, 2, device_space> grad_w, tensor_view<float, 2, device_space> grad_k) {
    using cuda_kernels::out_cols;
    using cuda_kernels::threads;
    using cuda_kernels::tile;
    cuda_kernels::indexer_backward_params p;
    p.q = q.data_handle();
    p.q_stride0 = q.stride(0);
    p.q_stride1 = q.stride(1);
    p.w = w.data_handle();
    p.w_stride0 = w.stride(0);
    p.k = k.data_handle();
    p.k_stride0 = k.stride(0);
    p.k_scale = k_scale.data_handle();
    p.ranges = ranges.data_handle();
    p.range_stride0 = ranges.stride(0);
    p.grad_scores = grad_scores.data_handle();
    p.gs_stride0 = grad_scores.stride(0);
    p.m = q.extent(0);
    p.heads = q.extent(1);
    p.d = q.extent(2);
    p.n = k.extent(0);
    // An output with no elements needs no kernel (and may be a non-null empty view).
    if (!grad_q.empty()) {
      p.grad_q = grad_q.data_handle();
      p.gq_stride0 = grad_q.stride(0);
      p.gq_stride1 = grad_q.stride(1);
    }
    if (!grad_w.empty()) {
      p.grad_w = grad_w.data_handle();
      p.gw_stride0 = grad_w.stride(0);
    }
    if (p.grad_q != nullptr || p.grad_w != nullptr) {
      const index_t col_blocks = p.grad_q != nullptr ? (p.d + out_cols - 1) / out_cols : 1;
      const index_t items = p.m * ((p.heads + tile - 1) / tile) * col_blocks;
      cuda_kernels::lightning_indexer_grad_q_kernel<threads><<<cuda_detail::grid_blocks(items, 1), threads, 0, be.stream>>>(p);
      DSA_CUDA_CHECK_LAUNCH();
    }
    if (!grad_k.empty()) {
      cuda_kernels::indexer_backward_params pk = p;
      pk.grad_q = nullptr;
      pk.grad_w = nullptr;
      pk.grad_k = grad_k.data_handle();
      pk.gk_stride0 = grad_k.stride(0);
      const index_t items = (p.n + tile - 1) / tile * ((p.d + out_cols - 1) / out_cols);
      cuda_kernels::lightning_indexer_grad_k_kernel<threads><<<cuda_detail::grid_blocks(items, 1), threads, 0, be.stream>>>(pk);
      DSA_CUDA_CHECK_LAUNCH();
    }
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CUDA_OP_INSTANCES(DSA_LIGHTNING_INDEXER_INSTANCES)
