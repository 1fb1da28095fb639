// dsa::hadamard_transform against FFHT (FALCONN-LIB/FFHT, the fastest CPU Walsh-Hadamard transform
// with an AVX path), built from the user's checkout of it with this file's flags: configure with
// -DDSA_FFHT_DIR=<FFHT source directory> (bench/CMakeLists.txt). FFHT is not vendored.
//
// Both transform fp32 rows in place on one thread, the issue-36 shapes: n = 128 x 64K rows (the
// indexer's rotate_activation) and n = 4096 x 1024 rows (L3-resident). FFHT's transform is
// unnormalised, dsa's is given scale 1 to match; both take the same pristine input each iteration
// (restored outside the timed region), since repeated unnormalised transforms overflow. Before
// timing, the two outputs are compared (they sum in different orders: within 1e-5 of each row's
// norm). Also a memcpy of the same bytes, the floor of any transform that reads and writes them.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "dsa/cpu/hadamard.hpp"
#include "dsa/ops/hadamard.hpp"

extern "C" int fht_float(float* buf, int log_n);

namespace {

struct rows {
  dsa::index_t count, n;
  std::vector<float> pristine, work;
  rows(dsa::index_t r, dsa::index_t cols) : count(r), n(cols), pristine(static_cast<std::size_t>(r * cols)) {
    std::mt19937_64 rng(42);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (float& v : pristine) v = d(rng);
    work = pristine;
  }
  int log_n() const { return static_cast<int>(std::lround(std::log2(static_cast<double>(n)))); }
  double bytes() const { return 2.0 * static_cast<double>(pristine.size()) * sizeof(float); }
};

rows& shape(dsa::index_t n) {
  static rows n128(65536, 128), n4096(1024, 4096);
  return n == 128 ? n128 : n4096;
}

void ffht(rows& p) {
  for (dsa::index_t r = 0; r < p.count; ++r) fht_float(p.work.data() + r * p.n, p.log_n());
}

void dsa_in_place(rows& p) {
  float* x = p.work.data();
  dsa::hadamard_transform(dsa::cpu_backend{1}, dsa::make_view(static_cast<const float*>(x), {p.count, p.n}),
                          dsa::make_view(x, {p.count, p.n}), 1.0f);
}

// Whether both give the same transform of the pristine rows, to FFHT's summation order.
bool agree(rows& p) {
  p.work = p.pristine;
  ffht(p);
  const std::vector<float> want = p.work;
  p.work = p.pristine;
  dsa_in_place(p);
  for (dsa::index_t r = 0; r < p.count; ++r) {
    double norm = 0.0, diff = 0.0;
    for (dsa::index_t j = 0; j < p.n; ++j) {
      const std::size_t i = static_cast<std::size_t>(r * p.n + j);
      norm += static_cast<double>(want[i]) * want[i];
      diff = std::max(diff, std::abs(static_cast<double>(want[i]) - p.work[i]));
    }
    if (!(diff <= 1e-5 * std::sqrt(norm))) return false;
  }
  return true;
}

template <void (*Transform)(rows&)>
void run(benchmark::State& state) {
  rows& p = shape(state.range(0));
  if (!agree(p)) {
    state.SkipWithError("FFHT and dsa::hadamard_transform disagree");
    return;
  }
  for (auto _ : state) {
    state.PauseTiming();
    std::memcpy(p.work.data(), p.pristine.data(), p.pristine.size() * sizeof(float));
    state.ResumeTiming();
    Transform(p);
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] = benchmark::Counter(p.bytes(), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_hadamard_f32_in_place_dsa(benchmark::State& state) { run<dsa_in_place>(state); }
void BM_hadamard_f32_in_place_ffht(benchmark::State& state) { run<ffht>(state); }

void BM_memcpy_same_bytes(benchmark::State& state) {
  rows& p = shape(state.range(0));
  std::vector<float> out(p.pristine.size());
  for (auto _ : state) {
    std::memcpy(out.data(), p.pristine.data(), p.pristine.size() * sizeof(float));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] = benchmark::Counter(p.bytes(), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK(BM_hadamard_f32_in_place_dsa)->ArgName("n")->Arg(128)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
BENCHMARK(BM_hadamard_f32_in_place_ffht)->ArgName("n")->Arg(128)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
BENCHMARK(BM_memcpy_same_bytes)->ArgName("n")->Arg(128)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
