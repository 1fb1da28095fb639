// dsa::model::transformer<cuda_backend>: the reference DeepSeek-V3.2 forward pass (DESIGN.md §4)
// on the GPU, behind the API of the host transformer (dsa/model/transformer.hpp):
//
//   cudaStream_t s = ...;
//   auto m = dsa::model::transformer<dsa::cuda_backend>::load("tiny-dsv32/", dsa::cuda_backend{s});
//   auto seq = m.new_sequence(4096);                       // a device_sequence: caches on the GPU
//   std::vector<float> logits = m.forward(seq, prompt);    // prefill: logits of the last token
//   logits = m.forward(seq, std::span(&next, 1));          // decode one token
//
// Same op sequence and rounding points as the host layers (dsa/model/cuda/layers.cuh mirrors them
// function by function), the prefill MHA / absorbed-MQA decode split, chunked prefill
// (forward_options::max_chunk), observers and progress callbacks (the observer's views are host
// copies of the device tensors), phase_times(), and the same argument checks and messages
// (forward_detail::checked_forward_tokens, shared with the host transformer).
//
// Device memory: the weights are copied once to the device at construction (device_weights: FP8
// codes and block scales as in the checkpoint); the absorbed-decode weights are derived on the
// device on a layer's first decode step; the KV and indexer caches live in each device_sequence;
// activations are stream-ordered buffers of the forward call. Everything runs on the backend's
// stream; forward() returns once the logits are on the host.
//
// cuBLAS: dsa::linear on the CUDA backend needs cuda_backend::blas. A backend passed in with
// blas == nullptr gets a handle owned by the transformer (bound to the backend's stream by the
// linear op), unless its `linear` is cuda_linear_path::simt (dsa's own kernel, no handle).
//
// Numerics versus the host transformer: every op is bit-identical to the CPU backend except
// where its CUDA implementation documents a tolerance (the fp32 accumulation order of the
// cuBLAS-backed linear, attention, ...); those last-bit differences propagate through bf16
// roundings, the FP8 quantization of activations and the indexer's top-k, so logits agree to a
// cosine similarity >= 0.999 with the same argmax, not bit for bit (tests/cuda/test_model_transformer.cpp).
//
// nvcc only. Part of the dsa::model and dsa::cuda targets.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/blas.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/memory.hpp"
#include "dsa/model/config.hpp"
#include "dsa/model/cuda/kv_cache.hpp"
#include "dsa/model/cuda/layers.cuh"
#include "dsa/model/cuda/nonfinite.cuh"
#include "dsa/model/cuda/weights.hpp"
#include "dsa/model/forward.hpp"
#include "dsa/model/layers/context.hpp"
#include "dsa/model/layers/moe.hpp"
#include "dsa/model/weights.hpp"
#include "dsa/ops/linear.hpp"
#include "dsa/ops/norm.hpp"
#include "dsa/ops/rope.hpp"
#include "dsa/ops/topk.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

template <>
class transformer<cuda_backend> {
 public:
  /// Opens a checkpoint directory (config.json + safetensors) and copies its weights to the
  /// current device; `num_layers` and `check` as weights::load.
  static transformer load(const std::filesystem::path& dir, cuda_backend be = {}, index_t num_layers = -1,
                          weight_check check = weight_check::finite) {
    return transformer(weights::load(dir, num_layers, check), be);
  }

  /// Takes the host weights (kept for weights() and the derived decode weights) and uploads
  /// them on be.stream; returns once the copies are complete.
  transformer(::dsa::model::weights w, cuda_backend be) : w_(std::move(w)), be_(be) {
    settings_ = checked_layer_settings(w_.config());
    if (be_.blas == nullptr && be_.linear == cuda_linear_path::cublas) {
      blas_ = std::make_unique<cublas_handle>();
      be_.blas = blas_->get();
    }
    dw_ = ::dsa::model::device_weights(w_, be_.stream);
    DSA_CUDA_CHECK(cudaStreamSynchronize(be_.stream));
    for (std::size_t l = 0; l < w_.layers.size(); ++l) decode_.push_back(std::make_unique<device_mla_decode_weights>());
    id_ = forward_detail::next_transformer_id();
  }

  transformer(transformer&&) noexcept = default;
  transformer& operator=(transformer&&) noexcept = default;

  const ::dsa::model::config& config() const { return w_.config(); }
  /// The host weights (views into the memory-mapped checkpoint).
  const ::dsa::model::weights& weights() const { return w_; }
  /// Their device copy.
  const ::dsa::model::device_weights& device_weights() const { return dw_; }
  /// The backend the forward pass runs on (with the transformer's own cuBLAS handle when the
  /// backend passed in had none and its linear path is cuBLAS).
  const cuda_backend& backend() const { return be_; }
  /// Layers run by forward(): num_hidden_layers, or fewer when loaded with num_layers.
  index_t num_layers() const { return static_cast<index_t>(w_.layers.size()); }

  /// A new, empty sequence that can hold up to max_tokens tokens (caches in device memory).
  /// 1 <= max_tokens <= max_position_embeddings (dsa::error otherwise).
  device_sequence new_sequence(index_t max_tokens) const {
    forward_detail::check_new_sequence(max_tokens, config().max_position_embeddings);
    return device_sequence(max_tokens, num_layers(), config().kv_lora_rank, config().qk_rope_head_dim, id_);
  }

  /// Appends `tokens` to `seq` and returns the logits [vocab] of the last one (fp32, on the host).
  template <class Token>
  std::vector<float> forward(device_sequence& seq, std::span<const Token> tokens, const forward_options& opt = {}) {
    const std::vector<std::int32_t> ids =
        forward_detail::checked_forward_tokens(seq, id_, num_layers(), config().vocab_size, tokens, opt);
    const index_t n = static_cast<index_t>(ids.size());
    const index_t total_end = seq.length() + n;
    seq.reserve(total_end, be_.stream);
    std::vector<float> logits;
    forward_detail::for_each_chunk(n, opt.max_chunk, [&](index_t b, index_t e, bool last) {
      logits = forward_chunk(seq, std::span<const std::int32_t>(ids.data() + b, static_cast<std::size_t>(e - b)), opt,
                             total_end, last);
    });
    forward_detail::check_logits(logits, seq, total_end - 1, num_layers(), opt.on_nonfinite);
    return logits;
  }
  template <class Token>
  std::vector<float> forward(device_sequence& seq, const std::vector<Token>& tokens, const forward_options& opt = {}) {
    return forward(seq, std::span<const Token>(tokens), opt);
  }

  /// Wall time spent per phase by every forward call so far (each phase waits for its device
  /// work, so these are device times).
  const ::dsa::model::phase_times& phase_times() const { return times_; }
  void reset_phase_times() { times_ = {}; }

 private:
  // forward_chunk of the host transformer, with device buffers.
  std::vector<float> forward_chunk(device_sequence& seq, std::span<const std::int32_t> ids, const forward_options& opt,
                                   index_t total_end, bool want_logits) {
    const auto& c = config();
    const index_t t = static_cast<index_t>(ids.size()), d = c.hidden_size, start = seq.length();
    device_layer_context ctx{be_, c, settings_.act_format, settings_.rope, &times_};
    const std::vector<std::int32_t> positions = forward_detail::chunk_positions(start, t);
    const auto pos_buf = upload(ctx, positions);
    const auto pos = pos_buf.view();

    auto h = stream_buffer<bf16>(ctx, t * d), residual = stream_buffer<bf16>(ctx, t * d);
    auto x = stream_buffer<bf16>(ctx, t * d), a = stream_buffer<bf16>(ctx, t * d);
    const auto hv = h.view({t, d});
    const auto rv = residual.view({t, d});
    const auto xv = x.view({t, d});
    const auto av = a.view({t, d});
    {
      device_phase_scope timing(&times_, phase::other, be_.stream);
      const std::vector<std::int32_t> id_vec(ids.begin(), ids.end());
      const auto id_buf = upload(ctx, id_vec);
      gather_rows(be_, dw_.embed_tokens, std::as_const(id_buf).view({index_t{1}, t}), h.view({index_t{1}, t, d}));
      // The first layer's residual is the embedding itself: adding it to a zero residual is exact.
      DSA_CUDA_CHECK(cudaMemsetAsync(residual.data(), 0, residual.size_bytes(), be_.stream));
    }
    // The selection is min(index_topk, start + t) wide: no token here has more causal positions.
    const index_t k_sel = forward_detail::selection_width(c.index_topk, start + t);
    auto topk = stream_buffer<std::int32_t>(ctx, t * k_sel);
    const auto topk_v = topk.view({t, k_sel});
    // Host copies for the observer.
    std::vector<std::int32_t> topk_host;
    std::vector<bf16> h_host, r_host;
    std::vector<std::int32_t> routed;
    // The non-finite watch (dsa/model/nonfinite.hpp), until the sequence has a site.
    std::optional<nonfinite_watch<device_space>> watch;
    if (!seq.first_nonfinite()) watch.emplace(be_.stream);
    ctx.watch = watch ? &*watch : nullptr;
    const auto watch_point = [&](device_view<const bf16, 2> v, nonfinite_stage stage) {
      if (watch) watch->watch(v, stage);
    };
    for (index_t l = 0; l < num_layers(); ++l) {
      if (watch) watch->layer = l;
      const device_layer_weights& lw = dw_.layers[static_cast<std::size_t>(l)];
      {
        device_phase_scope timing(&times_, phase::other, be_.stream);
        add_rms_norm(be_, device_view<const bf16, 2>(hv), rv, lw.input_layernorm, xv, c.rms_norm_eps);
      }
      mla_forward(ctx, lw.attn, *decode_[static_cast<std::size_t>(l)], device_view<const bf16, 2>(xv), pos, positions,
                  start, seq.layer(l), topk_v, av);
      watch_point(av, nonfinite_stage::attention_output);
      {
        device_phase_scope timing(&times_, phase::other, be_.stream);
        add_rms_norm(be_, device_view<const bf16, 2>(av), rv, lw.post_attention_layernorm, xv, c.rms_norm_eps);
      }
      watch_point(rv, nonfinite_stage::residual_stream);
      {
        device_phase_scope timing(&times_, phase::moe, be_.stream);
        if (lw.moe) {
          moe_forward(ctx, *lw.moe, device_view<const bf16, 2>(xv), hv, opt.observer ? &routed : nullptr);
        } else {
          mlp_forward(ctx, *lw.mlp, device_view<const bf16, 2>(xv), hv);
        }
      }
      watch_point(hv, nonfinite_stage::ffn_output);
      if (opt.observer) {
        topk_host = to_host(topk, be_.stream);
        h_host = to_host(h, be_.stream);
        r_host = to_host(residual, be_.stream);
        opt.observer(layer_trace{l, start, make_view(static_cast<const std::int32_t*>(topk_host.data()), {t, k_sel}),
                                 make_view(static_cast<const bf16*>(h_host.data()), {t, d}),
                                 make_view(static_cast<const bf16*>(r_host.data()), {t, d}),
                                 forward_detail::routed_experts(routed, lw.moe.has_value(), t, c.num_experts_per_tok)});
      }
      if (opt.progress) opt.progress(forward_progress{start, start + t, total_end, l, num_layers()});
    }
    seq.advance(t);
    if (watch) {
      const std::uint64_t first = watch->first();
      if (first != nonfinite_detail::none) seq.note_nonfinite(nonfinite_detail::decode(first, start));
    }
    if (!want_logits) {
      // The chunk's buffers are released in stream order; wait so that a failure surfaces here.
      DSA_CUDA_CHECK(cudaStreamSynchronize(be_.stream));
      return {};
    }
    device_phase_scope timing(&times_, phase::other, be_.stream);
    // Final norm of the last token only (rows are independent), lm_head in fp32.
    const auto h_last = block(device_view<const bf16, 2>(hv), t - 1, 0, 1, d);
    const auto r_last = block(rv, t - 1, 0, 1, d);
    add_rms_norm(be_, h_last, r_last, dw_.norm, block(xv, 0, 0, 1, d), c.rms_norm_eps);
    device_buffer<float> logits_d(c.vocab_size, be_.stream);
    linear(be_, device_view<const bf16, 2>(block(xv, 0, 0, 1, d)), dw_.lm_head, logits_d.view({index_t{1}, c.vocab_size}));
    return to_host(logits_d, be_.stream);
  }

  ::dsa::model::weights w_;
  cuda_backend be_;
  std::unique_ptr<cublas_handle> blas_;  // owned when the backend passed in had no handle
  ::dsa::model::device_weights dw_;
  layer_settings settings_{};
  std::vector<std::unique_ptr<device_mla_decode_weights>> decode_;
  ::dsa::model::phase_times times_;
  std::uint64_t id_ = 0;  // identifies the sequences this transformer made (survives moves)
};

}  // namespace model
DSA_NAMESPACE_END
