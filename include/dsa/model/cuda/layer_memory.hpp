// layer_memory<cuda_backend>: the memory of the forward pass's layers on the CUDA backend
// (dsa/model/layers/memory.hpp has the interface and the CPU one). Buffers are stream-ordered
// device_buffers on the backend's stream; copies are enqueued on it; upload_async() sends small
// host arrays without waiting (as kernel parameters); to_host() and upload() wait (the forward
// pass calls them for the logits, an observer's copies, the prefill MoE's routing and the
// one-time decode weights).
//
// Host-only C++ (g++ or nvcc). Part of the dsa::model and dsa::cuda targets.
#pragma once

#include <cuda_runtime_api.h>

#include <span>
#include <vector>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/memory.hpp"
#include "dsa/model/layers/memory.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

namespace detail {
/// Enqueues dst[0, n) = src as kernel launches whose parameters carry the bytes: nothing waits,
/// `src` may go at once, and a CUDA graph can capture it. Defined in dsa/model/cuda/host_copy.cuh
/// (nvcc), which the translation unit that compiles transformer<cuda_backend> includes.
template <class T>
void enqueue_host_copy(T* dst, std::span<const T> src, cudaStream_t stream);
}  // namespace detail

template <>
struct layer_memory<cuda_backend> {
  template <class T>
  using buffer = device_buffer<T>;

  /// The layers give the ops that can use scratch memory their workspaces (fp8_linear's
  /// tensor-core path, topk_indices' split over many blocks): stream-ordered buffers of one call.
  static constexpr bool op_workspaces = true;
  /// The MoE layers of decode steps group their tokens by expert with a kernel
  /// (moe_experts_grouped_on_device, dsa/model/cuda/moe.cuh).
  static constexpr bool device_grouping = true;
  /// Whether the backend runs the tensor-core kernels (then fp8_linear gets its workspace).
  static bool fast_kernels(const cuda_backend& be) { return be.kernels == cuda_kernel_path::fast; }

  template <class T>
  static buffer<T> make(const cuda_backend& be, index_t count) {
    return buffer<T>(count, be.stream);
  }

  /// dst = src for [rows, cols] device views with unit-stride rows: one cudaMemcpy2DAsync.
  template <class T>
  static void copy_rows(const cuda_backend& be, device_view<const T, 2> src, device_view<T, 2> dst) {
    check(src.extents() == dst.extents(), "model::copy_rows", "src.shape", shape_string(src),
          shape_string(dst) + " (dst.shape)");
    if (src.empty()) return;
    DSA_CUDA_CHECK(cudaMemcpy2DAsync(dst.data_handle(), static_cast<std::size_t>(dst.stride(0)) * sizeof(T),
                                     src.data_handle(), static_cast<std::size_t>(src.stride(0)) * sizeof(T),
                                     static_cast<std::size_t>(src.extent(1)) * sizeof(T),
                                     static_cast<std::size_t>(src.extent(0)), cudaMemcpyDeviceToDevice, be.stream));
  }

  /// The elements of a contiguous device view, on the host (waits for the stream).
  template <class T, std::size_t R>
  static std::vector<T> to_host(const cuda_backend& be, device_view<const T, R> v) {
    std::vector<T> out(static_cast<std::size_t>(v.size()));
    copy_to_host(host_view<T, R>(out.data(), v.extents()), v, be.stream);
    DSA_CUDA_CHECK(cudaStreamSynchronize(be.stream));
    return out;
  }

  /// A host array copied into a new stream-ordered buffer (waits for the copy: `host` is
  /// pageable memory its caller may free at once).
  template <class T>
  static buffer<T> upload(const cuda_backend& be, std::span<const T> host) {
    buffer<T> b(static_cast<index_t>(host.size()), be.stream);
    copy_to_device(b, host, be.stream);
    DSA_CUDA_CHECK(cudaStreamSynchronize(be.stream));
    return b;
  }

  /// Arrays up to this size go as kernel parameters (about 4 KB per launch); a larger one (a long
  /// prefill's positions or ranges) is one copy and a wait, which costs less than its launches.
  static constexpr std::size_t upload_async_max_bytes = std::size_t{64} << 10;

  /// A small host array (positions, token ids, ranges: a few KB) copied into a new stream-ordered
  /// buffer without waiting: the bytes travel as kernel parameters (dsa/model/cuda/host_copy.cuh),
  /// so `host` may go at once and a CUDA graph can capture the copy. Above
  /// upload_async_max_bytes, upload().
  template <class T>
  static buffer<T> upload_async(const cuda_backend& be, std::span<const T> host) {
    if (host.size_bytes() > upload_async_max_bytes) return upload(be, host);
    buffer<T> b(static_cast<index_t>(host.size()), be.stream);
    if (!host.empty()) detail::enqueue_host_copy(b.data(), host, be.stream);
    return b;
  }

  /// Sets every element of a contiguous device view to zero bits (on the stream).
  template <class T>
  static void fill_zero(const cuda_backend& be, device_view<T, 1> v) {
    if (v.size() > 0) {
      DSA_CUDA_CHECK(cudaMemsetAsync(v.data_handle(), 0, static_cast<std::size_t>(v.size()) * sizeof(T), be.stream));
    }
  }

  /// Waits for the work enqueued so far and throws dsa::cuda_error if any of it failed.
  static void finish(const cuda_backend& be) { DSA_CUDA_CHECK(cudaStreamSynchronize(be.stream)); }

  /// Waits for the work enqueued so far, so that a phase timer charges device time. A failing
  /// wait is not thrown here (timers call it from destructors): the error of a faulting kernel
  /// is sticky, and the next checked call reports it.
  static void wait(const cuda_backend& be) { (void)cudaStreamSynchronize(be.stream); }
};

}  // namespace model
DSA_NAMESPACE_END
