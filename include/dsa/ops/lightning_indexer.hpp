// Lightning indexer scores (docs/design.md "Lightning indexer"): the cheap FP8 attention that ranks the keys each
// query row of DeepSeek Sparse Attention attends to.
//
//   I[t,s] = k_scale[s] · sum_h w[t,h] · ReLU(q[t,h] · k[s])   for s in [start_t, end_t)
//   I[t,s] = -inf                                              elsewhere
//
// The evaluation order of the sums is normative and documented in
// dsa/numerics/lightning_indexer.hpp; every backend follows it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "dsa/core/aliasing.hpp"
#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/op_instances.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/numerics/lightning_indexer.hpp"
#include "dsa/ops/row_ranges.hpp"

DSA_NAMESPACE_BEGIN

/// Op tags (op_impl<Backend, tag> implements them).
struct lightning_indexer_scores_op {};
struct lightning_indexer_scores_paged_op {};
struct lightning_indexer_backward_op {};

namespace detail {

// Checks q [m, H, d], w [m, H] and scores [m, n] and the ranges; returns nothing, throws on
// the first violation.
template <class Space, class QT>
void check_indexer_queries(std::string_view op, const tensor_view<const QT, 3, Space>& q,
                           const tensor_view<const float, 2, Space>& w) {
  check_valid(op, "q", q);
  check_inner_contiguous(op, "q", q);
  check_valid(op, "w", w);
  check_extent(op, "w", w, 0, q.extent(0), "q.extent(0), the number of query rows");
  check_extent(op, "w", w, 1, q.extent(1), "q.extent(1), the number of indexer heads");
  check_inner_contiguous(op, "w", w);
}

template <class Space>
void check_indexer_scores(std::string_view op, const tensor_view<float, 2, Space>& scores, index_t m) {
  check_valid(op, "scores", scores);
  check_extent(op, "scores", scores, 0, m, "q.extent(0), the number of query rows");
  check_inner_contiguous(op, "scores", scores);
}

template <class Space, class KT>
void check_indexer_keys(std::string_view op, const tensor_view<const KT, 2, Space>& k,
                        const tensor_view<const float, 1, Space>& k_scale, index_t d, index_t n) {
  check_valid(op, "k", k);
  check_extent(op, "k", k, 0, n, "scores.extent(1), the number of keys");
  check_extent(op, "k", k, 1, d, "q.extent(2), the head dimension");
  check_inner_contiguous(op, "k", k);
  check_valid(op, "k_scale", k_scale);
  check_extent(op, "k_scale", k_scale, 0, n, "scores.extent(1), one scale per key");
  check_inner_contiguous(op, "k_scale", k_scale);
}

template <class B, class T>
void lightning_indexer_scores_checked(const B& be, in_view<B, T, 3> q, in_view<B, float, 2> w, in_view<B, T, 2> k,
                                      in_view<B, float, 1> k_scale, in_view<B, std::int32_t, 2> ranges,
                                      out_view<B, float, 2> scores) {
  constexpr std::string_view op = "lightning_indexer_scores";
  check_indexer_queries(op, q, w);
  check_indexer_scores(op, scores, q.extent(0));
  check_indexer_keys(op, k, k_scale, q.extent(2), scores.extent(1));
  check_row_ranges(op, ranges, q.extent(0), scores.extent(1));
  detail::check_disjoint_rows(op, "scores", scores);
  detail::check_no_overlap(op, "scores", scores, "q", q, false);
  detail::check_no_overlap(op, "scores", scores, "w", w, false);
  detail::check_no_overlap(op, "scores", scores, "k", k, false);
  detail::check_no_overlap(op, "scores", scores, "k_scale", k_scale, false);
  detail::check_no_overlap(op, "scores", scores, "ranges", ranges, false);
  dispatch<lightning_indexer_scores_op>(be, q, w, k, k_scale, ranges, scores);
}

}  // namespace detail

/// Index scores of m query rows against n keys, FP8 inputs (inference).
///   q [m, H, d] e4m3, w [m, H] fp32 (q scale, H^-0.5 and d^-0.5 folded in), k [n, d] e4m3,
///   k_scale [n] fp32, ranges [m, 2] (start, end) int32, scores [m, n] fp32 (written in full:
///   -inf outside each row's range).
template <backend B>
void lightning_indexer_scores(const B& be, in_view<B, fp8_e4m3, 3> q, in_view<B, float, 2> w,
                              in_view<B, fp8_e4m3, 2> k, in_view<B, float, 1> k_scale,
                              in_view<B, std::int32_t, 2> ranges, out_view<B, float, 2> scores) {
  detail::lightning_indexer_scores_checked<B, fp8_e4m3>(be, q, w, k, k_scale, ranges, scores);
}

/// The same formula on unquantized fp32 q and k (training; pass k_scale = 1 for none).
template <backend B>
void lightning_indexer_scores(const B& be, in_view<B, float, 3> q, in_view<B, float, 2> w, in_view<B, float, 2> k,
                              in_view<B, float, 1> k_scale, in_view<B, std::int32_t, 2> ranges,
                              out_view<B, float, 2> scores) {
  detail::lightning_indexer_scores_checked<B, float>(be, q, w, k, k_scale, ranges, scores);
}

/// Decode-time index scores over the paged indexer key cache.
///   q [m, H, 128] e4m3, w [m, H], cache [slots, 132] uint8 (dsa/numerics/kv_cache.hpp:
///   128 e4m3 codes | fp32 scale, as written by indexer_cache_pack), block_table [m, max_blocks] int32, block_size >= 1,
///   ranges [m, 2] of LOGICAL positions, scores [m, n] with n <= max_blocks * block_size.
/// Logical position p of row t is read from slot
///   block_table(t, p / block_size) * block_size + p % block_size.
/// Every slot a row's range references must lie in the cache (checked, for host memory, before
/// anything is read); block-table entries of blocks outside the range are never read.
template <backend B>
void lightning_indexer_scores_paged(const B& be, in_view<B, fp8_e4m3, 3> q, in_view<B, float, 2> w,
                                    in_view<B, std::uint8_t, 2> cache, in_view<B, std::int32_t, 2> block_table,
                                    index_t block_size, in_view<B, std::int32_t, 2> ranges,
                                    out_view<B, float, 2> scores) {
  constexpr std::string_view op = "lightning_indexer_scores_paged";
  detail::check_indexer_queries(op, q, w);
  check_extent(op, "q", q, 2, indexer_cache_dim, "the indexer cache's key width");
  detail::check_indexer_scores(op, scores, q.extent(0));
  check_valid(op, "cache", cache);
  check_extent(op, "cache", cache, 1, indexer_cache_row_bytes, "bytes per token: 128 e4m3 codes and an fp32 scale");
  check_inner_contiguous(op, "cache", cache);
  check(block_size >= 1, op, "block_size", block_size, ">= 1");
  check_valid(op, "block_table", block_table);
  check_extent(op, "block_table", block_table, 0, q.extent(0), "q.extent(0), one page-table row per query row");
  check_inner_contiguous(op, "block_table", block_table);
  const index_t m = q.extent(0);
  const index_t n = scores.extent(1);
  const index_t max_blocks = block_table.extent(1);
  const index_t blocks_needed = n / block_size + (n % block_size != 0 ? 1 : 0);
  if (blocks_needed > max_blocks) {
    fail(op, "scores.extent(1)", n,
         "<= block_table.extent(1) * block_size = " + std::to_string(max_blocks) + " * " +
             std::to_string(block_size));
  }
  detail::check_row_ranges(op, ranges, m, n);
  detail::check_block_table(op, ranges, block_table, block_size, cache.extent(0), "reads",
                            "cache.extent(0) = " + std::to_string(cache.extent(0)) +
                                ", block_size = " + std::to_string(block_size));
  detail::check_disjoint_rows(op, "scores", scores);
  detail::check_no_overlap(op, "scores", scores, "q", q, false);
  detail::check_no_overlap(op, "scores", scores, "w", w, false);
  detail::check_no_overlap(op, "scores", scores, "cache", cache, false);
  detail::check_no_overlap(op, "scores", scores, "block_table", block_table, false);
  detail::check_no_overlap(op, "scores", scores, "ranges", ranges, false);
  dispatch<lightning_indexer_scores_paged_op>(be, q, w, cache, block_table, block_size, ranges, scores);
}

/// Gradients of the fp32 indexer score w.r.t. q, w and k, given dL/dscores (the chain rule of
/// the float formula; ReLU'(0) = 0). Only in-range positions carry gradient (the -inf scores
/// outside the ranges are constants); a zero upstream gradient contributes nothing. k_scale is
/// treated as a constant. Every present output is overwritten; any output may be absent
/// (default-constructed view), its gradient is then not computed.
///   q [m, H, d], w [m, H], k [n, d], k_scale [n], ranges [m, 2], grad_scores [m, n],
///   grad_q [m, H, d], grad_w [m, H], grad_k [n, d].
template <backend B>
void lightning_indexer_backward(const B& be, in_view<B, float, 3> q, in_view<B, float, 2> w, in_view<B, float, 2> k,
                                in_view<B, float, 1> k_scale, in_view<B, std::int32_t, 2> ranges,
                                in_view<B, float, 2> grad_scores, out_view<B, float, 3> grad_q,
                                out_view<B, float, 2> grad_w, out_view<B, float, 2> grad_k) {
  constexpr std::string_view op = "lightning_indexer_backward";
  detail::check_indexer_queries(op, q, w);
  const index_t m = q.extent(0);
  check_valid(op, "grad_scores", grad_scores);
  check_extent(op, "grad_scores", grad_scores, 0, m, "q.extent(0), the number of query rows");
  check_inner_contiguous(op, "grad_scores", grad_scores);
  const index_t n = grad_scores.extent(1);
  detail::check_indexer_keys(op, k, k_scale, q.extent(2), n);
  detail::check_row_ranges(op, ranges, m, n);
  if (!grad_q.is_absent()) {
    check_valid(op, "grad_q", grad_q);
    for (std::size_t r = 0; r < 3; ++r) check_extent(op, "grad_q", grad_q, r, q.extent(r), "the shape of q");
    check_inner_contiguous(op, "grad_q", grad_q);
  }
  if (!grad_w.is_absent()) {
    check_valid(op, "grad_w", grad_w);
    for (std::size_t r = 0; r < 2; ++r) check_extent(op, "grad_w", grad_w, r, w.extent(r), "the shape of w");
    check_inner_contiguous(op, "grad_w", grad_w);
  }
  if (!grad_k.is_absent()) {
    check_valid(op, "grad_k", grad_k);
    for (std::size_t r = 0; r < 2; ++r) check_extent(op, "grad_k", grad_k, r, k.extent(r), "the shape of k");
    check_inner_contiguous(op, "grad_k", grad_k);
  }
  detail::check_disjoint_rows(op, "grad_q", grad_q);
  detail::check_no_overlap(op, "grad_q", grad_q, "q", q, false);
  detail::check_no_overlap(op, "grad_q", grad_q, "w", w, false);
  detail::check_no_overlap(op, "grad_q", grad_q, "k", k, false);
  detail::check_no_overlap(op, "grad_q", grad_q, "k_scale", k_scale, false);
  detail::check_no_overlap(op, "grad_q", grad_q, "ranges", ranges, false);
  detail::check_no_overlap(op, "grad_q", grad_q, "grad_scores", grad_scores, false);
  detail::check_disjoint_rows(op, "grad_w", grad_w);
  detail::check_no_overlap(op, "grad_w", grad_w, "q", q, false);
  detail::check_no_overlap(op, "grad_w", grad_w, "w", w, false);
  detail::check_no_overlap(op, "grad_w", grad_w, "k", k, false);
  detail::check_no_overlap(op, "grad_w", grad_w, "k_scale", k_scale, false);
  detail::check_no_overlap(op, "grad_w", grad_w, "ranges", ranges, false);
  detail::check_no_overlap(op, "grad_w", grad_w, "grad_scores", grad_scores, false);
  detail::check_no_overlap(op, "grad_w", grad_w, "grad_q", grad_q, false);
  detail::check_disjoint_rows(op, "grad_k", grad_k);
  detail::check_no_overlap(op, "grad_k", grad_k, "q", q, false);
  detail::check_no_overlap(op, "grad_k", grad_k, "w", w, false);
  detail::check_no_overlap(op, "grad_k", grad_k, "k", k, false);
  detail::check_no_overlap(op, "grad_k", grad_k, "k_scale", k_scale, false);
  detail::check_no_overlap(op, "grad_k", grad_k, "ranges", ranges, false);
  detail::check_no_overlap(op, "grad_k", grad_k, "grad_scores", grad_scores, false);
  detail::check_no_overlap(op, "grad_k", grad_k, "grad_q", grad_q, false);
  detail::check_no_overlap(op, "grad_k", grad_k, "grad_w", grad_w, false);
  dispatch<lightning_indexer_backward_op>(be, q, w, k, k_scale, ranges, grad_scores, grad_q, grad_w, grad_k);
}

DSA_NAMESPACE_END

// The type combinations dsa's own programs compile once per backend (dsa/core/op_instances.hpp).
#define DSA_LIGHTNING_INDEXER_INSTANCES(X, B) \
  X(void lightning_indexer_scores<B>(const B&, in_view<B, fp8_e4m3, 3>, in_view<B, float, 2>, in_view<B, fp8_e4m3, 2>, in_view<B, float, 1>, in_view<B, std::int32_t, 2>, out_view<B, float, 2>)) \
  X(void lightning_indexer_scores<B>(const B&, in_view<B, float, 3>, in_view<B, float, 2>, in_view<B, float, 2>, in_view<B, float, 1>, in_view<B, std::int32_t, 2>, out_view<B, float, 2>)) \
  X(void lightning_indexer_scores_paged<B>(const B&, in_view<B, fp8_e4m3, 3>, in_view<B, float, 2>, in_view<B, std::uint8_t, 2>, in_view<B, std::int32_t, 2>, index_t, in_view<B, std::int32_t, 2>, out_view<B, float, 2>)) \
  X(void lightning_indexer_backward<B>(const B&, in_view<B, float, 3>, in_view<B, float, 2>, in_view<B, float, 2>, in_view<B, float, 1>, in_view<B, std::int32_t, 2>, in_view<B, float, 2>, out_view<B, float, 3>, out_view<B, float, 2>, out_view<B, float, 2>))
