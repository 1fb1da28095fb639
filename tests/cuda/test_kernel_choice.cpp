// Which kernel the CUDA backend runs for the ops that have an exact and a fast one
// (dsa/cuda/kernel_choice.hpp): the fast tensor-core kernel when cuda_backend::kernels asks for it,
// the device has mma.sync (sm_80+) and the shared memory, the shapes are ones it holds and the
// views are aligned for its copies; the exact kernel otherwise. A pure function of those facts,
// checked here without a GPU for the devices dsa targets (sm_90 227 KB, sm_80 163 KB, sm_86 /
// sm_89 99 KB, pre-sm_80), and an invalid cuda_kernel_path value is a dsa::error before any CUDA
// call. The device tests then assert that their shapes reach the kernel they mean to test.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "cuda/op_test.hpp"
#include "dsa/cuda/kernel_choice.hpp"
#include "dsa/cuda/ops.hpp"

namespace {

namespace cd = dsa::cuda_detail;
using dsa::cuda_kernel_path;
using dsa::index_t;

constexpr cd::device_caps sm90{90, 227 * 1024};
constexpr cd::device_caps sm80{80, 163 * 1024};
constexpr cd::device_caps sm89{89, 99 * 1024};
constexpr cd::device_caps sm75{75, 64 * 1024};

cd::sparse_mla_kernel mla(cuda_kernel_path path, const cd::device_caps& dev, index_t d_qk, index_t d_v, bool fp8,
                          bool aligned = true) {
  cd::sparse_mla_call c;
  c.d_qk = d_qk;
  c.d_v = d_v;
  c.fp8 = fp8;
  c.aligned = aligned;
  return cd::choose_sparse_mla_kernel(path, dev, c);
}

const void* address(std::uintptr_t a) { return reinterpret_cast<const void*>(a); }

cd::indexer_kernel indexer(cuda_kernel_path path, const cd::device_caps& dev, index_t heads, index_t d,
                           std::uintptr_t q = 4096, index_t qs1 = 128, std::uintptr_t keys = 8192,
                           index_t key_stride = 128) {
  cd::indexer_call c;
  c.heads = heads;
  c.d = d;
  c.q = address(q);
  c.q_stride0 = heads * qs1;
  c.q_stride1 = qs1;
  c.keys = address(keys);
  c.key_stride = key_stride;
  return cd::choose_indexer_kernel(path, dev, c);
}

}  // namespace

TEST_CASE("cuda kernel choice: sparse MLA attention (no GPU needed)") {
  using K = cd::sparse_mla_kernel;
  const auto fast = cuda_kernel_path::fast, exact = cuda_kernel_path::exact;
  for (const bool fp8 : {false, true}) {
    CAPTURE(fp8);
    // V3.2 on sm_90: prefetching (195-226 KB); sm_80: one K tile (157 KB); sm_86 / sm_89: exact.
    CHECK(mla(fast, sm90, 576, 512, fp8) == K::fast_prefetch);
    CHECK(mla(fast, sm80, 576, 512, fp8) == K::fast_direct);
    CHECK(mla(fast, sm89, 576, 512, fp8) == K::exact);
    CHECK(mla(fast, sm75, 576, 512, fp8) == K::exact);
    CHECK(mla(exact, sm90, 576, 512, fp8) == K::exact);
    CHECK(mla(fast, sm90, 576, 512, fp8, false) == K::exact);  // views not 16-byte aligned
  }
  // Shapes: d_qk a multiple of 64 up to 576, d_v a multiple of 32 up to 512 and d_qk.
  CHECK(mla(fast, sm80, 128, 64, false) == K::fast_prefetch);  // small tiles fit with prefetching
  CHECK(mla(fast, sm90, 64, 32, false) == K::fast_prefetch);
  CHECK(mla(fast, sm90, 320, 256, false) == K::fast_prefetch);  // the tiny test models
  CHECK(mla(fast, sm90, 40, 24, false) == K::exact);
  CHECK(mla(fast, sm90, 640, 512, false) == K::exact);
  CHECK(mla(fast, sm90, 576, 48, false) == K::exact);
  CHECK(mla(fast, sm90, 128, 160, false) == K::exact);
  CHECK(mla(fast, sm89, 128, 64, false) == K::fast_prefetch);  // fits 99 KB
}

TEST_CASE("cuda kernel choice: lightning indexer scores (no GPU needed)") {
  using K = cd::indexer_kernel;
  const auto fast = cuda_kernel_path::fast, exact = cuda_kernel_path::exact;
  CHECK(indexer(fast, sm90, 64, 128) == K::fast_copy16);
  CHECK(indexer(fast, sm80, 64, 128) == K::fast_copy16);
  CHECK(indexer(fast, sm90, 1, 128) == K::fast_copy16);
  CHECK(indexer(fast, sm90, 7, 128) == K::fast_copy16);
  CHECK(indexer(exact, sm90, 64, 128) == K::exact);
  CHECK(indexer(fast, sm75, 64, 128) == K::exact);
  CHECK(indexer(fast, sm89, 64, 128) == K::exact);  // 99 KB: the fast kernel's tiles need ~100 KB
  CHECK(indexer(fast, sm90, 65, 128) == K::exact);
  CHECK(indexer(fast, sm90, 64, 136) == K::exact);
  CHECK(indexer(fast, sm90, 64, 64) == K::exact);
  // The paged cache's 132-byte rows: 4-byte copies; keys on 4 bytes only: the same; on less: exact.
  CHECK(indexer(fast, sm90, 64, 128, 4096, 128, 8192, 132) == K::fast_copy4);
  CHECK(indexer(fast, sm90, 64, 128, 4096, 128, 8196, 128) == K::fast_copy4);
  CHECK(indexer(fast, sm90, 64, 128, 4096, 128, 8193, 128) == K::exact);
  CHECK(indexer(fast, sm90, 64, 128, 4096, 128, 8192, 130) == K::exact);
  // q rows must be 16-byte aligned (data and both strides).
  CHECK(indexer(fast, sm90, 64, 128, 4100, 128) == K::exact);
  CHECK(indexer(fast, sm90, 64, 128, 4096, 132) == K::exact);
  CHECK(indexer(fast, sm90, 64, 128, 4096, 144) == K::fast_copy16);
}

TEST_CASE("cuda kernel choice: rows per fast indexer item (no GPU needed)") {
  CHECK(cd::indexer_fast_rows_per_item(1, false) == 1);
  CHECK(cd::indexer_fast_rows_per_item(37, false) == 37);
  CHECK(cd::indexer_fast_rows_per_item(64, false) == 64);
  CHECK(cd::indexer_fast_rows_per_item(4096, false) == 64);
  CHECK(cd::indexer_fast_rows_per_item(4096, true) == 1);
}

TEST_CASE("cuda kernel choice: a cuda_kernel_path that is neither value is a dsa::error before any CUDA call (no GPU needed)") {
  dsa::cuda_backend be{};
  be.kernels = static_cast<cuda_kernel_path>(7);
  const std::string expected = "backend.kernels = 7; expected cuda_kernel_path::fast (0) or cuda_kernel_path::exact (1)";
  {
    auto q = dsa_test::fake_device_view<dsa::fp8_e4m3, 3>({2, 4, 128});
    auto w = dsa_test::fake_device_view<float, 2>({2, 4});
    auto k = dsa_test::fake_device_view<dsa::fp8_e4m3, 2>({10, 128});
    auto ks = dsa_test::fake_device_view<float, 1>({10});
    auto r = dsa_test::fake_device_view<std::int32_t, 2>({2, 2});
    auto s = dsa_test::fake_device_view<float, 2>({2, 10});
    CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(be, q, w, k, ks, r, s),
                         ("dsa::lightning_indexer_scores: " + expected).c_str(), dsa::error);
    auto cache = dsa_test::fake_device_view<std::uint8_t, 2>({64, 132});
    auto table = dsa_test::fake_device_view<std::int32_t, 2>({2, 1});
    // Host-unreadable device tables: the front-end cannot follow them, the op_impl refuses first.
    CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores_paged(be, q, w, cache, table, 64, r,
                                                             dsa_test::fake_device_view<float, 2>({2, 64})),
                         ("dsa::lightning_indexer_scores_paged: " + expected).c_str(), dsa::error);
  }
  {
    auto q = dsa_test::fake_device_view<dsa::bf16, 3>({1, 4, 576});
    auto kv = dsa_test::fake_device_view<dsa::bf16, 2>({10, 576});
    auto idx = dsa_test::fake_device_view<std::int32_t, 2>({1, 8});
    auto out = dsa_test::fake_device_view<float, 3>({1, 4, 512});
    auto lse = dsa_test::fake_device_view<float, 2>({1, 4});
    const dsa::sparse_mla_config cfg{0.05f, 512, 1};
    CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(be, q, kv, idx, out, lse, cfg),
                         ("dsa::sparse_mla_attention: " + expected).c_str(), dsa::error);
  }
}
