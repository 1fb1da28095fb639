// dsa::hadamard_transform on the CUDA backend: bit-identical to the CPU backend for float and bf16
// over every 2^m size, the 12/20/28/40 * 2^m sizes that fit a block's shared memory, batched and
// single rows, strided rows and in place; oversized rows rejected before any launch. Needs a
// GPU; skips cleanly without one (front-end checks: test_ops_frontend.cpp).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/cuda_test.hpp"
#include "cuda/op_test.hpp"
#include "dsa/cpu/hadamard.hpp"
#include "dsa/cuda/ops.hpp"
#include "dsa/ops/hadamard.hpp"
#include "support/random.hpp"

namespace {

using dsa::index_t;

// Rows of n values, row stride `stride` >= n (the gaps hold garbage the op must not touch).
template <class T>
void compare_with_cpu(index_t rows, index_t n, index_t stride, float scale, bool in_place, std::uint64_t seed) {
  CAPTURE(rows);
  CAPTURE(n);
  CAPTURE(stride);
  CAPTURE(in_place);
  const auto total = static_cast<std::size_t>(rows * stride);
  const std::vector<T> x = dsa_test::convert<T>(dsa_test::normal(total, seed, 2.0f));
  const std::vector<T> y0 = dsa_test::convert<T>(dsa_test::uniform(total, seed + 1, 5.0f, 6.0f));

  // CPU reference: y starts as y0, so untouched gaps keep y0's values on both backends.
  std::vector<T> expected = in_place ? x : y0;
  const dsa::host_view<const T, 2> hx(x.data(), {rows, n}, {stride, 1});
  const dsa::host_view<T, 2> hy(expected.data(), {rows, n}, {stride, 1});
  if (in_place) {
    dsa::hadamard_transform(dsa::cpu, hy, hy, scale);
  } else {
    dsa::hadamard_transform(dsa::cpu, hx, hy, scale);
  }

  dsa_test::test_stream stream;
  auto dx = dsa_test::upload(x, stream.get());
  auto dy = dsa_test::upload(in_place ? x : y0, stream.get());
  const dsa::device_view<T, 2> vx(dx.data(), {rows, n}, {stride, 1});
  const dsa::device_view<T, 2> vy(dy.data(), {rows, n}, {stride, 1});
  if (in_place) {
    dsa::hadamard_transform(stream.backend(), vy, vy, scale);
  } else {
    dsa::hadamard_transform(stream.backend(), vx, vy, scale);
  }
  dsa_test::check_bits_equal("y", dsa_test::download(dy, stream.get()), expected);
}

std::vector<index_t> sizes() {
  std::vector<index_t> s;
  for (index_t n = 1; n <= 32768; n *= 2) s.push_back(n);
  // The c * 2^m forms whose fp32 row fits 163 KB (sm_80's opt-in shared memory).
  for (index_t c : {12, 20, 28, 40}) {
    for (index_t p : {1, 2, 4, 8, 64, 256, 1024}) {
      if (dsa::is_hadamard_size(c * p) && c * p * 4 <= 163 * 1024) s.push_back(c * p);
    }
  }
  return s;
}

}  // namespace

TEST_CASE("cuda hadamard_transform: bit-identical to the CPU for every size, float and bf16") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  std::uint64_t seed = 100;
  for (const index_t n : sizes()) {
    // Under the sanitizers, above 256: the powers of two 2^m with m odd and 32768 (the largest),
    // and the c * 2^m forms up to 2048: sizes of every kind, an eighth of the n·log2(n) work.
    if (dsa_test::under_sanitizer() && n > 256) {
      const auto u = static_cast<std::uint64_t>(n);
      if (std::has_single_bit(u) ? !(n == 32768 || std::countr_zero(u) % 2 == 1) : n > 2048) continue;
    }
    // Several rows per block for short rows (and a ragged last tile), few for long ones (one under
    // the sanitizers).
    const index_t rows = n <= 256 ? 37 : dsa_test::full_or_sanitizer<index_t>(3, 1);
    compare_with_cpu<float>(rows, n, n, 1.0f, false, ++seed);
    compare_with_cpu<dsa::bf16>(rows, n, n, 1.0f / std::sqrt(static_cast<float>(n)), false, ++seed);
  }
}

TEST_CASE("cuda hadamard_transform: the indexer's rotate_activation shape (n = 128, bf16) at scale") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  // 4096 tokens x 64 heads flattened: many blocks, grid larger than the device.
  compare_with_cpu<dsa::bf16>(4096 * 64, 128, 128, 1.0f / std::sqrt(128.0f), false, 7);
}

TEST_CASE("cuda hadamard_transform: strided rows and in place") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  for (const index_t n : {index_t{8}, index_t{128}, index_t{1024}, index_t{20}, index_t{28 * 64}, index_t{16384}}) {
    compare_with_cpu<float>(5, n, n + 3, 0.5f, false, 11);
    compare_with_cpu<dsa::bf16>(5, n, n + 8, 0.25f, false, 12);
    compare_with_cpu<float>(9, n, n, 1.0f, true, 13);
    compare_with_cpu<dsa::bf16>(9, n, n + 1, 1.0f, true, 14);
  }
}

TEST_CASE("cuda hadamard_transform: sizes whose row exceeds shared memory are rejected before any launch") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  dsa_test::test_stream stream;
  const index_t n = 40 * 32768;  // 5 MB of fp32: more than any GPU's shared memory per block
  dsa::device_buffer<float> buf(2 * n, stream.get());
  const dsa::device_view<float, 2> v(buf.data(), {2, n});
  CHECK_THROWS_WITH_AS(dsa::hadamard_transform(stream.backend(), v, v, 1.0f),
                       doctest::Contains("dsa::hadamard_transform: x.extent(1) = 1310720; expected a size whose fp32 "
                                         "row fits the device's shared memory"),
                       dsa::error);
  CHECK(cudaStreamSynchronize(stream.get()) == cudaSuccess);
}
