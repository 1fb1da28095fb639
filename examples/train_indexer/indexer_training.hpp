// Training a lightning indexer with the KL losses of DeepSeek-V3.2 (paper eqs. 3 and 4): the
// code of examples/train_indexer, shared with its test (tests/examples/test_train_indexer.cpp).
// An example, not library code: it shows how dsa's ops compose into a training step.
//
//   layer_data      runs a checkpoint's layers [0, L) on a token sequence (dsa::model::transformer)
//                   and the MLA of layer L over ALL causal keys: the indexer's inputs x and qr and
//                   the per-head attention probabilities that are the KL target.
//   indexer_params  a fresh fp32 indexer: wq_b, wk, the key LayerNorm, weights_proj.
//   run_indexer     its forward pass (unquantized), the loss, the top-k recall and, on request,
//                   the gradient of every parameter (backprop written out below).
//   adam            the optimiser.
//
// The trained indexer stays in fp32 throughout: no FP8 codes, no act_quant of q and k, no k
// scale (k_scale = 1). FP8 is an inference format; quantizing at export (as the checkpoint
// does) is a separate step. The forward pass is the inference indexer of docs/design.md "Indexer" with the
// quantization removed:
//   q = Hadamard(RoPE_half(wq_b · qr viewed [t, H, 128]))     (RoPE on the first 64 dims)
//   k = Hadamard(RoPE_half(LayerNorm(wk · x)))
//   w = (weights_proj · x) · (H^-0.5 · 128^-0.5)
//   I[t, s] = sum_h w[t, h] · ReLU(q[t, h] · k[s]),  s <= t.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/cpu/hadamard.hpp"
#include "dsa/cpu/indexer_kl_loss.hpp"
#include "dsa/cpu/lightning_indexer.hpp"
#include "dsa/cpu/linear.hpp"
#include "dsa/cpu/topk.hpp"
#include "dsa/model/transformer.hpp"
#include "dsa/numerics/rope.hpp"
#include "dsa/ops/hadamard.hpp"
#include "dsa/ops/indexer_kl_loss.hpp"
#include "dsa/ops/lightning_indexer.hpp"
#include "dsa/ops/linear.hpp"
#include "dsa/ops/topk.hpp"

namespace train_indexer {

using dsa::index_t;

// ---------------------------------------------------------------------------------------------
// Training data: one token sequence seen by layer L.

/// What layer L of the model sees for one sequence of t tokens at positions [0, t).
struct layer_sample {
  index_t tokens = 0;
  std::vector<float> x;         ///< [t, hidden] the layer's attention input (attn_norm output, bf16 values)
  std::vector<float> qr;        ///< [t, q_lora_rank] MLA's q_norm output, the indexer's query input
  std::vector<float> attn;      ///< [t, heads, t] MLA's softmax probabilities over ALL causal keys (0 for s > t)
  std::vector<float> attn_out;  ///< [t, hidden] wo · (P · V) with those probabilities (bf16 values)
};

/// Layer L's inputs and dense attention for token sequences of a checkpoint. The layers before
/// L run as dsa::model::transformer runs them; layer L's MLA is recomputed with the same ops
/// (projections, q_norm / kv_norm, the FP8 round trip of the latent, interleaved RoPE, wkv_b)
/// but attends to every causal key instead of the indexer's top-k: the distribution the
/// indexer is trained to predict. Logits are fp32 dot products of the bf16 q and keys (the
/// reference rounds them to bf16; a training target need not reproduce that rounding).
class layer_data {
 public:
  layer_data(const std::filesystem::path& dir, index_t layer, dsa::cpu_backend be)
      : w_(dsa::model::weights::load(dir)), be_(be) {
    const auto& c = w_.config();
    if (layer < 0 || layer >= c.num_hidden_layers) {
      dsa::fail("train_indexer::layer_data", "layer", layer,
                "a layer index in [0, num_hidden_layers = " + std::to_string(c.num_hidden_layers) + ")");
    }
    if (c.qk_rope_head_dim > c.index_head_dim) {
      dsa::fail("train_indexer::layer_data", "qk_rope_head_dim", c.qk_rope_head_dim,
                "<= index_head_dim = " + std::to_string(c.index_head_dim) + " (RoPE covers the first dims)");
    }
    layer_ = layer;
    fmt_ = c.ue8m0_scales() ? dsa::scale_format::ue8m0 : dsa::scale_format::fp32;
    rope_ = dsa::model::rope_config_of(c);
    if (layer > 0) prefix_.emplace(dsa::model::transformer<dsa::cpu_backend>::load(dir, be, layer));
  }

  const dsa::model::config& config() const { return w_.config(); }
  index_t layer() const { return layer_; }
  const dsa::rope_config& rope() const { return rope_; }

  /// n token ids uniform in [0, vocab_size).
  std::vector<std::int32_t> random_tokens(index_t n, std::mt19937_64& rng) const {
    std::uniform_int_distribution<std::int32_t> d(0, static_cast<std::int32_t>(config().vocab_size - 1));
    std::vector<std::int32_t> v(static_cast<std::size_t>(n));
    for (auto& t : v) t = d(rng);
    return v;
  }

  /// Layer L's view of `tokens` placed at positions [0, tokens.size()).
  layer_sample make(std::span<const std::int32_t> tokens) {
    using dsa::bf16;
    using dsa::make_view;
    const auto& c = config();
    const index_t t = static_cast<index_t>(tokens.size()), d = c.hidden_size;
    if (t < 1 || t > c.max_position_embeddings) {
      dsa::fail("train_indexer::layer_data::make", "tokens.size()", t,
                "in [1, max_position_embeddings = " + std::to_string(c.max_position_embeddings) + "]");
    }
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
        dsa::fail("train_indexer::layer_data::make", "tokens[" + std::to_string(i) + "]", tokens[i],
                  "a token id in [0, vocab_size = " + std::to_string(c.vocab_size) + ")");
      }
    }
    // The block output h and the residual stream after layer L - 1; x = attn_norm_L(h + residual)
    // exactly as the transformer computes it. Before layer 0: the embedding and a zero residual.
    std::vector<bf16> h(static_cast<std::size_t>(t * d)), residual(h.size(), bf16(0.0f)), x(h.size());
    if (prefix_) {
      dsa::model::forward_options opt;
      opt.max_chunk = t;
      opt.observer = [&](const dsa::model::layer_trace& tr) {
        if (tr.layer != layer_ - 1) return;
        for (index_t i = 0; i < t; ++i) {
          std::copy_n(tr.ffn_out.row(i), d, h.data() + i * d);
          std::copy_n(tr.residual.row(i), d, residual.data() + i * d);
        }
      };
      auto seq = prefix_->new_sequence(t);
      prefix_->forward(seq, tokens, opt);
    } else {
      for (index_t i = 0; i < t; ++i) std::copy_n(w_.embed_tokens.row(tokens[static_cast<std::size_t>(i)]), d, h.data() + i * d);
    }
    const auto& lw = w_.layers[static_cast<std::size_t>(layer_)];
    add_rms_norm(be_, make_view(static_cast<const bf16*>(h.data()), {t, d}), make_view(residual.data(), {t, d}),
                 lw.input_layernorm, make_view(x.data(), {t, d}), c.rms_norm_eps);
    return mla_dense(lw.attn, x, t);
  }

 private:
  layer_sample mla_dense(const dsa::model::attention_weights& aw, const std::vector<dsa::bf16>& x, index_t t) {
    using dsa::bf16;
    using dsa::make_view;
    const auto& c = config();
    const dsa::model::layer_context<dsa::cpu_backend> ctx{be_, c, fmt_, rope_, nullptr};
    const index_t d = c.hidden_size, h = c.num_attention_heads, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim;
    const index_t dqk = nope + rope, dv = c.v_head_dim, cl = c.kv_lora_rank, ql = c.q_lora_rank;
    const float eps = c.rms_norm_eps;
    std::vector<std::int32_t> positions(static_cast<std::size_t>(t));
    for (index_t i = 0; i < t; ++i) positions[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
    const auto pos = make_view(static_cast<const std::int32_t*>(positions.data()), {t});
    const auto xv = make_view(static_cast<const bf16*>(x.data()), {t, d});

    std::vector<bf16> qr(static_cast<std::size_t>(t * ql)), q(static_cast<std::size_t>(t * h * dqk));
    const auto qrv = make_view(qr.data(), {t, ql});
    dsa::model::project(ctx, xv, aw.q_a_proj, qrv);
    rms_norm(be_, qrv, aw.q_a_layernorm, qrv, eps);
    dsa::model::project(ctx, dsa::host_view<const bf16, 2>(qrv), aw.q_b_proj, make_view(q.data(), {t, h * dqk}));
    rope_apply(be_, dsa::host_view<bf16, 3>(q.data() + nope, {t, h, rope}, {h * dqk, dqk, 1}), pos, rope_,
               dsa::rope_layout::interleaved);

    std::vector<bf16> kv(static_cast<std::size_t>(t * (cl + rope))), latent(static_cast<std::size_t>(t * cl));
    const auto kvv = make_view(kv.data(), {t, cl + rope});
    dsa::model::project(ctx, xv, aw.kv_a_proj_with_mqa, kvv);
    const auto lat_in = dsa::model::block(kvv, 0, 0, t, cl);
    rms_norm(be_, lat_in, aw.kv_a_layernorm, lat_in, eps);
    std::vector<dsa::fp8_e4m3> c8(static_cast<std::size_t>(t * cl));
    std::vector<float> cs(static_cast<std::size_t>(t * (cl / 128)));
    act_quant(be_, lat_in, make_view(c8.data(), {t, cl}), make_view(cs.data(), {t, cl / 128}),
              dsa::act_quant_config{fmt_, 128});
    act_dequant(be_, make_view(static_cast<const dsa::fp8_e4m3*>(c8.data()), {t, cl}),
                make_view(static_cast<const float*>(cs.data()), {t, cl / 128}), make_view(latent.data(), {t, cl}));
    rope_apply(be_, dsa::host_view<bf16, 3>(kv.data() + cl, {t, 1, rope}, {cl + rope, rope, 1}), pos, rope_,
               dsa::rope_layout::interleaved);
    std::vector<bf16> kvb(static_cast<std::size_t>(t * h * (nope + dv)));
    dsa::model::project(ctx, make_view(static_cast<const bf16*>(latent.data()), {t, cl}), aw.kv_b_proj,
                        make_view(kvb.data(), {t, h * (nope + dv)}));

    layer_sample s;
    s.tokens = t;
    s.x.resize(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) s.x[i] = x[i].to_float();
    s.qr.resize(qr.size());
    for (std::size_t i = 0; i < qr.size(); ++i) s.qr[i] = qr[i].to_float();
    s.attn.assign(static_cast<std::size_t>(t * h * t), 0.0f);
    std::vector<bf16> o(static_cast<std::size_t>(t * h * dv));
    const double scale = c.softmax_scale();
    dsa::cpu_detail::parallel_for(be_, t, 8, [&](index_t b, index_t e) {
      std::vector<double> logit(static_cast<std::size_t>(t)), acc(static_cast<std::size_t>(dv));
      for (index_t i = b; i < e; ++i) {
        for (index_t hh = 0; hh < h; ++hh) {
          const bf16* qi = q.data() + (i * h + hh) * dqk;
          double mx = -HUGE_VAL;
          for (index_t j = 0; j <= i; ++j) {
            const bf16* kn = kvb.data() + (j * h + hh) * (nope + dv);
            const bf16* kp = kv.data() + j * (cl + rope) + cl;
            float dot = 0.0f;
            for (index_t r = 0; r < nope; ++r) dot += qi[r].to_float() * kn[r].to_float();
            for (index_t r = 0; r < rope; ++r) dot += qi[nope + r].to_float() * kp[r].to_float();
            logit[static_cast<std::size_t>(j)] = scale * static_cast<double>(dot);
            mx = std::max(mx, logit[static_cast<std::size_t>(j)]);
          }
          double sum = 0.0;
          for (index_t j = 0; j <= i; ++j) sum += std::exp(logit[static_cast<std::size_t>(j)] - mx);
          std::fill(acc.begin(), acc.end(), 0.0);
          float* prow = s.attn.data() + (i * h + hh) * t;
          for (index_t j = 0; j <= i; ++j) {
            const double p = std::exp(logit[static_cast<std::size_t>(j)] - mx) / sum;
            prow[j] = static_cast<float>(p);
            const bf16* v = kvb.data() + (j * h + hh) * (nope + dv) + nope;
            for (index_t r = 0; r < dv; ++r) acc[static_cast<std::size_t>(r)] += p * v[r].to_float();
          }
          for (index_t r = 0; r < dv; ++r) o[static_cast<std::size_t>((i * h + hh) * dv + r)] = bf16(static_cast<float>(acc[static_cast<std::size_t>(r)]));
        }
      }
    });
    std::vector<bf16> out(static_cast<std::size_t>(t * d));
    dsa::model::project(ctx, make_view(static_cast<const bf16*>(o.data()), {t, h * dv}), aw.o_proj,
                        make_view(out.data(), {t, d}));
    s.attn_out.resize(out.size());
    for (std::size_t i = 0; i < out.size(); ++i) s.attn_out[i] = out[i].to_float();
    return s;
  }

  dsa::model::weights w_;
  dsa::cpu_backend be_;
  index_t layer_ = 0;
  dsa::scale_format fmt_ = dsa::scale_format::ue8m0;
  dsa::rope_config rope_;
  std::optional<dsa::model::transformer<dsa::cpu_backend>> prefix_;  // layers [0, layer)
};

// ---------------------------------------------------------------------------------------------
// The trainable indexer.

struct indexer_dims {
  index_t heads = 0;     ///< index_n_heads
  index_t dim = 0;       ///< index_head_dim (128: the Hadamard size)
  index_t rope_dim = 0;  ///< qk_rope_head_dim: RoPE on the first rope_dim dims of q and k
  index_t hidden = 0;
  index_t q_lora = 0;

  static indexer_dims of(const dsa::model::config& c) {
    return {c.index_n_heads, c.index_head_dim, c.qk_rope_head_dim, c.hidden_size, c.q_lora_rank};
  }
};

/// The indexer's parameters in fp32, named as in the checkpoint.
struct indexer_params {
  indexer_dims dims;
  std::vector<float> wq_b;           ///< [heads * dim, q_lora]
  std::vector<float> wk;             ///< [dim, hidden]
  std::vector<float> k_norm_weight;  ///< [dim]
  std::vector<float> k_norm_bias;    ///< [dim]
  std::vector<float> weights_proj;   ///< [heads, hidden]

  /// Every tensor 0.
  static indexer_params zeros(const indexer_dims& d) {
    indexer_params p;
    p.dims = d;
    p.wq_b.assign(static_cast<std::size_t>(d.heads * d.dim * d.q_lora), 0.0f);
    p.wk.assign(static_cast<std::size_t>(d.dim * d.hidden), 0.0f);
    p.k_norm_weight.assign(static_cast<std::size_t>(d.dim), 0.0f);
    p.k_norm_bias.assign(static_cast<std::size_t>(d.dim), 0.0f);
    p.weights_proj.assign(static_cast<std::size_t>(d.heads * d.hidden), 0.0f);
    return p;
  }

  /// A fresh indexer: linear weights N(0, 1/in) (the scale of the checkpoint generator), the
  /// LayerNorm at identity (weight 1, bias 0), as a freshly constructed torch module would be
  /// up to the linear init.
  static indexer_params random(const indexer_dims& d, std::uint64_t seed) {
    indexer_params p = zeros(d);
    std::mt19937_64 rng(seed);
    auto fill = [&](std::vector<float>& v, index_t in) {
      std::normal_distribution<float> n(0.0f, static_cast<float>(1.0 / std::sqrt(static_cast<double>(in))));
      for (auto& x : v) x = n(rng);
    };
    fill(p.wq_b, d.q_lora);
    fill(p.wk, d.hidden);
    fill(p.weights_proj, d.hidden);
    std::fill(p.k_norm_weight.begin(), p.k_norm_weight.end(), 1.0f);
    return p;
  }

  /// f(name, tensor) for each of the five tensors, in a fixed order.
  template <class F>
  void for_each(F&& f) {
    f("wq_b", wq_b);
    f("wk", wk);
    f("k_norm.weight", k_norm_weight);
    f("k_norm.bias", k_norm_bias);
    f("weights_proj", weights_proj);
  }
  template <class F>
  void for_each(F&& f) const {
    f("wq_b", wq_b);
    f("wk", wk);
    f("k_norm.weight", k_norm_weight);
    f("k_norm.bias", k_norm_bias);
    f("weights_proj", weights_proj);
  }
};

enum class loss_kind {
  dense,  ///< eq. 3: KL over every causal key
  sparse  ///< eq. 4: KL over the indexer's own top-k selection
};

/// Per-sample results; sums over query rows, so samples and batches add up.
struct sample_metrics {
  double loss = 0;      ///< the trained loss (dense or sparse KL), summed over rows
  double dense_kl = 0;  ///< the dense KL (eq. 3) summed over rows, whatever the loss
  index_t rows = 0;
  /// Over rows with more than k causal keys (rows with fewer select every key: recall 1):
  double recall = 0;    ///< sum of the attention mass inside the indexer's top-k
  double baseline = 0;  ///< sum of k / causal length: the expected recall of k random keys
  double oracle = 0;    ///< sum of the mass of the k most attended keys: the best any selection can do
  index_t recall_rows = 0;

  sample_metrics& operator+=(const sample_metrics& o) {
    loss += o.loss;
    dense_kl += o.dense_kl;
    rows += o.rows;
    recall += o.recall;
    baseline += o.baseline;
    oracle += o.oracle;
    recall_rows += o.recall_rows;
    return *this;
  }
};

namespace detail {

using row_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using cmap = Eigen::Map<const row_matrix>;
using map = Eigen::Map<row_matrix>;

// dW [out, in] += G^T X for G [t, out], X [t, in]: the weight gradient of y = x · W^T.
inline void add_weight_grad(std::vector<float>& dw, const std::vector<float>& g, const std::vector<float>& x, index_t t,
                            index_t out, index_t in) {
  map(dw.data(), out, in).noalias() += cmap(g.data(), t, out).transpose() * cmap(x.data(), t, in);
}

// cos/sin of RoPE pair j at position i, [t, rope_dim / 2].
inline std::vector<dsa::rope_cos_sin> rope_table(const dsa::rope_config& cfg, index_t t) {
  const index_t half = cfg.dim / 2;
  std::vector<dsa::rope_cos_sin> cs(static_cast<std::size_t>(t * half));
  for (index_t j = 0; j < half; ++j) {
    const float f = dsa::rope_inv_freq(cfg, j);
    for (index_t i = 0; i < t; ++i) cs[static_cast<std::size_t>(i * half + j)] = dsa::rope_cos_sin_at(static_cast<std::int32_t>(i), f);
  }
  return cs;
}

// Non-interleaved RoPE (pairs (j, j + rope_dim/2)) on the first rope_dim values of each of the
// `per_token` vectors of length `dim` of every token. inverse = rotate by minus the angle: the
// transpose of the rotation, i.e. its backward pass.
inline void rope_half(std::vector<float>& v, index_t t, index_t per_token, index_t dim, index_t rope_dim,
                      const std::vector<dsa::rope_cos_sin>& cs, bool inverse) {
  const index_t half = rope_dim / 2;
  for (index_t i = 0; i < t; ++i) {
    for (index_t h = 0; h < per_token; ++h) {
      float* row = v.data() + (i * per_token + h) * dim;
      for (index_t j = 0; j < half; ++j) {
        dsa::rope_cos_sin c = cs[static_cast<std::size_t>(i * half + j)];
        if (inverse) c.sin = -c.sin;
        dsa::rope_rotate(row[j], row[j + half], c);
      }
    }
  }
}

}  // namespace detail

/// Runs the indexer `p` on one sample: scores, its top-k selection (k keys per row), the loss
/// `kind`, the recall metrics and, when `grad` is given, adds grad_scale · d(loss)/d(params) to
/// it. For the sparse loss, `fixed_selection` [t, k] (if given) replaces the indexer's own
/// selection (a finite-difference check must hold the discrete selection fixed);
/// `selection_out` receives the selection used.
inline sample_metrics run_indexer(const dsa::cpu_backend& be, const indexer_params& p, const layer_sample& s,
                                  const dsa::rope_config& rope, index_t attn_heads, index_t k, loss_kind kind,
                                  indexer_params* grad = nullptr, float grad_scale = 1.0f,
                                  const std::vector<std::int32_t>* fixed_selection = nullptr,
                                  std::vector<std::int32_t>* selection_out = nullptr) {
  using dsa::make_view;
  const indexer_dims& d = p.dims;
  const index_t t = s.tokens, H = d.heads, D = d.dim;
  constexpr std::string_view op = "train_indexer::run_indexer";
  if (k < 1) dsa::fail(op, "k", k, ">= 1");
  if (rope.dim != d.rope_dim) dsa::fail(op, "rope.dim", rope.dim, "indexer_dims::rope_dim = " + std::to_string(d.rope_dim));
  auto check_size = [&](std::string_view name, std::size_t size, index_t want, const char* what) {
    if (static_cast<index_t>(size) != want) dsa::fail(op, name, size, std::to_string(want) + " (" + what + ")");
  };
  check_size("s.x.size()", s.x.size(), t * d.hidden, "tokens * hidden");
  check_size("s.qr.size()", s.qr.size(), t * d.q_lora, "tokens * q_lora");
  check_size("p.wq_b.size()", p.wq_b.size(), H * D * d.q_lora, "heads * dim * q_lora");
  check_size("p.wk.size()", p.wk.size(), D * d.hidden, "dim * hidden");
  check_size("p.k_norm_weight.size()", p.k_norm_weight.size(), D, "dim");
  check_size("p.k_norm_bias.size()", p.k_norm_bias.size(), D, "dim");
  check_size("p.weights_proj.size()", p.weights_proj.size(), H * d.hidden, "heads * hidden");
  if (grad) {
    check_size("grad->wq_b.size()", grad->wq_b.size(), H * D * d.q_lora, "the size of p.wq_b");
    check_size("grad->wk.size()", grad->wk.size(), D * d.hidden, "the size of p.wk");
    check_size("grad->k_norm_weight.size()", grad->k_norm_weight.size(), D, "the size of p.k_norm_weight");
    check_size("grad->k_norm_bias.size()", grad->k_norm_bias.size(), D, "the size of p.k_norm_bias");
    check_size("grad->weights_proj.size()", grad->weights_proj.size(), H * d.hidden, "the size of p.weights_proj");
  }
  if (static_cast<index_t>(s.attn.size()) != t * attn_heads * t) {
    dsa::fail(op, "s.attn.size()", s.attn.size(), "tokens * attn_heads * tokens");
  }
  if (fixed_selection && static_cast<index_t>(fixed_selection->size()) != t * k) {
    dsa::fail(op, "fixed_selection->size()", fixed_selection->size(), "tokens * k = " + std::to_string(t * k));
  }
  const float hadamard_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const float w_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(H) * static_cast<double>(D)));
  const auto cs = detail::rope_table(rope, t);

  // ---- forward -------------------------------------------------------------------------------
  std::vector<float> q(static_cast<std::size_t>(t * H * D));
  linear(be, make_view(s.qr.data(), {t, d.q_lora}), make_view(p.wq_b.data(), {H * D, d.q_lora}),
         make_view(q.data(), {t, H * D}));
  detail::rope_half(q, t, H, D, d.rope_dim, cs, false);
  hadamard_transform(be, make_view(static_cast<const float*>(q.data()), {t * H, D}), make_view(q.data(), {t * H, D}),
                     hadamard_scale);

  std::vector<float> k_lin(static_cast<std::size_t>(t * D)), xhat(k_lin.size()), rstd(static_cast<std::size_t>(t)),
      key(k_lin.size());
  linear(be, make_view(s.x.data(), {t, d.hidden}), make_view(p.wk.data(), {D, d.hidden}),
         make_view(k_lin.data(), {t, D}));
  for (index_t i = 0; i < t; ++i) {  // LayerNorm, eps 1e-6 as the reference; statistics in double
    const float* u = k_lin.data() + i * D;
    double mean = 0, var = 0;
    for (index_t j = 0; j < D; ++j) mean += u[j];
    mean /= static_cast<double>(D);
    for (index_t j = 0; j < D; ++j) var += (u[j] - mean) * (u[j] - mean);
    var /= static_cast<double>(D);
    const double r = 1.0 / std::sqrt(var + 1e-6);
    rstd[static_cast<std::size_t>(i)] = static_cast<float>(r);
    for (index_t j = 0; j < D; ++j) {
      const float xh = static_cast<float>((u[j] - mean) * r);
      xhat[static_cast<std::size_t>(i * D + j)] = xh;
      key[static_cast<std::size_t>(i * D + j)] = xh * p.k_norm_weight[static_cast<std::size_t>(j)] +
                                                 p.k_norm_bias[static_cast<std::size_t>(j)];
    }
  }
  detail::rope_half(key, t, 1, D, d.rope_dim, cs, false);
  hadamard_transform(be, make_view(static_cast<const float*>(key.data()), {t, D}), make_view(key.data(), {t, D}),
                     hadamard_scale);

  std::vector<float> w(static_cast<std::size_t>(t * H));
  linear(be, make_view(s.x.data(), {t, d.hidden}), make_view(p.weights_proj.data(), {H, d.hidden}),
         make_view(w.data(), {t, H}));
  for (auto& v : w) v *= w_scale;

  std::vector<float> ones(static_cast<std::size_t>(t), 1.0f), scores(static_cast<std::size_t>(t * t));
  std::vector<std::int32_t> ranges(static_cast<std::size_t>(2 * t));
  for (index_t i = 0; i < t; ++i) {
    ranges[static_cast<std::size_t>(2 * i)] = 0;
    ranges[static_cast<std::size_t>(2 * i + 1)] = static_cast<std::int32_t>(i + 1);
  }
  const auto qv = make_view(static_cast<const float*>(q.data()), {t, H, D});
  const auto wv = make_view(static_cast<const float*>(w.data()), {t, H});
  const auto kv = make_view(static_cast<const float*>(key.data()), {t, D});
  const auto ksv = make_view(static_cast<const float*>(ones.data()), {t});
  const auto rv = make_view(static_cast<const std::int32_t*>(ranges.data()), {t, index_t{2}});
  lightning_indexer_scores(be, qv, wv, kv, ksv, rv, make_view(scores.data(), {t, t}));
  const auto sv = make_view(static_cast<const float*>(scores.data()), {t, t});

  std::vector<std::int32_t> sel(static_cast<std::size_t>(t * k));
  topk_indices(be, sv, rv, k, make_view(sel.data(), {t, k}));

  // ---- loss and metrics ----------------------------------------------------------------------
  const auto av = make_view(s.attn.data(), {t, attn_heads, t});
  std::vector<float> g(static_cast<std::size_t>(t * t));
  float loss = 0.0f, dense = 0.0f;
  indexer_kl_loss_dense(be, av, sv, rv, make_view(&dense, {index_t{1}}), make_view(g.data(), {t, t}));
  if (kind == loss_kind::sparse) {
    const std::vector<std::int32_t>& use = fixed_selection ? *fixed_selection : sel;
    indexer_kl_loss_sparse(be, av, sv, make_view(use.data(), {t, k}), make_view(&loss, {index_t{1}}),
                           make_view(g.data(), {t, t}));
  } else {
    loss = dense;
  }
  sample_metrics m;
  m.loss = loss;
  m.dense_kl = dense;
  m.rows = t;
  std::vector<double> pt(static_cast<std::size_t>(t));
  for (index_t i = k; i < t; ++i) {  // rows with i + 1 > k causal keys
    double total = 0;
    for (index_t j = 0; j <= i; ++j) {
      double v = 0;
      for (index_t hh = 0; hh < attn_heads; ++hh) v += av(i, hh, j);
      pt[static_cast<std::size_t>(j)] = v;
      total += v;
    }
    double in_sel = 0;
    for (index_t r = 0; r < k; ++r) {
      const std::int32_t j = sel[static_cast<std::size_t>(i * k + r)];
      if (j >= 0 && j <= i) in_sel += pt[static_cast<std::size_t>(j)];
    }
    std::partial_sort(pt.begin(), pt.begin() + k, pt.begin() + (i + 1), std::greater<>());
    double best = 0;
    for (index_t r = 0; r < k; ++r) best += pt[static_cast<std::size_t>(r)];
    m.recall += in_sel / total;
    m.oracle += best / total;
    m.baseline += static_cast<double>(k) / static_cast<double>(i + 1);
    ++m.recall_rows;
  }
  if (selection_out) *selection_out = sel;
  if (!grad) return m;

  // ---- backward ------------------------------------------------------------------------------
  for (auto& v : g) v *= grad_scale;
  std::vector<float> gq(q.size()), gw(w.size()), gk(key.size());
  lightning_indexer_backward(be, qv, wv, kv, ksv, rv, make_view(static_cast<const float*>(g.data()), {t, t}),
                             make_view(gq.data(), {t, H, D}), make_view(gw.data(), {t, H}),
                             make_view(gk.data(), {t, D}));
  // w = (weights_proj · x) · w_scale.
  for (auto& v : gw) v *= w_scale;
  detail::add_weight_grad(grad->weights_proj, gw, s.x, t, H, d.hidden);
  // The Hadamard matrix is symmetric, so the transform is its own transpose: the same scaled
  // transform maps dL/dy to dL/dx. RoPE is a rotation: its transpose rotates by minus the angle.
  hadamard_transform(be, make_view(static_cast<const float*>(gq.data()), {t * H, D}), make_view(gq.data(), {t * H, D}),
                     hadamard_scale);
  detail::rope_half(gq, t, H, D, d.rope_dim, cs, true);
  detail::add_weight_grad(grad->wq_b, gq, s.qr, t, H * D, d.q_lora);
  hadamard_transform(be, make_view(static_cast<const float*>(gk.data()), {t, D}), make_view(gk.data(), {t, D}),
                     hadamard_scale);
  detail::rope_half(gk, t, 1, D, d.rope_dim, cs, true);
  // LayerNorm: y = xhat · gamma + beta, xhat = (u - mean) · rstd;
  // du = rstd · (gy·gamma - mean(gy·gamma) - xhat · mean(gy·gamma · xhat)).
  std::vector<float> gu(gk.size());
  for (index_t i = 0; i < t; ++i) {
    double mean_g = 0, mean_gx = 0;
    for (index_t j = 0; j < D; ++j) {
      const std::size_t e = static_cast<std::size_t>(i * D + j);
      const double gy = gk[e];
      grad->k_norm_weight[static_cast<std::size_t>(j)] += static_cast<float>(gy * xhat[e]);
      grad->k_norm_bias[static_cast<std::size_t>(j)] += static_cast<float>(gy);
      const double gh = gy * p.k_norm_weight[static_cast<std::size_t>(j)];
      mean_g += gh;
      mean_gx += gh * xhat[e];
    }
    mean_g /= static_cast<double>(D);
    mean_gx /= static_cast<double>(D);
    for (index_t j = 0; j < D; ++j) {
      const std::size_t e = static_cast<std::size_t>(i * D + j);
      const double gh = static_cast<double>(gk[e]) * p.k_norm_weight[static_cast<std::size_t>(j)];
      gu[e] = static_cast<float>(rstd[static_cast<std::size_t>(i)] * (gh - mean_g - xhat[e] * mean_gx));
    }
  }
  detail::add_weight_grad(grad->wk, gu, s.x, t, D, d.hidden);
  return m;
}

// ---------------------------------------------------------------------------------------------
// Adam (Kingma & Ba), bias-corrected, no weight decay.

struct adam_config {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

class adam {
 public:
  adam(const indexer_dims& d, adam_config cfg) : cfg_(cfg), m_(indexer_params::zeros(d)), v_(indexer_params::zeros(d)) {}

  void step(indexer_params& p, const indexer_params& g) {
    ++t_;
    const double c1 = 1.0 - std::pow(static_cast<double>(cfg_.beta1), static_cast<double>(t_));
    const double c2 = 1.0 - std::pow(static_cast<double>(cfg_.beta2), static_cast<double>(t_));
    std::vector<const std::vector<float>*> gs;
    g.for_each([&](const char*, const std::vector<float>& v) { gs.push_back(&v); });
    std::vector<std::vector<float>*> ms, vs;
    m_.for_each([&](const char*, std::vector<float>& v) { ms.push_back(&v); });
    v_.for_each([&](const char*, std::vector<float>& v) { vs.push_back(&v); });
    std::size_t i = 0;
    p.for_each([&](const char*, std::vector<float>& w) {
      const auto& gt = *gs[i];
      auto& m = *ms[i];
      auto& v = *vs[i];
      for (std::size_t e = 0; e < w.size(); ++e) {
        m[e] = cfg_.beta1 * m[e] + (1.0f - cfg_.beta1) * gt[e];
        v[e] = cfg_.beta2 * v[e] + (1.0f - cfg_.beta2) * gt[e] * gt[e];
        const double mh = m[e] / c1, vh = v[e] / c2;
        w[e] -= static_cast<float>(cfg_.lr * mh / (std::sqrt(vh) + cfg_.eps));
      }
      ++i;
    });
  }

 private:
  adam_config cfg_;
  indexer_params m_, v_;
  std::int64_t t_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Gradient check.

struct gradient_check {
  std::string tensor;
  double analytic = 0;  ///< <grad, v>
  double numeric = 0;   ///< (L(p + h v) - L(p - h v)) / 2h
  double rel_error() const { return std::abs(analytic - numeric) / std::max(std::abs(analytic), 1e-30); }
};

/// Central finite differences of the loss along one direction per parameter tensor: v = the
/// normalised gradient plus a normalised random vector (so both the gradient's length and its
/// orientation are tested), step h. The sparse loss is checked with its selection fixed.
inline std::vector<gradient_check> check_gradients(const dsa::cpu_backend& be, const indexer_params& p,
                                                   const layer_sample& s, const dsa::rope_config& rope,
                                                   index_t attn_heads, index_t k, loss_kind kind, double h,
                                                   std::uint64_t seed) {
  indexer_params g = indexer_params::zeros(p.dims);
  std::vector<std::int32_t> sel;
  run_indexer(be, p, s, rope, attn_heads, k, kind, &g, 1.0f, nullptr, &sel);
  auto loss_at = [&](const indexer_params& q) {
    return run_indexer(be, q, s, rope, attn_heads, k, kind, nullptr, 1.0f, &sel).loss;
  };
  std::vector<gradient_check> out;
  std::vector<const std::vector<float>*> grads;
  g.for_each([&](const char*, const std::vector<float>& v) { grads.push_back(&v); });
  std::mt19937_64 rng(seed);
  for (std::size_t ti = 0; ti < grads.size(); ++ti) {
    const std::vector<float>& gt = *grads[ti];
    std::vector<double> dir(gt.size());
    std::normal_distribution<double> n01;
    double gn = 0, rn = 0;
    for (float v : gt) gn += static_cast<double>(v) * v;
    for (auto& v : dir) {
      v = n01(rng);
      rn += v * v;
    }
    gn = std::sqrt(gn);
    rn = std::sqrt(rn);
    for (std::size_t e = 0; e < dir.size(); ++e) dir[e] = dir[e] / rn + (gn > 0 ? gt[e] / gn : 0.0);
    gradient_check c;
    indexer_params plus = p, minus = p;
    std::size_t idx = 0;
    std::string name;
    auto perturb = [&](indexer_params& q, double sign) {
      idx = 0;
      q.for_each([&](const char* nm, std::vector<float>& v) {
        if (idx++ != ti) return;
        name = nm;
        for (std::size_t e = 0; e < v.size(); ++e) v[e] = static_cast<float>(v[e] + sign * h * dir[e]);
      });
    };
    perturb(plus, 1.0);
    perturb(minus, -1.0);
    // The perturbation actually applied (fp32 rounding of p +- h v), so that the two sides
    // compare the same displacement.
    idx = 0;
    std::vector<const std::vector<float>*> pv, mv;
    plus.for_each([&](const char*, const std::vector<float>& v) { pv.push_back(&v); });
    minus.for_each([&](const char*, const std::vector<float>& v) { mv.push_back(&v); });
    for (std::size_t e = 0; e < gt.size(); ++e) {
      c.analytic += gt[e] * (static_cast<double>((*pv[ti])[e]) - (*mv[ti])[e]) / (2.0 * h);
    }
    c.tensor = name;
    c.numeric = (loss_at(plus) - loss_at(minus)) / (2.0 * h);
    out.push_back(c);
  }
  return out;
}

}  // namespace train_indexer
