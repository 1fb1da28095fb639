// Sparse MLA attention (DESIGN.md §3.5): MQA-mode attention of every query head over the kv
// rows its token selected, with the latent cache shared by all heads (FlashMLA's sparse decode
// and prefill kernels for DeepSeek-V3.2).
//
//   q        [s, h, d_qk] bf16     (V3.2: d_qk = 576 = 512 latent + 64 rope)
//   kv       [n, d_qk]    bf16, or [n, 656] uint8 FP8 cache rows (format: numerics/kv_cache.hpp)
//   indices  [s, k]       int32: the kv rows token t attends to. An entry that is negative or >= n
//                         is unused (-1 is the padding of top-k). Entries are independent: a row
//                         listed twice counts twice, as in FlashMLA.
//   out      [s, h, d_v]  float or bf16: P · kv[j, :d_v] with P = softmax over the used entries of
//                         softmax_scale · q·kv_j (fp32 logits, online softmax in fp32, out rounded once)
//   lse      [s, h]       natural-log logsumexp of the scaled logits
//   probs    [s, k]       optional: sum over heads of P at each entry (0 for unused entries), the
//                         target distribution (times h) of the indexer's KL loss
//
// A token without any used entry gives out = 0, lse = +inf and probs = 0.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "dsa/core/aliasing.hpp"
#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/numerics/sparse_mla_attention.hpp"

DSA_NAMESPACE_BEGIN

/// Op tag: sparse MLA attention over a bf16 kv cache [n, d_qk].
struct sparse_mla_attention_op {};
/// Op tag: sparse MLA attention over the 656-byte FP8 kv cache rows of V3.2.
struct sparse_mla_attention_fp8_op {};

struct sparse_mla_config {
  /// Multiplies q·kv before the softmax; must be finite and > 0 (V3.2: d_qk^-0.5 of the
  /// unabsorbed head dim, times mscale^2 with YaRN).
  float softmax_scale = 0.0f;
  /// Output width: out = P · kv[:, :d_v]; 1 <= d_v <= d_qk (512 for the FP8 cache).
  index_t d_v = 512;
};

namespace detail {

inline constexpr const char* sparse_mla_op_name = "sparse_mla_attention";

// The checks both cache formats share; d_qk is q's last extent.
template <class Space, class O>
void check_sparse_mla_common(const tensor_view<const bf16, 3, Space>& q,
                             const tensor_view<const std::int32_t, 2, Space>& indices,
                             const tensor_view<O, 3, Space>& out, const tensor_view<float, 2, Space>& lse,
                             const sparse_mla_config& cfg, const tensor_view<float, 2, Space>& probs) {
  static_assert(std::is_same_v<O, float> || std::is_same_v<O, bf16>,
                "dsa::sparse_mla_attention: out must be a view of float or dsa::bf16");
  constexpr const char* op = sparse_mla_op_name;
  check_valid(op, "q", q);
  check_valid(op, "indices", indices);
  check_valid(op, "out", out);
  check_valid(op, "lse", lse);
  check_inner_contiguous(op, "q", q);
  check_inner_contiguous(op, "indices", indices);
  check_inner_contiguous(op, "out", out);
  check_inner_contiguous(op, "lse", lse);

  const index_t s = q.extent(0);
  const index_t h = q.extent(1);
  const index_t d_qk = q.extent(2);
  check(d_qk >= 1, op, "q.extent(2)", d_qk, "d_qk >= 1");
  check(std::isfinite(cfg.softmax_scale) && cfg.softmax_scale > 0.0f, op, "config.softmax_scale",
        cfg.softmax_scale, "a finite value > 0");
  check(cfg.d_v >= 1 && cfg.d_v <= d_qk, op, "config.d_v", cfg.d_v,
        "a value in [1, d_qk] = [1, " + std::to_string(d_qk) + "]");

  check_extent(op, "indices", indices, 0, s, "q.extent(0), one row per query token");
  check_extent(op, "out", out, 0, s, "q.extent(0), tokens");
  check_extent(op, "out", out, 1, h, "q.extent(1), heads");
  check_extent(op, "out", out, 2, cfg.d_v, "config.d_v");
  check_extent(op, "lse", lse, 0, s, "q.extent(0), tokens");
  check_extent(op, "lse", lse, 1, h, "q.extent(1), heads");
  if (!probs.is_absent()) {
    check_valid(op, "probs", probs);
    check_inner_contiguous(op, "probs", probs);
    check_extent(op, "probs", probs, 0, s, "q.extent(0), tokens");
    check_extent(op, "probs", probs, 1, indices.extent(1), "indices.extent(1), one value per index");
  }
}

}  // namespace detail

/// Sparse MLA attention over a bf16 cache kv [n, d_qk]; see the top of this header.
/// O is float or bf16. Throws dsa::error on any shape, stride or configuration mismatch.
template <backend B, class O>
void sparse_mla_attention(const B& be, in_view<B, bf16, 3> q, in_view<B, bf16, 2> kv,
                          in_view<B, std::int32_t, 2> indices, out_view<B, O, 3> out, out_view<B, float, 2> lse,
                          const sparse_mla_config& cfg, out_view<B, float, 2> probs = {}) {
  constexpr const char* op = detail::sparse_mla_op_name;
  detail::check_sparse_mla_common(q, indices, out, lse, cfg, probs);
  check_valid(op, "kv", kv);
  check_inner_contiguous(op, "kv", kv);
  check_extent(op, "kv", kv, 1, q.extent(2), "q.extent(2), d_qk");
  detail::check_disjoint_rows(op, "out", out);
  detail::check_no_overlap(op, "out", out, "q", q, false);
  detail::check_no_overlap(op, "out", out, "kv", kv, false);
  detail::check_no_overlap(op, "out", out, "indices", indices, false);
  detail::check_disjoint_rows(op, "lse", lse);
  detail::check_no_overlap(op, "lse", lse, "q", q, false);
  detail::check_no_overlap(op, "lse", lse, "kv", kv, false);
  detail::check_no_overlap(op, "lse", lse, "indices", indices, false);
  detail::check_no_overlap(op, "lse", lse, "out", out, false);
  detail::check_disjoint_rows(op, "probs", probs);
  detail::check_no_overlap(op, "probs", probs, "q", q, false);
  detail::check_no_overlap(op, "probs", probs, "kv", kv, false);
  detail::check_no_overlap(op, "probs", probs, "indices", indices, false);
  detail::check_no_overlap(op, "probs", probs, "out", out, false);
  detail::check_no_overlap(op, "probs", probs, "lse", lse, false);
  dispatch<sparse_mla_attention_op>(be, q, kv, indices, out, lse, cfg, probs);
}

/// Sparse MLA attention over the V3.2 FP8 cache, kv_fp8 [n, 656] bytes per row: q must be
/// [s, h, 576] and config.d_v 512. Rows are decoded on the fly, never into a full bf16 copy.
template <backend B, class O>
void sparse_mla_attention(const B& be, in_view<B, bf16, 3> q, in_view<B, std::uint8_t, 2> kv_fp8,
                          in_view<B, std::int32_t, 2> indices, out_view<B, O, 3> out, out_view<B, float, 2> lse,
                          const sparse_mla_config& cfg, out_view<B, float, 2> probs = {}) {
  constexpr const char* op = detail::sparse_mla_op_name;
  check_valid(op, "q", q);
  check_extent(op, "q", q, 2, kv_dim, "512 latent + 64 rope values, the FP8 cache layout");
  check(cfg.d_v == kv_latent_dim, op, "config.d_v", cfg.d_v, "512 (the latent width of the FP8 cache)");
  detail::check_sparse_mla_common(q, indices, out, lse, cfg, probs);
  check_valid(op, "kv_fp8", kv_fp8);
  check_inner_contiguous(op, "kv_fp8", kv_fp8);
  check_extent(op, "kv_fp8", kv_fp8, 1, kv_fp8_row_bytes,
               "bytes per FP8 cache row: 512 e4m3 + 4 fp32 scales + 64 bf16");
  detail::check_disjoint_rows(op, "out", out);
  detail::check_no_overlap(op, "out", out, "q", q, false);
  detail::check_no_overlap(op, "out", out, "kv_fp8", kv_fp8, false);
  detail::check_no_overlap(op, "out", out, "indices", indices, false);
  detail::check_disjoint_rows(op, "lse", lse);
  detail::check_no_overlap(op, "lse", lse, "q", q, false);
  detail::check_no_overlap(op, "lse", lse, "kv_fp8", kv_fp8, false);
  detail::check_no_overlap(op, "lse", lse, "indices", indices, false);
  detail::check_no_overlap(op, "lse", lse, "out", out, false);
  detail::check_disjoint_rows(op, "probs", probs);
  detail::check_no_overlap(op, "probs", probs, "q", q, false);
  detail::check_no_overlap(op, "probs", probs, "kv_fp8", kv_fp8, false);
  detail::check_no_overlap(op, "probs", probs, "indices", indices, false);
  detail::check_no_overlap(op, "probs", probs, "out", out, false);
  detail::check_no_overlap(op, "probs", probs, "lse", lse, false);
  dispatch<sparse_mla_attention_fp8_op>(be, q, kv_fp8, indices, out, lse, cfg, probs);
}

DSA_NAMESPACE_END
