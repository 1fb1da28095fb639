// CUDA backend of moe_route (kernel: kernels/moe_routing_kernel.cuh). No workspace: each warp's
// scratch (E + n_group + 2 · top_k words) is in shared memory. The expert ids and weights are the
// CPU backend's whenever the expert scores are: the selection is the CPU's code on the device.
// The scores use the device's expf (CPU: the host libm's), which can differ by an ulp or two, so
// weights agree to a few ulps and an id can differ only where two candidates' biased scores
// (or two groups' scores) are within such an ulp of each other (docs/cuda.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "dsa/core/backend.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/kernels/moe_routing_kernel.cuh"
#include "dsa/cuda/launch.cuh"
#include "dsa/ops/moe_routing.hpp"

DSA_NAMESPACE_BEGIN

template <>
struct op_impl<cuda_backend, moe_route_op> {
  static void run(const cuda_backend& be, tensor_view<const float, 2, device_space> logits,
                  tensor_view<const float, 1, device_space> bias, tensor_view<std::int32_t, 2, device_space> expert_ids,
                  tensor_view<float, 2, device_space> weights, const moe_routing_config& cfg) {
    cuda_kernels::moe_route_params p;
    p.logits = logits.data_handle();
    p.logit_stride = logits.stride(0);
    p.bias = bias.is_absent() ? nullptr : bias.data_handle();
    p.tokens = logits.extent(0);
    p.n_experts = logits.extent(1);
    p.cfg = cfg;
    p.expert_ids = expert_ids.data_handle();
    p.id_stride = expert_ids.stride(0);
    p.weights = weights.data_handle();
    p.weight_stride = weights.stride(0);
    if (p.tokens == 0) return;

    // Four warps (tokens) per block while their scratch fits the default 48 KB (E up to about
    // 3000), else one warp per block, opting into more shared memory where the device has it.
    const index_t warp_bytes =
        cuda_kernels::moe_route_warp_scratch_floats(p.n_experts, cfg.n_group, cfg.top_k) * index_t{4};
    constexpr index_t default_smem = 48 * 1024;
    if (4 * warp_bytes <= default_smem) {
      cuda_kernels::moe_route_kernel<4>
          <<<cuda_detail::grid_blocks(p.tokens, 4), 4 * 32, static_cast<std::size_t>(4 * warp_bytes), be.stream>>>(p);
    } else {
      if (warp_bytes > default_smem) {
        const index_t limit = cuda_detail::max_dynamic_shared_memory();
        check(warp_bytes <= limit, "moe_route", "logits.extent(1)", p.n_experts,
              "an expert count whose routing scratch, 4 · (E + n_group + 2 · top_k) = " + std::to_string(warp_bytes) +
                  " bytes, fits this device's " + std::to_string(limit) + " bytes of shared memory per block");
        cuda_detail::allow_dynamic_shared_memory(cuda_kernels::moe_route_kernel<1>, warp_bytes);
      }
      cuda_kernels::moe_route_kernel<1>
          <<<cuda_detail::grid_blocks(p.tokens, 1), 32, static_cast<std::size_t>(warp_bytes), be.stream>>>(p);
    }
    DSA_CUDA_CHECK_LAUNCH();
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CUDA_OP_INSTANCES(DSA_MOE_ROUTING_INSTANCES)
