// topk_indices, topk_indices_paged and gather_rows: selections against a sort-based oracle on
// random, tied, NaN/inf-laden and signed-zero rows, page-table mapping, gathering, and every
// front-end check.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dsa/core/types.hpp"
#include "dsa/cpu/topk.hpp"
#include "dsa/ops/topk.hpp"
#include "support/random.hpp"
#include "support/topk_reference.hpp"

namespace {

using dsa::index_t;
constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float qnan = std::numeric_limits<float>::quiet_NaN();

std::vector<std::int32_t> run_topk(const std::vector<float>& scores, index_t m, index_t n,
                                   const std::vector<std::int32_t>& ranges, index_t k,
                                   const dsa::cpu_backend& be = dsa::cpu) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(m * k), 12345);
  dsa::topk_indices(be, dsa::make_view(scores.data(), {m, n}), dsa::make_view(ranges.data(), {m, 2}), k,
                    dsa::make_view(out.data(), {m, k}));
  return out;
}

void check_rows(const std::vector<float>& scores, index_t m, index_t n, const std::vector<std::int32_t>& ranges,
                index_t k, const dsa::cpu_backend& be = dsa::cpu) {
  const auto ours = run_topk(scores, m, n, ranges, k, be);
  for (index_t t = 0; t < m; ++t) {
    const auto expect = dsa_test::topk_reference(scores.data() + t * n, ranges[2 * t], ranges[2 * t + 1], k);
    const std::vector<std::int32_t> got(ours.begin() + t * k, ours.begin() + (t + 1) * k);
    INFO("row " << t << ", range [" << ranges[2 * t] << ", " << ranges[2 * t + 1] << "), k = " << k);
    CHECK(got == expect);
  }
}

std::vector<std::int32_t> full_ranges(index_t m, index_t n) {
  std::vector<std::int32_t> r(static_cast<std::size_t>(2 * m), 0);
  for (index_t t = 0; t < m; ++t) r[2 * t + 1] = static_cast<std::int32_t>(n);
  return r;
}

}  // namespace

TEST_CASE("topk_indices equals the sort oracle on random rows and ranges") {
  const index_t m = 12, n = 1000;
  auto scores = dsa_test::normal(static_cast<std::size_t>(m * n), 42, 3.0f);
  // Mixed ranges: full, start > 0, empty, short ranges below k.
  std::vector<std::int32_t> ranges = {0, 1000, 17, 1000, 0, 1, 500, 500, 0, 0, 999, 1000,
                                      3, 70, 100, 900, 0, 600, 250, 251, 1, 999, 0, 64};
  for (index_t k : {1, 2, 7, 63, 64, 65, 333, 999, 1000, 1500}) check_rows(scores, m, n, ranges, k);
}

TEST_CASE("topk_indices: scores of one magnitude, spread over all digits, and huge values") {
  const index_t m = 4, n = 4096;
  std::vector<float> scores(static_cast<std::size_t>(m * n));
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> unit(1.0f, 2.0f);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (index_t j = 0; j < n; ++j) {
    scores[j] = unit(rng);  // one exponent: the first radix pass cannot separate them
    float x;
    do {
      const std::uint32_t u = bits(rng);
      std::memcpy(&x, &u, 4);
    } while (std::isnan(x));
    scores[n + j] = x;                                // every bit pattern but NaN, +-inf, subnormals included
    scores[2 * n + j] = (j % 2 ? 1.0f : -1.0f) * 3e38f * unit(rng) / 2.0f;
    scores[3 * n + j] = std::ldexp(unit(rng), -140);  // subnormals
  }
  for (index_t k : {1, 100, 2048, 4095}) check_rows(scores, m, n, full_ranges(m, n), k);
}

TEST_CASE("topk_indices: heavy ties go to the smaller index") {
  const index_t m = 6, n = 777;
  std::vector<float> scores(static_cast<std::size_t>(m * n));
  std::mt19937_64 rng(5);
  for (index_t t = 0; t < m; ++t) {
    std::uniform_int_distribution<int> pick(0, static_cast<int>(t));  // row t has t + 1 distinct values
    for (index_t j = 0; j < n; ++j) scores[t * n + j] = 0.25f * static_cast<float>(pick(rng)) - 0.5f;
  }
  std::vector<std::int32_t> ranges = {0, 777, 10, 700, 0, 777, 300, 777, 1, 2, 0, 777};
  for (index_t k : {1, 5, 100, 388, 776, 777}) check_rows(scores, m, n, ranges, k);
  // All equal: the first k of the range.
  const auto out = run_topk(std::vector<float>(10, 2.0f), 1, 10, {3, 9}, 4);
  CHECK(out == std::vector<std::int32_t>{3, 4, 5, 6});
}

TEST_CASE("topk_indices: NaN ranks above every number, -inf below; both are selectable") {
  // torch.topk's order, which DeepSeek's reference selects with: a score that went NaN is
  // selected first, so the NaN reaches the attention instead of emptying the selection.
  const index_t n = 20;
  std::vector<float> row = {1.0f, qnan, -inf, inf, -2.0f, -qnan, -inf, 0.5f, inf, qnan,
                            -1e30f, 3.0f, -inf, qnan, 2.0f, -inf, -inf, qnan, 1.0f, -3.0f};
  CHECK(run_topk(row, 1, n, {0, 20}, 2) == std::vector<std::int32_t>{1, 5});
  CHECK(run_topk(row, 1, n, {0, 20}, 5) == std::vector<std::int32_t>{1, 5, 9, 13, 17});
  CHECK(run_topk(row, 1, n, {0, 20}, 7) == std::vector<std::int32_t>{1, 3, 5, 8, 9, 13, 17});
  // 5 NaN, 10 numbers (+inf included), 5 -inf: the 16th and 17th are the first two -inf.
  CHECK(run_topk(row, 1, n, {0, 20}, 15) ==
        std::vector<std::int32_t>{0, 1, 3, 4, 5, 7, 8, 9, 10, 11, 13, 14, 17, 18, 19});
  CHECK(run_topk(row, 1, n, {0, 20}, 17) ==
        std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 17, 18, 19});
  // Every position of the range is selectable: k beyond the range pads with -1.
  CHECK(run_topk(row, 1, n, {0, 20}, 22) == std::vector<std::int32_t>{0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                                                    11, 12, 13, 14, 15, 16, 17, 18, 19, -1, -1});
  CHECK(run_topk(row, 1, n, {1, 3}, 3) == std::vector<std::int32_t>{1, 2, -1});
  // A row whose scores are all NaN or all -inf selects its first k positions, not nothing.
  CHECK(run_topk(std::vector<float>(8, qnan), 1, 8, {2, 8}, 3) == std::vector<std::int32_t>{2, 3, 4});
  CHECK(run_topk(std::vector<float>(8, -inf), 1, 8, {2, 8}, 3) == std::vector<std::int32_t>{2, 3, 4});
  // Random NaN/-inf-laden rows against the oracle.
  const index_t m = 5, wide = 900;
  auto scores = dsa_test::normal(static_cast<std::size_t>(m * wide), 77);
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int> kind(0, 9);
  for (auto& x : scores) {
    const int c = kind(rng);
    if (c == 0) x = qnan;
    if (c == 1 || c == 2) x = -inf;  // many -inf, as outside a causal range
    if (c == 3) x = inf;
  }
  for (index_t k : {1, 50, 90, 500, 900}) check_rows(scores, m, wide, full_ranges(m, wide), k);
}

TEST_CASE("topk_indices: -0.0 and +0.0 tie") {
  std::vector<float> row = {-0.0f, 0.0f, -0.0f, -1.0f, 0.0f, -0.0f};
  CHECK(run_topk(row, 1, 6, {0, 6}, 2) == std::vector<std::int32_t>{0, 1});
  CHECK(run_topk(row, 1, 6, {1, 6}, 3) == std::vector<std::int32_t>{1, 2, 4});
  CHECK(run_topk(row, 1, 6, {0, 6}, 6) == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5});
  std::vector<float> zeros(300);
  for (std::size_t i = 0; i < zeros.size(); ++i) zeros[i] = (i * 7) % 3 ? 0.0f : -0.0f;
  check_rows(zeros, 1, 300, {0, 300}, 100);
}

TEST_CASE("topk_indices is identical for every thread count") {
  const index_t m = 33, n = 500;
  const auto scores = dsa_test::normal(static_cast<std::size_t>(m * n), 8);
  const auto ranges = full_ranges(m, n);
  const auto one = run_topk(scores, m, n, ranges, 40, dsa::cpu_backend{1});
  CHECK(run_topk(scores, m, n, ranges, 40, dsa::cpu_backend{4}) == one);
}

TEST_CASE("topk_indices: long rows split over the threads equal the oracle for every thread count") {
  // Rows >= cpu_detail::topk_split_min with fewer rows than threads are split over column
  // chunks; odd lengths and starts exercise the vector loops' tails and unaligned chunks.
  const index_t n = 40001;
  std::mt19937_64 rng(21);
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<int> few(0, 3);
  auto normal = dsa_test::normal(static_cast<std::size_t>(n), 5, 2.0f);
  std::vector<std::vector<float>> rows;
  rows.push_back(normal);  // smooth
  {
    std::vector<float> r(static_cast<std::size_t>(n));
    for (auto& x : r) x = 0.5f * static_cast<float>(few(rng));  // heavy ties
    rows.push_back(r);
  }
  {
    auto r = normal;  // NaN / -inf / +inf laden: 40% special values
    for (auto& x : r) {
      const int c = kind(rng);
      if (c == 0 || c == 1) x = qnan;
      if (c == 2 || c == 3) x = -inf;
      if (c == 4) x = inf;
    }
    rows.push_back(r);
  }
  {
    auto r = normal;  // almost all NaN or -inf: more NaN than k
    for (std::size_t j = 0; j < r.size(); ++j) {
      if (j % 37 != 0) r[j] = (j % 2) ? qnan : -inf;
    }
    rows.push_back(r);
  }
  rows.push_back(std::vector<float>(static_cast<std::size_t>(n), 1.5f));  // all equal
  rows.push_back(std::vector<float>(static_cast<std::size_t>(n), qnan));  // all NaN: ties throughout
  {
    std::vector<float> r(static_cast<std::size_t>(n));
    for (auto& x : r) x = -std::ldexp(1.0f + 0.001f * static_cast<float>(few(rng)), -130);  // negative subnormals, -0.0
    r[100] = -0.0f;
    r[40000] = 0.0f;
    rows.push_back(r);
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    for (const std::vector<std::int32_t>& range : {std::vector<std::int32_t>{0, 40001}, std::vector<std::int32_t>{3, 39990}}) {
      for (index_t k : {1, 2048, 30000}) {
        for (int threads : {1, 2, 3, 8}) {
          CAPTURE(i);
          CAPTURE(threads);
          check_rows(rows[i], 1, n, range, k, dsa::cpu_backend{threads});
        }
      }
    }
  }
  // Several rows, fewer than the threads: each row is split in turn.
  std::vector<float> three;
  for (int i = 0; i < 3; ++i) three.insert(three.end(), rows[static_cast<std::size_t>(i)].begin(), rows[static_cast<std::size_t>(i)].end());
  check_rows(three, 3, n, {0, 40001, 7, 40001, 0, 20000}, 2048, dsa::cpu_backend{4});
}

TEST_CASE("topk passes: the vectorised keys, histogram and candidate lists equal the scalar definition") {
  // Special values and random bit patterns (NaN payloads of both signs, +-inf, +-0, subnormals).
  std::vector<float> x = {0.0f, -0.0f, inf, -inf, qnan, -qnan, 1.0f, -1.0f, 3e38f, -3e38f, 1e-45f, -1e-45f};
  std::mt19937_64 rng(77);
  std::uniform_int_distribution<std::uint32_t> bits;
  while (x.size() < 1000) {
    const std::uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  for (std::uint32_t u : {0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0xFFFFFFFFu, 0x00000001u, 0x80000001u, 0x80000000u}) {
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  for (index_t len : std::vector<index_t>{0, 1, 15, 16, 17, 255, 256, 257, 300, static_cast<index_t>(x.size())}) {
    CAPTURE(len);
    std::vector<std::uint32_t> hist(dsa::cpu_detail::topk_cpu_buckets0), want_hist(hist.size(), 0);
    std::vector<std::uint32_t> want_keys;
    for (index_t j = 0; j < len; ++j) {
      const std::uint32_t key = dsa::topk_radix_key(x[static_cast<std::size_t>(j)]);
      want_keys.push_back(key);
      ++want_hist[key >> dsa::cpu_detail::topk_cpu_shift0];
    }
    dsa::cpu_detail::topk_histogram(x.data(), len, hist.data());
    CHECK(hist == want_hist);
    for (std::uint32_t lo : {0u, 1u, 0x80000000u, 0xC0000000u}) {
      CAPTURE(lo);
      std::vector<std::uint32_t> pos(static_cast<std::size_t>(len + dsa::cpu_detail::topk_segment_pad));
      std::vector<std::uint32_t> keys(pos.size());
      const index_t count = dsa::cpu_detail::topk_collect(x.data(), len, lo, 1000, pos.data(), keys.data());
      std::vector<std::uint32_t> want_pos, want_sel;
      for (index_t j = 0; j < len; ++j) {
        if (want_keys[static_cast<std::size_t>(j)] >= lo) {
          want_pos.push_back(static_cast<std::uint32_t>(1000 + j));
          want_sel.push_back(want_keys[static_cast<std::size_t>(j)]);
        }
      }
      REQUIRE(count == static_cast<index_t>(want_pos.size()));
      CHECK(std::vector<std::uint32_t>(pos.begin(), pos.begin() + count) == want_pos);
      CHECK(std::vector<std::uint32_t>(keys.begin(), keys.begin() + count) == want_sel);
    }
  }
}

TEST_CASE("topk_indices front-end checks") {
  const index_t m = 2, n = 10;
  std::vector<float> scores(static_cast<std::size_t>(m * n));
  std::vector<std::int32_t> ranges = {0, 10, 2, 5};
  std::vector<std::int32_t> out(static_cast<std::size_t>(m * 3), 99);
  auto sv = dsa::make_view(scores.data(), {m, n});
  auto ov = dsa::make_view(out.data(), {m, 3});
  auto rv = [&] { return dsa::make_view(ranges.data(), {m, 2}); };
  CHECK_THROWS_WITH_AS(dsa::topk_indices(dsa::cpu, sv, rv(), 0, dsa::make_view(out.data(), {m, 0})),
                       doctest::Contains("dsa::topk_indices: k = 0; expected >= 1"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::topk_indices(dsa::cpu, sv, rv(), -3, ov), doctest::Contains("k = -3; expected >= 1"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(dsa::topk_indices(dsa::cpu, sv, rv(), 2, ov),
                       doctest::Contains("dsa::topk_indices: indices.extent(1) = 3; expected 2"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::topk_indices(dsa::cpu, sv, rv(), 3, dsa::make_view(out.data(), {1, 3})),
                       doctest::Contains("indices.extent(0) = 1; expected 2"), dsa::error);
  ranges = {0, 11, 2, 5};
  CHECK_THROWS_WITH_AS(dsa::topk_indices(dsa::cpu, sv, rv(), 3, ov),
                       doctest::Contains("dsa::topk_indices: ranges(0, 1) = 11; expected an end in [start, n] = [0, 10]"),
                       dsa::error);
  ranges = {0, 10, 6, 5};
  CHECK_THROWS_WITH_AS(dsa::topk_indices(dsa::cpu, sv, rv(), 3, ov), doctest::Contains("ranges(1, 1) = 5"), dsa::error);
  ranges = {-4, 10, 2, 5};
  CHECK_THROWS_WITH_AS(dsa::topk_indices(dsa::cpu, sv, rv(), 3, ov),
                       doctest::Contains("ranges(0, 0) = -4; expected a start in [0, 10]"), dsa::error);
  ranges = {0, 10, 2, 5};
  CHECK_THROWS_WITH_AS(dsa::topk_indices(dsa::cpu, sv, dsa::make_view(ranges.data(), {1, 2}), 3, ov),
                       doctest::Contains("ranges.extent(0) = 1; expected 2"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::topk_indices(dsa::cpu, sv, dsa::make_view(ranges.data(), {2, 1}), 3, ov),
                       doctest::Contains("ranges.extent(1) = 1; expected 2"), dsa::error);
  dsa::tensor_view<const float, 2> strided(scores.data(), {m, 5}, {10, 2});
  CHECK_THROWS_WITH_AS(dsa::topk_indices(dsa::cpu, strided, rv(), 3, ov),
                       doctest::Contains("scores.stride(1) = 2; expected 1"), dsa::error);
  CHECK(out == std::vector<std::int32_t>(out.size(), 99));  // nothing written by a failed call
  CHECK_NOTHROW(dsa::topk_indices(dsa::cpu, sv, rv(), 3, ov));
}

TEST_CASE("topk_indices_paged maps the selection through the page table") {
  const index_t m = 4, n = 300, block_size = 16, max_blocks = 20, k = 50;
  const auto scores = dsa_test::normal(static_cast<std::size_t>(m * n), 31);
  std::vector<std::int32_t> ranges = {0, 300, 40, 260, 7, 30, 100, 100};
  std::vector<std::int32_t> table(static_cast<std::size_t>(m * max_blocks), -1);
  for (index_t t = 0; t < m; ++t)
    for (index_t b = 0; b * block_size < n; ++b) {
      const index_t first = b * block_size, last = first + block_size;  // leave uncovered blocks at -1
      if (last > ranges[2 * t] && first < ranges[2 * t + 1]) table[t * max_blocks + b] = static_cast<std::int32_t>(1000 * t + 3 * b + 1);
    }
  std::vector<std::int32_t> slots(static_cast<std::size_t>(m * k));
  dsa::topk_indices_paged(dsa::cpu, dsa::make_view(scores.data(), {m, n}), dsa::make_view(ranges.data(), {m, 2}), k,
                          dsa::make_view(table.data(), {m, max_blocks}), block_size,
                          dsa::make_view(slots.data(), {m, k}));
  const auto logical = run_topk(scores, m, n, ranges, k);
  for (index_t t = 0; t < m; ++t) {
    for (index_t j = 0; j < k; ++j) {
      const std::int32_t p = logical[t * k + j];
      const std::int32_t expect = p < 0 ? -1 : table[t * max_blocks + p / block_size] * 16 + p % 16;
      CHECK(slots[t * k + j] == expect);
    }
  }
  CHECK(slots[2 * k + 23] == -1);  // row 2 has 23 selectable positions
}

TEST_CASE("topk_indices_paged front-end checks") {
  const index_t m = 2, n = 40, block_size = 16;
  std::vector<float> scores(static_cast<std::size_t>(m * n), 1.0f);
  std::vector<std::int32_t> ranges = {0, 40, 20, 33};
  std::vector<std::int32_t> table = {0, 1, 2, -1, 3, 4};
  std::vector<std::int32_t> out(static_cast<std::size_t>(m * 4));
  auto run = [&](index_t max_blocks, index_t bs) {
    dsa::topk_indices_paged(dsa::cpu, dsa::make_view(scores.data(), {m, n}), dsa::make_view(ranges.data(), {m, 2}), 4,
                            dsa::make_view(table.data(), {m, max_blocks}), bs, dsa::make_view(out.data(), {m, 4}));
  };
  CHECK_NOTHROW(run(3, block_size));
  table[4] = -1;
  CHECK_THROWS_WITH_AS(run(3, block_size),
                       doctest::Contains("dsa::topk_indices_paged: block_table(1, 1) = -1; expected a block index in [0, "),
                       dsa::error);
  table[4] = std::numeric_limits<std::int32_t>::max() / 8;  // slot overflows int32
  CHECK_THROWS_WITH_AS(run(3, block_size), doctest::Contains("block_table(1, 1) = 268435455"), dsa::error);
  table[4] = 3;
  CHECK_THROWS_WITH_AS(run(3, 0), doctest::Contains("block_size = 0; expected >= 1"), dsa::error);
  CHECK_THROWS_WITH_AS(run(2, 16), doctest::Contains("scores.extent(1) = 40; expected <= block_table.extent(1) * block_size = 2 * 16"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(dsa::topk_indices_paged(dsa::cpu, dsa::make_view(scores.data(), {m, n}),
                                               dsa::make_view(ranges.data(), {m, 2}), 4,
                                               dsa::make_view(table.data(), {1, 6}), block_size,
                                               dsa::make_view(out.data(), {m, 4})),
                       doctest::Contains("block_table.extent(0) = 1; expected 2"), dsa::error);
}

TEST_CASE("gather_rows copies selected rows and zeros for -1") {
  const index_t n = 9, d = 5, m = 2, k = 4;
  std::vector<float> src(static_cast<std::size_t>(n * d));
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.5f;
  std::vector<std::int32_t> idx = {8, -1, 0, 3, -1, -1, 4, 4};
  std::vector<float> dst(static_cast<std::size_t>(m * k * d), 77.0f);
  dsa::gather_rows(dsa::cpu, dsa::make_view(src.data(), {n, d}), dsa::make_view(idx.data(), {m, k}),
                   dsa::make_view(dst.data(), {m, k, d}));
  for (index_t t = 0; t < m; ++t)
    for (index_t j = 0; j < k; ++j)
      for (index_t i = 0; i < d; ++i) {
        const std::int32_t r = idx[t * k + j];
        CHECK(dst[(t * k + j) * d + i] == (r < 0 ? 0.0f : src[r * d + i]));
      }
  // bf16 and raw cache bytes, strided dst with padding that must survive.
  std::vector<dsa::bf16> hsrc = dsa_test::convert<dsa::bf16>(src);
  std::vector<dsa::bf16> hdst(static_cast<std::size_t>(m * k * (d + 2)), dsa::bf16(9.0f));
  dsa::tensor_view<dsa::bf16, 3> hv(hdst.data(), {m, k, d}, {k * (d + 2), d + 2, 1});
  dsa::gather_rows(dsa::cpu, dsa::make_view(hsrc.data(), {n, d}), dsa::make_view(idx.data(), {m, k}), hv);
  for (index_t t = 0; t < m; ++t)
    for (index_t j = 0; j < k; ++j) {
      const std::int32_t r = idx[t * k + j];
      for (index_t i = 0; i < d; ++i) CHECK(hv(t, j, i).bits == (r < 0 ? 0 : hsrc[r * d + i].bits));
      CHECK(hdst[(t * k + j) * (d + 2) + d] == dsa::bf16(9.0f));
      CHECK(hdst[(t * k + j) * (d + 2) + d + 1] == dsa::bf16(9.0f));
    }
  std::vector<std::uint8_t> cache(static_cast<std::size_t>(n * 132));
  for (std::size_t i = 0; i < cache.size(); ++i) cache[i] = static_cast<std::uint8_t>(i * 31);
  std::vector<std::uint8_t> rows(static_cast<std::size_t>(m * k * 132), 1);
  dsa::gather_rows(dsa::cpu_backend{2}, dsa::make_view(cache.data(), {n, 132}), dsa::make_view(idx.data(), {m, k}),
                   dsa::make_view(rows.data(), {m, k, 132}));
  for (index_t t = 0; t < m; ++t)
    for (index_t j = 0; j < k; ++j) {
      const std::int32_t r = idx[t * k + j];
      for (index_t i = 0; i < 132; ++i) CHECK(rows[(t * k + j) * 132 + i] == (r < 0 ? 0 : cache[r * 132 + i]));
    }
}

TEST_CASE("gather_rows front-end checks; a bad index writes nothing") {
  const index_t n = 4, d = 3;
  std::vector<float> src(static_cast<std::size_t>(n * d), 1.0f);
  std::vector<std::int32_t> idx = {0, 1, 2, 4};
  std::vector<float> dst(static_cast<std::size_t>(4 * d), 5.0f);
  auto run = [&](index_t m, index_t k, index_t dd) {
    dsa::gather_rows(dsa::cpu, dsa::make_view(src.data(), {n, d}), dsa::make_view(idx.data(), {m, k}),
                     dsa::make_view(dst.data(), {m, k, dd}));
  };
  CHECK_THROWS_WITH_AS(run(2, 2, d),
                       doctest::Contains("dsa::gather_rows: indices(1, 1) = 4; expected -1 (unused) or a row in [0, 4) of src"),
                       dsa::error);
  CHECK(dst == std::vector<float>(dst.size(), 5.0f));
  idx[3] = -2;
  CHECK_THROWS_WITH_AS(run(2, 2, d), doctest::Contains("indices(1, 1) = -2"), dsa::error);
  idx[3] = -1;
  CHECK_THROWS_WITH_AS(run(2, 2, 2), doctest::Contains("dsa::gather_rows: dst.extent(2) = 2; expected 3"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::gather_rows(dsa::cpu, dsa::make_view(src.data(), {n, d}), dsa::make_view(idx.data(), {2, 2}),
                                        dsa::make_view(dst.data(), {2, 1, d})),
                       doctest::Contains("dst.extent(1) = 1; expected 2"), dsa::error);
  CHECK(dst == std::vector<float>(dst.size(), 5.0f));
  CHECK_NOTHROW(run(2, 2, d));
  CHECK(dst[9] == 0.0f);
}
