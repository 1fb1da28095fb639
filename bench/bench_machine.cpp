// Machine limits measured in the same run as the kernels, so every kernel figure can be stated
// as a fraction of what this CPU can do: peak fp32 FMA throughput and memory bandwidth
// (STREAM-style copy and triad over arrays far larger than the last-level cache), and the fixed
// cost of one cpu_detail::parallel_for call (the pooled workers) next to starting and joining a
// std::thread per chunk (what parallel_for did before the pool). And Eigen's fp32 GEMM on the
// attention kernels' shapes: the compiled-code reference their targets are stated against.
#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dsa/cpu/arch/isa.hpp"
#include "dsa/cpu/arch/parallel.hpp"

namespace {

// The ISA level and features this benchmark was compiled for (cpu/arch/isa.hpp; the bench preset
// builds every benchmark with the same flags), in the benchmark context and so in its JSON.
[[maybe_unused]] const bool isa_context = [] {
  benchmark::AddCustomContext("dsa_cpu_isa",
                              std::string(dsa::cpu_detail::isa_level_name(dsa::cpu_detail::compiled_isa_level())));
  benchmark::AddCustomContext("dsa_cpu_isa_features", std::string(dsa::cpu_detail::compiled_isa_features()));
  return true;
}();

// 8-wide fp32 vectors through GCC/Clang vector extensions: with -march=native they compile to
// AVX2/AVX-512 FMAs, without it to whatever the baseline ISA has (the probe then measures that).
typedef float v8f __attribute__((vector_size(32)));

void BM_peak_fma(benchmark::State& state) {
  // 12 independent accumulator chains hide the FMA latency (4 cycles x 2 ports on AVX2 cores).
  constexpr int chains = 12;
  v8f acc[chains];
  for (int c = 0; c < chains; ++c) acc[c] = v8f{} + 1.0f + 0.001f * static_cast<float>(c);
  const v8f a = v8f{} + 0.999999f, b = v8f{} + 1e-7f;
  constexpr long iters = 1 << 16;
  for (auto _ : state) {
    for (long i = 0; i < iters; ++i) {
      for (int c = 0; c < chains; ++c) acc[c] = acc[c] * a + b;
    }
    for (int c = 0; c < chains; ++c) benchmark::DoNotOptimize(acc[c]);
  }
  const double flops = 2.0 * 8 * chains * iters;
  // kAvgThreads: every thread reports the same per-iteration count, and the iteration count is
  // already summed over the threads; without it two threads read 4x one thread.
  state.counters["FLOP/s"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kAvgThreads);
}
BENCHMARK(BM_peak_fma)->Threads(1)->Threads(2)->UseRealTime()->MinTime(0.3);

constexpr std::size_t kStreamFloats = std::size_t{1} << 25;  // 128 MiB per array

void BM_bandwidth_copy(benchmark::State& state) {
  std::vector<float> a(kStreamFloats, 1.0f), b(kStreamFloats);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), kStreamFloats * sizeof(float));
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] =
      benchmark::Counter(2.0 * kStreamFloats * sizeof(float),
                         benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kAvgThreads);
}
// On 1 and 2 threads (each thread its own arrays): a kernel is compared with the probe of its own
// thread count, since one core alone cannot draw the whole machine's bandwidth.
BENCHMARK(BM_bandwidth_copy)->Threads(1)->Threads(2)->UseRealTime()->MinTime(0.5);

void BM_bandwidth_triad(benchmark::State& state) {
  std::vector<float> a(kStreamFloats), b(kStreamFloats, 1.0f), c(kStreamFloats, 2.0f);
  const float s = 3.0f;
  for (auto _ : state) {
    float* __restrict__ pa = a.data();
    const float* __restrict__ pb = b.data();
    const float* __restrict__ pc = c.data();
    for (std::size_t i = 0; i < kStreamFloats; ++i) pa[i] = pb[i] + s * pc[i];
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] =
      benchmark::Counter(3.0 * kStreamFloats * sizeof(float),
                         benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kAvgThreads);
}
BENCHMARK(BM_bandwidth_triad)->Threads(1)->Threads(2)->UseRealTime()->MinTime(0.5);

// Eigen's fp32 GEMM C[M, N] = A[M, K] · B[K, N], single-threaded (Eigen runs one thread without
// OpenMP), compiled with this build's flags: what the same FLOPs cost in a well-tuned library
// GEMM on this CPU and ISA level, the reference of issue 36's targets for the lightning indexer
// and sparse MLA ("of Eigen GEMM"). Shapes: the indexer's 64 heads x 128 for 1 query against 32K
// keys and for 64 queries against 8K; sparse MLA decode's two products per token (128 heads,
// 2048 selected rows: logits over d_qk = 576, then P·V over d_v = 512).
void BM_eigen_sgemm_reference(benchmark::State& state) {
  const Eigen::Index m = state.range(0), k = state.range(1), n = state.range(2);
  const Eigen::MatrixXf a = Eigen::MatrixXf::Random(m, k), b = Eigen::MatrixXf::Random(k, n);
  Eigen::MatrixXf c(m, n);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(m * k * n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_eigen_sgemm_reference)
    ->ArgNames({"M", "K", "N"})
    ->Args({64, 128, 32768})
    ->Args({4096, 128, 8192})
    ->Args({128, 576, 2048})
    ->Args({128, 2048, 512})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.3);

// One parallel_for over 2 chunks with an empty body: the pool's dispatch and completion cost.
void BM_parallel_for_overhead(benchmark::State& state) {
  const dsa::cpu_backend be{static_cast<int>(state.range(0))};
  std::atomic<dsa::index_t> sink{0};
  for (auto _ : state) {
    dsa::cpu_detail::parallel_for(be, 1024, 1, [&](dsa::index_t b, dsa::index_t e) { sink.fetch_add(e - b, std::memory_order_relaxed); });
  }
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(BM_parallel_for_overhead)->ArgName("threads")->Arg(2)->Arg(4)->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);

// Baseline: the same work split by starting a std::thread per extra chunk and joining it.
void BM_parallel_spawn_baseline(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  std::atomic<dsa::index_t> sink{0};
  for (auto _ : state) {
    std::vector<std::thread> workers;
    for (int c = 1; c < threads; ++c) workers.emplace_back([&] { sink.fetch_add(1, std::memory_order_relaxed); });
    sink.fetch_add(1, std::memory_order_relaxed);
    for (auto& w : workers) w.join();
  }
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(BM_parallel_spawn_baseline)->ArgName("threads")->Arg(2)->Arg(4)->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);

}  // namespace
