// The FP8 lightning indexer on the GPU at DeepSeek-V3.2's shape: 64 heads x 128, e4m3 q and k,
// fp32 weights and key scales (DeepGEMM's fp8_mqa_logits / fp8_paged_mqa_logits).
//  - contiguous keys (lightning_indexer_scores): m = 1 and 64 query rows that each see all n keys
//    (one token; a block of speculative or chunked tokens of one sequence), and m = 4096, a
//    prefill chunk at the end of an n-token context with causal ranges; n = 8K, 32K, 128K;
//  - the paged cache (lightning_indexer_scores_paged, 132-byte rows, 64-token blocks): m = 1 and
//    64 decode rows, each its own sequence of n tokens in its own shuffled blocks.
// Each shape twice: the exact kernel (BM_..., fp32 FMAs on the CUDA cores, exact e4m3 products in
// the CPU's summation order; of_peak against the fp32 FMA probe) and the fast one (BM_..._fast:
// e4m3 converted exactly to f16, f16 mma.sync on the tensor cores; of_peak against the cuBLAS
// bf16 GEMM probe, the tensor cores' practical 16-bit peak measured in the same run).
// TFLOP/s counts the q.k dot products of the in-range (row, key) pairs, 2 * 64 * 128 per pair
// (as the CPU benchmark and every indexer paper count them; the ReLU-weighted head sum adds 2 * 64
// more). GB/s counts keys (codes and scales) read once, q and w read once, and the full score
// rows written (-inf outside the ranges). DeepGEMM's kernels use the FP8 tensor cores (wgmma) and
// publish no figure for these kernels.
#include <benchmark/benchmark.h>

#include <vector>

#include "bench_cuda.hpp"
#include "dsa/numerics/kv_cache.hpp"

namespace {

using namespace dsa_bench::cuda;

constexpr index_t kHeads = 64;
constexpr index_t kDim = 128;
constexpr index_t kBlock = 64;
constexpr double kFlopsPerPair = 2.0 * kHeads * kDim;

/// The unit whose measured peak of_peak divides by: the CUDA cores' fp32 FMAs for the exact
/// kernel, the tensor cores (the cuBLAS bf16 GEMM probe; f16 runs at the bf16 rate) for the fast one.
unit unit_of(dsa::cuda_kernel_path kernels) {
  return kernels == dsa::cuda_kernel_path::fast ? unit::bf16_tensor : unit::fp32_fma;
}

struct queries {
  dsa::device_buffer<fp8_e4m3> q;  // [m, kHeads, kDim]
  dsa::device_buffer<float> w;     // [m, kHeads]
  dsa::device_buffer<std::int32_t> ranges;
  std::int64_t pairs = 0;          // in-range (row, key) pairs
  queries(index_t m, index_t n, bool causal)
      : q(random_buffer<fp8_e4m3>(m * kHeads * kDim, 21, -8.0f, 8.0f)),
        w(random_buffer<float>(m * kHeads, 22, -0.05f, 0.05f)) {
    std::vector<std::int32_t> r;
    pairs = make_ranges(m, n, causal, r);
    ranges = upload(r);
  }
  double bytes(index_t m) const { return static_cast<double>(m) * kHeads * (kDim + 4); }
};

// Args: query rows m, keys n.
void run_indexer(benchmark::State& state, dsa::cuda_kernel_path kernels) {
  guarded(state, [&] {
    const index_t m = state.range(0), n = state.range(1);
    const queries in(m, n, /*causal=*/m > 64);
    const dsa::device_buffer<fp8_e4m3> k = random_buffer<fp8_e4m3>(n * kDim, 23, -8.0f, 8.0f);
    const dsa::device_buffer<float> k_scale = random_buffer<float>(n, 24, 0.001f, 0.01f);
    dsa::device_buffer<float> scores(m * n);
    const auto qv = in.q.view({m, kHeads, kDim});
    const auto wv = in.w.view({m, kHeads});
    const auto kv = k.view({n, kDim});
    const auto sv = k_scale.view();
    const auto rv = in.ranges.view({m, 2});
    const auto out = scores.view({m, n});
    const cuda_backend be = session::get().backend(kernels);
    const double t = timed_loop(state, [&] { dsa::lightning_indexer_scores(be, qv, wv, kv, sv, rv, out); });
    const double bytes = static_cast<double>(n) * (kDim + 4) + in.bytes(m) + 4.0 * static_cast<double>(m * n);
    set_counters(state, t, kFlopsPerPair * static_cast<double>(in.pairs), bytes, unit_of(kernels));
  });
}
void BM_cuda_lightning_indexer_fp8(benchmark::State& state) { run_indexer(state, dsa::cuda_kernel_path::exact); }
void BM_cuda_lightning_indexer_fp8_fast(benchmark::State& state) { run_indexer(state, dsa::cuda_kernel_path::fast); }
#define DSA_INDEXER_SHAPES                                        \
  ArgNames({"m", "n"})                                            \
      ->ArgsProduct({{1, 64, 4096}, {8 * 1024, 32 * 1024, 128 * 1024}}) \
      ->UseManualTime()                                           \
      ->Unit(benchmark::kMicrosecond)                             \
      ->MinTime(0.1)
BENCHMARK(BM_cuda_lightning_indexer_fp8)->DSA_INDEXER_SHAPES;
BENCHMARK(BM_cuda_lightning_indexer_fp8_fast)->DSA_INDEXER_SHAPES;
#undef DSA_INDEXER_SHAPES

// Args: decode rows m (each a sequence of its own), context n (a multiple of 64).
void run_indexer_paged(benchmark::State& state, dsa::cuda_kernel_path kernels) {
  guarded(state, [&] {
    const index_t m = state.range(0), n = state.range(1);
    const index_t blocks_per_row = n / kBlock;
    const queries in(m, n, /*causal=*/false);
    // The cache: m * n valid rows (128 e4m3 codes and a scale), from a pool of 8192 encoded rows.
    std::vector<std::uint8_t> pool(static_cast<std::size_t>(8192 * dsa::indexer_cache_row_bytes));
    {
      const std::vector<fp8_e4m3> codes = random_values<fp8_e4m3>(8192 * kDim, 25, -8.0f, 8.0f);
      rng g(26);
      for (index_t r = 0; r < 8192; ++r) {
        dsa::indexer_cache_row_encode(codes.data() + r * kDim, g.uniform(0.001f, 0.01f),
                                      pool.data() + r * dsa::indexer_cache_row_bytes);
      }
    }
    const dsa::device_buffer<std::uint8_t> cache = repeat_upload<std::uint8_t>(m * n * dsa::indexer_cache_row_bytes, pool);
    // Row r owns blocks [r * blocks_per_row, (r + 1) * blocks_per_row), in a shuffled order.
    std::vector<std::int32_t> table(static_cast<std::size_t>(m * blocks_per_row));
    rng g(27);
    for (index_t r = 0; r < m; ++r) {
      std::int32_t* row = table.data() + r * blocks_per_row;
      for (index_t b = 0; b < blocks_per_row; ++b) row[b] = static_cast<std::int32_t>(r * blocks_per_row + b);
      for (index_t b = blocks_per_row - 1; b > 0; --b) std::swap(row[b], row[g.below(b + 1)]);
    }
    const dsa::device_buffer<std::int32_t> block_table = upload(table);
    dsa::device_buffer<float> scores(m * n);
    const auto qv = in.q.view({m, kHeads, kDim});
    const auto wv = in.w.view({m, kHeads});
    const auto cv = cache.view({m * n, dsa::indexer_cache_row_bytes});
    const auto tv = block_table.view({m, blocks_per_row});
    const auto rv = in.ranges.view({m, 2});
    const auto out = scores.view({m, n});
    const cuda_backend be = session::get().backend(kernels);
    const double t =
        timed_loop(state, [&] { dsa::lightning_indexer_scores_paged(be, qv, wv, cv, tv, kBlock, rv, out); });
    const double bytes = static_cast<double>(m * n) * dsa::indexer_cache_row_bytes + 4.0 * static_cast<double>(table.size()) +
                         in.bytes(m) + 4.0 * static_cast<double>(m * n);
    set_counters(state, t, kFlopsPerPair * static_cast<double>(in.pairs), bytes, unit_of(kernels));
  });
}
void BM_cuda_lightning_indexer_paged_fp8(benchmark::State& state) {
  run_indexer_paged(state, dsa::cuda_kernel_path::exact);
}
void BM_cuda_lightning_indexer_paged_fp8_fast(benchmark::State& state) {
  run_indexer_paged(state, dsa::cuda_kernel_path::fast);
}
#define DSA_INDEXER_PAGED_SHAPES                                \
  ArgNames({"m", "n"})                                          \
      ->ArgsProduct({{1, 64}, {8 * 1024, 32 * 1024, 128 * 1024}}) \
      ->UseManualTime()                                         \
      ->Unit(benchmark::kMicrosecond)                           \
      ->MinTime(0.1)
BENCHMARK(BM_cuda_lightning_indexer_paged_fp8)->DSA_INDEXER_PAGED_SHAPES;
BENCHMARK(BM_cuda_lightning_indexer_paged_fp8_fast)->DSA_INDEXER_PAGED_SHAPES;
#undef DSA_INDEXER_PAGED_SHAPES

}  // namespace
