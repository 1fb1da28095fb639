// MoE routing, the MoE combine and the indexer's head weights on the CUDA backend, instantiated by
// nvcc (op_launchers_moe.cu) for the doctest tests (test_ops_moe.cpp): each function is exactly
// dsa::<op>(be, ...) with device views (see op_launchers.hpp for the pattern).
#pragma once

#include <cstdint>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/numerics/moe_routing.hpp"

namespace dsa_test::cuda_ops {

void moe_route(const dsa::cuda_backend& be, dsa::device_view<const float, 2> logits,
               dsa::device_view<const float, 1> bias, dsa::device_view<std::int32_t, 2> expert_ids,
               dsa::device_view<float, 2> weights, const dsa::moe_routing_config& cfg);
void moe_combine(const dsa::cuda_backend& be, dsa::device_view<const dsa::bf16, 2> expert_out,
                 dsa::device_view<const std::int32_t, 2> rows, dsa::device_view<const float, 2> weights,
                 dsa::device_view<const dsa::bf16, 2> shared, dsa::device_view<dsa::bf16, 2> y);
void lightning_indexer_weights(const dsa::cuda_backend& be, dsa::device_view<const float, 2> proj,
                               dsa::device_view<const float, 2> q_scale, dsa::device_view<float, 2> w,
                               float head_scale, float dim_scale);

}  // namespace dsa_test::cuda_ops
