// CUDA backend of dsa::rms_norm, dsa::add_rms_norm and dsa::layer_norm (kernels:
// kernels/norm_kernel.cuh): 8 threads per row in the CPU's lane order, bit-identical to the CPU
// backend. No workspace.
#pragma once

#include <cuda_runtime.h>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/kernels/norm_kernel.cuh"
#include "dsa/cuda/launch.cuh"
#include "dsa/ops/norm.hpp"

DSA_NAMESPACE_BEGIN

namespace cuda_detail {

inline constexpr int norm_threads = 256;
inline constexpr index_t norm_rows_per_block = norm_threads / cuda_kernels::norm_row_lanes;

template <class X>
cuda_kernels::norm_params<X> norm_params_of(tensor_view<const X, 2, device_space> x, tensor_view<const float, 1, device_space> w,
                                            tensor_view<bf16, 2, device_space> y, float eps) {
  cuda_kernels::norm_params<X> p;
  p.x = x.data_handle();
  p.x_row_stride = x.stride(0);
  p.weight = w.data_handle();
  p.y = y.data_handle();
  p.y_row_stride = y.stride(0);
  p.rows = x.extent(0);
  p.d = x.extent(1);
  p.eps = eps;
  return p;
}

}  // namespace cuda_detail

template <>
struct op_impl<cuda_backend, rms_norm_op> {
  template <class X>
  static void run(const cuda_backend& be, tensor_view<const X, 2, device_space> x,
                  tensor_view<const float, 1, device_space> weight, tensor_view<bf16, 2, device_space> y, float eps) {
    constexpr int threads = cuda_detail::norm_threads;
    const auto p = cuda_detail::norm_params_of(x, weight, y, eps);
    cuda_kernels::rms_norm_kernel<X, threads>
        <<<cuda_detail::grid_blocks(p.rows, cuda_detail::norm_rows_per_block), threads, 0, be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  }
};

template <>
struct op_impl<cuda_backend, add_rms_norm_op> {
  static void run(const cuda_backend& be, tensor_view<const bf16, 2, device_space> x,
                  tensor_view<bf16, 2, device_space> residual, tensor_view<const float, 1, device_space> weight,
                  tensor_view<bf16, 2, device_space> y, float eps) {
    constexpr int threads = cuda_detail::norm_threads;
    auto p = cuda_detail::norm_params_of(x, weight, y, eps);
    p.residual = residual.data_handle();
    p.residual_row_stride = residual.stride(0);
    cuda_kernels::add_rms_norm_kernel<threads>
        <<<cuda_detail::grid_blocks(p.rows, cuda_detail::norm_rows_per_block), threads, 0, be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  }
};

template <>
struct op_impl<cuda_backend, layer_norm_op> {
  template <class X>
  static void run(const cuda_backend& be, tensor_view<const X, 2, device_space> x,
                  tensor_view<const float, 1, device_space> weight, tensor_view<const float, 1, device_space> bias,
                  tensor_view<bf16, 2, device_space> y, float eps) {
    constexpr int threads = cuda_detail::norm_threads;
    auto p = cuda_detail::norm_params_of(x, weight, y, eps);
    p.bias = bias.data_handle();
    cuda_kernels::layer_norm_kernel<X, threads>
        <<<cuda_detail::grid_blocks(p.rows, cuda_detail::norm_rows_per_block), threads, 0, be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CUDA_OP_INSTANCES(DSA_NORM_INSTANCES)
