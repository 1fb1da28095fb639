// Limits: index arithmetic past 2^31 elements, 128K-token contexts, zero-length sequences, k
// larger than the context and empty selections. For every op each case either works (with the
// result docs/design.md defines) or fails with a dsa::error naming the argument; docs/robustness.md
// lists them.
#include <doctest/doctest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <bit>
#include <limits>
#include <numeric>
#include <vector>

#include "dsa/dsa.hpp"
#include "support/topk_reference.hpp"
#include "support/random.hpp"

namespace {

using dsa::bf16;
using dsa::fp8_e4m3;
using dsa::index_t;
using dsa::make_view;

constexpr index_t two31 = index_t{1} << 31;
const dsa::cpu_backend be{2};

/// A large, lazily committed anonymous mapping: only the pages an op touches cost memory, so a
/// view can place its rows more than 2^31 elements apart with a few KB of real memory.
class sparse_buffer {
 public:
  explicit sparse_buffer(std::size_t bytes) : size_(bytes) {
    p_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    REQUIRE_MESSAGE(p_ != MAP_FAILED, "cannot reserve ", bytes, " bytes of address space");
  }
  sparse_buffer(const sparse_buffer&) = delete;
  sparse_buffer& operator=(const sparse_buffer&) = delete;
  ~sparse_buffer() {
    if (p_ != MAP_FAILED) ::munmap(p_, size_);
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = MAP_FAILED;
  std::size_t size_;
};

/// A rows x cols view whose rows are `stride` elements apart in `buf` (stride > 2^31).
template <class T>
dsa::host_view<T, 2> far_rows(const sparse_buffer& buf, index_t rows, index_t cols, index_t stride) {
  return dsa::host_view<T, 2>(buf.as<T>(), {rows, cols}, {stride, 1});
}

template <class T>
void put_rows(const dsa::host_view<T, 2>& v, const std::vector<T>& compact) {
  for (index_t r = 0; r < v.extent(0); ++r) {
    std::memcpy(v.row(r), compact.data() + r * v.extent(1), static_cast<std::size_t>(v.extent(1)) * sizeof(T));
  }
}

}  // namespace

// ---- index arithmetic beyond 2^31 elements ------------------------------------------------------

TEST_CASE("rows more than 2^31 elements apart: kv cache pack/unpack and sparse MLA attention") {
  constexpr index_t n = 2;
  const index_t far = two31 + 1000;  // bytes between cache rows (uint8 elements)
  auto kv = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(n * dsa::kv_dim), 1));
  const auto kvv = make_view(static_cast<const bf16*>(kv.data()), {n, dsa::kv_dim});

  std::vector<std::uint8_t> compact(static_cast<std::size_t>(n * dsa::kv_fp8_row_bytes));
  dsa::kv_cache_fp8_pack(be, kvv, make_view(compact.data(), {n, dsa::kv_fp8_row_bytes}));

  sparse_buffer buf(static_cast<std::size_t>(far * n));
  const auto cache = far_rows<std::uint8_t>(buf, n, dsa::kv_fp8_row_bytes, far);
  std::vector<std::int32_t> slots = {1, 0};
  dsa::kv_cache_fp8_pack(be, kvv, cache, make_view(static_cast<const std::int32_t*>(slots.data()), {n}));
  CHECK(std::memcmp(cache.row(1), compact.data(), static_cast<std::size_t>(dsa::kv_fp8_row_bytes)) == 0);
  CHECK(std::memcmp(cache.row(0), compact.data() + dsa::kv_fp8_row_bytes, static_cast<std::size_t>(dsa::kv_fp8_row_bytes)) == 0);

  std::vector<bf16> back(kv.size());
  dsa::kv_cache_fp8_unpack(be, dsa::host_view<const std::uint8_t, 2>(cache), make_view(back.data(), {n, dsa::kv_dim}));
  std::vector<bf16> back_compact(kv.size());
  dsa::kv_cache_fp8_unpack(be, make_view(static_cast<const std::uint8_t*>(compact.data()), {n, dsa::kv_fp8_row_bytes}),
                           make_view(back_compact.data(), {n, dsa::kv_dim}));
  // Row 0 of the far cache holds token 1.
  CHECK(std::memcmp(back.data(), back_compact.data() + dsa::kv_dim, dsa::kv_dim * sizeof(bf16)) == 0);

  // Attention over the far FP8 rows equals attention over the compact ones with the indices swapped.
  auto q = dsa_test::convert<bf16>(dsa_test::normal(2 * dsa::kv_dim, 2));
  const auto qv = make_view(static_cast<const bf16*>(q.data()), {1, 2, dsa::kv_dim});
  std::vector<std::int32_t> idx_far = {0, 1}, idx_compact = {1, 0};
  dsa::sparse_mla_config cfg;
  cfg.softmax_scale = 0.04f;
  std::vector<float> o1(2 * 512), o2(2 * 512), l1(2), l2(2);
  dsa::sparse_mla_attention(be, qv, dsa::host_view<const std::uint8_t, 2>(cache),
                            make_view(static_cast<const std::int32_t*>(idx_far.data()), {1, 2}),
                            make_view(o1.data(), {1, 2, 512}), make_view(l1.data(), {1, 2}), cfg);
  dsa::sparse_mla_attention(be, qv, make_view(static_cast<const std::uint8_t*>(compact.data()), {n, dsa::kv_fp8_row_bytes}),
                            make_view(static_cast<const std::int32_t*>(idx_compact.data()), {1, 2}),
                            make_view(o2.data(), {1, 2, 512}), make_view(l2.data(), {1, 2}), cfg);
  // Entries are summed in index order, so swapping the rows swaps the summation order: equal
  // within fp32 rounding, not bitwise.
  for (std::size_t i = 0; i < o1.size(); ++i) CHECK(o1[i] == doctest::Approx(o2[i]).epsilon(1e-5));
  for (std::size_t i = 0; i < l1.size(); ++i) CHECK(l1[i] == doctest::Approx(l2[i]).epsilon(1e-6));
}

TEST_CASE("rows more than 2^31 elements apart: indexer scores, top-k and gather") {
  constexpr index_t m = 2, n = 3, d = 128;
  const index_t far = two31 + 64;  // float elements between rows: 8 GiB of address space
  auto q = dsa_test::convert<fp8_e4m3>(dsa_test::normal(static_cast<std::size_t>(m * 2 * d), 3, 4.0f));
  auto w = dsa_test::uniform(static_cast<std::size_t>(m * 2), 4);
  auto k = dsa_test::convert<fp8_e4m3>(dsa_test::normal(static_cast<std::size_t>(n * d), 5, 4.0f));
  auto ks = dsa_test::uniform(static_cast<std::size_t>(n), 6, 0.1f, 1.0f);
  std::vector<std::int32_t> ranges = {0, 3, 1, 3};
  const auto rv = make_view(static_cast<const std::int32_t*>(ranges.data()), {m, 2});
  const auto qv = make_view(static_cast<const fp8_e4m3*>(q.data()), {m, 2, d});
  const auto wv = make_view(static_cast<const float*>(w.data()), {m, 2});
  const auto ksv = make_view(static_cast<const float*>(ks.data()), {n});

  // Keys far apart (fp8: bytes), scores far apart (floats).
  sparse_buffer kbuf(static_cast<std::size_t>(far * n));
  const auto kfar = far_rows<fp8_e4m3>(kbuf, n, d, far);
  put_rows(kfar, k);
  sparse_buffer sbuf(static_cast<std::size_t>(far * m) * sizeof(float));
  const auto sfar = far_rows<float>(sbuf, m, n, far);
  dsa::lightning_indexer_scores(be, qv, wv, dsa::host_view<const fp8_e4m3, 2>(kfar), ksv, rv, sfar);
  std::vector<float> s(static_cast<std::size_t>(m * n));
  dsa::lightning_indexer_scores(be, qv, wv, make_view(static_cast<const fp8_e4m3*>(k.data()), {n, d}), ksv, rv,
                                make_view(s.data(), {m, n}));
  for (index_t t = 0; t < m; ++t) {
    for (index_t j = 0; j < n; ++j) {
      CHECK(std::bit_cast<std::uint32_t>(sfar(t, j)) == std::bit_cast<std::uint32_t>(s[static_cast<std::size_t>(t * n + j)]));
    }
  }
  CHECK(std::isinf(sfar(1, 0)));  // outside row 1's range [1, 3)

  // Top-k of the far score rows, into far index rows.
  sparse_buffer ibuf(static_cast<std::size_t>(far * m) * sizeof(std::int32_t));
  const auto ifar = far_rows<std::int32_t>(ibuf, m, 2, far);
  dsa::topk_indices(be, dsa::host_view<const float, 2>(sfar), rv, 2, ifar);
  std::vector<std::int32_t> idx(4);
  dsa::topk_indices(be, make_view(static_cast<const float*>(s.data()), {m, n}), rv, 2, make_view(idx.data(), {m, 2}));
  for (index_t t = 0; t < m; ++t) {
    for (index_t j = 0; j < 2; ++j) CHECK(ifar(t, j) == idx[static_cast<std::size_t>(t * 2 + j)]);
  }

  // gather_rows from far source rows.
  std::vector<float> dst(static_cast<std::size_t>(m * 2 * n)), dst2(dst.size());
  std::vector<float> src_compact = dsa_test::uniform(static_cast<std::size_t>(n * n), 7);
  const auto sfar_src = far_rows<float>(sbuf, n > m ? m : n, n, far);  // reuse: rows 0..1 as source
  put_rows(sfar_src, std::vector<float>(src_compact.begin(), src_compact.begin() + m * n));
  std::vector<std::int32_t> gidx = {1, 0, -1, 1};
  const auto gv = make_view(static_cast<const std::int32_t*>(gidx.data()), {m, 2});
  dsa::gather_rows(be, dsa::host_view<const float, 2>(sfar_src), gv, make_view(dst.data(), {m, 2, n}));
  dsa::gather_rows(be, make_view(static_cast<const float*>(src_compact.data()), {m, n}), gv,
                   make_view(dst2.data(), {m, 2, n}));
  CHECK(dst == dst2);
}

TEST_CASE("a 128K-token context: top-2048 of 131072 scores, then sparse attention over them") {
  constexpr index_t n = 131072, k = 2048, m = 2;
  auto scores = dsa_test::normal(static_cast<std::size_t>(m * n), 8);
  scores[12345] = std::numeric_limits<float>::quiet_NaN();  // ranks first in row 0
  std::vector<std::int32_t> ranges = {0, static_cast<std::int32_t>(n), 1000, static_cast<std::int32_t>(n) - 7};
  std::vector<std::int32_t> idx(static_cast<std::size_t>(m * k));
  const auto rv = make_view(static_cast<const std::int32_t*>(ranges.data()), {m, 2});
  dsa::topk_indices(be, make_view(static_cast<const float*>(scores.data()), {m, n}), rv, k, make_view(idx.data(), {m, k}));
  for (index_t t = 0; t < m; ++t) {
    // Reference: the k largest by (score desc, index asc), NaN first.
    const std::vector<std::int32_t> want = dsa_test::topk_reference(scores.data() + t * n, ranges[static_cast<std::size_t>(2 * t)],
                                                                    ranges[static_cast<std::size_t>(2 * t + 1)], k);
    CHECK(std::equal(want.begin(), want.end(), idx.begin() + t * k));
  }
  // Sparse MLA over a 128K-row bf16 cache (151 MB) with those indices: rows spread over the whole
  // cache, element offsets up to 131071 * 576 = 75.5M.
  std::vector<bf16> kv(static_cast<std::size_t>(n * dsa::kv_dim), bf16(0.0f));
  for (index_t i = 0; i < n; i += 97) kv[static_cast<std::size_t>(i * dsa::kv_dim)] = bf16(static_cast<float>(i % 7));
  auto q = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(m * dsa::kv_dim), 9));
  std::vector<float> out(static_cast<std::size_t>(m * 512)), lse(static_cast<std::size_t>(m));
  dsa::sparse_mla_config cfg;
  cfg.softmax_scale = 0.04f;
  dsa::sparse_mla_attention(be, make_view(static_cast<const bf16*>(q.data()), {m, 1, dsa::kv_dim}),
                            make_view(static_cast<const bf16*>(kv.data()), {n, dsa::kv_dim}),
                            make_view(static_cast<const std::int32_t*>(idx.data()), {m, k}),
                            make_view(out.data(), {m, 1, 512}), make_view(lse.data(), {m, 1}), cfg);
  for (float v : lse) CHECK(std::isfinite(v));
  for (float v : out) CHECK(std::isfinite(v));
}

TEST_CASE("extents that do not fit the int32 index convention are refused") {
  // A view may describe more columns than int32 indices can name; top-k must refuse it before
  // touching memory (the data pointer is never read).
  std::vector<std::int32_t> ranges = {0, 0};
  std::vector<std::int32_t> idx(1);
  float dummy = 0.0f;
  const dsa::host_view<const float, 2> scores(&dummy, {1, two31}, {0, 1});
  CHECK_THROWS_WITH_AS(dsa::topk_indices(be, scores, make_view(static_cast<const std::int32_t*>(ranges.data()), {1, 2}),
                                         1, make_view(idx.data(), {1, 1})),
                       doctest::Contains("dsa::topk_indices: scores.extent(1) = 2147483648"), dsa::error);
  std::vector<std::int32_t> ids(1);
  std::vector<float> wts(1);
  const dsa::host_view<const float, 2> logits(&dummy, {1, two31}, {0, 1});
  dsa::moe_routing_config cfg;
  cfg.top_k = 1;
  CHECK_THROWS_WITH_AS(dsa::moe_route(be, logits, {}, make_view(ids.data(), {1, 1}), make_view(wts.data(), {1, 1}), cfg),
                       doctest::Contains("dsa::moe_route: logits.extent(1) = 2147483648"), dsa::error);
}

// ---- zero-length sequences, k beyond the context, empty selections ------------------------------

TEST_CASE("zero rows: every op accepts m = 0 and writes nothing") {
  const float f = 0.0f;
  // One representative call per op family; all views are [0, ...] with null or dangling data.
  CHECK_NOTHROW(dsa::hadamard_transform(be, dsa::host_view<const float, 2>(nullptr, {0, 128}),
                                        dsa::host_view<float, 2>(nullptr, {0, 128}), 1.0f));
  CHECK_NOTHROW(dsa::act_quant(be, dsa::host_view<const bf16, 2>(nullptr, {0, 256}),
                               dsa::host_view<fp8_e4m3, 2>(nullptr, {0, 256}), dsa::host_view<float, 2>(nullptr, {0, 2})));
  CHECK_NOTHROW(dsa::weight_quant(be, dsa::host_view<const float, 2>(nullptr, {0, 0}),
                                  dsa::host_view<fp8_e4m3, 2>(nullptr, {0, 0}), dsa::host_view<float, 2>(nullptr, {0, 0})));
  CHECK_NOTHROW(dsa::kv_cache_fp8_pack(be, dsa::host_view<const bf16, 2>(nullptr, {0, dsa::kv_dim}),
                                       dsa::host_view<std::uint8_t, 2>(nullptr, {0, dsa::kv_fp8_row_bytes})));
  CHECK_NOTHROW(dsa::lightning_indexer_scores(
      be, dsa::host_view<const fp8_e4m3, 3>(nullptr, {0, 4, 128}), dsa::host_view<const float, 2>(nullptr, {0, 4}),
      dsa::host_view<const fp8_e4m3, 2>(nullptr, {0, 128}), dsa::host_view<const float, 1>(nullptr, {0}),
      dsa::host_view<const std::int32_t, 2>(nullptr, {0, 2}), dsa::host_view<float, 2>(nullptr, {0, 0})));
  CHECK_NOTHROW(dsa::topk_indices(be, dsa::host_view<const float, 2>(nullptr, {0, 10}),
                                  dsa::host_view<const std::int32_t, 2>(nullptr, {0, 2}), 4,
                                  dsa::host_view<std::int32_t, 2>(nullptr, {0, 4})));
  CHECK_NOTHROW(dsa::gather_rows(be, dsa::host_view<const float, 2>(&f, {1, 1}),
                                 dsa::host_view<const std::int32_t, 2>(nullptr, {0, 4}),
                                 dsa::host_view<float, 3>(nullptr, {0, 4, 1})));
  dsa::sparse_mla_config cfg;
  cfg.softmax_scale = 0.1f;
  cfg.d_v = 4;
  CHECK_NOTHROW(dsa::sparse_mla_attention(be, dsa::host_view<const bf16, 3>(nullptr, {0, 2, 8}),
                                          dsa::host_view<const bf16, 2>(nullptr, {0, 8}),
                                          dsa::host_view<const std::int32_t, 2>(nullptr, {0, 4}),
                                          dsa::host_view<float, 3>(nullptr, {0, 2, 4}),
                                          dsa::host_view<float, 2>(nullptr, {0, 2}), cfg));
  float loss = -1.0f;
  CHECK_NOTHROW(dsa::indexer_kl_loss_dense(be, dsa::host_view<const float, 3>(nullptr, {0, 2, 0}),
                                           dsa::host_view<const float, 2>(nullptr, {0, 0}),
                                           dsa::host_view<const std::int32_t, 2>(nullptr, {0, 2}),
                                           make_view(&loss, {1}), dsa::host_view<float, 2>(nullptr, {0, 0})));
  CHECK(loss == 0.0f);
  dsa::moe_routing_config mcfg;
  mcfg.top_k = 2;
  CHECK_NOTHROW(dsa::moe_route(be, dsa::host_view<const float, 2>(nullptr, {0, 8}), {},
                               dsa::host_view<std::int32_t, 2>(nullptr, {0, 2}), dsa::host_view<float, 2>(nullptr, {0, 2}),
                               mcfg));
  const std::vector<float> w8(8, 1.0f);
  CHECK_NOTHROW(dsa::rms_norm(be, dsa::host_view<const bf16, 2>(nullptr, {0, 8}),
                              make_view(static_cast<const float*>(w8.data()), {8}), dsa::host_view<bf16, 2>(nullptr, {0, 8})));
  CHECK_NOTHROW(dsa::linear(be, dsa::host_view<const bf16, 2>(nullptr, {0, 8}), make_view(w8.data(), {1, 8}),
                            dsa::host_view<float, 2>(nullptr, {0, 1})));
  dsa::rope_config rc;
  CHECK_NOTHROW(dsa::rope_apply(be, dsa::host_view<bf16, 3>(nullptr, {0, 2, 64}),
                                dsa::host_view<const std::int32_t, 1>(nullptr, {0}), rc, dsa::rope_layout::half));
}

TEST_CASE("zero-length contexts (n = 0): scores are empty, selections are all padding, attention is empty") {
  constexpr index_t m = 3;
  std::vector<std::int32_t> ranges(2 * m, 0);
  const auto rv = make_view(static_cast<const std::int32_t*>(ranges.data()), {m, 2});
  // Indexer over no keys.
  std::vector<fp8_e4m3> q(static_cast<std::size_t>(m * 2 * 128));
  std::vector<float> w(static_cast<std::size_t>(m * 2), 1.0f);
  CHECK_NOTHROW(dsa::lightning_indexer_scores(
      be, make_view(static_cast<const fp8_e4m3*>(q.data()), {m, 2, 128}), make_view(static_cast<const float*>(w.data()), {m, 2}),
      dsa::host_view<const fp8_e4m3, 2>(nullptr, {0, 128}), dsa::host_view<const float, 1>(nullptr, {0}), rv,
      dsa::host_view<float, 2>(nullptr, {m, 0})));
  // Head dimension 0 (regression: offset the null query rows): every dot product is 0, so the
  // in-range scores are k_scale * 0 = 0 and the others -inf.
  {
    std::vector<float> ks = {0.5f, 2.0f, 1.0f};
    std::vector<std::int32_t> r3 = {0, 3, 1, 2, 0, 0};
    std::vector<float> sc(static_cast<std::size_t>(m * 3), 7.0f);
    dsa::lightning_indexer_scores(be, dsa::host_view<const fp8_e4m3, 3>(nullptr, {m, 2, 0}),
                                  make_view(static_cast<const float*>(w.data()), {m, 2}),
                                  dsa::host_view<const fp8_e4m3, 2>(nullptr, {3, 0}),
                                  make_view(static_cast<const float*>(ks.data()), {3}),
                                  make_view(static_cast<const std::int32_t*>(r3.data()), {m, 2}), make_view(sc.data(), {m, 3}));
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> want = {0.0f, 0.0f, 0.0f, -inf, 0.0f, -inf, -inf, -inf, -inf};
    CHECK(sc == want);
  }
  // Top-k of nothing: every slot is padding.
  std::vector<std::int32_t> idx(static_cast<std::size_t>(m * 4), 7);
  dsa::topk_indices(be, dsa::host_view<const float, 2>(nullptr, {m, 0}), rv, 4, make_view(idx.data(), {m, 4}));
  CHECK(std::all_of(idx.begin(), idx.end(), [](std::int32_t v) { return v == -1; }));
  // The paged variant with an empty page table (regression: it offset the table's null pointer).
  std::fill(idx.begin(), idx.end(), 7);
  dsa::topk_indices_paged(be, dsa::host_view<const float, 2>(nullptr, {m, 0}), rv, 4,
                          dsa::host_view<const std::int32_t, 2>(nullptr, {m, 0}), 16, make_view(idx.data(), {m, 4}));
  CHECK(std::all_of(idx.begin(), idx.end(), [](std::int32_t v) { return v == -1; }));
  // Dense KL over empty ranges: loss 0.
  float loss = -1.0f;
  dsa::indexer_kl_loss_dense(be, dsa::host_view<const float, 3>(nullptr, {m, 2, 0}),
                             dsa::host_view<const float, 2>(nullptr, {m, 0}), rv, make_view(&loss, {1}),
                             dsa::host_view<float, 2>(nullptr, {m, 0}));
  CHECK(loss == 0.0f);
  // Sparse KL with no keys and a padding-only selection (regression: offset a null row).
  std::vector<std::int32_t> pad(static_cast<std::size_t>(m * 2), -1);
  loss = -1.0f;
  dsa::indexer_kl_loss_sparse(be, dsa::host_view<const float, 3>(nullptr, {m, 2, 0}),
                              dsa::host_view<const float, 2>(nullptr, {m, 0}),
                              make_view(static_cast<const std::int32_t*>(pad.data()), {m, 2}), make_view(&loss, {1}),
                              dsa::host_view<float, 2>(nullptr, {m, 0}));
  CHECK(loss == 0.0f);
  // Attention over an empty cache with padding-only indices: out 0, lse +inf.
  std::vector<bf16> qa(static_cast<std::size_t>(m * 2 * 8), bf16(1.0f));
  std::vector<std::int32_t> none(static_cast<std::size_t>(m * 2), -1);
  std::vector<float> out(static_cast<std::size_t>(m * 2 * 4), 5.0f), lse(static_cast<std::size_t>(m * 2), 5.0f),
      probs(static_cast<std::size_t>(m * 2), 5.0f);
  dsa::sparse_mla_config cfg;
  cfg.softmax_scale = 0.1f;
  cfg.d_v = 4;
  dsa::sparse_mla_attention(be, make_view(static_cast<const bf16*>(qa.data()), {m, 2, 8}),
                            dsa::host_view<const bf16, 2>(nullptr, {0, 8}),
                            make_view(static_cast<const std::int32_t*>(none.data()), {m, 2}), make_view(out.data(), {m, 2, 4}),
                            make_view(lse.data(), {m, 2}), cfg, make_view(probs.data(), {m, 2}));
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 0.0f; }));
  CHECK(std::all_of(lse.begin(), lse.end(), [](float v) { return std::isinf(v) && v > 0; }));
  CHECK(std::all_of(probs.begin(), probs.end(), [](float v) { return v == 0.0f; }));
}

TEST_CASE("k larger than the context: top-k pads with -1, attention and KL use only the valid entries") {
  std::vector<float> scores = {0.5f, -1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN(),
                               -std::numeric_limits<float>::infinity(), 1.0f};
  std::vector<std::int32_t> ranges = {0, 6, 2, 3};
  std::vector<std::int32_t> idx(2 * 10);
  dsa::topk_indices(be, dsa::host_view<const float, 2>(scores.data(), {2, 6}, {0, 1}),  // one row, broadcast
                    make_view(static_cast<const std::int32_t*>(ranges.data()), {2, 2}), 10, make_view(idx.data(), {2, 10}));
  // Row 0: all 6 positions (NaN and -inf are scores like any other), ascending; row 1: just
  // column 2.
  const std::vector<std::int32_t> row0 = {0, 1, 2, 3, 4, 5, -1, -1, -1, -1};
  const std::vector<std::int32_t> row1 = {2, -1, -1, -1, -1, -1, -1, -1, -1, -1};
  CHECK(std::equal(row0.begin(), row0.end(), idx.begin()));
  CHECK(std::equal(row1.begin(), row1.end(), idx.begin() + 10));
  // k = 0 is an error, not an empty result.
  CHECK_THROWS_WITH_AS(dsa::topk_indices(be, dsa::host_view<const float, 2>(scores.data(), {1, 6}),
                                         make_view(static_cast<const std::int32_t*>(ranges.data()), {1, 2}), 0,
                                         dsa::host_view<std::int32_t, 2>(nullptr, {1, 0})),
                       doctest::Contains("dsa::topk_indices: k = 0; expected >= 1"), dsa::error);
}

TEST_CASE("empty selections: attention rows with no valid index, KL over empty top-k, MoE rows with no expert") {
  constexpr index_t s = 2, h = 2, d = 8, n = 3;
  auto q = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(s * h * d), 10));
  auto kv = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(n * d), 11));
  // Row 0 selects nothing valid (padding, negative, >= n); row 1 selects row 1.
  std::vector<std::int32_t> idx = {-1, -5, 3, 1, -1, 100};
  std::vector<float> out(static_cast<std::size_t>(s * h * 4), 9.0f), lse(static_cast<std::size_t>(s * h)), probs(6, 9.0f);
  dsa::sparse_mla_config cfg;
  cfg.softmax_scale = 0.3f;
  cfg.d_v = 4;
  dsa::sparse_mla_attention(be, make_view(static_cast<const bf16*>(q.data()), {s, h, d}),
                            make_view(static_cast<const bf16*>(kv.data()), {n, d}),
                            make_view(static_cast<const std::int32_t*>(idx.data()), {s, 3}), make_view(out.data(), {s, h, 4}),
                            make_view(lse.data(), {s, h}), cfg, make_view(probs.data(), {s, 3}));
  for (index_t i = 0; i < h * 4; ++i) CHECK(out[static_cast<std::size_t>(i)] == 0.0f);
  CHECK(std::isinf(lse[0]));
  CHECK(std::isinf(lse[1]));
  CHECK(std::isfinite(lse[2]));
  // Row 1's one valid entry gets all the probability of both heads.
  CHECK(probs[3] == doctest::Approx(2.0f));
  CHECK(probs[4] == 0.0f);
  CHECK(probs[5] == 0.0f);
  // Its output is exactly that row's values.
  for (index_t c = 0; c < 4; ++c) CHECK(out[static_cast<std::size_t>(h * 4 + c)] == dsa::to_float(kv[static_cast<std::size_t>(d + c)]));

  // Sparse KL with an all-padding selection: no terms, zero loss and gradient.
  std::vector<float> attn(static_cast<std::size_t>(s * h * n), 0.25f), index(static_cast<std::size_t>(s * n), 1.0f);
  std::vector<std::int32_t> topk(static_cast<std::size_t>(s * 2), -1);
  float loss = -1.0f;
  std::vector<float> grad(static_cast<std::size_t>(s * n), 9.0f);
  dsa::indexer_kl_loss_sparse(be, make_view(static_cast<const float*>(attn.data()), {s, h, n}),
                              make_view(static_cast<const float*>(index.data()), {s, n}),
                              make_view(static_cast<const std::int32_t*>(topk.data()), {s, 2}), make_view(&loss, {1}),
                              make_view(grad.data(), {s, n}));
  CHECK(loss == 0.0f);
  CHECK(std::all_of(grad.begin(), grad.end(), [](float v) { return v == 0.0f; }));

  // MoE combine with no routed expert: y = the shared expert.
  auto shared = dsa_test::convert<bf16>(dsa_test::normal(8, 12));
  std::vector<std::int32_t> rows = {-1, -1, -1, -1};
  std::vector<float> wts = {0.5f, 0.5f, 0.5f, 0.5f};
  std::vector<bf16> y(8);
  const std::vector<bf16> expert_out(4, bf16(1.0f));
  dsa::moe_combine(be, make_view(expert_out.data(), {1, 4}),
                   make_view(static_cast<const std::int32_t*>(rows.data()), {2, 2}),
                   make_view(static_cast<const float*>(wts.data()), {2, 2}),
                   make_view(static_cast<const bf16*>(shared.data()), {2, 4}), make_view(y.data(), {2, 4}));
  for (std::size_t i = 0; i < 8; ++i) CHECK(y[i].bits == shared[i].bits);
}

TEST_CASE("bad sizes are clear errors, not crashes") {
  std::vector<float> x(3 * 100), y(x.size());
  CHECK_THROWS_WITH_AS(dsa::hadamard_transform(be, make_view(static_cast<const float*>(x.data()), {3, 0}),
                                               make_view(y.data(), {3, 0}), 1.0f),
                       doctest::Contains("dsa::hadamard_transform: x.extent(1) = 0"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::rms_norm(be, make_view(static_cast<const float*>(x.data()), {3, 0}),
                                     dsa::host_view<const float, 1>(nullptr, {0}), dsa::host_view<bf16, 2>(nullptr, {3, 0})),
                       doctest::Contains("dsa::rms_norm: x.extent(1) = 0"), dsa::error);
  dsa::moe_routing_config mcfg;
  mcfg.top_k = 1;
  std::vector<std::int32_t> ids(3);
  std::vector<float> wts(3);
  CHECK_THROWS_WITH_AS(dsa::moe_route(be, dsa::host_view<const float, 2>(x.data(), {3, 0}), {},
                                      make_view(ids.data(), {3, 1}), make_view(wts.data(), {3, 1}), mcfg),
                       doctest::Contains("dsa::moe_route: logits.extent(1) = 0"), dsa::error);
  // Negative extents are refused by every front-end before anything else.
  CHECK_THROWS_WITH_AS(dsa::hadamard_transform(be, dsa::host_view<const float, 2>(x.data(), {-1, 128}),
                                               dsa::host_view<float, 2>(y.data(), {-1, 128}), 1.0f),
                       doctest::Contains("dsa::hadamard_transform: x.shape = [-1, 128]; expected non-negative extents"),
                       dsa::error);
  // A null pointer with elements.
  CHECK_THROWS_WITH_AS(dsa::topk_indices(be, dsa::host_view<const float, 2>(nullptr, {1, 4}),
                                         make_view(static_cast<const std::int32_t*>(ids.data()), {1, 2}), 1,
                                         make_view(ids.data(), {1, 1})),
                       doctest::Contains("dsa::topk_indices: scores.data = null; expected a non-null pointer"), dsa::error);
}

TEST_CASE("gather_rows of zero-width rows writes nothing (regression: offset a null dst)") {
  std::vector<std::int32_t> idx = {0, -1, 1, 0};
  CHECK_NOTHROW(dsa::gather_rows(be, dsa::host_view<const float, 2>(nullptr, {2, 0}),
                                 make_view(static_cast<const std::int32_t*>(idx.data()), {2, 2}),
                                 dsa::host_view<float, 3>(nullptr, {2, 2, 0})));
}

TEST_CASE("top-k and gather refuse output rows that share memory (regression: rows raced, found by fuzz_ops)") {
  std::vector<float> scores = {3.0f, 1.0f, 2.0f, 0.0f, 5.0f, 4.0f};
  std::vector<std::int32_t> ranges = {0, 3, 0, 3};
  std::vector<std::int32_t> idx(2);
  // Both rows of indices [2, 2] on the same two ints (stride 0).
  const dsa::host_view<std::int32_t, 2> shared_rows(idx.data(), {2, 2}, {0, 1});
  CHECK_THROWS_WITH_AS(dsa::topk_indices(be, make_view(static_cast<const float*>(scores.data()), {2, 3}),
                                         make_view(static_cast<const std::int32_t*>(ranges.data()), {2, 2}), 2, shared_rows),
                       doctest::Contains("dsa::topk_indices: indices"), dsa::error);
  // Output on top of the ranges it reads.
  CHECK_THROWS_WITH_AS(dsa::topk_indices(be, make_view(static_cast<const float*>(scores.data()), {2, 3}),
                                         make_view(static_cast<const std::int32_t*>(ranges.data()), {2, 2}), 2,
                                         make_view(ranges.data(), {2, 2})),
                       doctest::Contains("memory disjoint from ranges"), dsa::error);
  std::vector<float> dst(3);
  std::vector<std::int32_t> gi = {0, 1};
  CHECK_THROWS_WITH_AS(dsa::gather_rows(be, make_view(static_cast<const float*>(scores.data()), {2, 3}),
                                        make_view(static_cast<const std::int32_t*>(gi.data()), {2, 1}),
                                        dsa::host_view<float, 3>(dst.data(), {2, 1, 3}, {0, 3, 1})),
                       doctest::Contains("dsa::gather_rows: dst"), dsa::error);
}
