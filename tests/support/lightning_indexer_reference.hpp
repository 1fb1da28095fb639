// Test oracle of the lightning indexer: the formula of docs/design.md "Lightning indexer" evaluated in double, and
// its analytic pieces for finite-difference checks. Slow on purpose.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "dsa/core/types.hpp"

namespace dsa_test {

/// Row-major [m, H, d] / [m, H] / [n, d] / [n] / [m, 2] inputs as doubles.
struct indexer_problem {
  std::int64_t m = 0, heads = 0, d = 0, n = 0;
  std::vector<double> q, w, k, k_scale;
  std::vector<std::int32_t> ranges;
};

/// scores [m, n] in double: -inf outside each row's range.
inline std::vector<double> indexer_scores_reference(const indexer_problem& p) {
  std::vector<double> out(static_cast<std::size_t>(p.m * p.n), -std::numeric_limits<double>::infinity());
  for (std::int64_t t = 0; t < p.m; ++t) {
    for (std::int64_t s = p.ranges[2 * t]; s < p.ranges[2 * t + 1]; ++s) {
      double acc = 0.0;
      for (std::int64_t h = 0; h < p.heads; ++h) {
        double dot = 0.0;
        for (std::int64_t i = 0; i < p.d; ++i) dot += p.q[(t * p.heads + h) * p.d + i] * p.k[s * p.d + i];
        acc += p.w[t * p.heads + h] * (dot > 0.0 ? dot : 0.0);
      }
      out[t * p.n + s] = acc * p.k_scale[s];
    }
  }
  return out;
}

/// L = sum over in-range (t, s) of g[t, s] · I[t, s], in double: the scalar whose gradient the
/// backward pass computes when given grad_scores = g.
inline double indexer_linear_loss(const indexer_problem& p, const std::vector<float>& g) {
  const std::vector<double> scores = indexer_scores_reference(p);
  double loss = 0.0;
  for (std::int64_t t = 0; t < p.m; ++t) {
    for (std::int64_t s = p.ranges[2 * t]; s < p.ranges[2 * t + 1]; ++s) loss += g[t * p.n + s] * scores[t * p.n + s];
  }
  return loss;
}

/// Smallest |q[t,h] · k[s]| over in-range pairs: finite differences are exact (the loss is
/// piecewise multilinear) while no step crosses the ReLU kink.
inline double indexer_min_abs_dot(const indexer_problem& p) {
  double best = std::numeric_limits<double>::infinity();
  for (std::int64_t t = 0; t < p.m; ++t) {
    for (std::int64_t s = p.ranges[2 * t]; s < p.ranges[2 * t + 1]; ++s) {
      for (std::int64_t h = 0; h < p.heads; ++h) {
        double dot = 0.0;
        for (std::int64_t i = 0; i < p.d; ++i) dot += p.q[(t * p.heads + h) * p.d + i] * p.k[s * p.d + i];
        best = dot < 0 ? (-dot < best ? -dot : best) : (dot < best ? dot : best);
      }
    }
  }
  return best;
}

}  // namespace dsa_test
