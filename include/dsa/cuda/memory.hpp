// Device memory for callers of the CUDA backend: dsa::device_buffer<T> (RAII, move-only) and
// checked host <-> device copies.
//
// The ops themselves never allocate (docs/design.md "Workspaces"); this is for engines, tests, tools and benchmarks
// that need somewhere to put their tensors. Host-only and plain C++ apart from
// <cuda_runtime_api.h>, so g++ compiles it; <dsa/cuda/memory.cuh> is the same thing under the name
// the CUDA umbrella uses.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cuda/error.hpp"

DSA_NAMESPACE_BEGIN

/// An owning array of `size()` elements of T in device memory.
///
/// Two allocation modes:
///  - device_buffer<T>(n): cudaMalloc / cudaFree; usable from every stream.
///  - device_buffer<T>(n, stream): stream-ordered cudaMallocAsync / cudaFreeAsync on `stream`
///    (from the device's default memory pool). The memory may be used on `stream` at once and on
///    other streams once they are ordered after it; it is released in stream order when the
///    buffer is destroyed, so destroying it right after enqueueing work that uses it is safe.
/// The contents start uninitialised. A zero-element buffer allocates nothing (and needs no
/// device). Destruction never throws: a failing free (e.g. during process teardown, when the
/// runtime is already unloading) is ignored.
template <class T>
class device_buffer {
  static_assert(std::is_trivially_copyable_v<T> && !std::is_const_v<T> && !std::is_volatile_v<T>,
                "dsa::device_buffer<T>: T must be a non-const trivially copyable type");

 public:
  using value_type = T;

  device_buffer() = default;

  explicit device_buffer(index_t count) { allocate(count, nullptr, false); }

  device_buffer(index_t count, cudaStream_t stream) { allocate(count, stream, true); }

  ~device_buffer() { release_noexcept(); }

  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  device_buffer(device_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        stream_(std::exchange(other.stream_, nullptr)),
        stream_ordered_(std::exchange(other.stream_ordered_, false)) {}

  device_buffer& operator=(device_buffer&& other) noexcept {
    if (this != &other) {
      release_noexcept();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      stream_ = std::exchange(other.stream_, nullptr);
      stream_ordered_ = std::exchange(other.stream_ordered_, false);
    }
    return *this;
  }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  index_t size() const noexcept { return size_; }
  std::size_t size_bytes() const noexcept { return static_cast<std::size_t>(size_) * sizeof(T); }
  bool empty() const noexcept { return size_ == 0; }
  /// The stream a stream-ordered buffer is freed on (nullptr for cudaMalloc buffers).
  cudaStream_t stream() const noexcept { return stream_; }
  bool stream_ordered() const noexcept { return stream_ordered_; }

  /// Frees the memory now (stream-ordered buffers: in stream order), throwing dsa::cuda_error if
  /// the runtime reports a failure. The buffer is empty afterwards either way.
  void reset() {
    T* p = std::exchange(data_, nullptr);
    const bool ordered = std::exchange(stream_ordered_, false);
    cudaStream_t s = std::exchange(stream_, nullptr);
    size_ = 0;
    if (p == nullptr) return;
    if (ordered) {
      DSA_CUDA_CHECK(cudaFreeAsync(p, s));
    } else {
      DSA_CUDA_CHECK(cudaFree(p));
    }
  }

  /// Row-major view of the first product(extents) elements: buf.view({rows, cols}).
  template <std::size_t R>
  device_view<T, R> view(const index_t (&extents)[R]) {
    return device_view<T, R>(data_, checked_extents(extents));
  }
  template <std::size_t R>
  device_view<const T, R> view(const index_t (&extents)[R]) const {
    return device_view<const T, R>(data_, checked_extents(extents));
  }
  /// The whole buffer as a rank-1 view.
  device_view<T, 1> view() { return device_view<T, 1>(data_, {size_}); }
  device_view<const T, 1> view() const { return device_view<const T, 1>(data_, {size_}); }

 private:
  void allocate(index_t count, cudaStream_t stream, bool ordered) {
    constexpr index_t max_count = static_cast<index_t>(std::numeric_limits<std::size_t>::max() / sizeof(T) / 2);
    check(count >= 0 && count <= max_count, "device_buffer", "count", count,
          "a non-negative element count of at most " + std::to_string(max_count));
    if (count == 0) return;
    const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(T);
    void* p = nullptr;
    const cudaError_t status = ordered ? cudaMallocAsync(&p, bytes, stream) : cudaMalloc(&p, bytes);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();  // out of memory is not sticky: leave no stale error behind
      detail::throw_cuda_error(status,
                               std::string(ordered ? "cudaMallocAsync(" : "cudaMalloc(") + std::to_string(bytes) +
                                   " bytes)",
                               __FILE__, __LINE__);
    }
    data_ = static_cast<T*>(p);
    size_ = count;
    stream_ = stream;
    stream_ordered_ = ordered;
  }

  void release_noexcept() noexcept {
    if (data_ == nullptr) return;
    const cudaError_t status = stream_ordered_ ? cudaFreeAsync(data_, stream_) : cudaFree(data_);
    if (status != cudaSuccess) (void)cudaGetLastError();
    data_ = nullptr;
    size_ = 0;
    stream_ = nullptr;
    stream_ordered_ = false;
  }

  template <std::size_t R>
  std::array<index_t, R> checked_extents(const index_t (&extents)[R]) const {
    std::array<index_t, R> e{};
    bool ok = true;
    bool zero = false;
    for (std::size_t r = 0; r < R; ++r) {
      e[r] = extents[r];
      if (e[r] < 0) ok = false;
      if (e[r] == 0) zero = true;
    }
    // Multiply only while the product stays within the buffer, so it cannot overflow.
    index_t n = 1;
    for (std::size_t r = 0; ok && !zero && r < R; ++r) {
      if (n > size_ / e[r]) {
        ok = false;
        break;
      }
      n *= e[r];
    }
    if (!ok) {
      std::string shape = "[";
      for (std::size_t r = 0; r < R; ++r) shape += (r ? ", " : "") + std::to_string(e[r]);
      fail("device_buffer::view", "extents", shape + "]",
           "non-negative extents with at most " + std::to_string(size_) + " elements (the buffer's size)");
    }
    return e;
  }

  T* data_ = nullptr;
  index_t size_ = 0;
  cudaStream_t stream_ = nullptr;
  bool stream_ordered_ = false;
};

namespace detail {

template <class DstView, class SrcView>
void check_copy_views(std::string_view op, const DstView& dst, const SrcView& src) {
  check_valid(op, "dst", dst);
  check_valid(op, "src", src);
  if (src.extents() != dst.extents()) fail(op, "src.shape", shape_string(src), shape_string(dst) + " (dst.shape)");
  if (!src.is_contiguous()) fail(op, "src.strides", "non-contiguous", "a contiguous (row-major, unit-stride) view");
  if (!dst.is_contiguous()) fail(op, "dst.strides", "non-contiguous", "a contiguous (row-major, unit-stride) view");
}

inline void copy_bytes(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (bytes == 0) return;  // nothing to do, and no device needed for it
  DSA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
}

}  // namespace detail

// Copies are enqueued on `stream` with cudaMemcpyAsync. Host -> device returns once the source
// may be reused for pageable memory; for pinned memory the source must stay untouched until the
// stream reaches the copy. Device -> host into pinned memory is asynchronous: synchronise the
// stream before reading the destination (into pageable memory it completes before returning).

/// Host view -> device view of the same shape; both contiguous.
template <class T, std::size_t R>
void copy_to_device(device_view<T, R> dst, std::type_identity_t<host_view<const T, R>> src,
                    cudaStream_t stream = nullptr) {
  static_assert(!std::is_const_v<T>, "dsa::copy_to_device: the destination must be mutable");
  detail::check_copy_views("copy_to_device", dst, src);
  detail::copy_bytes(dst.data_handle(), src.data_handle(), static_cast<std::size_t>(src.size()) * sizeof(T),
                     cudaMemcpyHostToDevice, stream);
}

/// Device view -> host view of the same shape; both contiguous.
template <class T, std::size_t R>
void copy_to_host(host_view<T, R> dst, std::type_identity_t<device_view<const T, R>> src,
                  cudaStream_t stream = nullptr) {
  static_assert(!std::is_const_v<T>, "dsa::copy_to_host: the destination must be mutable");
  detail::check_copy_views("copy_to_host", dst, src);
  detail::copy_bytes(dst.data_handle(), src.data_handle(), static_cast<std::size_t>(src.size()) * sizeof(T),
                     cudaMemcpyDeviceToHost, stream);
}

/// Host array -> the whole buffer; the sizes must match.
template <class T>
void copy_to_device(device_buffer<T>& dst, std::type_identity_t<std::span<const T>> src, cudaStream_t stream = nullptr) {
  check(static_cast<index_t>(src.size()) == dst.size(), "copy_to_device", "src.size()", src.size(),
        std::to_string(dst.size()) + " (dst.size())");
  detail::copy_bytes(dst.data(), src.data(), dst.size_bytes(), cudaMemcpyHostToDevice, stream);
}

/// The whole buffer -> host array; the sizes must match.
template <class T>
void copy_to_host(std::type_identity_t<std::span<T>> dst, const device_buffer<T>& src, cudaStream_t stream = nullptr) {
  check(static_cast<index_t>(dst.size()) == src.size(), "copy_to_host", "dst.size()", dst.size(),
        std::to_string(src.size()) + " (src.size())");
  detail::copy_bytes(dst.data(), src.data(), src.size_bytes(), cudaMemcpyDeviceToHost, stream);
}

/// A new (cudaMalloc) buffer holding a copy of `src`, enqueued on `stream`.
template <class T>
device_buffer<std::remove_const_t<T>> to_device(std::span<T> src, cudaStream_t stream = nullptr) {
  using U = std::remove_const_t<T>;
  device_buffer<U> dst(static_cast<index_t>(src.size()));
  copy_to_device<U>(dst, std::span<const U>(src.data(), src.size()), stream);
  return dst;
}
template <class T, class A>
device_buffer<T> to_device(const std::vector<T, A>& src, cudaStream_t stream = nullptr) {
  return to_device(std::span<const T>(src), stream);
}

/// The buffer's contents as a host vector. Synchronises `stream`, so the result is complete.
template <class T>
std::vector<T> to_host(const device_buffer<T>& src, cudaStream_t stream = nullptr) {
  std::vector<T> dst(static_cast<std::size_t>(src.size()));
  copy_to_host<T>(std::span<T>(dst), src, stream);
  if (!src.empty()) DSA_CUDA_CHECK(cudaStreamSynchronize(stream));
  return dst;
}

DSA_NAMESPACE_END
