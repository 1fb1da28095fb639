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
// enqueue() runs one round of a batch with the logits left in the backend's memory and nothing
// waited for: on the CUDA backend, what a CUDA graph captures (docs/cuda.md).
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
    detail::check_new_sequence(max_tokens, config().max_position_embeddings);
    return sequence_type(max_tokens, num_layers(), config().kv_lora_rank, config().qk_rope_head_dim, id_);
  }

  /// One sequence's part of a batched forward call: the tokens to append to it.
  struct batch_entry {
    sequence_type* seq = nullptr;
    std::span<const std::int32_t> tokens;
  };

  /// Appends each entry's tokens to its sequence, all in one pass (ragged: every sequence at its
  /// own position, a prefill chunk of one beside a decode step of another) and returns each
  /// entry's logits (fp32, on the host): [vocab] of its last token, or [t, vocab] of every new
  /// token with forward_options::all_logits. The row-wise work (every projection, norm and MoE
  /// expert) runs once over the concatenated tokens, so each weight is read once per call; the
  /// attention and the indexer run per sequence over its own caches. A sequence's results are the
  /// same bits alone or in any batch (docs/design.md, "Batches"). Every entry is checked before
  /// anything runs (its tokens as forward(seq, tokens) checks them, and no sequence twice); the
  /// batch is processed in rounds of at most forward_options::max_chunk tokens per sequence.
  std::vector<std::vector<float>> forward(std::span<const batch_entry> batch, const forward_options& opt = {});

  /// Appends `tokens` to `seq` and returns the logits [vocab] of the last one (fp32, on the host):
  /// the batch of one.
  template <class Token>
  std::vector<float> forward(sequence_type& seq, std::span<const Token> tokens, const forward_options& opt = {}) {
    const std::vector<std::int32_t> ids =
        detail::checked_forward_tokens(seq, id_, num_layers(), config().vocab_size, tokens, opt);
    const batch_entry one{&seq, ids};
    return std::move(forward(std::span<const batch_entry>(&one, 1), opt).front());
  }
  template <class Token>
  std::vector<float> forward(sequence_type& seq, const std::vector<Token>& tokens, const forward_options& opt = {}) {
    return forward(seq, std::span<const Token>(tokens), opt);
  }

  /// Enqueues one round of a batch: each entry's tokens (at most options.max_chunk of them)
  /// appended to its sequence as forward() appends them, and each entry's last-token logits
  /// written to row i of `logits` [batch.size(), vocab] (fp32, in the backend's memory) - without
  /// waiting for any of it, and without reading anything back: the non-finite watch runs but is
  /// not read (forward() checks the logits; a caller of enqueue() checks its own), and
  /// options.observer and options.all_logits are refused (their copies would wait). The
  /// sequences advance at once. On the CUDA backend the call is then launches and stream-ordered
  /// allocations only - a CUDA graph can capture it - once every sequence's storage holds the new
  /// positions (it grows by cudaMalloc, which a capture cannot hold: run a step first, or create
  /// the sequence with the room) and every layer has run one decode step (its absorbed decode
  /// weights are derived on the host then). It adds nothing to phase_times() (timing a phase
  /// waits for it). The entries are checked as forward() checks them.
  void enqueue(std::span<const batch_entry> batch, out_view<Backend, float, 2> logits, const forward_options& opt = {});

  /// Time spent per phase by every forward call so far (device time on a GPU backend: each phase
  /// waits for its work).
  const ::dsa::model::phase_times& phase_times() const { return times_; }
  void reset_phase_times() { times_ = {}; }

 private:
  /// One entry's share of a round: tokens [begin, end) of its batch entry.
  struct round_part {
    std::size_t entry = 0;
    index_t begin = 0, end = 0;
    bool last = false;  ///< the entry's last tokens: its logits are wanted
  };
  // Defined below the class (see there). Checks every entry of a batch as forward() and enqueue()
  // take it (`op` names the call) and returns the batch's tokens.
  index_t checked_batch(std::span<const batch_entry> batch, const forward_options& opt, std::string_view op) const;
  // Runs every layer over one round's tokens and appends each part's logits (the last token's, or
  // all with opt.all_logits) to (*logits)[part.entry] after reading the non-finite watch; or, with
  // `into`, writes them to its rows in part order and reads nothing back.
  void forward_round(std::span<const batch_entry> batch, std::span<const round_part> round, const forward_options& opt,
                     index_t call_begin, index_t call_total, std::vector<std::vector<float>>* logits,
                     const out_view<Backend, float, 2>* into = nullptr);

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
  id_ = detail::next_transformer_id();
}

template <class Backend>
index_t transformer<Backend>::checked_batch(std::span<const batch_entry> batch, const forward_options& opt,
                                            std::string_view op) const {
  if (batch.empty()) fail(op, "batch.size()", 0, ">= 1 sequence");
  if (opt.max_chunk < 1) fail(op, "options.max_chunk", opt.max_chunk, ">= 1");
  // Every entry is checked before any runs, so a bad one leaves every sequence as it was.
  index_t total = 0;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const batch_entry& e = batch[i];
    if (e.seq == nullptr) fail(op, "batch[" + std::to_string(i) + "].seq", "null", "a sequence");
    for (std::size_t j = 0; j < i; ++j) {
      if (batch[j].seq == e.seq) {
        fail(op, "batch[" + std::to_string(i) + "].seq", "the sequence of batch[" + std::to_string(j) + "]",
             "each sequence at most once per call");
      }
    }
    (void)detail::checked_forward_tokens(*e.seq, id_, num_layers(), config().vocab_size, e.tokens, opt);
    total += static_cast<index_t>(e.tokens.size());
  }
  return total;
}

template <class Backend>
std::vector<std::vector<float>> transformer<Backend>::forward(std::span<const batch_entry> batch,
                                                              const forward_options& opt) {
  const index_t total = checked_batch(batch, opt, "model::transformer::forward");
  for (const batch_entry& e : batch) {
    backend_resources<Backend>::reserve(*e.seq, e.seq->length() + static_cast<index_t>(e.tokens.size()), be_);
  }
  // Rounds: round r runs the r-th chunk (of at most max_chunk tokens) of every entry that has one.
  // Each sequence is chunked exactly as forward(seq, tokens) chunks it alone: where a chunk ends
  // decides whether a lone token takes the prefill or the decode path, so chunking by the batch's
  // total would change a sequence's results with its neighbours.
  const index_t call_begin = batch.size() == 1 ? batch.front().seq->length() : 0;  // progress: positions for one
  std::vector<std::vector<float>> logits(batch.size());
  index_t processed = 0;
  for (index_t begin = 0; processed < total; begin += opt.max_chunk) {
    std::vector<round_part> round;
    index_t used = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const index_t n = static_cast<index_t>(batch[i].tokens.size());
      if (begin >= n) continue;
      const index_t end = std::min(n, begin + opt.max_chunk);
      round.push_back({i, begin, end, end == n});
      used += end - begin;
    }
    forward_round(batch, round, opt, call_begin + processed, call_begin + total, &logits);
    processed += used;
  }
  const index_t vocab = config().vocab_size;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    // The last token's logits decide (with all_logits, the last row).
    const std::vector<float>& l = logits[i];
    detail::check_logits(std::span<const float>(l.data() + l.size() - static_cast<std::size_t>(vocab),
                                                        static_cast<std::size_t>(vocab)),
                                 *batch[i].seq, batch[i].seq->length() - 1, num_layers(), opt.on_nonfinite);
  }
  return logits;
}

template <class Backend>
void transformer<Backend>::enqueue(std::span<const batch_entry> batch, out_view<Backend, float, 2> logits,
                                   const forward_options& opt) {
  constexpr std::string_view op = "model::transformer::enqueue";
  if (opt.observer) fail(op, "options.observer", "set", "none (its host copies wait for the device; forward() takes one)");
  if (opt.all_logits) fail(op, "options.all_logits", "true", "false (one logits row per entry)");
  const index_t total = checked_batch(batch, opt, op);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto n = static_cast<index_t>(batch[i].tokens.size());
    if (n > opt.max_chunk) {
      fail(op, "batch[" + std::to_string(i) + "].tokens.size()", n,
           "at most options.max_chunk = " + std::to_string(opt.max_chunk) + " (one round)");
    }
  }
  const index_t vocab = config().vocab_size;
  if (logits.extent(0) != static_cast<index_t>(batch.size()) || logits.extent(1) != vocab) {
    fail(op, "logits.shape", shape_string(logits),
         "[" + std::to_string(batch.size()) + ", " + std::to_string(vocab) + "] (a row per entry, vocab_size columns)");
  }
  for (const batch_entry& e : batch) {
    backend_resources<Backend>::reserve(*e.seq, e.seq->length() + static_cast<index_t>(e.tokens.size()), be_);
  }
  std::vector<round_part> round;
  for (std::size_t i = 0; i < batch.size(); ++i) round.push_back({i, 0, static_cast<index_t>(batch[i].tokens.size()), true});
  const index_t call_begin = batch.size() == 1 ? batch.front().seq->length() : 0;
  forward_round(batch, round, opt, call_begin, call_begin + total, nullptr, &logits);
}

template <class Backend>
void transformer<Backend>::forward_round(std::span<const batch_entry> batch, std::span<const round_part> round,
                                         const forward_options& opt, index_t call_begin, index_t call_total,
                                         std::vector<std::vector<float>>* logits,
                                         const out_view<Backend, float, 2>* into) {
  using memory = layer_memory<Backend>;
  using space = typename Backend::memory_space;
  using cache_type = std::remove_reference_t<decltype(std::declval<sequence_type&>().layer(0))>;
  constexpr bool on_host = std::is_same_v<space, host_space>;
  const auto& c = config();
  const index_t d = c.hidden_size, vocab = c.vocab_size;

  // The round's rows: each part's tokens, concatenated in part order.
  std::vector<batch_segment<cache_type>> segments(round.size());
  std::vector<index_t> rows(round.size() + 1, 0);
  std::vector<std::int32_t> ids, positions;
  index_t k_sel = 0;
  for (std::size_t s = 0; s < round.size(); ++s) {
    const round_part& p = round[s];
    sequence_type& seq = *batch[p.entry].seq;
    batch_segment<cache_type>& seg = segments[s];
    seg.row = rows[s];
    seg.start = seq.length();
    seg.t = p.end - p.begin;
    rows[s + 1] = seg.row + seg.t;
    for (index_t i = 0; i < seg.t; ++i) {
      ids.push_back(batch[p.entry].tokens[static_cast<std::size_t>(p.begin + i)]);
      positions.push_back(static_cast<std::int32_t>(seg.start + i));
    }
    // The selection is min(index_topk, end) wide per sequence: no token has more causal positions.
    k_sel = std::max(k_sel, detail::selection_width(c.index_topk, seg.end()));
  }
  const index_t t = rows.back();
  layer_context<Backend> ctx{be_, c, settings_.act_format, settings_.rope, into ? nullptr : &times_};
  const auto pos_buf = memory::upload_async(be_, std::span<const std::int32_t>(positions));
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
    const auto id_buf = memory::upload_async(be_, std::span<const std::int32_t>(ids));
    gather_rows(be_, res_.embed_tokens(w_), id_buf.view({index_t{1}, t}), h.view({index_t{1}, t, d}));
    // The first layer's residual is the embedding itself: adding it to a zero residual is exact.
    memory::fill_zero(be_, residual.view({t * d}));
  }
  auto topk = make_buffer<std::int32_t>(ctx, t * k_sel);
  const auto topk_v = topk.view({t, k_sel});
  std::vector<std::int32_t> routed;  // the observer's layer_trace::experts
  // The non-finite watch (dsa/model/nonfinite.hpp), one site per sequence.
  nonfinite_watch<space> watch(be_, std::span<const index_t>(rows));
  ctx.watch = &watch;
  const auto watch_point = [&](in_view<Backend, bf16, 2> v, nonfinite_stage stage) {
    layer_timer<Backend> timing(ctx, phase::other);
    watch.watch(v, stage);
  };
  for (index_t l = 0; l < num_layers(); ++l) {
    const auto& lw = res_.layer(w_, l);
    watch.layer = l;
    for (std::size_t s = 0; s < round.size(); ++s) segments[s].cache = &batch[round[s].entry].seq->layer(l);
    {
      layer_timer<Backend> timing(ctx, phase::other);
      add_rms_norm(be_, in_view<Backend, bf16, 2>(hv), rv, lw.input_layernorm, xv, c.rms_norm_eps);
    }
    mla_forward(ctx, lw.attn, *decode_[static_cast<std::size_t>(l)], in_view<Backend, bf16, 2>(xv), pos,
                std::span<const batch_segment<cache_type>>(segments), topk_v, av);
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
      // One trace per sequence of the round, its rows only (host copies of device tensors).
      std::vector<std::int32_t> topk_host;
      std::vector<bf16> h_host, r_host;
      if constexpr (!on_host) {
        topk_host = memory::to_host(be_, in_view<Backend, std::int32_t, 2>(topk_v));
        h_host = memory::to_host(be_, in_view<Backend, bf16, 2>(hv));
        r_host = memory::to_host(be_, in_view<Backend, bf16, 2>(rv));
      }
      const std::int32_t* topk_rows = on_host ? reinterpret_cast<const std::int32_t*>(topk_v.data_handle()) : topk_host.data();
      const bf16* h_rows = on_host ? reinterpret_cast<const bf16*>(hv.data_handle()) : h_host.data();
      const bf16* r_rows = on_host ? reinterpret_cast<const bf16*>(rv.data_handle()) : r_host.data();
      const index_t k_exp = lw.moe ? c.num_experts_per_tok : 0;
      for (std::size_t s = 0; s < round.size(); ++s) {
        const batch_segment<cache_type>& seg = segments[s];
        const index_t k_seg = detail::selection_width(c.index_topk, seg.end());
        opt.observer(layer_trace{l, seg.start,
                                 host_view<const std::int32_t, 2>(topk_rows + seg.row * k_sel, {seg.t, k_seg}, {k_sel, 1}),
                                 host_view<const bf16, 2>(h_rows + seg.row * d, {seg.t, d}),
                                 host_view<const bf16, 2>(r_rows + seg.row * d, {seg.t, d}),
                                 host_view<const std::int32_t, 2>(routed.data() + seg.row * k_exp, {lw.moe ? seg.t : 0, k_exp}),
                                 static_cast<index_t>(round[s].entry)});
      }
    }
    if (opt.progress) opt.progress(forward_progress{call_begin, call_begin + t, call_total, l, num_layers()});
  }
  // The watch's words (forward() only: reading them waits for the device).
  const std::vector<std::uint64_t> first = into ? std::vector<std::uint64_t>() : watch.first();
  for (std::size_t s = 0; s < round.size(); ++s) {
    sequence_type& seq = *batch[round[s].entry].seq;
    if (!first.empty() && first[s] != detail::none) seq.note_nonfinite(detail::decode(first[s], seq.length()));
    seq.advance(segments[s].t);
  }

  // The logits rows: each finishing part's last token, or every row with all_logits.
  std::vector<index_t> out_rows;
  for (std::size_t s = 0; s < round.size(); ++s) {
    const batch_segment<cache_type>& seg = segments[s];
    if (opt.all_logits) {
      for (index_t i = 0; i < seg.t; ++i) out_rows.push_back(seg.row + i);
    } else if (round[s].last) {
      out_rows.push_back(seg.row + seg.t - 1);
    }
  }
  if (out_rows.empty()) {
    memory::finish(be_);  // a failure of this round's work surfaces here
    return;
  }
  layer_timer<Backend> timing(ctx, phase::other);
  // Final norm of those rows only (rows are independent), lm_head in fp32.
  const index_t n = static_cast<index_t>(out_rows.size());
  auto hs = make_buffer<bf16>(ctx, n * d), rs = make_buffer<bf16>(ctx, n * d), xs = make_buffer<bf16>(ctx, n * d);
  for (index_t i = 0; i < n; ++i) {
    const index_t r = out_rows[static_cast<std::size_t>(i)];
    memory::copy_rows(be_, block(in_view<Backend, bf16, 2>(hv), r, 0, 1, d), block(hs.view({n, d}), i, 0, 1, d));
    memory::copy_rows(be_, block(in_view<Backend, bf16, 2>(rv), r, 0, 1, d), block(rs.view({n, d}), i, 0, 1, d));
  }
  add_rms_norm(be_, std::as_const(hs).view({n, d}), rs.view({n, d}), res_.norm(w_), xs.view({n, d}), c.rms_norm_eps);
  if (into) {  // enqueue(): a row per part, in part order, left where the backend computes
    linear(be_, std::as_const(xs).view({n, d}), res_.lm_head(w_), *into);
    return;
  }
  std::vector<float> out;
  if constexpr (on_host) {
    out.resize(static_cast<std::size_t>(n * vocab));
    linear(be_, std::as_const(xs).view({n, d}), res_.lm_head(w_), make_view(out.data(), {n, vocab}));
  } else {
    auto lg = make_buffer<float>(ctx, n * vocab);
    linear(be_, std::as_const(xs).view({n, d}), res_.lm_head(w_), lg.view({n, vocab}));
    out = memory::to_host(be_, std::as_const(lg).view({n * vocab}));
  }
  std::size_t at = 0;
  for (std::size_t s = 0; s < round.size(); ++s) {
    const index_t rows_out = opt.all_logits ? segments[s].t : (round[s].last ? 1 : 0);
    std::vector<float>& dst = (*logits)[round[s].entry];
    dst.insert(dst.end(), out.begin() + static_cast<std::ptrdiff_t>(at * static_cast<std::size_t>(vocab)),
               out.begin() + static_cast<std::ptrdiff_t>((at + static_cast<std::size_t>(rows_out)) * static_cast<std::size_t>(vocab)));
    at += static_cast<std::size_t>(rows_out);
  }
}

}  // namespace model
DSA_NAMESPACE_END
