// Dense linear layers at DeepSeek-V3.2 sizes (a 7168 -> 2048 projection, e.g. a MoE expert's
// w1/w3 or the shared expert):
//  - fp8_linear at t = 1 (decode: a GEMV, judged by weight bytes/s against memory bandwidth) and
//    t = 256 (prefill: a GEMM, judged by FLOP/s);
//  - baseline beside each: an Eigen fp32 GEMM/GEMV of the same shape on the same threads (the
//    work a dequantize-then-sgemm implementation would do, with 4x the weight bytes);
//  - linear (bf16 x bf16 -> bf16) at the same shapes for reference.
// Arg: threads (0 = every hardware thread).
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cstdint>
#include <random>
#include <vector>

#include "dsa/cpu/linear.hpp"
#include "dsa/cpu/parallel.hpp"
#include "dsa/ops/linear.hpp"

namespace {

using dsa::bf16;
using dsa::fp8_e4m3;
using dsa::index_t;

constexpr index_t kIn = 7168;
constexpr index_t kOut = 2048;

struct weights {
  std::vector<fp8_e4m3> q;
  std::vector<float> s;
  std::vector<float> f;  // the dequantized weights, for the fp32 baseline
  std::vector<bf16> b;
  weights() : q(static_cast<std::size_t>(kOut * kIn)), s(static_cast<std::size_t>((kOut / 128) * (kIn / 128))) {
    std::mt19937_64 rng(7);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (auto& v : q) v = fp8_e4m3(d(rng) * 64.0f);
    for (auto& v : s) v = 3e-4f * (1.0f + 0.1f * d(rng));
    f.resize(q.size());
    b.resize(q.size());
    for (index_t n = 0; n < kOut; ++n) {
      for (index_t k = 0; k < kIn; ++k) {
        const std::size_t i = static_cast<std::size_t>(n * kIn + k);
        f[i] = q[i].to_float() * s[static_cast<std::size_t>((n / 128) * (kIn / 128) + k / 128)];
        b[i] = bf16(f[i]);
      }
    }
  }
};

const weights& w() {
  static const weights v;
  return v;
}

std::vector<bf16> activations(index_t t) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(t));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<bf16> x(static_cast<std::size_t>(t * kIn));
  for (auto& v : x) v = bf16(d(rng));
  return x;
}

void set_counters(benchmark::State& state, index_t t, double weight_bytes_per_element) {
  const double flops = 2.0 * static_cast<double>(t) * kIn * kOut;
  const double bytes = weight_bytes_per_element * kIn * kOut + 2.0 * static_cast<double>(t) * (kIn + kOut);
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

// Arg 0: tokens t, arg 1: threads.
void BM_fp8_linear(benchmark::State& state) {
  const index_t t = state.range(0);
  const dsa::cpu_backend be{static_cast<int>(state.range(1))};
  const std::vector<bf16> x = activations(t);
  std::vector<bf16> y(static_cast<std::size_t>(t * kOut));
  const weights& ww = w();
  for (auto _ : state) {
    dsa::fp8_linear(be, dsa::make_view(x.data(), {t, kIn}), dsa::make_view(ww.q.data(), {kOut, kIn}),
                    dsa::make_view(ww.s.data(), {kOut / 128, kIn / 128}), dsa::make_view(y.data(), {t, kOut}));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, t, 1.0 + 4.0 / (128.0 * 128.0));
}

// Baseline: Eigen fp32 GEMM (GEMV for t = 1) of the same shape with fp32 weights, output
// columns split over the same threads.
void BM_eigen_sgemm_baseline(benchmark::State& state) {
  using mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const index_t t = state.range(0);
  const dsa::cpu_backend be{static_cast<int>(state.range(1))};
  const std::vector<bf16> xb = activations(t);
  std::vector<float> x(xb.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = xb[i].to_float();
  std::vector<float> y(static_cast<std::size_t>(t * kOut));
  const weights& ww = w();
  const index_t threads = dsa::cpu_detail::thread_count(be);
  for (auto _ : state) {
    dsa::cpu_detail::parallel_for(be, threads, 1, [&](index_t b, index_t e) {
      const index_t n0 = kOut * b / threads, n1 = kOut * e / threads;
      Eigen::Map<const mat> xm(x.data(), t, kIn);
      Eigen::Map<const mat> wm(ww.f.data() + n0 * kIn, n1 - n0, kIn);
      Eigen::Map<mat, 0, Eigen::OuterStride<>> ym(y.data() + n0, t, n1 - n0, Eigen::OuterStride<>(kOut));
      ym.noalias() = xm * wm.transpose();
    });
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, t, 4.0);
}

void BM_linear_bf16(benchmark::State& state) {
  const index_t t = state.range(0);
  const dsa::cpu_backend be{static_cast<int>(state.range(1))};
  const std::vector<bf16> x = activations(t);
  std::vector<bf16> y(static_cast<std::size_t>(t * kOut));
  const weights& ww = w();
  for (auto _ : state) {
    dsa::linear(be, dsa::make_view(x.data(), {t, kIn}), dsa::make_view(ww.b.data(), {kOut, kIn}),
                dsa::make_view(y.data(), {t, kOut}));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, t, 2.0);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({1, 0})->Args({256, 0})->UseRealTime()->MinTime(0.2)->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_fp8_linear)->Apply(shapes);
BENCHMARK(BM_eigen_sgemm_baseline)->Apply(shapes);
BENCHMARK(BM_linear_bf16)->Apply(shapes);

}  // namespace
