// Lightning indexer scores at DeepSeek-V3.2 shapes (H = 64 heads, d = 128): decode (m = 1) and
// a prefill block (m = 64) against n = 8K..128K cached keys, dense and paged, on 2 threads and
// (for the scaling figure) 1. Baseline: the straightforward scalar triple loop on the same inputs
// (smallest size only: it is slow). FLOP/s counts the q·k products, 2·m·H·n·d, as every indexer
// paper does. Also the fp32 backward of training blocks, against the fp32 forward on the same
// inputs.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "dsa/core/types.hpp"
#include "dsa/cpu/lightning_indexer.hpp"
#include "dsa/ops/lightning_indexer.hpp"

namespace {

using dsa::index_t;
constexpr index_t kHeads = 64, kDim = 128, kMaxKeys = 128 * 1024, kMaxRows = 64;

// Inputs shared by every benchmark (generated once, large enough for the largest case).
struct indexer_data {
  std::vector<dsa::fp8_e4m3> q, k;
  std::vector<float> w, k_scale;
  indexer_data() {
    std::mt19937_64 rng(1234);
    std::normal_distribution<float> act(0.0f, 60.0f);
    std::uniform_real_distribution<float> scale(1e-3f, 4e-3f);
    q.resize(static_cast<std::size_t>(kMaxRows * kHeads * kDim));
    k.resize(static_cast<std::size_t>(kMaxKeys * kDim));
    for (auto& x : q) x = dsa::fp8_e4m3(act(rng));
    for (auto& x : k) x = dsa::fp8_e4m3(act(rng));
    w.resize(static_cast<std::size_t>(kMaxRows * kHeads));
    for (auto& x : w) x = act(rng) * 1e-4f;
    k_scale.resize(static_cast<std::size_t>(kMaxKeys));
    for (auto& x : k_scale) x = scale(rng);
  }
};

const indexer_data& data() {
  static const indexer_data d;
  return d;
}

void set_counters(benchmark::State& state, index_t m, index_t n, index_t heads = kHeads) {
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(heads) * static_cast<double>(n) * kDim;
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["keys/s"] = benchmark::Counter(static_cast<double>(m * n), benchmark::Counter::kIsIterationInvariantRate);
}

// All rows see all n keys (a decode step, or prefill rows deep into a long context).
std::vector<std::int32_t> full_ranges(index_t m, index_t n) {
  std::vector<std::int32_t> r(static_cast<std::size_t>(2 * m), 0);
  for (index_t t = 0; t < m; ++t) r[static_cast<std::size_t>(2 * t + 1)] = static_cast<std::int32_t>(n);
  return r;
}

// Args: query rows m, keys n, threads.
void BM_lightning_indexer_scores(benchmark::State& state) {
  const index_t m = state.range(0), n = state.range(1);
  const dsa::cpu_backend be{static_cast<int>(state.range(2))};
  const auto& in = data();
  const auto ranges = full_ranges(m, n);
  std::vector<float> scores(static_cast<std::size_t>(m * n));
  for (auto _ : state) {
    dsa::lightning_indexer_scores(be, dsa::make_view(in.q.data(), {m, kHeads, kDim}),
                                  dsa::make_view(in.w.data(), {m, kHeads}), dsa::make_view(in.k.data(), {n, kDim}),
                                  dsa::make_view(in.k_scale.data(), {n}), dsa::make_view(ranges.data(), {m, 2}),
                                  dsa::make_view(scores.data(), {m, n}));
    benchmark::DoNotOptimize(scores.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, m, n);
}
BENCHMARK(BM_lightning_indexer_scores)
    ->ArgNames({"m", "n", "threads"})
    ->ArgsProduct({{1, 64}, {8 * 1024, 32 * 1024, 128 * 1024}, {2}})
    ->Args({1, 32 * 1024, 1})
    ->Args({16, 32 * 1024, 2})
    ->Args({64, 8 * 1024, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.2);

// Decode over the paged 132-byte cache, 64-token blocks scattered over the pool, with V3.2's 64
// heads or fewer (the small models of the tests and of bench/compare_llamacpp.sh have 8, where
// decoding the keys weighs 8x more against the dot products).
void BM_lightning_indexer_scores_paged(benchmark::State& state) {
  const index_t m = state.range(0), n = state.range(1), heads = state.range(2), block_size = 64;
  const auto& in = data();
  const index_t blocks = n / block_size;
  std::vector<std::int32_t> table(static_cast<std::size_t>(m * blocks));
  for (index_t t = 0; t < m; ++t)
    for (index_t b = 0; b < blocks; ++b) table[static_cast<std::size_t>(t * blocks + b)] = static_cast<std::int32_t>((b * 37) % blocks);
  std::vector<std::uint8_t> cache(static_cast<std::size_t>(n * 132));
  for (index_t s = 0; s < n; ++s) {
    std::memcpy(cache.data() + s * 132, in.k.data() + s * kDim, kDim);
    std::memcpy(cache.data() + s * 132 + 128, &in.k_scale[static_cast<std::size_t>(s)], 4);
  }
  const auto ranges = full_ranges(m, n);
  std::vector<float> scores(static_cast<std::size_t>(m * n));
  for (auto _ : state) {
    dsa::lightning_indexer_scores_paged(dsa::cpu, dsa::make_view(in.q.data(), {m, heads, kDim}),
                                        dsa::make_view(in.w.data(), {m, heads}), dsa::make_view(cache.data(), {n, 132}),
                                        dsa::make_view(table.data(), {m, blocks}), block_size,
                                        dsa::make_view(ranges.data(), {m, 2}), dsa::make_view(scores.data(), {m, n}));
    benchmark::DoNotOptimize(scores.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, m, n, heads);
}
BENCHMARK(BM_lightning_indexer_scores_paged)
    ->ArgNames({"m", "n", "heads"})
    ->ArgsProduct({{1}, {8 * 1024, 32 * 1024, 128 * 1024}, {kHeads}})
    ->Args({1, 32 * 1024, 8})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.2);

// Baseline: the formula as three nested loops, decoding fp8 on the fly, one thread.
void BM_lightning_indexer_scalar_baseline(benchmark::State& state) {
  const index_t m = state.range(0), n = state.range(1);
  const auto& in = data();
  std::vector<float> scores(static_cast<std::size_t>(m * n));
  for (auto _ : state) {
    for (index_t t = 0; t < m; ++t) {
      for (index_t s = 0; s < n; ++s) {
        float acc = 0.0f;
        for (index_t h = 0; h < kHeads; ++h) {
          float dot = 0.0f;
          const dsa::fp8_e4m3* qr = in.q.data() + (t * kHeads + h) * kDim;
          const dsa::fp8_e4m3* kr = in.k.data() + s * kDim;
          for (index_t i = 0; i < kDim; ++i) dot += qr[i].to_float() * kr[i].to_float();
          acc += in.w[static_cast<std::size_t>(t * kHeads + h)] * (dot < 0.0f ? 0.0f : dot);
        }
        scores[static_cast<std::size_t>(t * n + s)] = acc * in.k_scale[static_cast<std::size_t>(s)];
      }
    }
    benchmark::DoNotOptimize(scores.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, m, n);
}
BENCHMARK(BM_lightning_indexer_scalar_baseline)
    ->ArgNames({"m", "n"})
    ->Args({1, 8 * 1024})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.2);

// fp32 training inputs (the indexer's warm-up trains it on bf16/fp32 activations): q, w, k
// Gaussian, k_scale 1, an upstream gradient on every score.
struct fp32_problem {
  index_t m, n;
  std::vector<float> q, w, k, ks, g;
  std::vector<std::int32_t> ranges;
  fp32_problem(index_t m_, index_t n_)
      : m(m_),
        n(n_),
        q(static_cast<std::size_t>(m * kHeads * kDim)),
        w(static_cast<std::size_t>(m * kHeads)),
        k(static_cast<std::size_t>(n * kDim)),
        ks(static_cast<std::size_t>(n), 1.0f),
        g(static_cast<std::size_t>(m * n)),
        ranges(full_ranges(m, n)) {
    std::mt19937_64 rng(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto* v : {&q, &w, &k, &g})
      for (auto& x : *v) x = nd(rng);
  }
};

// Args: m, n, threads. FLOP/s counts the same 2·m·H·n·d as the forward, so the ratio of the two
// rates below (same inputs, same threads) is the backward's cost in forwards: it recomputes the
// dots twice (once per pass) and adds grad_q and grad_k's multiply-adds where the ReLU is
// active, about three forwards' worth of arithmetic.
void BM_lightning_indexer_backward(benchmark::State& state) {
  const fp32_problem p(state.range(0), state.range(1));
  const dsa::cpu_backend be{static_cast<int>(state.range(2))};
  const index_t m = p.m, n = p.n;
  std::vector<float> gq(p.q.size()), gw(p.w.size()), gk(p.k.size());
  for (auto _ : state) {
    dsa::lightning_indexer_backward(be, dsa::make_view(p.q.data(), {m, kHeads, kDim}),
                                    dsa::make_view(p.w.data(), {m, kHeads}), dsa::make_view(p.k.data(), {n, kDim}),
                                    dsa::make_view(p.ks.data(), {n}), dsa::make_view(p.ranges.data(), {m, 2}),
                                    dsa::make_view(p.g.data(), {m, n}), dsa::make_view(gq.data(), {m, kHeads, kDim}),
                                    dsa::make_view(gw.data(), {m, kHeads}), dsa::make_view(gk.data(), {n, kDim}));
    benchmark::DoNotOptimize(gk.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, m, n);
}

// Baseline for the backward: the fp32 forward on the same inputs and threads.
void BM_lightning_indexer_forward_fp32(benchmark::State& state) {
  const fp32_problem p(state.range(0), state.range(1));
  const dsa::cpu_backend be{static_cast<int>(state.range(2))};
  const index_t m = p.m, n = p.n;
  std::vector<float> scores(static_cast<std::size_t>(m * n));
  for (auto _ : state) {
    dsa::lightning_indexer_scores(be, dsa::make_view(p.q.data(), {m, kHeads, kDim}),
                                  dsa::make_view(p.w.data(), {m, kHeads}), dsa::make_view(p.k.data(), {n, kDim}),
                                  dsa::make_view(p.ks.data(), {n}), dsa::make_view(p.ranges.data(), {m, 2}),
                                  dsa::make_view(scores.data(), {m, n}));
    benchmark::DoNotOptimize(scores.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, m, n);
}

void backward_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "n", "threads"})->ArgsProduct({{16, 64}, {2048, 8192}, {1, 2}});
  b->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);
}
BENCHMARK(BM_lightning_indexer_forward_fp32)->Apply(backward_args);
BENCHMARK(BM_lightning_indexer_backward)->Apply(backward_args);

}  // namespace
