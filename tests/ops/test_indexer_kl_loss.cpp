// dsa::indexer_kl_loss_dense / _sparse: front-end checks and CPU results against a
// double-precision oracle and finite differences of it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dsa/cpu/indexer_kl_loss.hpp"
#include "dsa/ops/indexer_kl_loss.hpp"
#include "support/indexer_kl_reference.hpp"
#include "support/random.hpp"

namespace {

using dsa::index_t;
constexpr float neg_inf = -std::numeric_limits<float>::infinity();

// m query rows, h heads, n keys; causal attention probabilities (each head's row a softmax over
// [0, t + 1)) and index scores, -inf above the diagonal as the indexer produces them.
struct kl_problem {
  index_t m, h, n;
  std::vector<float> attn, index;
  std::vector<std::int32_t> ranges;

  kl_problem(index_t m_, index_t h_, index_t n_, std::uint64_t seed) : m(m_), h(h_), n(n_) {
    const auto logits = dsa_test::normal(static_cast<std::size_t>(m * h * n), seed, 1.5f);
    attn.assign(static_cast<std::size_t>(m * h * n), 0.0f);
    index = dsa_test::normal(static_cast<std::size_t>(m * n), seed + 1, 2.0f);
    ranges.resize(static_cast<std::size_t>(2 * m));
    for (index_t t = 0; t < m; ++t) {
      const index_t end = std::min(n, t + 1 + (n - m));  // the last row sees every key
      ranges[static_cast<std::size_t>(2 * t)] = 0;
      ranges[static_cast<std::size_t>(2 * t + 1)] = static_cast<std::int32_t>(end);
      for (index_t hh = 0; hh < h; ++hh) {
        double sum = 0.0;
        for (index_t s = 0; s < end; ++s) sum += std::exp(logits[static_cast<std::size_t>((t * h + hh) * n + s)]);
        for (index_t s = 0; s < end; ++s) {
          attn[static_cast<std::size_t>((t * h + hh) * n + s)] =
              static_cast<float>(std::exp(logits[static_cast<std::size_t>((t * h + hh) * n + s)]) / sum);
        }
      }
      for (index_t s = end; s < n; ++s) index[static_cast<std::size_t>(t * n + s)] = neg_inf;
    }
  }

  auto attn_view() const { return dsa::make_view(attn.data(), {m, h, n}); }
  auto index_view() const { return dsa::make_view(index.data(), {m, n}); }
  auto ranges_view() const { return dsa::make_view(ranges.data(), {m, index_t{2}}); }
  double a(index_t t, index_t hh, index_t s) const { return attn[static_cast<std::size_t>((t * h + hh) * n + s)]; }
};

struct kl_result {
  float loss = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> grad;
};

kl_result run_dense(const kl_problem& p, dsa::cpu_backend be = dsa::cpu) {
  kl_result r;
  r.grad.assign(static_cast<std::size_t>(p.m * p.n), std::numeric_limits<float>::quiet_NaN());
  dsa::indexer_kl_loss_dense(be, p.attn_view(), p.index_view(), p.ranges_view(), dsa::make_view(&r.loss, {1}),
                             dsa::make_view(r.grad.data(), {p.m, p.n}));
  return r;
}

kl_result run_sparse(const kl_problem& p, const std::vector<std::int32_t>& topk, index_t k,
                     dsa::cpu_backend be = dsa::cpu) {
  kl_result r;
  r.grad.assign(static_cast<std::size_t>(p.m * p.n), std::numeric_limits<float>::quiet_NaN());
  dsa::indexer_kl_loss_sparse(be, p.attn_view(), p.index_view(), dsa::make_view(topk.data(), {p.m, k}),
                              dsa::make_view(&r.loss, {1}), dsa::make_view(r.grad.data(), {p.m, p.n}));
  return r;
}

// The oracle's loss (and gradient) for the key lists of every row, with index scores I.
double reference_loss(const kl_problem& p, const std::vector<std::vector<std::int64_t>>& keys,
                      const std::vector<double>& index, std::vector<double>* grad) {
  double loss = 0.0;
  for (index_t t = 0; t < p.m; ++t) {
    std::vector<double> row(index.begin() + t * p.n, index.begin() + (t + 1) * p.n);
    std::vector<double> g(static_cast<std::size_t>(p.n), 0.0);
    loss += dsa_test::kl_reference_row([&](std::int64_t hh, std::int64_t s) { return p.a(t, hh, s); }, p.h, row,
                                       keys[static_cast<std::size_t>(t)], &g);
    if (grad) std::copy(g.begin(), g.end(), grad->begin() + t * p.n);
  }
  return loss;
}

std::vector<std::vector<std::int64_t>> range_keys(const kl_problem& p) {
  std::vector<std::vector<std::int64_t>> keys(static_cast<std::size_t>(p.m));
  for (index_t t = 0; t < p.m; ++t) {
    for (std::int32_t s = p.ranges[static_cast<std::size_t>(2 * t)]; s < p.ranges[static_cast<std::size_t>(2 * t + 1)]; ++s) {
      keys[static_cast<std::size_t>(t)].push_back(s);
    }
  }
  return keys;
}

std::vector<std::vector<std::int64_t>> topk_keys(const std::vector<std::int32_t>& topk, index_t m, index_t k, index_t n) {
  std::vector<std::vector<std::int64_t>> keys(static_cast<std::size_t>(m));
  for (index_t t = 0; t < m; ++t) {
    for (index_t e = 0; e < k; ++e) {
      const std::int32_t j = topk[static_cast<std::size_t>(t * k + e)];
      if (j >= 0 && j < n) keys[static_cast<std::size_t>(t)].push_back(j);
    }
  }
  return keys;
}

// Checks loss and gradient against the oracle, and the oracle's gradient against central finite
// differences of the oracle's loss, on every key of the key sets.
void check_loss_and_gradient(const kl_problem& p, const std::vector<std::vector<std::int64_t>>& keys, const kl_result& r) {
  std::vector<double> index(p.index.begin(), p.index.end());
  std::vector<double> grad(index.size(), 0.0);
  const double loss = reference_loss(p, keys, index, &grad);
  CHECK(r.loss == doctest::Approx(loss).epsilon(1e-5));
  double max_err = 0.0;
  for (std::size_t i = 0; i < grad.size(); ++i) max_err = std::max(max_err, std::fabs(r.grad[i] - grad[i]));
  CHECK(max_err < 1e-6);

  const double eps = 1e-5;
  double max_fd = 0.0;
  for (index_t t = 0; t < p.m; ++t) {
    std::vector<std::int64_t> uniq = keys[static_cast<std::size_t>(t)];
    std::sort(uniq.begin(), uniq.end());
    uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
    for (const std::int64_t s : uniq) {
      const std::size_t i = static_cast<std::size_t>(t * p.n + s);
      if (std::isinf(index[i])) continue;
      auto plus = index, minus = index;
      plus[i] += eps;
      minus[i] -= eps;
      const double fd = (reference_loss(p, keys, plus, nullptr) - reference_loss(p, keys, minus, nullptr)) / (2 * eps);
      max_fd = std::max(max_fd, std::fabs(fd - r.grad[i]));
    }
  }
  CHECK(max_fd < 1e-5);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("indexer_kl_loss_dense matches the oracle and finite differences of the loss") {
  kl_problem p(12, 3, 15, 101);
  // A row with a start > 0 and an empty range.
  p.ranges[2 * 4] = 2;
  p.ranges[2 * 6] = 5;
  p.ranges[2 * 6 + 1] = 5;
  const kl_result r = run_dense(p);
  check_loss_and_gradient(p, range_keys(p), r);
  // Zero outside the range, including the whole empty row.
  for (index_t s = 0; s < p.n; ++s) {
    if (s < 2 || s >= p.ranges[9]) CHECK(r.grad[static_cast<std::size_t>(4 * p.n + s)] == 0.0f);
    CHECK(r.grad[static_cast<std::size_t>(6 * p.n + s)] == 0.0f);
  }
  for (index_t t = 0; t < p.m; ++t) {
    for (index_t s = p.ranges[static_cast<std::size_t>(2 * t + 1)]; s < p.n; ++s) {
      CHECK(r.grad[static_cast<std::size_t>(t * p.n + s)] == 0.0f);
    }
  }
}

TEST_CASE("indexer_kl_loss gradient is softmax(I) - p, and sums to zero per row") {
  kl_problem p(10, 4, 10, 111);
  const kl_result r = run_dense(p);
  for (index_t t = 0; t < p.m; ++t) {
    const index_t end = p.ranges[static_cast<std::size_t>(2 * t + 1)];
    double pt = 0.0, mx = -1e300, z = 0.0;
    std::vector<double> ph(static_cast<std::size_t>(end), 0.0);
    for (index_t s = 0; s < end; ++s) {
      for (index_t hh = 0; hh < p.h; ++hh) ph[static_cast<std::size_t>(s)] += p.a(t, hh, s);
      pt += ph[static_cast<std::size_t>(s)];
      mx = std::max(mx, double(p.index[static_cast<std::size_t>(t * p.n + s)]));
    }
    for (index_t s = 0; s < end; ++s) z += std::exp(p.index[static_cast<std::size_t>(t * p.n + s)] - mx);
    double gsum = 0.0;
    for (index_t s = 0; s < end; ++s) {
      const double q = std::exp(p.index[static_cast<std::size_t>(t * p.n + s)] - mx) / z;
      CHECK(std::fabs(r.grad[static_cast<std::size_t>(t * p.n + s)] - (q - ph[static_cast<std::size_t>(s)] / pt)) < 1e-6);
      gsum += r.grad[static_cast<std::size_t>(t * p.n + s)];
    }
    CHECK(std::fabs(gsum) < 1e-6);
  }
}

TEST_CASE("indexer_kl_loss is zero when softmax(I) equals p") {
  kl_problem p(8, 2, 8, 121);
  for (index_t t = 0; t < p.m; ++t) {
    const index_t end = p.ranges[static_cast<std::size_t>(2 * t + 1)];
    for (index_t s = 0; s < end; ++s) {
      // softmax(log(head sum)) = head sum / total = p, up to the shift invariance of softmax.
      p.index[static_cast<std::size_t>(t * p.n + s)] = static_cast<float>(std::log(p.a(t, 0, s) + p.a(t, 1, s)) + 3.0);
    }
  }
  const kl_result r = run_dense(p);
  CHECK(std::fabs(r.loss) < 1e-5);
  for (const float g : r.grad) CHECK(std::fabs(g) < 1e-6);
  // ... and positive otherwise.
  p.index[5 * 8 + 1] += 1.0f;  // row 5 sees keys [0, 6)
  CHECK(run_dense(p).loss > 1e-4f);
}

TEST_CASE("indexer_kl_loss_sparse over the whole causal range equals the dense loss bit for bit") {
  kl_problem p(20, 4, 20, 131);
  const index_t k = 24;
  std::vector<std::int32_t> topk(static_cast<std::size_t>(p.m * k), -1);
  for (index_t t = 0; t < p.m; ++t) {
    for (index_t s = 0; s <= t; ++s) topk[static_cast<std::size_t>(t * k + s)] = static_cast<std::int32_t>(s);
  }
  const kl_result dense = run_dense(p);
  const kl_result sparse = run_sparse(p, topk, k);
  CHECK(dense.loss == sparse.loss);
  CHECK(same_bits(dense.grad, sparse.grad));
}

TEST_CASE("indexer_kl_loss_sparse matches the oracle and finite differences on random selections") {
  kl_problem p(14, 3, 30, 141);
  const index_t k = 9;
  std::mt19937_64 rng(12);
  std::vector<std::int32_t> topk(static_cast<std::size_t>(p.m * k));
  for (index_t t = 0; t < p.m; ++t) {
    const index_t end = p.ranges[static_cast<std::size_t>(2 * t + 1)];
    std::vector<std::int32_t> keys(static_cast<std::size_t>(end));
    for (index_t s = 0; s < end; ++s) keys[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(s);
    std::shuffle(keys.begin(), keys.end(), rng);
    for (index_t e = 0; e < k; ++e) topk[static_cast<std::size_t>(t * k + e)] = e < end ? keys[static_cast<std::size_t>(e)] : -1;
  }
  // Unused entries of every kind, and a duplicate (counted twice, gradients summed).
  topk[static_cast<std::size_t>(13 * k + 0)] = -5;
  topk[static_cast<std::size_t>(13 * k + 1)] = static_cast<std::int32_t>(p.n);
  topk[static_cast<std::size_t>(13 * k + 2)] = std::numeric_limits<std::int32_t>::max();
  topk[static_cast<std::size_t>(12 * k + 3)] = topk[static_cast<std::size_t>(12 * k + 4)];
  const kl_result r = run_sparse(p, topk, k);
  const auto keys = topk_keys(topk, p.m, k, p.n);
  check_loss_and_gradient(p, keys, r);
  // Zero outside the selection.
  for (index_t t = 0; t < p.m; ++t) {
    const auto& ks = keys[static_cast<std::size_t>(t)];
    for (index_t s = 0; s < p.n; ++s) {
      if (std::find(ks.begin(), ks.end(), s) == ks.end()) CHECK(r.grad[static_cast<std::size_t>(t * p.n + s)] == 0.0f);
    }
  }
}

TEST_CASE("indexer_kl_loss edge cases: no attention mass, -inf scores, all -inf, empty sets") {
  kl_problem p(4, 2, 6, 151);
  for (auto& r : p.ranges) r = 0;
  for (index_t t = 0; t < p.m; ++t) p.ranges[static_cast<std::size_t>(2 * t + 1)] = 6;
  std::fill(p.attn.begin(), p.attn.end(), 0.0f);
  for (auto& v : p.index) v = 0.5f;
  // Row 0: no attention mass: contributes 0, gradient 0.
  // Row 1: mass on key 2, whose score is -inf: the loss is +inf.
  p.attn[static_cast<std::size_t>((1 * 2 + 0) * 6 + 2)] = 1.0f;
  p.index[static_cast<std::size_t>(1 * 6 + 2)] = neg_inf;
  const kl_result r = run_dense(p);
  CHECK(r.loss == std::numeric_limits<float>::infinity());
  for (index_t s = 0; s < 6; ++s) CHECK(r.grad[static_cast<std::size_t>(s)] == 0.0f);
  CHECK(r.grad[static_cast<std::size_t>(6 + 2)] == -1.0f);  // q = 0, p = 1
  CHECK(r.grad[static_cast<std::size_t>(6 + 0)] == doctest::Approx(0.2));

  // -inf scores where p = 0 are harmless; a row with all -inf scores and p > 0 gives +inf, -p.
  kl_problem p2 = p;
  p2.index[static_cast<std::size_t>(1 * 6 + 2)] = 0.5f;
  p2.index[static_cast<std::size_t>(1 * 6 + 4)] = neg_inf;
  const kl_result r2 = run_dense(p2);
  CHECK(std::isfinite(r2.loss));
  CHECK(r2.loss == doctest::Approx(std::log(5.0)).epsilon(1e-6));  // KL(delta || uniform on 5)
  CHECK(r2.grad[static_cast<std::size_t>(6 + 4)] == 0.0f);
  for (index_t s = 0; s < 6; ++s) p2.index[static_cast<std::size_t>(2 * 6 + s)] = neg_inf;
  p2.attn[static_cast<std::size_t>((2 * 2 + 1) * 6 + 1)] = 0.5f;
  const kl_result r3 = run_dense(p2);
  CHECK(r3.loss == std::numeric_limits<float>::infinity());
  CHECK(r3.grad[static_cast<std::size_t>(2 * 6 + 1)] == -1.0f);
  CHECK(r3.grad[static_cast<std::size_t>(2 * 6 + 0)] == 0.0f);

  // Sparse: all entries unused gives 0 and zero gradients.
  std::vector<std::int32_t> none(static_cast<std::size_t>(p.m * 3), -1);
  const kl_result r4 = run_sparse(p, none, 3);
  CHECK(r4.loss == 0.0f);
  for (const float g : r4.grad) CHECK(g == 0.0f);
  // k = 0 and m = 0 are valid.
  const kl_result r5 = run_sparse(p, {}, 0);
  CHECK(r5.loss == 0.0f);
  kl_problem empty(0, 2, 6, 1);
  CHECK(run_dense(empty).loss == 0.0f);
}

TEST_CASE("indexer_kl_loss propagates NaN attention and NaN scores to their rows only (issue 14)") {
  // Row 2: a NaN attention value at key 0 (every row's range and selection holds key 0). Row 4: a
  // NaN index score at key 0. Row 0: NaN attention and a NaN score at key 8, outside its range
  // [0, 5) and outside its selection: never read. A NaN row has a NaN loss term and NaN gradients
  // on its whole key set (0 off it); the other rows are the clean problem's bits; the loss is NaN.
  const kl_problem clean(6, 3, 10, 171);
  kl_problem p = clean;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  p.attn[static_cast<std::size_t>((2 * p.h + 1) * p.n + 0)] = nan;
  p.index[static_cast<std::size_t>(4 * p.n + 0)] = nan;
  p.attn[static_cast<std::size_t>((0 * p.h + 2) * p.n + 8)] = nan;
  p.index[static_cast<std::size_t>(0 * p.n + 8)] = nan;
  const index_t k = 4;
  std::vector<std::int32_t> topk(static_cast<std::size_t>(p.m * k));
  for (index_t t = 0; t < p.m; ++t) {
    const std::int32_t sel[4] = {0, 2, 3, -1};
    std::copy(sel, sel + k, topk.begin() + t * k);
  }
  auto bits = [](float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
  };
  for (const bool sparse : {false, true}) {
    CAPTURE(sparse);
    const kl_result got = sparse ? run_sparse(p, topk, k, dsa::cpu_backend{2}) : run_dense(p, dsa::cpu_backend{2});
    const kl_result want = sparse ? run_sparse(clean, topk, k) : run_dense(clean);
    CHECK(std::isnan(got.loss));
    CHECK(std::isfinite(want.loss));
    for (index_t t = 0; t < p.m; ++t) {
      CAPTURE(t);
      const index_t end = p.ranges[static_cast<std::size_t>(2 * t + 1)];
      for (index_t j = 0; j < p.n; ++j) {
        CAPTURE(j);
        const bool in_set = sparse ? (j == 0 || j == 2 || j == 3) : j < end;
        const float g = got.grad[static_cast<std::size_t>(t * p.n + j)];
        if ((t == 2 || t == 4) && in_set) {
          CHECK(std::isnan(g));
        } else {
          CHECK(bits(g) == bits(want.grad[static_cast<std::size_t>(t * p.n + j)]));
        }
      }
    }
  }
  // Row 2 alone shows the term itself is NaN (not merely another row's).
  kl_problem one = p;
  one.m = 1;
  std::copy(p.attn.begin() + 2 * p.h * p.n, p.attn.begin() + 3 * p.h * p.n, one.attn.begin());
  std::copy(p.index.begin() + 2 * p.n, p.index.begin() + 3 * p.n, one.index.begin());
  one.ranges = {0, static_cast<std::int32_t>(p.n)};
  CHECK(std::isnan(run_dense(one).loss));
}

TEST_CASE("indexer_kl_loss is bit-identical for every thread count") {
  kl_problem p(37, 5, 40, 161);
  const index_t k = 16;
  std::vector<std::int32_t> topk(static_cast<std::size_t>(p.m * k));
  std::mt19937_64 rng(13);
  for (index_t t = 0; t < p.m; ++t) {
    std::uniform_int_distribution<int> pick(-1, p.ranges[static_cast<std::size_t>(2 * t + 1)] - 1);
    for (index_t e = 0; e < k; ++e) topk[static_cast<std::size_t>(t * k + e)] = pick(rng);
  }
  const kl_result d1 = run_dense(p, dsa::cpu_backend{1});
  const kl_result s1 = run_sparse(p, topk, k, dsa::cpu_backend{1});
  for (const int threads : {2, 3, 8, 64}) {
    CAPTURE(threads);
    const kl_result d = run_dense(p, dsa::cpu_backend{threads});
    const kl_result s = run_sparse(p, topk, k, dsa::cpu_backend{threads});
    CHECK(std::memcmp(&d.loss, &d1.loss, sizeof(float)) == 0);
    CHECK(std::memcmp(&s.loss, &s1.loss, sizeof(float)) == 0);
    CHECK(same_bits(d.grad, d1.grad));
    CHECK(same_bits(s.grad, s1.grad));
  }
}

TEST_CASE("indexer_kl_loss rejects bad arguments") {
  kl_problem p(4, 2, 6, 171);
  float loss = 0.0f;
  std::vector<float> grad(static_cast<std::size_t>(4 * 8));
  std::vector<std::int32_t> topk(static_cast<std::size_t>(4 * 3), 0);
  const auto lv = dsa::make_view(&loss, {1});
  const auto gv = dsa::make_view(grad.data(), {4, 6});
  const auto a = p.attn_view();
  const auto i = p.index_view();
  const auto rg = p.ranges_view();
  const auto tk = dsa::make_view(topk.data(), {4, 3});
  using E = dsa::error;
  CHECK_NOTHROW(dsa::indexer_kl_loss_dense(dsa::cpu, a, i, rg, lv, gv));
  CHECK_NOTHROW(dsa::indexer_kl_loss_sparse(dsa::cpu, a, i, tk, lv, gv));

  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_dense(dsa::cpu, a, dsa::make_view(p.index.data(), {4, 5}), rg, lv, gv),
                       doctest::Contains("dsa::indexer_kl_loss_dense: index_scores.extent(1) = 5; expected 6"), E);
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_sparse(dsa::cpu, a, dsa::make_view(p.index.data(), {3, 6}), tk, lv, gv),
                       doctest::Contains("dsa::indexer_kl_loss_sparse: index_scores.extent(0) = 3; expected 4"), E);
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_dense(dsa::cpu, a, i, rg, dsa::make_view(grad.data(), {2}), gv),
                       doctest::Contains("dsa::indexer_kl_loss_dense: loss.extent(0) = 2; expected 1"), E);
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_dense(dsa::cpu, a, i, rg, lv, dsa::make_view(grad.data(), {4, 8})),
                       doctest::Contains("dsa::indexer_kl_loss_dense: grad_index.extent(1) = 8; expected 6"), E);
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_sparse(dsa::cpu, a, i, dsa::make_view(topk.data(), {3, 4}), lv, gv),
                       doctest::Contains("dsa::indexer_kl_loss_sparse: topk.extent(0) = 3; expected 4"), E);
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_dense(dsa::cpu, a, i, dsa::make_view(p.ranges.data(), {4, 1}), lv, gv),
                       doctest::Contains("dsa::indexer_kl_loss_dense: ranges.extent(1) = 1; expected 2"), E);
  auto bad = p.ranges;
  bad[5] = 7;  // end > n
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_dense(dsa::cpu, a, i, dsa::make_view(bad.data(), {4, 2}), lv, gv),
                       doctest::Contains("dsa::indexer_kl_loss_dense: ranges(2, 1) = 7"), E);
  bad = p.ranges;
  bad[2] = -1;  // start < 0
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_dense(dsa::cpu, a, i, dsa::make_view(bad.data(), {4, 2}), lv, gv),
                       doctest::Contains("dsa::indexer_kl_loss_dense: ranges(1, 0) = -1"), E);
  dsa::tensor_view<const float, 3> a_strided(p.attn.data(), {4, 2, 3}, {12, 6, 2});
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_dense(dsa::cpu, a_strided, dsa::make_view(p.index.data(), {4, 3}), rg, lv,
                                                  dsa::make_view(grad.data(), {4, 3})),
                       doctest::Contains("dsa::indexer_kl_loss_dense: attn.stride(2) = 2; expected 1"), E);
  dsa::tensor_view<float, 2> g_null(nullptr, {4, 6});
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_sparse(dsa::cpu, a, i, tk, lv, g_null),
                       doctest::Contains("dsa::indexer_kl_loss_sparse: grad_index.data = null"), E);
}

TEST_CASE("indexer_kl_loss workspace overloads: the CPU checks the workspace and computes the same bits") {
  const kl_problem p(6, 3, 40, 77);
  const index_t k = 16;
  std::vector<std::int32_t> topk(static_cast<std::size_t>(p.m * k));
  for (std::size_t i = 0; i < topk.size(); ++i) topk[i] = static_cast<std::int32_t>(i * 7 % 41) - 1;  // -1 .. 39
  const auto tv = dsa::make_view(topk.data(), {p.m, k});
  const kl_result dense = run_dense(p);
  const kl_result sparse = run_sparse(p, topk, k);
  // 16-byte aligned host workspaces of exactly the documented sizes.
  CHECK(dsa::indexer_kl_loss_dense_workspace_size(p.m) == 48);
  CHECK(dsa::indexer_kl_loss_sparse_workspace_size(p.m, k) == 48 + 6 * 16 * 4);
  std::vector<double> storage(64);
  auto* bytes = reinterpret_cast<std::byte*>(storage.data());
  for (const bool is_sparse : {false, true}) {
    CAPTURE(is_sparse);
    const index_t need = is_sparse ? dsa::indexer_kl_loss_sparse_workspace_size(p.m, k)
                                   : dsa::indexer_kl_loss_dense_workspace_size(p.m);
    kl_result r;
    r.grad.assign(static_cast<std::size_t>(p.m * p.n), -1.0f);
    const auto lv = dsa::make_view(&r.loss, {1});
    const auto gv = dsa::make_view(r.grad.data(), {p.m, p.n});
    auto call = [&](dsa::host_view<std::byte, 1> ws) {
      if (is_sparse) {
        dsa::indexer_kl_loss_sparse(dsa::cpu, p.attn_view(), p.index_view(), tv, lv, gv, ws);
      } else {
        dsa::indexer_kl_loss_dense(dsa::cpu, p.attn_view(), p.index_view(), p.ranges_view(), lv, gv, ws);
      }
    };
    call(dsa::make_view(bytes, {need}));
    const kl_result& want = is_sparse ? sparse : dense;
    CHECK(std::memcmp(&r.loss, &want.loss, sizeof(float)) == 0);
    CHECK(std::memcmp(r.grad.data(), want.grad.data(), r.grad.size() * sizeof(float)) == 0);
    CHECK_THROWS_WITH_AS(call(dsa::make_view(bytes, {need - 1})), doctest::Contains("workspace.extent(0)"), dsa::error);
    CHECK_THROWS_WITH_AS(call(dsa::make_view(bytes + 4, {need})),
                         doctest::Contains("workspace.data_handle() % 16 = 4; expected 0"), dsa::error);
    CHECK_THROWS_WITH_AS(call(dsa::make_view(reinterpret_cast<std::byte*>(r.grad.data()), {need})),
                         doctest::Contains("workspace = a view overlapping grad_index"), dsa::error);
  }
}

TEST_CASE("indexer_kl_loss workspace sizes beyond int64 are a dsa::error, not garbage") {
  constexpr index_t max = std::numeric_limits<index_t>::max();
  CHECK(dsa::indexer_kl_loss_dense_workspace_size(max / 8 - 1) == (max / 8 - 1) * 8);  // already a multiple of 16
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_dense_workspace_size(max / 8 + 1),
                       "dsa::indexer_kl_loss_dense_workspace_size: m = 1152921504606846976; expected a workspace size "
                       "(8 * m bytes, rounded up to 16) that fits in int64",
                       dsa::error);
  // 8 * m fits, rounding it up to 16 does not.
  CHECK_THROWS_AS(dsa::indexer_kl_loss_dense_workspace_size(max / 8), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_sparse_workspace_size(index_t{1} << 40, index_t{1} << 30),
                       "dsa::indexer_kl_loss_sparse_workspace_size: (m, k) = (1099511627776, 1073741824); expected a "
                       "workspace size (8 * m + 4 * m * k bytes, each rounded up to 16) that fits in int64",
                       dsa::error);
  CHECK_THROWS_AS(dsa::indexer_kl_loss_sparse_workspace_size(1, max), dsa::error);
  CHECK_THROWS_AS(dsa::indexer_kl_loss_sparse_workspace_size(max / 8 + 1, 0), dsa::error);
  // Each part fits, their sum does not: 2^61 + 3 * 2^61.
  CHECK_THROWS_AS(dsa::indexer_kl_loss_sparse_workspace_size(index_t{1} << 58, 6), dsa::error);
  CHECK(dsa::indexer_kl_loss_sparse_workspace_size(index_t{1} << 58, 2) == (index_t{1} << 61) + (index_t{1} << 61));
  CHECK(dsa::indexer_kl_loss_sparse_workspace_size(0, max) == 0);
}

TEST_CASE("indexer_kl_loss over 2^40 zero-width query rows allocates nothing per row (issue 14)") {
  // Zero-width tensors carry no data, so m is whatever their shapes claim. The CPU backend once
  // kept one double per row: 8 TiB here (std::bad_alloc, or an allocator abort under ASan); a
  // 448-byte golden file made dsa_validate use 7.8 GB. Every key set is empty: the loss is 0.
  constexpr index_t m = index_t{1} << 40;
  const dsa::tensor_view<const float, 3> attn(nullptr, {m, 4, 0});
  const dsa::tensor_view<const float, 2> index(nullptr, {m, 0});
  const dsa::tensor_view<float, 2> grad(nullptr, {m, 0});
  float loss = std::numeric_limits<float>::quiet_NaN();
  const auto lv = dsa::make_view(&loss, {1});
  const dsa::tensor_view<const std::int32_t, 2> topk(nullptr, {m, 0});
  REQUIRE_NOTHROW(dsa::indexer_kl_loss_sparse(dsa::cpu, attn, index, topk, lv, grad));
  CHECK(loss == 0.0f);
  // k > 0 selections of keys that do not exist (n = 0): a [m, 3] selection broadcast over rows.
  const std::int32_t sel[3] = {0, -1, 5};
  loss = std::numeric_limits<float>::quiet_NaN();
  REQUIRE_NOTHROW(dsa::indexer_kl_loss_sparse(dsa::cpu, attn, index,
                                              dsa::tensor_view<const std::int32_t, 2>(sel, {m, 3}, {0, 1}), lv, grad));
  CHECK(loss == 0.0f);
  // Dense: one (0, 0) range broadcast to every row (stride 0), checked once.
  const std::int32_t pair[2] = {0, 0};
  const dsa::tensor_view<const std::int32_t, 2> ranges(pair, {m, 2}, {0, 1});
  loss = std::numeric_limits<float>::quiet_NaN();
  REQUIRE_NOTHROW(dsa::indexer_kl_loss_dense(dsa::cpu, attn, index, ranges, lv, grad));
  CHECK(loss == 0.0f);
  const std::int32_t bad[2] = {0, 1};  // end > n = 0
  const dsa::tensor_view<const std::int32_t, 2> bad_ranges(bad, {m, 2}, {0, 1});
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_dense(dsa::cpu, attn, index, bad_ranges, lv, grad),
                       doctest::Contains("dsa::indexer_kl_loss_dense: ranges(0, 1) = 1; expected an end in [start, n]"),
                       dsa::error);
}

TEST_CASE("indexer_kl_loss over more rows than one block adds the row losses in row order, bit for bit") {
  // The CPU backend keeps the row losses of kl_block_rows rows at a time; the loss must still be
  // the row-ordered double sum of every row's loss, for every thread count.
  const index_t m = dsa::cpu_detail::kl_block_rows * 2 + 5, h = 2, n = 3, k = 2;
  const auto logits = dsa_test::normal(static_cast<std::size_t>(m * h * n), 7, 1.0f);
  std::vector<float> attn(logits.size());
  for (std::size_t r = 0; r < attn.size(); r += n) {
    float sum = 0.0f;
    for (std::size_t s = r; s < r + n; ++s) sum += std::exp(logits[s]);
    for (std::size_t s = r; s < r + n; ++s) attn[s] = std::exp(logits[s]) / sum;
  }
  const auto index = dsa_test::normal(static_cast<std::size_t>(m * n), 8, 2.0f);
  std::vector<std::int32_t> topk(static_cast<std::size_t>(m * k));
  for (std::size_t i = 0; i < topk.size(); ++i) topk[i] = static_cast<std::int32_t>(i * 5 % 4) - 1;  // -1 .. 2
  const auto av = dsa::make_view(static_cast<const float*>(attn.data()), {m, h, n});
  const auto iv = dsa::make_view(static_cast<const float*>(index.data()), {m, n});
  // Reference: each row's double loss (the backend's own row function), summed in row order.
  double total = 0.0;
  std::vector<float> want_grad(static_cast<std::size_t>(m * n), 0.0f);
  std::vector<float> scratch(static_cast<std::size_t>(2 * k));
  for (index_t t = 0; t < m; ++t) {
    index_t keys[k];
    index_t cnt = 0;
    for (index_t e = 0; e < k; ++e) {
      const std::int32_t j = topk[static_cast<std::size_t>(t * k + e)];
      if (j >= 0 && j < n) keys[cnt++] = j;
    }
    total += dsa::cpu_detail::indexer_kl_row(av, iv.row(t), t, [&keys](index_t e) { return keys[e]; }, cnt,
                                             scratch.data(), want_grad.data() + t * n);
  }
  const float want = static_cast<float>(total);
  for (const int threads : {1, 3}) {
    CAPTURE(threads);
    float loss = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> grad(static_cast<std::size_t>(m * n), std::numeric_limits<float>::quiet_NaN());
    dsa::indexer_kl_loss_sparse(dsa::cpu_backend{threads}, av, iv,
                                dsa::make_view(static_cast<const std::int32_t*>(topk.data()), {m, k}),
                                dsa::make_view(&loss, {1}), dsa::make_view(grad.data(), {m, n}));
    CHECK(std::memcmp(&loss, &want, sizeof(float)) == 0);
    CHECK(same_bits(grad, want_grad));
  }
}
