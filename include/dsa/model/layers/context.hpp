// What every layer of the reference forward pass shares, on any backend: the backend and config,
// the per-phase accounting of time (device time on the GPU: a phase waits for its work), the
// projection through a checkpoint weight (FP8 or bf16), and the RoPE and routing configurations
// derived from config.json. Memory and data movement are dsa/model/layers/memory.hpp; every
// arithmetic step is a public dsa op.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/model/config.hpp"
#include "dsa/model/layers/memory.hpp"
#include "dsa/model/nonfinite.hpp"
#include "dsa/model/weights.hpp"
#include "dsa/numerics/fp8_quant.hpp"
#include "dsa/numerics/rope.hpp"
#include "dsa/ops/linear.hpp"
#include "dsa/ops/moe_routing.hpp"
#include "dsa/ops/rope.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

/// Accumulated wall time (seconds) of the phases of the forward pass.
struct phase_times {
  double indexer = 0;    ///< indexer projections, keys, index scores
  double topk = 0;       ///< top-k selection
  double attention = 0;  ///< MLA: projections, caches, sparse attention, output projection
  double moe = 0;        ///< feed-forward: MoE routing, experts and combine (or the dense MLP)
  double other = 0;      ///< embedding, norms, lm_head
  double total() const { return indexer + topk + attention + moe + other; }
};

enum class phase { indexer, topk, attention, moe, other };

/// Adds the time of a scope to one phase (nested scopes are not subtracted: do not nest).
class phase_scope {
 public:
  phase_scope(phase_times* t, phase p) : t_(t), p_(p), start_(std::chrono::steady_clock::now()) {}
  ~phase_scope() {
    if (!t_) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    switch (p_) {
      case phase::indexer: t_->indexer += s; break;
      case phase::topk: t_->topk += s; break;
      case phase::attention: t_->attention += s; break;
      case phase::moe: t_->moe += s; break;
      case phase::other: t_->other += s; break;
    }
  }
  phase_scope(const phase_scope&) = delete;
  phase_scope& operator=(const phase_scope&) = delete;

 private:
  phase_times* t_;
  phase p_;
  std::chrono::steady_clock::time_point start_;
};

/// The state a layer function needs besides its weights and inputs.
template <class B>
struct layer_context {
  const B& be;
  const ::dsa::model::config& cfg;
  scale_format act_format;  ///< activation-quantization scales of every FP8 linear and cache
  rope_config rope;
  phase_times* times;
  /// The forward call's non-finite watch (dsa/model/nonfinite.hpp), or null when off.
  nonfinite_watch<typename B::memory_space>* watch = nullptr;
};

/// One sequence's share of the rows a layer runs over: rows [row, row + t) of the call's
/// activations are the tokens at positions [start, start + t) of the sequence whose layer cache
/// is `cache`. A call over one sequence has one segment; a batched call one per sequence. The
/// layers run every row-wise step (projections, norms, RoPE, quantization, the MoE) over all rows
/// at once and the attention and the indexer per segment, over its own cache.
template <class Cache>
struct batch_segment {
  Cache* cache = nullptr;
  index_t row = 0;
  index_t start = 0;
  index_t t = 0;
  index_t end() const { return start + t; }
};

/// Charges the time of a scope to one phase; on a backend with a queue (CUDA) it first waits for
/// the scope's work, so the phase is charged with the time that work took. Without phase times
/// (null: transformer::enqueue) it neither times nor waits. Do not nest.
template <class B>
class layer_timer {
 public:
  layer_timer(const layer_context<B>& ctx, phase p) : be_(ctx.be), scope_(ctx.times, p), timed_(ctx.times != nullptr) {}
  layer_timer(const B& be, phase_times* times, phase p) : be_(be), scope_(times, p), timed_(times != nullptr) {}
  ~layer_timer() {  // scope_ is destroyed (timed) after this
    if (timed_) layer_memory<B>::wait(be_);
  }
  layer_timer(const layer_timer&) = delete;
  layer_timer& operator=(const layer_timer&) = delete;

 private:
  const B& be_;
  phase_scope scope_;
  bool timed_;
};

/// A new buffer of `count` elements in the backend's memory.
template <class T, class B>
layer_buffer<B, T> make_buffer(const layer_context<B>& ctx, index_t count) {
  return layer_memory<B>::template make<T>(ctx.be, count);
}

/// The RoPE / YaRN configuration of config.json (docs/design.md "RoPE and YaRN").
inline rope_config rope_config_of(const ::dsa::model::config& c) {
  rope_config r;
  r.dim = c.qk_rope_head_dim;
  r.base = c.rope_theta;
  r.max_position = c.max_position_embeddings;
  if (c.rope_scaling) {
    r.factor = c.rope_scaling->factor;
    r.original_max_position = c.rope_scaling->original_max_position_embeddings;
    r.beta_fast = c.rope_scaling->beta_fast;
    r.beta_slow = c.rope_scaling->beta_slow;
  } else {
    r.original_max_position = c.max_position_embeddings;  // YaRN off
  }
  return r;
}

/// The routing configuration of config.json.
inline moe_routing_config moe_routing_config_of(const ::dsa::model::config& c) {
  moe_routing_config r;
  r.top_k = c.num_experts_per_tok;
  r.n_group = c.n_group;
  r.topk_group = c.topk_group;
  r.scoring = moe_scoring::sigmoid;
  r.norm_topk_prob = c.norm_topk_prob;
  r.routed_scaling_factor = c.routed_scaling_factor;
  return r;
}

/// What a transformer derives once from config.json for every layer, on any backend.
struct layer_settings {
  scale_format act_format;  ///< V3.2's scale_fmt: ue8m0 activation scales, else fp32
  rope_config rope;
};

/// The layer settings of `c`, with the RoPE and MoE routing configurations checked (the
/// messages name "model::transformer").
inline layer_settings checked_layer_settings(const ::dsa::model::config& c) {
  const layer_settings s{c.ue8m0_scales() ? scale_format::ue8m0 : scale_format::fp32, rope_config_of(c)};
  check_rope_config(s.rope, "model::transformer");
  check_moe_routing_config(moe_routing_config_of(c), c.n_routed_experts, true, "model::transformer");
  return s;
}

/// y = x · W^T through a checkpoint weight: fp8_linear for FP8 weights (DeepSeek's act_quant +
/// fp8_gemm), linear (fp32 accumulation, one rounding) for bf16 ones. On a backend whose FP8
/// products run on the tensor cores (CUDA with cuda_kernel_path::fast), fp8_linear gets a
/// workspace of one call.
template <class B, class XT, class O>
void project(const layer_context<B>& ctx, tensor_view<XT, 2, typename B::memory_space> x,
             const basic_linear_weight<typename B::memory_space>& w, out_view<B, O, 2> y) {
  if (w.fp8()) {
    if constexpr (std::is_same_v<B, cpu_backend>) {
      if (w.packed) {
        fp8_linear(ctx.be, x, *w.packed, w.scale, y, ctx.act_format);  // dsa/cpu/fp8_linear.hpp
        return;
      }
    }
    if constexpr (layer_memory<B>::op_workspaces) {
      if (layer_memory<B>::fast_kernels(ctx.be)) {
        const index_t bytes = fp8_linear_workspace_size(x.extent(0), x.extent(1), w.q.extent(0));
        auto ws = make_buffer<std::byte>(ctx, bytes);
        fp8_linear(ctx.be, x, w.q, w.scale, y, ctx.act_format,
                   bytes > 0 ? ws.view({bytes}) : out_view<B, std::byte, 1>{});
        return;
      }
    }
    fp8_linear(ctx.be, x, w.q, w.scale, y, ctx.act_format);
  } else {
    linear(ctx.be, x, w.w, y);
  }
}

}  // namespace model
DSA_NAMESPACE_END
