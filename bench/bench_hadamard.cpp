// Walsh-Hadamard transform: the indexer's rotate_activation shape (n = 128, 64K rows, scale
// 128^-0.5) and long rows (n = 4096, 1024 rows: L3-resident; and 256 MB of rows: from memory),
// each in bf16 and fp32, on 1 and 2 threads.
// Baseline: the textbook scalar O(n log n) butterfly loop in place on an fp32 row, one row at a
// time on one thread, compiled in this file with the same flags (checked to give the op's exact
// bits). bytes/s counts the input read and the output written. Outputs are 64-byte aligned, as
// engines allocate them, so that the 256 MB ones are written with streaming stores (the policy of
// dsa::cpu_backend::streaming_store_bytes); _cached_stores turns those off for comparison.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "dsa/cpu/hadamard.hpp"
#include "dsa/ops/hadamard.hpp"

namespace {

template <class T>
struct problem {
  dsa::index_t rows, n;
  std::vector<T> x;
  problem(dsa::index_t r, dsa::index_t cols) : rows(r), n(cols), x(static_cast<std::size_t>(r * cols)) {
    std::mt19937_64 rng(42);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (auto& v : x) v = dsa::from_float<T>(d(rng));
  }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(n)); }
  double bytes() const { return 2.0 * static_cast<double>(x.size()) * sizeof(T); }  // read + write
  double flops() const { return static_cast<double>(rows) * static_cast<double>(n) * std::log2(static_cast<double>(n)); }
};

// One problem per shape, built on first use. n = 4096 with 1024 rows stays in the L3; the
// _from_memory shapes hold 256 MB of input + output, 8x the L3.
template <class T, dsa::index_t Rows, dsa::index_t N>
const problem<T>& shape() {
  static const problem<T> p(Rows, N);
  return p;
}
const auto& bf16_128 = shape<dsa::bf16, 65536, 128>;
const auto& f32_128 = shape<float, 65536, 128>;
const auto& bf16_4096 = shape<dsa::bf16, 1024, 4096>;
const auto& f32_4096 = shape<float, 1024, 4096>;
const auto& bf16_4096_from_memory = shape<dsa::bf16, 16384, 4096>;
const auto& f32_4096_from_memory = shape<float, 8192, 4096>;

template <class T>
void set_counters(benchmark::State& state, const problem<T>& p) {
  state.counters["bytes/s"] = benchmark::Counter(p.bytes(), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["FLOP/s"] = benchmark::Counter(p.flops(), benchmark::Counter::kIsIterationInvariantRate);
}

// The straightforward transform: per row, widen to fp32, log2(n) butterfly passes, scale, narrow.
template <class T>
void scalar_fwht(const problem<T>& p, T* y) {
  std::vector<float> row(static_cast<std::size_t>(p.n));
  const float scale = p.scale();
  for (dsa::index_t r = 0; r < p.rows; ++r) {
    const T* xr = p.x.data() + r * p.n;
    for (dsa::index_t j = 0; j < p.n; ++j) row[static_cast<std::size_t>(j)] = dsa::to_float(xr[j]);
    for (dsa::index_t h = 1; h < p.n; h *= 2) {
      for (dsa::index_t i = 0; i < p.n; i += 2 * h) {
        for (dsa::index_t j = i; j < i + h; ++j) {
          const float a = row[static_cast<std::size_t>(j)], b = row[static_cast<std::size_t>(j + h)];
          row[static_cast<std::size_t>(j)] = a + b;
          row[static_cast<std::size_t>(j + h)] = a - b;
        }
      }
    }
    for (dsa::index_t j = 0; j < p.n; ++j) y[r * p.n + j] = dsa::from_float<T>(row[static_cast<std::size_t>(j)] * scale);
  }
}

// A 64-byte-aligned output buffer, its pages already touched so that no iteration pays their
// first-touch faults.
template <class T>
std::unique_ptr<T[], decltype(&std::free)> aligned_output(std::size_t size) {
  const std::size_t bytes = (size * sizeof(T) + 63) / 64 * 64;
  std::unique_ptr<T[], decltype(&std::free)> y(static_cast<T*>(std::aligned_alloc(64, bytes)), &std::free);
  if (y) std::memset(static_cast<void*>(y.get()), 0, bytes);
  return y;
}

// Arg: threads.
template <class T>
void run_op(benchmark::State& state, const problem<T>& p, std::size_t streaming_store_bytes = 0) {
  const auto y = aligned_output<T>(p.x.size());
  if (!y) {
    state.SkipWithError("out of memory");
    return;
  }
  const dsa::cpu_backend be{static_cast<int>(state.range(0)), streaming_store_bytes};
  for (auto _ : state) {
    dsa::hadamard_transform(be, dsa::make_view(p.x.data(), {p.rows, p.n}), dsa::make_view(y.get(), {p.rows, p.n}), p.scale());
    benchmark::DoNotOptimize(y.get());
    benchmark::ClobberMemory();
  }
  set_counters(state, p);
}

template <class T>
void run_baseline(benchmark::State& state, const problem<T>& p) {
  std::vector<T> y(p.x.size()), want(p.x.size());
  dsa::hadamard_transform(dsa::cpu, dsa::make_view(p.x.data(), {p.rows, p.n}), dsa::make_view(want.data(), {p.rows, p.n}),
                          p.scale());
  scalar_fwht(p, y.data());
  if (std::memcmp(y.data(), want.data(), y.size() * sizeof(T)) != 0) {
    state.SkipWithError("the scalar baseline disagrees with dsa::hadamard_transform");
    return;
  }
  for (auto _ : state) {
    scalar_fwht(p, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, p);
}

void BM_hadamard_bf16_n128(benchmark::State& state) { run_op(state, bf16_128()); }
void BM_hadamard_bf16_n128_scalar_baseline(benchmark::State& state) { run_baseline(state, bf16_128()); }
void BM_hadamard_f32_n128(benchmark::State& state) { run_op(state, f32_128()); }
void BM_hadamard_f32_n128_scalar_baseline(benchmark::State& state) { run_baseline(state, f32_128()); }
void BM_hadamard_bf16_n4096(benchmark::State& state) { run_op(state, bf16_4096()); }
void BM_hadamard_bf16_n4096_scalar_baseline(benchmark::State& state) { run_baseline(state, bf16_4096()); }
void BM_hadamard_f32_n4096(benchmark::State& state) { run_op(state, f32_4096()); }
void BM_hadamard_f32_n4096_scalar_baseline(benchmark::State& state) { run_baseline(state, f32_4096()); }
void BM_hadamard_bf16_n4096_from_memory(benchmark::State& state) { run_op(state, bf16_4096_from_memory()); }
void BM_hadamard_bf16_n4096_from_memory_cached_stores(benchmark::State& state) {
  run_op(state, bf16_4096_from_memory(), std::numeric_limits<std::size_t>::max());
}
void BM_hadamard_f32_n4096_from_memory(benchmark::State& state) { run_op(state, f32_4096_from_memory()); }

#define DSA_HADAMARD_BENCH(op)                                                                                     \
  BENCHMARK(op)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2); \
  BENCHMARK(op##_scalar_baseline)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2)
DSA_HADAMARD_BENCH(BM_hadamard_bf16_n128);
DSA_HADAMARD_BENCH(BM_hadamard_f32_n128);
DSA_HADAMARD_BENCH(BM_hadamard_bf16_n4096);
DSA_HADAMARD_BENCH(BM_hadamard_f32_n4096);
#undef DSA_HADAMARD_BENCH
BENCHMARK(BM_hadamard_bf16_n4096_from_memory)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_hadamard_bf16_n4096_from_memory_cached_stores)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_hadamard_f32_n4096_from_memory)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);

}  // namespace
