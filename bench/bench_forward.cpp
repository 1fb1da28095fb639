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
//   BM_forward_tiny_decode           the golden tiny model's sizes (tiny_config: hidden 256,
//                                    3 layers): a few microseconds of arithmetic per op, so this
//                                    measures the per-call overheads (allocations, thread wake-ups)
//   BM_forward_*batch_decode/batch:B B sequences decoded together, one batched forward call per
//                                    step (issue 38): aggregate and per-sequence tokens/s, the
//                                    weights one step reads per second (the routed experts the
//                                    B tokens meet, E (1 - (1 - k/E)^B) per layer); on the golden
//                                    tiny model's sizes and at V3.2's layer geometry
//   BM_forward_v32_*                 DeepSeek-V3.2's layer geometry, when DSA_BENCH_V32_DIR names
//                                    a checkpoint written by dsa_make_tiny_model with the command
//                                    of docs/performance.md (2 layers, 32 experts, 5.96 GB): prefill
//                                    of 512 tokens, decode after it; counters GB/s of weights read
//                                    per decode token (the estimate dsa_run prints)
// Arg fp32: 1 runs the FP8 linears with cpu_backend::fp8_block_dot = fp8_dot::fp32, 0 exact.
// Counters: tokens/s from the MEDIAN iteration (each op of the forward pass waits for its pooled
// workers, so on a shared machine one descheduled worker can stall a whole iteration; the
// median ignores such outliers, the reported mean time does not), and the per-phase share of
// the time (indexer, topk, attention, moe, other) from the transformer's phase_times.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
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
// second directory shares its weights file (a hard link) and differs only in index_topk (the
// dense baseline).
struct bench_model {
  fs::path dir = fs::temp_directory_path() / ("dsa_bench_forward_" + std::to_string(::getpid()));
  fs::path sparse_dir = dir / "sparse";
  fs::path dense_dir = dir / "dense";
  fs::path tiny_dir = dir / "tiny";
  bench_model() {
    fs::remove_all(dir);
    dsa::model::write_random_checkpoint(sparse_dir, bench_config(), 1);
    dsa::model::write_random_checkpoint(tiny_dir, dsa::model::tiny_config(), 1);
    fs::create_directories(dense_dir);
    // A hard link (or a copy): the loader refuses a shard that resolves outside its directory, as
    // a symbolic link to the sparse model's file does.
    std::error_code ec;
    fs::create_hard_link(sparse_dir / "model.safetensors", dense_dir / "model.safetensors", ec);
    if (ec) fs::copy_file(sparse_dir / "model.safetensors", dense_dir / "model.safetensors");
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

// fp32: the block-dot mode; packed: cpu_backend::pack_fp8_weights (the default, 1).
dsa::cpu_backend backend(std::int64_t fp32, std::int64_t packed = 1) {
  dsa::cpu_backend be{};
  be.fp8_block_dot = fp32 != 0 ? dsa::fp8_dot::fp32 : dsa::fp8_dot::exact;
  be.pack_fp8_weights = packed != 0;
  return be;
}

void prefill(benchmark::State& state, const fs::path& dir) {
  auto m = dsa::model::transformer<dsa::cpu_backend>::load(dir, backend(state.range(1)));
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

// Args: prompt tokens T, fp32.
void BM_forward_prefill(benchmark::State& state) { prefill(state, model_files().sparse_dir); }
BENCHMARK(BM_forward_prefill)
    ->ArgNames({"tokens", "fp32"})
    ->ArgsProduct({{64, 256}, {0, 1}})
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Bytes of weights one decode token reads (the estimate of dsa_run: every projection once, the
// absorbed decode's bf16 wkv_b copies, num_experts_per_tok routed experts and the shared ones,
// lm_head).
double decode_weight_bytes(const dsa::model::weights& w) {
  const auto& c = w.config();
  auto lin = [](const dsa::model::linear_weight& l) {
    return l.fp8() ? static_cast<double>(l.q.size()) + 4.0 * static_cast<double>(l.scale.size())
                   : 2.0 * static_cast<double>(l.w.size());
  };
  auto mlp = [&](const dsa::model::mlp_weights& m) { return lin(m.gate_proj) + lin(m.up_proj) + lin(m.down_proj); };
  double b = 2.0 * static_cast<double>(w.lm_head.size());
  for (const auto& l : w.layers) {
    const auto& a = l.attn;
    b += lin(a.q_a_proj) + lin(a.q_b_proj) + lin(a.kv_a_proj_with_mqa) + lin(a.o_proj) + lin(a.indexer.wq_b) +
         lin(a.indexer.wk) + 2.0 * static_cast<double>(a.indexer.weights_proj.size());
    b += 2.0 * static_cast<double>(c.num_attention_heads * c.kv_lora_rank * (c.qk_nope_head_dim + c.v_head_dim));
    if (l.mlp) b += mlp(*l.mlp);
    if (l.moe) {
      b += 2.0 * static_cast<double>(l.moe->gate.size());
      if (!l.moe->experts.empty()) b += mlp(l.moe->experts[0]) * static_cast<double>(c.num_experts_per_tok);
      if (l.moe->shared_experts) b += mlp(*l.moe->shared_experts);
    }
  }
  return b;
}

void decode(benchmark::State& state, const fs::path& dir, bool packed = true) {
  auto m = dsa::model::transformer<dsa::cpu_backend>::load(dir, backend(state.range(1), packed ? 1 : 0));
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
  state.counters["weights_GB/s"] = decode_weight_bytes(m.weights()) / median(times) * 1e-9;
  phase_counters(state, m.phase_times());
}

// Args: context L (tokens already in the caches), fp32.
void BM_forward_decode(benchmark::State& state) { decode(state, model_files().sparse_dir); }
BENCHMARK(BM_forward_decode)
    ->ArgNames({"context", "fp32"})
    ->ArgsProduct({{kDecodeContext}, {0, 1}})
    ->Iterations(kDecodeSteps)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void BM_forward_decode_dense_baseline(benchmark::State& state) { decode(state, model_files().dense_dir); }
BENCHMARK(BM_forward_decode_dense_baseline)
    ->ArgNames({"context", "fp32"})
    ->Args({kDecodeContext, 0})
    ->Iterations(kDecodeSteps)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// One decode step of B sequences in one call, after a batched prefill of `context` tokens each
// (distinct prompts); tokens/s of the whole batch from the median step.
void batch_decode(benchmark::State& state, const fs::path& dir, index_t context) {
  using model_t = dsa::model::transformer<dsa::cpu_backend>;
  auto m = model_t::load(dir, backend(state.range(1)));
  const index_t batch = state.range(0), vocab = m.config().vocab_size;
  const auto steps = static_cast<index_t>(state.max_iterations);
  std::vector<model_t::sequence_type> seqs;
  std::vector<std::vector<std::int32_t>> ids(static_cast<std::size_t>(batch));
  std::vector<model_t::batch_entry> entries(static_cast<std::size_t>(batch));
  for (index_t b = 0; b < batch; ++b) {
    seqs.push_back(m.new_sequence(context + steps + 2));
    ids[static_cast<std::size_t>(b)] = prompt(context, vocab);
    for (auto& id : ids[static_cast<std::size_t>(b)]) id = static_cast<std::int32_t>((id + 31 * b) % vocab);
  }
  for (index_t b = 0; b < batch; ++b) entries[static_cast<std::size_t>(b)] = {&seqs[static_cast<std::size_t>(b)], ids[static_cast<std::size_t>(b)]};
  dsa::model::forward_options chunked;
  chunked.max_chunk = 128;
  auto logits = m.forward(std::span<const model_t::batch_entry>(entries), chunked);
  // Each sequence's next token, then one decode step of the whole batch; seconds.
  auto step = [&] {
    for (index_t b = 0; b < batch; ++b) {
      auto& next = ids[static_cast<std::size_t>(b)];
      next.assign(1, dsa::model::greedy_token(logits[static_cast<std::size_t>(b)]));
      entries[static_cast<std::size_t>(b)] = {&seqs[static_cast<std::size_t>(b)], next};
    }
    const auto t0 = std::chrono::steady_clock::now();
    logits = m.forward(std::span<const model_t::batch_entry>(entries));
    benchmark::DoNotOptimize(logits.data());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // One untimed step first: the first decode step builds the absorbed-decode weights (once per
  // model), which would otherwise weigh on the phase shares.
  step();
  m.reset_phase_times();
  std::vector<double> times;
  for (auto _ : state) {
    times.push_back(step());
    state.SetIterationTime(times.back());
  }
  const auto& c = m.config();
  const double experts = static_cast<double>(c.n_routed_experts), k = static_cast<double>(c.num_experts_per_tok);
  const double met = experts > 0 ? experts * (1.0 - std::pow(1.0 - k / experts, static_cast<double>(batch))) : 0.0;
  // decode_weight_bytes counts k experts per MoE layer; a step of B tokens reads `met` of them.
  double bytes = decode_weight_bytes(m.weights());
  for (const auto& l : m.weights().layers) {
    if (l.moe && !l.moe->experts.empty()) {
      const auto& e = l.moe->experts[0];
      auto lin = [](const dsa::model::linear_weight& w) {
        return w.fp8() ? static_cast<double>(w.q.size()) + 4.0 * static_cast<double>(w.scale.size())
                       : 2.0 * static_cast<double>(w.w.size());
      };
      bytes += (met - k) * (lin(e.gate_proj) + lin(e.up_proj) + lin(e.down_proj));
    }
  }
  state.counters["tokens/s"] = static_cast<double>(batch) / median(times);
  state.counters["tokens/s/seq"] = 1.0 / median(times);
  state.counters["weights_GB/s"] = bytes / median(times) * 1e-9;
  phase_counters(state, m.phase_times());
}

// Args: batch B, fp32.
void BM_forward_tiny_batch_decode(benchmark::State& state) { batch_decode(state, model_files().tiny_dir, 16); }
BENCHMARK(BM_forward_tiny_batch_decode)
    ->ArgNames({"batch", "fp32"})
    ->ArgsProduct({{1, 2, 4, 8, 16, 32}, {0, 1}})
    ->Iterations(16)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// The golden tiny model's sizes, 64 decode steps after a 16-token prompt (the tiny-model
// comparison): per-call overheads dominate at this width.
void BM_forward_tiny_decode(benchmark::State& state) {
  auto m = dsa::model::transformer<dsa::cpu_backend>::load(model_files().tiny_dir, backend(state.range(0), state.range(1)));
  auto seq = m.new_sequence(16 + 64 * 16 + 1);
  auto logits = m.forward(seq, prompt(16, m.config().vocab_size));
  m.reset_phase_times();
  std::vector<double> times;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 64; ++i) {
      const std::int32_t next = dsa::model::greedy_token(logits);
      logits = m.forward(seq, std::span<const std::int32_t>(&next, 1));
    }
    benchmark::DoNotOptimize(logits.data());
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    state.SetIterationTime(times.back());
  }
  state.counters["tokens/s"] = 64.0 / median(times);
  phase_counters(state, m.phase_times());
}
BENCHMARK(BM_forward_tiny_decode)->ArgNames({"fp32", "packed"})->ArgsProduct({{0, 1}, {0, 1}})->Iterations(8)->UseManualTime()->Unit(benchmark::kMillisecond);

// DeepSeek-V3.2's layer geometry from DSA_BENCH_V32_DIR (skipped without it).
const char* v32_dir() { return std::getenv("DSA_BENCH_V32_DIR"); }

void BM_forward_v32_prefill(benchmark::State& state) {
  if (v32_dir() == nullptr) {
    state.SkipWithError("DSA_BENCH_V32_DIR is not set (a checkpoint written with the command of docs/performance.md)");
    return;
  }
  prefill(state, v32_dir());
}
BENCHMARK(BM_forward_v32_prefill)
    ->ArgNames({"tokens", "fp32"})
    ->ArgsProduct({{512}, {0, 1}})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void BM_forward_v32_decode(benchmark::State& state) {
  if (v32_dir() == nullptr) {
    state.SkipWithError("DSA_BENCH_V32_DIR is not set (a checkpoint written with the command of docs/performance.md)");
    return;
  }
  decode(state, v32_dir(), state.range(2) != 0);
}
void BM_forward_v32_batch_decode(benchmark::State& state) {
  if (v32_dir() == nullptr) {
    state.SkipWithError("DSA_BENCH_V32_DIR is not set (a checkpoint written with the command of docs/performance.md)");
    return;
  }
  batch_decode(state, v32_dir(), 128);
}
// Args: batch B, fp32. A 128-token context per sequence (the batch's prefill is B x 128 tokens).
BENCHMARK(BM_forward_v32_batch_decode)
    ->ArgNames({"batch", "fp32"})
    ->ArgsProduct({{1, 2, 4, 8, 16, 32}, {1}})
    ->Iterations(4)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Args: context, fp32, packed (cpu_backend::pack_fp8_weights).
BENCHMARK(BM_forward_v32_decode)
    ->ArgNames({"context", "fp32", "packed"})
    ->ArgsProduct({{512}, {0, 1}, {0, 1}})
    ->Iterations(6)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
