// Kernel of swiglu on the CUDA backend: elementwise over [rows, n], grid-stride over the
// elements, each through swiglu_value (dsa/numerics/activation.hpp: silu in double, one fp32
// product, one bf16 rounding). y may be exactly gate or up: each element is read, then written,
// by one thread.
//
// Parity: the device's double exp is within an ulp of glibc's, so an element differs from the
// CPU only when the exact silu lies within ~2^-52 relative of an fp32 rounding boundary
// (probability ~2^-28 per element), and then by one bf16 ulp at most.
#pragma once

#include <cuda_runtime.h>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/activation.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

struct swiglu_params {
  const bf16* gate = nullptr;
  index_t gate_row_stride = 0;
  const bf16* up = nullptr;
  index_t up_row_stride = 0;
  bf16* y = nullptr;
  index_t y_row_stride = 0;
  index_t rows = 0;
  index_t n = 0;
};

template <int Threads>
__global__ void __launch_bounds__(Threads) swiglu_kernel(const swiglu_params p) {
  const index_t total = p.rows * p.n;
  for (index_t e = static_cast<index_t>(blockIdx.x) * Threads + threadIdx.x; e < total;
       e += static_cast<index_t>(gridDim.x) * Threads) {
    const index_t r = e / p.n;
    const index_t c = e - r * p.n;
    const float g = p.gate[r * p.gate_row_stride + c].to_float();
    const float u = p.up[r * p.up_row_stride + c].to_float();
    p.y[r * p.y_row_stride + c] = bf16(swiglu_value(g, u));
  }
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
