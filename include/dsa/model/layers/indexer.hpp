// The lightning indexer of DeepSeek-V3.2 (docs/design.md "Indexer", reference `Indexer.forward`),
// for the rows of one or several sequences (batch_segment):
//   q = wq_b(qr) viewed [t, H, 128], RoPE on its FIRST 64 dims, NON-interleaved (pairs (j, j+32));
//   k = LayerNorm(wk(x)), RoPE likewise; both Hadamard-rotated (n = 128, scale 128^-0.5) [bf16];
//   q and k act-quantized 1 x 128; the key codes and scale go to the 132-byte cache rows;
//   w = fl(fl(fl(weights_proj(x) in fp32 · H^-0.5) · q_scale) · 128^-0.5);
//   I[t, s] = k_scale[s] · sum_h w[t, h] · ReLU(q[t, h] · k[s]) over s in [0, pos_t];
//   top-k of each row, k = the width of topk, min(index_topk, start + t) (rows with fewer
//   positions are -1 padded, which selects exactly what the reference's k = min(index_topk,
//   positions so far) does once causality is applied).
// Any backend; `Cache` is the layer cache of the backend's sequence type.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/model/forward.hpp"
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

/// Runs the indexer over the rows of `segments` (x [T, hidden] is the attention input, the
/// attn_norm output; qr [T, q_lora_rank] the q_norm output; positions [T] each row's position):
/// appends every segment's keys to its cache, then per segment scores its rows over its cache
/// and writes each row's selected positions, ascending and -1 padded, to its row of topk [T, *],
/// columns [0, min(index_topk, segment end)) (detail::selection_width: the same positions
/// as index_topk would select).
template <class B, class Cache>
void indexer_forward(const layer_context<B>& ctx, const basic_indexer_weights<typename B::memory_space>& w,
                     in_view<B, bf16, 2> x, in_view<B, bf16, 2> qr, in_view<B, std::int32_t, 1> positions,
                     std::span<const batch_segment<Cache>> segments, out_view<B, std::int32_t, 2> topk) {
  using memory = layer_memory<B>;
  const auto& c = ctx.cfg;
  const index_t t = x.extent(0), heads = c.index_n_heads, dim = c.index_head_dim, rope = c.qk_rope_head_dim;
  const float hadamard_scale = static_cast<float>(std::pow(static_cast<double>(dim), -0.5));
  const index_t groups = dim / 128;
  auto q8 = make_buffer<fp8_e4m3>(ctx, t * heads * dim);
  auto qs = make_buffer<float>(ctx, t * heads * groups);
  auto hw = make_buffer<float>(ctx, t * heads);
  const auto hwv = hw.view({t, heads});
  {
    layer_timer<B> timing(ctx, phase::indexer);
    // Queries [t * H, 128] and the key [t, 128], bf16.
    auto q = make_buffer<bf16>(ctx, t * heads * dim);
    const auto qv = q.view({t, heads * dim});
    project(ctx, qr, w.wq_b, qv);
    rope_apply(ctx.be, out_view<B, bf16, 3>(q.data(), {t, heads, rope}, {heads * dim, dim, 1}), positions, ctx.rope,
               rope_layout::half);
    auto k = make_buffer<bf16>(ctx, t * dim);
    const auto kv = k.view({t, dim});
    project(ctx, x, w.wk, kv);
    layer_norm(ctx.be, in_view<B, bf16, 2>(kv), w.k_norm_weight, w.k_norm_bias, kv, norm_default_eps);  // 1e-6
    rope_apply(ctx.be, out_view<B, bf16, 3>(k.data(), {t, 1, rope}, {dim, dim, 1}), positions, ctx.rope,
               rope_layout::half);
    const auto q_rows = q.view({t * heads, dim});
    hadamard_transform(ctx.be, in_view<B, bf16, 2>(q_rows), q_rows, hadamard_scale);
    hadamard_transform(ctx.be, in_view<B, bf16, 2>(kv), kv, hadamard_scale);

    // FP8 codes and 1 x 128 scales; the keys go straight into the cache rows of their positions.
    auto k8 = make_buffer<fp8_e4m3>(ctx, t * dim);
    auto ks = make_buffer<float>(ctx, t * groups);
    const act_quant_config qc{ctx.act_format, 128};
    act_quant(ctx.be, q_rows, q8.view({t * heads, dim}), qs.view({t * heads, groups}), qc);
    act_quant(ctx.be, kv, k8.view({t, dim}), ks.view({t, groups}), qc);
    for (const batch_segment<Cache>& seg : segments) {
      const auto keys = seg.cache->index_keys(seg.end());
      indexer_cache_pack(ctx.be, in_view<B, fp8_e4m3, 2>(k8.data() + seg.row * dim, {seg.t, dim}),
                         in_view<B, float, 1>(ks.data() + seg.row * groups, {seg.t}),
                         block(keys, seg.start, 0, seg.t, keys.extent(1)));
    }

    // Head weights, the q scale folded in.
    linear(ctx.be, x, w.weights_proj, hwv);
    const float head_scale = static_cast<float>(std::pow(static_cast<double>(heads), -0.5));
    lightning_indexer_weights(ctx.be, in_view<B, float, 2>(hwv), std::as_const(qs).view({t, heads}), hwv, head_scale,
                              hadamard_scale);
  }
  for (std::size_t s = 0; s < segments.size(); ++s) {
    const batch_segment<Cache>& seg = segments[s];
    const index_t end = seg.end();
    // Each token's causal range [0, position + 1), and its scores over the whole cache: one block
    // of `end` slots (the cache is contiguous).
    std::vector<std::int32_t> host_ranges(static_cast<std::size_t>(2 * seg.t));
    for (index_t i = 0; i < seg.t; ++i) {
      host_ranges[static_cast<std::size_t>(2 * i + 1)] = static_cast<std::int32_t>(seg.start + i + 1);
    }
    const auto ranges = memory::upload_async(ctx.be, std::span<const std::int32_t>(host_ranges));
    const auto rv = ranges.view({seg.t, index_t{2}});
    auto scores = make_buffer<float>(ctx, seg.t * end);
    {
      layer_timer<B> timing(ctx, phase::indexer);
      const std::vector<std::int32_t> host_table(static_cast<std::size_t>(seg.t), 0);
      const auto table = memory::upload_async(ctx.be, std::span<const std::int32_t>(host_table));
      const auto keys = seg.cache->index_keys(end);
      lightning_indexer_scores_paged(
          ctx.be, in_view<B, fp8_e4m3, 3>(q8.data() + seg.row * heads * dim, {seg.t, heads, dim}),
          in_view<B, float, 2>(hw.data() + seg.row * heads, {seg.t, heads}), in_view<B, std::uint8_t, 2>(keys),
          table.view({seg.t, index_t{1}}), end, rv, scores.view({seg.t, end}));
    }
    if (ctx.watch) ctx.watch->watch_scores(s, std::as_const(scores).view({seg.t, end}), seg.start);
    layer_timer<B> timing(ctx, phase::topk);
    const index_t k_seg = detail::selection_width(c.index_topk, end);
    const auto selection = out_view<B, std::int32_t, 2>(topk.data_handle() + seg.row * topk.stride(0), {seg.t, k_seg},
                                                        {topk.stride(0), 1});
    if constexpr (memory::op_workspaces) {
      if (memory::fast_kernels(ctx.be)) {
        // A decode row of a long context is split over the whole GPU (topk_indices' workspace):
        // with the fast kernels only until a GPU has run the split (docs/decisions.md, "The
        // exact path is the default until a GPU has run the fast one").
        const index_t bytes = topk_indices_workspace_size(seg.t, end);
        auto ws = make_buffer<std::byte>(ctx, bytes);
        topk_indices(ctx.be, std::as_const(scores).view({seg.t, end}), rv, k_seg, selection,
                     bytes > 0 ? ws.view({bytes}) : out_view<B, std::byte, 1>{});
        continue;
      }
    }
    topk_indices(ctx.be, std::as_const(scores).view({seg.t, end}), rv, k_seg, selection);
  }
}

}  // namespace model
DSA_NAMESPACE_END
