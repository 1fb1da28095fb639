// The MoE feed-forward of DeepSeek-V3.2 (DESIGN.md §3.7 and §4): fp32 gate logits, noaux_tc
// routing with the checkpoint's e_score_correction_bias when it has one, each routed expert run
// on the tokens routed to it (gathered, so an expert's work is proportional to its tokens), the
// shared experts on every token, and the fp32 combine in ascending expert id, rounded to bf16.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/model/layers/context.hpp"
#include "dsa/model/layers/mlp.hpp"
#include "dsa/model/weights.hpp"
#include "dsa/ops/linear.hpp"
#include "dsa/ops/moe_combine.hpp"
#include "dsa/ops/moe_routing.hpp"
#include "dsa/ops/topk.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

/// The routing of t tokens to k experts each, grouped by expert (the layout of expert_out).
struct expert_groups {
  std::vector<index_t> count;          ///< [n_experts] tokens routed to each expert
  std::vector<index_t> offset;         ///< [n_experts + 1] first expert_out row of each expert
  std::vector<std::int32_t> rows;      ///< [t * k] rows[i * k + j]: the row holding token i's j-th expert
  std::vector<std::int32_t> token_of;  ///< [t * k] the token of each expert_out row
};

/// Groups the (token, slot) assignments ids [t, k] by expert: rows of one expert are
/// consecutive and in ascending token order. An id outside [0, n_experts) is an error (the
/// routing op never produces one; the check keeps a faulty device result from indexing out of
/// bounds here).
inline expert_groups group_by_expert(const std::vector<std::int32_t>& ids, index_t t, index_t k, index_t n_experts) {
  expert_groups g;
  g.count.assign(static_cast<std::size_t>(n_experts), 0);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int32_t e = ids[i];
    if (e < 0 || e >= n_experts) {
      fail("model::moe_forward", "expert_ids[" + std::to_string(i) + "]", e,
           "an expert id in [0, " + std::to_string(n_experts) + ")");
    }
    ++g.count[static_cast<std::size_t>(e)];
  }
  g.offset.assign(static_cast<std::size_t>(n_experts) + 1, 0);
  for (index_t e = 0; e < n_experts; ++e) g.offset[e + 1] = g.offset[e] + g.count[static_cast<std::size_t>(e)];
  g.rows.resize(ids.size());
  g.token_of.resize(ids.size());
  std::vector<index_t> fill(g.offset.begin(), g.offset.end() - 1);
  for (index_t i = 0; i < t; ++i) {
    for (index_t j = 0; j < k; ++j) {
      const auto e = static_cast<std::size_t>(ids[static_cast<std::size_t>(i * k + j)]);
      const index_t r = fill[e]++;
      g.rows[static_cast<std::size_t>(i * k + j)] = static_cast<std::int32_t>(r);
      g.token_of[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(i);
    }
  }
  return g;
}

/// y [t, hidden] = MoE(x) for x [t, hidden] bf16; the routed expert ids [t, top_k] also go to
/// `routed` when it is given (the observer's layer_trace::experts).
template <class B>
void moe_forward(const layer_context<B>& ctx, const moe_weights& w, host_view<const bf16, 2> x, host_view<bf16, 2> y,
                 std::vector<std::int32_t>* routed = nullptr) {
  const index_t t = x.extent(0), d = x.extent(1);
  const index_t n_experts = w.gate.extent(0);
  const moe_routing_config rc = moe_routing_config_of(ctx.cfg);
  const index_t k = rc.top_k;

  std::vector<float> logits(static_cast<std::size_t>(t * n_experts));
  linear(ctx.be, x, w.gate, make_view(logits.data(), {t, n_experts}));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(t * k));
  std::vector<float> weights(ids.size());
  moe_route(ctx.be, make_view(logits.data(), {t, n_experts}), w.bias, make_view(ids.data(), {t, k}),
            make_view(weights.data(), {t, k}), rc);

  const expert_groups g = group_by_expert(ids, t, k, n_experts);
  if (routed) *routed = ids;
  const std::vector<index_t>& count = g.count;
  const std::vector<index_t>& offset = g.offset;
  const std::vector<std::int32_t>& rows = g.rows;
  const std::vector<std::int32_t>& token_of = g.token_of;

  std::vector<bf16> expert_out(static_cast<std::size_t>(t * k * d));
  std::vector<bf16> xe;
  for (index_t e = 0; e < n_experts; ++e) {
    const index_t n = count[static_cast<std::size_t>(e)];
    if (n == 0) continue;
    xe.resize(static_cast<std::size_t>(n * d));
    gather_rows(ctx.be, x, make_view(token_of.data() + offset[e], {index_t{1}, n}), make_view(xe.data(), {index_t{1}, n, d}));
    mlp_forward(ctx, w.experts[static_cast<std::size_t>(e)], make_view(static_cast<const bf16*>(xe.data()), {n, d}),
                make_view(expert_out.data() + offset[e] * d, {n, d}));
  }

  host_view<const bf16, 2> shared;
  std::vector<bf16> shared_out;
  if (w.shared_experts) {
    shared_out.resize(static_cast<std::size_t>(t * d));
    mlp_forward(ctx, *w.shared_experts, x, make_view(shared_out.data(), {t, d}));
    shared = make_view(static_cast<const bf16*>(shared_out.data()), {t, d});
  }
  moe_combine(ctx.be, make_view(static_cast<const bf16*>(expert_out.data()), {t * k, d}),
              make_view(static_cast<const std::int32_t*>(rows.data()), {t, k}),
              make_view(static_cast<const float*>(weights.data()), {t, k}), shared, y);
}

}  // namespace model
DSA_NAMESPACE_END
