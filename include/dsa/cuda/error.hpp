// dsa::cuda_error and DSA_CUDA_CHECK: every CUDA runtime failure becomes an exception that names
// the call, where it was made and what the runtime said; dsa::cublas_error and DSA_CUBLAS_CHECK
// do the same for cuBLAS.
//
// Host-only (exceptions, std::string), but needs nothing beyond <cuda_runtime_api.h> and
// <cublas_v2.h>, plain C headers: g++ compiles it, so engines that never run nvcc can still use
// dsa's CUDA memory helpers.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"

DSA_NAMESPACE_BEGIN

/// A CUDA runtime call failed. Derives from dsa::error, so `catch (const dsa::error&)` sees every
/// dsa failure; code() gives the cudaError_t for callers that want to react to a specific one
/// (cudaErrorMemoryAllocation, ...).
class cuda_error : public error {
 public:
  cuda_error(cudaError_t code, const std::string& message) : error(message), code_(code) {}
  cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

namespace detail {

/// "dsa::cuda: cudaMalloc(&p, n) = cudaErrorMemoryAllocation (out of memory); expected cudaSuccess
/// (at file.cpp:42)" — the canonical dsa message, with the call in the argument's place.
inline std::string cuda_error_message(cudaError_t code, std::string_view call, const char* file, int line) {
  // cudaGetErrorName/String are table look-ups: they work without a driver and never fail.
  std::string value = cudaGetErrorName(code);
  value += " (";
  value += cudaGetErrorString(code);
  value += ")";
  std::string expected = "cudaSuccess (at ";
  expected += file;
  expected += ":";
  expected += std::to_string(line);
  expected += ")";
  return error_message("cuda", call, value, expected);
}

[[noreturn]] inline void throw_cuda_error(cudaError_t code, std::string_view call, const char* file, int line) {
  throw cuda_error(code, cuda_error_message(code, call, file, line));
}

}  // namespace detail

/// A cuBLAS call failed. Derives from dsa::error; status() gives the cublasStatus_t.
class cublas_error : public error {
 public:
  cublas_error(cublasStatus_t status, const std::string& message) : error(message), status_(status) {}
  cublasStatus_t status() const noexcept { return status_; }

 private:
  cublasStatus_t status_;
};

namespace detail {

/// The enumerator's name. A table of our own rather than cublasGetStatusName, so that formatting
/// an error needs neither libcublas nor a working device.
inline const char* cublas_status_name(cublasStatus_t status) noexcept {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_<unknown>";
  }
}

/// "dsa::cuda: cublasCreate(&h_) = CUBLAS_STATUS_NOT_INITIALIZED; expected CUBLAS_STATUS_SUCCESS
/// (at file.hpp:42)".
inline std::string cublas_error_message(cublasStatus_t status, std::string_view call, const char* file, int line) {
  std::string expected = "CUBLAS_STATUS_SUCCESS (at ";
  expected += file;
  expected += ":";
  expected += std::to_string(line);
  expected += ")";
  return error_message("cuda", call, std::string_view(cublas_status_name(status)), expected);
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, std::string_view call, const char* file, int line) {
  throw cublas_error(status, cublas_error_message(status, call, file, line));
}

}  // namespace detail

DSA_NAMESPACE_END

/// Evaluates a CUDA runtime call once and throws dsa::cuda_error unless it returned cudaSuccess.
#define DSA_CUDA_CHECK(expr)                                                          \
  do {                                                                                \
    const cudaError_t dsa_cuda_check_status_ = (expr);                                \
    if (dsa_cuda_check_status_ != cudaSuccess) {                                      \
      ::dsa::detail::throw_cuda_error(dsa_cuda_check_status_, #expr, __FILE__, __LINE__); \
    }                                                                                 \
  } while (0)

/// After a <<<...>>> launch: a bad configuration (too many threads, too much shared memory) is
/// reported only through cudaGetLastError, which this reads (and so clears, as it is ours).
#define DSA_CUDA_CHECK_LAUNCH() DSA_CUDA_CHECK(cudaGetLastError())

/// Evaluates a cuBLAS call once and throws dsa::cublas_error unless it returned
/// CUBLAS_STATUS_SUCCESS.
#define DSA_CUBLAS_CHECK(expr)                                                              \
  do {                                                                                      \
    const cublasStatus_t dsa_cublas_check_status_ = (expr);                                 \
    if (dsa_cublas_check_status_ != CUBLAS_STATUS_SUCCESS) {                                \
      ::dsa::detail::throw_cublas_error(dsa_cublas_check_status_, #expr, __FILE__, __LINE__); \
    }                                                                                       \
  } while (0)
