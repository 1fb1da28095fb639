// Rotary position embedding with YaRN frequency interpolation, applied in place to bf16
// [tokens, heads, dim] slices (DeepSeek `apply_rotary_emb` with `precompute_freqs_cis`).
// Numerics in dsa/numerics/rope.hpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "dsa/core/backend.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/op_instances.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/rope.hpp"
#include "dsa/ops/dense_checks.hpp"

DSA_NAMESPACE_BEGIN

struct rope_apply_op {};

namespace detail {

inline void check_positive_finite(std::string_view op, std::string_view name, float v) {
  if (!(v > 0.0f) || !std::isfinite(v)) fail(op, name, v, "a positive finite number");
}

}  // namespace detail

/// Throws dsa::error unless `cfg` describes a usable rotary embedding: dim even and positive,
/// base > 1, and when YaRN is on (max_position > original_max_position) a positive factor,
/// original_max_position and beta_fast / beta_slow. `op` names the calling op in the message.
inline void check_rope_config(const rope_config& cfg, std::string_view op = "rope_apply") {
  if (cfg.dim <= 0 || cfg.dim % 2 != 0) fail(op, "cfg.dim", cfg.dim, "a positive even number (rotated pairs)");
  if (!(cfg.base > 1.0f) || !std::isfinite(cfg.base)) fail(op, "cfg.base", cfg.base, "a finite number > 1");
  if (cfg.max_position <= 0) fail(op, "cfg.max_position", cfg.max_position, "a positive number of positions");
  if (rope_yarn_enabled(cfg)) {
    if (cfg.original_max_position <= 0) {
      fail(op, "cfg.original_max_position", cfg.original_max_position, "a positive number of positions");
    }
    detail::check_positive_finite(op, "cfg.factor", cfg.factor);
    detail::check_positive_finite(op, "cfg.beta_fast", cfg.beta_fast);
    detail::check_positive_finite(op, "cfg.beta_slow", cfg.beta_slow);
  }
}

/// Rotates, in place, the pairs of every row of x [t, heads, dim] (bf16; outer dimensions may be
/// strided, e.g. the rope slice of a [t, heads, nope + rope] tensor) by the angles of token i's
/// position positions[i]: pairs (2j, 2j+1) for rope_layout::interleaved (DeepSeek MLA), (j,
/// j + dim/2) for rope_layout::half (the V3.2 indexer). Arithmetic in fp32 (cos/sin and the
/// products via double, see dsa/numerics/rope.hpp), each element rounded once to bf16.
/// Positions must lie in [0, cfg.max_position): the rotary embedding (and YaRN's frequency ramp)
/// is defined for the model's context only, as in DeepSeek's reference, whose freqs_cis table has
/// max_seq_len rows. Host positions are checked (dsa::error naming the entry); device-resident
/// ones cannot be read by the front-end and are the caller's to keep in range (the kernels rotate
/// by any int32 angle and read nothing indexed by a position, so an out-of-range one gives wrong
/// output, never an out-of-bounds access).
template <backend B>
void rope_apply(const B& be, out_view<B, bf16, 3> x, in_view<B, std::int32_t, 1> positions, const rope_config& cfg,
                rope_layout layout) {
  constexpr std::string_view op = "rope_apply";
  check_rope_config(cfg, op);
  if (layout != rope_layout::interleaved && layout != rope_layout::half) {
    fail(op, "layout", static_cast<int>(layout), "rope_layout::interleaved or rope_layout::half");
  }
  detail::check_operand(op, "x", x);
  detail::check_operand(op, "positions", positions);
  check_extent(op, "x", x, 2, cfg.dim, "cfg.dim, the rotated width");
  check_extent(op, "positions", positions, 0, x.extent(0), "x.extent(0), one position per token");
  detail::check_disjoint_rows(op, "x", x);
  detail::check_no_overlap(op, "x", x, "positions", positions, false);
  if constexpr (std::is_same_v<typename B::memory_space, host_space>) {
    for (index_t i = 0; i < positions.extent(0); ++i) {
      const std::int32_t p = positions(i);
      if (p < 0 || p >= cfg.max_position) {
        fail(op, "positions(" + std::to_string(i) + ")", p,
             "a position in [0, cfg.max_position = " + std::to_string(cfg.max_position) + ")");
      }
    }
  }
  if (x.empty()) return;
  dispatch<rope_apply_op>(be, x, tensor_view<const std::int32_t, 1, typename B::memory_space>(positions), cfg, layout);
}

DSA_NAMESPACE_END

// The type combinations dsa's own programs compile once per backend (dsa/core/op_instances.hpp).
#define DSA_ROPE_INSTANCES(X, B) \
  X(void rope_apply<B>(const B&, out_view<B, bf16, 3>, in_view<B, std::int32_t, 1>, const rope_config&, rope_layout))
