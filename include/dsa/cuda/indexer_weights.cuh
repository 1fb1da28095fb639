// CUDA backend of lightning_indexer_weights (kernel: kernels/indexer_weights_kernel.cuh): no
// workspace, the CPU's signature, bit-identical to the CPU backend.
#pragma once

#include <cuda_runtime.h>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/kernels/indexer_weights_kernel.cuh"
#include "dsa/cuda/launch.cuh"
#include "dsa/ops/indexer_weights.hpp"

DSA_NAMESPACE_BEGIN

template <>
struct op_impl<cuda_backend, lightning_indexer_weights_op> {
  static void run(const cuda_backend& be, tensor_view<const float, 2, device_space> proj,
                  tensor_view<const float, 2, device_space> q_scale, tensor_view<float, 2, device_space> w,
                  float head_scale, float dim_scale) {
    cuda_kernels::indexer_weights_params p;
    p.proj = proj.data_handle();
    p.proj_stride = proj.stride(0);
    p.q_scale = q_scale.data_handle();
    p.q_scale_stride = q_scale.stride(0);
    p.w = w.data_handle();
    p.w_stride = w.stride(0);
    p.m = w.extent(0);
    p.heads = w.extent(1);
    p.head_scale = head_scale;
    p.dim_scale = dim_scale;
    // The front-end returns early for an empty w.
    constexpr int threads = 256;
    cuda_kernels::indexer_weights_kernel<threads>
        <<<cuda_detail::grid_blocks(p.m * p.heads, threads), threads, 0, be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CUDA_OP_INSTANCES(DSA_INDEXER_WEIGHTS_INSTANCES)
