// The FP8 quantizers on the CUDA backend: codes and scales bit-identical to the CPU backend for
// float and bf16, both scale formats, several group sizes, ragged 128 x 128 weight blocks, strided
// rows and poisoned groups (NaN, inf, zeros, subnormals); dequantization bit-identical too.
// Needs a GPU; skips cleanly without one (front-end checks: test_ops_frontend.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "cuda/cuda_test.hpp"
#include "cuda/op_test.hpp"
#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/cuda/ops.hpp"
#include "dsa/ops/fp8_quant.hpp"
#include "support/random.hpp"

namespace {

using dsa::fp8_e4m3;
using dsa::index_t;

// Values over many binades, with special values sprinkled in (every 97th a NaN, every 89th an
// infinity, a run of zeros, subnormals) when `poison` is set.
std::vector<float> test_values(std::size_t n, std::uint64_t seed, bool poison) {
  std::vector<float> v = dsa_test::normal(n, seed, 1.0f);
  const std::vector<float> e = dsa_test::uniform(n, seed + 1, -12.0f, 12.0f);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::ldexp(v[i], static_cast<int>(e[i]));
  if (poison) {
    for (std::size_t i = 0; i < n; i += 97) v[i] = std::numeric_limits<float>::quiet_NaN();
    for (std::size_t i = 45; i < n; i += 89) v[i] = (i % 2 ? -1.0f : 1.0f) * std::numeric_limits<float>::infinity();
    for (std::size_t i = 300; i < n && i < 300 + 256; ++i) v[i] = 0.0f;
    for (std::size_t i = 700; i < n && i < 700 + 64; ++i) v[i] = std::ldexp(1.0f, -140) * static_cast<float>(i % 7);
  }
  return v;
}

template <class T>
void check_act_quant(index_t rows, index_t cols, index_t row_stride, dsa::act_quant_config cfg, bool poison,
                     std::uint64_t seed) {
  CAPTURE(rows);
  CAPTURE(cols);
  CAPTURE(row_stride);
  CAPTURE(cfg.group_size);
  CAPTURE(static_cast<int>(cfg.format));
  const index_t groups = cols / cfg.group_size;
  const std::vector<T> x = dsa_test::convert<T>(test_values(static_cast<std::size_t>(rows * row_stride), seed, poison));
  std::vector<fp8_e4m3> q(static_cast<std::size_t>(rows * cols));
  std::vector<float> s(static_cast<std::size_t>(rows * groups));
  const dsa::host_view<const T, 2> hx(x.data(), {rows, cols}, {row_stride, 1});
  dsa::act_quant(dsa::cpu, hx, dsa::make_view(q.data(), {rows, cols}), dsa::make_view(s.data(), {rows, groups}), cfg);

  dsa_test::test_stream stream;
  auto dx = dsa_test::upload(x, stream.get());
  dsa::device_buffer<fp8_e4m3> dq(rows * cols, stream.get());
  dsa::device_buffer<float> ds(rows * groups, stream.get());
  dsa::act_quant(stream.backend(), dsa::device_view<const T, 2>(dx.data(), {rows, cols}, {row_stride, 1}),
                 dq.view({rows, cols}), ds.view({rows, groups}), cfg);
  dsa_test::check_bits_equal("q", dsa_test::download(dq, stream.get()), q);
  dsa_test::check_bits_equal("s", dsa_test::download(ds, stream.get()), s);

  // Dequantization of the CPU's codes and scales.
  std::vector<T> y(static_cast<std::size_t>(rows * cols));
  dsa::act_dequant(dsa::cpu, dsa::make_view(std::as_const(q).data(), {rows, cols}),
                   dsa::make_view(std::as_const(s).data(), {rows, groups}), dsa::make_view(y.data(), {rows, cols}),
                   cfg.group_size);
  auto dq2 = dsa_test::upload(q, stream.get());
  auto ds2 = dsa_test::upload(s, stream.get());
  dsa::device_buffer<T> dy(rows * cols, stream.get());
  dsa::act_dequant(stream.backend(), dq2.view({rows, cols}), ds2.view({rows, groups}), dy.view({rows, cols}),
                   cfg.group_size);
  dsa_test::check_bits_equal("y", dsa_test::download(dy, stream.get()), y);
}

template <class T>
void check_weight_quant(index_t rows, index_t cols, bool poison, std::uint64_t seed) {
  CAPTURE(rows);
  CAPTURE(cols);
  const index_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
  const std::vector<T> w = dsa_test::convert<T>(test_values(static_cast<std::size_t>(rows * cols), seed, poison));
  std::vector<fp8_e4m3> q(static_cast<std::size_t>(rows * cols));
  std::vector<float> s(static_cast<std::size_t>(br * bc));
  dsa::weight_quant(dsa::cpu, dsa::make_view(w.data(), {rows, cols}), dsa::make_view(q.data(), {rows, cols}),
                    dsa::make_view(s.data(), {br, bc}));
  std::vector<T> back(static_cast<std::size_t>(rows * cols));
  dsa::weight_dequant(dsa::cpu, dsa::make_view(std::as_const(q).data(), {rows, cols}),
                      dsa::make_view(std::as_const(s).data(), {br, bc}), dsa::make_view(back.data(), {rows, cols}));

  dsa_test::test_stream stream;
  auto dw = dsa_test::upload(w, stream.get());
  dsa::device_buffer<fp8_e4m3> dq(rows * cols, stream.get());
  dsa::device_buffer<float> ds(br * bc, stream.get());
  dsa::weight_quant(stream.backend(), dw.view({rows, cols}), dq.view({rows, cols}), ds.view({br, bc}));
  dsa::device_buffer<T> dback(rows * cols, stream.get());
  dsa::weight_dequant(stream.backend(), dq.view({rows, cols}), ds.view({br, bc}), dback.view({rows, cols}));
  dsa_test::check_bits_equal("q", dsa_test::download(dq, stream.get()), q);
  dsa_test::check_bits_equal("s", dsa_test::download(ds, stream.get()), s);
  dsa_test::check_bits_equal("w", dsa_test::download(dback, stream.get()), back);
}

}  // namespace

TEST_CASE("cuda act_quant / act_dequant: bit-identical to the CPU") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  std::uint64_t seed = 1;
  for (const auto format : {dsa::scale_format::ue8m0, dsa::scale_format::fp32}) {
    for (const bool poison : {false, true}) {
      check_act_quant<float>(16, 512, 512, {format, 128}, poison, ++seed);
      check_act_quant<dsa::bf16>(16, 512, 512, {format, 128}, poison, ++seed);
      check_act_quant<dsa::bf16>(7, 7168, 7168 + 64, {format, 128}, poison, ++seed);  // V3.2 hidden, strided
      check_act_quant<float>(33, 96, 100, {format, 32}, poison, ++seed);
      check_act_quant<float>(5, 1000, 1000, {format, 1000}, poison, ++seed);  // one group wider than a warp
      check_act_quant<dsa::bf16>(9, 21, 21, {format, 7}, poison, ++seed);    // groups narrower than a warp
    }
  }
  check_act_quant<dsa::bf16>(4096, 128, 128, {dsa::scale_format::ue8m0, 128}, false, 99);  // many groups
}

TEST_CASE("cuda weight_quant / weight_dequant: bit-identical to the CPU, ragged blocks") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  std::uint64_t seed = 50;
  for (const bool poison : {false, true}) {
    check_weight_quant<float>(320, 416, poison, ++seed);  // the golden shape
    check_weight_quant<dsa::bf16>(320, 416, poison, ++seed);
    check_weight_quant<float>(128, 128, poison, ++seed);
    check_weight_quant<dsa::bf16>(1, 1, poison, ++seed);
    check_weight_quant<float>(1000, 129, poison, ++seed);
  }
}
