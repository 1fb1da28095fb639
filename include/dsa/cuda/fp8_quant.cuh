// CUDA backend of the FP8 quantizers (kernels: kernels/fp8_quant_kernel.cuh). Codes and scales
// are bit-identical to the CPU backend; see the kernel header for why.
#pragma once

#include <cuda_runtime.h>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/kernels/fp8_quant_kernel.cuh"
#include "dsa/cuda/launch.cuh"
#include "dsa/numerics/fp8_quant.hpp"
#include "dsa/ops/fp8_quant.hpp"

DSA_NAMESPACE_BEGIN

namespace cuda_detail {

inline constexpr int fp8_quant_threads = 256;

template <class T>
void launch_dequant(const cuda_backend& be, tensor_view<const fp8_e4m3, 2, device_space> q,
                    tensor_view<const float, 2, device_space> s, tensor_view<T, 2, device_space> out,
                    index_t block_rows, index_t block_cols) {
  cuda_kernels::dequant_params<T> p;
  p.q = q.data_handle();
  p.q_row_stride = q.stride(0);
  p.s = s.data_handle();
  p.s_row_stride = s.stride(0);
  p.out = out.data_handle();
  p.out_row_stride = out.stride(0);
  p.rows = q.extent(0);
  p.cols = q.extent(1);
  p.block_rows = block_rows;
  p.block_cols = block_cols;
  cuda_kernels::dequant_kernel<T, fp8_quant_threads>
      <<<grid_blocks(p.rows, 1), fp8_quant_threads, 0, be.stream>>>(p);
  DSA_CUDA_CHECK_LAUNCH();
}

/// act_quant of x [rows, groups * group_size] into codes q (row stride q_row_stride) and scales
/// at s[r * s_row_stride + g * s_col_stride]: act_quant's layout (s_col_stride 1), or the
/// transposed one fp8_linear's cuBLASLt path hands to cuBLASLt (s_row_stride 1, s_col_stride rows).
template <class T>
void launch_act_quant(const cuda_backend& be, tensor_view<const T, 2, device_space> x, fp8_e4m3* q,
                      index_t q_row_stride, float* s, index_t s_row_stride, index_t s_col_stride,
                      act_quant_config cfg) {
  constexpr int threads = fp8_quant_threads;
  cuda_kernels::act_quant_params<T> p;
  p.x = x.data_handle();
  p.x_row_stride = x.stride(0);
  p.q = q;
  p.q_row_stride = q_row_stride;
  p.s = s;
  p.s_row_stride = s_row_stride;
  p.s_col_stride = s_col_stride;
  p.rows = x.extent(0);
  p.group_size = cfg.group_size;
  p.groups_per_row = x.extent(1) / cfg.group_size;
  p.format = cfg.format;
  if (p.rows * p.groups_per_row == 0) return;
  cuda_kernels::act_quant_kernel<T, threads>
      <<<grid_blocks(p.rows * p.groups_per_row, threads / 32), threads, 0, be.stream>>>(p);
  DSA_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda_detail

template <>
struct op_impl<cuda_backend, act_quant_op> {
  template <class T>
  static void run(const cuda_backend& be, tensor_view<const T, 2, device_space> x,
                  tensor_view<fp8_e4m3, 2, device_space> q, tensor_view<float, 2, device_space> s,
                  act_quant_config cfg) {
    cuda_detail::launch_act_quant(be, x, q.data_handle(), q.stride(0), s.data_handle(), s.stride(0), 1, cfg);
  }
};

template <>
struct op_impl<cuda_backend, act_dequant_op> {
  template <class T>
  static void run(const cuda_backend& be, tensor_view<const fp8_e4m3, 2, device_space> q,
                  tensor_view<const float, 2, device_space> s, tensor_view<T, 2, device_space> y, index_t group_size) {
    cuda_detail::launch_dequant(be, q, s, y, 1, group_size);
  }
};

template <>
struct op_impl<cuda_backend, weight_quant_op> {
  template <class T>
  static void run(const cuda_backend& be, tensor_view<const T, 2, device_space> w,
                  tensor_view<fp8_e4m3, 2, device_space> q, tensor_view<float, 2, device_space> s) {
    constexpr int threads = cuda_detail::fp8_quant_threads;
    cuda_kernels::weight_quant_params<T> p;
    p.w = w.data_handle();
    p.w_row_stride = w.stride(0);
    p.q = q.data_handle();
    p.q_row_stride = q.stride(0);
    p.s = s.data_handle();
    p.s_row_stride = s.stride(0);
    p.rows = w.extent(0);
    p.cols = w.extent(1);
    p.block_rows = s.extent(0);
    p.block_cols = s.extent(1);
    cuda_kernels::weight_quant_kernel<T, threads>
        <<<cuda_detail::grid_blocks(p.block_rows * p.block_cols, 1), threads, 0, be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  }
};

template <>
struct op_impl<cuda_backend, weight_dequant_op> {
  template <class T>
  static void run(const cuda_backend& be, tensor_view<const fp8_e4m3, 2, device_space> q,
                  tensor_view<const float, 2, device_space> s, tensor_view<T, 2, device_space> w) {
    cuda_detail::launch_dequant(be, q, s, w, weight_quant_block, weight_quant_block);
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CUDA_OP_INSTANCES(DSA_FP8_QUANT_INSTANCES)
