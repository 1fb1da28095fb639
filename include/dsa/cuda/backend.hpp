// The CUDA backend value and device discovery.
//
// dsa::cuda_backend{stream} runs every op asynchronously on `stream` (nullptr = the legacy default
// stream) on the current device. Ops never allocate and never synchronise: scratch memory comes
// from the caller through *_workspace_size() and a workspace view, results are ready once the
// stream reaches them. Views are device views (dsa::device_view), so handing host memory to this
// backend is a compile error.
//
// The dense matrix products (dsa::linear) run on cuBLAS and need a handle in `blas`
// (dsa::cublas_handle, dsa/cuda/blas.hpp); every other op ignores it, so `cuda_backend{stream}`
// stays valid for them. fp8_linear's tensor-core path (with a workspace, kernels == fast) runs on
// cuBLASLt through `blaslt` (dsa::cublaslt_handle) and, where cuBLASLt has no algorithm, on
// cuBLAS's bf16 GEMM through `blas`. An op that uses the handle binds it to `stream` (cublasSetStream) before
// each call; as cuBLAS requires, one handle must not be used by two host threads at once.
// `linear = cuda_linear_path::simt` runs dsa::linear on dsa's own SIMT kernel instead, with no
// handle: slower, but every store is one that compute-sanitizer's initcheck sees (it misses those
// of cuBLAS's sm_90 GEMMs and reports every later read of their outputs), and the summation order
// is dsa's own, independent of the cuBLAS version.
//
// Host-only, and plain C++ apart from <cuda_runtime_api.h> and <cublas_v2.h>: g++ compiles it
// (the op implementations that launch kernels are .cuh and need nvcc).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"

DSA_NAMESPACE_BEGIN

/// Which kernels run dsa::linear on the CUDA backend (see the file comment).
enum class cuda_linear_path : unsigned char {
  cublas,  ///< cuBLAS where it has the types and strides, dsa's SIMT kernel elsewhere; needs `blas`
  simt,    ///< dsa's SIMT kernel for every call; `blas` is not used
};

/// Which kernels run the ops that have two: the exact SIMT kernels, bit-identical to the CPU
/// backend (the validation reference), or the fast tensor-core ones, checked against them with
/// the anchors' tolerances (docs/cuda.md, "Exact and fast kernels"). An op without a fast kernel,
/// or on a GPU its fast kernel does not support, runs its exact one.
enum class cuda_kernel_path : unsigned char {
  fast,   ///< tensor cores where the op has a fast kernel and the GPU supports it
  exact,  ///< the exact kernels everywhere
};

/// The kernels a cuda_backend runs unless told otherwise, and the default of every switch over
/// them (dsa_run and dsa_validate --cuda-kernels, Python's kernels=). Exact until the fast
/// kernels have passed their tests, golden replays and sanitizers on a GPU (docs/cuda.md,
/// "Exact and fast kernels"); then fast, in this one place.
inline constexpr cuda_kernel_path default_cuda_kernel_path = cuda_kernel_path::exact;

/// "fast" or "exact": the switches' spelling of `path`.
constexpr const char* cuda_kernel_path_name(cuda_kernel_path path) noexcept {
  return path == cuda_kernel_path::fast ? "fast" : "exact";
}

/// The CUDA backend: a stream on the current device, the cuBLAS handle of the ops that call
/// cuBLAS (null: those ops throw dsa::error; the others never need one), the kernels of
/// dsa::linear and the exact-or-fast choice of the ops that have both.
struct cuda_backend {
  using memory_space = device_space;
  static constexpr const char* name = "cuda";
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cuda_linear_path linear = cuda_linear_path::cublas;
  cuda_kernel_path kernels = default_cuda_kernel_path;
  /// The cuBLASLt handle of fp8_linear's block-scaled FP8 GEMM (dsa::cublaslt_handle); only its
  /// fast path with a workspace uses it (null there: dsa::error naming it).
  cublasLtHandle_t blaslt = nullptr;
};

static_assert(backend<cuda_backend>);

/// Number of CUDA devices usable by this process; 0 when there is no GPU, no driver, or a driver
/// too old for this runtime. Never throws.
inline int device_count() noexcept {
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  if (status != cudaSuccess) {
    // The answer is "none". Without a driver (cudaErrorInsufficientDriver) or a device
    // (cudaErrorNoDevice) the runtime's failed initialisation is permanent and every later call
    // reports it anyway; clearing the last error matters only for transient failures, which must
    // not resurface from an unrelated DSA_CUDA_CHECK_LAUNCH().
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

/// True when at least one CUDA device is usable. Never throws.
inline bool has_device() noexcept { return device_count() > 0; }

DSA_NAMESPACE_END
