// dsa::moe_route: DeepSeek-V3 `noaux_tc` expert selection (docs/design.md "MoE routing").
//
//   dsa::moe_route(be, logits, bias, expert_ids, weights, cfg);
//
// logits [t, E] fp32 = x · W_gate^T; bias [E] = e_score_correction_bias, or an absent view
// ({}) for no bias; expert_ids int32 [t, top_k] and weights fp32 [t, top_k] receive, per token,
// top_k distinct expert ids in ascending order and their routing weights. The arithmetic and
// its exact semantics are in dsa/numerics/moe_routing.hpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "dsa/core/aliasing.hpp"
#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/op_instances.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/numerics/moe_routing.hpp"

DSA_NAMESPACE_BEGIN

/// Op tag of moe_route.
struct moe_route_op {};

/// Throws dsa::error unless `cfg` is a valid routing configuration for `n_experts` experts
/// with (or without) a bias. Exposed so that model loaders can reject a config early.
inline void check_moe_routing_config(const moe_routing_config& cfg, index_t n_experts, bool has_bias,
                                     std::string_view op = "moe_route") {
  check(cfg.scoring == moe_scoring::sigmoid || cfg.scoring == moe_scoring::softmax, op, "cfg.scoring",
        static_cast<int>(cfg.scoring), "moe_scoring::sigmoid (0) or moe_scoring::softmax (1)");
  check(cfg.n_group >= 1, op, "cfg.n_group", cfg.n_group, ">= 1");
  check(n_experts % cfg.n_group == 0, op, "cfg.n_group", cfg.n_group,
        "a divisor of the number of experts (logits.extent(1) = " + std::to_string(n_experts) + ")");
  check(cfg.topk_group >= 1 && cfg.topk_group <= cfg.n_group, op, "cfg.topk_group", cfg.topk_group,
        "1 <= topk_group <= n_group = " + std::to_string(cfg.n_group));
  const index_t group_size = n_experts / cfg.n_group;
  const index_t selectable = cfg.topk_group * group_size;
  check(cfg.top_k >= 1 && cfg.top_k <= selectable, op, "cfg.top_k", cfg.top_k,
        "1 <= top_k <= topk_group * (E / n_group) = " + std::to_string(selectable) + " selectable experts");
  if (has_bias && cfg.n_group > 1) {
    check(group_size >= 2, op, "cfg.n_group", cfg.n_group,
          "groups of at least 2 experts when a bias is given (the group score is the sum of the top 2; E = " +
              std::to_string(n_experts) + ")");
  }
  check(std::isfinite(cfg.routed_scaling_factor), op, "cfg.routed_scaling_factor", cfg.routed_scaling_factor,
        "a finite number");
}

/// Selects cfg.top_k experts per token and their weights. `bias` may be an absent view ({}).
/// Outputs must not overlap the inputs. Deterministic and independent of the thread count.
template <backend B>
void moe_route(const B& be, in_view<B, float, 2> logits, in_view<B, float, 1> bias,
               out_view<B, std::int32_t, 2> expert_ids, out_view<B, float, 2> weights,
               const moe_routing_config& cfg) {
  constexpr std::string_view op = "moe_route";
  check_valid(op, "logits", logits);
  check_valid(op, "expert_ids", expert_ids);
  check_valid(op, "weights", weights);
  const bool has_bias = !bias.is_absent();
  if (has_bias) check_valid(op, "bias", bias);

  const index_t tokens = logits.extent(0);
  const index_t n_experts = logits.extent(1);
  check(n_experts >= 1, op, "logits.extent(1)", n_experts, ">= 1 (the number of experts)");
  check(n_experts <= std::numeric_limits<std::int32_t>::max(), op, "logits.extent(1)", n_experts,
        "<= 2^31 - 1 (expert ids are int32)");
  check_moe_routing_config(cfg, n_experts, has_bias, op);

  if (has_bias) check_extent(op, "bias", bias, 0, n_experts, "logits.extent(1), the number of experts");
  check_extent(op, "expert_ids", expert_ids, 0, tokens, "logits.extent(0), the number of tokens");
  check_extent(op, "expert_ids", expert_ids, 1, cfg.top_k, "cfg.top_k");
  check_extent(op, "weights", weights, 0, tokens, "logits.extent(0), the number of tokens");
  check_extent(op, "weights", weights, 1, cfg.top_k, "cfg.top_k");

  check_inner_contiguous(op, "logits", logits);
  if (has_bias) check_inner_contiguous(op, "bias", bias);
  check_inner_contiguous(op, "expert_ids", expert_ids);
  check_inner_contiguous(op, "weights", weights);

  // Rows of an output that overlap would be written by several threads at once.
  if (tokens > 1) {
    check(expert_ids.stride(0) >= cfg.top_k, op, "expert_ids.stride(0)", expert_ids.stride(0),
          ">= cfg.top_k (rows of an output must not overlap)");
    check(weights.stride(0) >= cfg.top_k, op, "weights.stride(0)", weights.stride(0),
          ">= cfg.top_k (rows of an output must not overlap)");
  }

  if (tokens == 0) return;
  detail::check_disjoint_rows(op, "expert_ids", expert_ids);
  detail::check_no_overlap(op, "expert_ids", expert_ids, "logits", logits, false);
  detail::check_no_overlap(op, "expert_ids", expert_ids, "bias", bias, false);
  detail::check_disjoint_rows(op, "weights", weights);
  detail::check_no_overlap(op, "weights", weights, "logits", logits, false);
  detail::check_no_overlap(op, "weights", weights, "bias", bias, false);
  detail::check_no_overlap(op, "weights", weights, "expert_ids", expert_ids, false);
  dispatch<moe_route_op>(be, logits, bias, expert_ids, weights, cfg);
}

DSA_NAMESPACE_END

// The type combinations dsa's own programs compile once per backend (dsa/core/op_instances.hpp).
#define DSA_MOE_ROUTING_INSTANCES(X, B) \
  X(void moe_route<B>(const B&, in_view<B, float, 2>, in_view<B, float, 1>, out_view<B, std::int32_t, 2>, out_view<B, float, 2>, const moe_routing_config&))
