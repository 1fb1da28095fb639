// main() of the CUDA benchmarks: the device's facts and the machine limits (copy bandwidth, fp32
// and fp64 FMA peaks, cuBLAS bf16 GEMM) measured once, before any benchmark, into the JSON
// context and into limits(), from which every benchmark's of_peak / of_copy is computed.
//
// Without a GPU it says so on one line starting "SKIPPED: " (ctest's SKIP_REGULAR_EXPRESSION),
// and every benchmark then reports the same message through SkipWithError; the run exits 0.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "bench_cuda.hpp"

namespace {

using namespace dsa_bench::cuda;

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

void add_device_context() {
  const device_facts f = query_device();
  benchmark::AddCustomContext("cuda_device", f.name);
  benchmark::AddCustomContext("cuda_compute_capability", std::to_string(f.cc_major) + "." + std::to_string(f.cc_minor));
  benchmark::AddCustomContext("cuda_sm_count", std::to_string(f.sm_count));
  benchmark::AddCustomContext("cuda_sm_clock_mhz", std::to_string(f.clock_khz / 1000));
  benchmark::AddCustomContext("cuda_memory_clock_mhz", std::to_string(f.memory_clock_khz / 1000));
  benchmark::AddCustomContext("cuda_memory_bus_bits", std::to_string(f.memory_bus_bits));
  benchmark::AddCustomContext("cuda_l2_mib", fixed(static_cast<double>(f.l2_bytes) / (1 << 20), 1));
  benchmark::AddCustomContext("cuda_memory_gib", fixed(static_cast<double>(f.global_bytes) / (1 << 30), 1));
  benchmark::AddCustomContext("cuda_runtime_version", std::to_string(f.runtime_version));
  benchmark::AddCustomContext("cuda_driver_version", std::to_string(f.driver_version));
}

// Each probe on its own: one that fails (e.g. cuBLAS on an unsupported part) leaves its limit 0
// (no fraction is reported against it) and its message in the context.
template <class Measure>
void probe(const char* key, int digits, double scale, double& limit, Measure&& measure) {
  try {
    limit = measure();
    benchmark::AddCustomContext(key, fixed(limit * scale, digits));
  } catch (const std::exception& e) {
    limit = 0.0;
    benchmark::AddCustomContext(key, std::string("failed: ") + e.what());
  }
}

void measure_limits() {
  machine_limits& l = limits();
  const int sms = query_device().sm_count;
  probe("probe_copy_d2d_GBps", 1, 1e-9, l.copy_bytes_per_s, [] {
    const copy_probe p(copy_probe_bytes);
    return p.bytes_moved() / best_seconds(std::cref(p), 10);
  });
  probe("probe_fp32_fma_TFLOPs", 2, 1e-12, l.fp32_flops, [&] {
    const fma_probe<float> p(sms, fma_probe_iters_f32);
    return p.flops() / best_seconds(std::cref(p), 10);
  });
  probe("probe_fp64_fma_TFLOPs", 2, 1e-12, l.fp64_flops, [&] {
    const fma_probe<double> p(sms, fma_probe_iters_f64);
    return p.flops() / best_seconds(std::cref(p), 10);
  });
  probe("probe_bf16_gemm_cublas_TFLOPs", 1, 1e-12, l.bf16_gemm_flops, [] {
    const gemm_probe p(gemm_probe_n);
    return p.flops() / best_seconds(std::cref(p), 10);
  });
}

bool listing_only(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--benchmark_list_tests" || a == "--benchmark_list_tests=true" || a == "--benchmark_list_tests=1") {
      return true;
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const bool listing = listing_only(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (!dsa::has_device()) {
    // On stderr, so that --benchmark_format=json on stdout stays valid JSON.
    std::fprintf(stderr, "SKIPPED: %s: no benchmark ran, each reports this message\n", no_device_message);
    benchmark::AddCustomContext("cuda_device", "none");
  } else if (!listing) {
    try {
      add_device_context();
      measure_limits();
    } catch (const std::exception& e) {
      // The benchmarks will meet the same failure and report it one by one.
      std::fprintf(stderr, "dsa CUDA benchmarks: device set-up failed: %s\n", e.what());
      benchmark::AddCustomContext("cuda_setup_error", e.what());
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
