// The layers of the reference DeepSeek-V3.2 forward pass on the CUDA backend: the device twins of
// dsa/model/layers/{context,indexer,mla,mlp,moe}.hpp. Each function runs exactly the op sequence
// and rounding points of its host twin (read them side by side: same ops, same arguments, same
// order), with device_buffer activations in place of std::vector and device views of the
// device_weights / device_sequence. Every arithmetic step is a public dsa op on the CUDA backend;
// the only code of their own is data movement (cudaMemcpy2DAsync row copies, the one-time
// transpose of W_UK) and the host-side grouping of MoE assignments by expert.
//
// Activations are stream-ordered device_buffers (cudaMallocAsync from the device's pool) that live
// for one layer call: allocation is allowed in the model (never inside an op), and the pool makes
// it cheap. Everything is enqueued on ctx.be.stream; the host waits only where it needs a device
// result (the MoE routing, the derived decode weights, the observer, the logits) and at the end of
// each phase_scope, so that phase_times() measures device time.
//
// nvcc only (the ops' CUDA implementations are .cuh). Part of the dsa::model and dsa::cuda targets.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/memory.hpp"
#include "dsa/model/cuda/kv_cache.hpp"
#include "dsa/model/cuda/nonfinite.cuh"
#include "dsa/model/cuda/weights.hpp"
#include "dsa/model/layers/context.hpp"
#include "dsa/model/layers/moe.hpp"
#include "dsa/ops/activation.hpp"
#include "dsa/ops/fp8_quant.hpp"
#include "dsa/ops/hadamard.hpp"
#include "dsa/ops/indexer_weights.hpp"
#include "dsa/ops/kv_cache.hpp"
#include "dsa/ops/lightning_indexer.hpp"
#include "dsa/ops/linear.hpp"
#include "dsa/ops/moe_combine.hpp"
#include "dsa/ops/moe_routing.hpp"
#include "dsa/ops/norm.hpp"
#include "dsa/ops/rope.hpp"
#include "dsa/ops/sparse_mha_attention.hpp"
#include "dsa/ops/topk.hpp"

// The CUDA implementations of every op the layers call.
#include "dsa/cuda/activation.cuh"
#include "dsa/cuda/fp8_quant.cuh"
#include "dsa/cuda/hadamard.cuh"
#include "dsa/cuda/indexer_weights.cuh"
#include "dsa/cuda/kv_cache.cuh"
#include "dsa/cuda/lightning_indexer.cuh"
#include "dsa/cuda/linear.cuh"
#include "dsa/cuda/moe_combine.cuh"
#include "dsa/cuda/moe_routing.cuh"
#include "dsa/cuda/norm.cuh"
#include "dsa/cuda/rope.cuh"
#include "dsa/cuda/sparse_mha_attention.cuh"
#include "dsa/cuda/topk.cuh"

DSA_NAMESPACE_BEGIN
namespace model {

using device_layer_context = layer_context<cuda_backend>;

/// phase_scope for device work: waits for the stream before the scope's time is taken, so the
/// phase is charged with the device time of what it enqueued. A failing wait is not thrown from
/// the destructor: the error of a faulting kernel is sticky and the next checked call (at the
/// latest the copy of the logits) reports it.
class device_phase_scope {
 public:
  device_phase_scope(phase_times* t, phase p, cudaStream_t s) : s_(s), scope_(t, p) {}
  ~device_phase_scope() { (void)cudaStreamSynchronize(s_); }  // scope_ is destroyed (timed) after this
  device_phase_scope(const device_phase_scope&) = delete;
  device_phase_scope& operator=(const device_phase_scope&) = delete;

 private:
  cudaStream_t s_;
  phase_scope scope_;
};

/// A stream-ordered activation buffer of n elements.
template <class T>
device_buffer<T> stream_buffer(const device_layer_context& ctx, index_t n) {
  return device_buffer<T>(n, ctx.be.stream);
}

/// A [rows, cols] sub-view of a row-major 2-D device view.
template <class T>
device_view<T, 2> block(device_view<T, 2> v, index_t row0, index_t col0, index_t rows, index_t cols) {
  return device_view<T, 2>(v.data_handle() + row0 * v.stride(0) + col0, {rows, cols}, {v.stride(0), 1});
}

/// dst = src for [rows, cols] device views with unit-stride rows (copy_rows of the host layers),
/// one cudaMemcpy2DAsync on the stream.
template <class T>
void copy_rows(const device_layer_context& ctx, device_view<const T, 2> src, device_view<T, 2> dst) {
  check(src.extents() == dst.extents(), "model::copy_rows", "src.shape", shape_string(src),
        shape_string(dst) + " (dst.shape)");
  if (src.empty()) return;
  DSA_CUDA_CHECK(cudaMemcpy2DAsync(dst.data_handle(), static_cast<std::size_t>(dst.stride(0)) * sizeof(T),
                                   src.data_handle(), static_cast<std::size_t>(src.stride(0)) * sizeof(T),
                                   static_cast<std::size_t>(src.extent(1)) * sizeof(T),
                                   static_cast<std::size_t>(src.extent(0)), cudaMemcpyDeviceToDevice, ctx.be.stream));
}

/// A host array uploaded into a new stream-ordered buffer (small index arrays: positions, ranges).
template <class T>
device_buffer<T> upload(const device_layer_context& ctx, const std::vector<T>& host) {
  device_buffer<T> d(static_cast<index_t>(host.size()), ctx.be.stream);
  copy_to_device(d, std::span<const T>(host), ctx.be.stream);
  return d;
}

/// y = x · W^T through a device checkpoint weight (project() of the host layers).
template <class XT, class O>
void project(const device_layer_context& ctx, device_view<XT, 2> x, const device_linear_weight& w,
             device_view<O, 2> y) {
  if (w.fp8()) {
    fp8_linear(ctx.be, x, w.q, w.scale, y, ctx.act_format);
  } else {
    linear(ctx.be, x, w.w, y);
  }
}

/// y [t, hidden] = down(swiglu(gate(x), up(x))) (mlp_forward).
inline void mlp_forward(const device_layer_context& ctx, const device_mlp_weights& w, device_view<const bf16, 2> x,
                        device_view<bf16, 2> y) {
  const index_t t = x.extent(0), inter = w.gate_proj.out_features();
  auto g = stream_buffer<bf16>(ctx, t * inter), u = stream_buffer<bf16>(ctx, t * inter);
  const auto gv = g.view({t, inter});
  const auto uv = u.view({t, inter});
  project(ctx, x, w.gate_proj, gv);
  project(ctx, x, w.up_proj, uv);
  swiglu(ctx.be, device_view<const bf16, 2>(gv), device_view<const bf16, 2>(uv), gv);
  project(ctx, device_view<const bf16, 2>(gv), w.down_proj, y);
}

/// y [t, hidden] = MoE(x) (moe_forward). The routing is computed on the device; the grouping of
/// (token, slot) assignments by expert runs on the host (group_by_expert, shared with the host
/// layer), which costs one device-to-host copy of ids [t, k] and a stream synchronisation per MoE
/// layer: acceptable for a reference forward pass, and it lets every expert run on exactly its
/// tokens with the same gather_rows / mlp_forward / moe_combine sequence as on the host.
inline void moe_forward(const device_layer_context& ctx, const device_moe_weights& w, device_view<const bf16, 2> x,
                        device_view<bf16, 2> y, std::vector<std::int32_t>* routed = nullptr) {
  const index_t t = x.extent(0), d = x.extent(1);
  const index_t n_experts = w.gate.extent(0);
  const moe_routing_config rc = moe_routing_config_of(ctx.cfg);
  const index_t k = rc.top_k;

  auto logits = stream_buffer<float>(ctx, t * n_experts);
  linear(ctx.be, x, w.gate, logits.view({t, n_experts}));
  device_buffer<std::int32_t> ids(t * k, ctx.be.stream);
  auto weights = stream_buffer<float>(ctx, t * k);
  moe_route(ctx.be, std::as_const(logits).view({t, n_experts}), w.bias, ids.view({t, k}), weights.view({t, k}), rc);

  std::vector<std::int32_t> ids_host = to_host(ids, ctx.be.stream);
  const expert_groups g = group_by_expert(ids_host, t, k, n_experts);
  if (routed) *routed = std::move(ids_host);
  const auto rows = upload(ctx, g.rows);
  const auto token_of = upload(ctx, g.token_of);

  auto expert_out = stream_buffer<bf16>(ctx, t * k * d);
  const index_t most = *std::max_element(g.count.begin(), g.count.end());
  auto xe = stream_buffer<bf16>(ctx, most * d);
  for (index_t e = 0; e < n_experts; ++e) {
    const index_t n = g.count[static_cast<std::size_t>(e)];
    if (n == 0) continue;
    const device_view<const std::int32_t, 2> sel(token_of.data() + g.offset[static_cast<std::size_t>(e)], {1, n});
    gather_rows(ctx.be, x, sel, xe.view({1, n, d}));
    mlp_forward(ctx, w.experts[static_cast<std::size_t>(e)], std::as_const(xe).view({n, d}),
                device_view<bf16, 2>(expert_out.data() + g.offset[static_cast<std::size_t>(e)] * d, {n, d}));
  }

  device_view<const bf16, 2> shared;
  device_buffer<bf16> shared_out;
  if (w.shared_experts) {
    shared_out = stream_buffer<bf16>(ctx, t * d);
    mlp_forward(ctx, *w.shared_experts, x, shared_out.view({t, d}));
    shared = std::as_const(shared_out).view({t, d});
  }
  moe_combine(ctx.be, std::as_const(expert_out).view({t * k, d}), rows.view({t, k}), std::as_const(weights).view({t, k}),
              shared, y);
}

/// indexer_forward on the device: appends the keys of positions [start, start + t) to the layer
/// cache and writes each token's selection to topk [t, min(index_topk, start + t)].
inline void indexer_forward(const device_layer_context& ctx, const device_indexer_weights& w,
                            device_view<const bf16, 2> x, device_view<const bf16, 2> qr,
                            device_view<const std::int32_t, 1> positions, const std::vector<std::int32_t>& host_positions,
                            index_t start, device_layer_cache& cache, device_view<std::int32_t, 2> topk) {
  const auto& c = ctx.cfg;
  const index_t t = x.extent(0), heads = c.index_n_heads, dim = c.index_head_dim, rope = c.qk_rope_head_dim;
  const index_t end = start + t;
  const float hadamard_scale = static_cast<float>(std::pow(static_cast<double>(dim), -0.5));
  device_buffer<float> scores;
  std::vector<std::int32_t> host_ranges(static_cast<std::size_t>(2 * t));
  for (index_t i = 0; i < t; ++i) {
    host_ranges[static_cast<std::size_t>(2 * i)] = 0;
    host_ranges[static_cast<std::size_t>(2 * i + 1)] = host_positions[static_cast<std::size_t>(i)] + 1;
  }
  const auto ranges = upload(ctx, host_ranges);
  const auto rv = ranges.view({t, index_t{2}});
  {
    device_phase_scope timing(ctx.times, phase::indexer, ctx.be.stream);
    auto q = stream_buffer<bf16>(ctx, t * heads * dim);
    const auto qv = q.view({t, heads * dim});
    project(ctx, qr, w.wq_b, qv);
    rope_apply(ctx.be, device_view<bf16, 3>(q.data(), {t, heads, rope}, {heads * dim, dim, 1}), positions, ctx.rope,
               rope_layout::half);
    auto k = stream_buffer<bf16>(ctx, t * dim);
    const auto kv = k.view({t, dim});
    project(ctx, x, w.wk, kv);
    layer_norm(ctx.be, kv, w.k_norm_weight, w.k_norm_bias, kv, norm_default_eps);
    rope_apply(ctx.be, device_view<bf16, 3>(k.data(), {t, 1, rope}, {dim, dim, 1}), positions, ctx.rope,
               rope_layout::half);
    const auto q_rows = q.view({t * heads, dim});
    hadamard_transform(ctx.be, device_view<const bf16, 2>(q_rows), q_rows, hadamard_scale);
    hadamard_transform(ctx.be, device_view<const bf16, 2>(kv), kv, hadamard_scale);

    const index_t groups = dim / 128;
    auto q8 = stream_buffer<fp8_e4m3>(ctx, t * heads * dim), k8 = stream_buffer<fp8_e4m3>(ctx, t * dim);
    auto qs = stream_buffer<float>(ctx, t * heads * groups), ks = stream_buffer<float>(ctx, t * groups);
    const act_quant_config qc{ctx.act_format, 128};
    act_quant(ctx.be, q_rows, q8.view({t * heads, dim}), qs.view({t * heads, groups}), qc);
    act_quant(ctx.be, kv, k8.view({t, dim}), ks.view({t, groups}), qc);
    const auto keys = cache.index_keys(end);
    indexer_cache_pack(ctx.be, std::as_const(k8).view({t, dim}), std::as_const(ks).view({t}),
                       block(keys, start, 0, t, keys.extent(1)));

    auto hw = stream_buffer<float>(ctx, t * heads);
    const auto hwv = hw.view({t, heads});
    linear(ctx.be, x, w.weights_proj, hwv);
    const float head_scale = static_cast<float>(std::pow(static_cast<double>(heads), -0.5));
    lightning_indexer_weights(ctx.be, device_view<const float, 2>(hwv), std::as_const(qs).view({t, heads}), hwv,
                              head_scale, hadamard_scale);

    // Causal index scores over the whole cache: one block of `end` slots (the cache is contiguous).
    scores = stream_buffer<float>(ctx, t * end);
    device_buffer<std::int32_t> table(t, ctx.be.stream);
    DSA_CUDA_CHECK(cudaMemsetAsync(table.data(), 0, table.size_bytes(), ctx.be.stream));
    lightning_indexer_scores_paged(ctx.be, std::as_const(q8).view({t, heads, dim}), device_view<const float, 2>(hwv),
                                   device_view<const std::uint8_t, 2>(keys), std::as_const(table).view({t, index_t{1}}),
                                   end, rv, scores.view({t, end}));
  }
  if (ctx.watch) ctx.watch->watch_scores(std::as_const(scores).view({t, end}), start);
  device_phase_scope timing(ctx.times, phase::topk, ctx.be.stream);
  topk_indices(ctx.be, std::as_const(scores).view({t, end}), rv, topk.extent(1), topk);
}

/// The absorbed-decode weights of one layer on the device, derived from wkv_b on first use (as
/// mla_decode_weights): wkv_b in bf16 [H * (nope + v), C] and W_UK transposed per head
/// [H, C, nope].
struct device_mla_decode_weights {
  std::once_flag once;
  device_buffer<bf16> wkv_b;
  device_buffer<bf16> w_uk_t;
};

/// Dequantizes wkv_b on the device (weight_dequant, bit-identical to the host's); the per-head
/// transpose of W_UK is a one-time permutation done on a host copy (no arithmetic), then uploaded.
inline void build_decode_weights(const device_layer_context& ctx, const device_attention_weights& w,
                                 device_mla_decode_weights& dw) {
  std::call_once(dw.once, [&] {
    const auto& c = ctx.cfg;
    const index_t h = c.num_attention_heads, nope = c.qk_nope_head_dim, v = c.v_head_dim, cl = c.kv_lora_rank;
    const index_t rows = h * (nope + v);
    device_buffer<bf16> full(rows * cl);
    const auto fv = full.view({rows, cl});
    if (w.kv_b_proj.fp8()) {
      weight_dequant(ctx.be, w.kv_b_proj.q, w.kv_b_proj.scale, fv);
    } else {
      copy_rows(ctx, w.kv_b_proj.w, fv);
    }
    const std::vector<bf16> host = to_host(full, ctx.be.stream);
    std::vector<bf16> t(static_cast<std::size_t>(h * cl * nope));
    for (index_t hh = 0; hh < h; ++hh) {
      for (index_t d = 0; d < nope; ++d) {
        const bf16* src = host.data() + (hh * (nope + v) + d) * cl;
        for (index_t j = 0; j < cl; ++j) t[static_cast<std::size_t>((hh * cl + j) * nope + d)] = src[j];
      }
    }
    device_buffer<bf16> uk(static_cast<index_t>(t.size()));
    copy_to_device(uk, std::span<const bf16>(t), ctx.be.stream);
    DSA_CUDA_CHECK(cudaStreamSynchronize(ctx.be.stream));  // t is pageable host memory about to be freed
    dw.wkv_b = std::move(full);
    dw.w_uk_t = std::move(uk);
  });
}

/// mla_forward on the device: out [t, hidden] = MLA(x) for the t tokens at positions
/// [start, start + t); appends their MLA and indexer cache rows (the cache must have room for
/// start + t rows) and writes the indexer's selection to topk [t, min(index_topk, start + t)].
inline void mla_forward(const device_layer_context& ctx, const device_attention_weights& w,
                        device_mla_decode_weights& dw, device_view<const bf16, 2> x,
                        device_view<const std::int32_t, 1> positions, const std::vector<std::int32_t>& host_positions,
                        index_t start, device_layer_cache& cache, device_view<std::int32_t, 2> topk,
                        device_view<bf16, 2> out) {
  const auto& c = ctx.cfg;
  const index_t t = x.extent(0), end = start + t;
  const index_t h = c.num_attention_heads, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim;
  const index_t dqk = nope + rope, dv = c.v_head_dim, cl = c.kv_lora_rank, row = cl + rope;
  const float eps = c.rms_norm_eps;

  auto qr = stream_buffer<bf16>(ctx, t * c.q_lora_rank);
  auto q = stream_buffer<bf16>(ctx, t * h * dqk);
  const auto qrv = qr.view({t, c.q_lora_rank});
  const auto mla_rows = cache.mla(end);
  {
    device_phase_scope timing(ctx.times, phase::attention, ctx.be.stream);
    project(ctx, x, w.q_a_proj, qrv);
    rms_norm(ctx.be, device_view<const bf16, 2>(qrv), w.q_a_layernorm, qrv, eps);
    project(ctx, device_view<const bf16, 2>(qrv), w.q_b_proj, q.view({t, h * dqk}));
    rope_apply(ctx.be, device_view<bf16, 3>(q.data() + nope, {t, h, rope}, {h * dqk, dqk, 1}), positions, ctx.rope,
               rope_layout::interleaved);

    auto kv = stream_buffer<bf16>(ctx, t * row);
    const auto kvv = kv.view({t, row});
    project(ctx, x, w.kv_a_proj_with_mqa, kvv);
    const auto latent = block(kvv, 0, 0, t, cl);
    rms_norm(ctx.be, device_view<const bf16, 2>(latent), w.kv_a_layernorm, latent, eps);
    // The FP8 round trip of the latent, written into the cache rows of these positions.
    auto c8 = stream_buffer<fp8_e4m3>(ctx, t * cl);
    auto cs = stream_buffer<float>(ctx, t * (cl / 128));
    act_quant(ctx.be, latent, c8.view({t, cl}), cs.view({t, cl / 128}), act_quant_config{ctx.act_format, 128});
    act_dequant(ctx.be, std::as_const(c8).view({t, cl}), std::as_const(cs).view({t, cl / 128}),
                block(mla_rows, start, 0, t, cl));
    const auto pe = block(mla_rows, start, cl, t, rope);
    copy_rows(ctx, device_view<const bf16, 2>(block(kvv, 0, cl, t, rope)), pe);
    rope_apply(ctx.be, device_view<bf16, 3>(pe.data_handle(), {t, 1, rope}, {row, rope, 1}), positions, ctx.rope,
               rope_layout::interleaved);
  }

  indexer_forward(ctx, w.indexer, x, device_view<const bf16, 2>(qrv), positions, host_positions, start, cache, topk);

  device_phase_scope timing(ctx.times, phase::attention, ctx.be.stream);
  const device_view<const bf16, 2> cached(mla_rows);
  const device_view<const bf16, 2> k_rope = block(cached, 0, cl, end, rope);
  const device_view<const std::int32_t, 2> sel(topk);
  auto o = stream_buffer<bf16>(ctx, t * h * dv);
  const auto qc = std::as_const(q).view({t, h, dqk});
  if (t > 1) {
    // MHA prefill, heads up-projected in groups whose wkv_b rows start on an FP8 block (as on the host).
    const index_t per_head = nope + dv;
    index_t group = 1;
    if (w.kv_b_proj.fp8()) group = 128 / std::gcd(index_t{128}, per_head);
    group = std::min(group, h);
    auto kvb = stream_buffer<bf16>(ctx, end * group * per_head);
    for (index_t h0 = 0; h0 < h; h0 += group) {
      const index_t gh = std::min(group, h - h0);
      project(ctx, block(cached, 0, 0, end, cl), w.kv_b_proj.rows(h0 * per_head, gh * per_head),
              kvb.view({end, gh * per_head}));
      const device_view<const bf16, 3> k_nope(kvb.data(), {end, gh, nope}, {gh * per_head, per_head, 1});
      const device_view<const bf16, 3> v(kvb.data() + nope, {end, gh, dv}, {gh * per_head, per_head, 1});
      const device_view<const bf16, 3> qg(qc.data_handle() + h0 * dqk, {t, gh, dqk}, {h * dqk, dqk, 1});
      const device_view<bf16, 3> og(o.data() + h0 * dv, {t, gh, dv}, {h * dv, dv, 1});
      sparse_mha_attention(ctx.be, qg, k_nope, k_rope, v, sel, og,
                           sparse_mha_config{c.softmax_scale(), attention_rounding::bf16});
    }
  } else {
    // Absorbed MQA decode over the latent cache.
    build_decode_weights(ctx, w, dw);
    const index_t lat = cl + rope;
    auto q_lat = stream_buffer<bf16>(ctx, t * h * lat);
    const bf16* w_uk_t = dw.w_uk_t.data();
    for (index_t hh = 0; hh < h; ++hh) {
      linear(ctx.be, device_view<const bf16, 2>(qc.data_handle() + hh * dqk, {t, nope}, {h * dqk, 1}),
             device_view<const bf16, 2>(w_uk_t + hh * cl * nope, {cl, nope}),
             device_view<bf16, 2>(q_lat.data() + hh * lat, {t, cl}, {h * lat, 1}));
      copy_rows(ctx, device_view<const bf16, 2>(qc.data_handle() + hh * dqk + nope, {t, rope}, {h * dqk, 1}),
                device_view<bf16, 2>(q_lat.data() + hh * lat + cl, {t, rope}, {h * lat, 1}));
    }
    // Every head reads the same latent row: stride 0 over heads.
    const device_view<const bf16, 3> latent(cached.data_handle(), {end, h, cl}, {row, 0, 1});
    auto o_lat = stream_buffer<bf16>(ctx, t * h * cl);
    sparse_mha_attention(ctx.be, std::as_const(q_lat).view({t, h, lat}), latent, k_rope, latent, sel,
                         o_lat.view({t, h, cl}), sparse_mha_config{c.softmax_scale(), attention_rounding::bf16_split});
    const bf16* wkv_b = dw.wkv_b.data();
    for (index_t hh = 0; hh < h; ++hh) {
      linear(ctx.be, device_view<const bf16, 2>(o_lat.data() + hh * cl, {t, cl}, {h * cl, 1}),
             device_view<const bf16, 2>(wkv_b + (hh * (nope + dv) + nope) * cl, {dv, cl}),
             device_view<bf16, 2>(o.data() + hh * dv, {t, dv}, {h * dv, 1}));
    }
  }
  project(ctx, std::as_const(o).view({t, h * dv}), w.o_proj, out);
}

}  // namespace model
DSA_NAMESPACE_END
