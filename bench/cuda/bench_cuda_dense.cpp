// The dense linear layers y = x . w^T on the GPU at DeepSeek-V3.2's projection sizes (in -> out):
// a routed expert's w1 (7168 -> 2048), the attention output wo (16384 -> 7168) and a dense
// layer's w1 (7168 -> 18432), for t = 1 and 64 tokens (decode: weight streaming, judged by GB/s)
// and 4096 (prefill: judged by TFLOP/s).
//  - linear, bf16 x bf16 -> bf16 through cuBLAS (tensor cores): of_peak against the cuBLAS bf16
//    GEMM probe;
//  - linear on dsa's SIMT kernel (cuda_linear_path::simt: what initcheck runs, and the path for
//    results independent of the cuBLAS version), fp32 FMAs on the CUDA cores: of_peak against
//    the fp32 FMA probe, so the cost of leaving cuBLAS is measured, not guessed;
//  - fp8_linear, e4m3 weights with 128 x 128 block scales and in-kernel 1 x 128 activation
//    quantization (DeepSeek's fp8_gemm rounding points), computed exactly with fp64 FMAs on the
//    CUDA cores: of_peak against the fp64 FMA probe. DeepGEMM's FP8 tensor-core GEMM (1550
//    TFLOP/s on H800) is the anchor of what an approximate FP8 kernel reaches.
// TFLOP/s counts 2 * t * in * out. GB/s counts the weights (and their scales) read once, x read
// once and y written once.
#include <benchmark/benchmark.h>

#include "bench_cuda.hpp"

namespace {

using namespace dsa_bench::cuda;

constexpr index_t kBlock = 128;

// Args: tokens t, in, out. `path`: cuBLAS (tensor cores) or dsa's SIMT kernel.
void linear_bf16(benchmark::State& state, dsa::cuda_linear_path path) {
  guarded(state, [&] {
    const index_t t = state.range(0), in = state.range(1), out = state.range(2);
    const dsa::device_buffer<bf16> x = random_buffer<bf16>(t * in, 51, -2.0f, 2.0f);
    const dsa::device_buffer<bf16> w = random_buffer<bf16>(out * in, 52, -0.05f, 0.05f);
    dsa::device_buffer<bf16> y(t * out);
    const auto xv = x.view({t, in});
    const auto wv = w.view({out, in});
    const auto yv = y.view({t, out});
    const bool simt = path == dsa::cuda_linear_path::simt;
    cuda_backend be = session::get().backend(/*with_blas=*/!simt);
    be.linear = path;
    const double sec = timed_loop(state, [&] { dsa::linear(be, xv, wv, yv); });
    const double flops = 2.0 * static_cast<double>(t) * static_cast<double>(in) * static_cast<double>(out);
    const double bytes = 2.0 * static_cast<double>(out * in + t * in + t * out);
    set_counters(state, sec, flops, bytes, simt ? unit::fp32_fma : unit::bf16_tensor);
  });
}

void BM_cuda_linear_bf16_cublas(benchmark::State& state) { linear_bf16(state, dsa::cuda_linear_path::cublas); }
void BM_cuda_linear_bf16_simt(benchmark::State& state) { linear_bf16(state, dsa::cuda_linear_path::simt); }

// Args: tokens t, in, out.
void BM_cuda_fp8_linear(benchmark::State& state) {
  guarded(state, [&] {
    const index_t t = state.range(0), in = state.range(1), out = state.range(2);
    const index_t scale_rows = (out + kBlock - 1) / kBlock, scale_cols = in / kBlock;
    const dsa::device_buffer<bf16> x = random_buffer<bf16>(t * in, 53, -2.0f, 2.0f);
    const dsa::device_buffer<fp8_e4m3> w = random_buffer<fp8_e4m3>(out * in, 54, -240.0f, 240.0f);
    const dsa::device_buffer<float> w_scale = random_buffer<float>(scale_rows * scale_cols, 55, 1e-4f, 4e-4f);
    dsa::device_buffer<bf16> y(t * out);
    const auto xv = x.view({t, in});
    const auto wv = w.view({out, in});
    const auto sv = w_scale.view({scale_rows, scale_cols});
    const auto yv = y.view({t, out});
    const cuda_backend be = session::get().backend();
    const double sec = timed_loop(state, [&] { dsa::fp8_linear(be, xv, wv, sv, yv); });
    const double flops = 2.0 * static_cast<double>(t) * static_cast<double>(in) * static_cast<double>(out);
    const double bytes = static_cast<double>(out * in) + 4.0 * static_cast<double>(w_scale.size()) +
                         2.0 * static_cast<double>(t * in + t * out);
    set_counters(state, sec, flops, bytes, unit::fp64_fma);
  });
}

#define DSA_DENSE_SHAPES                                                                             \
  ArgNames({"t", "in", "out"})                                                                       \
      ->ArgsProduct({{1, 64, 4096}, {7168}, {2048, 18432}})                                          \
      ->ArgsProduct({{1, 64, 4096}, {16384}, {7168}})                                                \
      ->UseManualTime()                                                                              \
      ->Unit(benchmark::kMicrosecond)                                                                \
      ->MinTime(0.1)
BENCHMARK(BM_cuda_linear_bf16_cublas)->DSA_DENSE_SHAPES;
BENCHMARK(BM_cuda_linear_bf16_simt)->DSA_DENSE_SHAPES;
BENCHMARK(BM_cuda_fp8_linear)->DSA_DENSE_SHAPES;
#undef DSA_DENSE_SHAPES

}  // namespace
