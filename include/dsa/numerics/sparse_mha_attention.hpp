// The arithmetic of sparse MHA attention over MLA keys (ops/sparse_mha_attention.hpp), shared by
// the CPU and CUDA backends.
//
// For one query row t, head h and its used entries j (indices that are >= 0 and < n):
//   dot_nope = q_nope · k_nope[j, h],  dot_rope = q_rope · k_rope[j]   (fp32, ascending i, from +0)
//   logit_j by the rounding mode:
//     fp32        fl32(fl32(dot_nope + dot_rope) * scale)     (one fp32 accumulation over both)
//     bf16        bf16(bf16(dot) * bf16(scale))               dot = the same single accumulation
//     bf16_split  bf16(bf16(bf16(dot_nope) + bf16(dot_rope)) * bf16(scale))
//   m = max_j logit_j,  e_j = fl32(exp(logit_j - m)),  sum = sum_j e_j (fp32, in entry order)
//   p_j = fl32(e_j / sum), rounded to bf16 in the bf16 modes
//   out = sum_j p_j · v[j, h] (fp32, in entry order), rounded once to bf16;  lse = m + ln(sum)
// The bf16 modes are the rounding points of DeepSeek's reference (inference/model.py of V3.2):
// its MHA prefill scores are a bf16 einsum scaled in bf16 (`bf16`), its absorbed MQA decode adds
// two bf16 einsums before scaling (`bf16_split`), and softmax of a bf16 tensor returns bf16.
// The scale is rounded to bf16 first: PyTorch multiplies a bf16 tensor by a Python float scalar
// after converting the scalar to the tensor's dtype. This is not cosmetic: with V3.2's YaRN scale
// (128^-0.5 * mscale^2 = 0.1656269 -> 0.1660156) the unrounded scale shifts every logit by 0.2%
// and the tiny golden model's logits fall to cosine 0.87; with it they are reproduced bit for bit.
// exp is evaluated in double and rounded to fp32, so that host and device agree.
#pragma once

#include <cmath>
#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/fp32_ops.hpp"

DSA_NAMESPACE_BEGIN

/// Where sparse_mha_attention rounds its logits and probabilities (see the header comment).
enum class attention_rounding : std::uint8_t { fp32, bf16, bf16_split };

/// Whether entry j of a row addresses one of n key rows.
DSA_HOST_DEVICE DSA_FORCEINLINE bool sparse_mha_index_valid(std::int32_t j, index_t n) {
  return j >= 0 && static_cast<index_t>(j) < n;
}

/// The logit from the single fp32 accumulation `dot` over both parts (modes fp32 and bf16).
DSA_HOST_DEVICE DSA_FORCEINLINE float sparse_mha_scaled_logit(float dot, float scale, attention_rounding mode) {
  if (mode == attention_rounding::bf16) return bf16(bf16(dot).to_float() * bf16(scale).to_float()).to_float();
  return dot * scale;
}

/// The logit of mode bf16_split from the two fp32 sums over the nope and the rope part.
DSA_HOST_DEVICE DSA_FORCEINLINE float sparse_mha_split_logit(float dot_nope, float dot_rope, float scale) {
  const float sum = bf16(bf16(dot_nope).to_float() + bf16(dot_rope).to_float()).to_float();
  return bf16(sum * bf16(scale).to_float()).to_float();
}

/// The scaled logit of one (query head, key) pair. q points at the query head's nope + rope
/// values; k_nope at the key's nope values of that head; k_rope at the key's shared rope values.
DSA_HOST_DEVICE inline float sparse_mha_logit(const bf16* q, const bf16* k_nope, index_t d_nope, const bf16* k_rope,
                                              index_t d_rope, float scale, attention_rounding mode) {
  if (mode == attention_rounding::bf16_split) {
    float a = 0.0f;
    for (index_t i = 0; i < d_nope; ++i) a += q[i].to_float() * k_nope[i].to_float();
    float b = 0.0f;
    for (index_t i = 0; i < d_rope; ++i) b += q[d_nope + i].to_float() * k_rope[i].to_float();
    return sparse_mha_split_logit(a, b, scale);
  }
  float acc = 0.0f;
  for (index_t i = 0; i < d_nope; ++i) acc += q[i].to_float() * k_nope[i].to_float();
  for (index_t i = 0; i < d_rope; ++i) acc += q[d_nope + i].to_float() * k_rope[i].to_float();
  return sparse_mha_scaled_logit(acc, scale, mode);
}

/// The row maximum m: detail::max_propagate_nan over the used logits, from -inf. A NaN logit
/// makes m NaN, and with it every e_j, p_j, out and lse of the row (NaN propagates, as in torch's
/// softmax); the value does not depend on the order (NaN payloads aside), so a parallel reduction
/// gets the CPU loop's value. (Among equal values of opposite zero sign the order decides; the
/// sign of a zero maximum cannot change any exp(logit - m) or m + ln(sum).)
DSA_HOST_DEVICE DSA_FORCEINLINE float sparse_mha_max(float m, float logit) { return detail::max_propagate_nan(m, logit); }

/// Whether a row with maximum m has no attention: no used entry, or every logit -inf. Such a row
/// outputs 0 with lse = +inf; a NaN maximum is not empty (it propagates).
DSA_HOST_DEVICE DSA_FORCEINLINE bool sparse_mha_row_empty(float m) { return m == detail::bits_float(0xFF800000u); }

/// One term of out = sum_j p_j v_j: fl32(p * v), never fused with the accumulation (in the fp32
/// mode p is not a bf16 value, so an FMA would round differently on the two backends).
DSA_HOST_DEVICE DSA_FORCEINLINE float sparse_mha_pv(float p, float v) { return detail::mul_rn(p, v); }

/// fl32(exp(x)) through the double exp (host and device agree except at rare double-rounding ties).
DSA_HOST_DEVICE DSA_FORCEINLINE float sparse_mha_exp(float x) {
  return static_cast<float>(std::exp(static_cast<double>(x)));
}

/// The probability of an entry from its exponential and the row's sum, rounded as the mode says.
DSA_HOST_DEVICE DSA_FORCEINLINE float sparse_mha_prob(float e, float sum, attention_rounding mode) {
  const float p = detail::div_rn(e, sum);
  return mode == attention_rounding::fp32 ? p : bf16(p).to_float();
}

DSA_NAMESPACE_END
