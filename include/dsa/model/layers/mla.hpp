// Multi-head latent attention of DeepSeek-V3.2 (DESIGN.md §4, reference `MLA.forward`), with
// the indexer's sparse selection:
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
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <numeric>
#include <type_traits>
#include <vector>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/model/kv_cache.hpp"
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
/// (the layout linear() needs for q_nope · W_UK).
struct mla_decode_weights {
  std::once_flag once;
  std::vector<bf16> wkv_b;
  std::vector<bf16> w_uk_t;
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

template <class B>
void build_decode_weights(const layer_context<B>& ctx, const attention_weights& w, mla_decode_weights& dw) {
  std::call_once(dw.once, [&] {
    const auto& c = ctx.cfg;
    const index_t h = c.num_attention_heads, nope = c.qk_nope_head_dim, v = c.v_head_dim, cl = c.kv_lora_rank;
    const index_t rows = h * (nope + v);
    std::vector<bf16> full(static_cast<std::size_t>(rows * cl));
    const auto fv = make_view(full.data(), {rows, cl});
    if (w.kv_b_proj.fp8()) {
      weight_dequant(ctx.be, w.kv_b_proj.q, w.kv_b_proj.scale, fv);
    } else {
      copy_rows(w.kv_b_proj.w, fv);
    }
    std::vector<bf16> t(static_cast<std::size_t>(h * cl * nope));
    for (index_t hh = 0; hh < h; ++hh) {
      for (index_t d = 0; d < nope; ++d) {
        const bf16* src = fv.row(hh * (nope + v) + d);
        for (index_t j = 0; j < cl; ++j) t[static_cast<std::size_t>((hh * cl + j) * nope + d)] = src[j];
      }
    }
    dw.wkv_b = std::move(full);
    dw.w_uk_t = std::move(t);
  });
}

/// out [t, hidden] = MLA(x) for the t tokens at positions [start, start + t); appends their MLA
/// and indexer cache rows (the cache must have room for start + t rows) and writes the indexer's
/// selection to topk [t, min(index_topk, start + t)].
template <class B>
void mla_forward(const layer_context<B>& ctx, const attention_weights& w, mla_decode_weights& dw,
                 host_view<const bf16, 2> x, host_view<const std::int32_t, 1> positions, index_t start,
                 layer_cache& cache, host_view<std::int32_t, 2> topk, host_view<bf16, 2> out) {
  const auto& c = ctx.cfg;
  const index_t t = x.extent(0), end = start + t;
  const index_t h = c.num_attention_heads, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim;
  const index_t dqk = nope + rope, dv = c.v_head_dim, cl = c.kv_lora_rank, row = cl + rope;
  const float eps = c.rms_norm_eps;

  std::vector<bf16> qr(static_cast<std::size_t>(t * c.q_lora_rank));
  std::vector<bf16> q(static_cast<std::size_t>(t * h * dqk));
  const auto qrv = make_view(qr.data(), {t, c.q_lora_rank});
  const auto mla_rows = cache.mla(end);
  {
    phase_scope timing(ctx.times, phase::attention);
    project(ctx, x, w.q_a_proj, qrv);
    rms_norm(ctx.be, qrv, w.q_a_layernorm, qrv, eps);
    project(ctx, host_view<const bf16, 2>(qrv), w.q_b_proj, make_view(q.data(), {t, h * dqk}));
    rope_apply(ctx.be, host_view<bf16, 3>(q.data() + nope, {t, h, rope}, {h * dqk, dqk, 1}), positions, ctx.rope,
               rope_layout::interleaved);

    std::vector<bf16> kv(static_cast<std::size_t>(t * row));
    const auto kvv = make_view(kv.data(), {t, row});
    project(ctx, x, w.kv_a_proj_with_mqa, kvv);
    const auto latent = block(kvv, 0, 0, t, cl);
    rms_norm(ctx.be, latent, w.kv_a_layernorm, latent, eps);
    // The FP8 round trip of the latent, written into the cache rows of these positions.
    std::vector<fp8_e4m3> c8(static_cast<std::size_t>(t * cl));
    std::vector<float> cs(static_cast<std::size_t>(t * (cl / 128)));
    act_quant(ctx.be, latent, make_view(c8.data(), {t, cl}), make_view(cs.data(), {t, cl / 128}),
              act_quant_config{ctx.act_format, 128});
    act_dequant(ctx.be, make_view(static_cast<const fp8_e4m3*>(c8.data()), {t, cl}),
                make_view(static_cast<const float*>(cs.data()), {t, cl / 128}), block(mla_rows, start, 0, t, cl));
    const auto pe = block(mla_rows, start, cl, t, rope);
    copy_rows(host_view<const bf16, 2>(block(kvv, 0, cl, t, rope)), pe);
    rope_apply(ctx.be, host_view<bf16, 3>(pe.data_handle(), {t, 1, rope}, {row, rope, 1}), positions, ctx.rope,
               rope_layout::interleaved);
  }

  indexer_forward(ctx, w.indexer, x, host_view<const bf16, 2>(qrv), positions, start, cache, topk);

  phase_scope timing(ctx.times, phase::attention);
  const host_view<const bf16, 2> cached(mla_rows);
  const host_view<const bf16, 2> k_rope = block(cached, 0, cl, end, rope);
  const host_view<const std::int32_t, 2> sel(topk);
  std::vector<bf16> o(static_cast<std::size_t>(t * h * dv));
  const auto qc = make_view(static_cast<const bf16*>(q.data()), {t, h, dqk});
  if (t > 1) {
    // MHA prefill. Heads are up-projected in groups whose wkv_b rows start on an FP8 block, so
    // that the per-head keys and values of all `end` positions never exist for all heads at once.
    const index_t per_head = nope + dv;
    index_t group = 1;
    if (w.kv_b_proj.fp8()) group = 128 / std::gcd(index_t{128}, per_head);
    group = std::min(group, h);
    std::vector<bf16> kvb;
    for (index_t h0 = 0; h0 < h; h0 += group) {
      const index_t gh = std::min(group, h - h0);
      kvb.resize(static_cast<std::size_t>(end * gh * per_head));
      project(ctx, block(cached, 0, 0, end, cl), w.kv_b_proj.rows(h0 * per_head, gh * per_head),
              make_view(kvb.data(), {end, gh * per_head}));
      const host_view<const bf16, 3> k_nope(kvb.data(), {end, gh, nope}, {gh * per_head, per_head, 1});
      const host_view<const bf16, 3> v(kvb.data() + nope, {end, gh, dv}, {gh * per_head, per_head, 1});
      const host_view<const bf16, 3> qg(qc.data_handle() + h0 * dqk, {t, gh, dqk}, {h * dqk, dqk, 1});
      const host_view<bf16, 3> og(o.data() + h0 * dv, {t, gh, dv}, {h * dv, dv, 1});
      sparse_mha_attention(ctx.be, qg, k_nope, k_rope, v, sel, og,
                           sparse_mha_config{c.softmax_scale(), attention_rounding::bf16});
    }
  } else {
    // Absorbed MQA decode over the latent cache.
    build_decode_weights(ctx, w, dw);
    const index_t lat = cl + rope;
    std::vector<bf16> q_lat(static_cast<std::size_t>(t * h * lat));
    for_each_head(ctx.be, h, [&](index_t hh) {
      linear(ctx.be, host_view<const bf16, 2>(qc.data_handle() + hh * dqk, {t, nope}, {h * dqk, 1}),
             make_view(static_cast<const bf16*>(dw.w_uk_t.data()) + hh * cl * nope, {cl, nope}),
             host_view<bf16, 2>(q_lat.data() + hh * lat, {t, cl}, {h * lat, 1}));
      copy_rows(host_view<const bf16, 2>(qc.data_handle() + hh * dqk + nope, {t, rope}, {h * dqk, 1}),
                host_view<bf16, 2>(q_lat.data() + hh * lat + cl, {t, rope}, {h * lat, 1}));
    });
    // Every head reads the same latent row: stride 0 over heads.
    const host_view<const bf16, 3> latent(cached.data_handle(), {end, h, cl}, {row, 0, 1});
    std::vector<bf16> o_lat(static_cast<std::size_t>(t * h * cl));
    sparse_mha_attention(ctx.be, make_view(static_cast<const bf16*>(q_lat.data()), {t, h, lat}), latent, k_rope, latent,
                         sel, make_view(o_lat.data(), {t, h, cl}),
                         sparse_mha_config{c.softmax_scale(), attention_rounding::bf16_split});
    for_each_head(ctx.be, h, [&](index_t hh) {
      linear(ctx.be, host_view<const bf16, 2>(o_lat.data() + hh * cl, {t, cl}, {h * cl, 1}),
             make_view(static_cast<const bf16*>(dw.wkv_b.data()) + (hh * (nope + dv) + nope) * cl, {dv, cl}),
             host_view<bf16, 2>(o.data() + hh * dv, {t, dv}, {h * dv, 1}));
    });
  }
  project(ctx, make_view(static_cast<const bf16*>(o.data()), {t, h * dv}), w.o_proj, out);
}

}  // namespace model
DSA_NAMESPACE_END
