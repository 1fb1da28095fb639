// The criteria the fast (tensor-core) kernels are held to against the exact kernels on the same
// quantised inputs: the anchors' own tests' criteria (docs/cuda.md, "Exact and fast kernels").
//   DeepGEMM tests/test_attention.py (fp8_mqa_logits): the same -inf set, then
//     calc_diff(x, y) = 1 - 2 Σ x y / Σ (x² + y²) over the logits with -inf set to 0;
//   FlashMLA tests (check_is_allclose): the same non-finite pattern, every element within an
//     absolute or a relative tolerance (a failure needs both exceeded), and calc_diff ("cos
//     diff") below a bound;
//   top-k: the k best keys of a row agree as sets except for keys whose exact score lies within
//     the row's observed fast-vs-exact error of the k-th exact score (a near tie may go either way).
// Pure functions returning a verdict and a message, so that tests/numerics/test_fast_kernel_criteria
// checks that they fail on what they must reject, and the CUDA tests CHECK their verdicts.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "dsa/core/tensor_view.hpp"

namespace dsa_test {

struct criterion_result {
  bool ok = true;
  std::string message;  // the first failures, for the test log
};

namespace criteria_detail {

inline void note(criterion_result& r, int& shown, const std::string& line) {
  r.ok = false;
  if (shown++ < 5) r.message += line + "\n";
}

// The class of a float for "the same non-finite pattern": 0 finite, 1 +inf, 2 -inf, 3 NaN.
inline int kind(float v) {
  if (std::isnan(v)) return 3;
  if (std::isinf(v)) return v > 0 ? 1 : 2;
  return 0;
}

}  // namespace criteria_detail

/// DeepGEMM's calc_diff over finite pairs (non-finite entries count as 0, as its tests mask
/// them): 1 - 2 Σ x y / Σ (x² + y²) in double; 0 when both are all zero.
inline double calc_diff(const std::vector<float>& x, const std::vector<float>& y) {
  double xy = 0.0, sq = 0.0;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
    const double a = std::isfinite(x[i]) ? x[i] : 0.0, b = std::isfinite(y[i]) ? y[i] : 0.0;
    xy += a * b;
    sq += a * a + b * b;
  }
  return sq == 0.0 ? 0.0 : 1.0 - 2.0 * xy / sq;
}

/// The same non-finite pattern (+inf, -inf and NaN exactly where `ref` has them) and the same
/// size.
inline criterion_result same_nonfinite(const std::string& what, const std::vector<float>& got,
                                       const std::vector<float>& ref) {
  criterion_result r;
  int shown = 0;
  if (got.size() != ref.size()) {
    criteria_detail::note(r, shown, what + ": size " + std::to_string(got.size()) + " vs " + std::to_string(ref.size()));
    return r;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (criteria_detail::kind(got[i]) != criteria_detail::kind(ref[i])) {
      std::ostringstream os;
      os << what << "[" << i << "] = " << got[i] << ", exact " << ref[i] << ": another non-finite pattern";
      criteria_detail::note(r, shown, os.str());
    }
  }
  return r;
}

/// The indexer's logits: the same non-finite pattern (the -inf of out-of-range keys and NaN)
/// and calc_diff < `max_diff` (the 5e-6; DeepGEMM's own test allows 1e-3).
inline criterion_result indexer_logits_close(const std::vector<float>& fast, const std::vector<float>& exact,
                                             double max_diff = 5e-6) {
  criterion_result r = same_nonfinite("scores", fast, exact);
  const double d = calc_diff(fast, exact);
  if (!(d < max_diff)) {
    r.ok = false;
    std::ostringstream os;
    os << "scores: calc_diff = " << d << "; expected < " << max_diff << "\n";
    r.message += os.str();
  }
  return r;
}

/// FlashMLA's check_is_allclose: the same non-finite pattern; every finite element with
/// |got - ref| <= abs_tol or |got - ref| <= rel_tol · |ref|; calc_diff < cos_tol.
inline criterion_result flashmla_close(const std::string& what, const std::vector<float>& got,
                                       const std::vector<float>& ref, double abs_tol, double rel_tol, double cos_tol) {
  criterion_result r = same_nonfinite(what, got, ref);
  if (got.size() != ref.size()) return r;
  int shown = 0;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(ref[i])) continue;
    const double e = std::abs(static_cast<double>(got[i]) - ref[i]);
    if (e > abs_tol && e > rel_tol * std::abs(static_cast<double>(ref[i]))) {
      ++bad;
      std::ostringstream os;
      os << what << "[" << i << "] = " << got[i] << ", exact " << ref[i] << ": |diff| " << e << " > abs " << abs_tol
         << " and > rel " << rel_tol;
      criteria_detail::note(r, shown, os.str());
    }
  }
  if (bad > 5) r.message += "... " + std::to_string(bad) + " elements out of tolerance\n";
  const double d = calc_diff(got, ref);
  if (!(d < cos_tol)) {
    r.ok = false;
    std::ostringstream os;
    os << what << ": cos diff (calc_diff) = " << d << "; expected < " << cos_tol << "\n";
    r.message += os.str();
  }
  return r;
}

/// Top-k sets of every row of two score matrices [m, n] (row stride `ld`): the k best finite
/// scores (larger first, then the smaller index), at most the row's finite count. They must be
/// equal except for keys s whose exact score is within bound(t, s) + bound(t, s_k) of the k-th
/// exact score (key s_k): a near tie may go either way. `bound(t, s)` is an a-priori bound on
/// |fast - exact| of score (t, s) from the inputs (not the observed difference, which would make
/// the check pass whatever the kernels did), asked only for the keys that differ and the k-th.
/// Rows holding a NaN are skipped (same_nonfinite checks the NaNs).
template <class Bound>
criterion_result topk_sets_agree(const std::vector<float>& fast, const std::vector<float>& exact, dsa::index_t m,
                                 dsa::index_t n, dsa::index_t ld, dsa::index_t k, const Bound& bound) {
  criterion_result r;
  int shown = 0;
  std::vector<dsa::index_t> a, b;
  for (dsa::index_t t = 0; t < m; ++t) {
    const float* fe = fast.data() + t * ld;
    const float* ex = exact.data() + t * ld;
    bool has_nan = false;
    a.clear();
    b.clear();
    for (dsa::index_t s = 0; s < n; ++s) {
      has_nan = has_nan || std::isnan(fe[s]) || std::isnan(ex[s]);
      if (std::isfinite(ex[s])) a.push_back(s);
      if (std::isfinite(fe[s])) b.push_back(s);
    }
    if (has_nan) continue;
    const auto by_score = [](const float* v) {
      return [v](dsa::index_t x, dsa::index_t y) { return v[x] != v[y] ? v[x] > v[y] : x < y; };
    };
    const std::size_t ka = std::min<std::size_t>(a.size(), static_cast<std::size_t>(k));
    const std::size_t kb = std::min<std::size_t>(b.size(), static_cast<std::size_t>(k));
    if (ka != kb) {
      criteria_detail::note(r, shown, "row " + std::to_string(t) + ": " + std::to_string(kb) + " finite keys selected, exact " +
                                          std::to_string(ka));
      continue;
    }
    if (ka == 0) continue;
    std::partial_sort(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(ka), a.end(), by_score(ex));
    std::partial_sort(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(kb), b.end(), by_score(fe));
    const double kth = ex[a[ka - 1]];
    const double kth_bound = bound(t, a[ka - 1]);
    std::vector<dsa::index_t> sa(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(ka));
    std::vector<dsa::index_t> sb(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(kb));
    std::sort(sa.begin(), sa.end());
    std::sort(sb.begin(), sb.end());
    std::vector<dsa::index_t> diff;
    std::set_symmetric_difference(sa.begin(), sa.end(), sb.begin(), sb.end(), std::back_inserter(diff));
    for (const dsa::index_t s : diff) {
      const double tol = bound(t, s) + kth_bound;
      if (!(std::abs(static_cast<double>(ex[s]) - kth) <= tol)) {
        std::ostringstream os;
        os << "row " << t << ": key " << s << " (exact " << ex[s] << ", fast " << fe[s]
           << ") is in one top-" << ka << " set only, " << std::abs(static_cast<double>(ex[s]) - kth)
           << " from the k-th exact score " << kth << " (tolerance " << tol << ")";
        criteria_detail::note(r, shown, os.str());
      }
    }
  }
  return r;
}

}  // namespace dsa_test
