// Top-k selection and the row gather on the GPU at DeepSeek-V3.2's shape (k = 2048):
//  - topk_indices over m = 1, 64 rows that see all n scores (decode) and m = 4096 rows with
//    causal ranges at the end of the context (prefill), n = 8K, 32K, 128K;
//  - gather_rows of the 2048 selected 656-byte FP8 cache rows of m = 1 and 64 tokens from a
//    128K-row cache (what an unfused sparse-attention decode would copy).
// Both are bound by memory and carry no FLOPs. GB/s counts the least the op must move: top-k
// reads the in-range scores once and writes k int32 indices per row (the radix select's later
// passes re-read only the surviving candidates, mostly from L2); the gather reads the selected
// rows and the indices once and writes the rows once. of_copy relates it to the copy probe.
#include <benchmark/benchmark.h>

#include <vector>

#include "bench_cuda.hpp"
#include "dsa/numerics/kv_cache.hpp"

namespace {

using namespace dsa_bench::cuda;

constexpr index_t kTopk = 2048;

// Args: rows m, scores per row n.
void BM_cuda_topk_indices(benchmark::State& state) {
  guarded(state, [&] {
    const index_t m = state.range(0), n = state.range(1);
    const dsa::device_buffer<float> scores = random_buffer<float>(m * n, 31, -4.0f, 4.0f);
    std::vector<std::int32_t> r;
    const std::int64_t in_range = make_ranges(m, n, /*causal=*/m > 64, r);
    const dsa::device_buffer<std::int32_t> ranges = upload(r);
    dsa::device_buffer<std::int32_t> indices(m * kTopk);
    const auto sv = scores.view({m, n});
    const auto rv = ranges.view({m, 2});
    const auto iv = indices.view({m, kTopk});
    const cuda_backend be = session::get().backend();
    const double t = timed_loop(state, [&] { dsa::topk_indices(be, sv, rv, kTopk, iv); });
    set_counters(state, t, 0.0, 4.0 * static_cast<double>(in_range) + 4.0 * static_cast<double>(m * (kTopk + 2)),
                 unit::none);
  });
}
BENCHMARK(BM_cuda_topk_indices)
    ->ArgNames({"m", "n"})
    ->ArgsProduct({{1, 64, 4096}, {8 * 1024, 32 * 1024, 128 * 1024}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.1);

// Arg: tokens m.
void BM_cuda_gather_rows_fp8(benchmark::State& state) {
  guarded(state, [&] {
    const index_t m = state.range(0), n = 128 * 1024, row = dsa::kv_fp8_row_bytes;
    const dsa::device_buffer<std::uint8_t> cache = random_buffer<std::uint8_t>(n * row, 32, 0.0f, 255.0f);
    std::vector<std::int32_t> idx(static_cast<std::size_t>(m * kTopk));
    rng g(33);
    std::vector<std::uint8_t> taken;
    for (index_t t = 0; t < m; ++t) sample_sorted(g, n, kTopk, 0, taken, idx.data() + t * kTopk);
    const dsa::device_buffer<std::int32_t> indices = upload(idx);
    dsa::device_buffer<std::uint8_t> dst(m * kTopk * row);
    const auto cv = cache.view({n, row});
    const auto iv = indices.view({m, kTopk});
    const auto dv = dst.view({m, kTopk, row});
    const cuda_backend be = session::get().backend();
    const double t = timed_loop(state, [&] { dsa::gather_rows(be, cv, iv, dv); });
    set_counters(state, t, 0.0, 2.0 * static_cast<double>(m * kTopk * row) + 4.0 * static_cast<double>(m * kTopk),
                 unit::none);
  });
}
BENCHMARK(BM_cuda_gather_rows_fp8)->ArgName("m")->Arg(1)->Arg(64)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.1);

}  // namespace
