// CUDA backend of moe_combine (kernel: kernels/moe_combine_kernel.cuh): no workspace, the CPU's
// signature, bit-identical to the CPU backend (the same fp32 operations in the same order).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/kernels/moe_combine_kernel.cuh"
#include "dsa/cuda/launch.cuh"
#include "dsa/ops/moe_combine.hpp"

DSA_NAMESPACE_BEGIN

template <>
struct op_impl<cuda_backend, moe_combine_op> {
  static void run(const cuda_backend& be, tensor_view<const bf16, 2, device_space> expert_out,
                  tensor_view<const std::int32_t, 2, device_space> rows, tensor_view<const float, 2, device_space> weights,
                  tensor_view<const bf16, 2, device_space> shared, tensor_view<bf16, 2, device_space> y) {
    cuda_kernels::moe_combine_params p;
    p.expert_out = expert_out.data_handle();
    p.expert_stride = expert_out.stride(0);
    p.expert_rows = expert_out.extent(0);
    p.rows = rows.data_handle();
    p.row_stride = rows.stride(0);
    p.weights = weights.data_handle();
    p.weight_stride = weights.stride(0);
    p.k = rows.extent(1);
    const bool has_shared = !shared.is_absent();
    p.shared = has_shared ? shared.data_handle() : nullptr;
    p.shared_stride = has_shared ? shared.stride(0) : 0;
    p.y = y.data_handle();
    p.y_stride = y.stride(0);
    p.tokens = y.extent(0);
    p.d = y.extent(1);
    // The front-end returns early for an empty y.

    // 16-byte words when every row start (base + row · stride) is 16-byte aligned and d % 8 == 0:
    // V3.2's d = 7168 in cudaMalloc'd buffers always is.
    const auto aligned = [](const void* ptr, index_t stride) {
      return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0 && (stride * index_t{2}) % 16 == 0;
    };
    const bool vector = p.d % 8 == 0 && aligned(p.expert_out, p.expert_stride) && aligned(p.y, p.y_stride) &&
                        (!has_shared || aligned(p.shared, p.shared_stride));
    constexpr int threads = 256;
    if (vector) {
      cuda_kernels::moe_combine_kernel<8, threads><<<cuda_detail::grid_blocks(p.tokens, 1), threads, 0, be.stream>>>(p);
    } else {
      cuda_kernels::moe_combine_kernel<1, threads><<<cuda_detail::grid_blocks(p.tokens, 1), threads, 0, be.stream>>>(p);
    }
    DSA_CUDA_CHECK_LAUNCH();
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CUDA_OP_INSTANCES(DSA_MOE_COMBINE_INSTANCES)
