// Choosing the next token from a logits vector: greedy (argmax) and seeded temperature + top-p
// (nucleus) sampling.
//
// Sampling is reproducible: the same logits, parameters and seed give the same tokens on every
// platform that has an IEEE double exp() of the same accuracy. That is why the draw does not use
// std::uniform_real_distribution (its algorithm is implementation-defined): the random numbers
// come from std::mt19937_64, whose output sequence the C++ standard fixes, turned into a uniform
// double by the documented formula of uniform_01(). The whole procedure is spelt out at
// sample_token().
//
// Logits are fp32, one per vocabulary id. -inf is a masked token (probability 0); NaN and +inf
// are errors (dsa::error), as is a vector with no token above -inf.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"

DSA_NAMESPACE_BEGIN

namespace model {

/// Temperature and nucleus parameters of sample_token().
struct sampling_params {
  /// Divides the logits before the softmax; finite and > 0. Smaller is greedier.
  float temperature = 1.0f;
  /// Nucleus mass: sampling is restricted to the most probable tokens whose probabilities add
  /// up to at least top_p of the total; 0 < top_p <= 1 (1 keeps every token).
  float top_p = 1.0f;
};

namespace detail {

// Token ids are int32 (the index convention of dsa); vocabularies beyond that are refused.
inline void check_logits(std::string_view op, std::span<const float> logits) {
  check(!logits.empty(), op, "logits.size()", logits.size(), "a non-empty logits vector");
  check(logits.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()), op, "logits.size()",
        logits.size(), "at most 2^31 - 1 tokens (int32 ids)");
  bool any = false;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (std::isnan(x) || x == std::numeric_limits<float>::infinity()) {
      fail(op, "logits[" + std::to_string(i) + "]", x, "a finite value or -inf (a masked token)");
    }
    any = any || x != -std::numeric_limits<float>::infinity();
  }
  check(any, op, "logits", "all -inf", "at least one token above -inf");
}

inline void check_params(std::string_view op, const sampling_params& p) {
  check(std::isfinite(p.temperature) && p.temperature > 0.0f, op, "temperature", p.temperature,
        "a finite value > 0 (use greedy_token for temperature 0)");
  check(p.top_p > 0.0f && p.top_p <= 1.0f, op, "top_p", p.top_p, "a value in (0, 1]");
}

}  // namespace detail

/// The id of the largest logit; ties go to the smaller id. Throws dsa::error on an empty vector,
/// a NaN or +inf logit, or all logits -inf.
inline std::int32_t greedy_token(std::span<const float> logits) {
  detail::check_logits("model::greedy_token", logits);
  std::size_t best = 0;
  for (std::size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;  // strict: the first maximum wins
  }
  return static_cast<std::int32_t>(best);
}

/// The uniform double in [0, 1) that sampling draws from one 64-bit engine output x:
/// (x >> 11) * 2^-53, i.e. the top 53 bits as a binary fraction. Every value is a multiple of
/// 2^-53 and 1.0 is never returned.
inline double uniform_01(std::uint64_t x) { return static_cast<double>(x >> 11) * 0x1.0p-53; }

/// Scratch of sample_token(), reusable across calls to avoid allocations per token.
struct sampling_workspace {
  std::vector<std::int32_t> order;  ///< candidate ids, most probable first
  std::vector<double> weight;       ///< unnormalised probabilities, indexed by id
};

/// The nucleus: ids in decreasing order of probability (ties: smaller id first) whose
/// probabilities add up to at least top_p of the total, the shortest such prefix. Returns the
/// number of ids kept at the front of ws.order; ws.weight[id] holds the unnormalised
/// probabilities exp((logit - max) / temperature) in double. Arguments as for sample_token().
inline std::size_t top_p_candidates(std::span<const float> logits, const sampling_params& params,
                                    sampling_workspace& ws) {
  constexpr std::string_view op = "model::sample_token";
  detail::check_params(op, params);
  detail::check_logits(op, logits);

  const std::size_t n = logits.size();
  const double t = static_cast<double>(params.temperature);
  const double mx = static_cast<double>(*std::max_element(logits.begin(), logits.end()));
  ws.weight.resize(n);
  ws.order.clear();
  for (std::size_t i = 0; i < n; ++i) {
    // Relative to the maximum so that the largest weight is exactly 1 and nothing overflows;
    // -inf logits give exactly 0 and are never candidates.
    const double w = std::exp((static_cast<double>(logits[i]) - mx) / t);
    ws.weight[i] = w;
    if (w > 0.0) ws.order.push_back(static_cast<std::int32_t>(i));
  }
  // Ordered by logit rather than by weight: distinct logits whose weights round to the same
  // double keep their true order, so the nucleus depends on the logits, not on exp() rounding.
  std::sort(ws.order.begin(), ws.order.end(), [&](std::int32_t a, std::int32_t b) {
    const float la = logits[static_cast<std::size_t>(a)];
    const float lb = logits[static_cast<std::size_t>(b)];
    return la > lb || (la == lb && a < b);
  });
  if (params.top_p >= 1.0f) return ws.order.size();

  double total = 0.0;
  for (const std::int32_t id : ws.order) total += ws.weight[static_cast<std::size_t>(id)];
  const double threshold = static_cast<double>(params.top_p) * total;
  double cum = 0.0;
  for (std::size_t j = 0; j < ws.order.size(); ++j) {
    cum += ws.weight[static_cast<std::size_t>(ws.order[j])];
    if (cum >= threshold) return j + 1;
  }
  return ws.order.size();  // not reached: cum ends at total >= threshold
}

/// Temperature + top-p sampling with an explicit uniform draw u in [0, 1):
///  1. w_i = exp((logit_i - max_j logit_j) / temperature) in double (0 for -inf logits);
///  2. candidates = the ids with w_i > 0 sorted by decreasing logit, ties by increasing id;
///  3. keep the shortest prefix whose running sum of w reaches top_p times the sum over all
///     candidates (all of them when top_p = 1) — the nucleus, of total weight W;
///  4. return the first kept id at which the running sum of w (same order) exceeds u * W.
/// Throws dsa::error for bad parameters (temperature finite > 0, 0 < top_p <= 1), bad logits
/// (empty, NaN, +inf, or no token above -inf) or u outside [0, 1).
inline std::int32_t sample_token(std::span<const float> logits, const sampling_params& params, double u,
                                 sampling_workspace& ws) {
  check(u >= 0.0 && u < 1.0, "model::sample_token", "u", u, "a uniform draw in [0, 1)");
  const std::size_t kept = top_p_candidates(logits, params, ws);
  double mass = 0.0;
  for (std::size_t j = 0; j < kept; ++j) mass += ws.weight[static_cast<std::size_t>(ws.order[j])];
  const double target = u * mass;
  double cum = 0.0;
  for (std::size_t j = 0; j < kept; ++j) {
    cum += ws.weight[static_cast<std::size_t>(ws.order[j])];
    if (cum > target) return ws.order[j];
  }
  // Only reachable if u * mass rounded up to mass; the last kept id owns that end of [0, W).
  return ws.order[kept - 1];
}

inline std::int32_t sample_token(std::span<const float> logits, const sampling_params& params, double u) {
  sampling_workspace ws;
  return sample_token(logits, params, u, ws);
}

/// A seeded sampler: each call draws exactly one output x of a std::mt19937_64 seeded with
/// `seed` and returns sample_token(logits, params, uniform_01(x)). One draw per token, whatever
/// the logits, so two runs with the same seed stay in step even if their logits differ.
class sampler {
 public:
  /// Throws dsa::error unless the parameters are valid (see sampling_params).
  sampler(const sampling_params& params, std::uint64_t seed) : params_(params), engine_(seed) {
    detail::check_params("model::sampler", params);
  }

  std::int32_t operator()(std::span<const float> logits) {
    // Validate before drawing, so that a rejected call does not advance the stream.
    detail::check_logits("model::sample_token", logits);
    return sample_token(logits, params_, uniform_01(engine_()), ws_);
  }

  const sampling_params& params() const { return params_; }

 private:
  sampling_params params_;
  std::mt19937_64 engine_;
  sampling_workspace ws_;
};

}  // namespace model

DSA_NAMESPACE_END
