// MoE routing (noaux_tc) for a 4096-token prefill with DeepSeek-V3.2's gate: 256 experts in 8
// groups, top-4 groups, top-8 experts, sigmoid scores with a correction bias, scale 2.5.
// Baseline: the routing written the naive way, with full sorts (of each group, of the groups,
// and of all 256 biased scores) per token, single-threaded like BM_moe_route/threads:1.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "dsa/cpu/moe_routing.hpp"
#include "dsa/ops/moe_routing.hpp"

namespace {

constexpr int kTokens = 4096;
constexpr int kExperts = 256;
constexpr int kGroups = 8;
constexpr int kTopkGroups = 4;
constexpr int kTopK = 8;
constexpr float kScale = 2.5f;

struct problem {
  std::vector<float> logits, bias;
  problem() : logits(static_cast<std::size_t>(kTokens) * kExperts), bias(kExperts) {
    std::mt19937_64 rng(7);
    std::normal_distribution<float> n(0.0f, 1.5f);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    for (auto& x : logits) x = n(rng);
    for (auto& x : bias) x = u(rng);
  }
};

const problem& data() {
  static const problem p;
  return p;
}

dsa::moe_routing_config config() {
  dsa::moe_routing_config cfg;
  cfg.top_k = kTopK;
  cfg.n_group = kGroups;
  cfg.topk_group = kTopkGroups;
  cfg.scoring = dsa::moe_scoring::sigmoid;
  cfg.norm_topk_prob = true;
  cfg.routed_scaling_factor = kScale;
  return cfg;
}

// Bytes the op must move: the logits in, the ids and weights out (the bias stays in cache).
double bytes_per_call() {
  return static_cast<double>(kTokens) * (kExperts * sizeof(float) + kTopK * (sizeof(std::int32_t) + sizeof(float)));
}

void set_counters(benchmark::State& state) {
  state.counters["tokens/s"] = benchmark::Counter(kTokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes/s"] = benchmark::Counter(bytes_per_call(), benchmark::Counter::kIsIterationInvariantRate);
}

void naive_full_sort_route(const float* logits, const float* bias, std::int32_t* ids, float* weights) {
  constexpr int gsize = kExperts / kGroups;
  for (int t = 0; t < kTokens; ++t) {
    const float* x = logits + static_cast<std::size_t>(t) * kExperts;
    std::vector<float> s(kExperts), b(kExperts);
    for (int e = 0; e < kExperts; ++e) {
      s[e] = 1.0f / (1.0f + std::exp(-x[e]));
      b[e] = s[e] + bias[e];
    }
    auto better = [&](int i, int j) { return b[i] != b[j] ? b[i] > b[j] : i < j; };
    std::vector<float> gscore(kGroups);
    for (int g = 0; g < kGroups; ++g) {
      std::vector<int> m(gsize);
      std::iota(m.begin(), m.end(), g * gsize);
      std::sort(m.begin(), m.end(), better);
      gscore[g] = b[m[0]] + b[m[1]];
    }
    std::vector<int> order(kGroups);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int i, int j) { return gscore[i] != gscore[j] ? gscore[i] > gscore[j] : i < j; });
    std::vector<float> masked(b);
    for (int r = kTopkGroups; r < kGroups; ++r) {
      std::fill_n(masked.begin() + order[r] * gsize, gsize, -INFINITY);
    }
    std::vector<int> all(kExperts);
    std::iota(all.begin(), all.end(), 0);
    std::sort(all.begin(), all.end(), [&](int i, int j) { return masked[i] != masked[j] ? masked[i] > masked[j] : i < j; });
    std::sort(all.begin(), all.begin() + kTopK);
    float sum = 0.0f;
    for (int i = 0; i < kTopK; ++i) sum += s[all[i]];
    for (int i = 0; i < kTopK; ++i) {
      ids[t * kTopK + i] = all[i];
      weights[t * kTopK + i] = s[all[i]] / sum * kScale;
    }
  }
}

// Arg: threads (0 = every hardware thread).
void BM_moe_route(benchmark::State& state) {
  const auto& p = data();
  std::vector<std::int32_t> ids(static_cast<std::size_t>(kTokens) * kTopK);
  std::vector<float> w(ids.size());
  const dsa::cpu_backend be{static_cast<int>(state.range(0))};
  for (auto _ : state) {
    dsa::moe_route(be, dsa::make_view(p.logits.data(), {kTokens, kExperts}), dsa::make_view(p.bias.data(), {kExperts}),
                   dsa::make_view(ids.data(), {kTokens, kTopK}), dsa::make_view(w.data(), {kTokens, kTopK}), config());
    benchmark::DoNotOptimize(ids.data());
    benchmark::DoNotOptimize(w.data());
    benchmark::ClobberMemory();
  }
  set_counters(state);
}
BENCHMARK(BM_moe_route)->ArgName("threads")->Arg(1)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);

void BM_moe_route_full_sort_baseline(benchmark::State& state) {
  const auto& p = data();
  std::vector<std::int32_t> ids(static_cast<std::size_t>(kTokens) * kTopK), want(ids.size());
  std::vector<float> w(ids.size()), want_w(ids.size());
  // The baseline must route like the op, or the comparison is meaningless.
  dsa::moe_route(dsa::cpu, dsa::make_view(p.logits.data(), {kTokens, kExperts}), dsa::make_view(p.bias.data(), {kExperts}),
                 dsa::make_view(want.data(), {kTokens, kTopK}), dsa::make_view(want_w.data(), {kTokens, kTopK}), config());
  naive_full_sort_route(p.logits.data(), p.bias.data(), ids.data(), w.data());
  if (ids != want) {
    state.SkipWithError("the full-sort baseline routes differently from dsa::moe_route");
    return;
  }
  for (auto _ : state) {
    naive_full_sort_route(p.logits.data(), p.bias.data(), ids.data(), w.data());
    benchmark::DoNotOptimize(ids.data());
    benchmark::DoNotOptimize(w.data());
    benchmark::ClobberMemory();
  }
  set_counters(state);
}
BENCHMARK(BM_moe_route_full_sort_baseline)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);

}  // namespace
