// Multi-head latent attention of DeepSeek-V3.2 (docs/design.md "MLA", reference `MLA.forward`), with
// the indexer's sparse selection, for the rows of one or several sequences (batch_segment):
//   qr = q_norm(wq_a x) [bf16];  q = wq_b qr viewed [t, H, nope + rope], interleaved RoPE on the
//   rope part;  kv = wkv_a x: c = kv_norm(first kv_lora_rank), k_pe = interleaved RoPE(last rope);
//   c round-tripped through e4m3 (1 x 128 groups) and cached with k_pe;  the indexer selects
//   top-k positions per token;  then
//   - prefill (more than one token, MHA): per head k_nope, v = wkv_b c over the cached positions,
//     scores = bf16(q · [k_nope | k_pe]) scaled in bf16, softmax over the selected positions
//     (bf16 probabilities), times v [bf16];
//   - decode (one token, absorbed MQA): q_lat = q_nope · W_UK (wkv_b dequantized to bf16),
//     scores = bf16(bf16(q_lat · c) + bf16(q_pe · k_pe)) scaled in bf16, out = P · c [bf16],
//     up-projected by W_UV [bf16];
//   and wo. Both modes run sparse_mha_attention over the selected positions only: O(t · k), never a
//   masked O(t · n).
// Any backend; `Cache` is the layer cache of the backend's sequence type.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <numeric>
#include <span>
#include <type_traits>
#include <vector>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/model/layers/context.hpp"
#include "dsa/model/layers/indexer.hpp"
#include "dsa/model/weights.hpp"
#include "dsa/ops/fp8_quant.hpp"
#include "dsa/ops/linear.hpp"
#include "dsa/ops/norm.hpp"
#include "dsa/ops/rope.hpp"
#include "dsa/ops/sparse_mha_attention.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

/// The absorbed-decode weights of one layer, derived from wkv_b on first use (as the reference's
/// `dequant_wkv_b`): wkv_b in bf16 [H * (nope + v), C] and W_UK transposed per head [H, C, nope]
/// (the layout linear() needs for q_nope · W_UK), in the backend's memory.
template <class B>
struct mla_decode_weights {
  std::once_flag once;
  layer_buffer<B, bf16> wkv_b;
  layer_buffer<B, bf16> w_uk_t;
};

/// f(head) for every head: on the CPU backend the heads are split over its threads in one
/// parallel_for (each head's small per-head linear then runs inline on its thread: one pool
/// dispatch instead of two per head and projection); results do not depend on the split.
template <class B, class F>
void for_each_head(const B& be, index_t heads, F&& f) {
  if constexpr (std::is_same_v<B, cpu_backend>) {
    cpu_detail::parallel_for(be, heads, 1, [&](index_t h0, index_t h1) {
      for (index_t hh = h0; hh < h1; ++hh) f(hh);
    });
  } else {
    for (index_t hh = 0; hh < heads; ++hh) f(hh);
  }
}

/// Dequantizes wkv_b (weight_dequant, the same bits on every backend) and transposes W_UK per head,
/// once. The transpose is a permutation (no arithmetic), done on a host copy.
template <class B>
void build_decode_weights(const layer_context<B>& ctx, const basic_attention_weights<typename B::memory_space>& w,
                          mla_decode_weights<B>& dw) {
  std::call_once(dw.once, [&] {
    using memory = layer_memory<B>;
    const auto& c = ctx.cfg;
    const index_t h = c.num_attention_heads, nope = c.qk_nope_head_dim, v = c.v_head_dim, cl = c.kv_lora_rank;
    const index_t rows = h * (nope + v);
    auto full = make_buffer<bf16>(ctx, rows * cl);
    const auto fv = full.view({rows, cl});
    if (w.kv_b_proj.fp8()) {
      weight_dequant(ctx.be, w.kv_b_proj.q, w.kv_b_proj.scale, fv);
    } else {
      memory::copy_rows(ctx.be, w.kv_b_proj.w, fv);
    }
    const std::vector<bf16> host = memory::to_host(ctx.be, std::as_const(full).view({rows * cl}));
    std::vector<bf16> t(static_cast<std::size_t>(h * cl * nope));
    for (index_t hh = 0; hh < h; ++hh) {
      for (index_t d = 0; d < nope; ++d) {
        const bf16* src = host.data() + (hh * (nope + v) + d) * cl;
        for (index_t j = 0; j < cl; ++j) t[static_cast<std::size_t>((hh * cl + j) * nope + d)] = src[j];
      }
    }
    dw.w_uk_t = memory::upload(ctx.be, std::span<const bf16>(t));
    dw.wkv_b = std::move(full);
  });
}

/// out [T, hidden] = MLA(x) for the rows of `segments` (positions [T]: each row's position):
/// appends every segment's MLA and indexer cache rows (each cache must have room for its
/// segment's end) and writes each row's selection to topk [T, *] (indexer_forward). A segment
/// of more than one token runs the MHA prefill, one of a single token the absorbed MQA decode;
/// the decode segments' per-head projections run together, over all their rows.
template <class B, class Cache>
void mla_forward(const layer_context<B>& ctx, const basic_attention_weights<typename B::memory_space>& w,
                 mla_decode_weights<B>& dw, in_view<B, bf16, 2> x, in_view<B, std::int32_t, 1> positions,
                 std::span<const batch_segment<Cache>> segments, out_view<B, std::int32_t, 2> topk,
                 out_view<B, bf16, 2> out) {
  using memory = layer_memory<B>;
  const auto& c = ctx.cfg;
  const index_t t = x.extent(0);
  const index_t h = c.num_attention_heads, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim;
  const index_t dqk = nope + rope, dv = c.v_head_dim, cl = c.kv_lora_rank, row = cl + rope;
  const float eps = c.rms_norm_eps;

  auto qr = make_buffer<bf16>(ctx, t * c.q_lora_rank);
  auto q = make_buffer<bf16>(ctx, t * h * dqk);
  const auto qrv = qr.view({t, c.q_lora_rank});
  {
    layer_timer<B> timing(ctx, phase::attention);
    project(ctx, x, w.q_a_proj, qrv);
    rms_norm(ctx.be, in_view<B, bf16, 2>(qrv), w.q_a_layernorm, qrv, eps);
    project(ctx, in_view<B, bf16, 2>(qrv), w.q_b_proj, q.view({t, h * dqk}));
    rope_apply(ctx.be, out_view<B, bf16, 3>(q.data() + nope, {t, h, rope}, {h * dqk, dqk, 1}), positions, ctx.rope,
               rope_layout::interleaved);

    auto kv = make_buffer<bf16>(ctx, t * row);
    const auto kvv = kv.view({t, row});
    project(ctx, x, w.kv_a_proj_with_mqa, kvv);
    const auto latent = block(kvv, 0, 0, t, cl);
    rms_norm(ctx.be, in_view<B, bf16, 2>(latent), w.kv_a_layernorm, latent, eps);
    // The FP8 round trip of the latent, written into the cache rows of each segment's positions
    // with k_pe after RoPE.
    auto c8 = make_buffer<fp8_e4m3>(ctx, t * cl);
    auto cs = make_buffer<float>(ctx, t * (cl / 128));
    act_quant(ctx.be, latent, c8.view({t, cl}), cs.view({t, cl / 128}), act_quant_config{ctx.act_format, 128});
    for (const batch_segment<Cache>& seg : segments) {
      const auto mla_rows = seg.cache->mla(seg.end());
      act_dequant(ctx.be, in_view<B, fp8_e4m3, 2>(c8.data() + seg.row * cl, {seg.t, cl}),
                  in_view<B, float, 2>(cs.data() + seg.row * (cl / 128), {seg.t, cl / 128}),
                  block(mla_rows, seg.start, 0, seg.t, cl));
      const auto pe = block(mla_rows, seg.start, cl, seg.t, rope);
      memory::copy_rows(ctx.be, in_view<B, bf16, 2>(block(kvv, seg.row, cl, seg.t, rope)), pe);
      rope_apply(ctx.be, out_view<B, bf16, 3>(pe.data_handle(), {seg.t, 1, rope}, {row, rope, 1}),
                 in_view<B, std::int32_t, 1>(positions.data_handle() + seg.row, {seg.t}), ctx.rope,
                 rope_layout::interleaved);
    }
  }

  indexer_forward(ctx, w.indexer, x, in_view<B, bf16, 2>(qrv), positions, segments, topk);

  layer_timer<B> timing(ctx, phase::attention);
  auto o = make_buffer<bf16>(ctx, t * h * dv);
  const auto qc = std::as_const(q).view({t, h, dqk});
  // The selection of a segment's rows: its own width min(index_topk, end) of topk's columns.
  const auto selection = [&](const batch_segment<Cache>& seg) {
    return in_view<B, std::int32_t, 2>(topk.data_handle() + seg.row * topk.stride(0),
                                       {seg.t, detail::selection_width(c.index_topk, seg.end())},
                                       {topk.stride(0), 1});
  };
  std::vector<const batch_segment<Cache>*> decode;
  for (const batch_segment<Cache>& seg : segments) {
    if (seg.t == 1) {
      decode.push_back(&seg);
      continue;
    }
    // MHA prefill. Heads are up-projected in groups whose wkv_b rows start on an FP8 block, so
    // that the per-head keys and values of all `end` positions never exist for all heads at once.
    const index_t end = seg.end();
    const in_view<B, bf16, 2> cached(seg.cache->mla(end));
    const in_view<B, bf16, 2> k_rope = block(cached, 0, cl, end, rope);
    const auto sel = selection(seg);
    const index_t per_head = nope + dv;
    index_t group = 1;
    if (w.kv_b_proj.fp8()) group = 128 / std::gcd(index_t{128}, per_head);
    group = std::min(group, h);
    auto kvb = make_buffer<bf16>(ctx, end * group * per_head);
    for (index_t h0 = 0; h0 < h; h0 += group) {
      const index_t gh = std::min(group, h - h0);
      project(ctx, block(cached, 0, 0, end, cl), w.kv_b_proj.rows(h0 * per_head, gh * per_head),
              kvb.view({end, gh * per_head}));
      const in_view<B, bf16, 3> k_nope(kvb.data(), {end, gh, nope}, {gh * per_head, per_head, 1});
      const in_view<B, bf16, 3> v(kvb.data() + nope, {end, gh, dv}, {gh * per_head, per_head, 1});
      const in_view<B, bf16, 3> qg(qc.data_handle() + seg.row * h * dqk + h0 * dqk, {seg.t, gh, dqk},
                                   {h * dqk, dqk, 1});
      const out_view<B, bf16, 3> og(o.data() + seg.row * h * dv + h0 * dv, {seg.t, gh, dv}, {h * dv, dv, 1});
      sparse_mha_attention(ctx.be, qg, k_nope, k_rope, v, sel, og,
                           sparse_mha_config{c.softmax_scale(), attention_rounding::bf16});
    }
  }
  if (!decode.empty()) {
    // Absorbed MQA decode over each segment's latent cache. The per-head projections run over
    // the rows of every decode segment at once (each absorbed weight read once per call); the
    // attention runs per segment.
    build_decode_weights(ctx, w, dw);
    const index_t n = static_cast<index_t>(decode.size()), lat = cl + rope;
    auto qd = make_buffer<bf16>(ctx, n * h * dqk);
    for (index_t i = 0; i < n; ++i) {
      memory::copy_rows(ctx.be, in_view<B, bf16, 2>(qc.data_handle() + decode[static_cast<std::size_t>(i)]->row * h * dqk,
                                                    {1, h * dqk}),
                        out_view<B, bf16, 2>(qd.data() + i * h * dqk, {1, h * dqk}));
    }
    auto q_lat = make_buffer<bf16>(ctx, n * h * lat);
    const bf16* qd_data = qd.data();
    const bf16* w_uk_t = dw.w_uk_t.data();
    for_each_head(ctx.be, h, [&](index_t hh) {
      linear(ctx.be, in_view<B, bf16, 2>(qd_data + hh * dqk, {n, nope}, {h * dqk, 1}),
             in_view<B, bf16, 2>(w_uk_t + hh * cl * nope, {cl, nope}),
             out_view<B, bf16, 2>(q_lat.data() + hh * lat, {n, cl}, {h * lat, 1}));
      memory::copy_rows(ctx.be, in_view<B, bf16, 2>(qd_data + hh * dqk + nope, {n, rope}, {h * dqk, 1}),
                        out_view<B, bf16, 2>(q_lat.data() + hh * lat + cl, {n, rope}, {h * lat, 1}));
    });
    auto o_lat = make_buffer<bf16>(ctx, n * h * cl);
    for (index_t i = 0; i < n; ++i) {
      const batch_segment<Cache>& seg = *decode[static_cast<std::size_t>(i)];
      const index_t end = seg.end();
      const in_view<B, bf16, 2> cached(seg.cache->mla(end));
      // Every head reads the same latent row: stride 0 over heads.
      const in_view<B, bf16, 3> latent(cached.data_handle(), {end, h, cl}, {row, 0, 1});
      sparse_mha_attention(ctx.be, in_view<B, bf16, 3>(q_lat.data() + i * h * lat, {1, h, lat}), latent,
                           block(cached, 0, cl, end, rope), latent, selection(seg),
                           out_view<B, bf16, 3>(o_lat.data() + i * h * cl, {1, h, cl}),
                           sparse_mha_config{c.softmax_scale(), attention_rounding::bf16_split});
    }
    auto od = make_buffer<bf16>(ctx, n * h * dv);
    const bf16* wkv_b = dw.wkv_b.data();
    for_each_head(ctx.be, h, [&](index_t hh) {
      linear(ctx.be, in_view<B, bf16, 2>(o_lat.data() + hh * cl, {n, cl}, {h * cl, 1}),
             in_view<B, bf16, 2>(wkv_b + (hh * (nope + dv) + nope) * cl, {dv, cl}),
             out_view<B, bf16, 2>(od.data() + hh * dv, {n, dv}, {h * dv, 1}));
    });
    for (index_t i = 0; i < n; ++i) {
      memory::copy_rows(ctx.be, in_view<B, bf16, 2>(od.data() + i * h * dv, {1, h * dv}),
                        out_view<B, bf16, 2>(o.data() + decode[static_cast<std::size_t>(i)]->row * h * dv, {1, h * dv}));
    }
  }
  project(ctx, std::as_const(o).view({t, h * dv}), w.o_proj, out);
}

}  // namespace model
DSA_NAMESPACE_END
