// The CUDA backend's host side: backend value, device discovery, errors and the argument checks
// of device_buffer and the copies. Everything here runs without a GPU (each check fails before
// any device is touched); device_buffer with real memory is tested in test_memory.cpp.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda/cuda_test.hpp"
#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/memory.hpp"

namespace {

// The backend's memory space is in the type: a host view must not convert to a device one.
static_assert(dsa::backend<dsa::cuda_backend>);
static_assert(std::is_same_v<dsa::cuda_backend::memory_space, dsa::device_space>);
static_assert(std::is_convertible_v<dsa::device_view<float, 2>, dsa::in_view<dsa::cuda_backend, float, 2>>);
static_assert(!std::is_convertible_v<dsa::host_view<float, 2>, dsa::in_view<dsa::cuda_backend, float, 2>>);
static_assert(!std::is_convertible_v<dsa::host_view<float, 2>, dsa::out_view<dsa::cuda_backend, float, 2>>);
static_assert(std::is_nothrow_move_constructible_v<dsa::device_buffer<float>>);
static_assert(std::is_nothrow_move_assignable_v<dsa::device_buffer<float>>);
static_assert(!std::is_copy_constructible_v<dsa::device_buffer<float>>);
static_assert(std::is_base_of_v<dsa::error, dsa::cuda_error>);

cudaError_t count_calls(int& calls, cudaError_t result) {
  ++calls;
  return result;
}

}  // namespace

TEST_CASE("cuda_backend is a value holding a stream") {
  const dsa::cuda_backend be{};
  CHECK(be.stream == nullptr);
  CHECK(std::string(dsa::cuda_backend::name) == "cuda");
}

TEST_CASE("device discovery never throws and leaves no error behind") {
  int n = -1;
  CHECK_NOTHROW(n = dsa::device_count());
  CHECK(n >= 0);
  CHECK(dsa::has_device() == (n > 0));
  CHECK(dsa_test::cuda_device_present() == (n > 0));
  if (n > 0) {
    CHECK(cudaGetLastError() == cudaSuccess);
  } else {
    // No driver or no device: the runtime's failed initialisation is permanent, and every call
    // (cudaGetLastError included) reports it. dsa::device_count() still answered 0 quietly.
    const cudaError_t e = cudaGetLastError();
    CHECK((e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || e == cudaSuccess));
    MESSAGE("runtime state without a device: " << std::string(cudaGetErrorName(e)));
  }
  MESSAGE("CUDA devices visible: " << n);
}

TEST_CASE("DSA_CUDA_CHECK throws cuda_error naming the call, the error and the place") {
  int calls = 0;
  CHECK_NOTHROW(DSA_CUDA_CHECK(count_calls(calls, cudaSuccess)));
  CHECK(calls == 1);

  calls = 0;
  const int line = __LINE__ + 2;
  try {
    DSA_CUDA_CHECK(count_calls(calls, cudaErrorInvalidValue));
    FAIL("DSA_CUDA_CHECK did not throw");
  } catch (const dsa::cuda_error& e) {
    CHECK(calls == 1);  // the expression is evaluated once
    CHECK(e.code() == cudaErrorInvalidValue);
    const std::string m = e.what();
    CHECK(m.rfind("dsa::cuda: count_calls(calls, cudaErrorInvalidValue) = cudaErrorInvalidValue (", 0) == 0);
    CHECK(m.find(cudaGetErrorString(cudaErrorInvalidValue)) != std::string::npos);
    CHECK(m.find("; expected cudaSuccess (at ") != std::string::npos);
    CHECK(m.find("test_runtime.cpp:" + std::to_string(line) + ")") != std::string::npos);
  }

  // A cuda_error is a dsa::error: one catch clause sees every dsa failure.
  CHECK_THROWS_WITH_AS(DSA_CUDA_CHECK(cudaErrorMemoryAllocation), doctest::Contains("cudaErrorMemoryAllocation"),
                       dsa::error);
}

TEST_CASE("device_buffer without memory needs no device") {
  dsa::device_buffer<float> a;
  CHECK(a.empty());
  CHECK(a.data() == nullptr);
  CHECK(a.size() == 0);
  CHECK(a.size_bytes() == 0);
  CHECK_FALSE(a.stream_ordered());

  dsa::device_buffer<float> b(0);
  dsa::device_buffer<std::uint16_t> c(0, nullptr);
  CHECK(b.empty());
  CHECK(c.empty());
  CHECK(c.data() == nullptr);

  dsa::device_buffer<float> d(std::move(b));
  a = std::move(d);
  CHECK(a.empty());
  CHECK_NOTHROW(a.reset());

  // Zero-element views of an empty buffer are fine; anything larger is not.
  CHECK(a.view({0, 7}).extent(1) == 7);
  CHECK(a.view().size() == 0);
  CHECK(std::as_const(a).view({3, 0, 2}).size() == 0);
  CHECK_THROWS_WITH_AS(a.view({2, 3}),
                       doctest::Contains("dsa::device_buffer::view: extents = [2, 3]; expected non-negative extents "
                                         "with at most 0 elements"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(a.view({-1}), doctest::Contains("extents = [-1]"), dsa::error);
}

TEST_CASE("device_buffer rejects bad element counts before allocating") {
  CHECK_THROWS_WITH_AS(dsa::device_buffer<float>(-5),
                       doctest::Contains("dsa::device_buffer: count = -5; expected a non-negative element count"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(dsa::device_buffer<double>(std::numeric_limits<dsa::index_t>::max(), nullptr),
                       doctest::Contains("dsa::device_buffer: count = 9223372036854775807"), dsa::error);
}

TEST_CASE("copies check sizes, shapes and contiguity before touching the device") {
  dsa::device_buffer<float> empty;
  std::vector<float> host(6, 1.0f);

  CHECK_THROWS_WITH_AS(dsa::copy_to_device(empty, std::span<const float>(host)),
                       doctest::Contains("dsa::copy_to_device: src.size() = 6; expected 0 (dst.size())"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::copy_to_host(std::span<float>(host), empty),
                       doctest::Contains("dsa::copy_to_host: dst.size() = 6; expected 0 (src.size())"), dsa::error);

  // Zero-byte copies are no-ops and need no device.
  CHECK_NOTHROW(dsa::copy_to_device(empty, std::span<const float>()));
  CHECK(dsa::to_host(empty).empty());
  CHECK(dsa::to_device(std::vector<float>{}).empty());

  // Views: the device side is a fabricated pointer that must never be dereferenced, as every
  // check below fails first.
  auto* fake = reinterpret_cast<float*>(std::uintptr_t{0x1000});
  const dsa::device_view<float, 2> dev(fake, {2, 3});
  const dsa::host_view<float, 2> h23(host.data(), {2, 3});
  const dsa::host_view<float, 2> h32(host.data(), {3, 2});
  CHECK_THROWS_WITH_AS(dsa::copy_to_device(dev, h32),
                       doctest::Contains("dsa::copy_to_device: src.shape = [3, 2]; expected [2, 3] (dst.shape)"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(dsa::copy_to_host(h32, dev),
                       doctest::Contains("dsa::copy_to_host: src.shape = [2, 3]; expected [3, 2] (dst.shape)"),
                       dsa::error);
  const dsa::host_view<float, 2> strided(host.data(), {2, 2}, {3, 1});
  const dsa::device_view<float, 2> dev22(fake, {2, 2});
  CHECK_THROWS_WITH_AS(dsa::copy_to_device(dev22, strided),
                       doctest::Contains("dsa::copy_to_device: src.strides = non-contiguous"), dsa::error);
  const dsa::device_view<float, 2> dev_strided(fake, {2, 2}, {4, 1});
  const dsa::host_view<float, 2> h22(host.data(), {2, 2});
  CHECK_THROWS_WITH_AS(dsa::copy_to_host(h22, dev_strided),
                       doctest::Contains("dsa::copy_to_host: src.strides = non-contiguous"), dsa::error);
  const dsa::device_view<float, 2> dev_null(nullptr, {2, 3});
  CHECK_THROWS_WITH_AS(dsa::copy_to_device(dev_null, h23), doctest::Contains("dsa::copy_to_device: dst.data = null"),
                       dsa::error);
  CHECK_NOTHROW(dsa::copy_to_device(dsa::device_view<float, 2>(fake, {0, 3}), dsa::host_view<const float, 2>(host.data(), {0, 3})));
}
