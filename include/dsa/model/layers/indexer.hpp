// The lightning indexer of DeepSeek-V3.2 (DESIGN.md §4, reference `Indexer.forward`):
//   q = wq_b(qr) viewed [t, H, 128], RoPE on its FIRST 64 dims, NON-interleaved (pairs (j, j+32));
//   k = LayerNorm(wk(x)), RoPE likewise; both Hadamard-rotated (n = 128, scale 128^-0.5) [bf16];
//   q and k act-quantized 1 x 128; the key codes and scale go to the 132-byte cache rows;
//   w = fl(fl(fl(weights_proj(x) in fp32 · H^-0.5) · q_scale) · 128^-0.5);
//   I[t, s] = k_scale[s] · sum_h w[t, h] · ReLU(q[t, h] · k[s]) over s in [0, pos_t];
//   top-k of each row, k = the width of topk, min(index_topk, start + t) (rows with fewer
//   positions are -1 padded, which selects exactly what the reference's k = min(index_topk,
//   positions so far) does once causality is applied).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/model/kv_cache.hpp"
#include "dsa/model/layers/context.hpp"
#include "dsa/model/weights.hpp"
#include "dsa/ops/fp8_quant.hpp"
#include "dsa/ops/hadamard.hpp"
#include "dsa/ops/indexer_weights.hpp"
#include "dsa/ops/kv_cache.hpp"
#include "dsa/ops/lightning_indexer.hpp"
#include "dsa/ops/linear.hpp"
#include "dsa/ops/norm.hpp"
#include "dsa/ops/rope.hpp"
#include "dsa/ops/topk.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

/// Runs the indexer for the t tokens at positions [start, start + t) of a sequence whose layer
/// cache holds positions [0, start): appends their keys to the cache and writes each token's
/// selected positions, ascending and -1 padded, to topk [t, k]: k = min(index_topk, start + t)
/// (forward_detail::selection_width) selects the same positions as index_topk would.
/// x [t, hidden] is the attention input (attn_norm output), qr [t, q_lora_rank] the q_norm output.
template <class B>
void indexer_forward(const layer_context<B>& ctx, const indexer_weights& w, host_view<const bf16, 2> x,
                     host_view<const bf16, 2> qr, host_view<const std::int32_t, 1> positions, index_t start,
                     layer_cache& cache, host_view<std::int32_t, 2> topk) {
  const auto& c = ctx.cfg;
  const index_t t = x.extent(0), heads = c.index_n_heads, dim = c.index_head_dim, rope = c.qk_rope_head_dim;
  const index_t end = start + t;
  const float hadamard_scale = static_cast<float>(std::pow(static_cast<double>(dim), -0.5));
  std::vector<float> scores;
  std::vector<std::int32_t> ranges(static_cast<std::size_t>(2 * t));
  {
    phase_scope timing(ctx.times, phase::indexer);
    // Queries [t * H, 128] and the key [t, 128], bf16.
    std::vector<bf16> q(static_cast<std::size_t>(t * heads * dim));
    const auto qv = make_view(q.data(), {t, heads * dim});
    project(ctx, qr, w.wq_b, qv);
    rope_apply(ctx.be, host_view<bf16, 3>(q.data(), {t, heads, rope}, {heads * dim, dim, 1}), positions, ctx.rope,
               rope_layout::half);
    std::vector<bf16> k(static_cast<std::size_t>(t * dim));
    const auto kv = make_view(k.data(), {t, dim});
    project(ctx, x, w.wk, kv);
    layer_norm(ctx.be, kv, w.k_norm_weight, w.k_norm_bias, kv, norm_default_eps);  // the reference's LayerNorm: 1e-6
    rope_apply(ctx.be, host_view<bf16, 3>(k.data(), {t, 1, rope}, {dim, dim, 1}), positions, ctx.rope,
               rope_layout::half);
    const auto q_rows = make_view(q.data(), {t * heads, dim});
    hadamard_transform(ctx.be, q_rows, q_rows, hadamard_scale);
    hadamard_transform(ctx.be, kv, kv, hadamard_scale);

    // FP8 codes and 1 x 128 scales; the keys go straight into the cache rows of their positions.
    const index_t groups = dim / 128;
    std::vector<fp8_e4m3> q8(q.size()), k8(k.size());
    std::vector<float> qs(static_cast<std::size_t>(t * heads * groups)), ks(static_cast<std::size_t>(t * groups));
    const act_quant_config qc{ctx.act_format, 128};
    act_quant(ctx.be, q_rows, make_view(q8.data(), {t * heads, dim}), make_view(qs.data(), {t * heads, groups}), qc);
    act_quant(ctx.be, kv, make_view(k8.data(), {t, dim}), make_view(ks.data(), {t, groups}), qc);
    const auto keys = cache.index_keys(end);
    indexer_cache_pack(ctx.be, make_view(static_cast<const fp8_e4m3*>(k8.data()), {t, dim}),
                       make_view(static_cast<const float*>(ks.data()), {t}), block(keys, start, 0, t, keys.extent(1)));

    // Head weights, the q scale folded in.
    std::vector<float> hw(static_cast<std::size_t>(t * heads));
    const auto hwv = make_view(hw.data(), {t, heads});
    linear(ctx.be, x, w.weights_proj, hwv);
    const float head_scale = static_cast<float>(std::pow(static_cast<double>(heads), -0.5));
    lightning_indexer_weights(ctx.be, hwv, make_view(static_cast<const float*>(qs.data()), {t, heads}), hwv, head_scale,
                    hadamard_scale);

    // Causal index scores over the whole cache (one block of `end` slots: the cache is contiguous).
    for (index_t i = 0; i < t; ++i) {
      ranges[static_cast<std::size_t>(2 * i)] = 0;
      ranges[static_cast<std::size_t>(2 * i + 1)] = positions(i) + 1;
    }
    scores.resize(static_cast<std::size_t>(t * end));
    std::vector<std::int32_t> table(static_cast<std::size_t>(t), 0);
    lightning_indexer_scores_paged(ctx.be, make_view(static_cast<const fp8_e4m3*>(q8.data()), {t, heads, dim}), hwv,
                                   host_view<const std::uint8_t, 2>(keys), make_view(table.data(), {t, index_t{1}}),
                                   end, make_view(static_cast<const std::int32_t*>(ranges.data()), {t, index_t{2}}),
                                   make_view(scores.data(), {t, end}));
  }
  if (ctx.watch) ctx.watch->watch_scores(make_view(static_cast<const float*>(scores.data()), {t, end}), start);
  phase_scope timing(ctx.times, phase::topk);
  topk_indices(ctx.be, make_view(static_cast<const float*>(scores.data()), {t, end}),
               make_view(static_cast<const std::int32_t*>(ranges.data()), {t, index_t{2}}), topk.extent(1), topk);
}

}  // namespace model
DSA_NAMESPACE_END
