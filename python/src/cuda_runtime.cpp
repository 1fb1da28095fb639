// The CUDA runtime side of the places (common.hpp), compiled only with DSA_ENABLE_CUDA: the
// current-device scope of a launch, the per-thread cuBLAS handles, the device count, and
// dsa._core's CUDA queries. Plain C++ (g++) against <cuda_runtime_api.h> and <cublas_v2.h>.
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common.hpp"
#include "dsa/cuda/error.hpp"

namespace dsa_py {

int cuda_device_count() noexcept { return dsa::device_count(); }

device_scope::device_scope(std::string_view op, int device) {
  const int n = cuda_device_count();
  if (device < 0 || device >= n) {
    dsa::fail(op, "device", "cuda:" + std::to_string(device),
              n == 0 ? std::string("a CUDA device; this process sees none (no GPU, or no CUDA driver new enough for "
                                   "this build)")
                     : "cuda:0 to cuda:" + std::to_string(n - 1) + " (the devices this process sees)");
  }
  int current = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) {
    DSA_CUDA_CHECK(cudaSetDevice(device));
    previous_ = current;
  }
}

device_scope::~device_scope() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

namespace {

/// Handles no thread holds, per device. Never destroyed (see thread_cublas_handle).
struct cublas_pool {
  std::mutex mutex;
  std::map<int, std::vector<cublasHandle_t>> idle;
};

cublas_pool& pool() {
  static auto* p = new cublas_pool;
  return *p;
}

/// The handles one thread holds; returned to the pool when the thread ends.
struct thread_handles {
  std::map<int, cublasHandle_t> held;
  ~thread_handles() {
    cublas_pool& p = pool();
    const std::lock_guard<std::mutex> lock(p.mutex);
    for (const auto& [device, h] : held) p.idle[device].push_back(h);
  }
};

}  // namespace

cublasHandle_t thread_cublas_handle(int device) {
  thread_local thread_handles mine;
  if (const auto it = mine.held.find(device); it != mine.held.end()) return it->second;
  cublasHandle_t h = nullptr;
  {
    cublas_pool& p = pool();
    const std::lock_guard<std::mutex> lock(p.mutex);
    auto& idle = p.idle[device];
    if (!idle.empty()) {
      h = idle.back();
      idle.pop_back();
    }
  }
  if (h == nullptr) DSA_CUBLAS_CHECK(cublasCreate(&h));  // on the current device: `device`
  mine.held.emplace(device, h);
  return h;
}

}  // namespace dsa_py
