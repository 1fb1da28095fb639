// dsa::cublas_handle: an owned cuBLAS handle for dsa::cuda_backend::blas, and
// dsa::cublaslt_handle: an owned cuBLASLt handle for dsa::cuda_backend::blaslt.
//
//   dsa::cublas_handle blas;                            // cublasCreate on the current device
//   const dsa::cuda_backend be{stream, blas.get()};
//   dsa::linear(be, x, w, y);                           // cublasGemmEx on `stream`
//
// The ops that use the handle (dsa::linear) bind it to the backend's stream and to host pointer
// mode before every call, so one handle serves every stream of its device, from one host thread
// at a time (cuBLAS's own rule: a handle is not thread-safe). cuBLAS's default workspace is
// allocated by cublasCreate; to capture dsa::linear in a CUDA graph, give the handle a workspace
// of your own with cublasSetWorkspace, as cuBLAS documents for graph capture.
//
// fp8_linear's tensor-core path (cuda_backend::kernels == fast, with a workspace) multiplies on
// cuBLASLt's block-scaled FP8 GEMM through `blaslt` and falls back to cuBLAS's bf16 GEMM through
// `blas` where cuBLASLt has no algorithm (dsa/cuda/linear.cuh):
//
//   dsa::cublas_handle blas;
//   dsa::cublaslt_handle blaslt;
//   const dsa::cuda_backend be{stream, blas.get(), dsa::cuda_linear_path::cublas,
//                              dsa::cuda_kernel_path::fast, blaslt.get()};
//
// cuBLASLt takes its scratch memory from the caller on every call (fp8_linear's workspace), so
// such calls can be captured in a CUDA graph as they are.
//
// Host-only; g++ compiles it. Linking needs libcublas and libcublasLt (the dsa::cuda target links
// CUDA::cublas and CUDA::cublasLt).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <utility>

#include "dsa/core/config.hpp"
#include "dsa/cuda/error.hpp"

DSA_NAMESPACE_BEGIN

/// RAII owner of a cublasHandle_t: created by the constructor (throws dsa::cublas_error naming the
/// cuBLAS status, e.g. CUBLAS_STATUS_NOT_INITIALIZED without a device), destroyed by the
/// destructor. Move-only; a moved-from handle owns nothing and get() returns null.
class cublas_handle {
 public:
  cublas_handle() { DSA_CUBLAS_CHECK(cublasCreate(&handle_)); }
  ~cublas_handle() {
    // A failing destroy during teardown has no one to report to (as device_buffer's free).
    if (handle_ != nullptr) (void)cublasDestroy(handle_);
  }
  cublas_handle(const cublas_handle&) = delete;
  cublas_handle& operator=(const cublas_handle&) = delete;
  cublas_handle(cublas_handle&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  cublas_handle& operator=(cublas_handle&& o) noexcept {
    if (this != &o) {
      if (handle_ != nullptr) (void)cublasDestroy(handle_);
      handle_ = std::exchange(o.handle_, nullptr);
    }
    return *this;
  }

  /// The handle, for dsa::cuda_backend{stream, handle.get()} or direct cuBLAS calls.
  cublasHandle_t get() const noexcept { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

/// RAII owner of a cublasLtHandle_t (cublasLtCreate; throws dsa::cublas_error naming the status
/// when it fails), destroyed by the destructor. Move-only; a moved-from handle owns nothing.
class cublaslt_handle {
 public:
  cublaslt_handle() { DSA_CUBLAS_CHECK(cublasLtCreate(&handle_)); }
  ~cublaslt_handle() {
    if (handle_ != nullptr) (void)cublasLtDestroy(handle_);
  }
  cublaslt_handle(const cublaslt_handle&) = delete;
  cublaslt_handle& operator=(const cublaslt_handle&) = delete;
  cublaslt_handle(cublaslt_handle&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  cublaslt_handle& operator=(cublaslt_handle&& o) noexcept {
    if (this != &o) {
      if (handle_ != nullptr) (void)cublasLtDestroy(handle_);
      handle_ = std::exchange(o.handle_, nullptr);
    }
    return *this;
  }

  /// The handle, for dsa::cuda_backend::blaslt or direct cuBLASLt calls.
  cublasLtHandle_t get() const noexcept { return handle_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
};

DSA_NAMESPACE_END
