// MoE routing, the MoE combine and the indexer's head weights on the CUDA backend, for the
// doctest tests (see op_launchers_moe.hpp).
#include "op_launchers_moe.hpp"

#include "dsa/cuda/indexer_weights.cuh"
#include "dsa/cuda/moe_combine.cuh"
#include "dsa/cuda/moe_routing.cuh"

namespace dsa_test::cuda_ops {

void moe_route(const dsa::cuda_backend& be, dsa::device_view<const float, 2> logits,
               dsa::device_view<const float, 1> bias, dsa::device_view<std::int32_t, 2> expert_ids,
               dsa::device_view<float, 2> weights, const dsa::moe_routing_config& cfg) {
  dsa::moe_route(be, logits, bias, expert_ids, weights, cfg);
}

void moe_combine(const dsa::cuda_backend& be, dsa::device_view<const dsa::bf16, 2> expert_out,
                 dsa::device_view<const std::int32_t, 2> rows, dsa::device_view<const float, 2> weights,
                 dsa::device_view<const dsa::bf16, 2> shared, dsa::device_view<dsa::bf16, 2> y) {
  dsa::moe_combine(be, expert_out, rows, weights, shared, y);
}

void lightning_indexer_weights(const dsa::cuda_backend& be, dsa::device_view<const float, 2> proj,
                               dsa::device_view<const float, 2> q_scale, dsa::device_view<float, 2> w,
                               float head_scale, float dim_scale) {
  dsa::lightning_indexer_weights(be, proj, q_scale, w, head_scale, dim_scale);
}

}  // namespace dsa_test::cuda_ops
