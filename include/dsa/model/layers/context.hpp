// What every layer of the reference forward pass shares: the backend and config, the per-phase
// wall-clock accounting, the projection through a checkpoint weight (FP8 or bf16), the RoPE
// configuration derived from config.json, and the row copies that move tensors into caches and
// concatenations (data movement only: every arithmetic step is a public dsa op).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/model/config.hpp"
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

/// The RoPE / YaRN configuration of config.json (DESIGN.md §4).
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
/// fp8_gemm), linear (fp32 accumulation, one rounding) for bf16 ones.
template <class B, class XT, class O>
void project(const layer_context<B>& ctx, tensor_view<XT, 2, typename B::memory_space> x, const linear_weight& w,
             out_view<B, O, 2> y) {
  if (w.fp8()) {
    if constexpr (std::is_same_v<B, cpu_backend>) {
      if (w.packed) {
        fp8_linear(ctx.be, x, *w.packed, w.scale, y, ctx.act_format);  // dsa/cpu/fp8_linear.hpp
        return;
      }
    }
    fp8_linear(ctx.be, x, w.q, w.scale, y, ctx.act_format);
  } else {
    linear(ctx.be, x, w.w, y);
  }
}

/// dst = src element for element (same extents; rows may be strided, inner dims contiguous).
template <class T, std::size_t R>
void copy_rows(host_view<const T, R> src, host_view<T, R> dst) {
  static_assert(R == 2 || R == 3);
  const index_t inner = src.extent(R - 1);
  if constexpr (R == 2) {
    for (index_t i = 0; i < src.extent(0); ++i) std::memcpy(dst.row(i), src.row(i), sizeof(T) * inner);
  } else {
    for (index_t i = 0; i < src.extent(0); ++i) {
      for (index_t j = 0; j < src.extent(1); ++j) std::memcpy(&dst(i, j, 0), &src(i, j, 0), sizeof(T) * inner);
    }
  }
}

/// A [rows, cols] sub-view of a row-major 2-D view.
template <class T>
host_view<T, 2> block(host_view<T, 2> v, index_t row0, index_t col0, index_t rows, index_t cols) {
  return host_view<T, 2>(v.data_handle() + row0 * v.stride(0) + col0, {rows, cols}, {v.stride(0), 1});
}

}  // namespace model
DSA_NAMESPACE_END
