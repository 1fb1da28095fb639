// What every CUDA benchmark (bench_cuda_*.cpp) shares: the stream and cuBLAS handle they run on,
// the no-device and error handling, the timed loop, the counters, the machine limits measured
// at start-up, and deterministic input data.
//
// Timing. Each benchmark iteration is one launch of the op, timed by CUDA events on the
// benchmark's stream after an L2 flush (time_cold in bench_launchers.hpp), and handed to Google
// Benchmark with SetIterationTime (every benchmark is registered with UseManualTime). Two
// launches before the loop absorb the one-time costs (module loading, cudaFuncSetAttribute,
// cuBLAS's heuristics). Google Benchmark divides kIsRate counters by the manual time when
// UseManualTime is set (benchmark_runner.cc: the run's `seconds` is manual_time_used, and
// internal::Finish divides rate counters by it), so "TFLOP/s" and "GB/s" below are work per
// launch over device time per launch.
//
// Counters (numbers in the JSON; the console appends "/s" to the two rates):
//   TFLOP/s  floating-point operations per launch (each benchmark says how it counts them) / time
//   GB/s     bytes the op must move at least (inputs read once, outputs written once) / time
//   of_peak  TFLOP/s as a fraction of the measured peak of the unit the kernel runs on (the
//            label names it: fp32 FMA, fp64 FMA or the bf16 tensor cores via cuBLAS)
//   of_copy  GB/s as a fraction of the measured device-to-device copy bandwidth
// The published anchors (FlashMLA, DeepGEMM, fast-hadamard-transform) are compared in
// tools/bench_report.py, which holds them with their sources.
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bench_launchers.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/blas.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/memory.hpp"
#include "dsa/cuda/ops.hpp"

namespace dsa_bench::cuda {

/// The message of every benchmark on a machine without a GPU (ctest's SKIP_REGULAR_EXPRESSION
/// matches main's line that starts with "SKIPPED: ").
inline constexpr const char* no_device_message = "no CUDA device (dsa::device_count() == 0)";

// ---- the stream, the cuBLAS handle --------------------------------------------------------------

/// One non-blocking stream for the process (so the legacy default stream's implicit
/// synchronisation never enters a measurement) and a cuBLAS handle created on first use.
class session {
 public:
  static session& get() {
    static session s;
    return s;
  }
  cudaStream_t stream() const noexcept { return stream_; }
  /// The backend of the ops: the stream, and the cuBLAS handle when `with_blas` (dsa::linear).
  cuda_backend backend(bool with_blas = false) {
    if (with_blas && !blas_) blas_ = std::make_unique<dsa::cublas_handle>();
    return cuda_backend{stream_, with_blas ? blas_->get() : nullptr};
  }
  /// The backend running `kernels` for the ops that have an exact and a fast kernel (each
  /// benchmark of those ops names which it measures).
  cuda_backend backend(dsa::cuda_kernel_path kernels) {
    cuda_backend be = backend();
    be.kernels = kernels;
    return be;
  }
  cublasHandle_t blas() { return backend(true).blas; }
  /// The backend of fp8_linear's tensor-core path: cuBLAS and cuBLASLt handles, kernels fast.
  cuda_backend fast_backend() {
    cuda_backend be = backend(true);
    if (!blaslt_) blaslt_ = std::make_unique<dsa::cublaslt_handle>();
    be.kernels = dsa::cuda_kernel_path::fast;
    be.blaslt = blaslt_->get();
    return be;
  }
  void synchronize() const { DSA_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  session(const session&) = delete;
  session& operator=(const session&) = delete;

 private:
  session() { DSA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~session() {
    blaslt_.reset();
    blas_.reset();
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);  // at exit: nothing to report to
  }
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<dsa::cublas_handle> blas_;
  std::unique_ptr<dsa::cublaslt_handle> blaslt_;
};

// ---- the machine limits -------------------------------------------------------------------------

/// The probes, measured once per process by main() before any benchmark (0 = not measured).
struct machine_limits {
  double copy_bytes_per_s = 0.0;  ///< device-to-device cudaMemcpyAsync, bytes read + written
  double fp32_flops = 0.0;        ///< fp32 FMA kernel (CUDA cores)
  double fp64_flops = 0.0;        ///< fp64 FMA kernel
  double bf16_gemm_flops = 0.0;   ///< cuBLAS bf16 GEMM 8192^3 (tensor cores)
};

inline machine_limits& limits() {
  static machine_limits l;
  return l;
}

/// The unit a kernel's FLOPs run on: which measured peak its of_peak divides by.
enum class unit { none, fp32_fma, fp64_fma, bf16_tensor };

inline double peak_of(unit u) {
  switch (u) {
    case unit::fp32_fma: return limits().fp32_flops;
    case unit::fp64_fma: return limits().fp64_flops;
    case unit::bf16_tensor: return limits().bf16_gemm_flops;
    case unit::none: break;
  }
  return 0.0;
}

inline const char* unit_label(unit u) {
  switch (u) {
    case unit::fp32_fma: return "of_peak: fp32 FMA";
    case unit::fp64_fma: return "of_peak: fp64 FMA";
    case unit::bf16_tensor: return "of_peak: cuBLAS bf16 GEMM";
    case unit::none: break;
  }
  return "";
}

// ---- running a benchmark ------------------------------------------------------------------------

/// Runs `body` unless there is no device, turning any exception (an op's dsa::error, e.g. a
/// kernel limit of this GPU; a dsa::cuda_error) into SkipWithError: the other benchmarks go on.
template <class Body>
void guarded(benchmark::State& state, Body&& body) {
  if (!dsa::has_device()) {
    state.SkipWithError(no_device_message);
    return;
  }
  try {
    body();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

/// Two warm-up launches, then one cold-L2 timed launch per benchmark iteration. Returns the mean
/// device seconds per launch (the manual time Google Benchmark reports).
inline double timed_loop(benchmark::State& state, const std::function<void()>& launch) {
  session& s = session::get();
  launch();
  launch();
  s.synchronize();
  double total = 0.0;
  std::int64_t n = 0;
  for (auto _ : state) {
    const double t = time_cold(s.stream(), launch);
    state.SetIterationTime(t);
    total += t;
    ++n;
  }
  return n > 0 ? total / static_cast<double>(n) : 0.0;
}

/// Sets TFLOP/s (flops > 0), GB/s (bytes > 0) and their fractions of the measured limits.
inline void set_counters(benchmark::State& state, double seconds, double flops, double bytes, unit u) {
  if (seconds <= 0.0) return;
  if (flops > 0.0) {
    state.counters["TFLOP/s"] = benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
    if (const double peak = peak_of(u); peak > 0.0) state.counters["of_peak"] = flops / seconds / peak;
    state.SetLabel(unit_label(u));
  }
  if (bytes > 0.0) {
    state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    if (const double copy = limits().copy_bytes_per_s; copy > 0.0) state.counters["of_copy"] = bytes / seconds / copy;
  }
}

// ---- deterministic inputs -----------------------------------------------------------------------

/// splitmix64: a fast, well-mixed deterministic generator (inputs of up to gigabytes must not
/// make the set-up longer than the measurement).
class rng {
 public:
  explicit rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [lo, hi).
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(next() >> 40) * (1.0f / static_cast<float>(1u << 24));
  }
  /// Uniform in [0, n), n > 0 (the modulo bias is below 2^-32 for the n used here).
  std::int64_t below(std::int64_t n) { return static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(n)); }

 private:
  std::uint64_t s_;
};

/// n values of T (float, bf16, fp8_e4m3: rounded as the type defines) uniform in [lo, hi).
template <class T>
std::vector<T> random_values(std::size_t n, std::uint64_t seed, float lo, float hi) {
  rng g(seed);
  std::vector<T> v(n);
  for (auto& x : v) x = dsa::from_float<T>(g.uniform(lo, hi));
  return v;
}

/// n random bytes.
inline std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  rng g(seed);
  std::vector<std::byte> v(n);
  for (auto& x : v) x = static_cast<std::byte>(g.next() >> 56);
  return v;
}

/// Uploads a host vector into a new buffer (synchronously).
template <class T>
dsa::device_buffer<T> upload(const std::vector<T>& host) {
  dsa::device_buffer<T> d(static_cast<index_t>(host.size()));
  if (!host.empty()) DSA_CUDA_CHECK(cudaMemcpy(d.data(), host.data(), d.size_bytes(), cudaMemcpyHostToDevice));
  return d;
}

/// A buffer of `count` elements filled with copies of `pool`, back to back (the last one cut
/// short): inputs of gigabytes from a host pool of a few megabytes. A pool whose size is a
/// multiple of a row length keeps rows whole.
template <class T>
dsa::device_buffer<T> repeat_upload(index_t count, const std::vector<T>& pool) {
  dsa::device_buffer<T> d(count);
  const std::size_t total = static_cast<std::size_t>(count);
  for (std::size_t at = 0; at < total && !pool.empty(); at += pool.size()) {
    const std::size_t n = std::min(pool.size(), total - at);
    DSA_CUDA_CHECK(cudaMemcpy(d.data() + at, pool.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  return d;
}

/// A buffer of `count` random values of T in [lo, hi), from a pool of at most 4M distinct values.
template <class T>
dsa::device_buffer<T> random_buffer(index_t count, std::uint64_t seed, float lo, float hi) {
  const std::size_t pool = std::min<std::size_t>(static_cast<std::size_t>(count), std::size_t{1} << 22);
  return repeat_upload<T>(count, random_values<T>(pool, seed, lo, hi));
}

/// `count` distinct values of [0, range), sorted ascending, plus `offset` (as top-k returns
/// them). count <= range.
inline void sample_sorted(rng& g, std::int64_t range, std::int64_t count, std::int64_t offset,
                          std::vector<std::uint8_t>& taken, std::int32_t* out) {
  taken.assign(static_cast<std::size_t>(range), 0);
  std::int64_t n = 0;
  if (2 * count >= range) {
    // Dense: a partial Fisher-Yates shuffle, which never retries.
    std::vector<std::int32_t> all(static_cast<std::size_t>(range));
    for (std::int64_t i = 0; i < range; ++i) all[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
    for (std::int64_t i = 0; i < count; ++i) {
      std::swap(all[static_cast<std::size_t>(i)], all[static_cast<std::size_t>(i + g.below(range - i))]);
      out[n++] = all[static_cast<std::size_t>(i)];
    }
  } else {
    // Sparse: rejection sampling, at most one retry in two draws.
    while (n < count) {
      const std::int64_t v = g.below(range);
      if (taken[static_cast<std::size_t>(v)] != 0) continue;
      taken[static_cast<std::size_t>(v)] = 1;
      out[n++] = static_cast<std::int32_t>(v);
    }
  }
  std::sort(out, out + count);
  for (std::int64_t i = 0; i < count; ++i) out[i] = static_cast<std::int32_t>(out[i] + offset);
}

/// ranges [m, 2] for m query rows over n keys: every row sees [0, n) (decode rows of different
/// sequences, or one sequence's speculative tokens), or, when `causal`, row t sees
/// [0, n - m + t + 1) (the last m positions of a prefill chunk). Returns the sum of the lengths.
inline std::int64_t make_ranges(index_t m, index_t n, bool causal, std::vector<std::int32_t>& ranges) {
  ranges.assign(static_cast<std::size_t>(2 * m), 0);
  std::int64_t total = 0;
  for (index_t t = 0; t < m; ++t) {
    const index_t end = causal ? std::max<index_t>(n - m + t + 1, 0) : n;
    ranges[static_cast<std::size_t>(2 * t + 1)] = static_cast<std::int32_t>(end);
    total += end;
  }
  return total;
}

// ---- the probes (main measures them once; bench_cuda_machine.cpp benchmarks them) --------------

/// Device-to-device copy of `bytes` (src and dst far larger than any L2): moves 2 * bytes.
struct copy_probe {
  dsa::device_buffer<std::byte> src;
  dsa::device_buffer<std::byte> dst;
  explicit copy_probe(std::size_t bytes)
      : src(repeat_upload<std::byte>(static_cast<index_t>(bytes), random_bytes(std::size_t{1} << 22, 1))),
        dst(static_cast<index_t>(bytes)) {}
  void operator()() const {
    copy_d2d(session::get().stream(), const_cast<std::byte*>(dst.data()), src.data(), src.size_bytes());
  }
  double bytes_moved() const { return 2.0 * static_cast<double>(src.size_bytes()); }
};

/// The fp32 or fp64 FMA kernel over 8 blocks of 256 threads per SM (2048 threads: full
/// occupancy on sm_80 and sm_90).
template <class T>
struct fma_probe {
  int blocks;
  int iters;
  dsa::device_buffer<T> out;
  fma_probe(int sm_count, int iterations)
      : blocks(8 * sm_count), iters(iterations), out(static_cast<index_t>(blocks) * fma_peak_threads) {}
  void operator()() const {
    T* o = const_cast<T*>(out.data());
    if constexpr (std::is_same_v<T, float>) {
      fma_peak_f32(session::get().stream(), blocks, iters, o);
    } else {
      fma_peak_f64(session::get().stream(), blocks, iters, o);
    }
  }
  double flops() const {
    return 2.0 * fma_peak_chains * static_cast<double>(iters) * static_cast<double>(blocks) * fma_peak_threads;
  }
};

/// cuBLAS bf16 GEMM, n x n x n, bf16 in and out, fp32 accumulation: 2 n^3 FLOPs.
struct gemm_probe {
  int n;
  dsa::device_buffer<bf16> a;
  dsa::device_buffer<bf16> b;
  dsa::device_buffer<bf16> c;
  explicit gemm_probe(int size)
      : n(size),
        a(random_buffer<bf16>(static_cast<index_t>(size) * size, 2, -1.0f, 1.0f)),
        b(random_buffer<bf16>(static_cast<index_t>(size) * size, 3, -1.0f, 1.0f)),
        c(static_cast<index_t>(size) * size) {}
  void operator()() const {
    gemm_bf16_cublas(session::get().blas(), session::get().stream(), n, n, n, a.data(), b.data(),
                     const_cast<bf16*>(c.data()));
  }
  double flops() const { return 2.0 * n * static_cast<double>(n) * n; }
};

/// The shortest of `reps` cold-L2 launches after two warm-ups: a limit is what the device can
/// do, so the best run is its estimate (STREAM's convention).
inline double best_seconds(const std::function<void()>& launch, int reps) {
  session& s = session::get();
  launch();
  launch();
  s.synchronize();
  double best = 0.0;
  for (int i = 0; i < reps; ++i) {
    const double t = time_cold(s.stream(), launch);
    if (i == 0 || t < best) best = t;
  }
  return best;
}

/// Iterations of the FMA probes: about a millisecond on an H100 (fp32: 8 x 132 x 256 threads x
/// 8 chains x 16384 steps x 2 = 71 GFLOP at ~60 TFLOP/s).
inline constexpr int fma_probe_iters_f32 = 16384;
inline constexpr int fma_probe_iters_f64 = 4096;
/// Bytes of the copy probe per buffer, and the GEMM probe's size.
inline constexpr std::size_t copy_probe_bytes = std::size_t{512} << 20;
inline constexpr int gemm_probe_n = 8192;

}  // namespace dsa_bench::cuda
