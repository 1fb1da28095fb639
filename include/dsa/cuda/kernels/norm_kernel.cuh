// Kernels of rms_norm, add_rms_norm and layer_norm on the CUDA backend.
//
// Bit-identical to the CPU backend by construction: dsa/numerics/norm.hpp fixes the order of the
// double row sums (element k goes to lane k mod 8, each lane sums in index order, then the lanes
// pairwise), and here each row is owned by a group of 8 consecutive threads whose thread l is
// that lane l: it sums elements l, l + 8, l + 16, ... in index order, and an xor butterfly over
// the 8 threads (offsets 1, 2, 4) forms ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)), exactly the CPU's
// combine_lanes. The statistics and every output element then go through the shared numerics.
// A warp holds 4 rows; the shuffles name only the group's 8 lanes, so a group past the last row
// may leave early without stranding the others.
//
// A row's sum is a dependent chain of d/8 double additions per thread: ~4 us for d = 7168, paid
// once per row and hidden by the other rows in flight whenever there are many.
#pragma once

#include <cuda_runtime.h>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/arch/warp.cuh"
#include "dsa/numerics/norm.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

/// Threads per row: the lanes of the CPU's summation order (dsa/numerics/norm.hpp).
inline constexpr int norm_row_lanes = 8;

template <class X>
struct norm_params {
  const X* x = nullptr;
  index_t x_row_stride = 0;
  bf16* residual = nullptr;  // add_rms_norm only
  index_t residual_row_stride = 0;
  const float* weight = nullptr;
  const float* bias = nullptr;  // layer_norm only
  bf16* y = nullptr;
  index_t y_row_stride = 0;
  index_t rows = 0;
  index_t d = 0;
  float eps = 0.0f;
};


// The shuffle mask of this thread's 8-lane group.
DSA_DEVICE DSA_FORCEINLINE unsigned group_mask() {
  return 0xFFu << ((threadIdx.x % 32) / norm_row_lanes * norm_row_lanes);
}

// Lane sums combined in the CPU's pairwise order (see the header comment): offsets rising 1, 2,
// 4. Not cuda_arch::warp_reduce_sum, whose offsets fall (4, 2, 1) and so would form
// ((s0+s4)+(s2+s6))+((s1+s5)+(s3+s7)), which differs where the lane sums cancel.
DSA_DEVICE DSA_FORCEINLINE double combine(double v) {
  const unsigned mask = group_mask();
#pragma unroll
  for (int offset = 1; offset < norm_row_lanes; offset *= 2) v += __shfl_xor_sync(mask, v, offset, norm_row_lanes);
  return v;
}


/// rms_norm: y = bf16(w * (x * r)), r from the sum of squares. y may be x (in place): each
/// element is read and written by the same thread, reads first.
template <class X, int Threads>
__global__ void __launch_bounds__(Threads) rms_norm_kernel(const norm_params<X> p) {
  static_assert(Threads % 32 == 0);
  constexpr int rows_per_block = Threads / norm_row_lanes;
  const index_t lane = threadIdx.x % norm_row_lanes;
  for (index_t base = static_cast<index_t>(blockIdx.x) * rows_per_block; base < p.rows;
       base += static_cast<index_t>(gridDim.x) * rows_per_block) {
    const index_t r = base + threadIdx.x / norm_row_lanes;
    if (r >= p.rows) continue;  // the whole 8-lane group: no shuffle is left waiting
    const X* x = p.x + r * p.x_row_stride;
    double s = 0.0;
#pragma unroll 4
    for (index_t k = lane; k < p.d; k += norm_row_lanes) {
      const double v = static_cast<double>(to_float(x[k]));
      s += v * v;  // exact square: contraction cannot change the sum
    }
    const float inv = rms_norm_inv_rms(combine(s), p.d, p.eps);
    bf16* y = p.y + r * p.y_row_stride;
    for (index_t k = lane; k < p.d; k += norm_row_lanes) y[k] = bf16(rms_norm_scale(to_float(x[k]), inv, p.weight[k]));
  }
}

/// add_rms_norm: h = fl32(x + residual); residual = bf16(h); y = bf16(rms_norm(h)). h is formed
/// twice (sum of squares, then output) rather than stored: the same fp32 addition gives the same
/// bits, and the residual is overwritten only in the second pass, after its last read.
template <int Threads>
__global__ void __launch_bounds__(Threads) add_rms_norm_kernel(const norm_params<bf16> p) {
  static_assert(Threads % 32 == 0);
  constexpr int rows_per_block = Threads / norm_row_lanes;
  const index_t lane = threadIdx.x % norm_row_lanes;
  for (index_t base = static_cast<index_t>(blockIdx.x) * rows_per_block; base < p.rows;
       base += static_cast<index_t>(gridDim.x) * rows_per_block) {
    const index_t r = base + threadIdx.x / norm_row_lanes;
    if (r >= p.rows) continue;
    const bf16* x = p.x + r * p.x_row_stride;
    bf16* res = p.residual + r * p.residual_row_stride;
    double s = 0.0;
#pragma unroll 4
    for (index_t k = lane; k < p.d; k += norm_row_lanes) {
      const double v = static_cast<double>(x[k].to_float() + res[k].to_float());
      s += v * v;
    }
    const float inv = rms_norm_inv_rms(combine(s), p.d, p.eps);
    bf16* y = p.y + r * p.y_row_stride;
    for (index_t k = lane; k < p.d; k += norm_row_lanes) {
      const float h = x[k].to_float() + res[k].to_float();
      res[k] = bf16(h);
      y[k] = bf16(rms_norm_scale(h, inv, p.weight[k]));
    }
  }
}

/// layer_norm: the double sum, then the double sum of squared deviations from the double mean
/// (detail::square_rn, never fused), layer_norm_finish, and every element through
/// layer_norm_scale.
template <class X, int Threads>
__global__ void __launch_bounds__(Threads) layer_norm_kernel(const norm_params<X> p) {
  static_assert(Threads % 32 == 0);
  constexpr int rows_per_block = Threads / norm_row_lanes;
  const index_t lane = threadIdx.x % norm_row_lanes;
  for (index_t base = static_cast<index_t>(blockIdx.x) * rows_per_block; base < p.rows;
       base += static_cast<index_t>(gridDim.x) * rows_per_block) {
    const index_t r = base + threadIdx.x / norm_row_lanes;
    if (r >= p.rows) continue;
    const X* x = p.x + r * p.x_row_stride;
    double s = 0.0;
#pragma unroll 4
    for (index_t k = lane; k < p.d; k += norm_row_lanes) s += static_cast<double>(to_float(x[k]));
    const double sum = combine(s);
    const double mean = sum / static_cast<double>(p.d);
    double v = 0.0;
#pragma unroll 4
    for (index_t k = lane; k < p.d; k += norm_row_lanes) {
      v += detail::square_rn(static_cast<double>(to_float(x[k])) - mean);
    }
    const layer_norm_stats st = layer_norm_finish(sum, combine(v), p.d, p.eps);
    bf16* y = p.y + r * p.y_row_stride;
    for (index_t k = lane; k < p.d; k += norm_row_lanes) {
      y[k] = bf16(layer_norm_scale(to_float(x[k]), st, p.weight[k], p.bias[k]));
    }
  }
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
