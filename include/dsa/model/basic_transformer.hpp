// dsa::model::transformer<Backend>: the reference DeepSeek-V3.2 forward pass (docs/design.md
// "Forward pass"), written with dsa's public ops only, one implementation for every backend.
//
// forward() appends tokens at seq.length() (a prefill chunk may start anywhere), runs every layer
// and returns the fp32 logits [vocab] of the last token (on the host, whatever the backend);
// non-finite logits are a model::nonfinite_error naming where the values first stopped being
// finite (dsa/model/nonfinite.hpp, forward_options::on_nonfinite). More than one token runs the
// MHA prefill path, a single token the absorbed MQA decode path, as the reference does; long
// prefills are processed in chunks of forward_options::max_chunk tokens. Sequences are
// independent and may be interleaved freely; per-phase times accumulate in phase_times().
//
// The layers (dsa/model/layers/) and this class are the same code on every backend: what differs
// is backend_resources<Backend> (where the layers' weights live, the sequence type) and
// layer_memory<Backend> (buffers and copies). Include the header of a backend, not this one:
// dsa/model/transformer.hpp (the CPU backend, with its op implementations) or
// dsa/model/cuda/transformer.hpp (the CUDA backend's resources; the pass itself compiled by nvcc).
//
// Portable: no op implementation (compiles with g++ and nvcc). Part of the dsa::model target.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
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
#include "dsa/model/nonfinite.hpp"
#include "dsa/model/sequence.hpp"
#include "dsa/model/layers/context.hpp"
#include "dsa/model/layers/memory.hpp"
#include "dsa/model/layers/mla.hpp"
#include "dsa/model/layers/mlp.hpp"
#include "dsa/model/layers/moe.hpp"
#include "dsa/model/weights.hpp"
#include "dsa/ops/linear.hpp"
#include "dsa/ops/norm.hpp"
#include "dsa/ops/topk.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

/// What a transformer keeps of its backend beside the host weights, and the sequence type of that
/// backend: specialised below for the CPU and in dsa/model/cuda/transformer.hpp for CUDA. The
/// accessors take the transformer's host weights (the CPU reads those; CUDA its device copy).
template <class Backend>
class backend_resources;

template <class Backend>
class transformer {
 public:
  /// sequence (host caches) or device_sequence (dsa/model/cuda/device_sequence.hpp).
  using sequence_type = typename backend_resources<Backend>::sequence_type;

  /// Opens a checkpoint directory (config.json + safetensors); `num_layers` and `check` as
  /// weights::load.
  static transformer load(const std::filesystem::path& dir, Backend be = {}, index_t num_layers = -1,
                          weight_check check = weight_check::finite);

  /// Takes the host weights (kept for weights() and the derived decode weights) and prepares the
  /// backend's (CUDA: copies them to the device on be's stream and waits for the copy).
  transformer(::dsa::model::weights w, Backend be);

  transformer(transformer&&) noexcept = default;
  transformer& operator=(transformer&&) noexcept = default;

  const ::dsa::model::config& config() const { return w_.config(); }
  /// The host weights (views into the memory-mapped checkpoint).
  const ::dsa::model::weights& weights() const { return w_; }
  /// The backend the forward pass runs on (on CUDA with the transformer's own cuBLAS handle when
  /// the backend passed in had none and its linear path is cuBLAS).
  const Backend& backend() const { return be_; }
  /// What the transformer keeps of its backend (CUDA: the device copy of the weights).
  const backend_resources<Backend>& resources() const { return res_; }
  /// Layers run by forward(): num_hidden_layers, or fewer when loaded with num_layers.
  index_t num_layers() const { return static_cast<index_t>(w_.layers.size()); }

  /// A new, empty sequence that can hold up to max_tokens tokens: 1 <= max_tokens <=
  /// max_position_embeddings (dsa::error otherwise).
  sequence_type new_sequence(index_t max_tokens) const {
    forward_detail::check_new_sequence(max_tokens, config().max_position_embeddings);
    return sequence_type(max_tokens, num_layers(), config().kv_lora_rank, config().qk_rope_head_dim, id_);
  }

  /// Appends `tokens` to `seq` and returns the logits [vocab] of the last one (fp32, on the host).
  template <class Token>
  std::vector<float> forward(sequence_type& seq, std::span<const Token> tokens, const forward_options& opt = {}) {
    const std::vector<std::int32_t> ids =
        forward_detail::checked_forward_tokens(seq, id_, num_layers(), config().vocab_size, tokens, opt);
    const index_t n = static_cast<index_t>(ids.size());
    const index_t total_end = seq.length() + n;
    backend_resources<Backend>::reserve(seq, total_end, be_);
    std::vector<float> logits;
    forward_detail::for_each_chunk(n, opt.max_chunk, [&](index_t b, index_t e, bool last) {
      logits = forward_chunk(seq, std::span<const std::int32_t>(ids.data() + b, static_cast<std::size_t>(e - b)), opt,
                             total_end, last);
    });
    forward_detail::check_logits(logits, seq, total_end - 1, num_layers(), opt.on_nonfinite);
    return logits;
  }
  template <class Token>
  std::vector<float> forward(sequence_type& seq, const std::vector<Token>& tokens, const forward_options& opt = {}) {
    return forward(seq, std::span<const Token>(tokens), opt);
  }

  /// Time spent per phase by every forward call so far (device time on a GPU backend: each phase
  /// waits for its work).
  const ::dsa::model::phase_times& phase_times() const { return times_; }
  void reset_phase_times() { times_ = {}; }

 private:
  // Defined below the class (see there).
  std::vector<float> forward_chunk(sequence_type& seq, std::span<const std::int32_t> ids, const forward_options& opt,
                                   index_t total_end, bool want_logits);

  ::dsa::model::weights w_;
  Backend be_;
  backend_resources<Backend> res_;
  layer_settings settings_{};
  std::vector<std::unique_ptr<mla_decode_weights<Backend>>> decode_;
  ::dsa::model::phase_times times_;
  std::uint64_t id_ = 0;  // identifies the sequences this transformer made (survives moves)
};

// load, the constructor and forward_chunk are defined below the class, not in it: an in-class
// definition is inline, and inline members are compiled in every translation unit that calls
// them even under `extern template` (DSA_EXTERN_CPU_TRANSFORMER, DSA_EXTERN_CUDA_TRANSFORMER).
template <class Backend>
transformer<Backend> transformer<Backend>::load(const std::filesystem::path& dir, Backend be, index_t num_layers,
                                                weight_check check) {
  return transformer(weights::load(dir, num_layers, check), be);
}

template <class Backend>
transformer<Backend>::transformer(::dsa::model::weights w, Backend be) : w_(std::move(w)), be_(be), res_(w_, be_) {
  settings_ = checked_layer_settings(w_.config());
  for (std::size_t l = 0; l < w_.layers.size(); ++l) decode_.push_back(std::make_unique<mla_decode_weights<Backend>>());
  id_ = forward_detail::next_transformer_id();
}

template <class Backend>
std::vector<float> transformer<Backend>::forward_chunk(sequence_type& seq, std::span<const std::int32_t> ids,
                                                       const forward_options& opt, index_t total_end, bool want_logits) {
  using memory = layer_memory<Backend>;
  using space = typename Backend::memory_space;
  constexpr bool on_host = std::is_same_v<space, host_space>;
  const auto& c = config();
  const index_t t = static_cast<index_t>(ids.size()), d = c.hidden_size, start = seq.length();
  layer_context<Backend> ctx{be_, c, settings_.act_format, settings_.rope, &times_};
  const std::vector<std::int32_t> positions = forward_detail::chunk_positions(start, t);
  const auto pos_buf = memory::upload(be_, std::span<const std::int32_t>(positions));
  const auto pos = pos_buf.view({t});

  // h: the block output (FFN output), residual: the bf16 residual stream, x: normed input.
  auto h = make_buffer<bf16>(ctx, t * d), residual = make_buffer<bf16>(ctx, t * d);
  auto x = make_buffer<bf16>(ctx, t * d), a = make_buffer<bf16>(ctx, t * d);
  const auto hv = h.view({t, d});
  const auto rv = residual.view({t, d});
  const auto xv = x.view({t, d});
  const auto av = a.view({t, d});
  {
    layer_timer<Backend> timing(ctx, phase::other);
    const auto id_buf = memory::upload(be_, ids);
    gather_rows(be_, res_.embed_tokens(w_), id_buf.view({index_t{1}, t}), h.view({index_t{1}, t, d}));
    // The first layer's residual is the embedding itself: adding it to a zero residual is exact.
    memory::fill_zero(be_, residual.view({t * d}));
  }
  // The selection is min(index_topk, start + t) wide: no token here has more causal positions.
  const index_t k_sel = forward_detail::selection_width(c.index_topk, start + t);
  auto topk = make_buffer<std::int32_t>(ctx, t * k_sel);
  const auto topk_v = topk.view({t, k_sel});
  std::vector<std::int32_t> routed;  // the observer's layer_trace::experts
  // The non-finite watch (dsa/model/nonfinite.hpp), until the sequence has a site.
  std::optional<nonfinite_watch<space>> watch;
  if (!seq.first_nonfinite()) watch.emplace(be_);
  ctx.watch = watch ? &*watch : nullptr;
  const auto watch_point = [&](in_view<Backend, bf16, 2> v, nonfinite_stage stage) {
    if (!watch) return;
    layer_timer<Backend> timing(ctx, phase::other);
    watch->watch(v, stage);
  };
  for (index_t l = 0; l < num_layers(); ++l) {
    const auto& lw = res_.layer(w_, l);
    if (watch) watch->layer = l;
    {
      layer_timer<Backend> timing(ctx, phase::other);
      add_rms_norm(be_, in_view<Backend, bf16, 2>(hv), rv, lw.input_layernorm, xv, c.rms_norm_eps);
    }
    mla_forward(ctx, lw.attn, *decode_[static_cast<std::size_t>(l)], in_view<Backend, bf16, 2>(xv), pos, start,
                seq.layer(l), topk_v, av);
    watch_point(av, nonfinite_stage::attention_output);
    {
      layer_timer<Backend> timing(ctx, phase::other);
      add_rms_norm(be_, in_view<Backend, bf16, 2>(av), rv, lw.post_attention_layernorm, xv, c.rms_norm_eps);
    }
    watch_point(rv, nonfinite_stage::residual_stream);
    {
      layer_timer<Backend> timing(ctx, phase::moe);
      if (lw.moe) {
        moe_forward(ctx, *lw.moe, in_view<Backend, bf16, 2>(xv), hv, opt.observer ? &routed : nullptr);
      } else {
        mlp_forward(ctx, *lw.mlp, in_view<Backend, bf16, 2>(xv), hv);
      }
    }
    watch_point(hv, nonfinite_stage::ffn_output);
    if (opt.observer) {
      const auto experts = forward_detail::routed_experts(routed, lw.moe.has_value(), t, c.num_experts_per_tok);
      if constexpr (on_host) {
        opt.observer(layer_trace{l, start, topk_v, hv, rv, experts});
      } else {  // host copies of the device tensors
        const std::vector<std::int32_t> topk_host = memory::to_host(be_, in_view<Backend, std::int32_t, 2>(topk_v));
        const std::vector<bf16> h_host = memory::to_host(be_, in_view<Backend, bf16, 2>(hv));
        const std::vector<bf16> r_host = memory::to_host(be_, in_view<Backend, bf16, 2>(rv));
        opt.observer(layer_trace{l, start, make_view(topk_host.data(), {t, k_sel}), make_view(h_host.data(), {t, d}),
                                 make_view(r_host.data(), {t, d}), experts});
      }
    }
    if (opt.progress) opt.progress(forward_progress{start, start + t, total_end, l, num_layers()});
  }
  seq.advance(t);
  if (watch && watch->first() != nonfinite_detail::none) seq.note_nonfinite(nonfinite_detail::decode(watch->first(), start));
  if (!want_logits) {
    memory::finish(be_);  // a failure of this chunk's work surfaces here
    return {};
  }
  layer_timer<Backend> timing(ctx, phase::other);
  // Final norm of the last token only (rows are independent), lm_head in fp32.
  const auto h_last = block(in_view<Backend, bf16, 2>(hv), t - 1, 0, 1, d);
  const auto r_last = block(rv, t - 1, 0, 1, d);
  const auto x_last = block(xv, 0, 0, 1, d);
  add_rms_norm(be_, h_last, r_last, res_.norm(w_), x_last, c.rms_norm_eps);
  if constexpr (on_host) {
    std::vector<float> logits(static_cast<std::size_t>(c.vocab_size));
    linear(be_, in_view<Backend, bf16, 2>(x_last), res_.lm_head(w_), make_view(logits.data(), {index_t{1}, c.vocab_size}));
    return logits;
  } else {
    auto logits = make_buffer<float>(ctx, c.vocab_size);
    linear(be_, in_view<Backend, bf16, 2>(x_last), res_.lm_head(w_), logits.view({index_t{1}, c.vocab_size}));
    return memory::to_host(be_, std::as_const(logits).view({c.vocab_size}));
  }
}

}  // namespace model
DSA_NAMESPACE_END
