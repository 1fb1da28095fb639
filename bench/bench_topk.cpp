// Top-k (k = 2048, V3.2's index_topk) of n = 8K..128K index scores per row, 1 row (decode) or
// 64 rows (prefill block), by radix select on 1 and 2 threads; baselines on the same rows in the
// same binary, single-threaded: std::nth_element (selection, then a sort of the k winners for
// ascending order) and std::sort of the whole row. elements/s counts scanned scores.
//
// Every iteration works on other rows than the last (a pool of at least 16 distinct rows,
// cycled): selecting from the same row again and again lets the branch predictor learn the
// comparison pattern of that row (std::nth_element ran 5x faster per row on one repeated 8K row
// than on 64 different ones), which no decode step sees: its scores are new every token.
//
// Also gather_rows of the selected 656-byte FP8 KV-cache rows, against one contiguous memcpy of
// the same bytes.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "dsa/cpu/topk.hpp"
#include "dsa/ops/topk.hpp"

namespace {

using dsa::index_t;
constexpr index_t kTopK = 2048;

// Index scores as the indexer produces them: a ReLU-weighted sum, mostly positive and of
// similar magnitude (one exponent range holds most of them).
std::vector<float> make_scores(index_t m, index_t n) {
  std::mt19937_64 rng(99);
  std::normal_distribution<float> nd(2.0f, 1.0f);
  std::vector<float> s(static_cast<std::size_t>(m * n));
  for (auto& x : s) x = nd(rng);
  return s;
}

void set_counters(benchmark::State& state, index_t m, index_t n) {
  state.counters["elements/s"] =
      benchmark::Counter(static_cast<double>(m * n), benchmark::Counter::kIsIterationInvariantRate);
}

// Rows in the pool the iterations cycle through.
index_t pool_rows(index_t m) { return std::max<index_t>(m, 16); }

// Arg threads: the backend's thread count.
void BM_topk_indices(benchmark::State& state) {
  const index_t m = state.range(0), n = state.range(1);
  const dsa::cpu_backend be{static_cast<int>(state.range(2))};
  const index_t pool = pool_rows(m);
  const auto scores = make_scores(pool, n);
  std::vector<std::int32_t> ranges(static_cast<std::size_t>(2 * m), 0);
  for (index_t t = 0; t < m; ++t) ranges[static_cast<std::size_t>(2 * t + 1)] = static_cast<std::int32_t>(n);
  std::vector<std::int32_t> out(static_cast<std::size_t>(m * kTopK));
  index_t first = 0;
  for (auto _ : state) {
    dsa::topk_indices(be, dsa::make_view(scores.data() + first * n, {m, n}), dsa::make_view(ranges.data(), {m, 2}),
                      kTopK, dsa::make_view(out.data(), {m, kTopK}));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    first = (first + m) % pool;  // m divides pool
  }
  set_counters(state, m, n);
}

// A single-threaded baseline: `select(idx, by_rank)` orders the row's indices so that the k best
// (by the op's rule: larger score, then smaller index) come first; they are then sorted by index.
template <class Select>
void run_baseline(benchmark::State& state, Select select) {
  const index_t m = state.range(0), n = state.range(1);
  const index_t pool = pool_rows(m);
  const auto scores = make_scores(pool, n);
  std::vector<std::int32_t> idx(static_cast<std::size_t>(n));
  std::vector<std::int32_t> out(static_cast<std::size_t>(m * kTopK));
  index_t first = 0;
  for (auto _ : state) {
    for (index_t t = 0; t < m; ++t) {
      const float* row = scores.data() + (first + t) * n;
      std::iota(idx.begin(), idx.end(), 0);
      select(idx, [row](std::int32_t a, std::int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      std::sort(idx.begin(), idx.begin() + kTopK);
      std::copy_n(idx.begin(), kTopK, out.begin() + t * kTopK);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    first = (first + m) % pool;
  }
  set_counters(state, m, n);
}

// The same selection by std::nth_element.
void BM_topk_nth_element_baseline(benchmark::State& state) {
  run_baseline(state, [](std::vector<std::int32_t>& idx, auto by_rank) {
    std::nth_element(idx.begin(), idx.begin() + (kTopK - 1), idx.end(), by_rank);
  });
}

// Full sort of every row (what "not a sort" avoids).
void BM_topk_full_sort_baseline(benchmark::State& state) {
  run_baseline(state, [](std::vector<std::int32_t>& idx, auto by_rank) { std::sort(idx.begin(), idx.end(), by_rank); });
}

#define DSA_TOPK_SHAPES ArgNames({"m", "n"})->ArgsProduct({{1, 64}, {8 * 1024, 32 * 1024, 128 * 1024}})
BENCHMARK(BM_topk_indices)
    ->ArgNames({"m", "n", "threads"})
    ->ArgsProduct({{1, 64}, {8 * 1024, 32 * 1024, 128 * 1024}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.2);
BENCHMARK(BM_topk_nth_element_baseline)->DSA_TOPK_SHAPES->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
BENCHMARK(BM_topk_full_sort_baseline)->DSA_TOPK_SHAPES->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
#undef DSA_TOPK_SHAPES

// Gathering the k = 2048 selected 656-byte FP8 KV rows of one decode row from a 128K-token cache.
void BM_gather_rows(benchmark::State& state) {
  const index_t n = 128 * 1024, row_bytes = 656, m = state.range(0);
  std::vector<std::uint8_t> cache(static_cast<std::size_t>(n * row_bytes), 1);
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(n - 1));
  std::vector<std::int32_t> idx(static_cast<std::size_t>(m * kTopK));
  for (auto& i : idx) i = pick(rng);
  std::vector<std::uint8_t> dst(static_cast<std::size_t>(m * kTopK * row_bytes));
  for (auto _ : state) {
    dsa::gather_rows(dsa::cpu, dsa::make_view(cache.data(), {n, row_bytes}), dsa::make_view(idx.data(), {m, kTopK}),
                     dsa::make_view(dst.data(), {m, kTopK, row_bytes}));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] = benchmark::Counter(2.0 * static_cast<double>(dst.size()),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_gather_rows)->ArgName("m")->Arg(1)->Arg(16)->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);

// Baseline: the same number of bytes copied contiguously (the bandwidth bound of the gather).
void BM_gather_memcpy_baseline(benchmark::State& state) {
  const index_t row_bytes = 656, m = state.range(0);
  std::vector<std::uint8_t> src(static_cast<std::size_t>(m * kTopK * row_bytes), 1), dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] = benchmark::Counter(2.0 * static_cast<double>(dst.size()),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_gather_memcpy_baseline)->ArgName("m")->Arg(1)->Arg(16)->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);

}  // namespace
