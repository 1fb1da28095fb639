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
// validate/cuda_model_case.cu instantiates it for dsa::cuda_backend.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
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
#include "dsa/model/forward.hpp"
#include "dsa/model/safetensors.hpp"
#include "validate/golden_format.hpp"

namespace dsa_validate {

/// Criteria of the README.
inline constexpr double model_min_cosine = 0.99;
inline constexpr double model_max_argmax_mismatches = 1;
inline constexpr double model_min_topk_agreement = 0.98;

/// The outcome of a model replay: the criteria (comparisons) plus diagnostic lines (per-step
/// cosines and argmaxes, per-layer block-output errors of the prefill) and the computed tensors
/// under the expected file's names (for --dump).
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

// Max relative L2 error of computed bf16 rows against expected ones: ||a - b|| / ||b|| per row.
inline double max_row_rel_err(dsa::host_view<const dsa::bf16, 2> got, const host_tensor<dsa::bf16, 3>& want) {
  double worst = 0;
  const index_t rows = got.extent(0), d = got.extent(1);
  for (index_t r = 0; r < rows; ++r) {
    double num = 0, den = 0;
    for (index_t c = 0; c < d; ++c) {
      const double a = got(r, c).to_float(), b = want.data[static_cast<std::size_t>(r * d + c)].to_float();
      num += (a - b) * (a - b);
      den += b * b;
    }
    worst = std::max(worst, den > 0 ? std::sqrt(num / den) : std::sqrt(num));
  }
  return worst;
}

}  // namespace model_detail

namespace model_detail {

// What the replay of one batch row computed, in the expected file's layout with batch 1.
struct row_replay {
  std::vector<std::vector<float>> logits;                       // per step: [vocab]
  std::vector<std::vector<host_tensor<std::int64_t, 3>>> topk;  // per step, per layer: [1, rows, k]
  std::vector<host_tensor<dsa::bf16, 3>> ffn_out, residual;     // per layer: [1, len, d] (prefill)
};

// Replays one sequence: the prompt in balanced chunks of at most `chunk` tokens, then each
// generated token teacher-forced.
template <class Model>
row_replay replay_row(Model& m, std::span<const std::int64_t> prompt, std::span<const std::int64_t> generated,
                      index_t chunk) {
  const auto& cfg = m.config();
  const index_t n_layers = m.num_layers();
  const index_t len = static_cast<index_t>(prompt.size()), steps = static_cast<index_t>(generated.size());
  auto seq = m.new_sequence(len + steps);
  row_replay r;
  r.topk.resize(static_cast<std::size_t>(steps + 1));
  // The prefill's top-k rows are [1, len, min(index_topk, len)] whatever the chunking: a chunk's
  // rows are min(index_topk, chunk end) wide, and the columns past that are -1 (no position).
  const index_t k0 = std::min<index_t>(cfg.index_topk, len), d = cfg.hidden_size;
  for (index_t l = 0; l < n_layers; ++l) {
    r.topk[0].push_back(host_tensor<std::int64_t, 3>::zeros({1, len, k0}));
    r.ffn_out.push_back(host_tensor<dsa::bf16, 3>::zeros({1, len, d}));
    r.residual.push_back(host_tensor<dsa::bf16, 3>::zeros({1, len, d}));
  }
  auto observe = [&](index_t step) {
    dsa::model::forward_options o;
    o.max_chunk = chunk;
    o.observer = [&, step](const dsa::model::layer_trace& tr) {
      const index_t rows = tr.topk.extent(0), kc = tr.topk.extent(1);
      if (step > 0) {
        auto t = host_tensor<std::int64_t, 3>::zeros({1, rows, kc});
        for (index_t i = 0; i < rows; ++i) {
          for (index_t j = 0; j < kc; ++j) t.data[static_cast<std::size_t>(i * kc + j)] = tr.topk(i, j);
        }
        r.topk[static_cast<std::size_t>(step)].push_back(std::move(t));
        return;
      }
      const auto l = static_cast<std::size_t>(tr.layer);
      for (index_t i = 0; i < rows; ++i) {
        const auto row = static_cast<std::size_t>(tr.start + i);
        for (index_t j = 0; j < k0; ++j) {
          const std::int64_t e = j < kc ? std::int64_t{tr.topk(i, j)} : std::int64_t{-1};
          r.topk[0][l].data[row * static_cast<std::size_t>(k0) + static_cast<std::size_t>(j)] = e;
        }
        std::memcpy(&r.ffn_out[l].data[row * static_cast<std::size_t>(d)], tr.ffn_out.row(i), sizeof(dsa::bf16) * d);
        std::memcpy(&r.residual[l].data[row * static_cast<std::size_t>(d)], tr.residual.row(i), sizeof(dsa::bf16) * d);
      }
    };
    return o;
  };
  r.logits.push_back(m.forward(seq, prompt, observe(0)));
  for (index_t s = 0; s < steps; ++s) {
    r.logits.push_back(m.forward(seq, generated.subspan(static_cast<std::size_t>(s), 1), observe(s + 1)));
  }
  return r;
}

// Stacks the batch rows' [1, ...] tensors into one [B, ...] tensor (the expected file's layout).
template <class T, class Get>
host_tensor<T, 3> stack_rows(const std::vector<row_replay>& rows, Get get) {
  const host_tensor<T, 3>& first = get(rows.front());
  auto t = host_tensor<T, 3>::zeros({static_cast<index_t>(rows.size()), first.extent(1), first.extent(2)});
  std::size_t at = 0;
  for (const row_replay& r : rows) {
    const host_tensor<T, 3>& x = get(r);
    if (x.shape != first.shape) throw dsa::error("dsa_validate: batch rows traced different shapes");
    std::copy(x.data.begin(), x.data.end(), t.data.begin() + static_cast<std::ptrdiff_t>(at));
    at += x.data.size();
  }
  return t;
}

// The mean prefill top-k set agreement of one batch row (want: [len, k] at `w`, got: [len, k]);
// counts the rows whose expected entries hold no valid causal position.
inline double prefill_topk_agreement(const std::int64_t* want, const std::int64_t* got, index_t rows, index_t k,
                                     index_t& incomparable) {
  // A prefill row r always has r + 1 >= 1 causal candidates, so an expected row without one valid
  // entry (all -1, or only positions after r) is nonsense and counts as disagreement, never as
  // agreement: an expected file of -1 rows scores 0 and fails.
  double sum = 0;
  incomparable = 0;
  for (index_t r = 0; r < rows; ++r) {
    std::set<std::int64_t> w, g;
    for (index_t j = 0; j < k; ++j) {
      const std::int64_t e = want[r * k + j];
      if (e >= 0 && e <= r) w.insert(e);
      const std::int64_t o = got[r * k + j];
      if (o >= 0) g.insert(o);
    }
    if (w.empty()) {
      ++incomparable;
      continue;
    }
    std::size_t common = 0;
    for (std::int64_t e : w) common += g.count(e);
    sum += double(common) / double(std::max(w.size(), g.size()));
  }
  return rows > 0 ? sum / double(rows) : 0.0;
}

}  // namespace model_detail

/// Replays the golden model in `dir` on backend `be`: dsa::model::transformer<B> must be complete
/// where this is instantiated (dsa/model/transformer.hpp for host backends,
/// dsa/model/cuda/transformer.cuh for dsa::cuda_backend). The observer's views are host views on
/// every backend, so the comparisons below are the same code for all.
///
/// Batches: prompt [B, T] and generated [B, S] (B >= 1, as DeepSeek's reference runs them); each
/// batch row is replayed as its own sequence and checked on its own (per row: every step's
/// cosine, the argmax criterion, each layer's prefill top-k agreement); the computed tensors are
/// stacked back into the expected file's [B, ...] layout for --dump. With B = 1 the comparisons
/// keep their plain names (step0.logits); with B > 1 they carry the row, step0.logits[b].
///
/// Sizes come from the expected file, so they are checked before anything is sized by them: the
/// prompt plus the generated tokens must fit in max_position_embeddings, and every step's logits
/// must be present (a long `generated` costs as many bytes of expected logits as it costs steps).
/// The prompt is prefilled in balanced chunks of at most `max_chunk` tokens (the index scores of
/// a chunk cost chunk x length floats: one piece of a 60K-token prompt is 14 GB); a chunked
/// prefill computes the same bits as one piece on the CPU, and its traces are reassembled here.
template <class B>
model_case_result run_model_case(const B& be, const std::filesystem::path& dir,
                                 index_t max_chunk = dsa::model::forward_options{}.max_chunk) {
  using namespace model_detail;
  model_case_result out;
  out.result.name = "model";
  const dsa::safetensors_file exp = dsa::safetensors_file::open(dir / "expected.safetensors");
  auto m = dsa::model::transformer<B>::load(dir, be);
  const auto& cfg = m.config();
  const index_t n_layers = m.num_layers();
  const std::string file = exp.path().string();

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
  for (index_t s = 0; s <= steps; ++s) {
    const std::string name = "step" + std::to_string(s) + ".logits";
    const dsa::tensor_info* t = exp.find(name);
    if (t == nullptr || t->shape != std::vector<index_t>{batch, cfg.vocab_size}) {
      throw input_error("dsa_validate: " + file + ": " + name + " = " +
                        (t == nullptr ? std::string("missing") : dsa::format_shape(t->shape)) + "; expected [" +
                        std::to_string(batch) + ", " + std::to_string(cfg.vocab_size) +
                        "] (one per step: the prompt's and each of the " + std::to_string(steps) +
                        " generated tokens')");
    }
  }
  if (max_chunk < 1) throw input_error("dsa_validate: max_chunk = " + std::to_string(max_chunk) + "; expected >= 1");
  // Balanced chunks, so that no chunk is a single token (which would take the decode path, not
  // the prefill the reference runs) unless the prompt is.
  const index_t pieces = dsa::ceil_div(len, max_chunk);
  const index_t chunk = dsa::ceil_div(len, pieces);

  std::vector<row_replay> rows;
  rows.reserve(static_cast<std::size_t>(batch));
  for (index_t b = 0; b < batch; ++b) {
    rows.push_back(replay_row(m, prompt.span().subspan(static_cast<std::size_t>(b * len), static_cast<std::size_t>(len)),
                              generated.span().subspan(static_cast<std::size_t>(b * steps), static_cast<std::size_t>(steps)),
                              chunk));
  }
  out.batch = batch;
  const auto row_tag = [&](index_t b) {
    std::string tag;  // appended, not "[" + ...: GCC 12 reports a false -Wrestrict on such chains at -O3
    if (batch > 1) tag.append("[").append(std::to_string(b)).append("]");
    return tag;
  };

  // Logits: per batch row, a cosine per step and the argmax criterion over its steps.
  std::vector<host_tensor<float, 2>> want_logits;
  for (index_t s = 0; s <= steps; ++s) want_logits.push_back(expected<float, 2>(exp, "step" + std::to_string(s) + ".logits"));
  const auto vocab = static_cast<std::size_t>(cfg.vocab_size);
  for (index_t b = 0; b < batch; ++b) {
    int mismatches = 0;
    for (index_t s = 0; s <= steps; ++s) {
      const std::string name = "step" + std::to_string(s) + ".logits" + row_tag(b);
      const std::span<const float> want = want_logits[static_cast<std::size_t>(s)].span().subspan(static_cast<std::size_t>(b) * vocab, vocab);
      const auto& got = rows[static_cast<std::size_t>(b)].logits[static_cast<std::size_t>(s)];
      const double c = cosine(got, want);
      const bool same = argmax(got) == argmax(want);
      out.cosines.push_back(c);
      out.argmax_match.push_back(same ? 1 : 0);
      out.argmax_got.push_back(argmax(got));
      out.argmax_want.push_back(argmax(want));
      mismatches += same ? 0 : 1;
      out.result.comparisons.push_back({name, "1 - cosine", 1.0 - c, 1.0 - model_min_cosine, c >= model_min_cosine});
      out.diagnostics.push_back(name + ": cosine " + fmt(c, 6) + ", argmax " + std::to_string(argmax(got)) +
                                (same ? " (agrees)" : " (expected " + std::to_string(argmax(want)) + ")"));
    }
    out.result.comparisons.push_back({"step*.logits" + row_tag(b), "argmax mismatches", double(mismatches),
                                      model_max_argmax_mismatches, mismatches <= model_max_argmax_mismatches});
  }
  for (index_t s = 0; s <= steps; ++s) {
    const std::array<index_t, 2> shape = {batch, cfg.vocab_size};
    host_tensor<float, 2> g = host_tensor<float, 2>::zeros(shape);
    for (index_t b = 0; b < batch; ++b) {
      const auto& got = rows[static_cast<std::size_t>(b)].logits[static_cast<std::size_t>(s)];
      std::copy(got.begin(), got.end(), g.data.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(b) * vocab));
    }
    out.result.outputs.push_back(make_output("step" + std::to_string(s) + ".logits", g));
  }

  // Prefill top-k agreement per layer and batch row; decode top-k reported as diagnostics.
  for (index_t l = 0; l < n_layers; ++l) {
    const auto li = static_cast<std::size_t>(l);
    const std::string name = "step0.layer" + std::to_string(l) + ".topk";
    const auto want = expected<std::int64_t, 3>(exp, name);
    const auto got = stack_rows<std::int64_t>(rows, [&](const row_replay& r) -> const auto& { return r.topk[0][li]; });
    if (want.shape != got.shape) {
      throw input_error("dsa_validate: " + file + ": " + name + " shape = " + dsa::format_shape(want.shape) +
                        "; expected " + dsa::format_shape(got.shape));
    }
    const index_t k = want.extent(2);
    double layer_sum = 0;
    for (index_t b = 0; b < batch; ++b) {
      index_t incomparable = 0;
      const std::size_t off = static_cast<std::size_t>(b * len * k);
      const double agree = prefill_topk_agreement(want.data.data() + off, got.data.data() + off, len, k, incomparable);
      if (incomparable > 0) {
        out.diagnostics.push_back(name + row_tag(b) + ": " + std::to_string(incomparable) + " of " + std::to_string(len) +
                                  " expected rows hold no valid causal position (counted as disagreement)");
      }
      layer_sum += agree;
      out.result.comparisons.push_back({name + row_tag(b), "1 - mean set agreement", 1.0 - agree,
                                        1.0 - model_min_topk_agreement, agree >= model_min_topk_agreement});
    }
    out.topk_agreement.push_back(layer_sum / double(batch));
    out.result.outputs.push_back(make_output(name, got));
    // Diagnostics: the block outputs of the prefill.
    const std::string lname = "step0.layer" + std::to_string(l);
    const auto go = stack_rows<dsa::bf16>(rows, [&](const row_replay& r) -> const auto& { return r.ffn_out[li]; });
    const auto gr = stack_rows<dsa::bf16>(rows, [&](const row_replay& r) -> const auto& { return r.residual[li]; });
    const auto eo = expected<dsa::bf16, 3>(exp, lname + ".ffn_out");
    const auto er = expected<dsa::bf16, 3>(exp, lname + ".residual");
    if (eo.shape == go.shape && er.shape == gr.shape) {
      const dsa::host_view<const dsa::bf16, 2> gov(go.data.data(), {go.extent(0) * go.extent(1), go.extent(2)});
      const dsa::host_view<const dsa::bf16, 2> grv(gr.data.data(), {gr.extent(0) * gr.extent(1), gr.extent(2)});
      out.diagnostics.push_back(lname + ": top-k agreement " + fmt(out.topk_agreement.back(), 4) +
                                ", max row rel err ffn_out " + fmt(max_row_rel_err(gov, eo), 4) + ", residual " +
                                fmt(max_row_rel_err(grv, er), 4));
    }
    out.result.outputs.push_back(make_output(lname + ".ffn_out", go));
    out.result.outputs.push_back(make_output(lname + ".residual", gr));
  }
  for (index_t s = 1; s <= steps; ++s) {
    double sum = 0;
    for (index_t l = 0; l < n_layers; ++l) {
      const std::string name = "step" + std::to_string(s) + ".layer" + std::to_string(l) + ".topk";
      const auto got = stack_rows<std::int64_t>(rows, [&](const row_replay& r) -> const auto& {
        return r.topk[static_cast<std::size_t>(s)][static_cast<std::size_t>(l)];
      });
      out.result.outputs.push_back(make_output(name, got));
      const dsa::tensor_info* t = exp.find(name);
      if (!t) continue;
      const auto want = expected<std::int64_t, 3>(exp, name);
      if (want.shape != got.shape) continue;
      const std::size_t per_row = got.data.size() / static_cast<std::size_t>(batch);
      for (std::size_t b = 0; b < static_cast<std::size_t>(batch); ++b) {
        std::set<std::int64_t> w(want.data.begin() + static_cast<std::ptrdiff_t>(b * per_row),
                                 want.data.begin() + static_cast<std::ptrdiff_t>((b + 1) * per_row));
        std::set<std::int64_t> g(got.data.begin() + static_cast<std::ptrdiff_t>(b * per_row),
                                 got.data.begin() + static_cast<std::ptrdiff_t>((b + 1) * per_row));
        std::size_t common = 0;
        for (std::int64_t e : w) common += g.count(e);
        sum += double(common) / double(std::max<std::size_t>(1, w.size()));
      }
    }
    out.diagnostics.push_back("step" + std::to_string(s) + ": decode top-k agreement (mean over layers" +
                              std::string(batch > 1 ? " and batch rows" : "") + ") " +
                              fmt(sum / double(std::max<index_t>(1, n_layers * batch)), 4));
  }
  return out;
}

}  // namespace dsa_validate
