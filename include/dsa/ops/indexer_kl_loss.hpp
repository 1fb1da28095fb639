// The indexer's training losses (DESIGN.md §3.6; DeepSeek-V3.2 paper eqs. 3 and 4) and their
// gradient with respect to the index scores. Arithmetic: numerics/indexer_kl_loss.hpp.
//
//   attn          [m, h, n] float  main attention probabilities of query row t, head h, key s
//   index_scores  [m, n]    float  the lightning indexer's scores I
//   loss          [1]       float  sum over rows of KL(p_t || softmax(I_t)) on the row's key set
//   grad_index    [m, n]    float  dL/dI; 0 outside the key sets
//
// Dense warm-up (eq. 3): row t's key set is its range [start, end) (causal: [0, t + 1)).
// Sparse stage (eq. 4): row t's key set is its top-k selection topk[t, :]; entries that are
// negative or >= n are unused (-1 padding). Entries are independent: a key listed twice counts
// twice in both distributions, and its gradient is the sum of both entries' terms.
// attn and index_scores are read only on the key sets. attn must hold probabilities (>= 0).
//
// The loss is a sum of per-row partial losses (each accumulated in double), added in row
// order: bit-identical for every thread count.
#pragma once

#include <cstdint>

#include "dsa/core/aliasing.hpp"
#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/ops/row_ranges.hpp"

DSA_NAMESPACE_BEGIN

/// Op tag: dense KL loss over each row's key range.
struct indexer_kl_loss_dense_op {};
/// Op tag: sparse KL loss over each row's top-k selection.
struct indexer_kl_loss_sparse_op {};

namespace detail {

template <class Space>
void check_indexer_kl_common(const char* op, const tensor_view<const float, 3, Space>& attn,
                             const tensor_view<const float, 2, Space>& index_scores,
                             const tensor_view<float, 1, Space>& loss, const tensor_view<float, 2, Space>& grad_index) {
  check_valid(op, "attn", attn);
  check_valid(op, "index_scores", index_scores);
  check_valid(op, "loss", loss);
  check_valid(op, "grad_index", grad_index);
  check_inner_contiguous(op, "attn", attn);
  check_inner_contiguous(op, "index_scores", index_scores);
  check_inner_contiguous(op, "grad_index", grad_index);
  const index_t m = attn.extent(0);
  const index_t n = attn.extent(2);
  check_extent(op, "index_scores", index_scores, 0, m, "attn.extent(0), query rows");
  check_extent(op, "index_scores", index_scores, 1, n, "attn.extent(2), keys");
  check_extent(op, "loss", loss, 0, 1, "a single value");
  check_extent(op, "grad_index", grad_index, 0, m, "attn.extent(0), query rows");
  check_extent(op, "grad_index", grad_index, 1, n, "attn.extent(2), keys");
}

}  // namespace detail

/// Dense warm-up loss (eq. 3) over each row's range [start, end); ranges [m, 2] with
/// 0 <= start <= end <= n.
template <backend B>
void indexer_kl_loss_dense(const B& be, in_view<B, float, 3> attn, in_view<B, float, 2> index_scores,
                           in_view<B, std::int32_t, 2> ranges, out_view<B, float, 1> loss,
                           out_view<B, float, 2> grad_index) {
  constexpr const char* op = "indexer_kl_loss_dense";
  detail::check_indexer_kl_common(op, attn, index_scores, loss, grad_index);
  detail::check_row_ranges(op, ranges, attn.extent(0), attn.extent(2));
  detail::check_disjoint_rows(op, "grad_index", grad_index);
  detail::check_no_overlap(op, "grad_index", grad_index, "attn", attn, false);
  detail::check_no_overlap(op, "grad_index", grad_index, "index_scores", index_scores, false);
  detail::check_no_overlap(op, "grad_index", grad_index, "ranges", ranges, false);
  detail::check_no_overlap(op, "loss", loss, "attn", attn, false);
  detail::check_no_overlap(op, "loss", loss, "index_scores", index_scores, false);
  detail::check_no_overlap(op, "loss", loss, "ranges", ranges, false);
  detail::check_no_overlap(op, "loss", loss, "grad_index", grad_index, false);
  dispatch<indexer_kl_loss_dense_op>(be, attn, index_scores, ranges, loss, grad_index);
}

/// Sparse-stage loss (eq. 4) over each row's selection topk [m, k] (-1 padded).
template <backend B>
void indexer_kl_loss_sparse(const B& be, in_view<B, float, 3> attn, in_view<B, float, 2> index_scores,
                            in_view<B, std::int32_t, 2> topk, out_view<B, float, 1> loss,
                            out_view<B, float, 2> grad_index) {
  constexpr const char* op = "indexer_kl_loss_sparse";
  detail::check_indexer_kl_common(op, attn, index_scores, loss, grad_index);
  check_valid(op, "topk", topk);
  check_inner_contiguous(op, "topk", topk);
  check_extent(op, "topk", topk, 0, attn.extent(0), "attn.extent(0), one selection per query row");
  detail::check_disjoint_rows(op, "grad_index", grad_index);
  detail::check_no_overlap(op, "grad_index", grad_index, "attn", attn, false);
  detail::check_no_overlap(op, "grad_index", grad_index, "index_scores", index_scores, false);
  detail::check_no_overlap(op, "grad_index", grad_index, "topk", topk, false);
  detail::check_no_overlap(op, "loss", loss, "attn", attn, false);
  detail::check_no_overlap(op, "loss", loss, "index_scores", index_scores, false);
  detail::check_no_overlap(op, "loss", loss, "topk", topk, false);
  detail::check_no_overlap(op, "loss", loss, "grad_index", grad_index, false);
  dispatch<indexer_kl_loss_sparse_op>(be, attn, index_scores, topk, loss, grad_index);
}

DSA_NAMESPACE_END
