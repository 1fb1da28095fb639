// Kernel of moe_route on the CUDA backend: one warp per token (grid-stride over tokens), the two
// stages of dsa/numerics/moe_routing.hpp's moe_route_token:
//   scores     element-wise over the lanes: moe_sigmoid, or softmax as moe_softmax_numerator and
//              div_rn per element, with moe_softmax_shift and moe_softmax_denominator (whose order
//              is part of their bits) run by lane 0, exactly as the CPU runs them;
//   selection  moe_route_select on lane 0 over the scores in shared memory: the CPU's code, so
//              group limiting, the top-k insertion, tie-breaks, NaN ranking, the ascending-id sort
//              and the weight normalisation are the CPU's decisions on the same scores.
// Scratch per warp, in dynamic shared memory: the E scores, the n_group group scores, and the
// top_k weights and ids the selection works in (moe_route_warp_scratch_floats). The outputs are
// copied to global memory by the whole warp at the end.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cuda/arch/warp.cuh"
#include "dsa/numerics/moe_routing.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

struct moe_route_params {
  const float* logits = nullptr;  // [tokens, E], unit-stride experts
  index_t logit_stride = 0;
  const float* bias = nullptr;  // [E] or nullptr
  index_t tokens = 0;
  index_t n_experts = 0;
  moe_routing_config cfg;
  std::int32_t* expert_ids = nullptr;  // [tokens, top_k]
  index_t id_stride = 0;
  float* weights = nullptr;  // [tokens, top_k]
  index_t weight_stride = 0;
};

/// Floats of shared memory one warp of moe_route_kernel uses (4-byte words: the ids are int32).
DSA_HOST_DEVICE constexpr index_t moe_route_warp_scratch_floats(index_t n_experts, index_t n_group, index_t top_k) {
  return moe_route_scratch_size(n_experts, n_group) + 2 * top_k;
}

template <int Warps>
__global__ void __launch_bounds__(Warps * 32) moe_route_kernel(const moe_route_params p) {
  extern __shared__ float moe_route_smem[];
  const int lane = static_cast<int>(threadIdx.x % 32);
  const index_t warp = threadIdx.x / 32;
  const index_t E = p.n_experts;
  const index_t k = p.cfg.top_k;
  float* const s = moe_route_smem + warp * moe_route_warp_scratch_floats(E, p.cfg.n_group, k);
  float* const group_score = s + E;
  float* const w = group_score + p.cfg.n_group;
  std::int32_t* const ids = reinterpret_cast<std::int32_t*>(w + k);

  // Warp-uniform loop: every lane of a warp runs the same tokens, so the warp syncs are safe.
  for (index_t t = static_cast<index_t>(blockIdx.x) * Warps + warp; t < p.tokens;
       t += static_cast<index_t>(gridDim.x) * Warps) {
    const float* x = p.logits + t * p.logit_stride;
    if (p.cfg.scoring == moe_scoring::sigmoid) {
      for (index_t e = lane; e < E; e += 32) s[e] = moe_sigmoid(x[e]);
    } else {
      float shift = 0.0f;
      if (lane == 0) shift = moe_softmax_shift(x, E);
      shift = __shfl_sync(cuda_arch::full_warp_mask, shift, 0);
      for (index_t e = lane; e < E; e += 32) s[e] = moe_softmax_numerator(x[e], shift);
      __syncwarp();
      float sum = 0.0f;
      if (lane == 0) sum = moe_softmax_denominator(s, E);
      sum = __shfl_sync(cuda_arch::full_warp_mask, sum, 0);
      for (index_t e = lane; e < E; e += 32) s[e] = detail::div_rn(s[e], sum);
    }
    __syncwarp();
    if (lane == 0) moe_route_select(s, p.bias, E, p.cfg, group_score, ids, w);
    __syncwarp();
    for (index_t i = lane; i < k; i += 32) {
      p.expert_ids[t * p.id_stride + i] = ids[i];
      p.weights[t * p.weight_stride + i] = w[i];
    }
    // The next token overwrites the scratch only after every lane has copied this one out.
    __syncwarp();
  }
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
