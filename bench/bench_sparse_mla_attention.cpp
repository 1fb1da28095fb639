// Sparse MLA attention at DeepSeek-V3.2's shape: 128 heads, d_qk = 576 (512 latent + 64 rope),
// d_v = 512, top-k = 2048 selected keys per query out of a 32K-token cache, MQA mode.
// Decode (1 and 4 query tokens) and prefill (64 tokens), over bf16 rows and 656-byte FP8 rows.
// Baseline: the same op as dense attention over the whole context (indices = 0..n-1, so
// k = n = 8K or 32K): the ratio of the times is what sparsity buys at that context length.
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
constexpr index_t kContext = 32768;
constexpr index_t kMaxTokens = 64;

struct cache_data {
  std::vector<bf16> q;            // [kMaxTokens, kHeads, kDqk]
  std::vector<bf16> kv;           // [kContext, kDqk]
  std::vector<std::uint8_t> fp8;  // [kContext, 656]: kv packed as the FP8 cache
  std::vector<std::int32_t> topk; // [kMaxTokens, kTopk]: sorted, distinct, as top-k returns them
  cache_data() {
    std::mt19937_64 rng(2025);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    q.resize(static_cast<std::size_t>(kMaxTokens * kHeads * kDqk));
    for (auto& x : q) x = bf16(nd(rng));
    kv.resize(static_cast<std::size_t>(kContext * kDqk));
    for (auto& x : kv) x = bf16(nd(rng));
    fp8.resize(static_cast<std::size_t>(kContext * dsa::kv_fp8_row_bytes));
    for (index_t j = 0; j < kContext; ++j) dsa::kv_fp8_row_encode(kv.data() + j * kDqk, fp8.data() + j * dsa::kv_fp8_row_bytes);
    std::vector<std::int32_t> all(static_cast<std::size_t>(kContext));
    std::iota(all.begin(), all.end(), 0);
    topk.resize(static_cast<std::size_t>(kMaxTokens * kTopk));
    for (index_t t = 0; t < kMaxTokens; ++t) {
      std::shuffle(all.begin(), all.end(), rng);
      std::sort(all.begin(), all.begin() + kTopk);
      std::copy(all.begin(), all.begin() + kTopk, topk.begin() + t * kTopk);
    }
  }
};

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
                   index_t k) {
  const auto& d = data();
  std::vector<float> out(static_cast<std::size_t>(s * kHeads * kDv));
  std::vector<float> lse(static_cast<std::size_t>(s * kHeads));
  const dsa::sparse_mla_config cfg{1.0f / 24.0f, kDv};  // 576^-0.5
  for (auto _ : state) {
    dsa::sparse_mla_attention(dsa::cpu, dsa::make_view(d.q.data(), {s, kHeads, kDqk}), kv,
                              dsa::make_view(indices.data(), {s, k}), dsa::make_view(out.data(), {s, kHeads, kDv}),
                              dsa::make_view(lse.data(), {s, kHeads}), cfg);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
}

// Arg: query tokens s (1, 4: decode; 64: prefill).
void BM_sparse_mla_bf16(benchmark::State& state) {
  const auto& d = data();
  const index_t s = state.range(0);
  run_attention(state, dsa::make_view(d.kv.data(), {kContext, kDqk}), s, d.topk, kTopk);
  set_counters(state, s, kTopk, 2.0 * kDqk);
}
BENCHMARK(BM_sparse_mla_bf16)->ArgName("s")->Arg(1)->Arg(4)->Arg(64)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);

void BM_sparse_mla_fp8(benchmark::State& state) {
  const auto& d = data();
  const index_t s = state.range(0);
  run_attention(state, dsa::make_view(d.fp8.data(), {kContext, dsa::kv_fp8_row_bytes}), s, d.topk, kTopk);
  set_counters(state, s, kTopk, static_cast<double>(dsa::kv_fp8_row_bytes));
}
BENCHMARK(BM_sparse_mla_fp8)->ArgName("s")->Arg(1)->Arg(4)->Arg(64)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);

// Baseline: dense attention over the first n tokens of the cache (k = n), bf16 rows.
// Args: query tokens s, context n.
void BM_dense_mla_bf16_baseline(benchmark::State& state) {
  const auto& d = data();
  const index_t s = state.range(0);
  const index_t n = state.range(1);
  std::vector<std::int32_t> all(static_cast<std::size_t>(s * n));
  for (index_t t = 0; t < s; ++t) std::iota(all.begin() + t * n, all.begin() + (t + 1) * n, 0);
  run_attention(state, dsa::make_view(d.kv.data(), {n, kDqk}), s, all, n);
  set_counters(state, s, n, 2.0 * kDqk);
}
BENCHMARK(BM_dense_mla_bf16_baseline)
    ->ArgNames({"s", "n"})
    ->Args({1, 8192})
    ->Args({1, 32768})
    ->Args({4, 32768})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.2);

}  // namespace
