// CUDA backend of dsa::fp8_linear and dsa::linear (kernels: kernels/linear_kernel.cuh).
//
// fp8_linear: the exact kernels, bit-identical to the CPU backend (batch-invariant too: a row's
// result does not depend on t, on the tiling or on the kernel): the decode GEMV for up to 8 rows,
// the tiled kernel above that. The activations are quantized inside the kernels, per tile or
// pass, with the act_quant numerics, so no workspace is needed.
//
// linear: cuBLAS (cublasGemmEx on be.blas, which must be a handle: dsa::cublas_handle) for the
// type combinations it has (be.linear == cuda_linear_path::cublas, the default), fp32 accumulation
// and one rounding to the output type:
//   bf16 x bf16 -> bf16 or fp32   CUBLAS_COMPUTE_32F (bf16 products are exact in fp32)
//   fp32 x fp32 -> fp32           CUBLAS_COMPUTE_32F_PEDANTIC (full fp32 products: no TF32)
// and the SIMT kernel for the rest (a bf16 operand with an fp32 one, fp32 operands into bf16), for
// operand strides cuBLAS cannot take (broadcast or reversed rows), and for every call with
// be.linear == cuda_linear_path::simt (no handle needed). Row-major y = x . w^T is,
// column-major, y^T = w^T' . x^T: cuBLAS gets w with CUBLAS_OP_T and x with CUBLAS_OP_N, the
// views' row strides as leading dimensions. Before the call the op binds the handle to be.stream
// and sets host pointer mode and CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (partial sums
// of split-k kernels in fp32, not in the bf16 output type): handle state the caller shares. The
// fp32 summation order is cuBLAS's: results are deterministic run to run on one GPU model and
// cuBLAS version (cuBLAS's guarantee), not bit-identical to the CPU backend's Eigen order.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "dsa/core/backend.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/kernels/linear_kernel.cuh"
#include "dsa/cuda/launch.cuh"
#include "dsa/ops/linear.hpp"

DSA_NAMESPACE_BEGIN

namespace cuda_detail {

/// Rows of y up to which fp8_linear runs the decode GEMV (a warp per output column, every row).
inline constexpr index_t fp8_linear_decode_rows = cuda_kernels::fp8_gemv_rows;

template <class X, class O, int TM, int TN, int RM, int RN>
void launch_fp8_linear(const cuda_backend& be, const cuda_kernels::fp8_linear_params<X, O>& p, index_t max_rows) {
  const dim3 grid(grid_blocks(p.out, TN), grid_rows((p.t + TM - 1) / TM, max_rows));
  cuda_kernels::fp8_linear_kernel<X, O, TM, TN, RM, RN><<<grid, cuda_kernels::fp8_linear_threads, 0, be.stream>>>(p);
  DSA_CUDA_CHECK_LAUNCH();
}

/// fp8_linear on checked arguments, with at most `max_rows` blocks along y (grid_rows).
template <class X, class O>
void run_fp8_linear(const cuda_backend& be, tensor_view<const X, 2, device_space> x,
                    tensor_view<const fp8_e4m3, 2, device_space> w, tensor_view<const float, 2, device_space> w_scale,
                    tensor_view<O, 2, device_space> y, scale_format act_format, index_t max_rows = max_grid_y) {
  cuda_kernels::fp8_linear_params<X, O> p;
  p.x = x.data_handle();
  p.x_row_stride = x.stride(0);
  p.w = w.data_handle();
  p.w_row_stride = w.stride(0);
  p.w_scale = w_scale.data_handle();
  p.w_scale_row_stride = w_scale.stride(0);
  p.y = y.data_handle();
  p.y_row_stride = y.stride(0);
  p.t = x.extent(0);
  p.in = x.extent(1);
  p.out = w.extent(0);
  p.act_format = act_format;
  p.w_aligned16 = reinterpret_cast<std::uintptr_t>(p.w) % 16 == 0 && (p.out <= 1 || p.w_row_stride % 16 == 0);
  if (p.t <= fp8_linear_decode_rows) {
    // The weights dominate: one warp streams each column, so that 7168 -> 2048 fills 256 blocks.
    constexpr index_t columns_per_block = cuda_kernels::fp8_gemv_threads / 32;
    cuda_kernels::fp8_gemv_kernel<X, O>
        <<<grid_blocks(p.out, columns_per_block), cuda_kernels::fp8_gemv_threads, 0, be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  } else {
    launch_fp8_linear<X, O, 32, 64, 2, 4>(be, p, max_rows);
  }
}

/// linear's SIMT kernel on checked arguments, with at most `max_rows` blocks along y (grid_rows).
template <class X, class W, class O>
void run_linear_simt(const cuda_backend& be, tensor_view<const X, 2, device_space> x,
                     tensor_view<const W, 2, device_space> w, tensor_view<O, 2, device_space> y,
                     index_t max_rows = max_grid_y) {
  cuda_kernels::linear_params<X, W, O> p;
  p.x = x.data_handle();
  p.x_row_stride = x.stride(0);
  p.w = w.data_handle();
  p.w_row_stride = w.stride(0);
  p.y = y.data_handle();
  p.y_row_stride = y.stride(0);
  p.t = x.extent(0);
  p.in = x.extent(1);
  p.out = w.extent(0);
  constexpr int tile = cuda_kernels::linear_simt_tile;
  const dim3 grid(grid_blocks(p.out, tile), grid_rows((p.t + tile - 1) / tile, max_rows));
  cuda_kernels::linear_simt_kernel<X, W, O><<<grid, cuda_kernels::linear_simt_threads, 0, be.stream>>>(p);
  DSA_CUDA_CHECK_LAUNCH();
}

template <class T>
constexpr cudaDataType_t cublas_type() {
  return std::is_same_v<T, bf16> ? CUDA_R_16BF : CUDA_R_32F;
}

/// A leading dimension for cuBLAS: a single row may have any stride (cuBLAS only needs ld >= rows
/// of the column-major matrix); otherwise the view's row stride, or -1 when cuBLAS cannot take it.
inline index_t cublas_ld(index_t rows, index_t row_stride, index_t len) {
  if (rows <= 1) return std::max<index_t>(len, 1);
  return row_stride >= len && row_stride >= 1 ? row_stride : -1;
}

inline bool fits_int(index_t v) { return v >= 0 && v <= INT_MAX; }

}  // namespace cuda_detail

template <>
struct op_impl<cuda_backend, fp8_linear_op> {
  template <class X, class O>
  static void run(const cuda_backend& be, tensor_view<const X, 2, device_space> x,
                  tensor_view<const fp8_e4m3, 2, device_space> w, tensor_view<const float, 2, device_space> w_scale,
                  tensor_view<O, 2, device_space> y, scale_format act_format) {
    cuda_detail::run_fp8_linear(be, x, w, w_scale, y, act_format);
  }
};

template <>
struct op_impl<cuda_backend, linear_op> {
  template <class X, class W, class O>
  static void run(const cuda_backend& be, tensor_view<const X, 2, device_space> x,
                  tensor_view<const W, 2, device_space> w, tensor_view<O, 2, device_space> y) {
    if (be.linear == cuda_linear_path::simt) {
      cuda_detail::run_linear_simt(be, x, w, y);
      return;
    }
    if (be.linear != cuda_linear_path::cublas) {
      fail("linear", "backend.linear", static_cast<int>(be.linear),
           "cuda_linear_path::cublas (0) or cuda_linear_path::simt (1)");
    }
    if (be.blas == nullptr) {
      fail("linear", "backend.blas", "null", "a cuBLAS handle (dsa::cublas_handle) for the CUDA backend");
    }
    const index_t t = x.extent(0);
    const index_t in = x.extent(1);
    const index_t out = w.extent(0);
    // cuBLAS has no kernel for mixed operand types, nor for fp32 operands with a bf16 result.
    constexpr bool blas_types = std::is_same_v<X, W> && (std::is_same_v<X, bf16> || std::is_same_v<O, float>);
    const index_t ldx = cuda_detail::cublas_ld(t, x.stride(0), in);
    const index_t ldw = cuda_detail::cublas_ld(out, w.stride(0), in);
    const index_t ldy = cuda_detail::cublas_ld(t, y.stride(0), out);
    const bool blas_shapes = in > 0 && cuda_detail::fits_int(t) && cuda_detail::fits_int(in) &&
                             cuda_detail::fits_int(out) && ldx > 0 && cuda_detail::fits_int(ldx) && ldw > 0 &&
                             cuda_detail::fits_int(ldw) && ldy > 0 && cuda_detail::fits_int(ldy);
    if (blas_types && blas_shapes) {
      const float alpha = 1.0f;
      const float beta = 0.0f;
      const cublasComputeType_t compute =
          std::is_same_v<X, float> ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
      DSA_CUBLAS_CHECK(cublasSetStream(be.blas, be.stream));
      DSA_CUBLAS_CHECK(cublasSetPointerMode(be.blas, CUBLAS_POINTER_MODE_HOST));
      DSA_CUBLAS_CHECK(cublasSetMathMode(
          be.blas, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
      DSA_CUBLAS_CHECK(cublasGemmEx(be.blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(t),
                                    static_cast<int>(in), &alpha, w.data_handle(), cuda_detail::cublas_type<W>(),
                                    static_cast<int>(ldw), x.data_handle(), cuda_detail::cublas_type<X>(),
                                    static_cast<int>(ldx), &beta, y.data_handle(), cuda_detail::cublas_type<O>(),
                                    static_cast<int>(ldy), compute, CUBLAS_GEMM_DEFAULT));
      return;
    }
    // The SIMT kernel: every other type combination, unusual strides, and in == 0 (y = 0).
    cuda_detail::run_linear_simt(be, x, w, y);
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CUDA_OP_INSTANCES(DSA_LINEAR_INSTANCES)
