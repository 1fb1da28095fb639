// Kernel of moe_combine on the CUDA backend: one block per token (grid-stride over tokens), each
// thread a run of V adjacent features (V = 8 bf16, one 16-byte word, when every row allows it;
// else V = 1). Per feature the CPU backend's arithmetic, dsa/numerics/moe_combine.hpp, in slot
// order j = 0 .. k-1, then the shared expert and one bf16 rounding: bit-identical to the CPU.
//
// rows comes from device memory, which the front-end cannot read: an entry outside
// [0, expert_out.extent(0)) contributes nothing, like the -1 of "no expert" (the CPU front-end
// rejects such entries in host memory). Nothing is read out of bounds.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/moe_combine.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

struct moe_combine_params {
  const bf16* expert_out = nullptr;  // [R, d]
  index_t expert_stride = 0;
  index_t expert_rows = 0;
  const std::int32_t* rows = nullptr;  // [t, k]
  index_t row_stride = 0;
  const float* weights = nullptr;  // [t, k]
  index_t weight_stride = 0;
  index_t k = 0;
  const bf16* shared = nullptr;  // [t, d] or nullptr
  index_t shared_stride = 0;
  bf16* y = nullptr;  // [t, d]
  index_t y_stride = 0;
  index_t tokens = 0;
  index_t d = 0;
};


/// V bf16 values, loaded and stored as one word of V · 2 bytes (16 for V = 8).
template <int V>
struct alignas(2 * V) bf16_vec {
  bf16 v[V];
};


template <int V, int Threads>
__global__ void __launch_bounds__(Threads) moe_combine_kernel(const moe_combine_params p) {
  using vec = bf16_vec<V>;
  const index_t groups = p.d / V;  // the op_impl chose V to divide d
  for (index_t t = blockIdx.x; t < p.tokens; t += gridDim.x) {
    const std::int32_t* rows = p.rows + t * p.row_stride;
    const float* weights = p.weights + t * p.weight_stride;
    for (index_t c = threadIdx.x; c < groups; c += Threads) {
      float acc[V];
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] = 0.0f;
      for (index_t j = 0; j < p.k; ++j) {
        const index_t r = rows[j];
        if (r < 0 || r >= p.expert_rows) continue;
        const float w = weights[j];
        const vec e = *reinterpret_cast<const vec*>(p.expert_out + r * p.expert_stride + c * V);
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] = moe_combine_add(acc[i], w, e.v[i]);
      }
      vec out;
      if (p.shared != nullptr) {
        const vec sv = *reinterpret_cast<const vec*>(p.shared + t * p.shared_stride + c * V);
#pragma unroll
        for (int i = 0; i < V; ++i) out.v[i] = bf16(acc[i] + sv.v[i].to_float());
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) out.v[i] = bf16(acc[i]);
      }
      *reinterpret_cast<vec*>(p.y + t * p.y_stride + c * V) = out;
    }
  }
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
