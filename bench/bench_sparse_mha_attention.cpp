// sparse_mha_attention at DeepSeek-V3.2's shapes (128 heads), the two ways the forward pass calls
// it, on 1 and 2 threads:
//   - absorbed MQA decode (shared keys): one token, q [1, 128, 512 + 64] against the latent cache
//     rows [L, 576] broadcast over heads (k_nope = v = the 512 latent values), top-2048 of L = 32K,
//     rounding bf16_split (the reference's decode);
//   - MHA prefill (per-head keys): 64 tokens, q [64, 128, 128 + 64] against the up-projected
//     keys and values [n, 128, 128 + 128] and the shared rope keys [n, 64], rounding bf16, either
//     causal (the last 64 tokens of a 512-token prompt, each selecting every position up to its
//     own: k = 512, -1 padded) or sparse (top-2048 of n = 4096 each, spread over the whole cache:
//     the per-head path's worst case, where the 64 tokens' selections overlap least).
// Baseline: the scalar sequence of numerics/sparse_mha_attention.hpp (the plain loop of
// tests/support/sparse_mha_sequence.hpp, which both paths reproduce bit for bit) on the same
// problem, single-threaded.
// FLOP/s counts 2·s·h·(used entries)·(d_qk + d_v).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "dsa/cpu/sparse_mha_attention.hpp"
#include "dsa/ops/sparse_mha_attention.hpp"
#include "support/sparse_mha_sequence.hpp"

namespace {

using dsa::bf16;
using dsa::index_t;

constexpr index_t kHeads = 128;
constexpr index_t kLatent = 512, kRope = 64, kNope = 128, kV = 128;
constexpr index_t kTopk = 2048;
constexpr float kScale = 0.1352338f;  // (128 + 64)^-0.5 · mscale^2 of V3.2's YaRN

std::vector<bf16> uniform_values(index_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ud(-1.7f, 1.7f);
  std::vector<bf16> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = bf16(ud(rng));
  return v;
}

// [s, k] sorted, distinct indices into [0, context): a uniform sample per row, as top-k of
// unrelated scores would give.
std::vector<std::int32_t> spread_selection(index_t s, index_t k, index_t context) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(context) * 131 + static_cast<std::uint64_t>(s));
  std::vector<std::int32_t> all(static_cast<std::size_t>(context));
  std::iota(all.begin(), all.end(), 0);
  std::vector<std::int32_t> sel(static_cast<std::size_t>(s * k));
  for (index_t t = 0; t < s; ++t) {
    for (index_t i = 0; i < k; ++i) {
      std::uniform_int_distribution<index_t> pick(i, context - 1);
      std::swap(all[static_cast<std::size_t>(i)], all[static_cast<std::size_t>(pick(rng))]);
    }
    std::sort(all.begin(), all.begin() + k);
    std::copy(all.begin(), all.begin() + k, sel.begin() + t * k);
  }
  return sel;
}

void set_flops(benchmark::State& state, index_t s, index_t used_entries, index_t d_qk, index_t d_v) {
  const double flops = 2.0 * kHeads * static_cast<double>(used_entries) * static_cast<double>(d_qk + d_v);
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens"] = static_cast<double>(s);
}

// ---- absorbed decode --------------------------------------------------------------------------

struct decode_problem {
  static constexpr index_t context = 32768;
  static constexpr index_t row = kLatent + kRope;
  std::vector<bf16> q = uniform_values(kHeads * row, 1);
  std::vector<bf16> cache = uniform_values(context * row, 2);
  std::vector<std::int32_t> idx = spread_selection(1, kTopk, context);
  std::vector<bf16> out = std::vector<bf16>(static_cast<std::size_t>(kHeads * kLatent));

  void run(bool scalar, int threads) {
    const dsa::host_view<const bf16, 3> latent(cache.data(), {context, kHeads, kLatent}, {row, 0, 1});
    const dsa::host_view<const bf16, 2> rope(cache.data() + kLatent, {context, kRope}, {row, 1});
    const auto qv = dsa::make_view(static_cast<const bf16*>(q.data()), {1, kHeads, row});
    const auto iv = dsa::make_view(static_cast<const std::int32_t*>(idx.data()), {1, kTopk});
    const auto ov = dsa::make_view(out.data(), {1, kHeads, kLatent});
    const dsa::sparse_mha_config cfg{kScale, dsa::attention_rounding::bf16_split};
    if (scalar) {
      dsa_test::sparse_mha_sequence(qv, latent, rope, latent, iv, ov, cfg, {});
    } else {
      dsa::sparse_mha_attention(dsa::cpu_backend{threads}, qv, latent, rope, latent, iv, ov, cfg);
    }
  }
};

decode_problem& decode() {
  static decode_problem p;
  return p;
}

// Arg: threads (0: the scalar baseline).
void BM_sparse_mha_absorbed_decode(benchmark::State& state) {
  auto& p = decode();
  const int threads = static_cast<int>(state.range(0));
  for (auto _ : state) {
    p.run(threads == 0, threads);
    benchmark::DoNotOptimize(p.out.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, 1, kTopk, kLatent + kRope, kLatent);
}
BENCHMARK(BM_sparse_mha_absorbed_decode)
    ->ArgNames({"threads"})
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.2);

// ---- MHA prefill ------------------------------------------------------------------------------

struct prefill_problem {
  static constexpr index_t n = 4096, s = 64, d_qk = kNope + kRope, per_head = kNope + kV;
  std::vector<bf16> q = uniform_values(s * kHeads * d_qk, 3);
  std::vector<bf16> kv = uniform_values(n * kHeads * per_head, 4);  // the wkv_b output [n, h, nope + v]
  std::vector<bf16> k_rope = uniform_values(n * kRope, 5);
  std::vector<std::int32_t> causal, sparse = spread_selection(s, kTopk, n);
  std::vector<bf16> out = std::vector<bf16>(static_cast<std::size_t>(s * kHeads * kV));
  index_t causal_used = 0;

  prefill_problem() {
    // The last 64 tokens of a 512-token prompt: token t (position 448 + t) selects 0..448 + t.
    constexpr index_t prompt = 512, k = prompt;
    causal.assign(static_cast<std::size_t>(s * k), -1);
    for (index_t t = 0; t < s; ++t) {
      const index_t pos = prompt - s + t;
      for (index_t j = 0; j <= pos; ++j) causal[static_cast<std::size_t>(t * k + j)] = static_cast<std::int32_t>(pos - j);
      causal_used += pos + 1;
    }
  }

  void run(bool use_causal, bool scalar, int threads) {
    const std::vector<std::int32_t>& idx = use_causal ? causal : sparse;
    const index_t k = static_cast<index_t>(idx.size()) / s;
    const dsa::host_view<const bf16, 3> k_nope(kv.data(), {n, kHeads, kNope}, {kHeads * per_head, per_head, 1});
    const dsa::host_view<const bf16, 3> v(kv.data() + kNope, {n, kHeads, kV}, {kHeads * per_head, per_head, 1});
    const auto qv = dsa::make_view(static_cast<const bf16*>(q.data()), {s, kHeads, d_qk});
    const auto rv = dsa::make_view(static_cast<const bf16*>(k_rope.data()), {n, kRope});
    const auto iv = dsa::make_view(idx.data(), {s, k});
    const auto ov = dsa::make_view(out.data(), {s, kHeads, kV});
    const dsa::sparse_mha_config cfg{kScale, dsa::attention_rounding::bf16};
    if (scalar) {
      dsa_test::sparse_mha_sequence(qv, k_nope, rv, v, iv, ov, cfg, {});
    } else {
      dsa::sparse_mha_attention(dsa::cpu_backend{threads}, qv, k_nope, rv, v, iv, ov, cfg);
    }
  }
};

prefill_problem& prefill() {
  static prefill_problem p;
  return p;
}

// Args: causal (1) or sparse (0) selections, threads (0: the scalar baseline).
void BM_sparse_mha_prefill(benchmark::State& state) {
  auto& p = prefill();
  const bool causal = state.range(0) != 0;
  const int threads = static_cast<int>(state.range(1));
  for (auto _ : state) {
    p.run(causal, threads == 0, threads);
    benchmark::DoNotOptimize(p.out.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, prefill_problem::s, causal ? p.causal_used : prefill_problem::s * kTopk, prefill_problem::d_qk, kV);
}
BENCHMARK(BM_sparse_mha_prefill)
    ->ArgNames({"causal", "threads"})
    ->Args({1, 0})
    ->Args({1, 1})
    ->Args({1, 2})
    ->Args({0, 0})
    ->Args({0, 1})
    ->Args({0, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.2);

}  // namespace
