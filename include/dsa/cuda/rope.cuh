// CUDA backend of dsa::rope_apply (kernel: kernels/rope_kernel.cuh): a block per token, cos/sin
// per (token, pair) in shared memory, the CPU's numerics. No workspace.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/kernels/rope_kernel.cuh"
#include "dsa/cuda/launch.cuh"
#include "dsa/ops/rope.hpp"

DSA_NAMESPACE_BEGIN

template <>
struct op_impl<cuda_backend, rope_apply_op> {
  static void run(const cuda_backend& be, tensor_view<bf16, 3, device_space> x,
                  tensor_view<const std::int32_t, 1, device_space> positions, const rope_config& cfg,
                  rope_layout layout) {
    constexpr int threads = 128;
    cuda_kernels::rope_params p;
    p.x = x.data_handle();
    p.token_stride = x.stride(0);
    p.head_stride = x.stride(1);
    p.positions = positions.data_handle();
    p.tokens = x.extent(0);
    p.heads = x.extent(1);
    p.half = cfg.dim / 2;
    p.pair_stride = layout == rope_layout::interleaved ? 2 : 1;
    p.pair_step = layout == rope_layout::interleaved ? 1 : p.half;
    p.cfg = cfg;
    cuda_kernels::rope_kernel<threads><<<cuda_detail::grid_blocks(p.tokens, 1), threads, 0, be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CUDA_OP_INSTANCES(DSA_ROPE_INSTANCES)
