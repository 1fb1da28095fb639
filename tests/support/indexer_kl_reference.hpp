// Test oracle for the indexer KL losses: docs/design.md "Indexer KL losses" (paper eqs. 3 and 4) as plain loops in
// double precision, independent of the library's numerics.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace dsa_test {

/// KL(p || softmax(I)) of one row over the entries keys[0, cnt) (positions in attn_row and
/// score_row; duplicates are separate entries), in double, with the gradient added to grad.
/// attn_row(h, s) gives the attention probability of head h at key s.
template <class Attn>
double kl_reference_row(const Attn& attn_row, std::int64_t heads, const std::vector<double>& scores,
                        const std::vector<std::int64_t>& keys, std::vector<double>* grad) {
  const auto cnt = keys.size();
  std::vector<double> p(cnt, 0.0);
  double total = 0.0;
  for (std::size_t e = 0; e < cnt; ++e) {
    for (std::int64_t hh = 0; hh < heads; ++hh) p[e] += attn_row(hh, keys[e]);
    total += p[e];
  }
  if (total > 0) {
    for (auto& v : p) v /= total;
  }
  double m = -std::numeric_limits<double>::infinity();
  for (std::size_t e = 0; e < cnt; ++e) m = std::max(m, scores[static_cast<std::size_t>(keys[e])]);
  double l = 0.0;
  for (std::size_t e = 0; e < cnt; ++e) l += std::isinf(m) ? 0.0 : std::exp(scores[static_cast<std::size_t>(keys[e])] - m);
  double loss = 0.0;
  for (std::size_t e = 0; e < cnt; ++e) {
    const double x = scores[static_cast<std::size_t>(keys[e])];
    const double q = l > 0 ? std::exp(x - m) / l : 0.0;
    if (p[e] > 0) loss += p[e] * (std::log(p[e]) - std::log(q));
    if (grad) (*grad)[static_cast<std::size_t>(keys[e])] += q * (total > 0 ? 1.0 : 0.0) - p[e];
  }
  return loss;
}

}  // namespace dsa_test
