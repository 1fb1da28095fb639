// CUDA backend of dsa::swiglu (kernel: kernels/activation_kernel.cuh): elementwise, the shared
// numerics. No workspace.
#pragma once

#include <cuda_runtime.h>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/kernels/activation_kernel.cuh"
#include "dsa/cuda/launch.cuh"
#include "dsa/ops/activation.hpp"

DSA_NAMESPACE_BEGIN

template <>
struct op_impl<cuda_backend, swiglu_op> {
  static void run(const cuda_backend& be, tensor_view<const bf16, 2, device_space> gate,
                  tensor_view<const bf16, 2, device_space> up, tensor_view<bf16, 2, device_space> y) {
    constexpr int threads = 256;
    cuda_kernels::swiglu_params p;
    p.gate = gate.data_handle();
    p.gate_row_stride = gate.stride(0);
    p.up = up.data_handle();
    p.up_row_stride = up.stride(0);
    p.y = y.data_handle();
    p.y_row_stride = y.stride(0);
    p.rows = gate.extent(0);
    p.n = gate.extent(1);
    cuda_kernels::swiglu_kernel<threads>
        <<<cuda_detail::grid_blocks(p.rows * p.n, threads), threads, 0, be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CUDA_OP_INSTANCES(DSA_SWIGLU_INSTANCES)
