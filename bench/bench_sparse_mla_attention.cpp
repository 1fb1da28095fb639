// Sparse MLA attention at DeepSeek-V3.2's shape: 128 heads, d_qk = 576 (512 latent + 64 rope),
// d_v = 512, top-k = 2048 selected keys per query, MQA mode. Decode (1 and 4 query tokens) and
// prefill (64 tokens), over bf16 rows and 656-byte FP8 rows, at contexts L = 32K, 64K, 128K
// (the selected rows are spread over the whole cache), on 1 and 2 threads.
// Baseline: the same op as dense attention over the whole context (indices = 0..L-1, k = L) at
// the same L: the ratio of the times is what sparsity buys, to compare with the ideal L / 2048
// (reported as the counter ideal_speedup of the baseline).
// FLOP/s counts 2·s·h·k·(d_qk + d_v) (the two GEMMs), bytes/s the kv rows read once per token.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "dsa/cpu/sparse_mla_attention.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"

namespace {

using dsa::bf16;
using dsa::index_t;

constexpr index_t kHeads = 128;
constexpr index_t kDqk = 576;
constexpr index_t kDv = 512;
constexpr index_t kTopk = 2048;
constexpr index_t kContext = 128 * 1024;
constexpr index_t kMaxTokens = 64;

struct cache_data {
  std::vector<bf16> q;            // [kMaxTokens, kHeads, kDqk]
  std::vector<bf16> kv;           // [kContext, kDqk]
  std::vector<std::uint8_t> fp8;  // [kContext, 656]: kv packed as the FP8 cache
  cache_data() {
    // Uniform values with unit variance from a cheap generator: 75M cache values must not make
    // the set-up longer than the benchmarks.
    std::mt19937 rng(2025);
    std::uniform_real_distribution<float> ud(-1.7f, 1.7f);
    q.resize(static_cast<std::size_t>(kMaxTokens * kHeads * kDqk));
    for (auto& x : q) x = bf16(ud(rng));
    kv.resize(static_cast<std::size_t>(kContext * kDqk));
    for (auto& x : kv) x = bf16(ud(rng));
    fp8.resize(static_cast<std::size_t>(kContext * dsa::kv_fp8_row_bytes));
    for (index_t j = 0; j < kContext; ++j) dsa::kv_fp8_row_encode(kv.data() + j * kDqk, fp8.data() + j * dsa::kv_fp8_row_bytes);
  }
};

// [s, kTopk] sorted, distinct indices into [0, context), as top-k returns them.
std::vector<std::int32_t> selection(index_t s, index_t context) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(context) * 131 + static_cast<std::uint64_t>(s));
  std::vector<std::int32_t> all(static_cast<std::size_t>(context));
  std::iota(all.begin(), all.end(), 0);
  std::vector<std::int32_t> topk(static_cast<std::size_t>(s * kTopk));
  for (index_t t = 0; t < s; ++t) {
    // A partial Fisher-Yates shuffle: the first kTopk entries are a uniform sample.
    for (index_t i = 0; i < kTopk; ++i) {
      std::uniform_int_distribution<index_t> pick(i, context - 1);
      std::swap(all[static_cast<std::size_t>(i)], all[static_cast<std::size_t>(pick(rng))]);
    }
    std::sort(all.begin(), all.begin() + kTopk);
    std::copy(all.begin(), all.begin() + kTopk, topk.begin() + t * kTopk);
  }
  return topk;
}

const cache_data& data() {
  static const cache_data d;
  return d;
}

void set_counters(benchmark::State& state, index_t s, index_t k, double row_bytes) {
  const double flops = 2.0 * static_cast<double>(s) * kHeads * static_cast<double>(k) * (kDqk + kDv);
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes/s"] =
      benchmark::Counter(static_cast<double>(s) * static_cast<double>(k) * row_bytes,
                         benchmark::Counter::kIsIterationInvariantRate);
}

template <class Kv>
void run_attention(benchmark::State& state, const Kv& kv, index_t s, const std::vector<std::int32_t>& indices,
                   index_t k, int threads) {
  const auto& d = data();
  std::vector<float> out(static_cast<std::size_t>(s * kHeads * kDv));
  std::vector<float> lse(static_cast<std::size_t>(s * kHeads));
  const dsa::sparse_mla_config cfg{1.0f / 24.0f, kDv};  // 576^-0.5
  for (auto _ : state) {
    dsa::sparse_mla_attention(dsa::cpu_backend{threads}, dsa::make_view(d.q.data(), {s, kHeads, kDqk}), kv,
                              dsa::make_view(indices.data(), {s, k}), dsa::make_view(out.data(), {s, kHeads, kDv}),
                              dsa::make_view(lse.data(), {s, kHeads}), cfg);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
}

// Args: query tokens s (1, 4: decode; 64: prefill), context L, threads.
void BM_sparse_mla_bf16(benchmark::State& state) {
  const auto& d = data();
  const index_t s = state.range(0), context = state.range(1);
  run_attention(state, dsa::make_view(d.kv.data(), {context, kDqk}), s, selection(s, context), kTopk,
                static_cast<int>(state.range(2)));
  set_counters(state, s, kTopk, 2.0 * kDqk);
}

void BM_sparse_mla_fp8(benchmark::State& state) {
  const auto& d = data();
  const index_t s = state.range(0), context = state.range(1);
  run_attention(state, dsa::make_view(d.fp8.data(), {context, dsa::kv_fp8_row_bytes}), s, selection(s, context), kTopk,
                static_cast<int>(state.range(2)));
  set_counters(state, s, kTopk, static_cast<double>(dsa::kv_fp8_row_bytes));
}

#define DSA_SPARSE_MLA_SHAPES                                                                                   \
  ArgNames({"s", "L", "threads"})                                                                              \
      ->Args({1, 32768, 1})                                                                                    \
      ->Args({1, 32768, 2})                                                                                    \
      ->Args({1, 65536, 2})                                                                                    \
      ->Args({1, 131072, 2})                                                                                   \
      ->Args({4, 32768, 2})                                                                                    \
      ->Args({64, 32768, 1})                                                                                   \
      ->Args({64, 32768, 2})
BENCHMARK(BM_sparse_mla_bf16)->DSA_SPARSE_MLA_SHAPES->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_sparse_mla_fp8)->DSA_SPARSE_MLA_SHAPES->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);
#undef DSA_SPARSE_MLA_SHAPES

// Baseline: dense attention of one decode token over the whole context L (k = L), bf16 rows.
// Args: context L, threads.
void BM_dense_mla_bf16_baseline(benchmark::State& state) {
  const auto& d = data();
  const index_t s = 1, n = state.range(0);
  std::vector<std::int32_t> all(static_cast<std::size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  run_attention(state, dsa::make_view(d.kv.data(), {n, kDqk}), s, all, n, static_cast<int>(state.range(1)));
  set_counters(state, s, n, 2.0 * kDqk);
  state.counters["ideal_speedup"] = static_cast<double>(n) / static_cast<double>(kTopk);
}
BENCHMARK(BM_dense_mla_bf16_baseline)
    ->ArgNames({"L", "threads"})
    ->Args({32768, 2})
    ->Args({65536, 2})
    ->Args({131072, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.2);

}  // namespace
