// Test oracle for dsa::moe_route: the DeepSeek `Gate.forward` written the obvious way, with full
// sorts instead of the library's insertion selection and group ranking, and with the weights
// normalised in double precision.
//
// The scores themselves are the fp32 formulas of docs/design.md "MoE routing" (sigmoid as 1 / (1 + exp(-x)),
// softmax as exp(x - max) / sum): selection compares fp32 values, so an oracle that computed
// them in another precision would disagree on near-ties that are not errors.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace dsa_test {

struct moe_reference_config {
  int top_k = 8;
  int n_group = 1;
  int topk_group = 1;
  bool softmax = false;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
};

struct moe_reference_result {
  std::vector<std::int32_t> ids;  // [t, top_k], ascending per token
  std::vector<double> weights;    // [t, top_k]
};

// Descending by value, NaN last, ties to the smaller index: the order of docs/design.md "MoE routing".
inline bool moe_reference_before(float a, int ia, float b, int ib) {
  if (std::isnan(a) != std::isnan(b)) return std::isnan(b);
  if (!std::isnan(a) && a != b) return a > b;
  return ia < ib;
}

inline std::vector<float> moe_reference_scores(const float* x, int E, bool softmax) {
  std::vector<float> s(E);
  if (!softmax) {
    for (int e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + std::exp(-x[e]));
    return s;
  }
  bool any_nan = false;
  float m = -INFINITY;
  for (int e = 0; e < E; ++e) {
    any_nan = any_nan || std::isnan(x[e]);
    m = std::max(m, x[e]);
  }
  if (any_nan) return std::vector<float>(E, NAN);
  float sum = 0.0f;
  for (int e = 0; e < E; ++e) sum += std::exp(x[e] - m);
  for (int e = 0; e < E; ++e) s[e] = std::exp(x[e] - m) / sum;
  return s;
}

/// logits [t, E] row-major; bias empty = none.
inline moe_reference_result moe_reference_route(const std::vector<float>& logits, int tokens, int E,
                                                const std::vector<float>& bias, const moe_reference_config& cfg) {
  moe_reference_result r;
  r.ids.resize(static_cast<std::size_t>(tokens) * cfg.top_k);
  r.weights.resize(r.ids.size());
  const int gsize = E / cfg.n_group;
  for (int t = 0; t < tokens; ++t) {
    const std::vector<float> s = moe_reference_scores(&logits[static_cast<std::size_t>(t) * E], E, cfg.softmax);
    std::vector<float> b(E);
    for (int e = 0; e < E; ++e) b[e] = bias.empty() ? s[e] : s[e] + bias[e];

    std::vector<bool> kept(cfg.n_group, true);
    if (cfg.n_group > 1) {
      std::vector<float> gscore(cfg.n_group);
      for (int g = 0; g < cfg.n_group; ++g) {
        std::vector<int> members(gsize);
        std::iota(members.begin(), members.end(), g * gsize);
        std::sort(members.begin(), members.end(), [&](int i, int j) { return moe_reference_before(b[i], i, b[j], j); });
        gscore[g] = bias.empty() ? b[members[0]] : b[members[0]] + b[members[1]];
      }
      std::vector<int> order(cfg.n_group);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(),
                [&](int i, int j) { return moe_reference_before(gscore[i], i, gscore[j], j); });
      std::fill(kept.begin(), kept.end(), false);
      for (int i = 0; i < cfg.topk_group; ++i) kept[order[i]] = true;
    }

    std::vector<int> candidates;
    for (int e = 0; e < E; ++e) {
      if (kept[e / gsize]) candidates.push_back(e);
    }
    std::sort(candidates.begin(), candidates.end(), [&](int i, int j) { return moe_reference_before(b[i], i, b[j], j); });
    std::vector<int> chosen(candidates.begin(), candidates.begin() + cfg.top_k);
    std::sort(chosen.begin(), chosen.end());

    double sum = 0.0;
    for (int e : chosen) sum += s[e];
    for (int i = 0; i < cfg.top_k; ++i) {
      const std::size_t o = static_cast<std::size_t>(t) * cfg.top_k + i;
      r.ids[o] = chosen[i];
      double w = s[chosen[i]];
      if (cfg.norm_topk_prob && sum != 0.0) w /= sum;
      r.weights[o] = w * cfg.routed_scaling_factor;
    }
  }
  return r;
}

}  // namespace dsa_test
