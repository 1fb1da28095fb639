// dsa::model::config: the DeepSeek-V3.2 model configuration, read from (and written to) a
// Hugging Face config.json in the layout of deepseek-ai/DeepSeek-V3.2.
//
// Over 600 lines by choice: the fields, their JSON names, reading, writing and the check of each
// are one schema; split by concern, a field's check would sit files away from the field.
//
// Loading validates everything the forward pass relies on, so that an inconsistent or foreign
// config is a dsa::error naming the file, the key, the value and what was expected, instead of
// an out-of-bounds shape or a silently different model later. Keys dsa does not use are ignored
// (Hugging Face configs carry many). The decisions behind each check are in docs/decisions.md,
// "Model configuration".
//
// Message format:  dsa::model::config: '<file>': <key> = <value>; expected <what>
// (the file quoted; a value from the file, when it is text, dsa::quoted: escaped and cut).
// load(dir) refuses a dir/config.json that links outside dir (dsa/model/checkpoint_files.hpp).
//
// Part of the dsa::model target (needs nlohmann_json).
#pragma once

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/model/checkpoint_files.hpp"
#include "dsa/model/io_linkage.hpp"
#include "dsa/model/json_structure.hpp"

DSA_NAMESPACE_BEGIN

namespace model {

/// `rope_scaling` of config.json: YaRN context extension. Absent means plain RoPE.
struct rope_scaling_config {
  std::string type = "yarn";  ///< "type" (or "rope_type") in the file; only "yarn" is accepted
  float factor = 1.0f;        ///< frequency division of the long-wavelength dimensions
  index_t original_max_position_embeddings = 4096;
  float beta_fast = 32.0f;  ///< rotations at which the ramp starts (high-frequency end)
  float beta_slow = 1.0f;   ///< rotations at which the ramp ends (low-frequency end)
  float mscale = 1.0f;
  float mscale_all_dim = 1.0f;  ///< enters the softmax scale: mscale = 0.1 * mscale_all_dim * ln(factor) + 1

  bool operator==(const rope_scaling_config&) const = default;
};

/// `quantization_config` of config.json: block-wise FP8 weights. Absent means bf16 weights.
struct quantization_config {
  std::string quant_method = "fp8";
  std::string fmt = "e4m3";
  std::string activation_scheme = "dynamic";
  /// "ue8m0": activation (and KV-cache) scales are powers of two; "" (key absent): fp32 scales,
  /// which is what DeepSeek's reference does when its scale_fmt is None.
  std::string scale_fmt = "ue8m0";
  index_t block_n = 128;  ///< weight_block_size[0]: block extent along the output features
  index_t block_k = 128;  ///< weight_block_size[1]: block extent along the input features

  bool operator==(const quantization_config&) const = default;
};

/// The hyper-parameters of a DeepSeek-V3.2 checkpoint, named as in its config.json.
///
/// A config obtained from from_json() or load() has passed validate(); one assembled by hand
/// (a tool writing a tiny model, say) should call validate() itself before use.
struct config {
  std::string model_type = "deepseek_v32";
  index_t vocab_size = 0;             ///< <= 2^24 (detail::max_vocab_size)
  index_t hidden_size = 0;
  index_t intermediate_size = 0;      ///< dense SwiGLU layers
  index_t moe_intermediate_size = 0;  ///< each routed expert, and each shared expert
  index_t num_hidden_layers = 0;      ///< without the MTP layers; <= 1024 (detail::max_hidden_layers)
  index_t first_k_dense_replace = 0;  ///< layers [0, first_k_dense_replace) are dense
  index_t num_attention_heads = 0;
  index_t num_key_value_heads = 0;  ///< MLA: equal to num_attention_heads (checked)
  index_t n_routed_experts = 0;
  index_t n_shared_experts = 0;
  index_t num_experts_per_tok = 0;
  index_t n_group = 0;
  index_t topk_group = 0;
  std::string scoring_func = "sigmoid";
  float routed_scaling_factor = 1.0f;
  bool norm_topk_prob = true;
  std::string topk_method = "noaux_tc";
  index_t q_lora_rank = 0;
  index_t kv_lora_rank = 0;
  index_t qk_nope_head_dim = 0;
  index_t qk_rope_head_dim = 0;
  index_t v_head_dim = 0;
  index_t index_n_heads = 0;
  index_t index_head_dim = 0;
  index_t index_topk = 0;  ///< <= max_position_embeddings
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  std::optional<rope_scaling_config> rope_scaling;
  index_t max_position_embeddings = 0;
  std::string hidden_act = "silu";
  bool tie_word_embeddings = false;
  std::optional<index_t> bos_token_id;
  std::optional<index_t> eos_token_id;
  std::string torch_dtype = "bfloat16";
  index_t num_nextn_predict_layers = 0;  ///< MTP layers stored after the main ones (ignored by dsa)
  std::optional<::dsa::model::quantization_config> quantization_config;

  bool operator==(const config&) const = default;

  // ---- derived quantities ----------------------------------------------------------------

  /// Query/key head dimension of MLA: nope + rope.
  index_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }

  /// Whether YaRN is active: rope_scaling is present and max_position_embeddings exceeds the
  /// original context (docs/design.md "RoPE and YaRN"; DeepSeek's reference tests its max_seq_len the same way).
  bool yarn_enabled() const {
    return rope_scaling.has_value() && max_position_embeddings > rope_scaling->original_max_position_embeddings;
  }

  /// MLA softmax scale: qk_head_dim^-0.5, times mscale^2 with
  /// mscale = 0.1 * mscale_all_dim * ln(factor) + 1 when YaRN is on. Computed in double, as the
  /// reference does in Python, then rounded once to the fp32 the kernels multiply by.
  float softmax_scale() const {
    double s = std::pow(static_cast<double>(qk_head_dim()), -0.5);
    if (yarn_enabled()) {
      const double m = 0.1 * static_cast<double>(rope_scaling->mscale_all_dim) *
                           std::log(static_cast<double>(rope_scaling->factor)) +
                       1.0;
      s = s * m * m;
    }
    return static_cast<float>(s);
  }

  /// Whether layer l has a routed MoE FFN (true) or a dense SwiGLU FFN (false).
  /// Throws dsa::error unless 0 <= l < num_hidden_layers.
  bool is_moe_layer(index_t l) const {
    if (l < 0 || l >= num_hidden_layers) {
      ::dsa::fail("model::config::is_moe_layer", "layer", l,
                  "0 <= layer < num_hidden_layers = " + std::to_string(num_hidden_layers));
    }
    return l >= first_k_dense_replace;
  }

  /// Whether the linear weights are block-wise FP8 (quantization_config present).
  bool fp8_weights() const { return quantization_config.has_value(); }

  /// Whether activation and KV-cache quantization scales are ue8m0 powers of two: scale_fmt
  /// "ue8m0" in quantization_config. Otherwise (no scale_fmt, or bf16 weights) they are fp32, as
  /// in DeepSeek's reference with scale_fmt None.
  bool ue8m0_scales() const { return quantization_config.has_value() && quantization_config->scale_fmt == "ue8m0"; }

  // ---- reading, checking, writing ----------------------------------------------------------

  /// Parses and validates a config.json document; `source_name` (usually the file) prefixes
  /// every error message.
  static config from_json(const nlohmann::json& j, std::string_view source_name);

  /// Reads `file_or_dir` (a directory stands for its config.json), then from_json().
  static config load(const std::filesystem::path& file_or_dir);

  /// Throws dsa::error (prefixed with `source_name`) unless the configuration is one dsa can run.
  void validate(std::string_view source_name = "config") const;

  /// The config.json document: from_json(to_json()) == *this for every valid config.
  nlohmann::json to_json() const;

  /// One line for logs, e.g. "deepseek_v32: 61 layers (3 dense) hidden 7168 vocab 129280 | ...".
  std::string to_string() const;
};

// ---- implementation -------------------------------------------------------------------------

#if DSA_MODEL_IO_DEFINITIONS  // dsa/model/io_linkage.hpp
namespace detail {

inline constexpr std::uint64_t max_file_bytes = std::uint64_t{16} << 20;         // a real config.json is ~2 KB
inline constexpr index_t max_extent = std::numeric_limits<std::int32_t>::max();  // int32 indices

// Bounds on the sizes a few bytes of config.json can claim and that something allocates for
// before (or without) reading a tensor: the per-layer state (weights, caches, decode weights) is
// sized by num_hidden_layers, the logits and a written checkpoint by vocab_size. The loader checks
// every tensor against the config, but tools and callers that start from the config alone
// (dsa_make_tiny_model, write_random_checkpoint) cannot, and std::bad_alloc names no key. Fixed
// bounds are what a mature loader does here: they cost nothing to check, reject a crafted file
// with a message naming the key, and sit far above any real model (DeepSeek-V3.2: 61 layers and a
// vocabulary of 129280; the largest public vocabularies are ~256K = 2^18, the deepest models a
// few hundred layers).
inline constexpr index_t max_hidden_layers = 1024;
inline constexpr index_t max_vocab_size = index_t{1} << 24;

[[noreturn]] inline void fail_config(std::string_view source, std::string_view key, std::string_view value,
                                     std::string_view expected) {
  std::string arg(source);
  arg += ": ";
  arg += key;
  ::dsa::fail("model::config", arg, value, expected);
}

/// A JSON value from the file, for a message: strings quoted, everything bounded
/// (dsa/model/checkpoint_files.hpp).
inline std::string excerpt(const nlohmann::json& j) { return ::dsa::detail::json_excerpt(j); }

/// The shortest decimal that reads back as `f`, as a JSON number: 1e-6f is written 1e-06, not
/// 9.999999974752427e-07, so written files look like the ones Hugging Face writes.
inline nlohmann::json json_float(float f) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  double d = static_cast<double>(f);
  std::from_chars(buf, r.ptr, d);
  return nlohmann::json(d);
}

inline std::string short_float(float f) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  return std::string(buf, r.ptr);
}

/// Typed access to the keys of one JSON object; `prefix` names nested objects ("rope_scaling.").
class reader {
 public:
  reader(const nlohmann::json& obj, std::string_view source, std::string prefix)
      : obj_(obj), source_(source), prefix_(std::move(prefix)) {}

  /// The value of `key`, or nullptr when absent or null (null is how Python writes None).
  const nlohmann::json* find(std::string_view key) const {
    const auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  [[noreturn]] void fail(std::string_view key, std::string_view value, std::string_view expected) const {
    detail::fail_config(source_, prefix_ + std::string(key), value, expected);
  }

  [[noreturn]] void missing(std::string_view key, std::string_view what) const {
    fail(key, "<missing>", std::string(what) + " (a required key)");
  }

  std::optional<index_t> opt_int(std::string_view key) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_number_unsigned()) {
      if (v->get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<index_t>::max())) {
        fail(key, excerpt(*v), "an integer in the int64 range");
      }
      return static_cast<index_t>(v->get<std::uint64_t>());
    }
    if (v->is_number_integer()) return v->get<std::int64_t>();
    fail(key, excerpt(*v), "an integer");
  }
  index_t req_int(std::string_view key) const {
    if (const auto v = opt_int(key)) return *v;
    missing(key, "an integer");
  }

  std::optional<float> opt_float(std::string_view key) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) fail(key, excerpt(*v), "a number");
    const double d = v->get<double>();
    const float f = static_cast<float>(d);
    if (!std::isfinite(d) || !std::isfinite(f)) fail(key, excerpt(*v), "a finite number in the fp32 range");
    return f;
  }
  float req_float(std::string_view key) const {
    if (const auto v = opt_float(key)) return *v;
    missing(key, "a number");
  }

  std::optional<bool> opt_bool(std::string_view key) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) fail(key, excerpt(*v), "true or false");
    return v->get<bool>();
  }
  bool req_bool(std::string_view key) const {
    if (const auto v = opt_bool(key)) return *v;
    missing(key, "true or false");
  }

  std::optional<std::string> opt_string(std::string_view key) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) fail(key, excerpt(*v), "a string");
    return v->get<std::string>();
  }
  std::string req_string(std::string_view key) const {
    if (auto v = opt_string(key)) return std::move(*v);
    missing(key, "a string");
  }

  /// A string stored under either of two names (Hugging Face renamed several keys); both
  /// present with different values is an error.
  std::optional<std::string> opt_string_alias(std::string_view key, std::string_view alias) const {
    auto a = opt_string(key);
    auto b = opt_string(alias);
    if (a && b && *a != *b)
      fail(alias, ::dsa::quoted(*b), "the same value as " + prefix_ + std::string(key) + " = " + ::dsa::quoted(*a));
    return a ? a : b;
  }

 private:
  const nlohmann::json& obj_;
  std::string_view source_;
  std::string prefix_;
};

/// Context for the value checks of validate().
struct checker {
  std::string_view source;

  [[noreturn]] void fail(std::string_view key, std::string_view value, std::string_view expected) const {
    detail::fail_config(source, key, value, expected);
  }
  void positive(std::string_view key, index_t v) const {
    if (v < 1 || v > max_extent) fail(key, std::to_string(v), "a positive integer <= 2147483647");
  }
  /// 1 <= v <= max; `why` says where the bound comes from.
  void positive_at_most(std::string_view key, index_t v, index_t max, std::string_view why) const {
    if (v < 1 || v > max) {
      fail(key, std::to_string(v), "a positive integer <= " + std::to_string(max) + " (" + std::string(why) + ")");
    }
  }
  void non_negative(std::string_view key, index_t v) const {
    if (v < 0 || v > max_extent) fail(key, std::to_string(v), "an integer in [0, 2147483647]");
  }
  void one_of(std::string_view key, const std::string& v, std::string_view expected) const {
    fail(key, ::dsa::quoted(v), expected);
  }
};

}  // namespace detail

DSA_MODEL_IO void config::validate(std::string_view source) const {
  const detail::checker c{source};
  const auto str = [](auto v) { return std::to_string(v); };

  // DeepSeek-V3 / V3.1 ("deepseek_v3") have no indexer: their forward pass is not this one.
  if (model_type != "deepseek_v32") {
    c.one_of("model_type", model_type, "\"deepseek_v32\" (dsa implements the DeepSeek-V3.2 forward pass)");
  }

  c.positive_at_most("vocab_size", vocab_size, detail::max_vocab_size,
                     "2^24: a bound far above any real vocabulary, checked before anything is sized by it");
  c.positive("hidden_size", hidden_size);
  c.positive("intermediate_size", intermediate_size);
  c.positive("moe_intermediate_size", moe_intermediate_size);
  c.positive_at_most("num_hidden_layers", num_hidden_layers, detail::max_hidden_layers,
                     "a bound far above any real model, checked before anything is sized by it");
  c.non_negative("first_k_dense_replace", first_k_dense_replace);
  c.positive("num_attention_heads", num_attention_heads);
  c.positive("num_key_value_heads", num_key_value_heads);
  c.positive("n_routed_experts", n_routed_experts);
  c.non_negative("n_shared_experts", n_shared_experts);
  c.positive("num_experts_per_tok", num_experts_per_tok);
  c.positive("n_group", n_group);
  c.positive("topk_group", topk_group);
  c.positive("q_lora_rank", q_lora_rank);
  c.positive("kv_lora_rank", kv_lora_rank);
  c.positive("qk_nope_head_dim", qk_nope_head_dim);
  c.positive("qk_rope_head_dim", qk_rope_head_dim);
  c.positive("v_head_dim", v_head_dim);
  c.positive("index_n_heads", index_n_heads);
  c.positive("index_head_dim", index_head_dim);
  c.positive("index_topk", index_topk);
  c.positive("max_position_embeddings", max_position_embeddings);
  c.non_negative("num_nextn_predict_layers", num_nextn_predict_layers);

  // Each token selects at most index_topk of the positions before it, and there are never more
  // than max_position_embeddings of those: a larger index_topk selects nothing more, but the
  // selection buffers of every forward call would be sized by it (issue 14).
  if (index_topk > max_position_embeddings) {
    c.fail("index_topk", str(index_topk),
           "<= max_position_embeddings = " + str(max_position_embeddings) +
               " (no token can select more positions than a sequence holds)");
  }

  // MLA shares one latent KV across all heads; a different value means a GQA model whose
  // config was mislabelled, not a V3.2 checkpoint.
  if (num_key_value_heads != num_attention_heads) {
    c.fail("num_key_value_heads", str(num_key_value_heads),
           "num_attention_heads = " + str(num_attention_heads) + " (MLA has no grouped KV heads)");
  }
  if (first_k_dense_replace > num_hidden_layers) {
    c.fail("first_k_dense_replace", str(first_k_dense_replace), "<= num_hidden_layers = " + str(num_hidden_layers));
  }

  // noaux_tc routing (docs/design.md "MoE routing").
  if (n_routed_experts % n_group != 0) {
    c.fail("n_routed_experts", str(n_routed_experts), "a multiple of n_group = " + str(n_group));
  }
  if (topk_group > n_group) c.fail("topk_group", str(topk_group), "<= n_group = " + str(n_group));
  const index_t per_group = n_routed_experts / n_group;
  if (n_group > 1 && per_group < 2) {
    c.fail("n_routed_experts", str(n_routed_experts),
           "at least 2 experts per group (n_group = " + str(n_group) + "): a group's score is the sum of its top 2");
  }
  if (num_experts_per_tok > topk_group * per_group) {
    c.fail("num_experts_per_tok", str(num_experts_per_tok),
           "<= topk_group * (n_routed_experts / n_group) = " + str(topk_group * per_group) +
               " (the experts of the kept groups)");
  }
  if (scoring_func != "sigmoid") c.one_of("scoring_func", scoring_func, "\"sigmoid\" (noaux_tc routing)");
  if (topk_method != "noaux_tc") c.one_of("topk_method", topk_method, "\"noaux_tc\"");
  if (!(routed_scaling_factor > 0.0f)) {
    c.fail("routed_scaling_factor", detail::short_float(routed_scaling_factor), "a positive number");
  }
  if (hidden_act != "silu") c.one_of("hidden_act", hidden_act, "\"silu\" (SwiGLU experts and dense FFN)");

  // RoPE rotates pairs, and the indexer applies it to the first qk_rope_head_dim of its head.
  if (qk_rope_head_dim % 2 != 0)
    c.fail("qk_rope_head_dim", str(qk_rope_head_dim), "an even number (RoPE rotates pairs)");
  if (index_head_dim < qk_rope_head_dim) {
    c.fail("index_head_dim", str(index_head_dim), ">= qk_rope_head_dim = " + str(qk_rope_head_dim));
  }
  // The indexer key is one 1x128 FP8 group with one fp32 scale (the 132-byte indexer cache, the
  // per-key k_scale of docs/design.md "Lightning indexer" and the q scale folded into the head weights).
  if (index_head_dim != 128) {
    c.fail("index_head_dim", str(index_head_dim), "128 (one 1x128 FP8 group per indexer key and head)");
  }
  // The latent c is round-tripped through 1x128 FP8 groups before caching, FP8 weights or not.
  if (kv_lora_rank % 128 != 0) {
    c.fail("kv_lora_rank", str(kv_lora_rank), "a multiple of 128 (the KV cache quantizes it in 1x128 groups)");
  }
  if (!(rms_norm_eps > 0.0f)) c.fail("rms_norm_eps", detail::short_float(rms_norm_eps), "a positive number");
  // YaRN divides by ln(rope_theta).
  if (!(rope_theta > 1.0f)) c.fail("rope_theta", detail::short_float(rope_theta), "a number > 1");

  if (rope_scaling) {
    const rope_scaling_config& r = *rope_scaling;
    const auto f = detail::short_float;
    if (r.type != "yarn") c.one_of("rope_scaling.type", r.type, "\"yarn\"");
    if (!(r.factor >= 1.0f)) c.fail("rope_scaling.factor", f(r.factor), "a number >= 1");
    c.positive("rope_scaling.original_max_position_embeddings", r.original_max_position_embeddings);
    // c(beta) = d ln(L / (2 pi beta)) / (2 ln base) needs beta > 0; the ramp runs from the
    // beta_fast dimension up to the beta_slow one.
    if (!(r.beta_slow > 0.0f)) c.fail("rope_scaling.beta_slow", f(r.beta_slow), "a positive number");
    if (!(r.beta_fast >= r.beta_slow)) {
      c.fail("rope_scaling.beta_fast", f(r.beta_fast), ">= rope_scaling.beta_slow = " + f(r.beta_slow));
    }
    if (!(r.mscale_all_dim >= 0.0f)) c.fail("rope_scaling.mscale_all_dim", f(r.mscale_all_dim), "a number >= 0");
    // Hugging Face multiplies the rotary cos/sin by mscale(mscale) / mscale(mscale_all_dim);
    // DeepSeek's reference has one mscale and no such factor. They agree only when equal.
    if (r.mscale != r.mscale_all_dim) {
      c.fail("rope_scaling.mscale", f(r.mscale),
             "rope_scaling.mscale_all_dim = " + f(r.mscale_all_dim) +
                 " (DeepSeek's reference has a single mscale; unequal values rescale the rotary embedding)");
    }
  }

  if (quantization_config) {
    const ::dsa::model::quantization_config& q = *quantization_config;
    if (q.quant_method != "fp8") c.one_of("quantization_config.quant_method", q.quant_method, "\"fp8\"");
    if (q.fmt != "e4m3") c.one_of("quantization_config.fmt", q.fmt, "\"e4m3\"");
    if (q.activation_scheme != "dynamic") {
      c.one_of("quantization_config.activation_scheme", q.activation_scheme, "\"dynamic\" (1x128 act_quant per token)");
    }
    if (q.scale_fmt != "ue8m0" && !q.scale_fmt.empty()) {
      c.one_of("quantization_config.scale_fmt", q.scale_fmt, "\"ue8m0\", or the key absent for fp32 scales");
    }
    if (q.block_n != 128 || q.block_k != 128) {
      c.fail("quantization_config.weight_block_size", "[" + str(q.block_n) + ", " + str(q.block_k) + "]",
             "[128, 128] (the block size of weight_scale_inv)");
    }
    // Every FP8 linear quantizes its input activation in 1x128 groups along the input features.
    const auto in_features = [&](std::string_view key, index_t v, std::string_view used_by) {
      if (v % 128 != 0) {
        c.fail(key, str(v),
               "a multiple of 128 with FP8 weights (it is the input width of " + std::string(used_by) +
                   ", whose activations are quantized in 1x128 groups)");
      }
    };
    in_features("hidden_size", hidden_size, "q_a_proj, kv_a_proj, the indexer's wk and the FFN gate/up projections");
    in_features("q_lora_rank", q_lora_rank, "q_b_proj and the indexer's wq_b");
    in_features("intermediate_size", intermediate_size, "the dense down_proj");
    in_features("moe_intermediate_size", moe_intermediate_size, "the experts' down_proj");
    if ((num_attention_heads * v_head_dim) % 128 != 0) {
      c.fail("v_head_dim", str(v_head_dim),
             "num_attention_heads * v_head_dim (= " + str(num_attention_heads) + " * " + str(v_head_dim) +
                 ") a multiple of 128 with FP8 weights (the input width of o_proj)");
    }
  }

  if (torch_dtype != "bfloat16" && torch_dtype != "float16" && torch_dtype != "float32") {
    c.one_of("torch_dtype", torch_dtype, "\"bfloat16\", \"float16\" or \"float32\"");
  }
  for (const auto& [key, id] : {std::pair{"bos_token_id", bos_token_id}, std::pair{"eos_token_id", eos_token_id}}) {
    if (id && (*id < 0 || *id >= vocab_size)) {
      c.fail(key, str(*id), "a token id in [0, vocab_size = " + str(vocab_size) + ")");
    }
  }
}

DSA_MODEL_IO config config::from_json(const nlohmann::json& j, std::string_view source) {
  using detail::reader;
  if (!j.is_object()) {
    detail::fail_config(source, "top-level value", j.type_name(), "a JSON object (a Hugging Face config.json)");
  }
  const reader r(j, source, "");
  config c;
  c.model_type = r.req_string("model_type");
  // Check the model type before anything else: a foreign config would otherwise be reported
  // by its first missing V3.2 key, which hides the real problem.
  if (c.model_type != "deepseek_v32") {
    r.fail("model_type", ::dsa::quoted(c.model_type),
           "\"deepseek_v32\" (dsa implements the DeepSeek-V3.2 forward pass)");
  }

  c.vocab_size = r.req_int("vocab_size");
  c.hidden_size = r.req_int("hidden_size");
  c.intermediate_size = r.req_int("intermediate_size");
  c.moe_intermediate_size = r.req_int("moe_intermediate_size");
  c.num_hidden_layers = r.req_int("num_hidden_layers");
  c.first_k_dense_replace = r.req_int("first_k_dense_replace");
  c.num_attention_heads = r.req_int("num_attention_heads");
  c.num_key_value_heads = r.opt_int("num_key_value_heads").value_or(c.num_attention_heads);
  c.n_routed_experts = r.req_int("n_routed_experts");
  c.n_shared_experts = r.req_int("n_shared_experts");
  c.num_experts_per_tok = r.req_int("num_experts_per_tok");
  c.n_group = r.req_int("n_group");
  c.topk_group = r.req_int("topk_group");
  c.scoring_func = r.req_string("scoring_func");
  c.routed_scaling_factor = r.req_float("routed_scaling_factor");
  c.norm_topk_prob = r.req_bool("norm_topk_prob");
  c.topk_method = r.req_string("topk_method");
  c.q_lora_rank = r.req_int("q_lora_rank");
  c.kv_lora_rank = r.req_int("kv_lora_rank");
  c.qk_nope_head_dim = r.req_int("qk_nope_head_dim");
  c.qk_rope_head_dim = r.req_int("qk_rope_head_dim");
  c.v_head_dim = r.req_int("v_head_dim");
  c.index_n_heads = r.req_int("index_n_heads");
  c.index_head_dim = r.req_int("index_head_dim");
  c.index_topk = r.req_int("index_topk");
  c.rms_norm_eps = r.req_float("rms_norm_eps");
  c.rope_theta = r.req_float("rope_theta");
  c.max_position_embeddings = r.req_int("max_position_embeddings");
  c.hidden_act = r.opt_string("hidden_act").value_or("silu");
  c.tie_word_embeddings = r.opt_bool("tie_word_embeddings").value_or(false);
  c.bos_token_id = r.opt_int("bos_token_id");
  c.eos_token_id = r.opt_int("eos_token_id");
  // Recent transformers releases write "dtype" instead of "torch_dtype".
  c.torch_dtype = r.opt_string_alias("torch_dtype", "dtype").value_or("bfloat16");
  c.num_nextn_predict_layers = r.opt_int("num_nextn_predict_layers").value_or(0);

  // Keys dsa does not store but whose non-default values would change the model silently.
  if (const auto v = r.opt_int("moe_layer_freq"); v && *v != 1) {
    r.fail("moe_layer_freq", std::to_string(*v), "1 (every layer from first_k_dense_replace on is MoE)");
  }
  if (const auto v = r.opt_bool("attention_bias"); v && *v) {
    r.fail("attention_bias", "true", "false (the MLA projections have no bias)");
  }
  if (const auto v = r.opt_bool("rope_interleave"); v && !*v) {
    r.fail("rope_interleave", "false", "true (MLA rotates interleaved pairs (2j, 2j+1))");
  }
  if (const auto v = r.opt_bool("indexer_rope_interleave"); v && *v) {
    r.fail("indexer_rope_interleave", "true", "false (the V3.2 indexer rotates pairs (j, j + d/2))");
  }

  if (const nlohmann::json* rs = r.find("rope_scaling")) {
    if (!rs->is_object()) r.fail("rope_scaling", detail::excerpt(*rs), "a JSON object or null");
    const reader s(*rs, source, "rope_scaling.");
    rope_scaling_config y;
    const auto type = s.opt_string_alias("type", "rope_type");
    if (!type) s.missing("type", "a string");
    y.type = *type;
    if (y.type != "yarn") s.fail("type", ::dsa::quoted(y.type), "\"yarn\"");
    y.factor = s.req_float("factor");
    y.original_max_position_embeddings = s.req_int("original_max_position_embeddings");
    y.beta_fast = s.req_float("beta_fast");
    y.beta_slow = s.req_float("beta_slow");
    y.mscale = s.req_float("mscale");
    y.mscale_all_dim = s.req_float("mscale_all_dim");
    c.rope_scaling = y;
  }

  if (const nlohmann::json* qc = r.find("quantization_config")) {
    if (!qc->is_object()) r.fail("quantization_config", detail::excerpt(*qc), "a JSON object or null");
    const reader s(*qc, source, "quantization_config.");
    ::dsa::model::quantization_config q;
    q.quant_method = s.req_string("quant_method");
    q.fmt = s.opt_string("fmt").value_or("e4m3");
    q.activation_scheme = s.opt_string("activation_scheme").value_or("dynamic");
    q.scale_fmt = s.opt_string("scale_fmt").value_or("");
    const nlohmann::json* bs = s.find("weight_block_size");
    if (bs == nullptr) s.missing("weight_block_size", "[128, 128]");
    // Two integers in [0, 2^31): nlohmann keeps parsed non-negative numbers as unsigned and
    // values built in C++ as signed, so read both kinds.
    const auto extent = [](const nlohmann::json& v) -> index_t {
      if (v.is_number_unsigned()) {
        const std::uint64_t u = v.get<std::uint64_t>();
        return u > static_cast<std::uint64_t>(detail::max_extent) ? -1 : static_cast<index_t>(u);
      }
      if (v.is_number_integer()) {
        const std::int64_t i = v.get<std::int64_t>();
        return i > detail::max_extent ? -1 : i;
      }
      return -1;
    };
    if (!bs->is_array() || bs->size() != 2 || extent((*bs)[0]) < 0 || extent((*bs)[1]) < 0) {
      s.fail("weight_block_size", detail::excerpt(*bs), "[128, 128] (two non-negative integers)");
    }
    q.block_n = extent((*bs)[0]);
    q.block_k = extent((*bs)[1]);
    c.quantization_config = q;
  }

  c.validate(source);
  return c;
}

DSA_MODEL_IO config config::load(const std::filesystem::path& file_or_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file = file_or_dir;
  const bool is_dir = fs::is_directory(file_or_dir, ec);
  if (is_dir) file = file_or_dir / "config.json";
  const std::string name = ::dsa::detail::quoted_path(file);

  const fs::file_status st = fs::status(file, ec);
  if (!fs::exists(st)) {
    detail::fail_config(name, "file", "<not found>",
                        is_dir ? "a config.json in the directory " + ::dsa::detail::quoted_path(file_or_dir)
                               : std::string("an existing config.json, or a directory holding one"));
  }
  // The config.json of a checkpoint directory must not link outside it (a downloaded checkpoint's
  // config.json -> ~/.ssh/id_rsa would be read and its first bytes shown in the parse error):
  // refused before it is opened. A file the caller named itself is read as named.
  if (is_dir) {
    const ::dsa::detail::containment c = ::dsa::detail::contained_file(file_or_dir, file);
    if (!c) detail::fail_config(name, "real path", c.value, c.expected);
  }
  if (fs::is_directory(st)) detail::fail_config(name, "file", "<a directory>", "a config.json file");
  // Devices and pipes (/dev/zero, a FIFO) could be read forever.
  if (!fs::is_regular_file(st)) detail::fail_config(name, "file", "<not a regular file>", "a config.json file");
  const std::uintmax_t size = fs::file_size(file, ec);
  if (ec) detail::fail_config(name, "file", "<cannot stat: " + ec.message() + ">", "a readable config.json");
  if (size > detail::max_file_bytes) {
    detail::fail_config(name, "file size", std::to_string(size) + " bytes",
                        "at most 16 MiB (a config.json is a few KB; is this the right file?)");
  }

  std::ifstream in(file, std::ios::binary);
  if (!in) detail::fail_config(name, "file", "<cannot open>", "a readable config.json");
  std::string text(static_cast<std::size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (in.bad()) detail::fail_config(name, "file", "<read error>", "a readable config.json");

  // A key given twice is ambiguous (nlohmann would keep the last): rejected at any depth, as is
  // nesting deeper than ::dsa::detail::json_max_depth, before the document is built.
  const ::dsa::detail::json_structure_result structure =
      ::dsa::detail::json_structure_problem(text.data(), text.data() + text.size());
  using problem = ::dsa::detail::json_structure_result::problem;
  if (structure.found == problem::duplicate_key) {
    detail::fail_config(name, "key " + ::dsa::quoted(structure.key), "<given twice>", "each key once per object");
  }
  if (structure.found == problem::too_deep) {
    detail::fail_config(name, "JSON", "<nested deeper than " + std::to_string(::dsa::detail::json_max_depth) + " levels>",
                        "a config.json nesting objects and arrays at most that deep");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's position and reason, quoted: they carry the last token read from the file.
    detail::fail_config(name, "JSON", ::dsa::detail::json_parse_error(e.what()), "a valid JSON document");
  }

  return from_json(j, name);
}

DSA_MODEL_IO nlohmann::json config::to_json() const {
  using detail::json_float;
  nlohmann::json j = nlohmann::json::object();
  j["architectures"] = nlohmann::json::array({"DeepseekV32ForCausalLM"});
  j["model_type"] = model_type;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["moe_intermediate_size"] = moe_intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["first_k_dense_replace"] = first_k_dense_replace;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["n_routed_experts"] = n_routed_experts;
  j["n_shared_experts"] = n_shared_experts;
  j["num_experts_per_tok"] = num_experts_per_tok;
  j["n_group"] = n_group;
  j["topk_group"] = topk_group;
  j["scoring_func"] = scoring_func;
  j["routed_scaling_factor"] = json_float(routed_scaling_factor);
  j["norm_topk_prob"] = norm_topk_prob;
  j["topk_method"] = topk_method;
  j["q_lora_rank"] = q_lora_rank;
  j["kv_lora_rank"] = kv_lora_rank;
  j["qk_nope_head_dim"] = qk_nope_head_dim;
  j["qk_rope_head_dim"] = qk_rope_head_dim;
  j["v_head_dim"] = v_head_dim;
  j["index_n_heads"] = index_n_heads;
  j["index_head_dim"] = index_head_dim;
  j["index_topk"] = index_topk;
  j["rms_norm_eps"] = json_float(rms_norm_eps);
  j["rope_theta"] = json_float(rope_theta);
  if (rope_scaling) {
    const rope_scaling_config& r = *rope_scaling;
    j["rope_scaling"] = {{"type", r.type},
                         {"factor", json_float(r.factor)},
                         {"original_max_position_embeddings", r.original_max_position_embeddings},
                         {"beta_fast", json_float(r.beta_fast)},
                         {"beta_slow", json_float(r.beta_slow)},
                         {"mscale", json_float(r.mscale)},
                         {"mscale_all_dim", json_float(r.mscale_all_dim)}};
  }
  j["max_position_embeddings"] = max_position_embeddings;
  j["hidden_act"] = hidden_act;
  j["tie_word_embeddings"] = tie_word_embeddings;
  if (bos_token_id) j["bos_token_id"] = *bos_token_id;
  if (eos_token_id) j["eos_token_id"] = *eos_token_id;
  j["torch_dtype"] = torch_dtype;
  j["num_nextn_predict_layers"] = num_nextn_predict_layers;
  if (quantization_config) {
    const ::dsa::model::quantization_config& q = *quantization_config;
    nlohmann::json qj = {{"quant_method", q.quant_method},
                         {"fmt", q.fmt},
                         {"activation_scheme", q.activation_scheme},
                         {"weight_block_size", {q.block_n, q.block_k}}};
    if (!q.scale_fmt.empty()) qj["scale_fmt"] = q.scale_fmt;
    j["quantization_config"] = std::move(qj);
  }
  return j;
}

DSA_MODEL_IO std::string config::to_string() const {
  // Appended piece by piece, not streamed: no locale reaches the text (dsa/core/error.hpp).
  std::string s;
  auto add = [&s](const auto&... parts) { ((s += ::dsa::detail::format_value(parts)), ...); };
  const auto f = detail::short_float;
  add(model_type, ": ", num_hidden_layers, " layers (", first_k_dense_replace, " dense) hidden ", hidden_size,
      " vocab ", vocab_size, " | MLA ", num_attention_heads, " heads q_lora ", q_lora_rank, " kv_lora ", kv_lora_rank,
      " qk ", qk_nope_head_dim, "+", qk_rope_head_dim, " v ", v_head_dim, " softmax_scale ", f(softmax_scale()),
      " | MoE ", n_routed_experts, "x", moe_intermediate_size, " top-", num_experts_per_tok, " in ", n_group,
      " groups (top-", topk_group, ") + ", n_shared_experts, " shared, scale ", f(routed_scaling_factor),
      ", dense FFN ", intermediate_size, " | indexer ", index_n_heads, "x", index_head_dim, " top-", index_topk,
      " | RoPE theta ", f(rope_theta));
  if (yarn_enabled()) {
    add(" YaRN x", f(rope_scaling->factor), " ", rope_scaling->original_max_position_embeddings, " -> ",
        max_position_embeddings);
  } else {
    add(", max positions ", max_position_embeddings);
  }
  if (quantization_config) {
    add(" | ", quantization_config->quant_method, " ", quantization_config->fmt, " ", quantization_config->block_n,
        "x", quantization_config->block_k, " blocks, ", ue8m0_scales() ? "ue8m0" : "fp32", " scales");
  } else {
    add(" | ", torch_dtype, " weights");
  }
  return s;
}

#endif  // DSA_MODEL_IO_DEFINITIONS

}  // namespace model

DSA_NAMESPACE_END
