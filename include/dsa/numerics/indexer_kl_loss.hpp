// The arithmetic of the indexer's KL losses (docs/design.md "Indexer KL losses", paper eqs. 3 and 4), shared by
// every backend.
//
// For a query row t over a key set S_t (its causal range, or its top-k selection):
//   p_t = head-summed attention probabilities on S_t, L1-normalised on S_t (sum 1; all zero when
//         the head sum is zero on S_t);
//   q_t = softmax(I_t) on S_t;
//   L_t = sum_{s in S_t, p > 0} p log(p / q);     dL_t/dI[t,s] = q[s] · sum(p_t) - p[s].
// sum(p_t) is 1 after normalisation, or 0 for a row with no attention mass, whose loss and
// gradient are then 0. A key with p > 0 and I = -inf has q = 0 and makes the loss +inf (the
// gradient stays finite: q · 1 - p = -p); if every I of a row is -inf, q is 0 on the whole row.
//
// NaN propagates (docs/decisions.md): a NaN index score makes the row's max NaN
// (detail::max_propagate_nan), so its q, its loss and every gradient of the row are NaN; a NaN
// attention value makes the row total NaN, so every p, the loss and the gradients of the row are
// NaN. (A NaN score in a row without attention mass: NaN gradients, loss term 0, as every p is 0.)
// Only an exact 0 (no mass, no finite score) selects the "0" conventions above; a NaN row never
// reads as an empty one. Other rows are untouched.
#pragma once

#include "dsa/core/config.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/online_softmax.hpp"

DSA_NAMESPACE_BEGIN

/// The softmax of a row of index scores, reduced to what every element needs.
struct kl_softmax_stats {
  float max = -HUGE_VALF;  ///< max of the row's index scores
  float sum = 0.0f;        ///< sum of exp(I - max); 0 when every score is -inf
  float log_sum = -HUGE_VALF;
};

/// The running max of a row's index scores: NaN if any score is NaN, whatever the order.
DSA_HOST_DEVICE DSA_FORCEINLINE float kl_score_max(float max, float index_score) {
  return detail::max_propagate_nan(max, index_score);
}

/// Stats from the maximum (kl_score_max) and the sum of exp(I - max), accumulated by the caller
/// (in double on the CPU backend).
DSA_HOST_DEVICE DSA_FORCEINLINE kl_softmax_stats kl_make_softmax_stats(float max, float sum) {
  kl_softmax_stats st;
  st.max = max;
  st.sum = sum;
  st.log_sum = sum == 0.0f ? detail::neg_inf_f32() : detail::log_f32(sum);
  return st;
}

/// exp(I - max), the summand of kl_softmax_stats::sum; 0 when the row has no finite score.
DSA_HOST_DEVICE DSA_FORCEINLINE float kl_softmax_weight(float max, float index_score) {
  if (max == detail::neg_inf_f32()) return 0.0f;
  return detail::exp_f32(index_score - max);
}

/// q = softmax(I)[s] from the weight exp(I - max) already computed for the sum.
DSA_HOST_DEVICE DSA_FORCEINLINE float kl_softmax_q_from_weight(const kl_softmax_stats& st, float weight) {
  if (st.sum == 0.0f) return 0.0f;
  return detail::div_rn(weight, st.sum);
}

/// q = softmax(I)[s].
DSA_HOST_DEVICE DSA_FORCEINLINE float kl_softmax_q(const kl_softmax_stats& st, float index_score) {
  return kl_softmax_q_from_weight(st, kl_softmax_weight(st.max, index_score));
}

/// log q = I - max - log(sum); -inf where q is 0 by definition.
DSA_HOST_DEVICE DSA_FORCEINLINE float kl_log_q(const kl_softmax_stats& st, float index_score) {
  if (st.sum == 0.0f || index_score == detail::neg_inf_f32()) return detail::neg_inf_f32();
  return (index_score - st.max) - st.log_sum;
}

/// Whether a row has attention mass: its total of head sums is not 0 (a NaN total counts, so that
/// it propagates instead of reading as an empty row).
DSA_HOST_DEVICE DSA_FORCEINLINE bool kl_row_has_mass(float row_total) { return !(row_total == 0.0f); }

/// p_t[s] from the head sum at s and the row total of head sums (IEEE division); 0 for a row
/// without attention mass, NaN for a NaN total.
DSA_HOST_DEVICE DSA_FORCEINLINE float kl_normalize_p(float head_sum, float row_total) {
  if (!kl_row_has_mass(row_total)) return 0.0f;
  return detail::div_rn(head_sum, row_total);
}

/// One term p · (log p - log q) of the loss; exactly 0 for p = 0 (whatever q), +inf for p > 0
/// with q = 0, NaN for a NaN (or negative) p.
DSA_HOST_DEVICE DSA_FORCEINLINE float kl_term(float p, float log_q) {
  if (p == 0.0f) return 0.0f;
  return p * (detail::log_f32(p) - log_q);
}

/// dL/dI[t,s] = q · sum(p_t) - p, with sum(p_t) = 1 for a row with attention mass
/// (kl_row_has_mass), else 0; 0 · q there, so that a NaN q (a NaN score) still shows.
DSA_HOST_DEVICE DSA_FORCEINLINE float kl_grad(float q, float p, bool row_has_mass) {
  return row_has_mass ? q - p : 0.0f * q;
}

/// The gradient of a key listed `count` times in a row's selection (the sparse loss's duplicate
/// entries): the CPU backend adds each entry's (identical) gradient to a zeroed cell in entry
/// order, fl32(fl32(0 + g) + g) + ..., and this is that sum, so a backend that computes it per key
/// instead of accumulating per entry gets the same bits. 0 for count 0.
DSA_HOST_DEVICE DSA_FORCEINLINE float kl_grad_repeated(float g, unsigned count) {
  float acc = 0.0f;
  for (unsigned i = 0; i < count; ++i) acc += g;
  return acc;
}

DSA_NAMESPACE_END
