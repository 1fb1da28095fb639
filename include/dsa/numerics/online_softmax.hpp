// The online softmax of sparse MLA attention (docs/design.md "Sparse MLA attention"), shared by every backend.
//
// A softmax over keys that arrive in tiles is carried as a partial state: the running maximum m
// of the scaled logits seen so far, the sum l of exp(x - m) over them, and an accumulator
// acc = sum exp(x - m) · v_x (kept by the caller: its width is d_v). A new tile raises m and
// rescales l and acc by exp(m_old - m_new); two partial states over disjoint key sets (the
// split-k halves of a CUDA kernel) merge the same way. At the end out = acc / l and
// lse = m + ln(l). Every step is fp32.
//
// The empty state (no key seen) has m = -inf and l = 0; it merges as the identity and finalises
// to out = 0, lse = +inf, the convention for a query row without any valid key.
//
// NaN propagates: a NaN logit makes m NaN (detail::max_propagate_nan, never IEEE max, which would
// drop it), every later factor and weight NaN, and so l, acc, out, lse and every probability of
// that row NaN, as torch's softmax gives; a NaN value in v reaches the accumulator through its
// weight (0 · NaN is NaN). Only "no key at all" (l = 0) finalises to out = 0, lse = +inf.
#pragma once

#include <cmath>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/fp32_ops.hpp"

DSA_NAMESPACE_BEGIN

namespace detail {


DSA_HOST_DEVICE DSA_FORCEINLINE float neg_inf_f32() { return bits_float(0xFF800000u); }
DSA_HOST_DEVICE DSA_FORCEINLINE float pos_inf_f32() { return bits_float(0x7F800000u); }

}  // namespace detail

/// The (m, l) half of a partial softmax; the accumulator lives with the caller.
struct online_softmax_state {
  float max = -HUGE_VALF;  ///< running max of the scaled logits (HUGE_VALF: constexpr under nvcc too)
  float sum = 0.0f;        ///< sum of exp(x - max) over the keys seen
};

/// Makes room for a tile whose largest scaled logit is `tile_max`: raises state.max to
/// max(state.max, tile_max) and rescales state.sum. Returns the factor the caller must multiply
/// its accumulator by (exp(old max - new max); 1 while nothing finite has been seen, so that an
/// all -inf prefix never produces exp(-inf + inf) = NaN; NaN once the tile or the state holds a
/// NaN logit: tile_max must then be NaN, i.e. computed with detail::max_propagate_nan). Afterwards add
/// online_softmax_weight(state, x) to state.sum, and weight · v to the accumulator, for every x
/// of the tile.
DSA_HOST_DEVICE DSA_FORCEINLINE float online_softmax_rescale(online_softmax_state& state, float tile_max) {
  const float new_max = detail::max_propagate_nan(state.max, tile_max);
  if (new_max == detail::neg_inf_f32()) return 1.0f;
  const float alpha = state.max == new_max ? 1.0f : detail::exp_f32(state.max - new_max);
  state.sum *= alpha;
  state.max = new_max;
  return alpha;
}

/// The unnormalised weight exp(x - max) of a scaled logit after online_softmax_rescale; 0 for
/// x = -inf and while the state holds no finite maximum.
DSA_HOST_DEVICE DSA_FORCEINLINE float online_softmax_weight(const online_softmax_state& state, float x) {
  if (state.max == detail::neg_inf_f32()) return 0.0f;
  return detail::exp_f32(x - state.max);
}

/// Folds one scaled logit into the state (element-at-a-time form, for callers without tiles);
/// returns the accumulator factor as online_softmax_rescale does. The weight of x is then
/// online_softmax_weight(state, x).
DSA_HOST_DEVICE DSA_FORCEINLINE float online_softmax_update(online_softmax_state& state, float x) {
  const float alpha = online_softmax_rescale(state, x);
  state.sum += online_softmax_weight(state, x);
  return alpha;
}

/// Factors that combine two partial states over disjoint key sets:
/// acc = acc_a · scale_a + acc_b · scale_b, and `merged` is the combined (m, l).
struct online_softmax_merge_factors {
  online_softmax_state merged;
  float scale_a = 1.0f;
  float scale_b = 1.0f;
};

/// Merge of two partial states (the split-k combine). An empty side gets the factor 0 and leaves
/// the other unchanged, so empty states are the identity.
DSA_HOST_DEVICE DSA_FORCEINLINE online_softmax_merge_factors online_softmax_merge(const online_softmax_state& a,
                                                                                 const online_softmax_state& b) {
  online_softmax_merge_factors f;
  const float m = detail::max_propagate_nan(a.max, b.max);
  if (m == detail::neg_inf_f32()) {
    f.merged = online_softmax_state{};
    f.scale_a = 0.0f;
    f.scale_b = 0.0f;
    return f;
  }
  f.scale_a = a.max == detail::neg_inf_f32() ? 0.0f : detail::exp_f32(a.max - m);
  f.scale_b = b.max == detail::neg_inf_f32() ? 0.0f : detail::exp_f32(b.max - m);
  f.merged.max = m;
  f.merged.sum = a.sum * f.scale_a + b.sum * f.scale_b;
  return f;
}

/// Merges partial state b (with accumulator acc_b[0, n)) into a (acc_a[0, n)), in place.
DSA_HOST_DEVICE inline void online_softmax_merge_into(online_softmax_state& a, float* acc_a,
                                                      const online_softmax_state& b, const float* acc_b,
                                                      index_t n) {
  const online_softmax_merge_factors f = online_softmax_merge(a, b);
  for (index_t i = 0; i < n; ++i) acc_a[i] = acc_a[i] * f.scale_a + acc_b[i] * f.scale_b;
  a = f.merged;
}

/// Natural-log logsumexp of the scaled logits: max + ln(sum); +inf for the empty state (sum 0),
/// NaN for a NaN state.
DSA_HOST_DEVICE DSA_FORCEINLINE float online_softmax_lse(const online_softmax_state& state) {
  if (state.sum == 0.0f) return detail::pos_inf_f32();
  return state.max + detail::log_f32(state.sum);
}

/// One output element acc / sum (IEEE division); 0 for the empty state, NaN for a NaN state.
DSA_HOST_DEVICE DSA_FORCEINLINE float online_softmax_normalize(const online_softmax_state& state, float acc) {
  if (state.sum == 0.0f) return 0.0f;
  return detail::div_rn(acc, state.sum);
}

/// The final probability of a key with scaled logit x: exp(x - max) / sum; 0 for the empty state,
/// NaN for a NaN state.
DSA_HOST_DEVICE DSA_FORCEINLINE float online_softmax_probability(const online_softmax_state& state, float x) {
  return online_softmax_normalize(state, online_softmax_weight(state, x));
}

/// The same probability from the final lse alone (a second pass that kept no state): exp(x - lse),
/// and 0 where online_softmax_lse returned +inf (the empty state), as online_softmax_probability
/// gives; exp(x - inf) would be NaN there for x = +inf or NaN. A NaN lse gives NaN.
DSA_HOST_DEVICE DSA_FORCEINLINE float online_softmax_probability_from_lse(float x, float lse) {
  if (lse == detail::pos_inf_f32()) return 0.0f;
  return detail::exp_f32(x - lse);
}

DSA_NAMESPACE_END
