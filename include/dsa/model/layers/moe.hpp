// The MoE feed-forward of DeepSeek-V3.2 (docs/design.md "MoE routing" and "FFN"): fp32 gate
// logits, noaux_tc routing with the checkpoint's e_score_correction_bias when it has one, each
// routed expert run on the tokens routed to it (gathered, so an expert's work is proportional to
// its tokens), the shared experts on every token, and the fp32 combine in ascending expert id,
// rounded to bf16. Any backend. The (token, slot) assignments are grouped by expert in the layout
// of dsa/numerics/moe_grouping.hpp: on the host (group_by_expert), which on the CUDA backend costs
// a copy of the ids [t, k] to the host per MoE layer; except for a CUDA decode step (at most
// moe_grouped_max_tokens tokens, FP8 experts), which groups by a kernel and runs the experts as
// grouped GEMVs (moe_experts_grouped_on_device, dsa/model/cuda/moe.cuh), so that it never waits for
// the host.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <string>
#include <vector>

#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/model/layers/context.hpp"
#include "dsa/model/layers/mlp.hpp"
#include "dsa/model/weights.hpp"
#include "dsa/numerics/moe_grouping.hpp"
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
    if (!moe_expert_valid(e, n_experts)) {
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

/// The routed experts on the host's grouping: each expert with tokens runs mlp_forward on its
/// gathered rows, writing them to expert_out [t * k, d] (contiguous) in the grouped layout;
/// returns rows [t, k] for the combine (on the backend). `routed` gets the ids, when given.
template <class B>
layer_buffer<B, std::int32_t> moe_experts_grouped_on_host(const layer_context<B>& ctx,
                                                          const basic_moe_weights<typename B::memory_space>& w,
                                                          in_view<B, bf16, 2> x, in_view<B, std::int32_t, 2> ids,
                                                          out_view<B, bf16, 2> expert_out,
                                                          std::vector<std::int32_t>* routed) {
  using memory = layer_memory<B>;
  const index_t t = ids.extent(0), k = ids.extent(1), d = x.extent(1);
  const index_t n_experts = static_cast<index_t>(w.experts.size());
  std::vector<std::int32_t> ids_host = memory::to_host(ctx.be, in_view<B, std::int32_t, 1>(ids.data_handle(), {t * k}));
  const expert_groups g = group_by_expert(ids_host, t, k, n_experts);
  if (routed) *routed = std::move(ids_host);
  auto rows = memory::upload(ctx.be, std::span<const std::int32_t>(g.rows));
  const auto token_of = memory::upload(ctx.be, std::span<const std::int32_t>(g.token_of));
  const index_t most = n_experts > 0 ? *std::max_element(g.count.begin(), g.count.end()) : 0;
  auto xe = make_buffer<bf16>(ctx, most * d);
  for (index_t e = 0; e < n_experts; ++e) {
    const index_t n = g.count[static_cast<std::size_t>(e)];
    if (n == 0) continue;
    const in_view<B, std::int32_t, 2> sel(token_of.data() + g.offset[static_cast<std::size_t>(e)], {1, n});
    gather_rows(ctx.be, x, sel, xe.view({1, n, d}));
    mlp_forward(ctx, w.experts[static_cast<std::size_t>(e)], std::as_const(xe).view({n, d}),
                out_view<B, bf16, 2>(expert_out.data_handle() + g.offset[static_cast<std::size_t>(e)] * d, {n, d}));
  }
  return rows;
}

/// The most tokens of a call whose routed experts run as grouped decode GEMVs on a device backend
/// (fp8_linear's GEMV takes up to 8 rows per expert; more tokens are a prefill, worth a GEMM per
/// expert and the host's grouping).
inline constexpr index_t moe_grouped_max_tokens = 8;

/// The same on a device backend without the host: the grouping by a kernel and the experts as
/// grouped decode GEMVs (one launch per projection for all experts), every row with the bits
/// fp8_linear's exact decode GEMV gives it. For t <= moe_grouped_max_tokens and FP8 experts
/// (w.expert_table). Defined in dsa/model/cuda/moe.cuh (nvcc).
template <class B>
layer_buffer<B, std::int32_t> moe_experts_grouped_on_device(const layer_context<B>& ctx,
                                                            const basic_moe_weights<typename B::memory_space>& w,
                                                            in_view<B, bf16, 2> x, in_view<B, std::int32_t, 2> ids,
                                                            out_view<B, bf16, 2> expert_out);

/// y [t, hidden] = MoE(x) for x [t, hidden] bf16; the routed expert ids [t, top_k] also go to
/// `routed` when it is given (the observer's layer_trace::experts).
template <class B>
void moe_forward(const layer_context<B>& ctx, const basic_moe_weights<typename B::memory_space>& w,
                 in_view<B, bf16, 2> x, out_view<B, bf16, 2> y, std::vector<std::int32_t>* routed = nullptr) {
  using memory = layer_memory<B>;
  const index_t t = x.extent(0), d = x.extent(1);
  const index_t n_experts = w.gate.extent(0);
  const moe_routing_config rc = moe_routing_config_of(ctx.cfg);
  const index_t k = rc.top_k;

  auto logits = make_buffer<float>(ctx, t * n_experts);
  linear(ctx.be, x, w.gate, logits.view({t, n_experts}));
  auto ids = make_buffer<std::int32_t>(ctx, t * k);
  auto weights = make_buffer<float>(ctx, t * k);
  moe_route(ctx.be, std::as_const(logits).view({t, n_experts}), w.bias, ids.view({t, k}), weights.view({t, k}), rc);

  auto expert_out = make_buffer<bf16>(ctx, t * k * d);
  const auto ids_view = std::as_const(ids).view({t, k});
  const auto grouped_out = expert_out.view({t * k, d});
  layer_buffer<B, std::int32_t> rows;
  bool grouped = false;
  if constexpr (memory::device_grouping) {
    grouped = t <= moe_grouped_max_tokens && !w.expert_table.is_absent();
    if (grouped) {
      rows = moe_experts_grouped_on_device(ctx, w, x, ids_view, grouped_out);
      if (routed) *routed = memory::to_host(ctx.be, in_view<B, std::int32_t, 1>(ids_view.data_handle(), {t * k}));
    }
  }
  if (!grouped) rows = moe_experts_grouped_on_host(ctx, w, x, ids_view, grouped_out, routed);

  in_view<B, bf16, 2> shared;
  layer_buffer<B, bf16> shared_out;
  if (w.shared_experts) {
    shared_out = make_buffer<bf16>(ctx, t * d);
    mlp_forward(ctx, *w.shared_experts, x, shared_out.view({t, d}));
    shared = std::as_const(shared_out).view({t, d});
  }
  moe_combine(ctx.be, std::as_const(expert_out).view({t * k, d}), std::as_const(rows).view({t, k}),
              std::as_const(weights).view({t, k}), shared, y);
}

}  // namespace model
DSA_NAMESPACE_END
