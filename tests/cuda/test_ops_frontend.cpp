// The CUDA ops' front-ends with device views: every bad shape, stride, size or argument throws
// dsa::error with the op, the argument and its value before anything touches the device, so this
// runs (and passes) without a GPU. The ops are called through dsa/cuda/ops.hpp, i.e. through the
// very instances nvcc compiled for the backend (dsa_cuda_ops).
#include <doctest/doctest.h>

#include <cstdint>

#include "cuda/op_test.hpp"
#include "dsa/core/error.hpp"
#include "dsa/cuda/ops.hpp"

namespace {

using dsa::bf16;
using dsa::fp8_e4m3;
using dsa::index_t;

}  // namespace

TEST_CASE("cuda hadamard_transform: front-end checks with device views (no GPU needed)") {
  const dsa::cuda_backend be{};
  auto x = dsa_test::fake_device_view<float, 2>({4, 100});
  CHECK_THROWS_WITH_AS(dsa::hadamard_transform(be, x, x, 1.0f),
                       doctest::Contains("dsa::hadamard_transform: x.extent(1) = 100; expected a power of two"),
                       dsa::error);
  auto a = dsa_test::fake_device_view<float, 2>({4, 128});
  auto b = dsa_test::fake_device_view<float, 2>({3, 128});
  CHECK_THROWS_WITH_AS(dsa::hadamard_transform(be, a, b, 1.0f),
                       doctest::Contains("dsa::hadamard_transform: y.extent(0) = 3; expected 4"), dsa::error);
  const dsa::device_view<dsa::bf16, 2> strided(reinterpret_cast<dsa::bf16*>(a.data_handle()), {4, 128}, {256, 2});
  CHECK_THROWS_WITH_AS(dsa::hadamard_transform(be, strided, strided, 1.0f),
                       doctest::Contains("dsa::hadamard_transform: x.stride(1) = 2; expected 1"), dsa::error);
  // Empty inputs return before dispatch: nothing is launched, so this holds without a GPU too.
  auto empty = dsa_test::fake_device_view<float, 2>({0, 128});
  CHECK_NOTHROW(dsa::hadamard_transform(be, empty, empty, 1.0f));
}

TEST_CASE("cuda fp8 quantizers: front-end checks with device views (no GPU needed)") {
  const dsa::cuda_backend be{};
  auto x = dsa_test::fake_device_view<float, 2>({4, 100});
  auto q = dsa_test::fake_device_view<fp8_e4m3, 2>({4, 100});
  auto s = dsa_test::fake_device_view<float, 2>({4, 1});
  CHECK_THROWS_WITH_AS(dsa::act_quant(be, x, q, s, {}),
                       doctest::Contains("dsa::act_quant: x.extent(1) = 100; expected a multiple of the group size 128"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(dsa::act_quant(be, x, q, s, {dsa::scale_format::ue8m0, 0}),
                       doctest::Contains("dsa::act_quant: cfg.group_size = 0; expected a positive group length"),
                       dsa::error);
  auto s2 = dsa_test::fake_device_view<float, 2>({4, 3});
  CHECK_THROWS_WITH_AS(dsa::act_dequant(be, q, s2, x, 50),
                       doctest::Contains("dsa::act_dequant: s.extent(1) = 3; expected 2"), dsa::error);
  auto w = dsa_test::fake_device_view<float, 2>({130, 256});
  auto wq = dsa_test::fake_device_view<fp8_e4m3, 2>({130, 256});
  auto ws = dsa_test::fake_device_view<float, 2>({1, 2});
  CHECK_THROWS_WITH_AS(dsa::weight_quant(be, w, wq, ws),
                       doctest::Contains("dsa::weight_quant: s.extent(0) = 1; expected 2"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::weight_dequant(be, wq, ws, w),
                       doctest::Contains("dsa::weight_dequant: s.extent(0) = 1; expected 2"), dsa::error);
}

TEST_CASE("cuda kv cache ops: front-end checks with device views (no GPU needed)") {
  const dsa::cuda_backend be{};
  auto kv = dsa_test::fake_device_view<bf16, 2>({4, 512});
  auto cache = dsa_test::fake_device_view<std::uint8_t, 2>({4, 656});
  CHECK_THROWS_WITH_AS(dsa::kv_cache_fp8_pack(be, kv, cache, {}),
                       doctest::Contains("dsa::kv_cache_fp8_pack: kv.extent(1) = 512; expected 576"), dsa::error);
  auto kv2 = dsa_test::fake_device_view<bf16, 2>({5, 576});
  CHECK_THROWS_WITH_AS(dsa::kv_cache_fp8_pack(be, kv2, cache, {}),
                       doctest::Contains("dsa::kv_cache_fp8_pack: cache.extent(0) = 4; expected >= 5"), dsa::error);
  auto slots = dsa_test::fake_device_view<std::int32_t, 1>({3});
  CHECK_THROWS_WITH_AS(dsa::kv_cache_fp8_pack(be, kv2, cache, slots),
                       doctest::Contains("dsa::kv_cache_fp8_pack: slots.extent(0) = 3; expected 5"), dsa::error);
  auto out = dsa_test::fake_device_view<bf16, 2>({3, 576});
  CHECK_THROWS_WITH_AS(dsa::kv_cache_fp8_unpack(be, cache, out),
                       doctest::Contains("dsa::kv_cache_fp8_unpack: kv.extent(0) = 3; expected 4"), dsa::error);
  auto k = dsa_test::fake_device_view<fp8_e4m3, 2>({4, 128});
  auto ks = dsa_test::fake_device_view<float, 1>({2});
  auto icache = dsa_test::fake_device_view<std::uint8_t, 2>({4, 132});
  CHECK_THROWS_WITH_AS(dsa::indexer_cache_pack(be, k, ks, icache, {}),
                       doctest::Contains("dsa::indexer_cache_pack: k_scale.extent(0) = 2; expected 4"), dsa::error);
}

TEST_CASE("cuda top-k and gather: front-end checks with device views (no GPU needed)") {
  const dsa::cuda_backend be{};
  auto scores = dsa_test::fake_device_view<float, 2>({4, 100});
  auto ranges = dsa_test::fake_device_view<std::int32_t, 2>({4, 2});
  auto out = dsa_test::fake_device_view<std::int32_t, 2>({4, 16});
  CHECK_THROWS_WITH_AS(dsa::topk_indices(be, scores, ranges, 0, out),
                       doctest::Contains("dsa::topk_indices: k = 0; expected >= 1"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::topk_indices(be, scores, ranges, 8, out),
                       doctest::Contains("dsa::topk_indices: indices.extent(1) = 16; expected 8"), dsa::error);
  auto bad_ranges = dsa_test::fake_device_view<std::int32_t, 2>({3, 2});
  CHECK_THROWS_WITH_AS(dsa::topk_indices(be, scores, bad_ranges, 16, out),
                       doctest::Contains("dsa::topk_indices: ranges.extent(0) = 3; expected 4"), dsa::error);
  auto table = dsa_test::fake_device_view<std::int32_t, 2>({4, 1});
  CHECK_THROWS_WITH_AS(dsa::topk_indices_paged(be, scores, ranges, 16, table, 64, out),
                       doctest::Contains("dsa::topk_indices_paged: scores.extent(1) = 100; expected <= "
                                         "block_table.extent(1) * block_size = 1 * 64"),
                       dsa::error);
  auto src = dsa_test::fake_device_view<float, 2>({10, 8});
  auto dst = dsa_test::fake_device_view<float, 3>({4, 16, 7});
  CHECK_THROWS_WITH_AS(dsa::gather_rows(be, src, out, dst),
                       doctest::Contains("dsa::gather_rows: dst.extent(2) = 7; expected 8"), dsa::error);
}
