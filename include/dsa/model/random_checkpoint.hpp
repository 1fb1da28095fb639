// Random DeepSeek-V3.2 checkpoints: config.json + model.safetensors in the Hugging Face layout
// of deepseek-ai/DeepSeek-V3.2, with random weights. Used by tools/dsa_make_tiny_model, the
// model tests and bench/bench_forward.cpp, so that all of them run the same kind of model.
//
// Over 600 lines by choice: the tensor table (names, shapes, dtypes per layer kind) and the
// writers that fill it in the real checkpoint's layout must change together.
//
// Tensor names, dtypes and shapes follow the real checkpoint (and the golden tiny model in
// tests/data/tiny-dsv32): block-wise FP8 linear weights with `weight_scale_inv`, F32 norms, norm
// biases and `e_score_correction_bias`, BF16 embedding, lm_head, indexer.weights_proj and
// mlp.gate. With a config without quantization_config the linear weights are BF16 instead.
//
// Initialisation (the statistics of the golden tiny model, which keep activations O(1)):
//   linear weights [out, in]        N(0, 1/in), then quantized with dsa::weight_quant
//   embed_tokens                    N(0, 1)
//   lm_head, weights_proj, gate     N(0, 1/hidden), bf16
//   norm weights                    1 + 0.1 N(0, 1)
//   indexer.k_norm.bias             0.1 N(0, 1)
//   e_score_correction_bias         0.05 N(0, 1)
//
// Reproducibility: every tensor has its own random stream, seeded from (seed, tensor name), so a
// tensor does not depend on the order of generation or on the sizes of other tensors (changing
// the layer count keeps layer 0 as it was). The normal variates are Irwin-Hall sums of twelve
// 16-bit uniforms taken from std::mt19937_64 (whose output the C++ standard fixes): the sum is
// exact integer arithmetic, so the weights are bit-identical on every platform, unlike
// std::normal_distribution's. They are approximately normal and bounded by +-6 sigma.
//
// Size: a checkpoint whose tensors exceed shard_bytes (4 GiB by default; V3.2's layer widths,
// for instance) is written as shards, one per unit of the module tree (the embedding, each layer,
// the final norm with lm_head), named model-0000i-of-0000N.safetensors with a
// model.safetensors.index.json, as Hugging Face checkpoints are; each unit is generated, written
// and freed in turn, so the memory needed is that of the largest unit (at V3.2 widths with 32
// experts, the MoE layer's 1.5 GB), not of the whole checkpoint. The experts of a layer are
// generated in parallel (on `be`'s threads; each has its own stream, so the bytes do not depend
// on the thread count). Before anything is generated, random_checkpoint_size() sums every
// tensor's bytes from the config in checked 64-bit arithmetic, and a generation that would hold
// more than 3/4 of the machine's physical memory is refused with what it would need.
//
// Part of the dsa::model target.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <unistd.h>

#include "dsa/core/backend.hpp"
#include "dsa/core/checked_math.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/model/config.hpp"
#include "dsa/model/io_linkage.hpp"
#include "dsa/model/safetensors.hpp"
#include "dsa/ops/fp8_quant.hpp"

DSA_NAMESPACE_BEGIN

namespace model {

/// The configuration of the golden tiny model (tests/data/tiny-dsv32/config.json): hidden 256,
/// 3 layers (1 dense), 4 heads, q_lora 256, kv_lora 256, nope 64, rope 64, v 64, 16 experts of
/// 128 in 4 groups (top-2 groups, top-4 experts), 1 shared expert, indexer 8 heads x 128,
/// index_topk 32, vocab 512, max_position_embeddings 8192 with YaRN (factor 40), FP8 weights
/// with ue8m0 activation scales.
inline config tiny_config() {
  config c;
  c.vocab_size = 512;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.moe_intermediate_size = 128;
  c.num_hidden_layers = 3;
  c.first_k_dense_replace = 1;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 4;
  c.n_routed_experts = 16;
  c.n_shared_experts = 1;
  c.num_experts_per_tok = 4;
  c.n_group = 4;
  c.topk_group = 2;
  c.scoring_func = "sigmoid";
  c.routed_scaling_factor = 2.5f;
  c.norm_topk_prob = true;
  c.topk_method = "noaux_tc";
  c.q_lora_rank = 256;
  c.kv_lora_rank = 256;
  c.qk_nope_head_dim = 64;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 64;
  c.index_n_heads = 8;
  c.index_head_dim = 128;
  c.index_topk = 32;
  c.rms_norm_eps = 1e-6f;
  c.rope_theta = 10000.0f;
  rope_scaling_config r;
  r.type = "yarn";
  r.factor = 40.0f;
  r.original_max_position_embeddings = 4096;
  r.beta_fast = 32.0f;
  r.beta_slow = 1.0f;
  r.mscale = 1.0f;
  r.mscale_all_dim = 1.0f;
  c.rope_scaling = r;
  c.max_position_embeddings = 8192;
  c.hidden_act = "silu";
  c.tie_word_embeddings = false;
  c.bos_token_id = 0;
  c.eos_token_id = 1;
  c.torch_dtype = "bfloat16";
  c.quantization_config = ::dsa::model::quantization_config{};  // fp8 e4m3, dynamic, ue8m0, 128 x 128
  return c;
}

/// One generated tensor, owning its little-endian bytes.
struct owned_tensor {
  std::string name;
  dtype type = dtype::f32;
  std::vector<index_t> shape;
  std::vector<std::byte> data;

  index_t numel() const {
    index_t n = 1;
    for (index_t d : shape) n *= d;
    return n;
  }
};

namespace detail {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// The seed of a tensor's stream: FNV-1a of its name, mixed with the checkpoint seed.
inline std::uint64_t tensor_seed(std::uint64_t seed, std::string_view name) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (const char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return splitmix64(splitmix64(seed) ^ h);
}

/// Approximately standard-normal variates, bit-identical on every platform (see the file
/// comment): z = sum of twelve (c_i + 1/2) / 2^16 minus 6, c_i the 16-bit chunks of three
/// engine outputs. Mean exactly 0, variance 1 - 2^-32.
class normal_stream {
 public:
  explicit normal_stream(std::uint64_t seed) : engine_(seed) {}
  float operator()() {
    std::uint64_t sum = 0;  // sum of the twelve c_i, at most 12 * 65535
    for (int k = 0; k < 3; ++k) {
      const std::uint64_t x = engine_();
      sum += (x & 0xFFFFu) + ((x >> 16) & 0xFFFFu) + ((x >> 32) & 0xFFFFu) + (x >> 48);
    }
    // sum(c_i + 1/2) / 2^16 - 6 = (sum + 6 - 6 * 2^16) / 2^16, exact in double.
    const double z = (static_cast<double>(sum) + 6.0 - 6.0 * 65536.0) * 0x1.0p-16;
    return static_cast<float>(z);
  }

 private:
  std::mt19937_64 engine_;
};

template <class T>
std::vector<std::byte> to_bytes(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

/// Bytes a dry generator counted: saturated at UINT64_MAX with `overflow` set when the exact
/// count does not fit in 64 bits.
struct byte_count {
  std::uint64_t bytes = 0;
  bool overflow = false;

  void add(std::uint64_t n) {
    if (overflow || add_overflows(bytes, n, &bytes)) set_overflow();
  }
  void set_overflow() {
    overflow = true;
    bytes = UINT64_MAX;
  }
};

/// `factors`' product, or nothing when it does not fit in 64 bits.
inline std::optional<std::uint64_t> checked_product(std::initializer_list<std::uint64_t> factors) {
  std::uint64_t r = 1;
  for (const std::uint64_t f : factors) {
    if (mul_overflows(r, f, &r)) return std::nullopt;
  }
  return r;
}

/// Builds the tensors of one checkpoint, unit by unit (unit 0: the embedding; 1 .. L: the
/// layers; L + 1: the final norm and lm_head); one method per kind of tensor. With `dry` set it
/// produces only names, dtypes and shapes (no data) and counts, in checked 64-bit arithmetic, the
/// bytes the unit's tensors take (`held()`) and the most a tensor's generation holds beside them
/// (`staging()`, and `expert_staging()` per thread for the experts, generated in parallel). A dry
/// MoE layer lists expert 0 alone and counts it n_routed_experts times, so sizing a config with
/// 2^31 experts allocates nothing per expert.
class generator {
 public:
  generator(const config& cfg, std::uint64_t seed, const cpu_backend& be, bool dry = false)
      : cfg_(cfg), seed_(seed), be_(be), dry_(dry) {}

  const byte_count& held() const { return held_; }
  const byte_count& staging() const { return staging_; }
  const byte_count& expert_staging() const { return expert_staging_; }

  index_t units() const { return cfg_.num_hidden_layers + 2; }

  std::vector<owned_tensor> unit(index_t u) {
    const config& c = cfg_;
    const index_t hidden = c.hidden_size;
    out_.clear();
    held_ = {};
    staging_ = {};
    expert_staging_ = {};
    if (u == 0) {
      embedding("model.embed_tokens.weight", c.vocab_size, hidden);
    } else if (u == units() - 1) {
      norm("model.norm.weight", hidden);
      if (!c.tie_word_embeddings) dense_bf16("lm_head.weight", c.vocab_size, hidden);
    } else {
      layer(u - 1);
    }
    return std::move(out_);
  }

  std::vector<owned_tensor> run() {
    std::vector<owned_tensor> all;
    for (index_t u = 0; u < units(); ++u) {
      std::vector<owned_tensor> part = unit(u);
      for (owned_tensor& t : part) all.push_back(std::move(t));
    }
    return all;
  }

 private:
  void layer(index_t l) {
    const config& c = cfg_;
    const index_t hidden = c.hidden_size;
    const std::string p = "model.layers." + std::to_string(l) + ".";
    norm(p + "input_layernorm.weight", hidden);
    norm(p + "post_attention_layernorm.weight", hidden);
    const std::string a = p + "self_attn.";
    linear(a + "q_a_proj", c.q_lora_rank, hidden);
    norm(a + "q_a_layernorm.weight", c.q_lora_rank);
    linear(a + "q_b_proj", c.num_attention_heads * c.qk_head_dim(), c.q_lora_rank);
    linear(a + "kv_a_proj_with_mqa", c.kv_lora_rank + c.qk_rope_head_dim, hidden);
    norm(a + "kv_a_layernorm.weight", c.kv_lora_rank);
    linear(a + "kv_b_proj", c.num_attention_heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
    linear(a + "o_proj", hidden, c.num_attention_heads * c.v_head_dim);
    const std::string ix = a + "indexer.";
    linear(ix + "wq_b", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
    linear(ix + "wk", c.index_head_dim, hidden);
    norm(ix + "k_norm.weight", c.index_head_dim);
    vector_f32(ix + "k_norm.bias", c.index_head_dim, 0.1f);
    dense_bf16(ix + "weights_proj.weight", c.index_n_heads, hidden);
    const std::string m = p + "mlp.";
    if (!c.is_moe_layer(l)) {
      mlp(m, c.intermediate_size);
      return;
    }
    dense_bf16(m + "gate.weight", c.n_routed_experts, hidden);
    vector_f32(m + "gate.e_score_correction_bias", c.n_routed_experts, 0.05f);
    // The experts in parallel, each into its own list, appended in expert order.
    std::vector<std::vector<owned_tensor>> experts(dry_ ? 0 : static_cast<std::size_t>(c.n_routed_experts));
    auto run_experts = [&](index_t e0, index_t e1) {
      for (index_t e = e0; e < e1; ++e) {
        generator g(cfg_, seed_, cpu_backend{1}, dry_);
        g.mlp(m + "experts." + std::to_string(e) + ".", c.moe_intermediate_size);
        experts[static_cast<std::size_t>(e)] = std::move(g.out_);
      }
    };
    if (dry_) {
      // Expert 0 stands for all of them (same shapes): nothing is allocated per expert.
      generator g(cfg_, seed_, cpu_backend{1}, true);
      g.mlp(m + "experts.0.", c.moe_intermediate_size);
      for (owned_tensor& t : g.out_) out_.push_back(std::move(t));
      const auto n = static_cast<std::uint64_t>(c.n_routed_experts);
      if (const auto all = checked_product({g.held_.bytes, n}); all && !g.held_.overflow) {
        held_.add(*all);
      } else {
        held_.set_overflow();
      }
      expert_staging_ = g.staging_;
    } else {
      cpu_detail::parallel_for(be_, c.n_routed_experts, 1, run_experts);
    }
    for (auto& list : experts) {
      for (owned_tensor& t : list) out_.push_back(std::move(t));
    }
    if (c.n_shared_experts > 0) mlp(m + "shared_experts.", c.n_shared_experts * c.moe_intermediate_size);
  }

  // n values of offset + scale * N(0, 1) from the tensor's own stream, produced in chunks of at
  // most `chunk` values into `sink(first, values, count)` (the stream is sequential, so chunking
  // does not change a value).
  template <class Sink>
  void normals_chunked(std::string_view name, index_t n, float scale, float offset, Sink&& sink) {
    normal_stream z(tensor_seed(seed_, name));
    constexpr index_t chunk = index_t{1} << 20;
    std::vector<float> v(static_cast<std::size_t>(std::min(n, chunk)));
    for (index_t i0 = 0; i0 < n; i0 += chunk) {
      const index_t len = std::min(chunk, n - i0);
      for (index_t i = 0; i < len; ++i) v[static_cast<std::size_t>(i)] = offset + scale * z();
      sink(i0, v.data(), len);
    }
  }

  // n values of `scale` * N(0, 1) from the tensor's own stream.
  std::vector<float> normals(std::string_view name, index_t n, float scale, float offset = 0.0f) {
    std::vector<float> v(static_cast<std::size_t>(n));
    normals_chunked(name, n, scale, offset, [&](index_t i0, const float* src, index_t len) {
      std::copy(src, src + len, v.begin() + i0);
    });
    return v;
  }

  void push(std::string name, dtype t, std::vector<index_t> shape, std::vector<std::byte> data) {
    if (dry_) {
      std::uint64_t n = dtype_size(t);
      bool overflow = false;
      for (const index_t d : shape) overflow |= mul_overflows(n, static_cast<std::uint64_t>(d), &n);
      if (overflow) {
        held_.set_overflow();
      } else {
        held_.add(n);
      }
    }
    out_.push_back(owned_tensor{std::move(name), t, std::move(shape), std::move(data)});
  }

  // A dry run's record of what generating one tensor holds besides the unit's finished tensors:
  // the largest such amount counts (tensors are generated one after another).
  void stage(std::initializer_list<std::uint64_t> factors) { stage(checked_product(factors)); }
  void stage(std::optional<std::uint64_t> n) {
    if (!dry_) return;
    if (!n) {
      staging_.set_overflow();
    } else if (!staging_.overflow) {
      staging_.bytes = std::max(staging_.bytes, *n);
    }
  }

  // A bf16 tensor of offset + scale * N(0, 1), converted chunk by chunk (no fp32 copy of the
  // whole tensor: the V3.2 embedding is 926M values).
  void push_bf16_normals(std::string name, std::vector<index_t> shape, float scale) {
    if (dry_) {
      // normals_chunked's buffer: at most 2^20 floats.
      std::optional<std::uint64_t> n = 1;
      for (const index_t d : shape) n = n ? checked_product({*n, static_cast<std::uint64_t>(d)}) : n;
      stage({std::min<std::uint64_t>(n.value_or(UINT64_MAX), std::uint64_t{1} << 20), sizeof(float)});
      push(std::move(name), dtype::bf16, std::move(shape), {});
      return;
    }
    // Sized by the dry run's checks (write_random_checkpoint, random_checkpoint_tensors) first:
    // this product fits.
    index_t n = 1;
    for (index_t d : shape) n *= d;
    std::vector<std::byte> bytes(static_cast<std::size_t>(n) * sizeof(bf16));
    normals_chunked(name, n, scale, 0.0f, [&](index_t i0, const float* src, index_t len) {
      for (index_t i = 0; i < len; ++i) {
        const bf16 b(src[i]);
        std::memcpy(bytes.data() + static_cast<std::size_t>(i0 + i) * sizeof(bf16), &b, sizeof(bf16));
      }
    });
    push(std::move(name), dtype::bf16, std::move(shape), std::move(bytes));
  }

  void push_bf16(std::string name, std::vector<index_t> shape, const std::vector<float>& v) {
    std::vector<bf16> b(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) b[i] = bf16(v[i]);
    push(std::move(name), dtype::bf16, std::move(shape), to_bytes(b));
  }

  void norm(std::string name, index_t n) {
    if (dry_) {
      stage({static_cast<std::uint64_t>(n), sizeof(float)});  // the values, before their byte copy
      return push(std::move(name), dtype::f32, {n}, {});
    }
    std::vector<float> v = normals(name, n, 0.1f, 1.0f);
    push(std::move(name), dtype::f32, {n}, to_bytes(v));
  }

  void vector_f32(std::string name, index_t n, float scale) {
    if (dry_) {
      stage({static_cast<std::uint64_t>(n), sizeof(float)});
      return push(std::move(name), dtype::f32, {n}, {});
    }
    std::vector<float> v = normals(name, n, scale);
    push(std::move(name), dtype::f32, {n}, to_bytes(v));
  }

  void embedding(std::string name, index_t rows, index_t cols) { push_bf16_normals(std::move(name), {rows, cols}, 1.0f); }

  void dense_bf16(std::string name, index_t rows, index_t cols) {
    push_bf16_normals(std::move(name), {rows, cols}, inv_sqrt(cols));
  }

  // A linear layer `prefix`.weight [out, in] ~ N(0, 1/in): FP8 codes plus weight_scale_inv, or
  // bf16 when the config has no quantization_config.
  void linear(const std::string& prefix, index_t out, index_t in) {
    const std::string name = prefix + ".weight";
    if (!cfg_.fp8_weights()) {
      push_bf16_normals(name, {out, in}, inv_sqrt(in));
      return;
    }
    const index_t bn = cfg_.quantization_config->block_n;
    const index_t bk = cfg_.quantization_config->block_k;
    if (bn != weight_quant_block || bk != weight_quant_block) {
      fail("model::random_checkpoint", "quantization_config.weight_block_size", std::to_string(bn) + "x" + std::to_string(bk),
           "128x128 (the blocks of dsa::weight_quant)");
    }
    const index_t sr = (out + bn - 1) / bn;
    const index_t sc = (in + bk - 1) / bk;
    if (dry_) {
      // The fp32 values and their codes coexist (5 bytes per element; then the codes and their
      // byte copy, 2), and the scales with their byte copy (8 bytes per block).
      const auto values = checked_product({static_cast<std::uint64_t>(out), static_cast<std::uint64_t>(in), 5});
      const auto scales = checked_product({static_cast<std::uint64_t>(sr), static_cast<std::uint64_t>(sc), 8});
      std::uint64_t both = 0;
      stage(values && scales && !add_overflows(*values, *scales, &both) ? std::optional<std::uint64_t>(both)
                                                                       : std::nullopt);
      push(name, dtype::f8_e4m3, {out, in}, {});
      push(prefix + ".weight_scale_inv", dtype::f32, {sr, sc}, {});
      return;
    }
    std::vector<float> w = normals(name, out * in, inv_sqrt(in));
    std::vector<fp8_e4m3> q(w.size());
    std::vector<float> s(static_cast<std::size_t>(sr * sc));
    weight_quant(be_, host_view<const float, 2>(w.data(), {out, in}), host_view<fp8_e4m3, 2>(q.data(), {out, in}),
                 host_view<float, 2>(s.data(), {sr, sc}));
    w = {};
    push(name, dtype::f8_e4m3, {out, in}, to_bytes(q));
    push(prefix + ".weight_scale_inv", dtype::f32, {sr, sc}, to_bytes(s));
  }

  void mlp(const std::string& prefix, index_t inter) {
    linear(prefix + "gate_proj", inter, cfg_.hidden_size);
    linear(prefix + "up_proj", inter, cfg_.hidden_size);
    linear(prefix + "down_proj", cfg_.hidden_size, inter);
  }

  static float inv_sqrt(index_t n) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(n))); }

  const config& cfg_;
  std::uint64_t seed_;
  cpu_backend be_;
  bool dry_;
  std::vector<owned_tensor> out_;
  byte_count held_;            // dry: bytes of the unit's tensors
  byte_count staging_;         // dry: the most one tensor's generation holds beside them
  byte_count expert_staging_;  // dry: the same for one expert (per thread generating experts)
};

/// Writes `text` to dir/name through a fresh temporary file (exclusively created under a random
/// name, never following a planted link: ::dsa::detail::temp_file) renamed into place.
inline void write_text_file(const std::filesystem::path& dir, const std::string& name, const std::string& text) {
  ::dsa::detail::temp_file tmp(dir / name);
  tmp.write(text.data(), text.size());
  tmp.commit();
}

/// "12.50 GiB (13421772800 bytes)", or "more than 2^64 - 1 bytes".
inline std::string format_bytes(std::uint64_t n, bool overflow) {
  if (overflow) return "more than 2^64 - 1 bytes";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, static_cast<double>(n) / double(std::uint64_t{1} << 30),
                               std::chars_format::fixed, 2);
  return std::string(buf, r.ptr) + " GiB (" + std::to_string(n) + " bytes)";
}

/// The physical memory of this machine in bytes, or 0 when the system does not say.
inline std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  std::uint64_t n = 0;
  if (mul_overflows(static_cast<std::uint64_t>(pages), static_cast<std::uint64_t>(page), &n)) return UINT64_MAX;
  return n;
}

}  // namespace detail

/// Every tensor of a random checkpoint for `cfg` (validated first; throws dsa::error if it is
/// not a config dsa can run), in the order of the Hugging Face module tree. Deterministic in
/// (cfg, seed); `be` only sets the threads of the weight quantization.
DSA_MODEL_IO std::vector<owned_tensor> random_checkpoint_tensors(const config& cfg, std::uint64_t seed,
                                                                 const cpu_backend& be = cpu_backend{});

/// The default shard size of write_random_checkpoint: checkpoints up to this size are one
/// model.safetensors file.
inline constexpr std::uint64_t random_checkpoint_shard_bytes = std::uint64_t{4} << 30;

/// What a random checkpoint for a config takes, computed from the config alone before anything
/// is generated: checked 64-bit sums over every tensor (the experts of a layer counted as one
/// times n_routed_experts, so a config of 2^31 experts is sized without allocating per expert).
struct random_checkpoint_footprint {
  std::uint64_t total_bytes = 0;         ///< the tensors' data (the files add their JSON headers)
  std::uint64_t largest_unit_bytes = 0;  ///< the largest unit's tensors
  std::string largest_unit;              ///< "model.embed_tokens", "model.layers.<l>" or "model.norm + lm_head"
  /// What the generation holds in memory at once: every tensor (one file) or the largest unit
  /// (sharded), plus the most the generation of one tensor holds beside them (per thread for the
  /// experts, which are generated in parallel). An estimate from below: allocator overhead and
  /// the safetensors headers come on top.
  std::uint64_t memory_bytes = 0;
  bool sharded = false;   ///< total_bytes > shard_bytes: written (and held) one unit at a time
  bool overflow = false;  ///< some count exceeds 2^64 - 1 bytes (the counts are then UINT64_MAX)
};

/// The footprint of write_random_checkpoint(dir, cfg, seed, be, shard_bytes) (`cfg` validated
/// first). random_checkpoint_tensors holds everything at once: its footprint is that of a
/// shard_bytes of UINT64_MAX.
DSA_MODEL_IO random_checkpoint_footprint random_checkpoint_size(
    const config& cfg, const cpu_backend& be = cpu_backend{}, std::uint64_t shard_bytes = random_checkpoint_shard_bytes);

/// The most memory write_random_checkpoint and random_checkpoint_tensors let a generation hold
/// (random_checkpoint_footprint::memory_bytes): 3/4 of this machine's physical memory, leaving a
/// quarter to the system, the page cache of the file being written and the estimate's slack; 0
/// (no limit) when the system does not report its memory. Beyond it a generation would end in
/// std::bad_alloc or the kernel's OOM killer, after minutes of work, instead of a message.
inline std::uint64_t random_checkpoint_memory_limit() {
  const std::uint64_t physical = detail::physical_memory_bytes();
  return physical / 4 * 3;
}

/// Writes a random checkpoint into `dir` (created if needed): config.json (config::to_json) and
/// the tensors, whose __metadata__ records the generator and the seed: one model.safetensors
/// when they take at most `shard_bytes`, else one shard per unit (embedding, each layer, final
/// norm with lm_head) and model.safetensors.index.json, generated and written one at a time.
/// Existing files of those names are replaced; a directory that holds the other layout (an
/// index where one file is to be written) is refused, since the loader would read the index.
DSA_MODEL_IO void write_random_checkpoint(const std::filesystem::path& dir, const config& cfg, std::uint64_t seed,
                                          const cpu_backend& be = cpu_backend{},
                                          std::uint64_t shard_bytes = random_checkpoint_shard_bytes);

#if DSA_MODEL_IO_DEFINITIONS  // dsa/model/io_linkage.hpp
DSA_MODEL_IO random_checkpoint_footprint random_checkpoint_size(const config& cfg, const cpu_backend& be,
                                                                std::uint64_t shard_bytes) {
  namespace rd = detail;
  cfg.validate("model::random_checkpoint");
  random_checkpoint_footprint f;
  rd::byte_count total, peak;  // peak: the largest unit's tensors plus its generation's staging
  const auto threads = static_cast<std::uint64_t>(std::max(1, cpu_detail::thread_count(be)));
  const auto experts = static_cast<std::uint64_t>(cfg.n_routed_experts);
  rd::generator gen(cfg, 0, be, true);
  std::uint64_t max_staging = 0;
  for (index_t u = 0; u < gen.units(); ++u) {
    (void)gen.unit(u);
    const rd::byte_count& held = gen.held();
    total.add(held.bytes);
    if (held.overflow) total.set_overflow();
    if (held.overflow || held.bytes > f.largest_unit_bytes || f.largest_unit.empty()) {
      f.largest_unit_bytes = held.bytes;
      f.largest_unit = u == 0                ? std::string("model.embed_tokens")
                       : u == gen.units() - 1 ? std::string("model.norm + lm_head")
                                              : "model.layers." + std::to_string(u - 1);
    }
    // Staging: one tensor at a time, or one expert per thread at a time.
    rd::byte_count staging = gen.staging();
    if (const auto per_thread = rd::checked_product({gen.expert_staging().bytes, std::min(threads, experts)});
        gen.expert_staging().overflow || !per_thread) {
      staging.set_overflow();
    } else if (!staging.overflow) {
      staging.bytes = std::max(staging.bytes, *per_thread);
    }
    if (staging.overflow) {
      peak.set_overflow();
    } else {
      max_staging = std::max(max_staging, staging.bytes);
      rd::byte_count unit = held;
      unit.add(staging.bytes);
      if (unit.overflow) {
        peak.set_overflow();
      } else if (!peak.overflow) {
        peak.bytes = std::max(peak.bytes, unit.bytes);
      }
    }
  }
  f.total_bytes = total.bytes;
  f.sharded = total.overflow || total.bytes > shard_bytes;
  rd::byte_count memory = peak;
  if (!f.sharded) {
    memory = total;
    memory.add(max_staging);
    if (peak.overflow) memory.set_overflow();
  }
  f.memory_bytes = memory.bytes;
  f.overflow = total.overflow || memory.overflow;
  return f;
}

namespace detail {

/// Refuses a generation whose footprint does not fit in 64 bits or whose memory exceeds
/// random_checkpoint_memory_limit(), before anything is allocated, naming what it would need.
inline void check_footprint(std::string_view op, const random_checkpoint_footprint& f) {
  if (f.overflow) {
    fail(op, "checkpoint size", "more than 2^64 - 1 bytes",
         "a configuration whose tensors can be counted in 64 bits (reduce the sizes)");
  }
  const std::uint64_t limit = random_checkpoint_memory_limit();
  if (limit != 0 && f.memory_bytes > limit) {
    fail(op, "memory needed",
         format_bytes(f.memory_bytes, false) + ", for tensors of " + format_bytes(f.total_bytes, false) +
             " whose largest unit, " + f.largest_unit + ", takes " + format_bytes(f.largest_unit_bytes, false),
         "at most " + format_bytes(limit, false) + " (3/4 of this machine's physical memory): " +
             (f.sharded ? "the largest unit is generated whole in memory, so reduce its sizes"
                        : "a checkpoint of one file is generated whole in memory, so a smaller shard size, "
                          "which generates one unit at a time, or smaller sizes"));
  }
}

}  // namespace detail

DSA_MODEL_IO std::vector<owned_tensor> random_checkpoint_tensors(const config& cfg, std::uint64_t seed,
                                                                 const cpu_backend& be) {
  // Every tensor is held at once: sized, and refused if it cannot be, before any is generated.
  detail::check_footprint("model::random_checkpoint_tensors",
                                            random_checkpoint_size(cfg, be, UINT64_MAX));
  return detail::generator(cfg, seed, be).run();
}

DSA_MODEL_IO void write_random_checkpoint(const std::filesystem::path& dir, const config& cfg, std::uint64_t seed,
                                          const cpu_backend& be, std::uint64_t shard_bytes) {
  namespace fs = std::filesystem;
  namespace rd = detail;
  // The sizes first (validating cfg): nothing is created or allocated for a checkpoint that
  // cannot be generated in this machine's memory.
  const random_checkpoint_footprint footprint = random_checkpoint_size(cfg, be, shard_bytes);
  rd::check_footprint("model::write_random_checkpoint", footprint);
  const std::uint64_t total = footprint.total_bytes;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    fail("model::write_random_checkpoint", "dir", ::dsa::detail::quoted_path(dir),
         "a directory that can be created (" + (ec ? ec.message() : std::string("not a directory")) + ")");
  }
  const std::map<std::string, std::string> metadata{
      {"format", "pt"}, {"generator", "dsa::model::write_random_checkpoint"}, {"seed", std::to_string(seed)}};
  auto write_file = [&](const fs::path& path, const std::vector<owned_tensor>& tensors) {
    std::vector<safetensors_entry> entries;
    entries.reserve(tensors.size());
    for (const owned_tensor& t : tensors) entries.push_back(safetensors_entry{t.name, t.type, t.shape, std::span<const std::byte>(t.data)});
    write_safetensors(path, entries, metadata);
  };

  if (!footprint.sharded) {
    if (fs::exists(dir / safetensors_checkpoint::index_name)) {
      fail("model::write_random_checkpoint", "dir", ::dsa::detail::quoted_path(dir),
           "a directory without " + std::string(safetensors_checkpoint::index_name) +
               " (it holds a sharded checkpoint, which the loader would read instead of model.safetensors)");
    }
    write_file(dir / safetensors_checkpoint::single_name, rd::generator(cfg, seed, be).run());
  } else {
    rd::generator gen(cfg, seed, be);
    const index_t units = gen.units();
    nlohmann::json weight_map = nlohmann::json::object();
    auto shard_name = [&](index_t u) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "model-%05lld-of-%05lld.safetensors", static_cast<long long>(u + 1),
                    static_cast<long long>(units));
      return std::string(buf);
    };
    for (index_t u = 0; u < units; ++u) {
      const std::vector<owned_tensor> tensors = gen.unit(u);
      const std::string name = shard_name(u);
      write_file(dir / name, tensors);
      for (const owned_tensor& t : tensors) weight_map[t.name] = name;
    }
    nlohmann::json index = nlohmann::json::object();
    index["metadata"] = {{"total_size", total}, {"format", "pt"}, {"generator", "dsa::model::write_random_checkpoint"},
                         {"seed", std::to_string(seed)}};
    index["weight_map"] = weight_map;
    rd::write_text_file(dir, std::string(safetensors_checkpoint::index_name), index.dump(2) + "\n");
  }
  rd::write_text_file(dir, "config.json", cfg.to_json().dump(2) + "\n");
}
#endif  // DSA_MODEL_IO_DEFINITIONS

}  // namespace model

DSA_NAMESPACE_END
