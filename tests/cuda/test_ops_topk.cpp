// Top-k selection and row gathering on the CUDA backend: indices identical to the CPU backend over
// a grid of shapes (the golden 12 x 700, k > range, V3.2's top-2048 of a 128K context; the
// workspace overload's split of 1 to 8 long rows over many blocks), random and
// causal ranges, heavy ties, NaN / -inf / +inf / signed zeros; the paged variant through a
// shuffled page table; gather_rows of float, bf16 and cache-row bytes (vectorised and not);
// device-side values the front-end cannot check (ranges, page-table entries, indices) never read
// or write out of bounds. Needs a GPU; skips cleanly without one (front-end checks:
// test_ops_frontend.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "cuda/cuda_test.hpp"
#include "cuda/op_test.hpp"
#include "dsa/cpu/topk.hpp"
#include "dsa/cuda/ops.hpp"
#include "dsa/ops/topk.hpp"
#include "support/random.hpp"

namespace {

using dsa::index_t;
constexpr float inf = std::numeric_limits<float>::infinity();

enum class pattern { normal, ties, specials };

std::vector<float> make_scores(index_t m, index_t n, pattern kind, std::uint64_t seed) {
  std::vector<float> s = dsa_test::normal(static_cast<std::size_t>(m * n), seed, 4.0f);
  std::mt19937_64 rng(seed + 7);
  if (kind == pattern::ties) {
    for (float& v : s) v = std::round(v);  // a dozen distinct values per row
  } else if (kind == pattern::specials) {
    const float special[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(), -inf,
                             inf, 0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), -3e38f, 3e38f};
    std::uniform_int_distribution<std::size_t> pick(0, std::size(special) - 1);
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (rng() % 4 == 0) s[i] = special[pick(rng)];
    }
  }
  return s;
}

// Random (start, end) pairs in [0, n], causal-like ranges, full ranges and empty ones.
std::vector<std::int32_t> make_ranges(index_t m, index_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> r(static_cast<std::size_t>(2 * m));
  for (index_t t = 0; t < m; ++t) {
    std::int32_t a = 0, b = static_cast<std::int32_t>(n);
    switch (t % 4) {
      case 0: break;                                                                   // full
      case 1: b = static_cast<std::int32_t>(std::min<index_t>(n, (t * n) / std::max<index_t>(m, 1) + 1)); break;  // causal
      case 2: {
        a = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(n + 1));
        b = static_cast<std::int32_t>(a + rng() % static_cast<std::uint64_t>(n - a + 1));
        break;
      }
      default: a = b = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(n + 1)); break;  // empty
    }
    r[static_cast<std::size_t>(2 * t)] = a;
    r[static_cast<std::size_t>(2 * t + 1)] = b;
  }
  return r;
}

std::vector<std::int32_t> cpu_topk(const std::vector<float>& s, index_t m, index_t n,
                                   const std::vector<std::int32_t>& ranges, index_t k) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(m * k));
  dsa::topk_indices(dsa::cpu, dsa::make_view(s.data(), {m, n}), dsa::make_view(ranges.data(), {m, 2}), k,
                    dsa::make_view(out.data(), {m, k}));
  return out;
}

std::vector<std::int32_t> cuda_topk(const std::vector<float>& s, index_t m, index_t n,
                                    const std::vector<std::int32_t>& ranges, index_t k) {
  dsa_test::test_stream stream;
  auto ds = dsa_test::upload(s, stream.get());
  auto dr = dsa_test::upload(ranges, stream.get());
  dsa::device_buffer<std::int32_t> dout(m * k, stream.get());
  dsa::topk_indices(stream.backend(), ds.view({m, n}), dr.view({m, 2}), k, dout.view({m, k}));
  return dsa_test::download(dout, stream.get());
}

// The workspace overload: split over many blocks where topk_split_applies(m, n).
std::vector<std::int32_t> cuda_topk_split(const std::vector<float>& s, index_t m, index_t n,
                                          const std::vector<std::int32_t>& ranges, index_t k) {
  dsa_test::test_stream stream;
  auto ds = dsa_test::upload(s, stream.get());
  auto dr = dsa_test::upload(ranges, stream.get());
  dsa::device_buffer<std::int32_t> dout(m * k, stream.get());
  const index_t bytes = dsa::topk_indices_workspace_size(m, n);
  dsa::device_buffer<std::byte> ws(bytes, stream.get());
  dsa::topk_indices(stream.backend(), ds.view({m, n}), dr.view({m, 2}), k, dout.view({m, k}),
                    bytes > 0 ? ws.view({bytes}) : dsa::device_view<std::byte, 1>{});
  return dsa_test::download(dout, stream.get());
}

void check_topk_split(index_t m, index_t n, index_t k, pattern kind, std::uint64_t seed) {
  CAPTURE(m);
  CAPTURE(n);
  CAPTURE(k);
  CAPTURE(static_cast<int>(kind));
  const auto s = make_scores(m, n, kind, seed);
  const auto ranges = make_ranges(m, n, seed + 1);
  const auto expected = cpu_topk(s, m, n, ranges, k);
  dsa_test::check_bits_equal("split indices", cuda_topk_split(s, m, n, ranges, k), expected);
  dsa_test::check_bits_equal("one-block indices", cuda_topk(s, m, n, ranges, k), expected);
}

void check_topk(index_t m, index_t n, index_t k, pattern kind, std::uint64_t seed) {
  CAPTURE(m);
  CAPTURE(n);
  CAPTURE(k);
  CAPTURE(static_cast<int>(kind));
  const auto s = make_scores(m, n, kind, seed);
  const auto ranges = make_ranges(m, n, seed + 1);
  dsa_test::check_bits_equal("indices", cuda_topk(s, m, n, ranges, k), cpu_topk(s, m, n, ranges, k));
}

}  // namespace

TEST_CASE("cuda topk_indices: identical to the CPU over a grid of shapes and score patterns") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  std::uint64_t seed = 1;
  for (const pattern kind : {pattern::normal, pattern::ties, pattern::specials}) {
    check_topk(12, 700, 64, kind, ++seed);   // the golden shape
    check_topk(4, 1, 1, kind, ++seed);
    check_topk(8, 100, 200, kind, ++seed);   // k larger than every range
    check_topk(16, 1000, 1, kind, ++seed);
    check_topk(9, 5000, 2048, kind, ++seed);
    check_topk(64, 4096, 2048, kind, ++seed);
    check_topk(5, 70000, 512, kind, ++seed);  // the 1024-thread block
  }
}

TEST_CASE("cuda topk_indices: V3.2 decode shape, top-2048 of a 128K context") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  check_topk(4, 131072, 2048, pattern::normal, 77);
  check_topk(4, 131072, 2048, pattern::ties, 78);
}

TEST_CASE("cuda topk_indices, workspace overload: a few long rows split over many blocks, the CPU's indices") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  std::uint64_t seed = 300;
  for (const pattern kind : {pattern::normal, pattern::ties, pattern::specials}) {
    check_topk_split(1, 8192, 2048, kind, ++seed);            // the smallest split row
    check_topk_split(2, 20000, 512, kind, ++seed);            // a partial last chunk; random, causal ranges
    check_topk_split(8, 20000, 2048, kind, ++seed);           // eight rows: every range pattern, empty included
    check_topk_split(4, 20000, 30000, kind, ++seed);          // k beyond every range: all of it, then -1
    check_topk_split(3, 40000, 1, kind, ++seed);              // k = 1
    check_topk_split(9, 20000, 64, kind, ++seed);             // nine rows: the one-block kernel, workspace 0
  }
}

TEST_CASE("cuda topk_indices, workspace overload: V3.2 decode, top-2048 of a 128K context, one to eight rows") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  check_topk_split(1, 131072, 2048, pattern::normal, 401);
  check_topk_split(1, 131072, 2048, pattern::ties, 402);
  check_topk_split(8, 131072 + 333, 2048, pattern::specials, 403);
}

TEST_CASE("cuda topk_indices, workspace overload: every score equal, NaN rows, device ranges clamped") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  const index_t m = 4, n = 9000, k = 100;
  std::vector<float> s(static_cast<std::size_t>(m * n), 1.5f);
  std::fill(s.begin() + 2 * n, s.begin() + 3 * n, std::numeric_limits<float>::quiet_NaN());
  const std::vector<std::int32_t> ranges = {0, 9000, 17, 8999, 0, 9000, 4000, 4050};
  const auto got = cuda_topk_split(s, m, n, ranges, k);
  dsa_test::check_bits_equal("indices", got, cpu_topk(s, m, n, ranges, k));
  CHECK(got[0] == 0);
  CHECK(got[static_cast<std::size_t>(k)] == 17);
  CHECK(got[static_cast<std::size_t>(2 * k)] == 0);
  CHECK(got[static_cast<std::size_t>(3 * k + 50)] == -1);
  const auto t = make_scores(m, n, pattern::normal, 5);
  const std::vector<std::int32_t> bad = {-100, 50, 400, 100000, 300, 200, std::numeric_limits<std::int32_t>::min(),
                                         std::numeric_limits<std::int32_t>::max()};
  const std::vector<std::int32_t> clamped = {0, 50, 400, 9000, 300, 300, 0, 9000};
  dsa_test::check_bits_equal("clamped", cuda_topk_split(t, m, n, bad, k), cpu_topk(t, m, n, clamped, k));
}

TEST_CASE("cuda topk_indices: every score equal, and a row of NaN") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  const index_t m = 3, n = 3000, k = 100;
  std::vector<float> s(static_cast<std::size_t>(m * n), 1.5f);
  std::fill(s.begin() + 2 * n, s.end(), std::numeric_limits<float>::quiet_NaN());
  std::vector<std::int32_t> ranges = {0, 3000, 17, 2999, 0, 3000};
  const auto got = cuda_topk(s, m, n, ranges, k);
  dsa_test::check_bits_equal("indices", got, cpu_topk(s, m, n, ranges, k));
  CHECK(got[0] == 0);
  CHECK(got[static_cast<std::size_t>(k)] == 17);
  CHECK(got[static_cast<std::size_t>(2 * k)] == -1);
}

TEST_CASE("cuda topk_indices: device-side ranges outside [0, n] are clamped, never followed") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  const index_t m = 4, n = 500, k = 32;
  const auto s = make_scores(m, n, pattern::normal, 5);
  const std::vector<std::int32_t> bad = {-100, 50, 400, 100000, 300, 200, std::numeric_limits<std::int32_t>::min(),
                                         std::numeric_limits<std::int32_t>::max()};
  const std::vector<std::int32_t> clamped = {0, 50, 400, 500, 300, 300, 0, 500};
  dsa_test::check_bits_equal("indices", cuda_topk(s, m, n, bad, k), cpu_topk(s, m, n, clamped, k));
}

TEST_CASE("cuda topk_indices_paged: identical to the CPU through a shuffled page table") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  for (const index_t block_size : {index_t{1}, index_t{64}, index_t{100}}) {
    CAPTURE(block_size);
    const index_t m = 6, n = 3000, k = 256;
    const index_t max_blocks = (n + block_size - 1) / block_size + 2;
    const auto s = make_scores(m, n, pattern::ties, 30 + static_cast<std::uint64_t>(block_size));
    const auto ranges = make_ranges(m, n, 31);
    std::vector<std::int32_t> table(static_cast<std::size_t>(m * max_blocks));
    std::mt19937_64 rng(32);
    for (index_t t = 0; t < m; ++t) {
      auto row = table.begin() + t * max_blocks;
      std::iota(row, row + max_blocks, static_cast<std::int32_t>(t * max_blocks));
      std::shuffle(row, row + max_blocks, rng);
    }
    std::vector<std::int32_t> expected(static_cast<std::size_t>(m * k));
    dsa::topk_indices_paged(dsa::cpu, dsa::make_view(s.data(), {m, n}), dsa::make_view(ranges.data(), {m, 2}), k,
                            dsa::make_view(table.data(), {m, max_blocks}), block_size,
                            dsa::make_view(expected.data(), {m, k}));
    dsa_test::test_stream stream;
    auto ds = dsa_test::upload(s, stream.get());
    auto dr = dsa_test::upload(ranges, stream.get());
    auto dt = dsa_test::upload(table, stream.get());
    dsa::device_buffer<std::int32_t> dout(m * k, stream.get());
    dsa::topk_indices_paged(stream.backend(), ds.view({m, n}), dr.view({m, 2}), k, dt.view({m, max_blocks}),
                            block_size, dout.view({m, k}));
    dsa_test::check_bits_equal("slots", dsa_test::download(dout, stream.get()), expected);
  }
}

TEST_CASE("cuda topk_indices_paged: a negative device-side page-table entry gives -1, not a bad slot") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  const index_t m = 1, n = 8, k = 8, block_size = 4;
  const std::vector<float> s = {8, 7, 6, 5, 4, 3, 2, 1};
  const std::vector<std::int32_t> ranges = {0, 8};
  const std::vector<std::int32_t> table = {-3, 10};
  dsa_test::test_stream stream;
  auto ds = dsa_test::upload(s, stream.get());
  auto dr = dsa_test::upload(ranges, stream.get());
  auto dt = dsa_test::upload(table, stream.get());
  dsa::device_buffer<std::int32_t> dout(m * k, stream.get());
  dsa::topk_indices_paged(stream.backend(), ds.view({m, n}), dr.view({m, 2}), k, dt.view({m, 2}), block_size,
                          dout.view({m, k}));
  const std::vector<std::int32_t> expected = {-1, -1, -1, -1, 40, 41, 42, 43};
  CHECK(dsa_test::download(dout, stream.get()) == expected);
}

namespace {

template <class T>
void check_gather(index_t n, index_t d, index_t m, index_t k, index_t src_offset, std::uint64_t seed) {
  CAPTURE(n);
  CAPTURE(d);
  CAPTURE(src_offset);
  std::vector<T> src(static_cast<std::size_t>(n * d + src_offset));
  const auto values = dsa_test::uniform(src.size(), seed, -100.0f, 100.0f);
  for (std::size_t i = 0; i < src.size(); ++i) {
    if constexpr (std::is_same_v<T, std::uint8_t>) {
      src[i] = static_cast<std::uint8_t>(static_cast<int>(values[i]) & 0xFF);
    } else {
      src[i] = dsa::from_float<T>(values[i]);
    }
  }
  std::mt19937_64 rng(seed + 1);
  std::vector<std::int32_t> idx(static_cast<std::size_t>(m * k));
  for (auto& i : idx) i = rng() % 5 == 0 ? -1 : static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(n));
  std::vector<T> expected(static_cast<std::size_t>(m * k * d));
  dsa::gather_rows(dsa::cpu, dsa::make_view(std::as_const(src).data() + src_offset, {n, d}),
                   dsa::make_view(idx.data(), {m, k}), dsa::make_view(expected.data(), {m, k, d}));
  dsa_test::test_stream stream;
  auto dsrc = dsa_test::upload(src, stream.get());
  auto didx = dsa_test::upload(idx, stream.get());
  dsa::device_buffer<T> ddst(m * k * d, stream.get());
  dsa::gather_rows(stream.backend(), dsa::device_view<const T, 2>(dsrc.data() + src_offset, {n, d}),
                   didx.view({m, k}), ddst.view({m, k, d}));
  dsa_test::check_bits_equal("dst", dsa_test::download(ddst, stream.get()), expected);
}

}  // namespace

TEST_CASE("cuda gather_rows: identical to the CPU for float, bf16 and cache-row bytes") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  check_gather<float>(300, 512, 4, 64, 0, 1);          // 16-byte rows: vectorised
  check_gather<float>(300, 7, 4, 64, 0, 2);            // 28-byte rows: per element
  check_gather<dsa::bf16>(200, 576, 16, 64, 0, 3);     // the sparse_mla kv rows
  check_gather<dsa::bf16>(200, 576, 16, 64, 1, 4);     // misaligned source: per element
  check_gather<std::uint8_t>(500, 656, 3, 2048, 0, 5); // FP8 cache rows, V3.2's top-2048
  check_gather<std::uint8_t>(500, 132, 3, 128, 0, 6);  // indexer rows (132 bytes: per element)
}

TEST_CASE("cuda gather_rows: device-side indices outside [0, n) give zero rows, never a bad read") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  const index_t n = 3, d = 4;
  const std::vector<float> src = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<std::int32_t> idx = {2, 3, -5, std::numeric_limits<std::int32_t>::max(), 0, -1};
  dsa_test::test_stream stream;
  auto dsrc = dsa_test::upload(src, stream.get());
  auto didx = dsa_test::upload(idx, stream.get());
  dsa::device_buffer<float> ddst(6 * d, stream.get());
  dsa::gather_rows(stream.backend(), dsrc.view({n, d}), didx.view({1, 6}), ddst.view({1, 6, d}));
  const std::vector<float> expected = {9, 10, 11, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0};
  CHECK(dsa_test::download(ddst, stream.get()) == expected);
}
