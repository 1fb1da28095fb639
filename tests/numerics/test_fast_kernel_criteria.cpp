// The criteria the fast kernels are checked with (tests/support/fast_kernel_criteria.hpp): that
// they accept what they must and reject what they must, on synthetic data, without a GPU. The
// CUDA tests that use them (test_ops_lightning_indexer.cpp, test_ops_sparse_mla_attention.cpp)
// can then only pass where the fast kernels meet the anchors' criteria.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "support/fast_kernel_criteria.hpp"

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float qnan = std::numeric_limits<float>::quiet_NaN();

std::vector<float> ramp(int n, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = scale * std::sin(0.37f * static_cast<float>(i) + 0.1f);
  return v;
}

// v with every element scaled by 1 + rel · (+-1, alternating).
std::vector<float> perturbed(const std::vector<float>& v, double rel) {
  std::vector<float> w = v;
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(w[i] * (1.0 + (i % 2 == 0 ? rel : -rel)));
  return w;
}

}  // namespace

TEST_CASE("calc_diff is DeepGEMM's 1 - 2 sum(xy) / sum(x^2 + y^2)") {
  const std::vector<float> x = ramp(1000, 3.0f);
  CHECK(dsa_test::calc_diff(x, x) == 0.0);
  std::vector<float> neg = x;
  for (float& v : neg) v = -v;
  CHECK(dsa_test::calc_diff(x, neg) == doctest::Approx(2.0));
  CHECK(dsa_test::calc_diff(std::vector<float>(5, 0.0f), std::vector<float>(5, 0.0f)) == 0.0);
  // Relative errors e of alternating sign: about e^2 / 2.
  CHECK(dsa_test::calc_diff(x, perturbed(x, 1e-3)) == doctest::Approx(5e-7).epsilon(0.05));
  // Non-finite entries count as 0.
  std::vector<float> a = x, b = x;
  a[3] = -inf;
  b[3] = -inf;
  CHECK(dsa_test::calc_diff(a, b) == 0.0);
}

TEST_CASE("indexer_logits_close: the -inf set and calc_diff < 5e-6") {
  std::vector<float> exact = ramp(4096, 20.0f);
  for (std::size_t i = 0; i < exact.size(); i += 7) exact[i] = -inf;
  CHECK(dsa_test::indexer_logits_close(exact, exact).ok);
  CHECK(dsa_test::indexer_logits_close(perturbed(exact, 1e-4), exact).ok);   // calc_diff ~5e-9
  CHECK_FALSE(dsa_test::indexer_logits_close(perturbed(exact, 1e-2), exact).ok);  // ~5e-5
  std::vector<float> moved = exact;
  moved[7] = 1.0f;  // an out-of-range key scored
  CHECK_FALSE(dsa_test::indexer_logits_close(moved, exact).ok);
  std::vector<float> dropped = exact;
  dropped[8] = -inf;  // an in-range key lost
  CHECK_FALSE(dsa_test::indexer_logits_close(dropped, exact).ok);
  std::vector<float> with_nan = exact;
  with_nan[9] = qnan;
  CHECK_FALSE(dsa_test::indexer_logits_close(with_nan, exact).ok);
  CHECK(dsa_test::indexer_logits_close(with_nan, with_nan).ok);
}

TEST_CASE("flashmla_close: abs or rel per element, the non-finite pattern, and the cos diff") {
  const std::vector<float> ref = ramp(2048, 4.0f);
  CHECK(dsa_test::flashmla_close("out", ref, ref, 1e-3, 2.01 / 128, 5e-6).ok);
  std::vector<float> small = ref;
  small[0] = 0.01f;
  std::vector<float> got = small;
  got[0] = 0.01f + 2e-3f;  // abs 2e-3 > 1e-3 and rel 0.2 > 2.01 / 128
  CHECK_FALSE(dsa_test::flashmla_close("out", got, small, 1e-3, 2.01 / 128, 5e-6).ok);
  got[0] = 0.01f + 5e-4f;  // within abs
  CHECK(dsa_test::flashmla_close("out", got, small, 1e-3, 2.01 / 128, 5e-6).ok);
  std::vector<float> big = ref;
  big[1] = 10.0f;
  got = big;
  got[1] = 10.1f;  // abs 0.1, but rel 0.01 < 2.01 / 128
  CHECK(dsa_test::flashmla_close("out", got, big, 1e-3, 2.01 / 128, 5e-6).ok);
  // Every element within rel 1% (< 2.01 / 128), but a cos diff of ~5e-5.
  CHECK_FALSE(dsa_test::flashmla_close("out", perturbed(ref, 1e-2), ref, 1e-3, 2.01 / 128, 5e-6).ok);
  std::vector<float> lse = ref, lse_inf = ref;
  lse_inf[5] = inf;
  CHECK_FALSE(dsa_test::flashmla_close("lse", lse, lse_inf, 1e-6, 8.01 / 65536, 5e-6).ok);
  CHECK(dsa_test::flashmla_close("lse", lse_inf, lse_inf, 1e-6, 8.01 / 65536, 5e-6).ok);
}

TEST_CASE("topk_sets_agree: equal sets but for near ties of the k-th score") {
  const dsa::index_t m = 2, n = 16, k = 4;
  std::vector<float> exact(static_cast<std::size_t>(m * n));
  for (dsa::index_t i = 0; i < m * n; ++i) exact[static_cast<std::size_t>(i)] = static_cast<float>((i * 7) % 16);
  exact[static_cast<std::size_t>(n + 15)] = -inf;
  const auto half = [](dsa::index_t, dsa::index_t) { return 0.5; };  // |fast - exact| <= 0.5 a priori
  CHECK(dsa_test::topk_sets_agree(exact, exact, m, n, n, k, half).ok);
  // Row 0's 4th best (12) and 5th (11) as a near tie: 11 is within 0.5 + 0.5 of the k-th score.
  std::vector<float> tie = exact;
  for (dsa::index_t s = 0; s < n; ++s) {
    float& v = tie[static_cast<std::size_t>(s)];
    if (v == 12.0f) v = 11.4f;
    else if (v == 11.0f) v = 11.6f;
  }
  CHECK(dsa_test::topk_sets_agree(tie, exact, m, n, n, k, half).ok);
  // ... but not within a tighter bound.
  CHECK_FALSE(dsa_test::topk_sets_agree(tie, exact, m, n, n, k, [](dsa::index_t, dsa::index_t) { return 0.25; }).ok);
  // A key far below the k-th score selected instead (the best key's score lost).
  std::vector<float> lost = exact;
  for (dsa::index_t s = 0; s < n; ++s) {
    if (lost[static_cast<std::size_t>(s)] == 0.0f) lost[static_cast<std::size_t>(s)] = 20.0f;
  }
  CHECK_FALSE(dsa_test::topk_sets_agree(lost, exact, m, n, n, k, half).ok);
  // k larger than the finite keys: every finite key, the same count on both sides.
  CHECK(dsa_test::topk_sets_agree(exact, exact, m, n, n, 100, half).ok);
  std::vector<float> fewer = exact;
  fewer[static_cast<std::size_t>(n + 3)] = -inf;
  CHECK_FALSE(dsa_test::topk_sets_agree(fewer, exact, m, n, n, 100, half).ok);
}
