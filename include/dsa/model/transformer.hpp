// dsa::model::transformer: the reference DeepSeek-V3.2 forward pass (DESIGN.md §4), written
// with dsa's public ops only.
//
//   auto m = dsa::model::transformer<dsa::cpu_backend>::load("DeepSeek-V3.2/", dsa::cpu_backend{16});
//   auto seq = m.new_sequence(4096);
//   std::vector<float> logits = m.forward(seq, prompt);       // prefill: logits of the last token
//   logits = m.forward(seq, std::span(&next, 1));             // decode one token
//
// forward() appends tokens at seq.length() (a prefill chunk may start anywhere), runs every layer
// and returns the fp32 logits [vocab] of the last token; non-finite logits are a
// model::nonfinite_error naming where the values first stopped being finite
// (dsa/model/nonfinite.hpp, forward_options::on_nonfinite). More than one token runs the MHA
// prefill path, a single token the absorbed MQA decode path, as the reference does; long
// prefills are processed in chunks of forward_options::max_chunk tokens. Sequences are
// independent and may be interleaved freely. Weights are views into the memory-mapped
// checkpoint; per-phase wall times accumulate in phase_times().
//
// Host memory only: the layers keep their activations in std::vector, so Backend must be a host
// backend (the CPU backend); dsa/model/cuda/transformer.cuh specialises the class for
// dsa::cuda_backend. Part of the dsa::model target.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/model/config.hpp"
#include "dsa/model/forward.hpp"
#include "dsa/model/kv_cache.hpp"
#include "dsa/model/layers/context.hpp"
#include "dsa/model/layers/mla.hpp"
#include "dsa/model/layers/mlp.hpp"
#include "dsa/model/layers/moe.hpp"
#include "dsa/model/weights.hpp"
#include "dsa/ops/linear.hpp"
#include "dsa/ops/norm.hpp"
#include "dsa/ops/topk.hpp"

// The model runs on host memory, so it brings the CPU implementations of the ops it uses.
#include "dsa/cpu/activation.hpp"
#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/cpu/hadamard.hpp"
#include "dsa/cpu/indexer_weights.hpp"
#include "dsa/cpu/kv_cache.hpp"
#include "dsa/cpu/lightning_indexer.hpp"
#include "dsa/cpu/linear.hpp"
#include "dsa/cpu/moe_combine.hpp"
#include "dsa/cpu/moe_routing.hpp"
#include "dsa/cpu/norm.hpp"
#include "dsa/cpu/rope.hpp"
#include "dsa/cpu/sparse_mha_attention.hpp"
#include "dsa/cpu/topk.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

/// Packs the FP8 projections of `w` for the CPU kernels (dsa/cpu/packed_fp8_weight.hpp): all but
/// kv_b_proj, which the decode reads absorbed in bf16 and the prefill in head-group slices.
/// Weights already packed are kept.
inline void pack_fp8_weights(weights& w, const cpu_backend& be) {
  auto pack = [&](linear_weight& lw) {
    if (lw.fp8() && !lw.packed) lw.packed = std::make_shared<const packed_fp8_weight>(pack_fp8_weight(be, lw.q));
  };
  auto pack_mlp = [&](mlp_weights& m) {
    pack(m.gate_proj);
    pack(m.up_proj);
    pack(m.down_proj);
  };
  for (layer_weights& l : w.layers) {
    pack(l.attn.q_a_proj);
    pack(l.attn.q_b_proj);
    pack(l.attn.kv_a_proj_with_mqa);
    pack(l.attn.o_proj);
    pack(l.attn.indexer.wq_b);
    pack(l.attn.indexer.wk);
    if (l.mlp) pack_mlp(*l.mlp);
    if (l.moe) {
      for (mlp_weights& e : l.moe->experts) pack_mlp(e);
      if (l.moe->shared_experts) pack_mlp(*l.moe->shared_experts);
    }
  }
}

template <class Backend>
class transformer {
  static_assert(std::is_same_v<typename Backend::memory_space, host_space>,
                "dsa::model::transformer keeps activations in host memory: use a host backend (dsa::cpu_backend), "
                "or include dsa/model/cuda/transformer.cuh for dsa::cuda_backend");

 public:
  /// Opens a checkpoint directory (config.json + safetensors); `num_layers` and `check` as
  /// weights::load.
  static transformer load(const std::filesystem::path& dir, Backend be = {}, index_t num_layers = -1,
                          weight_check check = weight_check::finite);

  transformer(::dsa::model::weights w, Backend be);

  transformer(transformer&&) noexcept = default;
  transformer& operator=(transformer&&) noexcept = default;

  const ::dsa::model::config& config() const { return w_.config(); }
  const ::dsa::model::weights& weights() const { return w_; }
  const Backend& backend() const { return be_; }
  /// Layers run by forward(): num_hidden_layers, or fewer when loaded with num_layers.
  index_t num_layers() const { return static_cast<index_t>(w_.layers.size()); }

  /// A new, empty sequence that can hold up to max_tokens tokens: 1 <= max_tokens <=
  /// max_position_embeddings (dsa::error otherwise).
  sequence new_sequence(index_t max_tokens) const {
    forward_detail::check_new_sequence(max_tokens, config().max_position_embeddings);
    return sequence(max_tokens, num_layers(), config().kv_lora_rank, config().qk_rope_head_dim, id_);
  }

  /// Appends `tokens` to `seq` and returns the logits [vocab] of the last one (fp32).
  template <class Token>
  std::vector<float> forward(sequence& seq, std::span<const Token> tokens, const forward_options& opt = {}) {
    const std::vector<std::int32_t> ids =
        forward_detail::checked_forward_tokens(seq, id_, num_layers(), config().vocab_size, tokens, opt);
    const index_t n = static_cast<index_t>(ids.size());
    const index_t total_end = seq.length() + n;
    seq.reserve(total_end);
    std::vector<float> logits;
    forward_detail::for_each_chunk(n, opt.max_chunk, [&](index_t b, index_t e, bool last) {
      logits = forward_chunk(seq, std::span<const std::int32_t>(ids.data() + b, static_cast<std::size_t>(e - b)), opt,
                             total_end, last);
    });
    forward_detail::check_logits(logits, seq, total_end - 1, num_layers(), opt.on_nonfinite);
    return logits;
  }
  template <class Token>
  std::vector<float> forward(sequence& seq, const std::vector<Token>& tokens, const forward_options& opt = {}) {
    return forward(seq, std::span<const Token>(tokens), opt);
  }

  /// Wall time spent per phase by every forward call so far.
  const ::dsa::model::phase_times& phase_times() const { return times_; }
  void reset_phase_times() { times_ = {}; }

 private:
  // Defined below the class (see there).
  std::vector<float> forward_chunk(sequence& seq, std::span<const std::int32_t> ids, const forward_options& opt,
                                   index_t total_end, bool want_logits);

  ::dsa::model::weights w_;
  Backend be_;
  layer_settings settings_{};
  std::vector<std::unique_ptr<mla_decode_weights>> decode_;
  ::dsa::model::phase_times times_;
  std::uint64_t id_ = 0;  // identifies the sequences this transformer made (survives moves)
};

// load, the constructor and forward_chunk are defined below the class, not in it: an in-class
// definition is inline, and inline members are compiled in every translation unit that calls
// them even under `extern template` (DSA_EXTERN_CPU_TRANSFORMER).
template <class Backend>
transformer<Backend> transformer<Backend>::load(const std::filesystem::path& dir, Backend be, index_t num_layers,
                                                weight_check check) {
  return transformer(weights::load(dir, num_layers, check), be);
}

template <class Backend>
transformer<Backend>::transformer(::dsa::model::weights w, Backend be) : w_(std::move(w)), be_(be) {
  settings_ = checked_layer_settings(w_.config());
  if constexpr (std::is_same_v<Backend, cpu_backend>) {
    if (be_.pack_fp8_weights) pack_fp8_weights(w_, be_);
  }
  for (std::size_t l = 0; l < w_.layers.size(); ++l) decode_.push_back(std::make_unique<mla_decode_weights>());
  id_ = forward_detail::next_transformer_id();
}

template <class Backend>
std::vector<float> transformer<Backend>::forward_chunk(sequence& seq, std::span<const std::int32_t> ids,
                                                    const forward_options& opt, index_t total_end, bool want_logits) {
  const auto& c = config();
  const index_t t = static_cast<index_t>(ids.size()), d = c.hidden_size, start = seq.length();
  layer_context<Backend> ctx{be_, c, settings_.act_format, settings_.rope, &times_};
  const std::vector<std::int32_t> positions = forward_detail::chunk_positions(start, t);
  const auto pos = make_view(static_cast<const std::int32_t*>(positions.data()), {t});

  // h: the block output (FFN output), residual: the bf16 residual stream, x: normed input.
  std::vector<bf16> h(static_cast<std::size_t>(t * d)), residual(h.size()), x(h.size()), a(h.size());
  const auto hv = make_view(h.data(), {t, d});
  const auto rv = make_view(residual.data(), {t, d});
  const auto xv = make_view(x.data(), {t, d});
  const auto av = make_view(a.data(), {t, d});
  {
    phase_scope timing(&times_, phase::other);
    gather_rows(be_, w_.embed_tokens, make_view(ids.data(), {index_t{1}, t}), make_view(h.data(), {index_t{1}, t, d}));
  }
  // The first layer's residual is the embedding itself: adding it to a zero residual is exact.
  // The selection is min(index_topk, start + t) wide: no token here has more causal positions.
  const index_t k_sel = forward_detail::selection_width(c.index_topk, start + t);
  std::vector<std::int32_t> topk(static_cast<std::size_t>(t * k_sel));
  const auto topk_v = make_view(topk.data(), {t, k_sel});
  std::vector<std::int32_t> routed;  // the observer's layer_trace::experts
  // The non-finite watch (dsa/model/nonfinite.hpp), until the sequence has a site.
  nonfinite_watch<host_space> watch_state;
  nonfinite_watch<host_space>* watch = seq.first_nonfinite() ? nullptr : &watch_state;
  ctx.watch = watch;
  const auto watch_point = [&](host_view<const bf16, 2> v, nonfinite_stage stage) {
    if (!watch) return;
    phase_scope timing(&times_, phase::other);
    watch->watch(v, stage);
  };
  for (index_t l = 0; l < num_layers(); ++l) {
    const layer_weights& lw = w_.layers[static_cast<std::size_t>(l)];
    if (watch) watch->layer = l;
    {
      phase_scope timing(&times_, phase::other);
      add_rms_norm(be_, hv, rv, lw.input_layernorm, xv, c.rms_norm_eps);
    }
    mla_forward(ctx, lw.attn, *decode_[static_cast<std::size_t>(l)], host_view<const bf16, 2>(xv), pos, start,
                seq.layer(l), topk_v, av);
    watch_point(av, nonfinite_stage::attention_output);
    {
      phase_scope timing(&times_, phase::other);
      add_rms_norm(be_, av, rv, lw.post_attention_layernorm, xv, c.rms_norm_eps);
    }
    watch_point(rv, nonfinite_stage::residual_stream);
    {
      phase_scope timing(&times_, phase::moe);
      if (lw.moe) {
        moe_forward(ctx, *lw.moe, host_view<const bf16, 2>(xv), hv, opt.observer ? &routed : nullptr);
      } else {
        mlp_forward(ctx, *lw.mlp, host_view<const bf16, 2>(xv), hv);
      }
    }
    watch_point(hv, nonfinite_stage::ffn_output);
    if (opt.observer) {
      opt.observer(layer_trace{l, start, topk_v, hv, rv,
                               forward_detail::routed_experts(routed, lw.moe.has_value(), t, c.num_experts_per_tok)});
    }
    if (opt.progress) opt.progress(forward_progress{start, start + t, total_end, l, num_layers()});
  }
  seq.advance(t);
  if (watch && watch->first() != nonfinite_detail::none) seq.note_nonfinite(nonfinite_detail::decode(watch->first(), start));
  if (!want_logits) return {};
  phase_scope timing(&times_, phase::other);
  // Final norm of the last token only (rows are independent), lm_head in fp32.
  const auto h_last = block(hv, t - 1, 0, 1, d);
  const auto r_last = block(rv, t - 1, 0, 1, d);
  add_rms_norm(be_, h_last, r_last, w_.norm, block(xv, 0, 0, 1, d), c.rms_norm_eps);
  std::vector<float> logits(static_cast<std::size_t>(c.vocab_size));
  linear(be_, block(xv, 0, 0, 1, d), w_.lm_head, make_view(logits.data(), {index_t{1}, c.vocab_size}));
  return logits;
}

// DSA_EXTERN_CPU_TRANSFORMER: a program of many translation units compiles the CPU forward pass
// and the model's file I/O (dsa/model/io_linkage.hpp) once instead of in each of them. Define it
// everywhere in the program; in one translation unit, built with the same compiler flags, also
// define DSA_CPU_TRANSFORMER_INSTANCE before the includes and write
// `template class dsa::model::transformer<dsa::cpu_backend>;` after this header (dsa's own tests
// and tools do the two in two files, compiled in parallel: instances/cpu_transformer.cpp and
// instances/model_io.cpp).
#ifdef DSA_EXTERN_CPU_TRANSFORMER
extern template class transformer<cpu_backend>;
#endif

}  // namespace model
DSA_NAMESPACE_END
