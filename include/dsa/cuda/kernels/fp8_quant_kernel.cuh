// Kernels of the FP8 quantizers on the CUDA backend (act_quant, act_dequant, weight_quant,
// weight_dequant).
//
// Every value goes through the shared numerics of dsa/numerics/fp8_quant.hpp (amax on the IEEE
// bit patterns, act_quant_scale / weight_quant_scale, quantize_e4m3 with its IEEE division,
// dequantize_e4m3), so codes and scales are bit-identical to the CPU backend. amax is an integer
// max of bit patterns, which is exact in any order: the warp and block reductions need no fixed
// tree to agree with the CPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/arch/warp.cuh"
#include "dsa/numerics/fp8_quant.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

template <class T>
struct act_quant_params {
  const T* x = nullptr;
  index_t x_row_stride = 0;
  fp8_e4m3* q = nullptr;
  index_t q_row_stride = 0;
  float* s = nullptr;
  index_t s_row_stride = 0;
  index_t s_col_stride = 1;  // between a row's groups: 1, or the rows for transposed scales (fp8_linear)
  index_t rows = 0;
  index_t groups_per_row = 0;
  index_t group_size = 0;
  scale_format format = scale_format::ue8m0;
};

/// One warp per 1 x group_size group: lanes stride over the group for the amax, every lane
/// computes the same scale, lane 0 stores it, lanes stride again to quantize.
template <class T, int Threads>
__global__ void __launch_bounds__(Threads) act_quant_kernel(const act_quant_params<T> p) {
  constexpr int warps = Threads / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const index_t groups = p.rows * p.groups_per_row;
  for (index_t g = static_cast<index_t>(blockIdx.x) * warps + threadIdx.x / 32; g < groups;
       g += static_cast<index_t>(gridDim.x) * warps) {
    const index_t r = g / p.groups_per_row;
    const index_t c0 = (g - r * p.groups_per_row) * p.group_size;
    const T* x = p.x + r * p.x_row_stride + c0;
    std::uint32_t m = 0;
    for (index_t j = lane; j < p.group_size; j += 32) {
      const std::uint32_t a = abs_bits(x[j]);
      m = a > m ? a : m;
    }
    m = cuda_arch::warp_reduce_max(m);
    const float s = act_quant_scale(detail::bits_float(m), p.format);
    if (lane == 0) p.s[r * p.s_row_stride + (c0 / p.group_size) * p.s_col_stride] = s;
    fp8_e4m3* q = p.q + r * p.q_row_stride + c0;
    for (index_t j = lane; j < p.group_size; j += 32) q[j] = quantize_e4m3(to_float(x[j]), s);
  }
}

/// Dequantization of act_dequant (block 1 x group, scale_rows = rows) and weight_dequant
/// (block 128 x 128): out[r][c] = T(q[r][c] * s[r / block_rows][c / block_cols]).
template <class T>
struct dequant_params {
  const fp8_e4m3* q = nullptr;
  index_t q_row_stride = 0;
  const float* s = nullptr;
  index_t s_row_stride = 0;
  T* out = nullptr;
  index_t out_row_stride = 0;
  index_t rows = 0;
  index_t cols = 0;
  index_t block_rows = 1;
  index_t block_cols = 1;
};

/// One block per row (grid-stride over rows), threads stride along the row.
template <class T, int Threads>
__global__ void __launch_bounds__(Threads) dequant_kernel(const dequant_params<T> p) {
  for (index_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const fp8_e4m3* q = p.q + r * p.q_row_stride;
    const float* s = p.s + (r / p.block_rows) * p.s_row_stride;
    T* out = p.out + r * p.out_row_stride;
    for (index_t c = threadIdx.x; c < p.cols; c += Threads) {
      out[c] = from_float<T>(dequantize_e4m3(q[c], s[c / p.block_cols]));
    }
  }
}

template <class T>
struct weight_quant_params {
  const T* w = nullptr;
  index_t w_row_stride = 0;
  fp8_e4m3* q = nullptr;
  index_t q_row_stride = 0;
  float* s = nullptr;
  index_t s_row_stride = 0;
  index_t rows = 0;
  index_t cols = 0;
  index_t block_rows = 0;  // ceil(rows / 128)
  index_t block_cols = 0;  // ceil(cols / 128)
};

/// One thread block per 128 x 128 weight block (ragged at the edges): block-wide integer amax,
/// the scale from thread 0 through shared memory, then every element quantized.
template <class T, int Threads>
__global__ void __launch_bounds__(Threads) weight_quant_kernel(const weight_quant_params<T> p) {
  static_assert(Threads % 32 == 0 && Threads <= 1024);
  constexpr index_t blk = weight_quant_block;
  __shared__ std::uint32_t warp_max[Threads / 32];
  __shared__ float block_scale;
  const index_t blocks = p.block_rows * p.block_cols;
  for (index_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const index_t r0 = (b / p.block_cols) * blk, c0 = (b % p.block_cols) * blk;
    const index_t h = p.rows - r0 < blk ? p.rows - r0 : blk;
    const index_t w = p.cols - c0 < blk ? p.cols - c0 : blk;
    std::uint32_t m = 0;
    for (index_t e = threadIdx.x; e < h * w; e += Threads) {
      const std::uint32_t a = abs_bits(p.w[(r0 + e / w) * p.w_row_stride + c0 + e % w]);
      m = a > m ? a : m;
    }
    m = cuda_arch::warp_reduce_max(m);
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
      std::uint32_t all = 0;
      for (int i = 0; i < Threads / 32; ++i) all = warp_max[i] > all ? warp_max[i] : all;
      const float s = weight_quant_scale(detail::bits_float(all));
      block_scale = s;
      p.s[(b / p.block_cols) * p.s_row_stride + b % p.block_cols] = s;
    }
    __syncthreads();
    const float s = block_scale;
    for (index_t e = threadIdx.x; e < h * w; e += Threads) {
      const index_t r = r0 + e / w, c = c0 + e % w;
      p.q[r * p.q_row_stride + c] = quantize_e4m3(to_float(p.w[r * p.w_row_stride + c]), s);
    }
    // warp_max and block_scale are reused by the next block of this grid-stride loop.
    __syncthreads();
  }
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
