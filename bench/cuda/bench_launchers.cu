// Device facts, the cold-L2 event timer and the machine probes of the CUDA benchmarks (see
// bench_launchers.hpp).
#include "bench_launchers.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <utility>

#include "dsa/cuda/error.hpp"
#include "dsa/cuda/memory.hpp"

namespace dsa_bench::cuda {

namespace {

// x = fma(x, a, b) on `Chains` independent accumulators: the chains hide the FMA latency, the
// 8-fold unrolled loop keeps the loop's own instructions to a few percent of the issue slots.
// a and b are kernel arguments, so nothing folds at compile time; __fmaf_rn / __fma_rn are one
// FFMA / DFMA whatever the compiler flags (--use_fast_math included).
template <class T>
__device__ __forceinline__ T fma_rn(T x, T a, T b);
template <>
__device__ __forceinline__ float fma_rn<float>(float x, float a, float b) {
  return __fmaf_rn(x, a, b);
}
template <>
__device__ __forceinline__ double fma_rn<double>(double x, double a, double b) {
  return __fma_rn(x, a, b);
}

template <class T>
__global__ void __launch_bounds__(fma_peak_threads) fma_peak_kernel(T a, T b, int iters, T* out) {
  T acc[fma_peak_chains];
#pragma unroll
  for (int c = 0; c < fma_peak_chains; ++c) acc[c] = static_cast<T>(threadIdx.x) + static_cast<T>(c);
#pragma unroll 8
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < fma_peak_chains; ++c) acc[c] = fma_rn(acc[c], a, b);
  }
  T sum = 0;
#pragma unroll
  for (int c = 0; c < fma_peak_chains; ++c) sum += acc[c];
  out[static_cast<std::size_t>(blockIdx.x) * fma_peak_threads + threadIdx.x] = sum;
}

// The L2 flush buffer (twice the L2 size, at least 64 MiB) and the two timing events, created on
// first use for the current device and kept for the process (the destructors run at exit, when a
// failing release is ignored, as device_buffer's).
struct timing_state {
  dsa::device_buffer<std::byte> flush;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  unsigned char fill = 0;

  timing_state() {
    int device = 0;
    DSA_CUDA_CHECK(cudaGetDevice(&device));
    int l2 = 0;
    DSA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
    const std::size_t bytes = std::max<std::size_t>(2 * static_cast<std::size_t>(l2), std::size_t{64} << 20);
    flush = dsa::device_buffer<std::byte>(static_cast<index_t>(bytes));
    DSA_CUDA_CHECK(cudaEventCreate(&start));
    DSA_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~timing_state() {
    if (start != nullptr) (void)cudaEventDestroy(start);
    if (stop != nullptr) (void)cudaEventDestroy(stop);
  }
  timing_state(const timing_state&) = delete;
  timing_state& operator=(const timing_state&) = delete;
};

timing_state& timing() {
  static timing_state s;
  return s;
}

}  // namespace

device_facts query_device() {
  int device = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  DSA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  device_facts f;
  f.name = prop.name;
  f.cc_major = prop.major;
  f.cc_minor = prop.minor;
  f.sm_count = prop.multiProcessorCount;
  f.l2_bytes = static_cast<std::size_t>(prop.l2CacheSize);
  f.global_bytes = prop.totalGlobalMem;
  f.memory_bus_bits = prop.memoryBusWidth;
  // The clocks left cudaDeviceProp in CUDA 13; the attributes have them on every version.
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&f.clock_khz, cudaDevAttrClockRate, device));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&f.memory_clock_khz, cudaDevAttrMemoryClockRate, device));
  DSA_CUDA_CHECK(cudaRuntimeGetVersion(&f.runtime_version));
  DSA_CUDA_CHECK(cudaDriverGetVersion(&f.driver_version));
  return f;
}

double time_cold(cudaStream_t stream, const std::function<void()>& launch) {
  timing_state& t = timing();
  // A different byte each time, so no layer of the memory system can treat the flush as a no-op.
  ++t.fill;
  DSA_CUDA_CHECK(cudaMemsetAsync(t.flush.data(), t.fill, t.flush.size_bytes(), stream));
  DSA_CUDA_CHECK(cudaEventRecord(t.start, stream));
  launch();
  DSA_CUDA_CHECK(cudaEventRecord(t.stop, stream));
  DSA_CUDA_CHECK(cudaEventSynchronize(t.stop));
  float ms = 0.0f;
  DSA_CUDA_CHECK(cudaEventElapsedTime(&ms, t.start, t.stop));
  return 1e-3 * static_cast<double>(ms);
}

void copy_d2d(cudaStream_t stream, void* dst, const void* src, std::size_t bytes) {
  DSA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

void fma_peak_f32(cudaStream_t stream, int blocks, int iters, float* out) {
  // |x| stays bounded: x -> 0.999999 x + 1e-7 contracts towards 0.1.
  fma_peak_kernel<float><<<blocks, fma_peak_threads, 0, stream>>>(0.999999f, 1e-7f, iters, out);
  DSA_CUDA_CHECK_LAUNCH();
}

void fma_peak_f64(cudaStream_t stream, int blocks, int iters, double* out) {
  fma_peak_kernel<double><<<blocks, fma_peak_threads, 0, stream>>>(0.999999, 1e-7, iters, out);
  DSA_CUDA_CHECK_LAUNCH();
}

void gemm_bf16_cublas(cublasHandle_t handle, cudaStream_t stream, int m, int n, int k, const bf16* a, const bf16* b,
                      bf16* c) {
  const float alpha = 1.0f;
  const float beta = 0.0f;
  DSA_CUBLAS_CHECK(cublasSetStream(handle, stream));
  DSA_CUBLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
  DSA_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a, CUDA_R_16BF, m, b, CUDA_R_16BF,
                                k, &beta, c, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace dsa_bench::cuda
