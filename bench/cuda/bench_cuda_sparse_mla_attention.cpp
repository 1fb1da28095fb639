// Sparse MLA attention on the GPU at DeepSeek-V3.2's shape: 128 heads, d_qk = 576 (512 latent +
// 64 rope), d_v = 512, top-2048, MQA mode, bf16 output (FlashMLA's sparse kernels).
//  - decode: s = 1 .. 128 tokens, each of its own sequence (its 2048 indices drawn from its own
//    32K-row region of the cache, so tokens share no rows, as in a batch of requests), over bf16
//    rows and over the 656-byte FP8 rows; with one pass (split 1, no workspace) and with the
//    split-k workspace path at sparse_mla_attention_num_splits(s, 128, 2048, SMs) (split 0);
//  - prefill: s = 4096 tokens at the end of a 64K-token context, causal selections, bf16 rows.
// TFLOP/s counts 2 * s * h * k * (d_qk + d_v), the two matrix products over every selected entry,
// exactly as FlashMLA's tests/lib.py counts its sparse kernels (the anchors: 410 TFLOP/s sparse
// FP8 decode, 640 TFLOP/s sparse prefill, H800 SXM5). GB/s counts every distinct selected row
// read once, q, the indices, out and lse moved once. Every shape twice: the exact kernel (BM_...,
// fp32 on the CUDA cores; of_peak against the fp32 FMA probe) and the fast one (BM_..._fast: bf16
// mma.sync on the tensor cores; of_peak against the cuBLAS bf16 GEMM probe, the tensor cores'
// practical peak measured in the same run). Both take the library's split heuristic
// (sparse_mla_attention_num_splits) for split 0, what an engine gets by default.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "bench_cuda.hpp"
#include "dsa/numerics/kv_cache.hpp"

namespace {

using namespace dsa_bench::cuda;

constexpr index_t kHeads = 128;
constexpr index_t kDqk = 576;
constexpr index_t kDv = 512;
constexpr index_t kTopk = 2048;
constexpr index_t kDecodeContext = 32 * 1024;  // rows per decode token's sequence
constexpr index_t kMaxDecode = 128;
constexpr index_t kPrefillContext = 64 * 1024;
constexpr index_t kCacheRows = kMaxDecode * kDecodeContext;  // 4M rows: 4.8 GB bf16, 2.7 GB FP8

// The caches, built once per process on first use (a benchmark filtered to one format builds
// only that one) and kept: gigabytes that every shape reuses.
const dsa::device_buffer<bf16>& bf16_cache() {
  static const dsa::device_buffer<bf16> c = random_buffer<bf16>(kCacheRows * kDqk, 41, -1.7f, 1.7f);
  return c;
}
const dsa::device_buffer<std::uint8_t>& fp8_cache() {
  static const dsa::device_buffer<std::uint8_t> c = [] {
    constexpr index_t pool_rows = 4096;
    const std::vector<bf16> kv = random_values<bf16>(static_cast<std::size_t>(pool_rows * kDqk), 42, -1.7f, 1.7f);
    std::vector<std::uint8_t> pool(static_cast<std::size_t>(pool_rows * dsa::kv_fp8_row_bytes));
    for (index_t r = 0; r < pool_rows; ++r) {
      dsa::kv_fp8_row_encode(kv.data() + r * kDqk, pool.data() + r * dsa::kv_fp8_row_bytes);
    }
    return repeat_upload<std::uint8_t>(kCacheRows * dsa::kv_fp8_row_bytes, pool);
  }();
  return c;
}

/// Selections of s tokens: decode token t draws from rows [t * 32K, (t + 1) * 32K); prefill token
/// t from [0, 64K - s + t + 1). Also counts the distinct rows.
struct selection {
  dsa::device_buffer<std::int32_t> indices;
  std::int64_t distinct_rows = 0;
  selection(index_t s, bool prefill) {
    std::vector<std::int32_t> idx(static_cast<std::size_t>(s * kTopk));
    std::vector<std::uint8_t> taken;
    rng g(43 + static_cast<std::uint64_t>(s));
    for (index_t t = 0; t < s; ++t) {
      const index_t range = prefill ? kPrefillContext - s + t + 1 : kDecodeContext;
      sample_sorted(g, range, kTopk, prefill ? 0 : t * kDecodeContext, taken, idx.data() + t * kTopk);
    }
    std::vector<std::uint8_t> seen(static_cast<std::size_t>(kCacheRows), 0);
    for (const std::int32_t i : idx) {
      if (seen[static_cast<std::size_t>(i)] == 0) ++distinct_rows;
      seen[static_cast<std::size_t>(i)] = 1;
    }
    indices = upload(idx);
  }
};

template <class KV>
void run_sparse_mla(benchmark::State& state, const dsa::device_buffer<KV>& cache, index_t row_elems, index_t s,
                    index_t split_arg, bool prefill, dsa::cuda_kernel_path kernels) {
  const selection sel(s, prefill);
  const dsa::device_buffer<bf16> q = random_buffer<bf16>(s * kHeads * kDqk, 44, -1.7f, 1.7f);
  dsa::device_buffer<bf16> out(s * kHeads * kDv);
  dsa::device_buffer<float> lse(s * kHeads);
  const index_t splits = split_arg > 0 ? split_arg
                                       : dsa::sparse_mla_attention_num_splits(s, kHeads, kTopk, query_device().sm_count);
  dsa::device_buffer<std::byte> workspace(dsa::sparse_mla_attention_workspace_size(s, kHeads, kDv, splits));
  const dsa::sparse_mla_config cfg{1.0f / 24.0f, kDv, splits};  // 576^-0.5
  const index_t rows = cache.size() / row_elems;
  const auto qv = q.view({s, kHeads, kDqk});
  const auto kv = cache.view({rows, row_elems});
  const auto iv = sel.indices.view({s, kTopk});
  const auto ov = out.view({s, kHeads, kDv});
  const auto lv = lse.view({s, kHeads});
  const auto wv = workspace.view();
  const cuda_backend be = session::get().backend(kernels);
  const double t = timed_loop(state, [&] { dsa::sparse_mla_attention(be, qv, kv, iv, ov, lv, cfg, wv); });
  const double flops = 2.0 * static_cast<double>(s) * kHeads * kTopk * (kDqk + kDv);
  const double row_bytes = static_cast<double>(row_elems) * sizeof(KV);
  const double bytes = static_cast<double>(sel.distinct_rows) * row_bytes + 2.0 * static_cast<double>(q.size()) +
                       4.0 * static_cast<double>(s * kTopk) + 2.0 * static_cast<double>(out.size()) +
                       4.0 * static_cast<double>(lse.size());
  set_counters(state, t, flops, bytes, kernels == dsa::cuda_kernel_path::fast ? unit::bf16_tensor : unit::fp32_fma);
  state.counters["splits"] = static_cast<double>(splits);
}

constexpr auto kExact = dsa::cuda_kernel_path::exact;
constexpr auto kFast = dsa::cuda_kernel_path::fast;

// Args: tokens s, split (0: sparse_mla_attention_num_splits with the workspace; 1: one pass).
void BM_cuda_sparse_mla_decode_bf16(benchmark::State& state) {
  guarded(state, [&] { run_sparse_mla(state, bf16_cache(), kDqk, state.range(0), state.range(1), false, kExact); });
}
void BM_cuda_sparse_mla_decode_fp8(benchmark::State& state) {
  guarded(state, [&] {
    run_sparse_mla(state, fp8_cache(), dsa::kv_fp8_row_bytes, state.range(0), state.range(1), false, kExact);
  });
}
void BM_cuda_sparse_mla_decode_bf16_fast(benchmark::State& state) {
  guarded(state, [&] { run_sparse_mla(state, bf16_cache(), kDqk, state.range(0), state.range(1), false, kFast); });
}
void BM_cuda_sparse_mla_decode_fp8_fast(benchmark::State& state) {
  guarded(state, [&] {
    run_sparse_mla(state, fp8_cache(), dsa::kv_fp8_row_bytes, state.range(0), state.range(1), false, kFast);
  });
}

#define DSA_SPARSE_MLA_DECODE_SHAPES                                         \
  ArgNames({"s", "split"})                                                   \
      ->ArgsProduct({{1, 2, 4, 8, 16, 32, 64, 128}, {0, 1}})                 \
      ->UseManualTime()                                                      \
      ->Unit(benchmark::kMicrosecond)                                        \
      ->MinTime(0.1)
BENCHMARK(BM_cuda_sparse_mla_decode_bf16)->DSA_SPARSE_MLA_DECODE_SHAPES;
BENCHMARK(BM_cuda_sparse_mla_decode_fp8)->DSA_SPARSE_MLA_DECODE_SHAPES;
BENCHMARK(BM_cuda_sparse_mla_decode_bf16_fast)->DSA_SPARSE_MLA_DECODE_SHAPES;
BENCHMARK(BM_cuda_sparse_mla_decode_fp8_fast)->DSA_SPARSE_MLA_DECODE_SHAPES;
#undef DSA_SPARSE_MLA_DECODE_SHAPES

// Arg: tokens s (the split count is sparse_mla_attention_num_splits').
void BM_cuda_sparse_mla_prefill_bf16(benchmark::State& state) {
  guarded(state, [&] { run_sparse_mla(state, bf16_cache(), kDqk, state.range(0), 0, true, kExact); });
}
void BM_cuda_sparse_mla_prefill_bf16_fast(benchmark::State& state) {
  guarded(state, [&] { run_sparse_mla(state, bf16_cache(), kDqk, state.range(0), 0, true, kFast); });
}
BENCHMARK(BM_cuda_sparse_mla_prefill_bf16)
    ->ArgName("s")
    ->Arg(4096)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.1);
BENCHMARK(BM_cuda_sparse_mla_prefill_bf16_fast)
    ->ArgName("s")
    ->Arg(4096)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.1);

}  // namespace
