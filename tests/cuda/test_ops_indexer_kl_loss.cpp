// The indexer KL losses on the CUDA backend against the CPU backend: dense (ranges: causal, random,
// empty, full) and sparse (top-k with -1 padding, entries outside [0, n), duplicate keys, rows
// without a valid entry) over a grid of shapes incl. V3.2's 128 heads with top-2048, strided
// views, masked rows (no attention mass, NaN attention), -inf / NaN / +inf index scores,
// device-side ranges outside [0, n] (clamped, never followed), m = 0 and n = 0, determinism, and
// the front-end's workspace checks with device views (no GPU needed).
//
// Tolerance (docs/cuda.md): the head sums are the CPU's bits; exp / log are the device's expf /
// logf and the row reductions are trees, so per key |grad_gpu - grad_cpu| <= 2^-19 · c · (p + q)
// (c the key's entry count; 0, i.e. exact, outside the key sets) and the loss within
// 2^-19 · sum p (|log p| + |log q| + log|S| + 1) + 2^-20 |loss|. p and q come from a double
// reference here, only to size the bound.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cuda/cuda_test.hpp"
#include "cuda/op_test.hpp"
#include "dsa/cpu/indexer_kl_loss.hpp"
#include "dsa/cuda/memory.hpp"
#include "dsa/cuda/ops.hpp"
#include "dsa/ops/indexer_kl_loss.hpp"
#include "support/random.hpp"

namespace {

using dsa::index_t;
constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();

// One problem: attn [m, h, n] with row stride s1 = n + pad per head and s0 = h · s1 + pad, scores
// and grad with row stride n + pad; keys = ranges [m, 2] (dense) or topk [m, k] (sparse).
struct kl_problem {
  index_t m = 0, h = 0, n = 0, k = 2, pad = 0;
  bool sparse = false;
  std::vector<float> attn, scores;
  std::vector<std::int32_t> keys;
  index_t s1() const { return n + pad; }
  index_t s0() const { return h * s1() + pad; }
  index_t srow() const { return n + pad; }
  std::size_t attn_size() const { return static_cast<std::size_t>(m * s0() + 1); }
  std::size_t row_size() const { return static_cast<std::size_t>(m * srow() + 1); }
};

kl_problem make_problem(index_t m, index_t h, index_t n, index_t k, index_t pad, bool sparse, std::uint64_t seed) {
  kl_problem pr;
  pr.m = m, pr.h = h, pr.n = n, pr.k = sparse ? k : 2, pr.pad = pad, pr.sparse = sparse;
  pr.attn = dsa_test::uniform(pr.attn_size(), seed, 0.0f, 1.0f);
  std::mt19937_64 rng(seed + 1);
  for (float& a : pr.attn) {
    if (rng() % 8 == 0) a = 0.0f;  // p = 0 terms
  }
  pr.scores = dsa_test::normal(pr.row_size(), seed + 2, 3.0f);
  pr.keys.resize(static_cast<std::size_t>(m * pr.k));
  for (index_t t = 0; t < m; ++t) {
    std::int32_t* r = pr.keys.data() + t * pr.k;
    if (!sparse) {
      std::int32_t a = 0, b = static_cast<std::int32_t>(n);
      switch (t % 4) {
        case 0: b = static_cast<std::int32_t>(std::min<index_t>(n, t + 1)); break;  // causal
        case 1: break;                                                              // full
        case 2:
          a = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(n + 1));
          b = static_cast<std::int32_t>(a + rng() % static_cast<std::uint64_t>(n - a + 1));
          break;
        default: a = b = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(n + 1)); break;  // empty
      }
      r[0] = a, r[1] = b;
    } else {
      // Distinct keys like a top-k, then -1 padding, some entries outside [0, n) and duplicates.
      std::vector<std::int32_t> perm(static_cast<std::size_t>(n));
      for (index_t j = 0; j < n; ++j) perm[static_cast<std::size_t>(j)] = static_cast<std::int32_t>(j);
      std::shuffle(perm.begin(), perm.end(), rng);
      const index_t valid = (t % 5 == 4) ? 0 : std::min<index_t>(k, n) - static_cast<index_t>(rng() % 3);
      for (index_t e = 0; e < k; ++e) {
        r[e] = (e < valid && n > 0) ? perm[static_cast<std::size_t>(e % n)] : -1;
      }
      if (t % 3 == 1 && k >= 4 && n > 0) {
        r[1] = r[0];                                  // a duplicate
        r[k - 1] = r[0];                              // a third copy
        r[2] = static_cast<std::int32_t>(n);          // outside [0, n)
        r[3] = std::numeric_limits<std::int32_t>::min();
      }
    }
  }
  return pr;
}

struct kl_result {
  float loss = 0.0f;
  std::vector<float> grad;
};

kl_result run_cpu(const kl_problem& pr, const std::vector<std::int32_t>& keys) {
  kl_result r;
  r.loss = -123.0f;
  r.grad.assign(pr.row_size(), -7.0f);
  const dsa::host_view<const float, 3> attn(pr.attn.data(), {pr.m, pr.h, pr.n}, {pr.s0(), pr.s1(), 1});
  const dsa::host_view<const float, 2> scores(pr.scores.data(), {pr.m, pr.n}, {pr.srow(), 1});
  const dsa::host_view<const std::int32_t, 2> kv(keys.data(), {pr.m, pr.k});
  const dsa::host_view<float, 2> grad(r.grad.data(), {pr.m, pr.n}, {pr.srow(), 1});
  const dsa::host_view<float, 1> loss(&r.loss, {1});
  if (pr.sparse) {
    dsa::indexer_kl_loss_sparse(dsa::cpu, attn, scores, kv, loss, grad);
  } else {
    dsa::indexer_kl_loss_dense(dsa::cpu, attn, scores, kv, loss, grad);
  }
  return r;
}

kl_result run_cuda(const kl_problem& pr) {
  dsa_test::test_stream stream;
  auto da = dsa_test::upload(pr.attn, stream.get());
  auto ds = dsa_test::upload(pr.scores, stream.get());
  auto dk = dsa_test::upload(pr.keys, stream.get());
  // Garbage in the outputs and the workspace: the op must write every grad cell and the loss.
  auto dg = dsa_test::upload(std::vector<float>(pr.row_size(), -7.0f), stream.get());
  auto dl = dsa_test::upload(std::vector<float>{-123.0f}, stream.get());
  const index_t ws_bytes = pr.sparse ? dsa::indexer_kl_loss_sparse_workspace_size(pr.m, pr.k)
                                     : dsa::indexer_kl_loss_dense_workspace_size(pr.m);
  auto dw = dsa_test::upload(std::vector<std::byte>(static_cast<std::size_t>(ws_bytes), std::byte{0xA5}),
                             stream.get());
  const dsa::device_view<const float, 3> attn(da.data(), {pr.m, pr.h, pr.n}, {pr.s0(), pr.s1(), 1});
  const dsa::device_view<const float, 2> scores(ds.data(), {pr.m, pr.n}, {pr.srow(), 1});
  const dsa::device_view<const std::int32_t, 2> kv(dk.data(), {pr.m, pr.k});
  const dsa::device_view<float, 2> grad(dg.data(), {pr.m, pr.n}, {pr.srow(), 1});
  const dsa::device_view<float, 1> loss(dl.data(), {1});
  const dsa::device_view<std::byte, 1> ws(dw.data(), {ws_bytes});
  if (pr.sparse) {
    dsa::indexer_kl_loss_sparse(stream.backend(), attn, scores, kv, loss, grad, ws);
  } else {
    dsa::indexer_kl_loss_dense(stream.backend(), attn, scores, kv, loss, grad, ws);
  }
  kl_result r;
  r.grad = dsa_test::download(dg, stream.get());
  r.loss = dsa_test::download(dl, stream.get())[0];
  return r;
}

// The bound's magnitudes from a double reference: per grad cell c · (p + q) (0 outside the key
// sets), and the loss scale sum p (|log p| + |log q| + log|S| + 1).
struct kl_magnitudes {
  std::vector<double> cell;
  double loss = 0.0;
};

kl_magnitudes magnitudes(const kl_problem& pr, const std::vector<std::int32_t>& keys) {
  kl_magnitudes mag;
  mag.cell.assign(pr.row_size(), 0.0);
  for (index_t t = 0; t < pr.m; ++t) {
    std::vector<index_t> set;
    const std::int32_t* r = keys.data() + t * pr.k;
    if (pr.sparse) {
      for (index_t e = 0; e < pr.k; ++e) {
        if (r[e] >= 0 && r[e] < pr.n) set.push_back(r[e]);
      }
    } else {
      for (index_t j = r[0]; j < r[1]; ++j) set.push_back(j);
    }
    if (set.empty()) continue;
    std::vector<double> hs(set.size(), 0.0);
    double total = 0.0, mx = -HUGE_VAL, z = 0.0;
    for (std::size_t e = 0; e < set.size(); ++e) {
      for (index_t hh = 0; hh < pr.h; ++hh) hs[e] += pr.attn[static_cast<std::size_t>(t * pr.s0() + hh * pr.s1() + set[e])];
      total += hs[e];
      const double x = pr.scores[static_cast<std::size_t>(t * pr.srow() + set[e])];
      if (x > mx) mx = x;
    }
    for (const index_t j : set) z += std::exp(pr.scores[static_cast<std::size_t>(t * pr.srow() + j)] - mx);
    for (std::size_t e = 0; e < set.size(); ++e) {
      const double x = pr.scores[static_cast<std::size_t>(t * pr.srow() + set[e])];
      const double p = total > 0.0 ? hs[e] / total : 0.0;
      const double q = z > 0.0 ? std::exp(x - mx) / z : 0.0;
      double& cell = mag.cell[static_cast<std::size_t>(t * pr.srow() + set[e])];
      cell += (std::isfinite(p) ? p : 0.0) + (std::isfinite(q) ? q : 0.0);
      if (p > 0.0 && q > 0.0) {
        mag.loss += p * (std::abs(std::log(p)) + std::abs(std::log(q)) + std::log(static_cast<double>(set.size())) + 1.0);
      }
    }
  }
  return mag;
}

bool same_class_and_close(float d, float c, double tol) {
  if (std::isnan(c) || std::isnan(d)) return std::isnan(c) && std::isnan(d);
  if (std::isinf(c) || std::isinf(d)) return d == c;
  return std::abs(static_cast<double>(d) - static_cast<double>(c)) <= tol;
}

void compare(const kl_problem& pr, const kl_result& gpu, const kl_result& cpu, const std::vector<std::int32_t>& keys) {
  const kl_magnitudes mag = magnitudes(pr, keys);
  std::size_t bad = 0;
  for (index_t t = 0; t < pr.m; ++t) {
    for (index_t j = 0; j < pr.n; ++j) {
      const auto i = static_cast<std::size_t>(t * pr.srow() + j);
      const double tol = std::ldexp(mag.cell[i], -19);
      if (!same_class_and_close(gpu.grad[i], cpu.grad[i], tol)) {
        if (++bad <= 5) {
          MESSAGE("grad(" << t << ", " << j << "): device " << gpu.grad[i] << ", host " << cpu.grad[i] << ", tolerance "
                          << tol);
        }
      }
    }
  }
  CHECK(bad == 0);
  // The padding between rows is never written.
  for (index_t t = 0; t < pr.m; ++t) {
    for (index_t j = pr.n; j < pr.srow(); ++j) CHECK(gpu.grad[static_cast<std::size_t>(t * pr.srow() + j)] == -7.0f);
  }
  const double loss_tol = std::ldexp(mag.loss, -19) + std::ldexp(std::abs(static_cast<double>(cpu.loss)), -20);
  INFO("loss: device " << gpu.loss << ", host " << cpu.loss << ", tolerance " << loss_tol);
  CHECK(same_class_and_close(gpu.loss, cpu.loss, loss_tol));
}

void check_problem(const kl_problem& pr) {
  CAPTURE(pr.m);
  CAPTURE(pr.h);
  CAPTURE(pr.n);
  CAPTURE(pr.k);
  CAPTURE(pr.pad);
  CAPTURE(pr.sparse);
  compare(pr, run_cuda(pr), run_cpu(pr, pr.keys), pr.keys);
}

}  // namespace

TEST_CASE("cuda indexer_kl_loss_dense: matches the CPU within the stated bound over a grid of shapes") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  std::uint64_t seed = 10;
  for (const index_t pad : {index_t{0}, index_t{3}}) {
    check_problem(make_problem(12, 4, 700, 0, pad, false, ++seed));
    check_problem(make_problem(1, 1, 1, 0, pad, false, ++seed));
    check_problem(make_problem(9, 3, 33, 0, pad, false, ++seed));
    check_problem(make_problem(40, 16, 257, 0, pad, false, ++seed));
    check_problem(make_problem(300, 2, 300, 0, pad, false, ++seed));  // causal rows of every length
  }
  check_problem(make_problem(8, 64, 5000, 0, 0, false, 30));
  check_problem(make_problem(6, 128, 4096, 0, 0, false, 31));  // V3.2's 128 heads
}

TEST_CASE("cuda indexer_kl_loss_sparse: matches the CPU with -1 padding, bad entries and duplicate keys") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  std::uint64_t seed = 40;
  for (const index_t pad : {index_t{0}, index_t{5}}) {
    check_problem(make_problem(12, 4, 700, 64, pad, true, ++seed));
    check_problem(make_problem(10, 1, 5, 8, pad, true, ++seed));  // k > n: padding and repeats
    check_problem(make_problem(16, 8, 1000, 300, pad, true, ++seed));
    check_problem(make_problem(20, 3, 97, 1, pad, true, ++seed));
  }
  check_problem(make_problem(5, 128, 4096, 2048, 0, true, 50));  // V3.2: 128 heads, top-2048
}

TEST_CASE("cuda indexer_kl_loss: masked rows, NaN and infinite scores behave as on the CPU") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  for (const bool sparse : {false, true}) {
    CAPTURE(sparse);
    kl_problem pr = make_problem(8, 4, 64, 32, 0, sparse, 60);
    auto attn_at = [&](index_t t, index_t hh, index_t j) -> float& {
      return pr.attn[static_cast<std::size_t>(t * pr.s0() + hh * pr.s1() + j)];
    };
    auto score_at = [&](index_t t, index_t j) -> float& { return pr.scores[static_cast<std::size_t>(t * pr.srow() + j)]; };
    for (index_t t = 0; t < pr.m; ++t) {
      if (!sparse) {
        pr.keys[static_cast<std::size_t>(2 * t)] = 0;
        pr.keys[static_cast<std::size_t>(2 * t + 1)] = 64;
      }
      for (index_t j = 0; j < pr.n; ++j) {
        switch (t) {
          case 0: for (index_t hh = 0; hh < pr.h; ++hh) attn_at(t, hh, j) = 0.0f; break;  // no mass: 0
          case 1: if (j == 5) attn_at(t, 2, j) = nan_f; break;                             // NaN mass: NaN row
          case 2: if (j % 7 == 0) score_at(t, j) = -inf; break;                           // p > 0, q = 0: +inf
          case 3: score_at(t, j) = -inf; break;                                            // every score -inf
          case 4: if (j == 9) score_at(t, j) = nan_f; break;                               // NaN score: NaN row
          case 5: if (j == 3) score_at(t, j) = inf; break;
          case 6: score_at(t, j) = 1.0f; break;                                            // uniform q
          default: break;
        }
      }
    }
    // Row 0 alone (loss 0, grad 0), then everything together (loss NaN: rows 1 and 4).
    kl_problem first = pr;
    first.m = 1;
    check_problem(first);
    const kl_result gpu = run_cuda(first);
    CHECK(gpu.loss == 0.0f);
    for (index_t j = 0; j < first.n; ++j) CHECK(gpu.grad[static_cast<std::size_t>(j)] == 0.0f);
    check_problem(pr);
    CHECK(std::isnan(run_cuda(pr).loss));
  }
}

TEST_CASE("cuda indexer_kl_loss_dense: device-side ranges outside [0, n] are clamped, never followed") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  kl_problem pr = make_problem(4, 2, 300, 0, 0, false, 70);
  pr.keys = {-100, 50, 200, 100000, 250, 10, std::numeric_limits<std::int32_t>::min(),
             std::numeric_limits<std::int32_t>::max()};
  const std::vector<std::int32_t> clamped = {0, 50, 200, 300, 250, 250, 0, 300};
  compare(pr, run_cuda(pr), run_cpu(pr, clamped), clamped);
}

TEST_CASE("cuda indexer_kl_loss: zero rows write a zero loss, zero keys a zero loss and no gradient") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  for (const bool sparse : {false, true}) {
    CAPTURE(sparse);
    const kl_problem none = make_problem(0, 4, 16, 8, 0, sparse, 80);
    CHECK(run_cuda(none).loss == 0.0f);
    kl_problem no_keys = make_problem(3, 4, 0, 8, 0, sparse, 81);
    CHECK(run_cuda(no_keys).loss == 0.0f);
  }
}

TEST_CASE("cuda indexer_kl_loss: run to run bit-identical") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  for (const bool sparse : {false, true}) {
    const kl_problem pr = make_problem(33, 8, 999, 256, 1, sparse, 90 + (sparse ? 1 : 0));
    const kl_result a = run_cuda(pr);
    const kl_result b = run_cuda(pr);
    dsa_test::check_bits_equal("grad", a.grad, b.grad);
    CHECK(std::memcmp(&a.loss, &b.loss, sizeof(float)) == 0);
  }
}

TEST_CASE("cuda indexer_kl_loss: front-end and workspace checks with device views (no GPU needed)") {
  const dsa::cuda_backend be{};
  const index_t m = 4, h = 2, n = 16, k = 8;
  auto attn = dsa_test::fake_device_view<float, 3>({m, h, n});
  auto scores = dsa_test::fake_device_view<float, 2>({m, n});
  auto ranges = dsa_test::fake_device_view<std::int32_t, 2>({m, 2});
  auto topk = dsa_test::fake_device_view<std::int32_t, 2>({m, k});
  auto loss = dsa_test::fake_device_view<float, 1>({1});
  auto grad = dsa_test::fake_device_view<float, 2>({m, n});
  const index_t dense_bytes = dsa::indexer_kl_loss_dense_workspace_size(m);
  const index_t sparse_bytes = dsa::indexer_kl_loss_sparse_workspace_size(m, k);
  CHECK(dense_bytes == 32);
  CHECK(sparse_bytes == 32 + 128);
  CHECK(dsa::indexer_kl_loss_dense_workspace_size(3) == 32);  // rounded up to 16 bytes
  CHECK(dsa::indexer_kl_loss_sparse_workspace_size(3, 3) == 32 + 48);
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_dense_workspace_size(-1),
                       doctest::Contains("dsa::indexer_kl_loss_dense_workspace_size: m = -1; expected >= 0"),
                       dsa::error);
  auto ws = dsa_test::fake_device_view<std::byte, 1>({sparse_bytes});

  auto small = dsa_test::fake_device_view<std::byte, 1>({dense_bytes - 1});
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_dense(be, attn, scores, ranges, loss, grad, small),
                       doctest::Contains("dsa::indexer_kl_loss_dense: workspace.extent(0) = 31; expected at least "
                                         "indexer_kl_loss_dense_workspace_size(m) = 32 bytes"),
                       dsa::error);
  auto small_sparse = dsa_test::fake_device_view<std::byte, 1>({sparse_bytes - 16});
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_sparse(be, attn, scores, topk, loss, grad, small_sparse),
                       doctest::Contains("dsa::indexer_kl_loss_sparse: workspace.extent(0) = 144; expected at least "
                                         "indexer_kl_loss_sparse_workspace_size(m, k) = 160 bytes"),
                       dsa::error);
  const dsa::device_view<std::byte, 1> misaligned(ws.data_handle() + 8, {dense_bytes});
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_dense(be, attn, scores, ranges, loss, grad, misaligned),
                       doctest::Contains("dsa::indexer_kl_loss_dense: workspace.data_handle() % 16 = 8; expected 0"),
                       dsa::error);
  const dsa::device_view<std::byte, 1> over_grad(reinterpret_cast<std::byte*>(grad.data_handle()), {sparse_bytes});
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_sparse(be, attn, scores, topk, loss, grad, over_grad),
                       doctest::Contains("dsa::indexer_kl_loss_sparse: workspace = a view overlapping grad_index"),
                       dsa::error);
  const dsa::device_view<std::byte, 1> strided(ws.data_handle(), {dense_bytes}, {2});
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_dense(be, attn, scores, ranges, loss, grad, strided),
                       doctest::Contains("dsa::indexer_kl_loss_dense: workspace.stride(0) = 2; expected 1"),
                       dsa::error);
  // The argument checks come first, as in the workspace-less overloads.
  auto bad_ranges = dsa_test::fake_device_view<std::int32_t, 2>({m - 1, 2});
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_dense(be, attn, scores, bad_ranges, loss, grad, ws),
                       doctest::Contains("dsa::indexer_kl_loss_dense: ranges.extent(0) = 3"), dsa::error);
  auto bad_topk = dsa_test::fake_device_view<std::int32_t, 2>({m + 1, k});
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_sparse(be, attn, scores, bad_topk, loss, grad, ws),
                       doctest::Contains("dsa::indexer_kl_loss_sparse: topk.extent(0) = 5; expected 4"), dsa::error);
  auto bad_grad = dsa_test::fake_device_view<float, 2>({m, n + 1});
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_dense(be, attn, scores, ranges, loss, bad_grad, ws),
                       doctest::Contains("dsa::indexer_kl_loss_dense: grad_index.extent(1) = 17; expected 16"),
                       dsa::error);
  auto bad_loss = dsa_test::fake_device_view<float, 1>({2});
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_sparse(be, attn, scores, topk, bad_loss, grad, ws),
                       doctest::Contains("dsa::indexer_kl_loss_sparse: loss.extent(0) = 2; expected 1"), dsa::error);
}
