// The dense linear layers y = x . w^T on the GPU at DeepSeek-V3.2's projection sizes (in -> out):
// a routed expert's w1 (7168 -> 2048), the attention output wo (16384 -> 7168) and a dense
// layer's w1 (7168 -> 18432), for t = 1, 4 and 8 tokens (decode: weight streaming, judged by GB/s
// against the copy probe), 64, and 1024 and 4096 (prefill: judged by TFLOP/s against the cuBLAS
// bf16 GEMM of the same shape, measured in the same run).
//  - linear, bf16 x bf16 -> bf16 through cuBLAS (tensor cores): of_peak against the cuBLAS bf16
//    GEMM probe; the same-shape baseline of fp8_linear's tensor-core rows;
//  - linear on dsa's SIMT kernel (cuda_linear_path::simt: what initcheck runs, and the path for
//    results independent of the cuBLAS version), fp32 FMAs on the CUDA cores: of_peak against
//    the fp32 FMA probe, so the cost of leaving cuBLAS is measured, not guessed;
//  - fp8_linear, e4m3 weights with 128 x 128 block scales and 1 x 128 activation quantization
//    (DeepSeek's fp8_gemm rounding points), three ways:
//      BM_cuda_fp8_linear           the exact kernels (fp64 FMAs on the CUDA cores: the decode
//                                   GEMV at t <= 8, the tiled kernel above): of_peak against the
//                                   fp64 FMA probe;
//      BM_cuda_fp8_linear_cublaslt  cuBLASLt's block-scaled FP8 GEMM (with a workspace and
//                                   cuda_kernel_path::fast, the decode choice recorded as the
//                                   tensor cores for t <= 8), activation quantization included:
//                                   of_peak against the cuBLAS bf16 GEMM probe (above 1: faster
//                                   than bf16);
//      BM_cuda_fp8_linear_fast      what the op runs by default with a workspace (the GEMV or
//                                   cuBLASLt for t <= 8 as fp8_linear_decode_kernel chose, the
//                                   label says which).
//    DeepGEMM's FP8 tensor-core GEMM (1550 TFLOP/s on H800) is the anchor. On a GPU without
//    cuBLASLt's FP8 block scaling the cuBLASLt rows run the bf16 fallback (label: "bf16_gemm").
// TFLOP/s counts 2 * t * in * out. GB/s counts the weights (and their scales) read once, x read
// once and y written once.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <string>

#include "bench_cuda.hpp"
#include "dsa/cuda/fp8_linear_plan.hpp"

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

// fp8_linear's three ways (see the top of this file).
enum class fp8_way { exact, cublaslt, fast };

// Args: tokens t, in, out.
void fp8_linear_way(benchmark::State& state, fp8_way way) {
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
    double sec = 0.0;
    if (way == fp8_way::exact) {
      const cuda_backend be = session::get().backend();
      sec = timed_loop(state, [&] { dsa::fp8_linear(be, xv, wv, sv, yv); });
      state.SetLabel(t <= dsa::fp8_linear_gemv_max_rows ? "exact GEMV" : "exact tiled");
    } else {
      const cuda_backend be = session::get().fast_backend();
      int device = 0;
      DSA_CUDA_CHECK(cudaGetDevice(&device));
      if (way == fp8_way::cublaslt && t <= dsa::fp8_linear_gemv_max_rows) {
        dsa::record_fp8_linear_decode_kernel(device, t, in, out, dsa::fp8_decode_kernel::tensor_cores);
      }
      const index_t bytes = dsa::fp8_linear_workspace_size(t, in, out);
      dsa::device_buffer<std::byte> workspace(bytes);
      const auto wsv = workspace.view({bytes});
      sec = timed_loop(state, [&] { dsa::fp8_linear(be, xv, wv, sv, yv, dsa::scale_format::ue8m0, wsv); });
      // The kernel that ran, as the op planned it on this device.
      dsa::fp8_linear_problem p;
      p.t = t;
      p.in = in;
      p.out = out;
      p.w_row_stride = in;
      p.w_scale_row_stride = scale_cols;
      p.y_row_stride = out;
      const auto decode = t <= dsa::fp8_linear_gemv_max_rows ? dsa::fp8_linear_decode_kernel(device, t, in, out)
                                                              : dsa::fp8_decode_kernel::tensor_cores;
      state.SetLabel(dsa::to_string(dsa::plan_fp8_linear(p, true, query_device().cc_major, decode).path));
    }
    const double flops = 2.0 * static_cast<double>(t) * static_cast<double>(in) * static_cast<double>(out);
    const double bytes = static_cast<double>(out * in) + 4.0 * static_cast<double>(w_scale.size()) +
                         2.0 * static_cast<double>(t * in + t * out);
    set_counters(state, sec, flops, bytes, way == fp8_way::exact ? unit::fp64_fma : unit::bf16_tensor);
  });
}

void BM_cuda_fp8_linear(benchmark::State& state) { fp8_linear_way(state, fp8_way::exact); }
void BM_cuda_fp8_linear_cublaslt(benchmark::State& state) { fp8_linear_way(state, fp8_way::cublaslt); }
void BM_cuda_fp8_linear_fast(benchmark::State& state) { fp8_linear_way(state, fp8_way::fast); }

#define DSA_DENSE_SHAPES                                                                             \
  ArgNames({"t", "in", "out"})                                                                       \
      ->ArgsProduct({{1, 4, 8, 64, 1024, 4096}, {7168}, {2048, 18432}})                              \
      ->ArgsProduct({{1, 4, 8, 64, 1024, 4096}, {16384}, {7168}})                                    \
      ->UseManualTime()                                                                              \
      ->Unit(benchmark::kMicrosecond)                                                                \
      ->MinTime(0.1)
BENCHMARK(BM_cuda_linear_bf16_cublas)->DSA_DENSE_SHAPES;
BENCHMARK(BM_cuda_linear_bf16_simt)->DSA_DENSE_SHAPES;
BENCHMARK(BM_cuda_fp8_linear)->DSA_DENSE_SHAPES;
// The default choice first: the cuBLASLt rows record the tensor cores as the decode kernel of
// their shapes (Google Benchmark runs benchmarks in registration order).
BENCHMARK(BM_cuda_fp8_linear_fast)->DSA_DENSE_SHAPES;
BENCHMARK(BM_cuda_fp8_linear_cublaslt)->DSA_DENSE_SHAPES;
#undef DSA_DENSE_SHAPES

}  // namespace
