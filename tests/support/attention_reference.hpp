// Test oracle for sparse MLA attention: the formulas of docs/design.md "Sparse MLA attention" written as plain loops in
// double precision (two-pass softmax), independent of the library's tiling, online softmax and
// rounding.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace dsa_test {

/// Dense softmax attention of one query vector over rows kv[0, rows) (row-major, width d):
/// out[0, d_v) = softmax(scale · q·kv_j) · kv[j, :d_v], returns the natural-log logsumexp and
/// writes the probabilities to p[0, rows) when p is not null. No rows: out 0, +inf.
inline double dense_attention_row(const float* q, const float* kv, std::int64_t rows, std::int64_t d, std::int64_t d_v,
                                  double scale, double* out, double* p = nullptr) {
  std::fill(out, out + d_v, 0.0);
  if (rows == 0) return std::numeric_limits<double>::infinity();
  std::vector<double> x(static_cast<std::size_t>(rows));
  double m = -std::numeric_limits<double>::infinity();
  for (std::int64_t j = 0; j < rows; ++j) {
    double dot = 0.0;
    for (std::int64_t c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * kv[j * d + c];
    x[static_cast<std::size_t>(j)] = scale * dot;
    m = std::max(m, scale * dot);
  }
  double l = 0.0;
  for (auto& v : x) l += std::exp(v - m);
  for (std::int64_t j = 0; j < rows; ++j) {
    const double pj = std::exp(x[static_cast<std::size_t>(j)] - m) / l;
    if (p) p[j] = pj;
    for (std::int64_t c = 0; c < d_v; ++c) out[c] += pj * kv[j * d + c];
  }
  return m + std::log(l);
}

struct attention_reference_result {
  std::vector<double> out;    ///< [s, h, d_v]
  std::vector<double> lse;    ///< [s, h]
  std::vector<double> probs;  ///< [s, k]: sum over heads of P per entry, 0 for unused entries
};

/// Sparse MQA attention: for token t the kv rows indices[t, e] with 0 <= index < n, each entry on
/// its own (a duplicated row counts twice). q [s, h, d], kv [n, d], indices [s, k], all row-major.
inline attention_reference_result sparse_attention_reference(const std::vector<float>& q, const std::vector<float>& kv,
                                                             const std::vector<std::int32_t>& indices, std::int64_t s,
                                                             std::int64_t h, std::int64_t d, std::int64_t n,
                                                             std::int64_t k, std::int64_t d_v, double scale) {
  attention_reference_result r;
  r.out.assign(static_cast<std::size_t>(s * h * d_v), 0.0);
  r.lse.assign(static_cast<std::size_t>(s * h), 0.0);
  r.probs.assign(static_cast<std::size_t>(s * k), 0.0);
  for (std::int64_t t = 0; t < s; ++t) {
    std::vector<float> rows;
    std::vector<std::int64_t> pos;
    for (std::int64_t e = 0; e < k; ++e) {
      const std::int32_t j = indices[static_cast<std::size_t>(t * k + e)];
      if (j < 0 || j >= n) continue;
      rows.insert(rows.end(), kv.begin() + j * d, kv.begin() + (j + 1) * d);
      pos.push_back(e);
    }
    const auto cnt = static_cast<std::int64_t>(pos.size());
    std::vector<double> p(static_cast<std::size_t>(cnt));
    for (std::int64_t hh = 0; hh < h; ++hh) {
      r.lse[static_cast<std::size_t>(t * h + hh)] =
          dense_attention_row(q.data() + (t * h + hh) * d, rows.data(), cnt, d, d_v, scale,
                              r.out.data() + (t * h + hh) * d_v, p.data());
      for (std::int64_t e = 0; e < cnt; ++e) r.probs[static_cast<std::size_t>(t * k + pos[e])] += p[e];
    }
  }
  return r;
}

}  // namespace dsa_test
