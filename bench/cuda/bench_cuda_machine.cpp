// The device's measured limits, every kernel figure's denominator: device-to-device copy
// bandwidth (cudaMemcpyAsync, bytes read + written, buffers far larger than L2), the fp32 and
// fp64 FMA throughput of the CUDA cores (one FMA = 2 FLOPs), and the bf16 tensor-core throughput
// cuBLAS reaches on a square GEMM. main() measures the same probes once (best of 10) for the
// of_peak / of_copy fractions of the other benchmarks; here they run as benchmarks, with Google
// Benchmark's statistics, at more than one size.
#include <benchmark/benchmark.h>

#include "bench_cuda.hpp"

namespace {

using namespace dsa_bench::cuda;

// Arg: MiB per buffer.
void BM_cuda_copy_d2d(benchmark::State& state) {
  guarded(state, [&] {
    const copy_probe p(static_cast<std::size_t>(state.range(0)) << 20);
    const double t = timed_loop(state, std::cref(p));
    set_counters(state, t, 0.0, p.bytes_moved(), unit::none);
  });
}
BENCHMARK(BM_cuda_copy_d2d)->ArgName("MiB")->Arg(64)->Arg(512)->Arg(2048)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);

void BM_cuda_peak_fma_f32(benchmark::State& state) {
  guarded(state, [&] {
    const fma_probe<float> p(query_device().sm_count, fma_probe_iters_f32);
    const double t = timed_loop(state, std::cref(p));
    set_counters(state, t, p.flops(), 0.0, unit::fp32_fma);
  });
}
BENCHMARK(BM_cuda_peak_fma_f32)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);

void BM_cuda_peak_fma_f64(benchmark::State& state) {
  guarded(state, [&] {
    const fma_probe<double> p(query_device().sm_count, fma_probe_iters_f64);
    const double t = timed_loop(state, std::cref(p));
    set_counters(state, t, p.flops(), 0.0, unit::fp64_fma);
  });
}
BENCHMARK(BM_cuda_peak_fma_f64)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);

// Arg: n of the n x n x n GEMM.
void BM_cuda_peak_gemm_bf16_cublas(benchmark::State& state) {
  guarded(state, [&] {
    const gemm_probe p(static_cast<int>(state.range(0)));
    const double t = timed_loop(state, std::cref(p));
    set_counters(state, t, p.flops(), 0.0, unit::bf16_tensor);
  });
}
BENCHMARK(BM_cuda_peak_gemm_bf16_cublas)->ArgName("n")->Arg(4096)->Arg(8192)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);

}  // namespace
