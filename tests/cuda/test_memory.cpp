// device_buffer and the copies with real device memory. Needs a GPU; skips cleanly without one.
#include <doctest/doctest.h>

#include <cstdint>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "cuda/cuda_test.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/memory.hpp"

namespace {

class test_stream {
 public:
  test_stream() { DSA_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~test_stream() { (void)cudaStreamDestroy(s_); }
  test_stream(const test_stream&) = delete;
  test_stream& operator=(const test_stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

std::vector<std::int32_t> iota(std::size_t n, std::int32_t first) {
  std::vector<std::int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

}  // namespace

TEST_CASE("device_buffer round trip with cudaMalloc") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  const auto host = iota(1000, -17);
  dsa::device_buffer<std::int32_t> d(1000);
  CHECK(d.size() == 1000);
  CHECK(d.size_bytes() == 4000);
  CHECK_FALSE(d.stream_ordered());
  CHECK(d.data() != nullptr);
  dsa::copy_to_device(d, std::span<const std::int32_t>(host));
  CHECK(dsa::to_host(d) == host);

  // The same data through views, with a reshape.
  std::vector<std::int32_t> back(1000, 0);
  dsa::copy_to_host(dsa::host_view<std::int32_t, 2>(back.data(), {10, 100}), std::as_const(d).view({10, 100}));
  DSA_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(back == host);

  // A prefix view.
  std::vector<std::int32_t> prefix(6, 0);
  dsa::copy_to_host(dsa::host_view<std::int32_t, 2>(prefix.data(), {2, 3}), std::as_const(d).view({2, 3}));
  DSA_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(prefix == std::vector<std::int32_t>(host.begin(), host.begin() + 6));
  CHECK_THROWS_AS(d.view({10, 101}), dsa::error);
}

TEST_CASE("stream-ordered device_buffer, moves and reset") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  test_stream stream;
  const cudaStream_t s = stream.get();
  const auto host = iota(4096, 3);

  dsa::device_buffer<std::int32_t> a(4096, s);
  CHECK(a.stream_ordered());
  CHECK(a.stream() == s);
  dsa::copy_to_device(a, std::span<const std::int32_t>(host), s);

  dsa::device_buffer<std::int32_t> b(std::move(a));
  CHECK(a.empty());  // NOLINT(bugprone-use-after-move): a moved-from buffer is empty by contract
  CHECK(a.data() == nullptr);
  CHECK(b.size() == 4096);
  CHECK(dsa::to_host(b, s) == host);

  dsa::device_buffer<std::int32_t> c(16, s);
  c = std::move(b);  // frees c's old memory in stream order
  CHECK(c.size() == 4096);
  CHECK(dsa::to_host(c, s) == host);

  c.reset();
  CHECK(c.empty());
  DSA_CUDA_CHECK(cudaStreamSynchronize(s));
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("to_device copies a host vector") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  const std::vector<float> host{1.5f, -2.0f, 3.25f};
  const auto d = dsa::to_device(host);
  CHECK(d.size() == 3);
  CHECK(dsa::to_host(d) == host);
}

TEST_CASE("an impossible allocation throws cuda_error and leaves the runtime usable") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  // 2^60 bytes: more than any device has.
  const dsa::index_t huge = dsa::index_t{1} << 58;
  try {
    dsa::device_buffer<float> d(huge);
    FAIL("allocating 2^60 bytes succeeded");
  } catch (const dsa::cuda_error& e) {
    CHECK(e.code() == cudaErrorMemoryAllocation);
    CHECK(std::string(e.what()).find("cudaMalloc(1152921504606846976 bytes)") != std::string::npos);
  }
  CHECK(cudaGetLastError() == cudaSuccess);
  dsa::device_buffer<float> ok(256);
  CHECK(ok.size() == 256);
}
