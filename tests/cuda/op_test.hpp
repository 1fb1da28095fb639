// Helpers of the CUDA op tests (test_ops_*.cpp): a stream per test, uploads and downloads of host
// vectors, fake device views for front-end checks that must fail before touching the device, and
// a bit-exact comparison (NaNs of any sign and payload equal) that reports the first mismatches,
// and the near-equality of the ops that differ from the CPU only by a rare transcendental rounding.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/memory.hpp"
#include "cuda/cuda_test.hpp"
#include "support/nan_bits.hpp"

namespace dsa_test {

/// A non-blocking stream of the test's own, so the ops run off the legacy default stream.
class test_stream {
 public:
  test_stream() { DSA_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~test_stream() { (void)cudaStreamDestroy(s_); }
  test_stream(const test_stream&) = delete;
  test_stream& operator=(const test_stream&) = delete;
  cudaStream_t get() const { return s_; }
  /// A backend on this stream with no cuBLAS handle (the linear tests and the transformer bring
  /// one), the linear path of linear_path_for_tests() and dsa::default_cuda_kernel_path.
  dsa::cuda_backend backend() const { return dsa::cuda_backend{s_, nullptr, linear_path_for_tests()}; }
  /// The same with the given kernels: cuda_kernel_path::exact for the tests that hold an op to
  /// the CPU's bits, both for those that compare the fast kernels with the exact ones.
  dsa::cuda_backend backend(dsa::cuda_kernel_path kernels) const {
    dsa::cuda_backend be = backend();
    be.kernels = kernels;
    return be;
  }

 private:
  cudaStream_t s_ = nullptr;
};

template <class T>
dsa::device_buffer<T> upload(const std::vector<T>& host, cudaStream_t s) {
  dsa::device_buffer<T> d(static_cast<dsa::index_t>(host.size()), s);
  dsa::copy_to_device(d, std::span<const T>(host), s);
  return d;
}

/// The buffer's contents once the stream has finished.
template <class T>
std::vector<T> download(const dsa::device_buffer<T>& d, cudaStream_t s) {
  return dsa::to_host(d, s);
}

/// The next fake device address: one counter for every element type and rank (a counter per
/// template instantiation would give views of different types the same address).
inline std::uintptr_t next_fake_device_address() {
  static std::uintptr_t next = std::uintptr_t{1} << 44;
  next += std::uintptr_t{1} << 32;
  return next;
}

/// A device view that points at no real memory: for calls that must throw in the front-end,
/// before any kernel could read it. Needs no GPU.
template <class T, std::size_t R>
dsa::device_view<T, R> fake_device_view(const dsa::index_t (&extents)[R]) {
  // Never dereferenced: an aligned, non-null address, 4 GiB apart from every other fake view so
  // the front-ends' aliasing checks see distinct buffers.
  return dsa::make_view<dsa::device_space>(reinterpret_cast<T*>(next_fake_device_address()), extents);
}

/// Bit-wise equality of two arrays of a trivially copyable type, where two NaNs of a floating-point
/// element type count as equal whatever their sign and payload (support/nan_bits.hpp); reports up
/// to five mismatches.
template <class T>
void check_bits_equal(const std::string& what, const std::vector<T>& device, const std::vector<T>& host) {
  static_assert(std::is_trivially_copyable_v<T>);
  REQUIRE(device.size() == host.size());
  std::size_t bad = 0;
  std::size_t first = 0;
  for (std::size_t i = 0; i < host.size(); ++i) {
    if (!same_bits_or_both_nan(device[i], host[i])) {
      if (bad == 0) first = i;
      if (++bad <= 5) {
        std::uint64_t d = 0, h = 0;
        std::memcpy(&d, &device[i], sizeof(T) < 8 ? sizeof(T) : 8);
        std::memcpy(&h, &host[i], sizeof(T) < 8 ? sizeof(T) : 8);
        std::ostringstream m;  // doctest's MESSAGE ignores stream manipulators
        m << what << ": element " << i << " differs: device bits 0x" << std::hex << d << ", host bits 0x" << h;
        MESSAGE(m.str());
      }
    }
  }
  INFO(what << ": " << bad << " of " << host.size() << " elements differ (first at " << first << ")");
  CHECK(bad == 0);
}

/// Distance in units of the last place: the difference of the order-preserving integer images.
inline std::int64_t ordered_float_bits(float f) {
  std::int32_t i = 0;
  std::memcpy(&i, &f, 4);
  return i < 0 ? -static_cast<std::int64_t>(i & 0x7FFFFFFF) : i;
}
inline std::int64_t ulps(dsa::bf16 a, dsa::bf16 b) {
  return std::llabs(ordered_float_bits(a.to_float()) - ordered_float_bits(b.to_float())) >> 16;
}
inline std::int64_t ulps(float a, float b) { return std::llabs(ordered_float_bits(a) - ordered_float_bits(b)); }

/// Equal (or both NaN) except at most `max_ulps` apart on at most `fraction` of the elements:
/// the parity of ops whose only non-shared arithmetic is a double transcendental (rope, swiglu,
/// sparse_mha_attention).
template <class T>
void check_nearly_same(const char* what, const std::vector<T>& dev, const std::vector<T>& host, std::int64_t max_ulps,
                       double fraction = 1e-4) {
  REQUIRE(dev.size() == host.size());
  std::size_t differ = 0, far = 0;
  for (std::size_t i = 0; i < host.size(); ++i) {
    if (same_bits_or_both_nan(dev[i], host[i])) continue;
    ++differ;
    if (is_nan_value(dev[i]) || is_nan_value(host[i]) || ulps(dev[i], host[i]) > max_ulps) {
      if (++far <= 5) {
        MESSAGE(what << ": element " << i << ": device " << dsa::to_float(dev[i]) << ", host "
                     << dsa::to_float(host[i]));
      }
    }
  }
  INFO(what << ": " << differ << " of " << host.size() << " differ, " << far << " by more than " << max_ulps << " ulp");
  CHECK(far == 0);
  CHECK(static_cast<double>(differ) <= std::max(2.0, fraction * static_cast<double>(host.size())));
}

}  // namespace dsa_test
