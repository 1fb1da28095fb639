// CPU backend of dsa::moe_route: tokens are independent, so they are split over the threads and
// each is routed by the shared numerics (the same function a CUDA kernel runs per token).
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/numerics/moe_routing.hpp"
#include "dsa/ops/moe_routing.hpp"

DSA_NAMESPACE_BEGIN

template <>
struct op_impl<cpu_backend, moe_route_op> {
  static void run(const cpu_backend& be, tensor_view<const float, 2> logits, tensor_view<const float, 1> bias,
                  tensor_view<std::int32_t, 2> expert_ids, tensor_view<float, 2> weights,
                  const moe_routing_config& cfg) {
    const index_t tokens = logits.extent(0);
    const index_t n_experts = logits.extent(1);
    const float* bias_data = bias.is_absent() ? nullptr : bias.data_handle();
    // A token costs about E exponentials (~1 us for E = 256): 64 tokens amortise a thread start.
    constexpr index_t grain = 64;
    cpu_detail::parallel_for(be, tokens, grain, [&](index_t begin, index_t end) {
      std::vector<float> scratch(static_cast<std::size_t>(moe_route_scratch_size(n_experts, cfg.n_group)));
      for (index_t t = begin; t < end; ++t) {
        moe_route_token(logits.row(t), bias_data, n_experts, cfg, scratch.data(), expert_ids.row(t), weights.row(t));
      }
    });
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CPU_OP_INSTANCES(DSA_MOE_ROUTING_INSTANCES)
