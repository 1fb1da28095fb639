// dsa::model::weights: the tensors of a DeepSeek-V3.2 checkpoint, bound by their Hugging Face
// names as views into the memory-mapped safetensors shards (nothing is copied: a 685B checkpoint
// costs address space, and only the pages a forward pass touches are read).
//
// Every tensor the forward pass needs is looked up, and its dtype and shape checked against the
// config, when the weights are bound; a missing or mis-shaped tensor is a dsa::error naming the
// file and the tensor:
//   dsa::model::weights: <file>: tensor 'model.layers.0.self_attn.q_a_proj.weight' shape = [256, 128];
//   expected [256, 256] (q_lora_rank, hidden_size)
// Linear weights are FP8 (e4m3 codes plus the `weight_scale_inv` block multipliers) when the config
// has a quantization_config, bf16 otherwise. Norm weights and the routing bias may be F32 or BF16
// (Hugging Face checkpoints differ); BF16 ones are widened to fp32 once (a few KB per layer).
// The MTP layers (from index num_hidden_layers on, num_nextn_predict_layers of them) are ignored,
// as are the layers past `num_layers` when a caller binds fewer; any other stored tensor the
// config leaves unread is a dsa::error (check_unused: the config contradicts the checkpoint).
// Every bound tensor is scanned for NaN / infinite values (dsa/model/finite_scan.hpp) unless
// loaded with weight_check::none: a checkpoint with a non-finite weight is a dsa::error naming
// the tensor and the element, because such a weight can make a layer's attention vanish without
// any NaN reaching the logits (docs/decisions.md, "Non-finite weights").
//
// Part of the dsa::model target.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/linear.hpp"
#include "dsa/model/config.hpp"
#include "dsa/model/finite_scan.hpp"
#include "dsa/model/io_linkage.hpp"
#include "dsa/model/safetensors.hpp"

DSA_NAMESPACE_BEGIN
class packed_fp8_weight;  // dsa/cpu/packed_fp8_weight.hpp
namespace model {

/// What weights::load checks of the stored values: `finite` (the default) refuses a checkpoint
/// with a NaN or infinite element in any tensor the forward pass uses (one read of every bound
/// tensor at load); `none` skips that read.
enum class weight_check : std::uint8_t { finite, none };

/// The FP8 weight block (both dimensions) of DeepSeek's checkpoints.
inline constexpr index_t weight_block = 128;

/// A linear layer's weight [out, in]: e4m3 codes with fp32 block multipliers
/// scale [ceil(out / 128), ceil(in / 128)] (FP8 checkpoints), or bf16 values. The structs of this
/// file are templates on the memory space: `weights` binds the host ones (views into the mapped
/// checkpoint), dsa/model/cuda/device_weights.hpp's device_weights the device copies, and the layers
/// (dsa/model/layers/) take either.
template <class Space>
struct basic_linear_weight {
  std::string name;  ///< Hugging Face name of the weight tensor
  tensor_view<const fp8_e4m3, 2, Space> q;
  tensor_view<const float, 2, Space> scale;
  tensor_view<const bf16, 2, Space> w;
  /// q packed for the CPU kernels (dsa/cpu/packed_fp8_weight.hpp), or null: a CPU transformer
  /// packs its weights when its backend asks (cpu_backend::pack_fp8_weights); rows() slices
  /// carry no packed copy. Always null for device weights.
  std::shared_ptr<const packed_fp8_weight> packed;

  bool fp8() const { return q.data_handle() != nullptr; }
  index_t out_features() const { return fp8() ? q.extent(0) : w.extent(0); }
  index_t in_features() const { return fp8() ? q.extent(1) : w.extent(1); }

  /// Output rows [begin, begin + count): a view of the same memory. For FP8 weights `begin` must
  /// be a multiple of 128 (a scale block boundary); the last block may be ragged.
  basic_linear_weight rows(index_t begin, index_t count) const;
};

template <class Space>
basic_linear_weight<Space> basic_linear_weight<Space>::rows(index_t begin, index_t count) const {
  if (begin < 0 || count < 0 || begin + count > out_features()) {
    fail("model::linear_weight::rows", "[begin, begin + count)",
         "[" + std::to_string(begin) + ", " + std::to_string(begin + count) + ")",
         "a range within the " + std::to_string(out_features()) + " output rows of " + name);
  }
  basic_linear_weight r;
  r.name = name;
  if (!fp8()) {
    r.w = decltype(r.w)(w.row(begin), {count, w.extent(1)}, w.strides());
    return r;
  }
  if (begin % weight_block != 0) {
    fail("model::linear_weight::rows", "begin", begin, "a multiple of 128 (an FP8 scale block boundary) for " + name);
  }
  r.q = decltype(r.q)(q.row(begin), {count, q.extent(1)}, q.strides());
  const index_t b0 = begin / weight_block;
  const index_t nb = (count + weight_block - 1) / weight_block;
  r.scale = decltype(r.scale)(scale.row(b0), {nb, scale.extent(1)}, scale.strides());
  return r;
}

/// The SwiGLU feed-forward of a dense layer, an expert or the shared experts.
template <class Space>
struct basic_mlp_weights {
  basic_linear_weight<Space> gate_proj;  ///< w1 [inter, hidden]
  basic_linear_weight<Space> up_proj;    ///< w3 [inter, hidden]
  basic_linear_weight<Space> down_proj;  ///< w2 [hidden, inter]
};

/// The lightning indexer of one layer.
template <class Space>
struct basic_indexer_weights {
  basic_linear_weight<Space> wq_b;                     ///< [index_n_heads * index_head_dim, q_lora_rank]
  basic_linear_weight<Space> wk;                       ///< [index_head_dim, hidden]
  tensor_view<const float, 1, Space> k_norm_weight;  ///< LayerNorm [index_head_dim]
  tensor_view<const float, 1, Space> k_norm_bias;
  tensor_view<const bf16, 2, Space> weights_proj;  ///< [index_n_heads, hidden], used in fp32
};

/// Multi-head latent attention of one layer.
template <class Space>
struct basic_attention_weights {
  basic_linear_weight<Space> q_a_proj;                  ///< wq_a [q_lora_rank, hidden]
  tensor_view<const float, 1, Space> q_a_layernorm;   ///< q_norm [q_lora_rank]
  basic_linear_weight<Space> q_b_proj;                  ///< wq_b [heads * (nope + rope), q_lora_rank]
  basic_linear_weight<Space> kv_a_proj_with_mqa;        ///< wkv_a [kv_lora_rank + rope, hidden]
  tensor_view<const float, 1, Space> kv_a_layernorm;  ///< kv_norm [kv_lora_rank]
  basic_linear_weight<Space> kv_b_proj;                 ///< wkv_b [heads * (nope + v), kv_lora_rank]
  basic_linear_weight<Space> o_proj;                    ///< wo [hidden, heads * v]
  basic_indexer_weights<Space> indexer;
};

/// The routed experts, their gate and the shared experts of an MoE layer.
template <class Space>
struct basic_moe_weights {
  tensor_view<const bf16, 2, Space> gate;   ///< [n_routed_experts, hidden], used in fp32
  tensor_view<const float, 1, Space> bias;  ///< e_score_correction_bias [n_routed_experts], or absent
  std::vector<basic_mlp_weights<Space>> experts;
  std::optional<basic_mlp_weights<Space>> shared_experts;  ///< absent when n_shared_experts == 0
  /// [3, n_routed_experts]: the routed experts' gate, up and down projections as one table, which
  /// the grouped decode GEMVs of the device forward pass read (dsa/model/cuda/moe.cuh). Set by
  /// device_weights when every expert is FP8; absent otherwise, and in host weights.
  tensor_view<const fp8_weight_ref, 2, Space> expert_table;
};

template <class Space>
struct basic_layer_weights {
  tensor_view<const float, 1, Space> input_layernorm;           ///< attn_norm [hidden]
  tensor_view<const float, 1, Space> post_attention_layernorm;  ///< ffn_norm [hidden]
  basic_attention_weights<Space> attn;
  std::optional<basic_mlp_weights<Space>> mlp;  ///< dense layers (l < first_k_dense_replace)
  std::optional<basic_moe_weights<Space>> moe;  ///< MoE layers
};

/// The host structs: views into the mapped checkpoint.
using linear_weight = basic_linear_weight<host_space>;
using mlp_weights = basic_mlp_weights<host_space>;
using indexer_weights = basic_indexer_weights<host_space>;
using attention_weights = basic_attention_weights<host_space>;
using moe_weights = basic_moe_weights<host_space>;
using layer_weights = basic_layer_weights<host_space>;

/// Every tensor of the forward pass, bound from one checkpoint. Move-only: it owns the mapping
/// its views point into.
class weights {
 public:
  /// Opens `dir` (config.json plus model.safetensors or a sharded index) and binds everything.
  /// `num_layers` < 0 binds all num_hidden_layers layers; a smaller number binds (and lets a
  /// transformer run) only the first `num_layers`, e.g. to smoke-test a layer of a real checkpoint.
  /// `check` as weight_check says.
  static weights load(const std::filesystem::path& dir, index_t num_layers = -1,
                      weight_check check = weight_check::finite);

  /// Binds the tensors of `ckpt` for `cfg` (already validated); see load().
  static weights bind(::dsa::model::config cfg, safetensors_checkpoint ckpt, index_t num_layers = -1,
                      weight_check check = weight_check::finite);

  weights(weights&&) noexcept = default;
  weights& operator=(weights&&) noexcept = default;

  const ::dsa::model::config& config() const { return cfg_; }
  const safetensors_checkpoint& checkpoint() const { return *ckpt_; }

  host_view<const bf16, 2> embed_tokens;  ///< [vocab, hidden]
  std::vector<layer_weights> layers;      ///< the bound layers (all, or the first num_layers)
  host_view<const float, 1> norm;         ///< final RMSNorm [hidden]
  host_view<const bf16, 2> lm_head;       ///< [vocab, hidden], used in fp32

 private:
  weights(::dsa::model::config cfg, std::unique_ptr<safetensors_checkpoint> ckpt, weight_check check)
      : cfg_(std::move(cfg)), ckpt_(std::move(ckpt)), check_(check) {}

  // "dsa::model::weights: <file>: tensor '<name>' <what> = <value>; expected <expected>"
  [[noreturn]] void fail_tensor(std::string_view name, std::string_view what, std::string_view value,
                                std::string_view expected) const {
    const tensor_info* t = ckpt_->find(name);
    const std::filesystem::path& file = t ? ckpt_->shard_of(name).path() : ckpt_->path();
    fail("model::weights", ::dsa::detail::quoted_path(file) + ": tensor " + ::dsa::quoted(name) + " " + std::string(what),
         value, expected);
  }

  // Every tensor the binding reads goes through here, which records it for check_unused().
  const tensor_info& lookup(const std::string& name, std::string_view why) {
    const tensor_info* t = ckpt_->find(name);
    if (!t) fail_tensor(name, "presence", "missing", "a tensor of the checkpoint (" + std::string(why) + ")");
    used_.insert(t);
    return *t;
  }

  void check_shape(const tensor_info& t, std::vector<index_t> shape, std::string_view why) const {
    if (t.shape != shape) {
      fail_tensor(t.name, "shape", format_shape(t.shape), format_shape(shape) + " (" + std::string(why) + ")");
    }
  }

  void check_dtype(const tensor_info& t, dtype want, std::string_view why) const {
    if (t.type != want) {
      fail_tensor(t.name, "dtype", dtype_name(t.type), std::string(dtype_name(want)) + " (" + std::string(why) + ")");
    }
  }

  // Refuses a tensor with a NaN or infinite element (unless check_ is none), naming the element.
  void check_values(const tensor_info& t) const {
    if (check_ == weight_check::none) return;
    const std::int64_t at = first_non_finite(t.type, ckpt_->bytes(t.name));
    if (at < 0) return;
    std::string where = "[";  // the element's multi-index, row-major
    std::uint64_t rest = static_cast<std::uint64_t>(at);
    std::vector<std::uint64_t> idx(t.shape.size());
    for (std::size_t r = t.shape.size(); r-- > 0;) {
      const auto d = static_cast<std::uint64_t>(t.shape[r]);
      idx[r] = rest % d;
      rest /= d;
    }
    for (std::size_t r = 0; r < idx.size(); ++r) {
      if (r) where += ", ";
      where += std::to_string(idx[r]);
    }
    where += "]";
    fail_tensor(t.name, "element " + where, "non-finite (NaN or inf)",
                "finite values: a checkpoint with a NaN or infinite weight is refused at load "
                "(weight_check::none skips this check)");
  }

  template <class T, std::size_t R>
  host_view<const T, R> tensor(const std::string& name, std::vector<index_t> shape, std::string_view why) {
    const tensor_info& t = lookup(name, why);
    check_dtype(t, dtype_of<T>(), why);
    check_shape(t, std::move(shape), why);
    check_values(t);
    return ckpt_->view<T, R>(name);
  }

  // An fp32 vector stored as F32 (viewed) or BF16 (widened once into owned storage).
  host_view<const float, 1> vector_f32(const std::string& name, index_t n, std::string_view why) {
    const tensor_info& t = lookup(name, why);
    check_shape(t, {n}, why);
    if (t.type != dtype::f32 && t.type != dtype::bf16) {
      fail_tensor(name, "dtype", dtype_name(t.type), "F32 or BF16 (" + std::string(why) + ")");
    }
    check_values(t);
    if (t.type == dtype::f32) return ckpt_->view<float, 1>(name);
    const host_view<const bf16, 1> src = ckpt_->view<bf16, 1>(name);
    auto& dst = widened_.emplace_back(static_cast<std::size_t>(n));
    for (index_t i = 0; i < n; ++i) dst[static_cast<std::size_t>(i)] = src(i).to_float();
    return host_view<const float, 1>(dst.data(), {n});
  }

  linear_weight linear(const std::string& prefix, index_t out, index_t in, std::string_view why) {
    linear_weight l;
    l.name = prefix + ".weight";
    if (cfg_.fp8_weights()) {
      l.q = tensor<fp8_e4m3, 2>(l.name, {out, in}, why);
      const index_t so = (out + weight_block - 1) / weight_block, si = (in + weight_block - 1) / weight_block;
      l.scale = tensor<float, 2>(prefix + ".weight_scale_inv", {so, si}, "FP8 block scales of " + l.name);
    } else {
      l.w = tensor<bf16, 2>(l.name, {out, in}, why);
    }
    return l;
  }

  mlp_weights mlp(const std::string& prefix, index_t inter, std::string_view what) {
    const index_t d = cfg_.hidden_size;
    const std::string io = std::string(what) + ", hidden_size";
    const std::string oi = "hidden_size, " + std::string(what);
    return {linear(prefix + ".gate_proj", inter, d, io), linear(prefix + ".up_proj", inter, d, io),
            linear(prefix + ".down_proj", d, inter, oi)};
  }

  // The layer index n of a tensor named model.layers.<n>.*, or -1 for any other name.
  static index_t layer_of(std::string_view name) {
    constexpr std::string_view prefix = "model.layers.";
    if (name.substr(0, prefix.size()) != prefix) return -1;
    index_t layer = 0;
    std::size_t i = prefix.size();
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && i - prefix.size() < 9; ++i) {
      layer = layer * 10 + (name[i] - '0');
    }
    if (i == prefix.size() || i >= name.size() || name[i] != '.') return -1;  // not model.layers.<n>.
    return layer;
  }

  // A checkpoint with more layers than the config declares (beyond the MTP layers,
  // num_nextn_predict_layers) would silently run as a truncated model: refused, naming both
  // counts. Running fewer layers on purpose is load()'s num_layers. Returns the layers stored.
  index_t check_layer_count() const {
    const auto& c = cfg_;
    index_t stored = 0;  // 1 + the largest layer index any tensor name carries
    for (const std::string_view name : ckpt_->names()) stored = std::max(stored, layer_of(name) + 1);
    const index_t declared = c.num_hidden_layers + c.num_nextn_predict_layers;
    if (stored > declared) {
      fail("model::weights", ::dsa::detail::quoted_path(ckpt_->path()) + ": config.json num_hidden_layers",
           c.num_hidden_layers,
           "the checkpoint's layer count: it stores model.layers.0 .. " + std::to_string(stored - 1) + " (" +
               std::to_string(stored) + " layers, " + std::to_string(c.num_nextn_predict_layers) +
               " of them MTP per num_nextn_predict_layers); to run fewer layers, load with num_layers");
    }
    return stored;
  }

  // The config key that most likely explains a stored tensor the binding did not read.
  std::string_view unused_hint(std::string_view name) const {
    const auto has = [&](std::string_view part) { return name.find(part) != std::string_view::npos; };
    if (name == "lm_head.weight") return "tie_word_embeddings";
    if (has(".mlp.shared_experts.")) return "n_shared_experts";
    if (name.ends_with(".weight_scale_inv")) return "quantization_config";
    if (has(".mlp.experts.") || has(".mlp.gate.") || has(".mlp.gate_proj.") || has(".mlp.up_proj.") ||
        has(".mlp.down_proj.")) {
      return "first_k_dense_replace or n_routed_experts";
    }
    return {};
  }

  // A stored tensor that the config leaves unread means config.json describes another model than
  // the checkpoint holds: n_shared_experts = 0 over a checkpoint with shared experts would drop
  // them and change every MoE layer's output without a word. Refused, naming the file, a few of
  // the tensors and how many there are. Not counted as unused (docs/decisions.md, "Model
  // configuration"): the layers [num_layers, num_hidden_layers) a caller skips on purpose, the
  // MTP layers after them (num_nextn_predict_layers; more layers than that are check_layer_count's
  // error), and rotary `inv_freq` buffers, which older Hugging Face exports saved but which hold
  // nothing the config does not already fix (dsa computes RoPE from rope_theta and rope_scaling).
  void check_unused(index_t bound_layers) const {
    std::vector<std::string_view> unused;
    for (const std::string_view name : ckpt_->names()) {
      if (used_.count(ckpt_->find(name)) != 0) continue;
      if (layer_of(name) >= bound_layers) continue;
      if (name.ends_with(".rotary_emb.inv_freq")) continue;
      unused.push_back(name);
    }
    if (unused.empty()) return;
    constexpr std::size_t shown = 3;
    std::string value = std::to_string(unused.size()) + " (";
    std::vector<std::string_view> hints;
    for (std::size_t i = 0; i < unused.size(); ++i) {
      if (i < shown) value += (i ? ", " : "") + ::dsa::quoted(unused[i]);
      const std::string_view h = unused_hint(unused[i]);
      if (!h.empty() && std::find(hints.begin(), hints.end(), h) == hints.end()) hints.push_back(h);
    }
    value += unused.size() > shown ? ", ...)" : ")";
    std::string expected =
        "none: the config describes another model than the checkpoint stores, and running it would drop those "
        "weights silently";
    if (cfg_.tie_word_embeddings && std::find(unused.begin(), unused.end(), "lm_head.weight") != unused.end()) {
      expected += " (tie_word_embeddings = true, but the checkpoint stores its own lm_head.weight)";
    } else if (!hints.empty()) {
      expected += " (check ";
      for (std::size_t i = 0; i < hints.size(); ++i) expected += (i ? ", " : "") + std::string(hints[i]);
      expected += ")";
    }
    fail("model::weights", ::dsa::detail::quoted_path(ckpt_->path()) + ": tensors the config does not use", value,
         expected);
  }

  void bind_all(index_t num_layers);

  ::dsa::model::config cfg_;
  std::unique_ptr<safetensors_checkpoint> ckpt_;
  weight_check check_ = weight_check::finite;
  std::vector<std::vector<float>> widened_;  // BF16 norm weights and biases widened to fp32
  std::unordered_set<const tensor_info*> used_;  // every tensor lookup() returned
};

#if DSA_MODEL_IO_DEFINITIONS  // dsa/model/io_linkage.hpp
DSA_MODEL_IO weights weights::load(const std::filesystem::path& dir, index_t num_layers, weight_check check) {
  namespace fs = std::filesystem;
  ::dsa::model::config cfg = config::load(dir);
  const fs::path ckpt = fs::is_directory(dir) ? dir : dir.parent_path();
  return bind(std::move(cfg), safetensors_checkpoint::open(ckpt), num_layers, check);
}

DSA_MODEL_IO weights weights::bind(::dsa::model::config cfg, safetensors_checkpoint ckpt, index_t num_layers,
                                 weight_check check) {
  weights w(std::move(cfg), std::make_unique<safetensors_checkpoint>(std::move(ckpt)), check);
  w.bind_all(num_layers);
  return w;
}

DSA_MODEL_IO void weights::bind_all(index_t num_layers) {
  const auto& c = cfg_;
  const index_t n_layers = num_layers < 0 ? c.num_hidden_layers : num_layers;
  if (n_layers > c.num_hidden_layers) {
    fail("model::weights", "num_layers", n_layers,
         "at most num_hidden_layers = " + std::to_string(c.num_hidden_layers) + " (or -1 for all)");
  }
  const index_t stored = check_layer_count();
  const index_t d = c.hidden_size, h = c.num_attention_heads;
  embed_tokens = tensor<bf16, 2>("model.embed_tokens.weight", {c.vocab_size, d}, "vocab_size, hidden_size");
  norm = vector_f32("model.norm.weight", d, "hidden_size");
  lm_head = c.tie_word_embeddings ? embed_tokens
                                  : tensor<bf16, 2>("lm_head.weight", {c.vocab_size, d}, "vocab_size, hidden_size");
  // Room for the layers the checkpoint holds, not for what config.json claims: a missing layer
  // is a dsa::error naming its first tensor below, never an allocation sized by the config.
  layers.reserve(static_cast<std::size_t>(std::min(n_layers, stored)));
  for (index_t l = 0; l < n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    const std::string a = p + ".self_attn";
    layer_weights lw;
    lw.input_layernorm = vector_f32(p + ".input_layernorm.weight", d, "hidden_size");
    lw.post_attention_layernorm = vector_f32(p + ".post_attention_layernorm.weight", d, "hidden_size");
    attention_weights& at = lw.attn;
    at.q_a_proj = linear(a + ".q_a_proj", c.q_lora_rank, d, "q_lora_rank, hidden_size");
    at.q_a_layernorm = vector_f32(a + ".q_a_layernorm.weight", c.q_lora_rank, "q_lora_rank");
    at.q_b_proj = linear(a + ".q_b_proj", h * c.qk_head_dim(), c.q_lora_rank,
                         "num_attention_heads * (qk_nope_head_dim + qk_rope_head_dim), q_lora_rank");
    at.kv_a_proj_with_mqa = linear(a + ".kv_a_proj_with_mqa", c.kv_lora_rank + c.qk_rope_head_dim, d,
                                   "kv_lora_rank + qk_rope_head_dim, hidden_size");
    at.kv_a_layernorm = vector_f32(a + ".kv_a_layernorm.weight", c.kv_lora_rank, "kv_lora_rank");
    at.kv_b_proj = linear(a + ".kv_b_proj", h * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank,
                          "num_attention_heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank");
    at.o_proj = linear(a + ".o_proj", d, h * c.v_head_dim, "hidden_size, num_attention_heads * v_head_dim");
    const std::string ix = a + ".indexer";
    at.indexer.wq_b = linear(ix + ".wq_b", c.index_n_heads * c.index_head_dim, c.q_lora_rank,
                             "index_n_heads * index_head_dim, q_lora_rank");
    at.indexer.wk = linear(ix + ".wk", c.index_head_dim, d, "index_head_dim, hidden_size");
    at.indexer.k_norm_weight = vector_f32(ix + ".k_norm.weight", c.index_head_dim, "index_head_dim");
    at.indexer.k_norm_bias = vector_f32(ix + ".k_norm.bias", c.index_head_dim, "index_head_dim");
    at.indexer.weights_proj =
        tensor<bf16, 2>(ix + ".weights_proj.weight", {c.index_n_heads, d}, "index_n_heads, hidden_size");
    if (!c.is_moe_layer(l)) {
      lw.mlp = mlp(p + ".mlp", c.intermediate_size, "intermediate_size");
    } else {
      moe_weights m;
      m.gate = tensor<bf16, 2>(p + ".mlp.gate.weight", {c.n_routed_experts, d}, "n_routed_experts, hidden_size");
      const std::string bias = p + ".mlp.gate.e_score_correction_bias";
      if (ckpt_->contains(bias)) m.bias = vector_f32(bias, c.n_routed_experts, "n_routed_experts");
      m.experts.reserve(static_cast<std::size_t>(c.n_routed_experts));
      for (index_t e = 0; e < c.n_routed_experts; ++e) {
        m.experts.push_back(mlp(p + ".mlp.experts." + std::to_string(e), c.moe_intermediate_size, "moe_intermediate_size"));
      }
      if (c.n_shared_experts > 0) {
        m.shared_experts = mlp(p + ".mlp.shared_experts", c.n_shared_experts * c.moe_intermediate_size,
                               "n_shared_experts * moe_intermediate_size");
      }
      lw.moe = std::move(m);
    }
    layers.push_back(std::move(lw));
  }
  check_unused(n_layers);
  used_ = {};  // only needed while binding
}
#endif  // DSA_MODEL_IO_DEFINITIONS

}  // namespace model
DSA_NAMESPACE_END
