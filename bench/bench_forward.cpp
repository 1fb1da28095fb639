// The whole reference forward pass (dsa::model::transformer) on a random benchmark-sized
// checkpoint generated in-process by dsa::model::write_random_checkpoint (the generator of
// tools/dsa_make_tiny_model): tokens/s of prefill and of decode.
//
// Model: DeepSeek-V3.2's structure at small width: hidden 512, 4 layers (1 dense), 8 heads,
// kv_lora 512 (V3.2's latent), q_lora 256, 16 experts of 128 (top-4 of 4 groups, top-2 groups)
// + 1 shared, indexer 8 heads x 128 with index_topk 128, vocab 4096, FP8 weights.
//
//   BM_forward_prefill/tokens:T      prefill of T tokens into a fresh sequence
//   BM_forward_decode/context:L      one decoded token per iteration after an L-token prefill,
//                                    index_topk 128: attention reads 128 of the L cached rows
//   BM_forward_decode_dense_baseline the same checkpoint with index_topk >= L: every cached row
//                                    is selected, i.e. MLA decode without sparse attention
// Counters: tokens/s from the MEDIAN iteration (each op of the forward pass waits for its pooled
// workers, so on a shared machine one descheduled worker can stall a whole iteration; the
// median ignores such outliers, the reported mean time does not), and the per-phase share of
// the time (indexer, topk, attention, moe, other) from the transformer's phase_times.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "dsa/model/random_checkpoint.hpp"
#include "dsa/model/sampling.hpp"
#include "dsa/model/transformer.hpp"

namespace {

namespace fs = std::filesystem;
using dsa::index_t;

constexpr index_t kSparseTopk = 128;
constexpr index_t kDecodeContext = 512;
constexpr int kDecodeSteps = 16;

dsa::model::config bench_config() {
  dsa::model::config c = dsa::model::tiny_config();
  c.hidden_size = 512;
  c.num_hidden_layers = 4;
  c.first_k_dense_replace = 1;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 8;
  c.kv_lora_rank = 512;
  c.intermediate_size = 1024;
  c.index_topk = kSparseTopk;
  c.vocab_size = 4096;
  return c;
}

// The checkpoint, written once per process into a temporary directory (removed at exit); a
// second directory shares its weights file and differs only in index_topk (the dense baseline).
struct bench_model {
  fs::path dir = fs::temp_directory_path() / ("dsa_bench_forward_" + std::to_string(::getpid()));
  fs::path sparse_dir = dir / "sparse";
  fs::path dense_dir = dir / "dense";
  bench_model() {
    fs::remove_all(dir);
    dsa::model::write_random_checkpoint(sparse_dir, bench_config(), 1);
    fs::create_directories(dense_dir);
    fs::create_symlink(sparse_dir / "model.safetensors", dense_dir / "model.safetensors");
    dsa::model::config dense = bench_config();
    dense.index_topk = kDecodeContext + kDecodeSteps + 1;
    std::ofstream(dense_dir / "config.json") << dense.to_json().dump(2) << "\n";
  }
  ~bench_model() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

const bench_model& model_files() {
  static const bench_model m;
  return m;
}

std::vector<std::int32_t> prompt(index_t n, index_t vocab) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 7919 + 13) % vocab);
  return ids;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

void phase_counters(benchmark::State& state, const dsa::model::phase_times& t) {
  const double total = t.total() > 0 ? t.total() : 1.0;
  state.counters["indexer_%"] = 100.0 * t.indexer / total;
  state.counters["topk_%"] = 100.0 * t.topk / total;
  state.counters["attention_%"] = 100.0 * t.attention / total;
  state.counters["moe_%"] = 100.0 * t.moe / total;
  state.counters["other_%"] = 100.0 * t.other / total;
}

// Arg: prompt tokens T.
void BM_forward_prefill(benchmark::State& state) {
  auto m = dsa::model::transformer<dsa::cpu_backend>::load(model_files().sparse_dir, dsa::cpu);
  const index_t n = state.range(0);
  const auto ids = prompt(n, m.config().vocab_size);
  m.reset_phase_times();
  std::vector<double> times;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto seq = m.new_sequence(n);
    auto logits = m.forward(seq, ids);
    benchmark::DoNotOptimize(logits.data());
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    state.SetIterationTime(times.back());
  }
  state.counters["tokens/s"] = static_cast<double>(n) / median(times);
  phase_counters(state, m.phase_times());
}
BENCHMARK(BM_forward_prefill)->ArgName("tokens")->Arg(64)->Arg(256)->Iterations(3)->UseManualTime()->Unit(benchmark::kMillisecond);

void decode(benchmark::State& state, const fs::path& dir) {
  auto m = dsa::model::transformer<dsa::cpu_backend>::load(dir, dsa::cpu);
  const index_t context = state.range(0);
  auto seq = m.new_sequence(context + kDecodeSteps + 1);
  dsa::model::forward_options chunked;
  chunked.max_chunk = 128;
  auto logits = m.forward(seq, prompt(context, m.config().vocab_size), chunked);
  m.reset_phase_times();
  std::vector<double> times;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::int32_t next = dsa::model::greedy_token(logits);
    logits = m.forward(seq, std::span<const std::int32_t>(&next, 1));
    benchmark::DoNotOptimize(logits.data());
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    state.SetIterationTime(times.back());
  }
  state.counters["tokens/s"] = 1.0 / median(times);
  state.counters["index_topk"] = static_cast<double>(m.config().index_topk);
  phase_counters(state, m.phase_times());
}

// Arg: context L (tokens already in the caches).
void BM_forward_decode(benchmark::State& state) { decode(state, model_files().sparse_dir); }
BENCHMARK(BM_forward_decode)->ArgName("context")->Arg(kDecodeContext)->Iterations(kDecodeSteps)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_forward_decode_dense_baseline(benchmark::State& state) { decode(state, model_files().dense_dir); }
BENCHMARK(BM_forward_decode_dense_baseline)
    ->ArgName("context")
    ->Arg(kDecodeContext)
    ->Iterations(kDecodeSteps)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
