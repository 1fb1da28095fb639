// FP8 quantizers on a V3.2-sized activation (4096 tokens x hidden 7168, bf16 and fp32): act_quant
// (1 x 128 groups, ue8m0 scales), act_dequant back to the input type, and weight_quant of a bf16
// weight of the same shape (128 x 128 blocks), each on 1 and 2 threads. Baseline: memcpy of the
// bf16 activation, the bandwidth roofline of this machine. bytes/s counts bytes read plus bytes
// written for every benchmark, memcpy included.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/ops/fp8_quant.hpp"

namespace {

constexpr dsa::index_t kRows = 4096;
constexpr dsa::index_t kCols = 7168;
constexpr dsa::index_t kElems = kRows * kCols;

template <class T>
struct problem {
  std::vector<T> x;
  std::vector<dsa::fp8_e4m3> q;
  std::vector<float> s;
  problem() : x(static_cast<std::size_t>(kElems)), q(x.size()), s(static_cast<std::size_t>(kRows * (kCols / 128))) {
    std::mt19937_64 rng(3);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (auto& v : x) v = dsa::from_float<T>(d(rng));
    dsa::act_quant(dsa::cpu, dsa::make_view(x.data(), {kRows, kCols}), dsa::make_view(q.data(), {kRows, kCols}),
                   dsa::make_view(s.data(), {kRows, kCols / 128}));
  }
};

template <class T = dsa::bf16>
const problem<T>& data() {
  static const problem<T> p;
  return p;
}

void set_bytes(benchmark::State& state, double bytes) {
  state.counters["bytes/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

// Arg: threads.
template <class T>
void run_act_quant(benchmark::State& state) {
  const auto& p = data<T>();
  std::vector<dsa::fp8_e4m3> q(p.q.size());
  std::vector<float> s(p.s.size());
  const dsa::cpu_backend be{static_cast<int>(state.range(0))};
  for (auto _ : state) {
    dsa::act_quant(be, dsa::make_view(p.x.data(), {kRows, kCols}), dsa::make_view(q.data(), {kRows, kCols}),
                   dsa::make_view(s.data(), {kRows, kCols / 128}));
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, static_cast<double>(kElems) * (sizeof(T) + 1) + static_cast<double>(s.size()) * 4);
}

template <class T>
void run_act_dequant(benchmark::State& state) {
  const auto& p = data<T>();
  std::vector<T> y(p.x.size());
  const dsa::cpu_backend be{static_cast<int>(state.range(0))};
  for (auto _ : state) {
    dsa::act_dequant(be, dsa::make_view(p.q.data(), {kRows, kCols}), dsa::make_view(p.s.data(), {kRows, kCols / 128}),
                     dsa::make_view(y.data(), {kRows, kCols}));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, static_cast<double>(kElems) * (1 + sizeof(T)) + static_cast<double>(p.s.size()) * 4);
}

void BM_act_quant_bf16(benchmark::State& state) { run_act_quant<dsa::bf16>(state); }
void BM_act_quant_f32(benchmark::State& state) { run_act_quant<float>(state); }
void BM_act_dequant_bf16(benchmark::State& state) { run_act_dequant<dsa::bf16>(state); }
void BM_act_dequant_f32(benchmark::State& state) { run_act_dequant<float>(state); }
#define DSA_QUANT_BENCH(op) \
  BENCHMARK(op)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2)
DSA_QUANT_BENCH(BM_act_quant_bf16);
DSA_QUANT_BENCH(BM_act_quant_f32);
DSA_QUANT_BENCH(BM_act_dequant_bf16);
DSA_QUANT_BENCH(BM_act_dequant_f32);

void BM_weight_quant_bf16(benchmark::State& state) {
  const auto& p = data();
  std::vector<dsa::fp8_e4m3> q(p.q.size());
  std::vector<float> s(static_cast<std::size_t>((kRows / 128) * (kCols / 128)));
  const dsa::cpu_backend be{static_cast<int>(state.range(0))};
  for (auto _ : state) {
    dsa::weight_quant(be, dsa::make_view(p.x.data(), {kRows, kCols}), dsa::make_view(q.data(), {kRows, kCols}),
                      dsa::make_view(s.data(), {kRows / 128, kCols / 128}));
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, static_cast<double>(kElems) * (2 + 1));
}
DSA_QUANT_BENCH(BM_weight_quant_bf16);
#undef DSA_QUANT_BENCH

// The roofline: copying the bf16 activation (read + write).
void BM_memcpy_baseline(benchmark::State& state) {
  const auto& p = data();
  std::vector<dsa::bf16> y(p.x.size());
  for (auto _ : state) {
    std::memcpy(y.data(), p.x.data(), p.x.size() * sizeof(dsa::bf16));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2.0 * static_cast<double>(kElems) * sizeof(dsa::bf16));
}
BENCHMARK(BM_memcpy_baseline)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);

}  // namespace
