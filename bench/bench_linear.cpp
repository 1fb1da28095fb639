// Dense linear layers at DeepSeek-V3.2 sizes, against this machine's limits measured in the same
// run (issue 13):
//  - fp8_linear decode (t = 1 and 4 rows): a GEMV, judged by the weight bytes it streams per
//    second against the memory bandwidth. The weights come from DRAM: each iteration takes the
//    next of a pool of copies larger than twice the last-level cache (a decode step's layers
//    evict each other), for the shapes of a routed expert (7168 -> 2048), the dense FFN's up
//    projection (7168 -> 18432), its down projection (18432 -> 7168) and o_proj (16384 -> 7168);
//    and, beside them, the expert shape with its weights in L3 and the GEMV's two halves apart
//    (BM_fp8_gemv_parts): what the arithmetic alone allows;
//  - fp8_linear prefill (t = 64 and 256): a GEMM, judged by FLOP/s against the fp32 FMA peak;
//  - both block-dot modes (cpu_backend::fp8_block_dot: exact, fp32), 1 and 2 threads;
//  - bf16 linear decode (lm_head-like 7168 -> 32768, bf16 weights from DRAM) and prefill;
//  - baselines beside them: an Eigen fp32 GEMM/GEMV of the same shape (the work a
//    dequantize-then-sgemm implementation does, with 4x the weight bytes), and the probes.
// Probes (measured once per thread count, the first time a benchmark needs them, and also run
// as benchmarks of their own): fp32 FMA peak with 8-wide vectors (bench_machine's probe) and
// with the widest vectors of the target (16-wide with AVX-512, where two FMA units may double
// it), and the copy, triad and read-only bandwidths over arrays 4x the last-level cache.
// Counters: GB/s (weight bytes, decode) or GFLOP/s (2 t in out, prefill), and of_bw (GB/s over
// the better of the copy and triad probes at the same thread count, as docs/performance.md
// counts "of bandwidth"), of_read (over the read probe), of_peak8 and of_peak16 (FLOP/s over
// the 8-wide and the widest FMA probes).
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/cpu/linear.hpp"
#include "dsa/ops/linear.hpp"

namespace {

using dsa::bf16;
using dsa::fp8_e4m3;
using dsa::index_t;

// ---- probes ---------------------------------------------------------------------------------------

constexpr std::size_t kProbeBytes = std::size_t{512} << 20;  // per array: 2x a 256 MB last-level cache

typedef float v8f __attribute__((vector_size(32)));
#if DSA_CPU_HAS_AVX512
typedef float vwide __attribute__((vector_size(64)));
#else
typedef float vwide __attribute__((vector_size(32)));
#endif

template <class V>
double fma_probe_once() {
  // Enough independent chains to hide the FMA latency (4 cycles x 2 ports), and few enough that
  // they and the two operands stay in registers: 16 chains of 16 ymm spilled in an AVX2 build
  // and read 88 against 142 GFLOP/s per Zen 5 core (bench_machine's 12-chain probe: 142).
  constexpr int chains = DSA_CPU_HAS_AVX512 ? 16 : 12;
  constexpr long iters = 1 << 18;
  V acc[chains];
  for (int c = 0; c < chains; ++c) acc[c] = V{} + 1.0f + 0.001f * static_cast<float>(c);
  const V a = V{} + 0.999999f, b = V{} + 1e-7f;
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < iters; ++i) {
    for (int c = 0; c < chains; ++c) acc[c] = acc[c] * a + b;
  }
  for (int c = 0; c < chains; ++c) benchmark::DoNotOptimize(acc[c]);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * (sizeof(V) / sizeof(float)) * chains * iters / s;
}

// The best of `reps` runs of f on each of `threads` threads at once (std::threads, so that the
// probe does not depend on the pool), summed over the threads.
template <class F>
double per_thread_best(int threads, int reps, F f) {
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<double> v(static_cast<std::size_t>(threads));
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) ts.emplace_back([&, t] { v[static_cast<std::size_t>(t)] = f(t); });
    for (auto& t : ts) t.join();
    double sum = 0;
    for (double x : v) sum += x;
    best = std::max(best, sum);
  }
  return best;
}

struct bandwidth_arrays {
  std::vector<std::vector<float>> a, b, c;
  explicit bandwidth_arrays(int threads) {
    const std::size_t n = kProbeBytes / sizeof(float) / static_cast<std::size_t>(threads);
    for (int t = 0; t < threads; ++t) {
      a.emplace_back(n, 1.0f);
      b.emplace_back(n, 2.0f);
      c.emplace_back(n, 3.0f);
    }
  }
};

struct probes {
  double peak8 = 0, peak_wide = 0, copy = 0, triad = 0, read = 0;
};

probes measure_probes(int threads) {
  probes p;
  p.peak8 = per_thread_best(threads, 3, [](int) { return fma_probe_once<v8f>(); });
  p.peak_wide = per_thread_best(threads, 3, [](int) { return fma_probe_once<vwide>(); });
  bandwidth_arrays arr(threads);
  const std::size_t n = arr.a[0].size();
  p.copy = per_thread_best(threads, 3, [&](int t) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(arr.b[static_cast<std::size_t>(t)].data(), arr.a[static_cast<std::size_t>(t)].data(), n * sizeof(float));
    benchmark::ClobberMemory();
    return 2.0 * n * sizeof(float) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  p.triad = per_thread_best(threads, 3, [&](int t) {
    float* __restrict__ pa = arr.a[static_cast<std::size_t>(t)].data();
    const float* __restrict__ pb = arr.b[static_cast<std::size_t>(t)].data();
    const float* __restrict__ pc = arr.c[static_cast<std::size_t>(t)].data();
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < n; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    benchmark::ClobberMemory();
    return 3.0 * n * sizeof(float) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  p.read = per_thread_best(threads, 3, [&](int t) {
    const float* pa = arr.a[static_cast<std::size_t>(t)].data();
    vwide s0{}, s1{}, s2{}, s3{};
    constexpr std::size_t w = sizeof(vwide) / sizeof(float);
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i + 4 * w <= n; i += 4 * w) {
      vwide x0, x1, x2, x3;
      std::memcpy(&x0, pa + i, sizeof x0);
      std::memcpy(&x1, pa + i + w, sizeof x1);
      std::memcpy(&x2, pa + i + 2 * w, sizeof x2);
      std::memcpy(&x3, pa + i + 3 * w, sizeof x3);
      s0 += x0;
      s1 += x1;
      s2 += x2;
      s3 += x3;
    }
    benchmark::DoNotOptimize(s0 + s1 + s2 + s3);
    return 1.0 * n * sizeof(float) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  return p;
}

const probes& probe(int threads) {
  static std::mutex m;
  static std::map<int, probes> cache;
  std::lock_guard<std::mutex> lock(m);
  auto it = cache.find(threads);
  if (it == cache.end()) it = cache.emplace(threads, measure_probes(threads)).first;
  return it->second;
}

int threads_of(const benchmark::State& state) {
  return dsa::cpu_detail::thread_count(dsa::cpu_backend{static_cast<int>(state.range(1))});
}

void BM_probe(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  probes p;
  for (auto _ : state) p = measure_probes(threads);
  state.counters["peak8_GFLOP/s"] = p.peak8 * 1e-9;
  state.counters["peak16_GFLOP/s"] = p.peak_wide * 1e-9;
  state.counters["copy_GB/s"] = p.copy * 1e-9;
  state.counters["triad_GB/s"] = p.triad * 1e-9;
  state.counters["read_GB/s"] = p.read * 1e-9;
}
BENCHMARK(BM_probe)->ArgName("threads")->Arg(1)->Arg(2)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- weights --------------------------------------------------------------------------------------

struct shape {
  index_t in, out;
};
// Arg 2 of the fp8 benchmarks.
constexpr shape kShapes[] = {{7168, 2048}, {7168, 18432}, {18432, 7168}, {16384, 7168}};

// Checkpoint-like FP8 weights: normal values quantized per 128 x 128 block (codes of every
// magnitude, a few subnormal ones), `copies` copies in one allocation.
struct fp8_pool {
  index_t in, out, copies;
  std::vector<fp8_e4m3> q;
  std::vector<float> s;
  fp8_pool(shape sh, index_t n) : in(sh.in), out(sh.out), copies(n) {
    const std::size_t per = static_cast<std::size_t>(in * out);
    q.resize(per * static_cast<std::size_t>(copies));
    s.resize(static_cast<std::size_t>(((out + 127) / 128) * (in / 128)));
    std::mt19937_64 rng(7);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (std::size_t i = 0; i < per; ++i) q[i] = fp8_e4m3(d(rng) * 100.0f);
    for (index_t c = 1; c < copies; ++c) std::memcpy(q.data() + per * static_cast<std::size_t>(c), q.data(), per);
    for (auto& v : s) v = 2e-4f * (1.0f + 0.1f * d(rng));
  }
  std::size_t bytes_per_copy() const { return static_cast<std::size_t>(in * out) + s.size() * sizeof(float); }
  const fp8_e4m3* copy(index_t c) const { return q.data() + static_cast<std::size_t>(in * out) * static_cast<std::size_t>(c); }
  dsa::host_view<const fp8_e4m3, 2> view(index_t c) const { return dsa::make_view(copy(c), {out, in}); }
  // The copies packed by dsa::pack_fp8_weight (made on first use, then kept with the pool).
  const dsa::packed_fp8_weight& packed(index_t c) const {
    if (packed_.empty()) {
      for (index_t i = 0; i < copies; ++i) packed_.push_back(dsa::pack_fp8_weight(dsa::cpu_backend{}, view(i)));
    }
    return packed_[static_cast<std::size_t>(c)];
  }

 private:
  mutable std::vector<dsa::packed_fp8_weight> packed_;
};

// The pool of a shape and residency (from memory: copies for >= 768 MB; cached: one copy). One
// pool is kept at a time (the benchmarks are registered shape by shape).
const fp8_pool& pool(int shape_index, bool from_memory) {
  static std::mutex m;
  static std::pair<int, bool> key{-1, false};
  static std::unique_ptr<fp8_pool> p;
  std::lock_guard<std::mutex> lock(m);
  if (!p || key != std::pair<int, bool>{shape_index, from_memory}) {
    p.reset();
    const shape sh = kShapes[shape_index];
    const std::size_t per = static_cast<std::size_t>(sh.in * sh.out);
    const index_t copies = from_memory ? static_cast<index_t>(std::max<std::size_t>(2, (std::size_t{768} << 20) / per + 1)) : 1;
    p = std::make_unique<fp8_pool>(sh, copies);
    key = {shape_index, from_memory};
  }
  return *p;
}

std::vector<bf16> activations(index_t t, index_t in) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(t * 131 + in));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<bf16> x(static_cast<std::size_t>(t * in));
  for (auto& v : x) v = bf16(d(rng));
  return x;
}

// Times the benchmark loop itself (wall clock), so that the fractions of the limits can be plain
// numbers: Google Benchmark's rate counters divide by time, not by a probe.
struct loop_timer {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
};

void ratio_counters(benchmark::State& state, const loop_timer& timer, double bytes, double flops) {
  const probes& p = probe(threads_of(state));
  const double iters = static_cast<double>(state.iterations());
  const double secs = timer.seconds();
  const double bw = bytes * iters / secs, fl = flops * iters / secs;
  state.counters["GB/s"] = bw * 1e-9;
  state.counters["GFLOP/s"] = fl * 1e-9;
  state.counters["of_bw"] = bw / std::max(p.copy, p.triad);
  state.counters["of_read"] = bw / p.read;
  state.counters["of_peak8"] = fl / p.peak8;
  state.counters["of_peak16"] = fl / p.peak_wide;
}

// ---- fp8_linear -----------------------------------------------------------------------------------

// Args: t, threads, shape index, mode (0 exact, 1 fp32), from memory (1) or cached (0), the
// weight as checkpoint rows (0) or packed by dsa::pack_fp8_weight (1).
void BM_fp8_linear(benchmark::State& state) {
  const index_t t = state.range(0);
  dsa::cpu_backend be{static_cast<int>(state.range(1))};
  be.fp8_block_dot = state.range(3) == 1 ? dsa::fp8_dot::fp32 : dsa::fp8_dot::exact;
  const fp8_pool& w = pool(static_cast<int>(state.range(2)), state.range(4) == 1);
  const bool packed = state.range(5) == 1;
  if (packed) w.packed(0);  // packed before the timing starts
  probe(threads_of(state));  // measured before the timing starts
  const std::vector<bf16> x = activations(t, w.in);
  std::vector<bf16> y(static_cast<std::size_t>(t * w.out));
  index_t c = 0;
  const loop_timer timer;
  for (auto _ : state) {
    const auto xv = dsa::make_view(x.data(), {t, w.in});
    const auto sv = dsa::make_view(w.s.data(), {(w.out + 127) / 128, w.in / 128});
    const auto yv = dsa::make_view(y.data(), {t, w.out});
    if (packed) {
      dsa::fp8_linear(be, xv, w.packed(c), sv, yv);
    } else {
      dsa::fp8_linear(be, xv, w.view(c), sv, yv);
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    c = (c + 1) % w.copies;
  }
  ratio_counters(state, timer, static_cast<double>(w.bytes_per_copy()), 2.0 * static_cast<double>(t) * w.in * w.out);
  state.SetLabel(std::string(be.fp8_block_dot == dsa::fp8_dot::fp32 ? "fp32 dot" : "exact dot") + (packed ? ", packed" : ""));
}

void decode_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"t", "threads", "shape", "fp32", "dram", "packed"});
  for (int s = 0; s < 4; ++s) {
    for (int th : {1, 2}) {
      for (int mode : {0, 1}) {
        for (index_t t : {1, 2, 3, 4}) {
          for (int packed : {0, 1}) {
            // t = 2, 3: the fp32 mode's packed path only (the transformer's default).
            if ((t == 1 || t == 4) || (mode == 1 && packed == 1)) b->Args({t, th, s, mode, 1, packed});
          }
        }
      }
    }
  }
  // The same GEMV with its weights in L3 (14.7 MB, one copy): the rate of the arithmetic alone,
  // the ceiling the stream from DRAM can approach.
  for (int mode : {0, 1}) {
    for (index_t t : {1, 2, 3, 4}) {
      for (int packed : {0, 1}) {
        if ((t == 1 || t == 4) || (mode == 1 && packed == 1)) b->Args({t, 1, 0, mode, 0, packed});
      }
    }
  }
  for (index_t t : {1, 2, 3, 4}) b->Args({t, 2, 0, 1, 0, 1});  // the fp32 packed path on two threads
  b->UseRealTime()->MinTime(0.3)->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_fp8_linear)->Name("BM_fp8_linear_decode")->Apply(decode_args);

void prefill_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"t", "threads", "shape", "fp32", "dram", "packed"});
  for (int th : {1, 2}) {
    for (int mode : {0, 1}) {
      for (index_t t : {64, 256}) {
        for (int packed : {0, 1}) b->Args({t, th, 0, mode, 0, packed});
      }
    }
  }
  b->UseRealTime()->MinTime(0.5)->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_fp8_linear)->Name("BM_fp8_linear_prefill")->Apply(prefill_args);

// A batched decode step (issue 38): t = 8 ... 32 rows, one per sequence, through the model's
// shapes with the weights read from memory, as a step of B sequences reads them; packed, both
// block dots, two threads. of_peak16 is the target's measure at t = 32.
void batch_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"t", "threads", "shape", "fp32", "dram", "packed"});
  for (int s = 0; s < 4; ++s) {
    for (int mode : {0, 1}) {
      for (index_t t : {8, 16, 32}) b->Args({t, 2, s, mode, 1, 1});
    }
  }
  b->UseRealTime()->MinTime(0.3)->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_fp8_linear)->Name("BM_fp8_linear_batch")->Apply(batch_args);

// The parts of the fp32-mode GEMV apart, on 16 rows x 7168 codes held in L2 (GB/s counts the
// codes): the rate its arithmetic allows, the ceiling of its stream from DRAM. Args: part, t.
// From checkpoint rows (t = 1): 0 the decode of the codes into pair tiles (decode_pair_tile),
// 1 the micro-kernel over the tiles (gemv_micro), so 1 / (1 / decode + 1 / micro) is the tile
// path's rate. From a packed weight: 2 the decode of a run of blocks (decode_packed_run, t = 1);
// 3 the GEMV that decodes and multiplies in registers (packed_gemv_fp32, AVX-512, the path the
// fp32 mode takes) and 4 the tile path it replaced (decode_packed_run + gemv_micro), t = 1..4.
void BM_fp8_gemv_parts(benchmark::State& state) {
  namespace li = dsa::cpu_detail;
  constexpr index_t nr = li::fp8_shape<float>::gemv_nr, in = 7168, nb = li::gemv_max_nb;
  constexpr index_t tile_stride = (nr / li::group_rows) * li::pair_tile_dwords;
  const fp8_pool& w = pool(0, false);  // checkpoint-like codes; the first nr rows
  const int part = static_cast<int>(state.range(0));
  const index_t t = state.range(1);
  std::vector<std::uint32_t, Eigen::aligned_allocator<std::uint32_t>> pt(static_cast<std::size_t>(nb * tile_stride));
  std::vector<float, Eigen::aligned_allocator<float>> x(static_cast<std::size_t>(t * in), 0x1p-8f),
      d(static_cast<std::size_t>(nb * t * nr));  // the kernels store whole vectors
  const std::uint8_t* rows[nr];
  const dsa::packed_fp8_weight packed = dsa::pack_fp8_weight(dsa::cpu_backend{1}, dsa::make_view(w.copy(0), {nr, in}));
  for (auto _ : state) {
    for (index_t kb = 0; kb < in / li::block; kb += nb) {
      const float* xk = x.data() + kb * li::block;
      if (part == 0) {
        for (index_t b = 0; b < nb; ++b) {
          for (index_t j = 0; j < nr; ++j) rows[j] = li::code_bytes(w.copy(0) + j * in + (kb + b) * li::block);
          li::decode_pair_tile<nr>(rows, pt.data() + b * tile_stride);
        }
      } else if (part == 1) {
        li::gemv_micro<float, 1, nr, nb>(xk, in, pt.data(), tile_stride, d.data());
      } else if (part == 2) {
        li::decode_packed_run<nr>(packed, 0, kb, static_cast<int>(nb), pt.data(), tile_stride);
      } else if (part == 3) {
        li::packed_tiles<nr> tiles{packed};
        if (!tiles.gemv_regs(kb, static_cast<int>(nb), t, xk, in, d.data())) state.SkipWithError("no register path");
      } else {
        li::decode_packed_run<nr>(packed, 0, kb, static_cast<int>(nb), pt.data(), tile_stride);
        li::gemv_micro_call<float, nr>(static_cast<int>(t), static_cast<int>(nb), xk, in, pt.data(), tile_stride,
                                       d.data(), nullptr);
      }
      benchmark::ClobberMemory();
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * nr * in);
  const char* const labels[] = {"decode_pair_tile", "gemv_micro", "decode_packed_run", "packed_gemv_fp32",
                                "decode_packed_run + gemv_micro"};
  state.SetLabel(labels[part]);
}
void parts_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"part", "t"});
  for (int part = 0; part < 3; ++part) b->Args({part, 1});
  for (int part : {3, 4}) {
    if (part == 3 && !DSA_CPU_HAS_AVX512) continue;
    for (int t = 1; t <= 4; ++t) b->Args({part, t});
  }
  b->MinTime(0.3);
}
BENCHMARK(BM_fp8_gemv_parts)->Apply(parts_args);

// dsa::pack_fp8_weight of the checkpoint-like 7168 -> 18432 weight (132 MB of codes, from
// memory) on 1 or 2 threads: the load-time price of the packed form (GB/s of codes).
void BM_pack_fp8_weight(benchmark::State& state) {
  const fp8_pool& w = pool(1, false);
  const dsa::cpu_backend be{static_cast<int>(state.range(0))};
  for (auto _ : state) {
    dsa::packed_fp8_weight p = dsa::pack_fp8_weight(be, w.view(0));
    benchmark::DoNotOptimize(p);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * w.in * w.out);
}
BENCHMARK(BM_pack_fp8_weight)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// Baseline: Eigen fp32 GEMM (GEMV for t = 1) of the expert shape with dequantized fp32 weights
// (cached), output columns split over the same threads.
void BM_eigen_sgemm_baseline(benchmark::State& state) {
  using mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const index_t t = state.range(0);
  const dsa::cpu_backend be{static_cast<int>(state.range(1))};
  const shape sh = kShapes[0];
  const fp8_pool& w = pool(0, false);
  probe(threads_of(state));
  std::vector<float> wf(static_cast<std::size_t>(sh.in * sh.out));
  for (index_t n = 0; n < sh.out; ++n) {
    for (index_t k = 0; k < sh.in; ++k) {
      const std::size_t i = static_cast<std::size_t>(n * sh.in + k);
      wf[i] = w.q[i].to_float() * w.s[static_cast<std::size_t>((n / 128) * (sh.in / 128) + k / 128)];
    }
  }
  const std::vector<bf16> xb = activations(t, sh.in);
  std::vector<float> x(xb.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = xb[i].to_float();
  std::vector<float> y(static_cast<std::size_t>(t * sh.out));
  const index_t threads = dsa::cpu_detail::thread_count(be);
  const loop_timer timer;
  for (auto _ : state) {
    dsa::cpu_detail::parallel_for(be, threads, 1, [&](index_t b, index_t e) {
      const index_t n0 = sh.out * b / threads, n1 = sh.out * e / threads;
      Eigen::Map<const mat> xm(x.data(), t, sh.in);
      Eigen::Map<const mat> wm(wf.data() + n0 * sh.in, n1 - n0, sh.in);
      Eigen::Map<mat, 0, Eigen::OuterStride<>> ym(y.data() + n0, t, n1 - n0, Eigen::OuterStride<>(sh.out));
      ym.noalias() = xm * wm.transpose();
    });
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  ratio_counters(state, timer, 4.0 * sh.in * sh.out, 2.0 * static_cast<double>(t) * sh.in * sh.out);
}
BENCHMARK(BM_eigen_sgemm_baseline)
    ->ArgNames({"t", "threads"})
    ->Args({1, 1})->Args({1, 2})->Args({256, 1})->Args({256, 2})
    ->UseRealTime()->MinTime(0.3)->Unit(benchmark::kMillisecond);

// ---- bf16 linear ----------------------------------------------------------------------------------

// lm_head-like: 7168 -> 32768 bf16 (470 MB), two copies (from DRAM) for decode and batched
// decode (t <= 32); the expert shape (cached) for prefill. fp32 logits out, as the model's lm_head.
void BM_linear_bf16(benchmark::State& state) {
  const index_t t = state.range(0);
  const dsa::cpu_backend be{static_cast<int>(state.range(1))};
  const bool decode = t <= 32;
  const index_t in = 7168, out = decode ? 32768 : 2048, copies = decode ? 2 : 1;
  static std::vector<bf16> big, small;
  std::vector<bf16>& w = decode ? big : small;
  const std::size_t per = static_cast<std::size_t>(in * out);
  if (w.size() != per * static_cast<std::size_t>(copies)) {
    w.resize(per * static_cast<std::size_t>(copies));
    std::mt19937_64 rng(9);
    std::normal_distribution<float> d(0.0f, 0.01f);
    for (std::size_t i = 0; i < per; ++i) w[i] = bf16(d(rng));
    for (index_t c = 1; c < copies; ++c) std::memcpy(w.data() + per * static_cast<std::size_t>(c), w.data(), per * sizeof(bf16));
  }
  probe(threads_of(state));
  const std::vector<bf16> x = activations(t, in);
  std::vector<float> y(static_cast<std::size_t>(t * out));
  index_t c = 0;
  const loop_timer timer;
  for (auto _ : state) {
    dsa::linear(be, dsa::make_view(x.data(), {t, in}), dsa::make_view(w.data() + per * static_cast<std::size_t>(c), {out, in}),
                dsa::make_view(y.data(), {t, out}));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    c = (c + 1) % copies;
  }
  ratio_counters(state, timer, 2.0 * static_cast<double>(per), 2.0 * static_cast<double>(t) * in * out);
}
BENCHMARK(BM_linear_bf16)
    ->ArgNames({"t", "threads"})
    ->Args({1, 1})->Args({1, 2})->Args({4, 2})->Args({8, 2})->Args({16, 2})->Args({32, 2})->Args({256, 2})
    ->UseRealTime()->MinTime(0.3)->Unit(benchmark::kMillisecond);

}  // namespace
