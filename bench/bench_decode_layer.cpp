// One decoded token through one layer's sparse attention at DeepSeek-V3.2's attention sizes, for
// contexts L = 4K ... 128K, against dense attention over the same cache in the same iteration.
//
//   sparse  = indexer scores of the token over the L cached indexer keys (paged 132-byte FP8
//             cache, 64 heads x 128) + top-2048 + sparse MLA attention (128 heads, d_qk 576,
//             d_v 512) over the 2048 selected rows of the 656-byte FP8 kv cache
//   dense   = the same sparse_mla_attention op with indices 0..L-1: MLA decode without DSA
//
// The iteration time reported is the sparse path's (manual timing); counters:
//   tokens/s        decoded tokens per second through the sparse path (1 / sparse time)
//   dense_tokens/s  the same through the dense baseline
//   speedup         dense time / sparse time, measured in the same iterations
//   ideal           L / 2048: the speedup if time were proportional to the attended rows
//   indexer_ms, topk_ms, attention_ms, dense_ms: mean per-token time of each part
// The projections (wq_b, wkv_b absorption, wo) do not depend on L and are left out: this is the
// part of a layer whose cost grows with the context. Iteration counts are fixed and small so
// the whole file runs in well under a minute on two cores; see docs/performance.md.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "dsa/cpu/lightning_indexer.hpp"
#include "dsa/cpu/sparse_mla_attention.hpp"
#include "dsa/cpu/topk.hpp"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/ops/lightning_indexer.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"
#include "dsa/ops/topk.hpp"

namespace {

using dsa::bf16;
using dsa::fp8_e4m3;
using dsa::index_t;

constexpr index_t kHeads = 128;      // MLA query heads
constexpr index_t kDqk = 576;        // 512 latent + 64 rope
constexpr index_t kDv = 512;         // latent value width
constexpr index_t kIndexHeads = 64;  // indexer heads
constexpr index_t kIndexDim = 128;   // indexer head dim
constexpr index_t kTopk = 2048;      // index_topk
constexpr index_t kBlock = 64;       // page size of the indexer cache (identity block table)
constexpr index_t kMaxContext = 128 * 1024;

// Random caches for the longest context; shorter contexts use their first L rows. FP8 codes are
// drawn directly, with power-of-two scales as the cache's ue8m0 groups.
struct decode_data {
  std::vector<std::uint8_t> kv;       // [kMaxContext, 656]
  std::vector<std::uint8_t> index_k;  // [kMaxContext, 132]
  std::vector<std::int32_t> table;    // [1, kMaxContext / kBlock] identity page table
  std::vector<std::int32_t> all;      // [1, kMaxContext] = 0..kMaxContext-1 (the dense baseline)
  std::vector<bf16> q;                // [1, kHeads, kDqk]
  std::vector<fp8_e4m3> index_q;      // [1, kIndexHeads, kIndexDim]
  std::vector<float> index_w;         // [1, kIndexHeads]

  decode_data() {
    std::mt19937_64 rng(2048);
    auto code = [&] {
      // Sign, exponent field 4..8 and a random mantissa: |x| in [1/8, 3.75], never the NaN code,
      // so that softmax over the random logits spreads its weight over many rows.
      const std::uint64_t r = rng();
      const unsigned e = 4u + static_cast<unsigned>(r % 5u);
      return static_cast<std::uint8_t>(((r >> 8) & 0x80u) | (e << 3) | ((r >> 16) & 0x7u));
    };
    auto unit = [&] { return static_cast<float>(static_cast<double>(rng() >> 11) * 0x1.0p-53 * 2.0 - 1.0); };
    kv.resize(static_cast<std::size_t>(kMaxContext * dsa::kv_fp8_row_bytes));
    index_k.resize(static_cast<std::size_t>(kMaxContext * dsa::indexer_cache_row_bytes));
    for (index_t j = 0; j < kMaxContext; ++j) {
      std::uint8_t* row = kv.data() + j * dsa::kv_fp8_row_bytes;
      for (index_t i = 0; i < dsa::kv_latent_dim; ++i) row[i] = code();
      const float scale = 0.0625f;
      for (index_t g = 0; g < dsa::kv_fp8_num_scales; ++g) std::memcpy(row + dsa::kv_fp8_scale_offset + 4 * g, &scale, 4);
      for (index_t i = 0; i < dsa::kv_rope_dim; ++i) {
        const bf16 r(unit());
        std::memcpy(row + dsa::kv_fp8_rope_offset + 2 * i, &r, 2);
      }
      std::uint8_t* krow = index_k.data() + j * dsa::indexer_cache_row_bytes;
      for (index_t i = 0; i < kIndexDim; ++i) krow[i] = code();
      const float kscale = 0.03125f;
      std::memcpy(krow + dsa::indexer_cache_scale_offset, &kscale, 4);
    }
    table.resize(static_cast<std::size_t>(kMaxContext / kBlock));
    std::iota(table.begin(), table.end(), 0);
    all.resize(static_cast<std::size_t>(kMaxContext));
    std::iota(all.begin(), all.end(), 0);
    q.resize(static_cast<std::size_t>(kHeads * kDqk));
    for (auto& x : q) x = bf16(unit());
    index_q.resize(static_cast<std::size_t>(kIndexHeads * kIndexDim));
    for (auto& x : index_q) x = fp8_e4m3::from_bits(code());
    index_w.resize(static_cast<std::size_t>(kIndexHeads));
    for (auto& x : index_w) x = unit() * 0.125f;  // H^-0.5 folded in, as the model does
  }
};

const decode_data& data() {
  static const decode_data d;
  return d;
}

using seconds = std::chrono::duration<double>;

// Arg: context length L.
void BM_decode_layer(benchmark::State& state) {
  const auto& d = data();
  const index_t L = state.range(0);
  const dsa::cpu_backend be = dsa::cpu;
  const std::int32_t range[2] = {0, static_cast<std::int32_t>(L)};
  const auto ranges = dsa::make_view(range, {index_t{1}, index_t{2}});
  const auto q = dsa::make_view(d.q.data(), {index_t{1}, kHeads, kDqk});
  const auto kv = dsa::make_view(d.kv.data(), {L, dsa::kv_fp8_row_bytes});
  const dsa::sparse_mla_config cfg{1.0f / 24.0f, kDv};  // 576^-0.5
  std::vector<float> scores(static_cast<std::size_t>(L));
  std::vector<std::int32_t> topk(static_cast<std::size_t>(kTopk));
  std::vector<float> out(static_cast<std::size_t>(kHeads * kDv)), dense_out(out.size());
  std::vector<float> lse(static_cast<std::size_t>(kHeads)), dense_lse(lse.size());
  const auto scores_v = dsa::make_view(scores.data(), {index_t{1}, L});

  double t_index = 0, t_topk = 0, t_attn = 0, t_dense = 0;
  auto one_token = [&](bool timed) {
    const auto t0 = std::chrono::steady_clock::now();
    dsa::lightning_indexer_scores_paged(be, dsa::make_view(d.index_q.data(), {index_t{1}, kIndexHeads, kIndexDim}),
                                        dsa::make_view(d.index_w.data(), {index_t{1}, kIndexHeads}),
                                        dsa::make_view(d.index_k.data(), {L, dsa::indexer_cache_row_bytes}),
                                        dsa::make_view(d.table.data(), {index_t{1}, L / kBlock}), kBlock, ranges, scores_v);
    const auto t1 = std::chrono::steady_clock::now();
    dsa::topk_indices(be, scores_v, ranges, kTopk, dsa::make_view(topk.data(), {index_t{1}, kTopk}));
    const auto t2 = std::chrono::steady_clock::now();
    dsa::sparse_mla_attention(be, q, kv, dsa::make_view(topk.data(), {index_t{1}, kTopk}),
                              dsa::make_view(out.data(), {index_t{1}, kHeads, kDv}),
                              dsa::make_view(lse.data(), {index_t{1}, kHeads}), cfg);
    const auto t3 = std::chrono::steady_clock::now();
    dsa::sparse_mla_attention(be, q, kv, dsa::make_view(d.all.data(), {index_t{1}, L}),
                              dsa::make_view(dense_out.data(), {index_t{1}, kHeads, kDv}),
                              dsa::make_view(dense_lse.data(), {index_t{1}, kHeads}), cfg);
    const auto t4 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(dense_out.data());
    benchmark::ClobberMemory();
    if (!timed) return 0.0;
    t_index += seconds(t1 - t0).count();
    t_topk += seconds(t2 - t1).count();
    t_attn += seconds(t3 - t2).count();
    t_dense += seconds(t4 - t3).count();
    return seconds(t3 - t0).count();
  };

  one_token(false);  // first touch of the outputs and of this context's cache pages
  for (auto _ : state) state.SetIterationTime(one_token(true));

  const double n = static_cast<double>(state.iterations());
  const double sparse = (t_index + t_topk + t_attn) / n;
  const double dense = t_dense / n;
  state.counters["tokens/s"] = 1.0 / sparse;
  state.counters["dense_tokens/s"] = 1.0 / dense;
  state.counters["speedup"] = dense / sparse;
  state.counters["ideal"] = static_cast<double>(L) / static_cast<double>(kTopk);
  state.counters["indexer_ms"] = 1e3 * t_index / n;
  state.counters["topk_ms"] = 1e3 * t_topk / n;
  state.counters["attention_ms"] = 1e3 * t_attn / n;
  state.counters["sparse_ms"] = 1e3 * sparse;
  state.counters["dense_ms"] = 1e3 * dense;
}

// Iterations shrink with L: the dense baseline at 128K reads 86 MB of cache and does ~37 GFLOP
// per token.
BENCHMARK(BM_decode_layer)->ArgName("L")->Arg(4096)->Iterations(8)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_decode_layer)->ArgName("L")->Arg(8192)->Iterations(6)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_decode_layer)->ArgName("L")->Arg(16384)->Iterations(4)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_decode_layer)->ArgName("L")->Arg(32768)->Iterations(3)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_decode_layer)->ArgName("L")->Arg(65536)->Iterations(2)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_decode_layer)->ArgName("L")->Arg(131072)->Iterations(2)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
