// The indexer's training losses (docs/design.md "Indexer KL losses"; DeepSeek-V3.2 paper eqs. 3 and 4) and their
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
//
// Workspace: the CUDA backend writes the per-row losses to a workspace and adds them in a second
// kernel (no floating-point atomics, no allocation), so on CUDA call the overloads that take a
// `workspace` of at least indexer_kl_loss_dense_workspace_size(m) /
// indexer_kl_loss_sparse_workspace_size(m, k) bytes, 16-byte aligned. The CPU backend needs none
// but accepts and checks one, so the same call compiles for both backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "dsa/core/aliasing.hpp"
#include "dsa/core/backend.hpp"
#include "dsa/core/checked_math.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/op_instances.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/ops/row_ranges.hpp"
#include "dsa/ops/workspace.hpp"

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

// Every argument check of the dense loss but the workspace's.
template <class Space>
void check_indexer_kl_dense(const char* op, const tensor_view<const float, 3, Space>& attn,
                            const tensor_view<const float, 2, Space>& index_scores,
                            const tensor_view<const std::int32_t, 2, Space>& ranges,
                            const tensor_view<float, 1, Space>& loss, const tensor_view<float, 2, Space>& grad_index) {
  check_indexer_kl_common(op, attn, index_scores, loss, grad_index);
  check_row_ranges(op, ranges, attn.extent(0), attn.extent(2));
  check_disjoint_rows(op, "grad_index", grad_index);
  check_no_overlap(op, "grad_index", grad_index, "attn", attn, false);
  check_no_overlap(op, "grad_index", grad_index, "index_scores", index_scores, false);
  check_no_overlap(op, "grad_index", grad_index, "ranges", ranges, false);
  check_no_overlap(op, "loss", loss, "attn", attn, false);
  check_no_overlap(op, "loss", loss, "index_scores", index_scores, false);
  check_no_overlap(op, "loss", loss, "ranges", ranges, false);
  check_no_overlap(op, "loss", loss, "grad_index", grad_index, false);
}

// Every argument check of the sparse loss but the workspace's.
template <class Space>
void check_indexer_kl_sparse(const char* op, const tensor_view<const float, 3, Space>& attn,
                             const tensor_view<const float, 2, Space>& index_scores,
                             const tensor_view<const std::int32_t, 2, Space>& topk,
                             const tensor_view<float, 1, Space>& loss, const tensor_view<float, 2, Space>& grad_index) {
  check_indexer_kl_common(op, attn, index_scores, loss, grad_index);
  check_valid(op, "topk", topk);
  check_inner_contiguous(op, "topk", topk);
  check_extent(op, "topk", topk, 0, attn.extent(0), "attn.extent(0), one selection per query row");
  check_disjoint_rows(op, "grad_index", grad_index);
  check_no_overlap(op, "grad_index", grad_index, "attn", attn, false);
  check_no_overlap(op, "grad_index", grad_index, "index_scores", index_scores, false);
  check_no_overlap(op, "grad_index", grad_index, "topk", topk, false);
  check_no_overlap(op, "loss", loss, "attn", attn, false);
  check_no_overlap(op, "loss", loss, "index_scores", index_scores, false);
  check_no_overlap(op, "loss", loss, "topk", topk, false);
  check_no_overlap(op, "loss", loss, "grad_index", grad_index, false);
}

// The workspace of the CUDA-capable overloads (check_workspace), disjoint from every other
// argument.
template <class Space>
void check_indexer_kl_workspace(const char* op, const char* size_fn, index_t need,
                                const tensor_view<std::byte, 1, Space>& ws,
                                const tensor_view<const float, 3, Space>& attn,
                                const tensor_view<const float, 2, Space>& index_scores,
                                const tensor_view<const std::int32_t, 2, Space>& keys, const char* keys_name,
                                const tensor_view<float, 1, Space>& loss,
                                const tensor_view<float, 2, Space>& grad_index) {
  if (!check_workspace(op, ws, need, size_fn)) return;
  check_no_overlap(op, "workspace", ws, "attn", attn, false);
  check_no_overlap(op, "workspace", ws, "index_scores", index_scores, false);
  check_no_overlap(op, "workspace", ws, keys_name, keys, false);
  check_no_overlap(op, "workspace", ws, "loss", loss, false);
  check_no_overlap(op, "workspace", ws, "grad_index", grad_index, false);
}

inline index_t round_up_16(index_t bytes) { return (bytes + 15) / 16 * 16; }

}  // namespace detail

/// Bytes of workspace the dense loss needs for m query rows: one double per row (the row losses
/// the CUDA backend adds in a second kernel), rounded up to 16. Pure; callable without a device.
inline index_t indexer_kl_loss_dense_workspace_size(index_t m) {
  constexpr std::string_view op = "indexer_kl_loss_dense_workspace_size";
  check(m >= 0, op, "m", m, ">= 0");
  constexpr std::string_view expected = "a workspace size (8 * m bytes, rounded up to 16) that fits in int64";
  return checked_round_up(checked_mul(m, index_t{8}, op, "m", m, expected), index_t{16}, op, "m", m, expected);
}

/// Bytes of workspace the sparse loss needs for m query rows of k selected entries: the m row
/// losses (doubles, rounded up to 16 bytes), then one float per entry (each entry's head sum and
/// then its gradient, between the kernel's passes). Pure; callable without a device.
inline index_t indexer_kl_loss_sparse_workspace_size(index_t m, index_t k) {
  constexpr std::string_view op = "indexer_kl_loss_sparse_workspace_size";
  check(m >= 0, op, "m", m, ">= 0");
  check(k >= 0, op, "k", k, ">= 0");
  constexpr std::string_view names = "(m, k)";
  std::string values = "(";  // appended: GCC 12 gives a false -Wrestrict on "(" + std::to_string(...)
  values += std::to_string(m);
  values += ", ";
  values += std::to_string(k);
  values += ')';
  constexpr std::string_view expected = "a workspace size (8 * m + 4 * m * k bytes, each rounded up to 16) that fits "
                                        "in int64";
  auto mul = [&](index_t a, index_t b) { return checked_mul(a, b, op, names, values, expected); };
  const index_t rows = checked_round_up(mul(m, index_t{8}), index_t{16}, op, names, values, expected);
  const index_t entries = checked_round_up(mul(mul(m, k), index_t{4}), index_t{16}, op, names, values, expected);
  return checked_add(rows, entries, op, names, values, expected);
}

/// Dense warm-up loss (eq. 3) over each row's range [start, end); ranges [m, 2] with
/// 0 <= start <= end <= n.
template <backend B>
void indexer_kl_loss_dense(const B& be, in_view<B, float, 3> attn, in_view<B, float, 2> index_scores,
                           in_view<B, std::int32_t, 2> ranges, out_view<B, float, 1> loss,
                           out_view<B, float, 2> grad_index) {
  constexpr const char* op = "indexer_kl_loss_dense";
  detail::check_indexer_kl_dense(op, attn, index_scores, ranges, loss, grad_index);
  dispatch<indexer_kl_loss_dense_op>(be, attn, index_scores, ranges, loss, grad_index);
}

/// The dense loss with a workspace of at least indexer_kl_loss_dense_workspace_size(m) bytes
/// (what the CUDA backend needs; the CPU backend checks it and does not touch it).
template <backend B>
void indexer_kl_loss_dense(const B& be, in_view<B, float, 3> attn, in_view<B, float, 2> index_scores,
                           in_view<B, std::int32_t, 2> ranges, out_view<B, float, 1> loss,
                           out_view<B, float, 2> grad_index, out_view<B, std::byte, 1> workspace) {
  constexpr const char* op = "indexer_kl_loss_dense";
  detail::check_indexer_kl_dense(op, attn, index_scores, ranges, loss, grad_index);
  detail::check_indexer_kl_workspace(op, "indexer_kl_loss_dense_workspace_size(m)",
                                     indexer_kl_loss_dense_workspace_size(attn.extent(0)), workspace, attn,
                                     index_scores, ranges, "ranges", loss, grad_index);
  if constexpr (std::is_same_v<typename B::memory_space, host_space>) {
    dispatch<indexer_kl_loss_dense_op>(be, attn, index_scores, ranges, loss, grad_index);
  } else {
    dispatch<indexer_kl_loss_dense_op>(be, attn, index_scores, ranges, loss, grad_index, workspace);
  }
}

/// Sparse-stage loss (eq. 4) over each row's selection topk [m, k] (-1 padded).
template <backend B>
void indexer_kl_loss_sparse(const B& be, in_view<B, float, 3> attn, in_view<B, float, 2> index_scores,
                            in_view<B, std::int32_t, 2> topk, out_view<B, float, 1> loss,
                            out_view<B, float, 2> grad_index) {
  constexpr const char* op = "indexer_kl_loss_sparse";
  detail::check_indexer_kl_sparse(op, attn, index_scores, topk, loss, grad_index);
  dispatch<indexer_kl_loss_sparse_op>(be, attn, index_scores, topk, loss, grad_index);
}

/// The sparse loss with a workspace of at least indexer_kl_loss_sparse_workspace_size(m, k) bytes
/// (what the CUDA backend needs; the CPU backend checks it and does not touch it).
template <backend B>
void indexer_kl_loss_sparse(const B& be, in_view<B, float, 3> attn, in_view<B, float, 2> index_scores,
                            in_view<B, std::int32_t, 2> topk, out_view<B, float, 1> loss,
                            out_view<B, float, 2> grad_index, out_view<B, std::byte, 1> workspace) {
  constexpr const char* op = "indexer_kl_loss_sparse";
  detail::check_indexer_kl_sparse(op, attn, index_scores, topk, loss, grad_index);
  detail::check_indexer_kl_workspace(op, "indexer_kl_loss_sparse_workspace_size(m, k)",
                                     indexer_kl_loss_sparse_workspace_size(attn.extent(0), topk.extent(1)),
                                     workspace, attn, index_scores, topk, "topk", loss, grad_index);
  if constexpr (std::is_same_v<typename B::memory_space, host_space>) {
    dispatch<indexer_kl_loss_sparse_op>(be, attn, index_scores, topk, loss, grad_index);
  } else {
    dispatch<indexer_kl_loss_sparse_op>(be, attn, index_scores, topk, loss, grad_index, workspace);
  }
}

DSA_NAMESPACE_END

// The type combinations dsa's own programs compile once per backend (dsa/core/op_instances.hpp):
// the overloads taking a workspace (the CUDA backend has no other).
#define DSA_INDEXER_KL_LOSS_INSTANCES(X, B) \
  X(void indexer_kl_loss_dense<B>(const B&, in_view<B, float, 3>, in_view<B, float, 2>, in_view<B, std::int32_t, 2>, out_view<B, float, 1>, out_view<B, float, 2>, out_view<B, std::byte, 1>)) \
  X(void indexer_kl_loss_sparse<B>(const B&, in_view<B, float, 3>, in_view<B, float, 2>, in_view<B, std::int32_t, 2>, out_view<B, float, 1>, out_view<B, float, 2>, out_view<B, std::byte, 1>))
