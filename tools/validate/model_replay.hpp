// The model golden case of dsa_validate, for any backend: replays a golden model directory
// (config.json, model.safetensors, expected.safetensors; ../shared/golden/README.md) through
// dsa::model::transformer<B> and checks the README's criteria:
//   - every stepS.logits has cosine similarity >= 0.99 with the expected one,
//   - the argmax agrees on all steps but at most one,
//   - per layer, the prefill top-k sets agree on >= 98% of their elements on average (only
//     expected indices <= t count for prefill row t: the reference pads short rows with
//     arbitrary future positions).
// Decode steps are teacher-forced: step i+1 feeds generated[:, i] whatever our argmax was.
//
// Portable (no op implementation, no Eigen): the includer provides the transformer
// specialisation. validate/model_cases.hpp is this plus the host transformer;
// validate/cuda_cases.hpp runs it on dsa::cuda_backend (transformer<cuda_backend> declared extern
// by dsa/model/cuda/transformer.hpp, compiled once by nvcc in dsa_cuda_transformer).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/quote.hpp"
#include "dsa/model/config.hpp"
#include "dsa/model/forward.hpp"
#include "dsa/model/safetensors.hpp"
#include "validate/golden_format.hpp"

namespace dsa_validate {

/// Criteria of the README.
inline constexpr double model_min_cosine = 0.99;
inline constexpr double model_max_argmax_mismatches = 1;
inline constexpr double model_min_topk_agreement = 0.98;

/// The most bytes of computed tensors a replay keeps when asked to (keep_outputs: for --dump and
/// Python's validate_model outputs): every step's logits and every layer's top-k, ffn_out and
/// residual in the expected file's [B, ...] layout. Their size follows from the file's batch and
/// prompt length and from config.json, which cost the file far fewer bytes (a 1.6 MB file of 400
/// prompts of 256 tokens asks for 0.4 GB of the tiny model's block outputs), so it is computed and
/// checked against this limit before the first row runs. A replay that keeps nothing
/// (dsa_validate without --dump) holds one row's few vectors at a time, whatever the batch.
inline constexpr std::uint64_t model_replay_max_kept_bytes = std::uint64_t{4} << 30;

/// Bytes counted per kept tensor beyond its data, for its name, bookkeeping and header entry: a
/// config with many layers and a file with many steps make many small tensors.
inline constexpr std::uint64_t model_replay_bytes_per_kept_tensor = 256;

/// The outcome of a model replay: the criteria (comparisons) plus diagnostic lines (per-step
/// cosines and argmaxes, per-layer block-output errors of the prefill) and, when the replay kept
/// them, the computed tensors under the expected file's names (for --dump).
struct model_case_result {
  case_result result;
  std::vector<std::string> diagnostics;
  index_t batch = 1;                     ///< batch rows of the golden file, each replayed on its own
  std::vector<double> cosines;           ///< per batch row, then per step (index b * (steps + 1) + s)
  std::vector<int> argmax_match;         ///< as cosines: 1 when the argmax agrees
  std::vector<std::size_t> argmax_got;   ///< as cosines: our argmax
  std::vector<std::size_t> argmax_want;  ///< as cosines: the expected argmax
  std::vector<double> topk_agreement;    ///< per layer, prefill average over rows and batch rows
};

namespace model_detail {

inline double cosine(std::span<const float> a, std::span<const float> b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

inline std::size_t argmax(std::span<const float> v) {
  return static_cast<std::size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

inline std::string fmt(double v, int precision = 5) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", precision, v);
  return b;
}

// Expected tensor `name`; throws input_error if missing or not a T tensor of rank R.
template <class T, std::size_t R>
host_tensor<T, R> expected(const dsa::safetensors_file& f, const std::string& name) {
  return load<T, R>(f, "model", name);
}

// Elements [first, first + out.size()) of the file's tensor `t`, copied out: the replay reads the
// expected tensors a row at a time, straight from the mapping (whose data need not be aligned
// for T), rather than holding copies of them.
template <class T>
void read_elements(const dsa::safetensors_file& f, const dsa::tensor_info& t, std::size_t first, std::span<T> out) {
  if (!out.empty()) std::memcpy(out.data(), f.bytes(t).data() + first * sizeof(T), out.size_bytes());
}

// Relative L2 error of one computed bf16 row against the expected one: ||a - b|| / ||b||.
inline double row_rel_err(const dsa::bf16* got, std::span<const dsa::bf16> want) {
  double num = 0, den = 0;
  for (std::size_t c = 0; c < want.size(); ++c) {
    const double a = got[c].to_float(), b = want[c].to_float();
    num += (a - b) * (a - b);
    den += b * b;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The top-k set agreement of prefill row r (want, got: its k entries), or a negative value when
// the expected row holds no valid causal position. A prefill row r always has r + 1 >= 1 causal
// candidates, so an expected row without one valid entry (all -1, or only positions after r) is
// nonsense and counts as disagreement, never as agreement: an expected file of -1 rows scores 0
// and fails.
inline double prefill_row_agreement(std::span<const std::int64_t> want, std::span<const std::int64_t> got, index_t r) {
  std::set<std::int64_t> w, g;
  for (std::size_t j = 0; j < want.size(); ++j) {
    if (want[j] >= 0 && want[j] <= r) w.insert(want[j]);
    if (got[j] >= 0) g.insert(got[j]);
  }
  if (w.empty()) return -1.0;
  std::size_t common = 0;
  for (std::int64_t e : w) common += g.count(e);
  return double(common) / double(std::max(w.size(), g.size()));
}

/// Rows of the expected file replayed together, in one batched forward call per step: the
/// replay holds this many rows' caches and check state at a time, whatever the file's batch.
inline constexpr index_t model_replay_group_rows = 8;

// Replays the sequences of `prompts` (each a row's prompt) and `generated` (each its generated
// tokens, all of `steps` tokens) together: the prompts in one batched call, prefilled in chunks of
// at most `chunk` tokens (each sequence chunked alike: the same bits as alone), then each step's
// generated tokens of every sequence in one call, teacher-forced. Hands each step's logits to
// on_logits(i, step, logits) and each layer trace to on_trace(i, step, trace) as they come, i the
// sequence's index in `prompts`, and keeps nothing itself: the caches are released on return.
template <class Model, class OnLogits, class OnTrace>
void replay_rows(Model& m, const std::vector<std::span<const std::int64_t>>& prompts,
                 const std::vector<std::span<const std::int64_t>>& generated, index_t steps, index_t chunk,
                 OnLogits&& on_logits, OnTrace&& on_trace) {
  const std::size_t n = prompts.size();
  std::vector<typename Model::sequence_type> seqs;
  std::vector<std::vector<std::int32_t>> ids(n);
  for (std::size_t i = 0; i < n; ++i) {
    seqs.push_back(m.new_sequence(static_cast<index_t>(prompts[i].size()) + steps));
    for (const std::int64_t id : prompts[i]) ids[i].push_back(static_cast<std::int32_t>(id));
  }
  auto options = [&](index_t step) {
    dsa::model::forward_options o;
    o.max_chunk = chunk;
    o.observer = [&on_trace, step](const dsa::model::layer_trace& tr) {
      on_trace(static_cast<std::size_t>(tr.sequence), step, tr);
    };
    return o;
  };
  std::vector<typename Model::batch_entry> batch(n);
  for (std::size_t i = 0; i < n; ++i) batch[i] = {&seqs[i], ids[i]};
  auto logits = m.forward(std::span<const typename Model::batch_entry>(batch), options(0));
  for (std::size_t i = 0; i < n; ++i) on_logits(i, index_t{0}, logits[i]);
  for (index_t s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < n; ++i) {
      ids[i].assign(1, static_cast<std::int32_t>(generated[i][static_cast<std::size_t>(s)]));
      batch[i] = {&seqs[i], ids[i]};
    }
    logits = m.forward(std::span<const typename Model::batch_entry>(batch), options(s + 1));
    for (std::size_t i = 0; i < n; ++i) on_logits(i, s + 1, logits[i]);
  }
}

// `a` * `b` into `r`; false on overflow.
inline bool mul_ok(std::uint64_t a, std::uint64_t b, std::uint64_t& r) { return !__builtin_mul_overflow(a, b, &r); }

// The checks of a replay, fed one batch row at a time: start_row, then the row's logits and
// layer traces as the forward pass produces them (each compared with the expected file's row as
// it arrives, and written into the kept outputs' row slice if the replay keeps them), then
// finish_row. A row's state is a few vectors, released when it is done; what outlives it is its
// comparisons and, with keep_outputs, its slice of the outputs. finish() gives the report.
//
// Every expected tensor the checks read is located and checked in the constructor, before any
// row runs (a malformed file fails before the model does any work), and so is the size of the
// kept outputs.
class replay_checks {
 public:
  struct row_state {
    index_t b = 0;
    int argmax_mismatches = 0;
    std::vector<double> topk_sum;             // per layer: sum of the prefill rows' set agreements
    std::vector<index_t> topk_rows;           // per layer: prefill rows traced
    std::vector<index_t> incomparable;        // per layer: expected rows without a valid position
    std::vector<float> want_logits;           // scratch: one expected logit row
    std::vector<std::int64_t> want_k, got_k;  // scratch: one top-k row
    std::vector<dsa::bf16> want_d;            // scratch: one expected block-output row
  };

  replay_checks(const dsa::safetensors_file& exp, const dsa::model::config& cfg, index_t layers, index_t batch,
                index_t len, index_t steps, bool keep_outputs, std::uint64_t max_kept_bytes)
      : exp_(exp),
        file_(dsa::quoted(exp.path().string())),
        batch_(batch),
        len_(len),
        steps_(steps),
        layers_(layers),
        vocab_(cfg.vocab_size),
        index_topk_(cfg.index_topk),
        k0_(std::min<index_t>(cfg.index_topk, len)),
        d_(cfg.hidden_size),
        keep_(keep_outputs) {
    for (index_t s = 0; s <= steps; ++s) {
      const std::string name = "step" + std::to_string(s) + ".logits";
      const dsa::tensor_info* t = exp.find(name);
      if (t == nullptr || t->shape != std::vector<index_t>{batch, vocab_}) {
        throw input_error("dsa_validate: " + file_ + ": " + name + " = " +
                          (t == nullptr ? std::string("missing") : dsa::format_shape(t->shape)) + "; expected [" +
                          std::to_string(batch) + ", " + std::to_string(vocab_) +
                          "] (one per step: the prompt's and each of the " + std::to_string(steps) +
                          " generated tokens')");
      }
      logits_.push_back(&find_tensor<float, 2>(exp, "model", name));
    }
    // The prefill top-k of every layer is compared, so it must be there, shaped as the replay's:
    // its row reads then stay inside it, and what the checks hold per row is bounded by the file.
    // The block outputs are diagnostics: required as ever, compared only when they have the
    // replay's shape.
    const std::vector<index_t> topk_shape = {batch, len, k0_}, block_shape = {batch, len, d_};
    for (index_t l = 0; l < layers; ++l) {
      const std::string name = "step0.layer" + std::to_string(l);
      const dsa::tensor_info& t = find_tensor<std::int64_t, 3>(exp, "model", name + ".topk");
      if (t.shape != topk_shape) {
        throw input_error("dsa_validate: " + file_ + ": " + name + ".topk shape = " + dsa::format_shape(t.shape) +
                          "; expected " + dsa::format_shape(topk_shape) + " (batch, prompt, min(index_topk, prompt))");
      }
      prefill_topk_.push_back(&t);
      const dsa::tensor_info& f = find_tensor<dsa::bf16, 3>(exp, "model", name + ".ffn_out");
      const dsa::tensor_info& r = find_tensor<dsa::bf16, 3>(exp, "model", name + ".residual");
      const bool comparable = f.shape == block_shape && r.shape == block_shape;
      ffn_out_.push_back(comparable ? &f : nullptr);
      residual_.push_back(comparable ? &r : nullptr);
    }
    // The decode steps' top-k are optional diagnostics; present ones must be I64 of rank 3.
    for (index_t s = 1; s <= steps; ++s) {
      for (index_t l = 0; l < layers; ++l) {
        if (exp.contains(decode_name(s, l))) find_tensor<std::int64_t, 3>(exp, "model", decode_name(s, l));
      }
    }
    decode_sum_.assign(static_cast<std::size_t>(steps * layers), 0.0);
    topk_cmp_.resize(static_cast<std::size_t>(layers));
    incomparable_.resize(static_cast<std::size_t>(layers));
    topk_layer_sum_.assign(static_cast<std::size_t>(layers), 0.0);
    ffn_err_.assign(static_cast<std::size_t>(layers), 0.0);
    residual_err_.assign(static_cast<std::size_t>(layers), 0.0);
    if (keep_) allocate_kept(max_kept_bytes);
    out_.batch = batch;
    out_.result.name = "model";
  }

  row_state start_row(index_t b) const {
    row_state r;
    r.b = b;
    const auto L = static_cast<std::size_t>(layers_);
    r.topk_sum.assign(L, 0.0);
    r.topk_rows.assign(L, 0);
    r.incomparable.assign(L, 0);
    r.want_logits.resize(static_cast<std::size_t>(vocab_));
    r.want_k.resize(static_cast<std::size_t>(k0_));
    r.got_k.resize(static_cast<std::size_t>(k0_));
    r.want_d.resize(static_cast<std::size_t>(d_));
    return r;
  }

  /// Step s's logits of row r.b: the cosine and argmax checks, then (kept) its row of stepS.logits.
  void logits(row_state& r, index_t s, std::span<const float> got) {
    if (got.size() != static_cast<std::size_t>(vocab_)) {
      throw dsa::error("dsa_validate: the forward pass returned " + std::to_string(got.size()) + " logits; expected " +
                       std::to_string(vocab_) + " (vocab_size)");
    }
    const std::size_t off = static_cast<std::size_t>(r.b) * static_cast<std::size_t>(vocab_);
    read_elements(exp_, *logits_[static_cast<std::size_t>(s)], off, std::span<float>(r.want_logits));
    const std::span<const float> want(r.want_logits);
    const std::string name = "step" + std::to_string(s) + ".logits" + row_tag(r.b);
    const double c = cosine(got, want);
    const std::size_t ag = argmax(got), aw = argmax(want);
    const bool same = ag == aw;
    out_.cosines.push_back(c);
    out_.argmax_match.push_back(same ? 1 : 0);
    out_.argmax_got.push_back(ag);
    out_.argmax_want.push_back(aw);
    r.argmax_mismatches += same ? 0 : 1;
    out_.result.comparisons.push_back({name, "1 - cosine", 1.0 - c, 1.0 - model_min_cosine, c >= model_min_cosine});
    out_.diagnostics.push_back(name + ": cosine " + fmt(c, 6) + ", argmax " + std::to_string(ag) +
                               (same ? " (agrees)" : " (expected " + std::to_string(aw) + ")"));
    if (keep_) copy_into(kept_[static_cast<std::size_t>(s)], off, std::as_bytes(got));
  }

  /// One layer trace of row r.b in call `step` (0: a prefill chunk, s >= 1: decode step s).
  void trace(row_state& r, index_t step, const dsa::model::layer_trace& tr) {
    const index_t rows = tr.topk.extent(0), kc = tr.topk.extent(1);
    const auto l = static_cast<std::size_t>(tr.layer);
    if (tr.layer < 0 || tr.layer >= layers_) throw dsa::error("dsa_validate: the forward pass traced an unknown layer");
    if (step > 0) {
      decode_trace(r, step, tr);
      return;
    }
    if (tr.start < 0 || rows > len_ - tr.start || kc > k0_ || tr.ffn_out.extent(1) != d_ ||
        tr.residual.extent(1) != d_) {
      throw dsa::error("dsa_validate: the forward pass traced a prefill chunk of another shape than the prompt's");
    }
    const auto k0 = static_cast<std::size_t>(k0_), d = static_cast<std::size_t>(d_);
    for (index_t i = 0; i < rows; ++i) {
      const index_t row = tr.start + i;
      const std::size_t at = static_cast<std::size_t>(r.b * len_ + row);  // row of the [B * len, ...] layout
      // The chunk's rows are min(index_topk, chunk end) wide; the columns past that are -1.
      for (std::size_t j = 0; j < k0; ++j) {
        r.got_k[j] =
            static_cast<index_t>(j) < kc ? std::int64_t{tr.topk(i, static_cast<index_t>(j))} : std::int64_t{-1};
      }
      read_elements(exp_, *prefill_topk_[l], at * k0, std::span<std::int64_t>(r.want_k));
      const double a = prefill_row_agreement(r.want_k, r.got_k, row);
      if (a < 0) {
        ++r.incomparable[l];
      } else {
        r.topk_sum[l] += a;
      }
      ++r.topk_rows[l];
      if (ffn_out_[l] != nullptr) {
        read_elements(exp_, *ffn_out_[l], at * d, std::span<dsa::bf16>(r.want_d));
        ffn_err_[l] = std::max(ffn_err_[l], row_rel_err(tr.ffn_out.row(i), r.want_d));
        read_elements(exp_, *residual_[l], at * d, std::span<dsa::bf16>(r.want_d));
        residual_err_[l] = std::max(residual_err_[l], row_rel_err(tr.residual.row(i), r.want_d));
      }
      if (keep_) {
        const std::size_t t = first_layer_output() + 3 * l;
        copy_into(kept_[t], at * k0, std::as_bytes(std::span<const std::int64_t>(r.got_k)));
        copy_into(kept_[t + 1], at * d, std::as_bytes(std::span<const dsa::bf16>(tr.ffn_out.row(i), d)));
        copy_into(kept_[t + 2], at * d, std::as_bytes(std::span<const dsa::bf16>(tr.residual.row(i), d)));
      }
    }
  }

  /// Row r.b is done: its argmax criterion and its per-layer prefill top-k agreements.
  void finish_row(row_state& r) {
    for (index_t l = 0; l < layers_; ++l) {
      const auto li = static_cast<std::size_t>(l);
      if (r.topk_rows[li] != len_) {
        throw dsa::error("dsa_validate: the prefill traced " + std::to_string(r.topk_rows[li]) + " rows of layer " +
                         std::to_string(l) + "; expected " + std::to_string(len_));
      }
      const double agree = len_ > 0 ? r.topk_sum[li] / double(len_) : 0.0;
      topk_layer_sum_[li] += agree;
      incomparable_[li].push_back(r.incomparable[li]);
      topk_cmp_[li].push_back({"step0.layer" + std::to_string(l) + ".topk" + row_tag(r.b), "1 - mean set agreement",
                               1.0 - agree, 1.0 - model_min_topk_agreement, agree >= model_min_topk_agreement});
    }
    out_.result.comparisons.push_back({"step*.logits" + row_tag(r.b), "argmax mismatches", double(r.argmax_mismatches),
                                       model_max_argmax_mismatches,
                                       r.argmax_mismatches <= model_max_argmax_mismatches});
  }

  /// The report, once every row is done: the prefill top-k checks (per layer, then per row), the
  /// per-layer and per-step diagnostics and the kept outputs.
  model_case_result finish() {
    for (index_t l = 0; l < layers_; ++l) {
      const auto li = static_cast<std::size_t>(l);
      const std::string name = "step0.layer" + std::to_string(l);
      for (index_t b = 0; b < batch_; ++b) {
        const index_t n = incomparable_[li][static_cast<std::size_t>(b)];
        if (n > 0) {
          out_.diagnostics.push_back(name + ".topk" + row_tag(b) + ": " + std::to_string(n) + " of " +
                                     std::to_string(len_) +
                                     " expected rows hold no valid causal position (counted as disagreement)");
        }
      }
      for (comparison& c : topk_cmp_[li]) out_.result.comparisons.push_back(std::move(c));
      out_.topk_agreement.push_back(topk_layer_sum_[li] / double(batch_));
      if (ffn_out_[li] != nullptr) {
        out_.diagnostics.push_back(name + ": top-k agreement " + fmt(out_.topk_agreement.back(), 4) +
                                   ", max row rel err ffn_out " + fmt(ffn_err_[li], 4) + ", residual " +
                                   fmt(residual_err_[li], 4));
      }
    }
    for (index_t s = 1; s <= steps_; ++s) {
      double sum = 0;
      for (index_t l = 0; l < layers_; ++l) sum += decode_sum_[static_cast<std::size_t>((s - 1) * layers_ + l)];
      out_.diagnostics.push_back("step" + std::to_string(s) + ": decode top-k agreement (mean over layers" +
                                 std::string(batch_ > 1 ? " and batch rows" : "") + ") " +
                                 fmt(sum / double(std::max<index_t>(1, layers_ * batch_)), 4));
    }
    out_.result.outputs = std::move(kept_);
    return std::move(out_);
  }

 private:
  static std::string decode_name(index_t s, index_t l) {
    return "step" + std::to_string(s) + ".layer" + std::to_string(l) + ".topk";
  }
  // With B > 1 the comparisons carry the row, step0.logits[b]; with B = 1 they keep their plain
  // names.
  std::string row_tag(index_t b) const {
    std::string tag;  // appended, not "[" + ...: GCC 12 reports a false -Wrestrict on such chains at -O3
    if (batch_ > 1) tag.append("[").append(std::to_string(b)).append("]");
    return tag;
  }
  index_t decode_width(index_t s) const { return dsa::model::detail::selection_width(index_topk_, len_ + s); }
  std::size_t first_layer_output() const { return static_cast<std::size_t>(steps_ + 1); }
  std::size_t decode_output(index_t s, index_t l) const {
    return first_layer_output() + static_cast<std::size_t>(3 * layers_ + (s - 1) * layers_ + l);
  }

  // Element `first` on of a kept tensor (in elements of `bytes`' own type: bytes.size() is a
  // multiple of it).
  static void copy_into(output_tensor& o, std::size_t first_element, std::span<const std::byte> bytes) {
    const std::size_t element = dsa::dtype_size(o.type);
    if (!bytes.empty()) std::memcpy(o.bytes.data() + first_element * element, bytes.data(), bytes.size());
  }

  // Decode step s of row r.b at one layer: the set agreement with the expected row (a
  // diagnostic, where the file has that step's top-k in the replay's shape), and (kept) its row.
  void decode_trace(row_state& r, index_t s, const dsa::model::layer_trace& tr) {
    const index_t kc = tr.topk.extent(1);
    if (tr.topk.extent(0) != 1 || kc != decode_width(s)) {
      throw dsa::error("dsa_validate: decode step " + std::to_string(s) + " traced a top-k of " +
                       std::to_string(tr.topk.extent(0)) + " x " + std::to_string(kc) + "; expected 1 x " +
                       std::to_string(decode_width(s)));
    }
    const auto k = static_cast<std::size_t>(kc);
    std::vector<std::int64_t> got(k);
    for (std::size_t j = 0; j < k; ++j) got[j] = tr.topk(0, static_cast<index_t>(j));
    const dsa::tensor_info* t = exp_.find(decode_name(s, tr.layer));
    if (t != nullptr && t->shape == std::vector<index_t>{batch_, 1, kc}) {
      std::vector<std::int64_t> want(k);
      read_elements(exp_, *t, static_cast<std::size_t>(r.b) * k, std::span<std::int64_t>(want));
      const std::set<std::int64_t> w(want.begin(), want.end()), g(got.begin(), got.end());
      std::size_t common = 0;
      for (std::int64_t e : w) common += g.count(e);
      decode_sum_[static_cast<std::size_t>((s - 1) * layers_ + tr.layer)] +=
          double(common) / double(std::max<std::size_t>(1, w.size()));
    }
    if (keep_) {
      copy_into(kept_[decode_output(s, tr.layer)], static_cast<std::size_t>(r.b) * k,
                std::as_bytes(std::span<const std::int64_t>(got)));
    }
  }

  // The kept outputs, in the order the report lists them (each step's logits; per layer the
  // prefill top-k, ffn_out, residual; per decode step and layer its top-k), sized up front
  // against max_kept_bytes with overflow-checked arithmetic.
  void allocate_kept(std::uint64_t max_kept_bytes) {
    struct planned {
      std::string name;
      dsa::dtype type;
      std::vector<index_t> shape;
    };
    std::vector<planned> plan;
    for (index_t s = 0; s <= steps_; ++s)
      plan.push_back({"step" + std::to_string(s) + ".logits", dsa::dtype::f32, {batch_, vocab_}});
    for (index_t l = 0; l < layers_; ++l) {
      const std::string name = "step0.layer" + std::to_string(l);
      plan.push_back({name + ".topk", dsa::dtype::i64, {batch_, len_, k0_}});
      plan.push_back({name + ".ffn_out", dsa::dtype::bf16, {batch_, len_, d_}});
      plan.push_back({name + ".residual", dsa::dtype::bf16, {batch_, len_, d_}});
    }
    for (index_t s = 1; s <= steps_; ++s) {
      for (index_t l = 0; l < layers_; ++l)
        plan.push_back({decode_name(s, l), dsa::dtype::i64, {batch_, 1, decode_width(s)}});
    }
    std::uint64_t total = 0;
    bool ok = true;
    std::vector<std::uint64_t> sizes;
    for (const planned& p : plan) {
      std::uint64_t n = dsa::dtype_size(p.type);
      for (index_t e : p.shape) ok = ok && e >= 0 && mul_ok(n, static_cast<std::uint64_t>(e), n);
      ok = ok && !__builtin_add_overflow(total, n, &total) &&
           !__builtin_add_overflow(total, model_replay_bytes_per_kept_tensor, &total);
      sizes.push_back(n);
    }
    if (!ok || total > max_kept_bytes) {
      throw input_error("dsa_validate: " + file_ + ": computed tensors kept for the dump = " +
                        (ok ? std::to_string(total) + " bytes" : std::string("more than 2^64 bytes")) + " (" +
                        std::to_string(plan.size()) + " tensors: batch " + std::to_string(batch_) + ", prompt " +
                        std::to_string(len_) + ", " + std::to_string(steps_) + " generated, " +
                        std::to_string(layers_) + " layers); expected at most " + std::to_string(max_kept_bytes) +
                        " bytes (the replay's limit; its checks alone keep no outputs: run without --dump)");
    }
    kept_.reserve(plan.size());
    for (std::size_t i = 0; i < plan.size(); ++i) {
      output_tensor o;
      o.name = std::move(plan[i].name);
      o.type = plan[i].type;
      o.shape = std::move(plan[i].shape);
      o.bytes.resize(static_cast<std::size_t>(sizes[i]));
      kept_.push_back(std::move(o));
    }
  }

  const dsa::safetensors_file& exp_;
  std::string file_;  // quoted
  index_t batch_, len_, steps_, layers_, vocab_, index_topk_, k0_, d_;
  bool keep_;
  std::vector<const dsa::tensor_info*> logits_;                  // per step: [B, vocab] F32
  std::vector<const dsa::tensor_info*> prefill_topk_;            // per layer: [B, len, k0] I64
  std::vector<const dsa::tensor_info*> ffn_out_, residual_;      // per layer; null: not comparable
  std::vector<std::vector<comparison>> topk_cmp_;                // per layer, per row
  std::vector<std::vector<index_t>> incomparable_;               // per layer, per row
  std::vector<double> topk_layer_sum_, ffn_err_, residual_err_;  // per layer
  std::vector<double> decode_sum_;                               // per (step - 1, layer): sum over rows
  std::vector<output_tensor> kept_;
  model_case_result out_;
};

}  // namespace model_detail

/// Replays the golden model of expected file `exp` on `m`, the model loaded from its directory
/// (config `cfg`, `num_layers` layers): a dsa::model::transformer, or any Model with its
/// sequence_type, batch_entry, new_sequence and batched forward (the Python binding adapts
/// dsa.parallel.Transformer), so every forward pass is judged by this one set of checks. The
/// observer's views are host views on every backend, so the comparisons are the same code for all.
///
/// Batches: prompt [B, T] and generated [B, S] (B >= 1, as DeepSeek's reference runs them); each
/// batch row is replayed as its own sequence and checked on its own (per row: every step's
/// cosine, the argmax criterion, each layer's prefill top-k agreement). With B = 1 the
/// comparisons keep their plain names (step0.logits); with B > 1 they carry the row,
/// step0.logits[b].
///
/// Rows are streamed in groups of model_replay_group_rows, each group in one batched forward call
/// per step (a row's results are the same bits as alone): each row's logits and traces are
/// compared with the file's row as they arrive and the group's state is released before the next
/// group runs, so without keep_outputs the replay's memory does not grow with B beyond a group. With keep_outputs the computed tensors are written, row
/// by row, into the expected file's [B, ...] layout (result.outputs, for --dump), whose total
/// size is checked against max_kept_bytes (model_replay_max_kept_bytes) before the first row.
///
/// Sizes come from the expected file, so they are checked before anything is sized by them: the
/// prompt plus the generated tokens must fit in max_position_embeddings, every step's logits and
/// every layer's prefill top-k must be present in the replay's shapes. The prompt is prefilled
/// in balanced chunks of at most `max_chunk` tokens (the index scores of a chunk cost chunk x
/// length floats: one piece of a 60K-token prompt is 14 GB); a chunked prefill computes the same
/// bits as one piece on the CPU.
template <class Model>
model_case_result replay_model(Model& m, const dsa::safetensors_file& exp, const dsa::model::config& cfg,
                               index_t num_layers, index_t max_chunk, bool keep_outputs,
                               std::uint64_t max_kept_bytes = model_replay_max_kept_bytes) {
  using namespace model_detail;
  const std::string file = dsa::quoted(exp.path().string());

  const auto prompt = expected<std::int64_t, 2>(exp, "prompt");
  const auto generated = expected<std::int64_t, 2>(exp, "generated");
  const index_t batch = prompt.extent(0);
  if (batch < 1 || generated.extent(0) != batch) {
    throw input_error("dsa_validate: " + file + ": prompt " + dsa::format_shape(prompt.shape) + " and generated " +
                      dsa::format_shape(generated.shape) + "; expected [B, T] and [B, S] with the same B >= 1");
  }
  const index_t len = prompt.extent(1), steps = generated.extent(1);
  // Both are int64 tensors read from the file, so their sum cannot overflow.
  if (len < 1 || len + steps > cfg.max_position_embeddings) {
    throw input_error("dsa_validate: " + file + ": prompt + generated = " + std::to_string(len) + " + " +
                      std::to_string(steps) + " tokens; expected a prompt of at least 1 token and at most " +
                      "max_position_embeddings = " + std::to_string(cfg.max_position_embeddings) +
                      " tokens in all (config.json)");
  }
  if (max_chunk < 1) throw input_error("dsa_validate: max_chunk = " + std::to_string(max_chunk) + "; expected >= 1");
  replay_checks checks(exp, cfg, num_layers, batch, len, steps, keep_outputs, max_kept_bytes);
  // Balanced chunks, so that no chunk is a single token (which would take the decode path, not
  // the prefill the reference runs) unless the prompt is.
  const index_t pieces = dsa::ceil_div(len, max_chunk);
  const index_t chunk = dsa::ceil_div(len, pieces);

  // Groups of rows in one batched forward per step (rows of a file share the prompt length); each
  // row checked as it arrives, and the group released before the next.
  for (index_t b0 = 0; b0 < batch; b0 += model_replay_group_rows) {
    const index_t b1 = std::min(batch, b0 + model_replay_group_rows);
    std::vector<replay_checks::row_state> rows;
    std::vector<std::span<const std::int64_t>> prompts, gens;
    for (index_t b = b0; b < b1; ++b) {
      rows.push_back(checks.start_row(b));
      prompts.push_back(prompt.span().subspan(static_cast<std::size_t>(b * len), static_cast<std::size_t>(len)));
      gens.push_back(generated.span().subspan(static_cast<std::size_t>(b * steps), static_cast<std::size_t>(steps)));
    }
    replay_rows(
        m, prompts, gens, steps, chunk,
        [&](std::size_t i, index_t s, const std::vector<float>& logits) { checks.logits(rows[i], s, logits); },
        [&](std::size_t i, index_t s, const dsa::model::layer_trace& tr) { checks.trace(rows[i], s, tr); });
    for (auto& r : rows) checks.finish_row(r);
  }
  return checks.finish();
}

/// replay_model of the golden model in `dir` on backend `be`: dsa::model::transformer<B> must be
/// complete where this is instantiated (dsa/model/transformer.hpp for host backends,
/// dsa/model/cuda/transformer.cuh for dsa::cuda_backend).
template <class B>
model_case_result run_model_case(const B& be, const std::filesystem::path& dir,
                                 index_t max_chunk = dsa::model::forward_options{}.max_chunk, bool keep_outputs = true,
                                 std::uint64_t max_kept_bytes = model_replay_max_kept_bytes) {
  const dsa::safetensors_file exp = dsa::safetensors_file::open(dir / "expected.safetensors");
  auto m = dsa::model::transformer<B>::load(dir, be);
  return replay_model(m, exp, m.config(), m.num_layers(), max_chunk, keep_outputs, max_kept_bytes);
}

}  // namespace dsa_validate
