// The memory the layers of the forward pass work in, whatever the backend: owning buffers in the
// backend's memory space, sub-views, row copies, and the few transfers between host and backend
// memory the forward pass makes (small index arrays, the one-time transpose of W_UK, observer
// copies). layer_memory<B> is the whole interface: specialised here for the CPU backend and in
// dsa/model/cuda/layer_memory.hpp for the CUDA backend, so one set of layers
// (dsa/model/layers/*.hpp) serves both.
//
// Buffers live for one layer call (the CUDA ones are stream-ordered allocations from the device
// pool, the host ones std::vector): allocation is allowed in the model, never inside an op.
//
// Portable (no op implementation, no CUDA runtime). Part of the dsa::model target.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

/// The layers' memory on backend B (specialisations below and in dsa/model/cuda/layer_memory.hpp).
template <class B>
struct layer_memory;

/// An owning array of n elements of T in host memory, with device_buffer's view() interface.
template <class T>
class host_buffer {
 public:
  host_buffer() = default;
  explicit host_buffer(index_t count) : v_(static_cast<std::size_t>(count)) {}

  T* data() noexcept { return v_.data(); }
  const T* data() const noexcept { return v_.data(); }
  index_t size() const noexcept { return static_cast<index_t>(v_.size()); }

  /// Row-major view of the first product(extents) elements: buf.view({rows, cols}).
  template <std::size_t R>
  host_view<T, R> view(const index_t (&extents)[R]) {
    return host_view<T, R>(v_.data(), checked(extents));
  }
  template <std::size_t R>
  host_view<const T, R> view(const index_t (&extents)[R]) const {
    return host_view<const T, R>(v_.data(), checked(extents));
  }

 private:
  template <std::size_t R>
  std::array<index_t, R> checked(const index_t (&extents)[R]) const {
    std::array<index_t, R> e{};
    index_t n = 1;
    for (std::size_t r = 0; r < R; ++r) {
      e[r] = extents[r];
      n *= e[r];
    }
    if (n > size()) fail("model::host_buffer::view", "elements", n, "at most " + std::to_string(size()) + " (the buffer's size)");
    return e;
  }
  std::vector<T> v_;
};

template <>
struct layer_memory<cpu_backend> {
  template <class T>
  using buffer = host_buffer<T>;

  /// Whether the layers pass the ops' optional workspaces (fp8_linear, topk_indices). The CPU
  /// backend ignores them (its kernels keep host scratch of their own), so the layers do not
  /// allocate them.
  static constexpr bool op_workspaces = false;
  /// Whether the MoE layers of decode steps group their tokens by expert on the device
  /// (moe_experts_grouped_on_device, dsa/model/cuda/moe.cuh) instead of on the host
  /// (group_by_expert).
  static constexpr bool device_grouping = false;
  static bool fast_kernels(const cpu_backend&) { return false; }

  template <class T>
  static buffer<T> make(const cpu_backend&, index_t count) {
    return buffer<T>(count);
  }

  /// dst = src for [rows, cols] views with unit-stride rows.
  template <class T>
  static void copy_rows(const cpu_backend&, host_view<const T, 2> src, host_view<T, 2> dst) {
    check(src.extents() == dst.extents(), "model::copy_rows", "src.shape", shape_string(src),
          shape_string(dst) + " (dst.shape)");
    for (index_t i = 0; i < src.extent(0); ++i) {
      if (src.extent(1) > 0) std::memcpy(dst.row(i), src.row(i), sizeof(T) * static_cast<std::size_t>(src.extent(1)));
    }
  }

  /// The elements of a contiguous view, on the host.
  template <class T, std::size_t R>
  static std::vector<T> to_host(const cpu_backend&, host_view<const T, R> v) {
    return std::vector<T>(v.data_handle(), v.data_handle() + v.size());
  }

  /// A host array as a buffer of the backend.
  template <class T>
  static buffer<T> upload(const cpu_backend&, std::span<const T> host) {
    buffer<T> b(static_cast<index_t>(host.size()));
    if (!host.empty()) std::memcpy(b.data(), host.data(), host.size() * sizeof(T));
    return b;
  }

  /// The same where the CUDA backend would not wait (upload_async): a copy on the host.
  template <class T>
  static buffer<T> upload_async(const cpu_backend& be, std::span<const T> host) {
    return upload(be, host);
  }

  /// Sets every element of a contiguous view to zero bits.
  template <class T>
  static void fill_zero(const cpu_backend&, host_view<T, 1> v) {
    if (v.size() > 0) std::memset(static_cast<void*>(v.data_handle()), 0, static_cast<std::size_t>(v.size()) * sizeof(T));
  }

  /// Waits for the work enqueued so far (the phase timers': nothing to wait for on the CPU).
  static void wait(const cpu_backend&) {}
  /// Waits for the work enqueued so far and reports its failure (nothing to do on the CPU).
  static void finish(const cpu_backend&) {}
};

/// The owning buffer type of backend B.
template <class B, class T>
using layer_buffer = typename layer_memory<B>::template buffer<T>;

/// A [rows, cols] sub-view of a row-major 2-D view.
template <class T, class Space>
tensor_view<T, 2, Space> block(tensor_view<T, 2, Space> v, index_t row0, index_t col0, index_t rows, index_t cols) {
  return tensor_view<T, 2, Space>(v.data_handle() + row0 * v.stride(0) + col0, {rows, cols}, {v.stride(0), 1});
}

}  // namespace model
DSA_NAMESPACE_END
