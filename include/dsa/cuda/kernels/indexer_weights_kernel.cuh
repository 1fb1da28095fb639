// Kernel of lightning_indexer_weights on the CUDA backend: element-wise, a thread per (token,
// head) (grid-stride), dsa/numerics/indexer_weights.hpp's indexer_head_weight (three products,
// each rounded to fp32 by __fmul_rn, never fused): bit-identical to the CPU backend. w may be
// proj's memory (in place): each element is read, then written, by one thread.
#pragma once

#include <cuda_runtime.h>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/numerics/indexer_weights.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

struct indexer_weights_params {
  const float* proj = nullptr;  // [m, H]
  index_t proj_stride = 0;
  const float* q_scale = nullptr;  // [m, H]
  index_t q_scale_stride = 0;
  float* w = nullptr;  // [m, H]
  index_t w_stride = 0;
  index_t m = 0;
  index_t heads = 0;
  float head_scale = 1.0f;
  float dim_scale = 1.0f;
};

template <int Threads>
__global__ void __launch_bounds__(Threads) indexer_weights_kernel(const indexer_weights_params p) {
  const index_t total = p.m * p.heads;
  for (index_t i = static_cast<index_t>(blockIdx.x) * Threads + threadIdx.x; i < total;
       i += static_cast<index_t>(gridDim.x) * Threads) {
    const index_t t = i / p.heads;
    const index_t h = i - t * p.heads;
    p.w[t * p.w_stride + h] = indexer_head_weight(p.proj[t * p.proj_stride + h], p.q_scale[t * p.q_scale_stride + h],
                                                  p.head_scale, p.dim_scale);
  }
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
