// The arithmetic of DeepSeek-V3's `noaux_tc` MoE gate (docs/design.md "MoE routing"), one token at a time.
//
// Everything here is DSA_HOST_DEVICE and allocation-free: a CUDA kernel runs moe_route_token
// with one thread (or one warp leader) per token and a scratch of moe_route_scratch_size()
// floats in shared or local memory; the CPU backend runs it per token over its threads.
// Semantics follow DeepSeek's reference `Gate.forward` (inference/model.py of V3 / V3.2):
//   s = sigmoid(logits) or softmax(logits) in fp32; b = s + bias (selection only);
//   with n_group > 1: group score = top-2 sum of b (max of b when there is no bias), keep the
//   topk_group best groups; pick the top_k experts of the kept groups by b;
//   weights = s of those, divided by their sum when norm_topk_prob, times routed_scaling_factor.
// Deliberate refinements over the reference (docs/decisions.md, "MoE routing"):
//   - ties go to the smaller index (groups and experts), so routing is deterministic;
//   - a NaN score ranks below every number, so it is selected only when nothing else is left;
//   - the selected experts are returned in ascending expert id (the order the combine sums in);
//   - a zero normalisation sum leaves the weights at zero instead of producing 0/0 = NaN.
#pragma once

#include <cmath>
#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/fp32_ops.hpp"

DSA_NAMESPACE_BEGIN

/// How router logits become expert scores.
enum class moe_scoring {
  sigmoid,  ///< s_e = 1 / (1 + exp(-x_e)): DeepSeek-V3 / V3.2
  softmax,  ///< s_e = exp(x_e - max x) / sum: DeepSeek-V2 style
};

/// The routing hyper-parameters, named as in the Hugging Face config of DeepSeek-V3.2
/// (num_experts_per_tok = top_k). The number of experts is the logits' extent.
struct moe_routing_config {
  index_t top_k = 8;                  ///< experts per token
  index_t n_group = 1;                ///< expert groups (E % n_group == 0)
  index_t topk_group = 1;             ///< groups kept per token
  moe_scoring scoring = moe_scoring::sigmoid;
  bool norm_topk_prob = true;         ///< divide the selected scores by their sum
  float routed_scaling_factor = 1.0f; ///< applied after the normalisation
};

namespace detail {


DSA_HOST_DEVICE DSA_FORCEINLINE bool is_nan(float x) { return x != x; }

}  // namespace detail

/// The strict total order used for every selection: larger first, NaN after every number,
/// equal values (including two NaNs, and -0 vs +0) broken toward the smaller index.
DSA_HOST_DEVICE DSA_FORCEINLINE bool moe_ranks_before(float a, index_t ia, float b, index_t ib) {
  const bool a_nan = detail::is_nan(a);
  const bool b_nan = detail::is_nan(b);
  if (a_nan || b_nan) return (a_nan && b_nan) ? ia < ib : b_nan;
  if (a != b) return a > b;
  return ia < ib;
}

/// fp32 logistic function. exp(-x) overflows to +inf for x < -88.7 and 1/inf = 0, so the
/// result is always in [0, 1] (NaN only for a NaN input).
DSA_HOST_DEVICE DSA_FORCEINLINE float moe_sigmoid(float x) {
  return detail::div_rn(1.0f, 1.0f + detail::exp_f32(-x));
}

/// Floats of scratch moe_route_token needs: the E scores, then the n_group group scores.
DSA_HOST_DEVICE constexpr index_t moe_route_scratch_size(index_t n_experts, index_t n_group) {
  return n_experts + n_group;
}

/// The max-subtracted softmax's shift: the largest logit, or, when any logit is NaN, a NaN (the
/// last one), which then makes every score NaN as in torch. The order of the loops is part of
/// the result's bits (which NaN), so a parallel caller runs this one sequentially.
DSA_HOST_DEVICE inline float moe_softmax_shift(const float* DSA_RESTRICT logits, index_t n_experts) {
  float m = -INFINITY;
  for (index_t e = 0; e < n_experts; ++e) m = logits[e] > m ? logits[e] : m;
  for (index_t e = 0; e < n_experts; ++e) {
    if (detail::is_nan(logits[e])) m = logits[e];
  }
  return m;
}

/// The unnormalised softmax score exp(x - shift) of one expert (element-wise: any order).
DSA_HOST_DEVICE DSA_FORCEINLINE float moe_softmax_numerator(float logit, float shift) {
  return detail::exp_f32(logit - shift);
}

/// The softmax denominator: the numerators summed in fp32 in ascending expert order. The order is
/// part of the result, so a parallel caller runs this one sequentially.
DSA_HOST_DEVICE inline float moe_softmax_denominator(const float* DSA_RESTRICT numerators, index_t n_experts) {
  float sum = 0.0f;
  for (index_t e = 0; e < n_experts; ++e) sum += numerators[e];
  return sum;
}

/// Step 1, the unbiased scores s[0, E) in fp32 (sequential form; a parallel caller evaluates the
/// same functions: moe_sigmoid per element, or shift, numerators, denominator and div_rn).
DSA_HOST_DEVICE inline void moe_route_scores(const float* DSA_RESTRICT logits, index_t n_experts, moe_scoring scoring,
                                             float* DSA_RESTRICT s) {
  const index_t E = n_experts;
  if (scoring == moe_scoring::sigmoid) {
    for (index_t e = 0; e < E; ++e) s[e] = moe_sigmoid(logits[e]);
  } else {
    // Max-subtracted softmax like torch: a NaN logit (or an +inf, or all -inf) makes the whole
    // row NaN, as it does there, rather than silently dropping the offending expert.
    const float m = moe_softmax_shift(logits, E);
    for (index_t e = 0; e < E; ++e) s[e] = moe_softmax_numerator(logits[e], m);
    const float sum = moe_softmax_denominator(s, E);
    for (index_t e = 0; e < E; ++e) s[e] = detail::div_rn(s[e], sum);
  }
}

/// Steps 2 to 5 for one token, from its unbiased scores s[0, E) (moe_route_scores): group
/// limiting, top-k selection by s + bias (bias == nullptr: none), ascending ids, weights.
/// `group_score` holds cfg.n_group floats of scratch; `expert_ids` and `weights` receive cfg.top_k
/// entries (and are the selection's working storage). Sequential and exact (comparisons, one
/// addition per group score, the weight sum in ascending id order): every backend gets the same
/// bits from the same scores.
DSA_HOST_DEVICE inline void moe_route_select(const float* DSA_RESTRICT s, const float* DSA_RESTRICT bias,
                                             index_t n_experts, const moe_routing_config& cfg,
                                             float* DSA_RESTRICT group_score, std::int32_t* DSA_RESTRICT expert_ids,
                                             float* DSA_RESTRICT weights) {
  const index_t E = n_experts;
  const index_t k = cfg.top_k;
  auto biased = [&](index_t e) { return bias ? s[e] + bias[e] : s[e]; };

  // 2. Group limiting. With every group kept the group scores cannot matter, so skip them
  //    (this is also the reference's n_group == 1 path).
  const index_t group_size = E / cfg.n_group;
  const bool limit_groups = cfg.topk_group < cfg.n_group;
  if (limit_groups) {
    for (index_t g = 0; g < cfg.n_group; ++g) {
      const index_t base = g * group_size;
      // Top two of the group in the selection order (values only matter, so the index
      // tie-break is irrelevant; NaN sinks below numbers).
      float v1 = biased(base);
      index_t i1 = base;
      float v2 = NAN;
      index_t i2 = E;  // "no second yet" ranks after everything
      for (index_t e = base + 1; e < base + group_size; ++e) {
        const float v = biased(e);
        if (moe_ranks_before(v, e, v1, i1)) {
          v2 = v1;
          i2 = i1;
          v1 = v;
          i1 = e;
        } else if (moe_ranks_before(v, e, v2, i2)) {
          v2 = v;
          i2 = e;
        }
      }
      group_score[g] = bias ? v1 + v2 : v1;
    }
  }

  // 3. Top-k experts of the kept groups by b, kept sorted best-first in (weights, expert_ids)
  //    by insertion: the candidates arrive in ascending index, so a later candidate displaces an
  //    equal one never, which is the smaller-index tie-break.
  index_t count = 0;
  for (index_t g = 0; g < cfg.n_group; ++g) {
    if (limit_groups) {
      index_t rank = 0;
      for (index_t h = 0; h < cfg.n_group; ++h) {
        rank += (h != g && moe_ranks_before(group_score[h], h, group_score[g], g)) ? 1 : 0;
      }
      if (rank >= cfg.topk_group) continue;
    }
    for (index_t e = g * group_size; e < (g + 1) * group_size; ++e) {
      const float v = biased(e);
      index_t pos;
      if (count < k) {
        pos = count++;
      } else if (moe_ranks_before(v, e, weights[k - 1], expert_ids[k - 1])) {
        pos = k - 1;
      } else {
        continue;
      }
      while (pos > 0 && moe_ranks_before(v, e, weights[pos - 1], expert_ids[pos - 1])) {
        weights[pos] = weights[pos - 1];
        expert_ids[pos] = expert_ids[pos - 1];
        --pos;
      }
      weights[pos] = v;
      expert_ids[pos] = static_cast<std::int32_t>(e);
    }
  }

  // 4. Ascending expert id, the order in which the combine sums the experts.
  for (index_t i = 1; i < k; ++i) {
    const std::int32_t id = expert_ids[i];
    index_t j = i;
    for (; j > 0 && expert_ids[j - 1] > id; --j) expert_ids[j] = expert_ids[j - 1];
    expert_ids[j] = id;
  }

  // 5. Weights from the unbiased scores; the sum is taken in ascending id order.
  float sum = 0.0f;
  for (index_t i = 0; i < k; ++i) {
    weights[i] = s[expert_ids[i]];
    sum += weights[i];
  }
  const bool normalise = cfg.norm_topk_prob && sum != 0.0f;
  for (index_t i = 0; i < k; ++i) {
    const float w = normalise ? detail::div_rn(weights[i], sum) : weights[i];
    weights[i] = w * cfg.routed_scaling_factor;
  }
}

/// Routes one token. `logits` and `bias` (nullptr = no bias) hold n_experts contiguous floats;
/// `scratch` holds moe_route_scratch_size(n_experts, cfg.n_group) floats; `expert_ids` and
/// `weights` receive cfg.top_k entries, ids ascending. The config must satisfy what
/// dsa::moe_route validates (the front-end checks it; this function does not).
/// The result is always top_k distinct ids in [0, n_experts), whatever the values (NaN included).
/// Cost: O(E) exponentials, O(E · top_k) worst-case selection, O(n_group^2) group ranking.
/// It is moe_route_scores then moe_route_select; the CUDA kernel runs the same two stages (the
/// first spread over a warp, element by element, the second on one lane).
DSA_HOST_DEVICE inline void moe_route_token(const float* DSA_RESTRICT logits, const float* DSA_RESTRICT bias,
                                            index_t n_experts, const moe_routing_config& cfg,
                                            float* DSA_RESTRICT scratch, std::int32_t* DSA_RESTRICT expert_ids,
                                            float* DSA_RESTRICT weights) {
  moe_route_scores(logits, n_experts, cfg.scoring, scratch);
  moe_route_select(scratch, bias, n_experts, cfg, scratch + n_experts, expert_ids, weights);
}

DSA_NAMESPACE_END
