// CPU backend of the indexer KL losses (ops/indexer_kl_loss.hpp).
//
// Rows are independent and split over threads. Per row: the head sums of attn on the key set
// (fp32, heads in order), their total and the softmax sum of I (double), then one pass for the
// loss terms (double) and the gradient. Row losses are added in row order on the calling
// thread, so the loss is bit-identical for every thread count. Rows go in blocks of
// kl_block_rows, so the memory held is bounded, not proportional to m.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/numerics/indexer_kl_loss.hpp"
#include "dsa/ops/indexer_kl_loss.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

// The loss of one row over its entries e in [0, cnt), which sit at key keys(e) of the rows of attn
// and index_scores; adds each entry's dL/dI to grad[keys(e)]. scratch holds 2 · cnt floats.
template <class Keys>
double indexer_kl_row(const tensor_view<const float, 3>& attn, const float* scores, index_t t, const Keys& keys,
                      index_t cnt, float* scratch, float* grad) {
  // No entries: no terms. Returning early also keeps attn's rows (null when n = 0) un-offset.
  if (cnt == 0) return 0.0;
  float* head_sum = scratch;
  float* weight = scratch + cnt;  // exp(I - max), kept from the softmax sum for q
  const index_t h = attn.extent(1);
  std::fill(head_sum, head_sum + cnt, 0.0f);
  for (index_t hh = 0; hh < h; ++hh) {
    const float* a = attn.data_handle() + t * attn.stride(0) + hh * attn.stride(1);
    for (index_t e = 0; e < cnt; ++e) head_sum[e] += a[keys(e)];
  }
  double total = 0.0;
  float max = detail::neg_inf_f32();
  for (index_t e = 0; e < cnt; ++e) {
    total += head_sum[e];
    max = kl_score_max(max, scores[keys(e)]);
  }
  double sum_exp = 0.0;
  for (index_t e = 0; e < cnt; ++e) {
    weight[e] = kl_softmax_weight(max, scores[keys(e)]);
    sum_exp += weight[e];
  }
  const kl_softmax_stats st = kl_make_softmax_stats(max, static_cast<float>(sum_exp));
  const float row_total = static_cast<float>(total);
  const bool has_mass = kl_row_has_mass(row_total);

  double loss = 0.0;
  for (index_t e = 0; e < cnt; ++e) {
    const float x = scores[keys(e)];
    const float p = kl_normalize_p(head_sum[e], row_total);
    loss += kl_term(p, kl_log_q(st, x));
    grad[keys(e)] += kl_grad(kl_softmax_q_from_weight(st, weight[e]), p, has_mass);
  }
  return loss;
}

// Rows per block of indexer_kl_loss_cpu: its row losses are kept for one block at a time (512 KiB).
inline constexpr index_t kl_block_rows = index_t{1} << 16;

// Runs row_loss_of(t, grad_row, scratch, keys_scratch) -> double for every row, zeroing grad rows
// first, and stores the row-ordered sum of the row losses in loss(0).
//
// Memory is proportional to the data present, never to m alone (issue 14): with n = 0 every
// tensor but ranges / topk is empty and m can be any size a zero-width tensor claims ([10^12, 0]
// costs no bytes), so that case does no per-row work at all (every key set is empty: the loss is
// 0 and grad_index has no elements), and the row losses are kept per block of kl_block_rows rows
// rather than per row. Blocks are added in row order, each row in turn, so the sum is the same as
// one pass over all m rows: bit-identical for every thread count.
template <class RowLoss>
void indexer_kl_loss_cpu(const cpu_backend& be, index_t m, const tensor_view<float, 1>& loss,
                         const tensor_view<float, 2>& grad_index, index_t max_keys, const RowLoss& row_loss_of) {
  const index_t n = grad_index.extent(1);
  if (m == 0 || n == 0) {
    loss(0) = 0.0f;
    return;
  }
  std::vector<double> row_loss(static_cast<std::size_t>(std::min(m, kl_block_rows)), 0.0);
  double total = 0.0;
  for (index_t block = 0; block < m; block += kl_block_rows) {
    const index_t rows = std::min(kl_block_rows, m - block);
    parallel_for(be, rows, 1, [&](index_t begin, index_t end) {
      std::vector<float> scratch(static_cast<std::size_t>(2 * max_keys));
      std::vector<index_t> keys(static_cast<std::size_t>(max_keys));
      for (index_t i = begin; i < end; ++i) {
        const index_t t = block + i;
        float* grad = grad_index.row(t);
        std::fill(grad, grad + n, 0.0f);
        row_loss[static_cast<std::size_t>(i)] = row_loss_of(t, grad, scratch.data(), keys.data());
      }
    });
    for (index_t i = 0; i < rows; ++i) total += row_loss[static_cast<std::size_t>(i)];
  }
  loss(0) = static_cast<float>(total);
}

}  // namespace cpu_detail

template <>
struct op_impl<cpu_backend, indexer_kl_loss_dense_op> {
  static void run(const cpu_backend& be, const tensor_view<const float, 3>& attn,
                  const tensor_view<const float, 2>& index_scores, const tensor_view<const std::int32_t, 2>& ranges,
                  const tensor_view<float, 1>& loss, const tensor_view<float, 2>& grad_index) {
    // The front-end has checked 0 <= start <= end <= n.
    cpu_detail::indexer_kl_loss_cpu(
        be, attn.extent(0), loss, grad_index, attn.extent(2), [&](index_t t, float* grad, float* scratch, index_t*) {
          const index_t start = ranges(t, 0);
          const index_t end = ranges(t, 1);
          // Contiguous keys: the head sums vectorise.
          return cpu_detail::indexer_kl_row(attn, index_scores.row(t), t, [start](index_t e) { return start + e; },
                                            end - start, scratch, grad);
        });
  }
};

template <>
struct op_impl<cpu_backend, indexer_kl_loss_sparse_op> {
  static void run(const cpu_backend& be, const tensor_view<const float, 3>& attn,
                  const tensor_view<const float, 2>& index_scores, const tensor_view<const std::int32_t, 2>& topk,
                  const tensor_view<float, 1>& loss, const tensor_view<float, 2>& grad_index) {
    const index_t n = attn.extent(2);
    const index_t k = topk.extent(1);
    cpu_detail::indexer_kl_loss_cpu(
        be, attn.extent(0), loss, grad_index, k, [&](index_t t, float* grad, float* scratch, index_t* keys) {
          index_t cnt = 0;
          for (index_t e = 0; e < k; ++e) {
            const std::int32_t j = topk(t, e);
            if (j >= 0 && static_cast<index_t>(j) < n) keys[cnt++] = j;
          }
          return cpu_detail::indexer_kl_row(attn, index_scores.row(t), t, [keys](index_t e) { return keys[e]; }, cnt,
                                            scratch, grad);
        });
  }
};

DSA_NAMESPACE_END

// The overloads that allocate their own workspace (CPU only), as the list in ops/indexer_kl_loss.hpp.
#define DSA_CPU_INDEXER_KL_LOSS_ALLOCATING_INSTANCES(X, B) \
  X(void indexer_kl_loss_dense<B>(const B&, in_view<B, float, 3>, in_view<B, float, 2>, in_view<B, std::int32_t, 2>, out_view<B, float, 1>, out_view<B, float, 2>)) \
  X(void indexer_kl_loss_sparse<B>(const B&, in_view<B, float, 3>, in_view<B, float, 2>, in_view<B, std::int32_t, 2>, out_view<B, float, 1>, out_view<B, float, 2>))
DSA_DECLARE_CPU_OP_INSTANCES(DSA_CPU_INDEXER_KL_LOSS_ALLOCATING_INSTANCES)
DSA_DECLARE_CPU_OP_INSTANCES(DSA_INDEXER_KL_LOSS_INSTANCES)
