// dsa::model::device_weights: a DeepSeek-V3.2 checkpoint's tensors copied once to device memory,
// with the structure of dsa::model::weights (dsa/model/weights.hpp) and device views in place of
// the host views into the memory-mapped shards.
//
// Every tensor the forward pass reads (FP8 codes and their weight_scale_inv blocks as stored in
// the checkpoint, bf16 weights, fp32 norm weights and biases, already widened from BF16 where the
// checkpoint stores them so) goes into ONE cudaMalloc arena, each tensor at a 256-byte aligned
// offset (the alignment of cudaMalloc itself, so vectorised loads and cuBLAS see the same
// alignment as for separately allocated tensors). The copies are enqueued on a stream; the host
// tensors are not needed afterwards, but the transformer keeps the host weights for its
// weights() accessor and the derived decode weights.
//
// The whole model must fit in device memory: a tiny or truncated (num_layers) checkpoint on one
// GPU. The real 61-layer V3.2 (~690 GB of FP8 weights) does not fit on one device; load a few
// layers of it to smoke-test kernels.
//
// Host-only C++ (g++ or nvcc); part of the dsa::model and dsa::cuda targets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/memory.hpp"
#include "dsa/model/weights.hpp"
#include "dsa/numerics/linear.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

/// The weight structs of dsa/model/weights.hpp with device views.
using device_linear_weight = basic_linear_weight<device_space>;
using device_mlp_weights = basic_mlp_weights<device_space>;
using device_indexer_weights = basic_indexer_weights<device_space>;
using device_attention_weights = basic_attention_weights<device_space>;
using device_moe_weights = basic_moe_weights<device_space>;
using device_layer_weights = basic_layer_weights<device_space>;

/// The device copy of a `weights`. Move-only: it owns the arena its views point into.
class device_weights {
 public:
  device_weights() = default;

  /// Copies every tensor of `w` that the forward pass reads to the device, enqueued on `stream`
  /// (synchronise it, or order other streams after it, before using the views).
  device_weights(const weights& w, cudaStream_t stream) {
    // Two passes over the same traversal: the first sums the aligned sizes, the second copies
    // into the one allocation and builds the views.
    std::size_t total = 0;
    bind(w, [&total](const void*, std::size_t bytes) -> std::byte* {
      total = align(total) + bytes;
      return nullptr;
    });
    arena_ = device_buffer<std::byte>(static_cast<index_t>(align(total)));
    std::size_t at = 0;
    bind(w, [this, &at, stream](const void* src, std::size_t bytes) -> std::byte* {
      at = align(at);
      std::byte* dst = arena_.data() + at;
      ::dsa::detail::copy_bytes(dst, src, bytes, cudaMemcpyHostToDevice, stream);
      at += bytes;
      return dst;
    });
  }

  device_weights(device_weights&&) noexcept = default;
  device_weights& operator=(device_weights&&) noexcept = default;

  device_view<const bf16, 2> embed_tokens;
  std::vector<device_layer_weights> layers;
  device_view<const float, 1> norm;
  device_view<const bf16, 2> lm_head;

  /// Device bytes held by the weights.
  std::size_t bytes() const { return arena_.size_bytes(); }

 private:
  static constexpr std::size_t alignment = 256;
  static std::size_t align(std::size_t n) { return (n + alignment - 1) / alignment * alignment; }

  // Upload(src, bytes) -> device address (null in the sizing pass). Views of absent tensors stay
  // absent; every tensor of a checkpoint is contiguous (safetensors stores them densely).
  template <class Upload, class T, std::size_t R>
  static device_view<const T, R> upload(Upload& up, host_view<const T, R> v) {
    if (v.is_absent()) return {};
    if (!v.is_contiguous()) fail("model::device_weights", "tensor strides", "non-contiguous", "a contiguous tensor");
    const auto* dst = reinterpret_cast<const T*>(up(v.data_handle(), static_cast<std::size_t>(v.size()) * sizeof(T)));
    return device_view<const T, R>(dst, v.extents());
  }

  template <class Upload>
  static device_linear_weight upload(Upload& up, const linear_weight& l) {
    device_linear_weight d;  // no packed copy: that is the CPU kernels' layout
    d.name = l.name;
    d.q = upload(up, l.q);
    d.scale = upload(up, l.scale);
    d.w = upload(up, l.w);
    return d;
  }

  template <class Upload>
  static device_mlp_weights upload(Upload& up, const mlp_weights& m) {
    return {upload(up, m.gate_proj), upload(up, m.up_proj), upload(up, m.down_proj)};
  }

  // The routed experts' projections as one [3, n_experts] table of fp8_weight_ref (gate, up,
  // down) pointing at their device copies, itself uploaded; absent unless every expert is FP8.
  // The host side is kept with the device_weights (`tables`), as the copy is only enqueued.
  template <class Upload>
  static device_view<const fp8_weight_ref, 2> upload_expert_table(Upload& up, const moe_weights& host,
                                                                  const device_moe_weights& m,
                                                                  std::vector<std::vector<fp8_weight_ref>>& tables) {
    const index_t n = static_cast<index_t>(m.experts.size());
    if (n == 0) return {};
    for (const mlp_weights& e : host.experts) {
      if (!e.gate_proj.fp8() || !e.up_proj.fp8() || !e.down_proj.fp8()) return {};
    }
    std::vector<fp8_weight_ref>& table = tables.emplace_back(static_cast<std::size_t>(3 * n));
    const auto ref = [](const device_linear_weight& l) {
      return fp8_weight_ref{l.q.data_handle(), l.q.stride(0), l.scale.data_handle(), l.scale.stride(0)};
    };
    for (index_t e = 0; e < n; ++e) {
      const device_mlp_weights& x = m.experts[static_cast<std::size_t>(e)];
      table[static_cast<std::size_t>(e)] = ref(x.gate_proj);
      table[static_cast<std::size_t>(n + e)] = ref(x.up_proj);
      table[static_cast<std::size_t>(2 * n + e)] = ref(x.down_proj);
    }
    return upload(up, host_view<const fp8_weight_ref, 2>(table.data(), {3, n}));
  }

  template <class Upload>
  void bind(const weights& w, Upload&& up) {
    expert_tables_.clear();
    const bool lm_head_tied = w.lm_head.data_handle() == w.embed_tokens.data_handle();
    embed_tokens = upload(up, w.embed_tokens);
    norm = upload(up, w.norm);
    lm_head = lm_head_tied ? embed_tokens : upload(up, w.lm_head);
    layers.clear();
    layers.reserve(w.layers.size());
    for (const layer_weights& lw : w.layers) {
      device_layer_weights d;
      d.input_layernorm = upload(up, lw.input_layernorm);
      d.post_attention_layernorm = upload(up, lw.post_attention_layernorm);
      const attention_weights& a = lw.attn;
      d.attn.q_a_proj = upload(up, a.q_a_proj);
      d.attn.q_a_layernorm = upload(up, a.q_a_layernorm);
      d.attn.q_b_proj = upload(up, a.q_b_proj);
      d.attn.kv_a_proj_with_mqa = upload(up, a.kv_a_proj_with_mqa);
      d.attn.kv_a_layernorm = upload(up, a.kv_a_layernorm);
      d.attn.kv_b_proj = upload(up, a.kv_b_proj);
      d.attn.o_proj = upload(up, a.o_proj);
      d.attn.indexer.wq_b = upload(up, a.indexer.wq_b);
      d.attn.indexer.wk = upload(up, a.indexer.wk);
      d.attn.indexer.k_norm_weight = upload(up, a.indexer.k_norm_weight);
      d.attn.indexer.k_norm_bias = upload(up, a.indexer.k_norm_bias);
      d.attn.indexer.weights_proj = upload(up, a.indexer.weights_proj);
      if (lw.mlp) d.mlp = upload(up, *lw.mlp);
      if (lw.moe) {
        device_moe_weights m;
        m.gate = upload(up, lw.moe->gate);
        m.bias = upload(up, lw.moe->bias);
        m.experts.reserve(lw.moe->experts.size());
        for (const mlp_weights& e : lw.moe->experts) m.experts.push_back(upload(up, e));
        if (lw.moe->shared_experts) m.shared_experts = upload(up, *lw.moe->shared_experts);
        m.expert_table = upload_expert_table(up, *lw.moe, m, expert_tables_);
        d.moe = std::move(m);
      }
      layers.push_back(std::move(d));
    }
  }

  device_buffer<std::byte> arena_;
  std::vector<std::vector<fp8_weight_ref>> expert_tables_;  // the host side of each layer's expert table
};

}  // namespace model
DSA_NAMESPACE_END
