// The FP8 quantizers on the GPU at DeepSeek-V3.2's sizes, all bound by memory:
//  - act_quant (bf16, 1 x 128 groups, ue8m0 scales) of t tokens of the 7168-wide hidden state
//    (t = 1, 64: decode; 4096: a prefill chunk) and of the indexer's 4096 x 64 heads x 128 queries;
//  - act_dequant of 4096 x 7168;
//  - weight_quant / weight_dequant (128 x 128 blocks) of an 18432 x 7168 dense-MLP weight.
// GB/s counts what the op must move: the input read once, codes, scales and output written once
// (bf16 2 bytes, e4m3 1 byte, one fp32 scale per group or block); of_copy relates it to the
// device-to-device copy probe, the roofline of an op that reads and writes each byte once.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "bench_cuda.hpp"

namespace {

using namespace dsa_bench::cuda;

constexpr index_t kGroup = 128;

// Args: rows, cols.
void BM_cuda_act_quant_bf16(benchmark::State& state) {
  guarded(state, [&] {
    const index_t rows = state.range(0), cols = state.range(1);
    const dsa::device_buffer<bf16> x = random_buffer<bf16>(rows * cols, 11, -3.0f, 3.0f);
    dsa::device_buffer<fp8_e4m3> q(rows * cols);
    dsa::device_buffer<float> s(rows * (cols / kGroup));
    const auto xv = x.view({rows, cols});
    const auto qv = q.view({rows, cols});
    const auto sv = s.view({rows, cols / kGroup});
    const cuda_backend be = session::get().backend();
    const double t = timed_loop(state, [&] { dsa::act_quant(be, xv, qv, sv, dsa::act_quant_config{}); });
    set_counters(state, t, 0.0, static_cast<double>(rows * cols) * (2 + 1) + 4.0 * static_cast<double>(s.size()),
                 unit::none);
  });
}
BENCHMARK(BM_cuda_act_quant_bf16)
    ->ArgNames({"rows", "cols"})
    ->Args({1, 7168})
    ->Args({64, 7168})
    ->Args({4096, 7168})
    ->Args({4096 * 64, 128})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.1);

// Codes and scales as act_quant would have written them: random codes of moderate magnitude
// and power-of-two scales.
struct quantized {
  dsa::device_buffer<fp8_e4m3> q;
  dsa::device_buffer<float> s;
  quantized(index_t count, index_t scales)
      : q(random_buffer<fp8_e4m3>(count, 12, -240.0f, 240.0f)), s(repeat_upload<float>(scales, scale_pool(scales))) {}
  // 2^-7 and 2^-6 alternating, in a pool large enough to upload in few copies.
  static std::vector<float> scale_pool(index_t scales) {
    std::vector<float> pool(static_cast<std::size_t>(std::min<index_t>(scales, 1 << 16)));
    for (std::size_t i = 0; i < pool.size(); ++i) pool[i] = (i % 2 == 0) ? 0.0078125f : 0.015625f;
    return pool;
  }
};

// Args: rows, cols.
void BM_cuda_act_dequant_bf16(benchmark::State& state) {
  guarded(state, [&] {
    const index_t rows = state.range(0), cols = state.range(1);
    const quantized in(rows * cols, rows * (cols / kGroup));
    dsa::device_buffer<bf16> y(rows * cols);
    const auto qv = in.q.view({rows, cols});
    const auto sv = in.s.view({rows, cols / kGroup});
    const auto yv = y.view({rows, cols});
    const cuda_backend be = session::get().backend();
    const double t = timed_loop(state, [&] { dsa::act_dequant(be, qv, sv, yv, kGroup); });
    set_counters(state, t, 0.0, static_cast<double>(rows * cols) * (1 + 2) + 4.0 * static_cast<double>(in.s.size()),
                 unit::none);
  });
}
BENCHMARK(BM_cuda_act_dequant_bf16)
    ->ArgNames({"rows", "cols"})
    ->Args({4096, 7168})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.1);

constexpr index_t blocks(index_t n) { return (n + kGroup - 1) / kGroup; }

// Args: rows (output features), cols (input features).
void BM_cuda_weight_quant_bf16(benchmark::State& state) {
  guarded(state, [&] {
    const index_t rows = state.range(0), cols = state.range(1);
    const dsa::device_buffer<bf16> w = random_buffer<bf16>(rows * cols, 13, -0.05f, 0.05f);
    dsa::device_buffer<fp8_e4m3> q(rows * cols);
    dsa::device_buffer<float> s(blocks(rows) * blocks(cols));
    const auto wv = w.view({rows, cols});
    const auto qv = q.view({rows, cols});
    const auto sv = s.view({blocks(rows), blocks(cols)});
    const cuda_backend be = session::get().backend();
    const double t = timed_loop(state, [&] { dsa::weight_quant(be, wv, qv, sv); });
    set_counters(state, t, 0.0, static_cast<double>(rows * cols) * (2 + 1) + 4.0 * static_cast<double>(s.size()),
                 unit::none);
  });
}
BENCHMARK(BM_cuda_weight_quant_bf16)
    ->ArgNames({"rows", "cols"})
    ->Args({18432, 7168})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.1);

// Args: rows, cols.
void BM_cuda_weight_dequant_bf16(benchmark::State& state) {
  guarded(state, [&] {
    const index_t rows = state.range(0), cols = state.range(1);
    const quantized in(rows * cols, blocks(rows) * blocks(cols));
    dsa::device_buffer<bf16> w(rows * cols);
    const auto qv = in.q.view({rows, cols});
    const auto sv = in.s.view({blocks(rows), blocks(cols)});
    const auto wv = w.view({rows, cols});
    const cuda_backend be = session::get().backend();
    const double t = timed_loop(state, [&] { dsa::weight_dequant(be, qv, sv, wv); });
    set_counters(state, t, 0.0, static_cast<double>(rows * cols) * (1 + 2) + 4.0 * static_cast<double>(in.s.size()),
                 unit::none);
  });
}
BENCHMARK(BM_cuda_weight_dequant_bf16)
    ->ArgNames({"rows", "cols"})
    ->Args({18432, 7168})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.1);

}  // namespace
