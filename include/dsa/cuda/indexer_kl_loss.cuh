// CUDA backend of indexer_kl_loss_dense and indexer_kl_loss_sparse (kernels:
// kernels/indexer_kl_loss_kernel.cuh). The total loss is a deterministic reduction of per-row
// losses kept in a workspace, so the CUDA backend implements the front-ends' workspace
// overloads only: indexer_kl_loss_dense_workspace_size(m) and
// indexer_kl_loss_sparse_workspace_size(m, k) bytes (ops/indexer_kl_loss.hpp). Calling the
// workspace-less overloads with a cuda_backend is a compile error that says so.
//
// Parity with the CPU backend: the per-element arithmetic is the shared numerics, the head sums
// are the CPU's bits; the row reductions are trees (CPU: sequential), and exp / log are the
// device's expf / logf (CPU: the host libm), so grad_index and loss agree to a few ulps of the
// magnitudes involved (docs/cuda.md states the bound the tests check).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/kernels/indexer_kl_loss_kernel.cuh"
#include "dsa/cuda/launch.cuh"
#include "dsa/ops/indexer_kl_loss.hpp"

DSA_NAMESPACE_BEGIN

namespace cuda_detail {

inline constexpr int kl_threads = 256;

template <class...>
inline constexpr bool kl_needs_workspace = false;

inline cuda_kernels::indexer_kl_params make_kl_params(tensor_view<const float, 3, device_space> attn,
                                                      tensor_view<const float, 2, device_space> index_scores,
                                                      tensor_view<const std::int32_t, 2, device_space> keys,
                                                      tensor_view<float, 2, device_space> grad_index,
                                                      tensor_view<std::byte, 1, device_space> workspace) {
  cuda_kernels::indexer_kl_params p;
  p.attn = attn.data_handle();
  p.attn_stride0 = attn.stride(0);
  p.attn_stride1 = attn.stride(1);
  p.heads = attn.extent(1);
  p.scores = index_scores.data_handle();
  p.score_stride = index_scores.stride(0);
  p.keys = keys.data_handle();
  p.key_stride = keys.stride(0);
  p.m = attn.extent(0);
  p.n = attn.extent(2);
  p.k = keys.extent(1);
  p.grad = grad_index.data_handle();
  p.grad_stride = grad_index.stride(0);
  // The front-end checked the size (and 16-byte alignment) of the workspace; m = 0 may leave it
  // absent, and then nothing reads it.
  p.row_loss = reinterpret_cast<double*>(workspace.data_handle());
  p.entry_scratch = reinterpret_cast<float*>(workspace.data_handle() + detail::round_up_16(p.m * index_t{8}));
  return p;
}

template <bool Sparse>
void launch_kl(const cuda_backend& be, const cuda_kernels::indexer_kl_params& p, float* loss) {
  if (p.m > 0) {
    cuda_kernels::indexer_kl_loss_kernel<kl_threads, Sparse>
        <<<grid_blocks(p.m, 1), kl_threads, 0, be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  }
  // Always: the loss of zero rows is 0.
  cuda_kernels::kl_loss_total_kernel<kl_threads><<<1, kl_threads, 0, be.stream>>>(p.row_loss, p.m, loss);
  DSA_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda_detail

template <>
struct op_impl<cuda_backend, indexer_kl_loss_dense_op> {
  static void run(const cuda_backend& be, tensor_view<const float, 3, device_space> attn,
                  tensor_view<const float, 2, device_space> index_scores,
                  tensor_view<const std::int32_t, 2, device_space> ranges, tensor_view<float, 1, device_space> loss,
                  tensor_view<float, 2, device_space> grad_index, tensor_view<std::byte, 1, device_space> workspace) {
    cuda_detail::launch_kl<false>(be, cuda_detail::make_kl_params(attn, index_scores, ranges, grad_index, workspace),
                                  loss.data_handle());
  }
  /// The workspace-less front-end: the loss needs a workspace on the GPU.
  template <class... Args>
  static void run(const cuda_backend&, Args&&...) {
    static_assert(cuda_detail::kl_needs_workspace<Args...>,
                  "dsa::indexer_kl_loss_dense on the CUDA backend needs a workspace: call the overload taking "
                  "indexer_kl_loss_dense_workspace_size(m) bytes");
  }
};

template <>
struct op_impl<cuda_backend, indexer_kl_loss_sparse_op> {
  static void run(const cuda_backend& be, tensor_view<const float, 3, device_space> attn,
                  tensor_view<const float, 2, device_space> index_scores,
                  tensor_view<const std::int32_t, 2, device_space> topk, tensor_view<float, 1, device_space> loss,
                  tensor_view<float, 2, device_space> grad_index, tensor_view<std::byte, 1, device_space> workspace) {
    cuda_detail::launch_kl<true>(be, cuda_detail::make_kl_params(attn, index_scores, topk, grad_index, workspace),
                                 loss.data_handle());
  }
  /// The workspace-less front-end: the loss needs a workspace on the GPU.
  template <class... Args>
  static void run(const cuda_backend&, Args&&...) {
    static_assert(cuda_detail::kl_needs_workspace<Args...>,
                  "dsa::indexer_kl_loss_sparse on the CUDA backend needs a workspace: call the overload taking "
                  "indexer_kl_loss_sparse_workspace_size(m, k) bytes");
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CUDA_OP_INSTANCES(DSA_INDEXER_KL_LOSS_INSTANCES)
