// lightning_indexer_weights (family "indexer", docs/architecture.md) on the CUDA backend against
// the CPU backend: bit-identical for m up to 4096 rows of 64 heads, strided and in place (the
// output over proj). Front-end checks with device views run without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/cuda_test.hpp"
#include "cuda/op_test.hpp"
#include "dsa/cpu/indexer_weights.hpp"
#include "dsa/cuda/ops.hpp"
#include "dsa/ops/indexer_weights.hpp"
#include "support/random.hpp"

namespace {

using dsa::index_t;

}  // namespace

TEST_CASE("cuda lightning_indexer_weights: bit-identical to the CPU, strided and in place") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  const float head_scale = 1.0f / std::sqrt(64.0f);
  const float dim_scale = 1.0f / std::sqrt(128.0f);
  for (const index_t m : {index_t{1}, index_t{37}, index_t{4096}}) {
    for (const index_t stride : {index_t{64}, index_t{70}}) {
      for (const bool in_place : {false, true}) {
        CAPTURE(m);
        CAPTURE(stride);
        CAPTURE(in_place);
        const index_t H = 64;
        const auto size = static_cast<std::size_t>(m * stride);
        const auto proj = dsa_test::normal(size, static_cast<std::uint64_t>(m + stride), 3.0f);
        auto q_scale = dsa_test::uniform(size, static_cast<std::uint64_t>(m * stride), 1e-4f, 0.01f);
        q_scale[0] = 0.0f;
        std::vector<float> expected = in_place ? proj : std::vector<float>(size, -3.0f);
        const dsa::host_view<const float, 2> hp(proj.data(), {m, H}, {stride, 1});
        const dsa::host_view<const float, 2> hq(q_scale.data(), {m, H}, {stride, 1});
        const dsa::host_view<float, 2> hw(expected.data(), {m, H}, {stride, 1});
        dsa::lightning_indexer_weights(dsa::cpu, in_place ? dsa::host_view<const float, 2>(hw) : hp, hq, hw, head_scale,
                                       dim_scale);

        dsa_test::test_stream stream;
        auto dp = dsa_test::upload(proj, stream.get());
        auto dq = dsa_test::upload(q_scale, stream.get());
        auto dw = dsa_test::upload(std::vector<float>(size, -3.0f), stream.get());
        const dsa::device_view<float, 2> vp(dp.data(), {m, H}, {stride, 1});
        const dsa::device_view<const float, 2> vq(dq.data(), {m, H}, {stride, 1});
        const dsa::device_view<float, 2> vw = in_place ? vp : dsa::device_view<float, 2>(dw.data(), {m, H}, {stride, 1});
        dsa::lightning_indexer_weights(stream.backend(), vp, vq, vw, head_scale, dim_scale);
        dsa_test::check_bits_equal("w", dsa_test::download(in_place ? dp : dw, stream.get()), expected);
      }
    }
  }
}

TEST_CASE("cuda lightning_indexer_weights: front-end checks with device views (no GPU needed)") {
  const dsa::cuda_backend be{};
  const index_t t = 4;
  auto proj = dsa_test::fake_device_view<float, 2>({t, 64});
  auto qs = dsa_test::fake_device_view<float, 2>({t, 63});
  auto hw = dsa_test::fake_device_view<float, 2>({t, 64});
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_weights(be, proj, qs, hw, 0.125f, 0.088f),
                       doctest::Contains("dsa::lightning_indexer_weights: q_scale.extent(1) = 63; expected 64"),
                       dsa::error);
  auto qs_ok = dsa_test::fake_device_view<float, 2>({t, 64});
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_weights(be, proj, qs_ok, hw, 0.0f, 0.088f),
                       doctest::Contains("dsa::lightning_indexer_weights: head_scale = 0; expected a finite value > 0"),
                       dsa::error);
}
