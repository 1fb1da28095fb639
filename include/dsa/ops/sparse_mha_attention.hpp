// Sparse multi-head attention over MLA keys (the MHA prefill of DeepSeek-V3.2, and its absorbed
// MQA decode with broadcast keys): every query head attends to the key rows its token selected.
//
//   q        [s, h, d_nope + d_rope]  bf16: per head the "nope" part, then the RoPE part
//   k_nope   [n, h, d_nope]           bf16: per-head keys (stride(1) may be 0: all heads share
//                                     one key, MQA; e.g. the latent cache in absorbed decode)
//   k_rope   [n, d_rope]              bf16: the RoPE key, shared by all heads (d_rope may be 0)
//   v        [n, h, d_v]              bf16: per-head values (stride(1) may be 0, as for k_nope)
//   indices  [s, k]                   int32: the key rows token t attends to; an entry that is
//                                     negative or >= n is unused (-1 pads top-k); a row listed
//                                     twice counts twice
//   out      [s, h, d_v]              bf16: softmax(scale · q·k) · v over the used entries
//   lse      [s, h]                   optional fp32: natural-log logsumexp of the scaled logits
//
// Unlike sparse_mla_attention (one latent row per key, V = its first d_v values), keys and values
// come from separate, strided views, so the up-projected k_nope / v of a prefill (the wkv_b
// output [n, h, d_nope + d_v]) are used in place, and the cost is O(s · k · h · d), never a
// masked O(s · n). The rounding of logits and probabilities is selectable
// (attention_rounding; numerics/sparse_mha_attention.hpp): fp32 throughout, or the bf16 points
// of DeepSeek's reference. A token without a used entry gives out = 0 and lse = +inf.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/op_instances.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/sparse_mha_attention.hpp"
#include "dsa/ops/dense_checks.hpp"

DSA_NAMESPACE_BEGIN

struct sparse_mha_attention_op {};

struct sparse_mha_config {
  /// Multiplies q·k before the softmax; finite and > 0 (V3.2: (nope + rope)^-0.5 times mscale^2).
  float softmax_scale = 0.0f;
  /// Where logits and probabilities are rounded (DeepSeek's prefill reference: bf16).
  attention_rounding rounding = attention_rounding::bf16;
};

namespace detail {

// An input whose outer dimensions may be broadcast (stride 0) but whose rows are unit-stride.
template <class V>
void check_input(std::string_view op, std::string_view name, const V& v) {
  check_valid(op, name, v);
  check_inner_contiguous(op, name, v);
}

}  // namespace detail

/// See the top of this header. Throws dsa::error on any shape, stride or configuration mismatch
/// (index values are not errors: out-of-range entries are unused by definition).
template <backend B>
void sparse_mha_attention(const B& be, in_view<B, bf16, 3> q, in_view<B, bf16, 3> k_nope, in_view<B, bf16, 2> k_rope,
                          in_view<B, bf16, 3> v, in_view<B, std::int32_t, 2> indices, out_view<B, bf16, 3> out,
                          const sparse_mha_config& cfg, out_view<B, float, 2> lse = {}) {
  constexpr std::string_view op = "sparse_mha_attention";
  detail::check_input(op, "q", q);
  detail::check_input(op, "k_nope", k_nope);
  check_valid(op, "k_rope", k_rope);
  if (k_rope.extent(1) > 1) check_inner_contiguous(op, "k_rope", k_rope);
  detail::check_input(op, "v", v);
  detail::check_input(op, "indices", indices);
  detail::check_operand(op, "out", out);
  check(std::isfinite(cfg.softmax_scale) && cfg.softmax_scale > 0.0f, op, "cfg.softmax_scale", cfg.softmax_scale,
        "a finite value > 0");
  check(cfg.rounding == attention_rounding::fp32 || cfg.rounding == attention_rounding::bf16 ||
            cfg.rounding == attention_rounding::bf16_split,
        op, "cfg.rounding", static_cast<int>(cfg.rounding), "attention_rounding::fp32, bf16 or bf16_split");

  const index_t s = q.extent(0);
  const index_t h = q.extent(1);
  const index_t n = k_nope.extent(0);
  const index_t d_nope = k_nope.extent(2);
  const index_t d_rope = k_rope.extent(1);
  check(h >= 1 || s == 0, op, "q.extent(1)", h, ">= 1 (heads)");
  check(d_nope >= 1, op, "k_nope.extent(2)", d_nope, ">= 1 (the nope width)");
  check_extent(op, "q", q, 2, d_nope + d_rope, "k_nope.extent(2) + k_rope.extent(1), nope then rope");
  check_extent(op, "k_nope", k_nope, 1, h, "q.extent(1), heads");
  check_extent(op, "k_rope", k_rope, 0, n, "k_nope.extent(0), key rows");
  check_extent(op, "v", v, 0, n, "k_nope.extent(0), key rows");
  check_extent(op, "v", v, 1, h, "q.extent(1), heads");
  check(v.extent(2) >= 1, op, "v.extent(2)", v.extent(2), ">= 1 (d_v)");
  check_extent(op, "indices", indices, 0, s, "q.extent(0), one row per query token");
  check_extent(op, "out", out, 0, s, "q.extent(0), tokens");
  check_extent(op, "out", out, 1, h, "q.extent(1), heads");
  check_extent(op, "out", out, 2, v.extent(2), "v.extent(2), d_v");
  detail::check_disjoint_rows(op, "out", out);
  detail::check_no_overlap(op, "out", out, "q", q, false);
  detail::check_no_overlap(op, "out", out, "k_nope", k_nope, false);
  detail::check_no_overlap(op, "out", out, "k_rope", k_rope, false);
  detail::check_no_overlap(op, "out", out, "v", v, false);
  detail::check_no_overlap(op, "out", out, "indices", indices, false);
  if (!lse.is_absent()) {
    detail::check_operand(op, "lse", lse);
    check_extent(op, "lse", lse, 0, s, "q.extent(0), tokens");
    check_extent(op, "lse", lse, 1, h, "q.extent(1), heads");
    detail::check_disjoint_rows(op, "lse", lse);
    detail::check_no_overlap(op, "lse", lse, "out", out, false);
  }
  if (out.empty()) return;
  dispatch<sparse_mha_attention_op>(be, q, k_nope, k_rope, v, indices, out, cfg, lse);
}

DSA_NAMESPACE_END

// The type combinations dsa's own programs compile once per backend (dsa/core/op_instances.hpp).
#define DSA_SPARSE_MHA_ATTENTION_INSTANCES(X, B) \
  X(void sparse_mha_attention<B>(const B&, in_view<B, bf16, 3>, in_view<B, bf16, 3>, in_view<B, bf16, 2>, in_view<B, bf16, 3>, in_view<B, std::int32_t, 2>, out_view<B, bf16, 3>, const sparse_mha_config&, out_view<B, float, 2>))
