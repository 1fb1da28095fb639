// The CUDA benchmarks' own device code, compiled by nvcc (bench_launchers.cu) and called from the
// Google Benchmark files (bench_cuda_*.cpp, host compiler). docs/design.md ("Build and test") keeps Google Benchmark out
// of .cu files, so only these declarations cross the boundary, in plain C++ types:
//
//  - device facts and the timing helpers (CUDA events around one launch after an L2 flush);
//  - the machine probes: a device-to-device cudaMemcpyAsync, fp32 and fp64 FMA-peak kernels and a
//    cuBLAS bf16 GEMM (the tensor cores' practical peak).
//
// The ops themselves are called directly, dsa::<op>(cuda_backend, device views...), through
// dsa/cuda/ops.hpp (bench_cuda.hpp): the benchmarks run the real front-ends, op_impl<cuda_backend,
// ...> and kernels, compiled once by nvcc in dsa_cuda_ops (dsa/core/op_instances.hpp).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"

namespace dsa_bench::cuda {

template <class T, std::size_t R>
using dview = dsa::device_view<T, R>;
using dsa::bf16;
using dsa::cuda_backend;
using dsa::fp8_e4m3;
using dsa::index_t;

// ---- device and timing -------------------------------------------------------------------------

/// What the benchmarks report about the current device (cudaGetDeviceProperties and attributes).
struct device_facts {
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  int clock_khz = 0;         ///< peak SM clock
  int memory_clock_khz = 0;  ///< peak memory clock
  int memory_bus_bits = 0;
  std::size_t l2_bytes = 0;
  std::size_t global_bytes = 0;
  int runtime_version = 0;
  int driver_version = 0;
};

/// Facts of the current device; throws dsa::cuda_error without one.
device_facts query_device();

/// Seconds the device spent on `launch`, which enqueues work on `stream`: the L2 cache is flushed
/// first (a cudaMemsetAsync of twice its size, enqueued before the start event and not timed),
/// then an event is recorded before and after `launch` and the host waits for the second.
/// The flush also gives the host a head start: while the device clears the cache, the host
/// enqueues the start event, the launch and the stop event, so no host-side launch latency falls
/// between the two events. Inputs therefore come from DRAM, as in a decode step where the other
/// layers have evicted them, and as FlashMLA's and DeepGEMM's own benchmarks measure.
double time_cold(cudaStream_t stream, const std::function<void()>& launch);

// ---- machine probes ----------------------------------------------------------------------------

/// Copies `bytes` from src to dst with cudaMemcpyAsync(DeviceToDevice) on `stream` (the
/// bandwidth probe; the caller times it).
void copy_d2d(cudaStream_t stream, void* dst, const void* src, std::size_t bytes);

/// The FMA-peak kernels: `blocks` x 256 threads, each running 8 independent FMA chains for
/// `iters` steps (x = fma(x, a, b)); one fp32 / fp64 value per thread is written to `out` so that
/// nothing is optimised away. Floating-point operations: 2 * 8 * iters * blocks * 256.
inline constexpr int fma_peak_threads = 256;
inline constexpr int fma_peak_chains = 8;
void fma_peak_f32(cudaStream_t stream, int blocks, int iters, float* out);
void fma_peak_f64(cudaStream_t stream, int blocks, int iters, double* out);

/// C [m, n] = A [m, k] . B [k, n], all bf16 column-major, fp32 accumulation (cublasGemmEx with
/// CUBLAS_COMPUTE_32F): the tensor-core probe.
void gemm_bf16_cublas(cublasHandle_t handle, cudaStream_t stream, int m, int n, int k, const bf16* a, const bf16* b,
                      bf16* c);

}  // namespace dsa_bench::cuda
