// dsa::cublas_handle: an owned cuBLAS handle for dsa::cuda_backend::blas.
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
// Host-only; g++ compiles it. Linking needs libcublas (the dsa::cuda target links CUDA::cublas).
#pragma once

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

DSA_NAMESPACE_END
