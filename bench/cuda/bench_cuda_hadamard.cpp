// hadamard_transform on the GPU, out of place (x -> y), scale n^-0.5.
//  - V3.2's rotate_activation: bf16, n = 128, for one decode token's 64 indexer heads (64 rows:
//    latency) and a 4096-token prefill chunk (262144 rows);
//  - bf16 and fp32 rows of n = 1024, 4096, 32768 over 64M elements, the sizes of
//    fast-hadamard-transform's published comparison ("time taken vs memcpy", A100: 1.0x for
//    bf16 n <= 512, <= 1.2x up to 8192, 1.8x at 32768; fp32 1.0x up to 8192, 1.2x at 32768).
// Baseline beside each shape: cudaMemcpyAsync of the same bytes (the torch.clone of that
// comparison): memcpy time / hadamard time is the figure the anchor states, and of_copy puts the
// transform against the copy probe. FLOPs (n log2 n additions per row) are not reported: the
// kernel is bound by memory, and its GB/s is the figure that matters.
// GB/s counts x read once and y written once.
#include <benchmark/benchmark.h>

#include <cmath>

#include "bench_cuda.hpp"

namespace {

using namespace dsa_bench::cuda;

template <class T>
void run_hadamard(benchmark::State& state) {
  guarded(state, [&] {
    const index_t rows = state.range(0), n = state.range(1);
    const dsa::device_buffer<T> x = random_buffer<T>(rows * n, 42, -2.0f, 2.0f);
    dsa::device_buffer<T> y(rows * n);
    const auto xv = x.view({rows, n});
    const auto yv = y.view({rows, n});
    const float scale = 1.0f / std::sqrt(static_cast<float>(n));
    const cuda_backend be = session::get().backend();
    const double t = timed_loop(state, [&] { dsa::hadamard_transform(be, xv, yv, scale); });
    set_counters(state, t, 0.0, 2.0 * static_cast<double>(rows * n) * sizeof(T), unit::none);
  });
}

void BM_cuda_hadamard_bf16(benchmark::State& state) { run_hadamard<bf16>(state); }
void BM_cuda_hadamard_f32(benchmark::State& state) { run_hadamard<float>(state); }

// Args: rows, n, element bytes (2: bf16, 4: fp32).
void BM_cuda_hadamard_memcpy_baseline(benchmark::State& state) {
  guarded(state, [&] {
    const std::size_t bytes = static_cast<std::size_t>(state.range(0) * state.range(1) * state.range(2));
    const copy_probe p(bytes);
    const double t = timed_loop(state, std::cref(p));
    set_counters(state, t, 0.0, p.bytes_moved(), unit::none);
  });
}

constexpr index_t kElems = index_t{1} << 26;

BENCHMARK(BM_cuda_hadamard_bf16)
    ->ArgNames({"rows", "n"})
    ->Args({64, 128})
    ->Args({4096 * 64, 128})
    ->Args({kElems / 1024, 1024})
    ->Args({kElems / 4096, 4096})
    ->Args({kElems / 32768, 32768})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.1);
BENCHMARK(BM_cuda_hadamard_f32)
    ->ArgNames({"rows", "n"})
    ->Args({kElems / 1024, 1024})
    ->Args({kElems / 4096, 4096})
    ->Args({kElems / 32768, 32768})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.1);
BENCHMARK(BM_cuda_hadamard_memcpy_baseline)
    ->ArgNames({"rows", "n", "elem_bytes"})
    ->Args({64, 128, 2})
    ->Args({4096 * 64, 128, 2})
    ->Args({kElems / 1024, 1024, 2})
    ->Args({kElems / 1024, 1024, 4})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.1);

}  // namespace
