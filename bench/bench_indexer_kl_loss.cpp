// Indexer KL losses for a 4096-token training sequence with 16 heads of main attention:
// attn [4096, 16, 4096] fp32 (1 GiB; only the causal half is read), index scores [4096, 4096].
// The loss is memory-bound: bytes/s counts the bytes each op must touch (attn and index scores
// on the key sets, the whole grad_index written). Baseline: the roofline of this machine for the
// same access pattern, a plain threaded sum of the same causal attn rows.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/cpu/indexer_kl_loss.hpp"
#include "dsa/ops/indexer_kl_loss.hpp"

namespace {

using dsa::index_t;

constexpr index_t kRows = 4096;
constexpr index_t kKeys = 4096;
constexpr index_t kHeads = 16;
constexpr index_t kTopk = 2048;

struct kl_data {
  std::vector<float> attn, index;
  std::vector<std::int32_t> ranges, topk;
  kl_data()
      : attn(static_cast<std::size_t>(kRows * kHeads * kKeys), 0.0f),
        index(static_cast<std::size_t>(kRows * kKeys), 0.0f),
        ranges(static_cast<std::size_t>(2 * kRows)),
        topk(static_cast<std::size_t>(kRows * kTopk), -1) {
    // Positive pseudo-random values on the causal part (the op needs no exact normalisation);
    // a xorshift keeps the 1 GiB fill fast.
    std::uint64_t x = 88172645463325252ull;
    auto next = [&x] {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      return static_cast<float>(x >> 40) * 0x1p-24f;
    };
    for (index_t t = 0; t < kRows; ++t) {
      ranges[static_cast<std::size_t>(2 * t)] = 0;
      ranges[static_cast<std::size_t>(2 * t + 1)] = static_cast<std::int32_t>(t + 1);
      for (index_t h = 0; h < kHeads; ++h) {
        float* a = attn.data() + (t * kHeads + h) * kKeys;
        for (index_t s = 0; s <= t; ++s) a[s] = next() / static_cast<float>(t + 1);
      }
      for (index_t s = 0; s < kKeys; ++s) index[static_cast<std::size_t>(t * kKeys + s)] = s <= t ? 4.0f * next() : -INFINITY;
    }
    std::mt19937_64 rng(3);
    std::vector<std::int32_t> keys;
    for (index_t t = 0; t < kRows; ++t) {
      keys.resize(static_cast<std::size_t>(t + 1));
      std::iota(keys.begin(), keys.end(), 0);
      if (t + 1 > kTopk) {
        std::shuffle(keys.begin(), keys.end(), rng);
        keys.resize(static_cast<std::size_t>(kTopk));
        std::sort(keys.begin(), keys.end());
      }
      std::copy(keys.begin(), keys.end(), topk.begin() + t * kTopk);
    }
  }
};

const kl_data& data() {
  static const kl_data d;
  return d;
}

// Keys read over all rows: sum over t of |key set of t|.
double dense_keys() { return static_cast<double>(kRows) * (kRows + 1) / 2.0; }
double sparse_keys() {
  double k = 0.0;
  for (index_t t = 0; t < kRows; ++t) k += static_cast<double>(std::min(t + 1, kTopk));
  return k;
}

void set_bytes(benchmark::State& state, double keys, bool sparse) {
  const double bytes = keys * (kHeads + 1) * sizeof(float)  // attn and index scores on the key sets
                       + static_cast<double>(kRows) * kKeys * sizeof(float)  // grad_index
                       + (sparse ? static_cast<double>(kRows) * kTopk * sizeof(std::int32_t) : 0.0);
  state.counters["bytes/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_indexer_kl_loss_dense(benchmark::State& state) {
  const auto& d = data();
  std::vector<float> grad(static_cast<std::size_t>(kRows * kKeys));
  float loss = 0.0f;
  for (auto _ : state) {
    dsa::indexer_kl_loss_dense(dsa::cpu, dsa::make_view(d.attn.data(), {kRows, kHeads, kKeys}),
                               dsa::make_view(d.index.data(), {kRows, kKeys}), dsa::make_view(d.ranges.data(), {kRows, index_t{2}}),
                               dsa::make_view(&loss, {1}), dsa::make_view(grad.data(), {kRows, kKeys}));
    benchmark::DoNotOptimize(loss);
    benchmark::ClobberMemory();
  }
  set_bytes(state, dense_keys(), false);
}
BENCHMARK(BM_indexer_kl_loss_dense)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);

void BM_indexer_kl_loss_sparse(benchmark::State& state) {
  const auto& d = data();
  std::vector<float> grad(static_cast<std::size_t>(kRows * kKeys));
  float loss = 0.0f;
  for (auto _ : state) {
    dsa::indexer_kl_loss_sparse(dsa::cpu, dsa::make_view(d.attn.data(), {kRows, kHeads, kKeys}),
                                dsa::make_view(d.index.data(), {kRows, kKeys}), dsa::make_view(d.topk.data(), {kRows, kTopk}),
                                dsa::make_view(&loss, {1}), dsa::make_view(grad.data(), {kRows, kKeys}));
    benchmark::DoNotOptimize(loss);
    benchmark::ClobberMemory();
  }
  set_bytes(state, sparse_keys(), true);
}
BENCHMARK(BM_indexer_kl_loss_sparse)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);

// A sum with 8 independent partial sums, so that it runs at memory speed rather than at the
// latency of one chain of fp32 additions.
float stream_sum(const float* a, index_t n) {
  float acc[8] = {};
  index_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l];
  }
  for (; i < n; ++i) acc[0] += a[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Roofline baseline: stream the causal attn rows once (a sum per row, rows split over threads
// like the op) and write grad_index-sized zeros: the bytes of the dense loss at memory speed.
void BM_indexer_kl_loss_roofline_baseline(benchmark::State& state) {
  const auto& d = data();
  std::vector<float> grad(static_cast<std::size_t>(kRows * kKeys));
  std::vector<float> sums(static_cast<std::size_t>(kRows));
  for (auto _ : state) {
    dsa::cpu_detail::parallel_for(dsa::cpu, kRows, 1, [&](index_t b, index_t e) {
      for (index_t t = b; t < e; ++t) {
        float acc = 0.0f;
        for (index_t h = 0; h < kHeads; ++h) {
          const float* a = d.attn.data() + (t * kHeads + h) * kKeys;
          acc += stream_sum(a, t + 1);
        }
        acc += stream_sum(d.index.data() + t * kKeys, t + 1);
        std::fill_n(grad.data() + t * kKeys, kKeys, 0.0f);
        sums[static_cast<std::size_t>(t)] = acc;
      }
    });
    benchmark::DoNotOptimize(sums.data());
    benchmark::DoNotOptimize(grad.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, dense_keys(), false);
}
BENCHMARK(BM_indexer_kl_loss_roofline_baseline)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);

}  // namespace
