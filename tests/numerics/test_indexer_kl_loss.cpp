// The indexer KL numerics the CUDA kernel adds (kl_grad_repeated), and a host replay of the CUDA
// kernel's index logic (kernels/indexer_kl_loss_kernel.cuh: entries strided over 256 threads,
// warp butterflies then warps in order, the sparse path's per-key entry counts and per-entry
// scratch) against the CPU backend. On the host both use the same exp / log, so only the
// reduction order differs: the replay must agree to the last few bits, and exactly where the
// result is structural (cells outside the key sets, duplicate keys' sums).
// Mirrors: indexer_kl_loss_kernel.cuh indexer_kl_loss_kernel's passes, block_sum / block_max (warp
// butterflies, then warps in order), head_sum, the per-key atomicAdd counts and atomicExch
// writes, and kl_loss_total_kernel's fixed-order total.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "dsa/cpu/indexer_kl_loss.hpp"
#include "dsa/numerics/indexer_kl_loss.hpp"
#include "support/random.hpp"

namespace {

using dsa::index_t;
constexpr int threads = 256;

// The device's block_sum: per-thread partials, xor butterflies within each warp of 32, then the
// warp totals in warp order.
double block_sum(const std::vector<double>& partial) {
  double total = 0.0;
  for (int w = 0; w < threads / 32; ++w) {
    double lane[32];
    for (int l = 0; l < 32; ++l) lane[l] = partial[static_cast<std::size_t>(w * 32 + l)];
    for (int offset = 16; offset > 0; offset /= 2) {
      double next[32];
      for (int l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ offset];
      for (int l = 0; l < 32; ++l) lane[l] = next[l];
    }
    total += lane[0];
  }
  return total;
}

// The kernel's row, replayed: returns the row loss, writes grad (whose other cells the caller zeroed).
double replay_row(const float* attn, index_t s0, index_t s1, index_t h, const float* x, index_t n,
                  const std::vector<index_t>& entries, bool sparse, float* g) {
  const auto count = static_cast<index_t>(entries.size());
  std::vector<float> scratch(entries.size());
  std::vector<unsigned> counts(static_cast<std::size_t>(n), 0u);
  std::vector<double> tot(threads, 0.0), sum(threads, 0.0), loss(threads, 0.0);
  float mx = dsa::detail::neg_inf_f32();
  for (index_t e = 0; e < count; ++e) {
    const index_t j = entries[static_cast<std::size_t>(e)];
    if (j < 0) continue;
    float hs = 0.0f;
    for (index_t hh = 0; hh < h; ++hh) hs += attn[hh * s1 + j];
    scratch[static_cast<std::size_t>(e)] = hs;
    ++counts[static_cast<std::size_t>(j)];
    tot[static_cast<std::size_t>(e % threads)] += hs;
    mx = dsa::kl_score_max(mx, x[j]);
  }
  (void)s0;
  const double total = block_sum(tot);
  for (index_t e = 0; e < count; ++e) {
    const index_t j = entries[static_cast<std::size_t>(e)];
    if (j >= 0) sum[static_cast<std::size_t>(e % threads)] += dsa::kl_softmax_weight(mx, x[j]);
  }
  const dsa::kl_softmax_stats st = dsa::kl_make_softmax_stats(mx, static_cast<float>(block_sum(sum)));
  const float row_total = static_cast<float>(total);
  for (index_t e = 0; e < count; ++e) {
    const index_t j = entries[static_cast<std::size_t>(e)];
    if (j < 0) continue;
    const float p = dsa::kl_normalize_p(scratch[static_cast<std::size_t>(e)], row_total);
    loss[static_cast<std::size_t>(e % threads)] += dsa::kl_term(p, dsa::kl_log_q(st, x[j]));
    const float grad = dsa::kl_grad(dsa::kl_softmax_q_from_weight(st, dsa::kl_softmax_weight(mx, x[j])), p,
                                    dsa::kl_row_has_mass(row_total));
    scratch[static_cast<std::size_t>(e)] =
        dsa::kl_grad_repeated(grad, sparse ? counts[static_cast<std::size_t>(j)] : 1u);
  }
  for (index_t e = 0; e < count; ++e) {
    const index_t j = entries[static_cast<std::size_t>(e)];
    if (j >= 0) g[j] = scratch[static_cast<std::size_t>(e)];
  }
  return block_sum(loss);
}

}  // namespace

TEST_CASE("kl_grad_repeated is the entry-order sum of a key's identical gradients") {
  for (const float g : {0.0f, 1.0f / 3.0f, -0.123456f, 1e-30f, -1.0f}) {
    float acc = 0.0f;
    for (unsigned c = 0; c <= 9; ++c) {
      CHECK(dsa::kl_grad_repeated(g, c) == acc);
      acc += g;
    }
  }
  CHECK(std::isnan(dsa::kl_grad_repeated(std::numeric_limits<float>::quiet_NaN(), 2)));
  CHECK(dsa::kl_grad_repeated(std::numeric_limits<float>::quiet_NaN(), 0) == 0.0f);
}

TEST_CASE("the CUDA KL kernel's passes, replayed on the host, agree with the CPU backend") {
  const index_t m = 24, h = 5, n = 600, k = 300;
  const auto attn = dsa_test::uniform(static_cast<std::size_t>(m * h * n), 1, 0.0f, 1.0f);
  const auto x = dsa_test::normal(static_cast<std::size_t>(m * n), 2, 3.0f);
  std::mt19937_64 rng(3);
  for (const bool sparse : {false, true}) {
    CAPTURE(sparse);
    const index_t kk = sparse ? k : 2;
    std::vector<std::int32_t> keys(static_cast<std::size_t>(m * kk));
    std::vector<std::vector<index_t>> entries(static_cast<std::size_t>(m));
    for (index_t t = 0; t < m; ++t) {
      std::int32_t* r = keys.data() + t * kk;
      if (sparse) {
        for (index_t e = 0; e < k; ++e) {
          // Mostly distinct keys, some duplicates (3 in 16), -1 padding and out-of-range entries.
          const auto u = rng() % 16;
          r[e] = u == 0 ? -1 : u == 1 ? static_cast<std::int32_t>(n + 2) : u < 5 && e > 0 ? r[e - 1]
                                                                                       : static_cast<std::int32_t>(rng() % n);
          entries[static_cast<std::size_t>(t)].push_back(r[e] >= 0 && r[e] < n ? r[e] : -1);
        }
      } else {
        r[0] = static_cast<std::int32_t>(rng() % (n / 2));
        r[1] = static_cast<std::int32_t>(r[0] + rng() % (n / 2));
        for (index_t j = r[0]; j < r[1]; ++j) entries[static_cast<std::size_t>(t)].push_back(j);
      }
    }
    std::vector<float> grad_cpu(static_cast<std::size_t>(m * n), -1.0f);
    float loss_cpu = 0.0f;
    const auto av = dsa::make_view(attn.data(), {m, h, n});
    const auto xv = dsa::make_view(x.data(), {m, n});
    const auto kv = dsa::make_view(keys.data(), {m, kk});
    if (sparse) {
      dsa::indexer_kl_loss_sparse(dsa::cpu, av, xv, kv, dsa::make_view(&loss_cpu, {1}),
                                  dsa::make_view(grad_cpu.data(), {m, n}));
    } else {
      dsa::indexer_kl_loss_dense(dsa::cpu, av, xv, kv, dsa::make_view(&loss_cpu, {1}),
                                 dsa::make_view(grad_cpu.data(), {m, n}));
    }
    std::vector<float> grad(static_cast<std::size_t>(m * n), 0.0f);
    std::vector<double> row_loss(threads, 0.0);
    for (index_t t = 0; t < m; ++t) {
      row_loss[static_cast<std::size_t>(t % threads)] +=
          replay_row(attn.data() + t * h * n, h * n, n, h, x.data() + t * n, n, entries[static_cast<std::size_t>(t)],
                     sparse, grad.data() + t * n);
    }
    const float loss = static_cast<float>(block_sum(row_loss));
    std::size_t bad = 0;
    for (std::size_t i = 0; i < grad.size(); ++i) {
      const bool ok = grad_cpu[i] == 0.0f ? grad[i] == 0.0f
                                          : std::abs(grad[i] - grad_cpu[i]) <= 1e-6f * std::abs(grad_cpu[i]) + 1e-12f;
      bad += ok ? 0 : 1;
    }
    CHECK(bad == 0);
    CHECK(loss == doctest::Approx(loss_cpu).epsilon(1e-6));
  }
}
