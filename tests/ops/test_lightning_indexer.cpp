// lightning_indexer_scores (fp8 and fp32), the paged variant and the backward pass: results
// against a float64 oracle and the normative evaluation order, determinism, and every
// front-end check.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dsa/core/types.hpp"
#include "dsa/cpu/lightning_indexer.hpp"
#include "dsa/numerics/fp32_ops.hpp"
#include "dsa/numerics/lightning_indexer.hpp"
#include "dsa/ops/lightning_indexer.hpp"
#include "support/lightning_indexer_reference.hpp"
#include "support/nan_bits.hpp"
#include "support/random.hpp"

namespace {

using dsa::index_t;
constexpr float neg_inf = -std::numeric_limits<float>::infinity();

// An fp8 problem with its double-precision mirror (the exact values of the codes).
struct fp8_problem {
  index_t m, heads, d, n;
  std::vector<dsa::fp8_e4m3> q, k;
  std::vector<float> w, k_scale;
  std::vector<std::int32_t> ranges;

  fp8_problem(index_t m_, index_t heads_, index_t d_, index_t n_, std::uint64_t seed)
      : m(m_), heads(heads_), d(d_), n(n_) {
    // Codes spread over the e4m3 range like activations after act_quant (|x| up to ~448).
    q = dsa_test::convert<dsa::fp8_e4m3>(dsa_test::normal(static_cast<std::size_t>(m * heads * d), seed, 60.0f));
    k = dsa_test::convert<dsa::fp8_e4m3>(dsa_test::normal(static_cast<std::size_t>(n * d), seed + 1, 60.0f));
    w = dsa_test::normal(static_cast<std::size_t>(m * heads), seed + 2, 0.01f);
    k_scale = dsa_test::uniform(static_cast<std::size_t>(n), seed + 3, 1e-3f, 4e-3f);
    ranges.resize(static_cast<std::size_t>(2 * m));
    for (index_t t = 0; t < m; ++t) {
      // A mix: full, causal-like, offset, empty.
      index_t start = 0, end = n;
      switch (t % 4) {
        case 0: break;
        case 1: end = std::min<index_t>(n, 1 + t * 37); break;
        case 2: start = std::min<index_t>(n, 5 + t), end = std::min<index_t>(n, start + 200); break;
        case 3: start = end = std::min<index_t>(n, t); break;
      }
      ranges[2 * t] = static_cast<std::int32_t>(start);
      ranges[2 * t + 1] = static_cast<std::int32_t>(end);
    }
  }

  dsa_test::indexer_problem as_double() const {
    dsa_test::indexer_problem p;
    p.m = m, p.heads = heads, p.d = d, p.n = n;
    for (auto x : q) p.q.push_back(x.to_float());
    for (auto x : k) p.k.push_back(x.to_float());
    p.w.assign(w.begin(), w.end());
    p.k_scale.assign(k_scale.begin(), k_scale.end());
    p.ranges = ranges;
    return p;
  }

  auto qv() const { return dsa::make_view(q.data(), {m, heads, d}); }
  auto wv() const { return dsa::make_view(w.data(), {m, heads}); }
  auto kv() const { return dsa::make_view(k.data(), {n, d}); }
  auto ksv() const { return dsa::make_view(k_scale.data(), {n}); }
  auto rv() const { return dsa::make_view(ranges.data(), {m, 2}); }

  std::vector<float> run(const dsa::cpu_backend& be) const {
    std::vector<float> scores(static_cast<std::size_t>(m * n), 123.0f);
    dsa::lightning_indexer_scores(be, qv(), wv(), kv(), ksv(), rv(), dsa::make_view(scores.data(), {m, n}));
    return scores;
  }
};

// |ours - ref| <= rel * max |ref| of the row (the golden tolerance), -inf exactly where the
// reference has it.
void check_against_reference(const std::vector<float>& ours, const std::vector<double>& ref, index_t m, index_t n,
                             double rel) {
  for (index_t t = 0; t < m; ++t) {
    double row_max = 0.0;
    for (index_t s = 0; s < n; ++s) {
      const double r = ref[t * n + s];
      if (std::isfinite(r)) row_max = std::max(row_max, std::abs(r));
    }
    for (index_t s = 0; s < n; ++s) {
      const double r = ref[t * n + s];
      const float o = ours[t * n + s];
      if (std::isinf(r)) {
        INFO("t = " << t << ", s = " << s);
        CHECK(o == neg_inf);
      } else if (!(std::abs(o - r) <= rel * row_max + 1e-30)) {
        FAIL_CHECK("t = " << t << ", s = " << s << ": " << o << " vs " << r << " (row max " << row_max << ")");
      }
    }
  }
}

// Packs keys into the 132-byte indexer cache rows at the given slots.
std::vector<std::uint8_t> pack_cache(const fp8_problem& p, const std::vector<index_t>& slot_of, index_t slots) {
  std::vector<std::uint8_t> cache(static_cast<std::size_t>(slots * 132), 0xEE);
  for (index_t s = 0; s < p.n; ++s) {
    std::uint8_t* row = cache.data() + slot_of[s] * 132;
    for (index_t i = 0; i < 128; ++i) row[i] = p.k[s * 128 + i].bits;
    std::memcpy(row + 128, &p.k_scale[s], 4);
  }
  return cache;
}

}  // namespace

TEST_CASE("lightning_indexer_scores fp8 matches the float64 formula") {
  // H = 7 and d = 40 exercise the head-block and tile remainders; n = 300 two chunks and a
  // partial key tile.
  for (auto [heads, d] : {std::pair<index_t, index_t>{7, 40}, {64, 128}, {1, 1}}) {
    const fp8_problem p(9, heads, d, 300, 11 + heads);
    const auto ours = p.run(dsa::cpu);
    check_against_reference(ours, dsa_test::indexer_scores_reference(p.as_double()), p.m, p.n, 1e-5);
  }
}

TEST_CASE("lightning_indexer_scores fp8 follows the normative evaluation order bit for bit") {
  const fp8_problem p(6, 11, 128, 77, 5);
  const auto ours = p.run(dsa::cpu);
  for (index_t t = 0; t < p.m; ++t) {
    for (index_t s = p.ranges[2 * t]; s < p.ranges[2 * t + 1]; ++s) {
      const float expect = dsa::lightning_indexer_score(p.q.data() + t * p.heads * p.d, p.d, p.w.data() + t * p.heads,
                                                        p.k.data() + s * p.d, p.k_scale[s], p.heads, p.d);
      const float got = ours[t * p.n + s];
      INFO("t = " << t << ", s = " << s);
      CHECK(std::memcmp(&expect, &got, sizeof got) == 0);
    }
  }
}

TEST_CASE("lightning_indexer_scores is bit-identical for every thread count") {
  const fp8_problem p(13, 9, 64, 1000, 21);
  const auto one = p.run(dsa::cpu_backend{1});
  for (int threads : {2, 3, 8}) {
    const auto many = p.run(dsa::cpu_backend{threads});
    CHECK(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("lightning_indexer_scores writes exactly its outputs, through strided views") {
  const fp8_problem p(4, 5, 32, 70, 3);
  // scores with padded rows: the padding must survive.
  const index_t ld = p.n + 9;
  std::vector<float> padded(static_cast<std::size_t>(p.m * ld), 7.0f);
  dsa::tensor_view<float, 2> sv(padded.data(), {p.m, p.n}, {ld, 1});
  // q with padded head and row strides.
  std::vector<dsa::fp8_e4m3> qpad(static_cast<std::size_t>(p.m * p.heads * (p.d + 3) + 11));
  dsa::tensor_view<dsa::fp8_e4m3, 3> qv(qpad.data(), {p.m, p.heads, p.d}, {p.heads * (p.d + 3) + 2, p.d + 3, 1});
  for (index_t t = 0; t < p.m; ++t)
    for (index_t h = 0; h < p.heads; ++h)
      for (index_t i = 0; i < p.d; ++i) qv(t, h, i) = p.q[(t * p.heads + h) * p.d + i];
  dsa::lightning_indexer_scores(dsa::cpu, qv, p.wv(), p.kv(), p.ksv(), p.rv(), sv);
  const auto dense = p.run(dsa::cpu);
  for (index_t t = 0; t < p.m; ++t) {
    CHECK(std::memcmp(padded.data() + t * ld, dense.data() + t * p.n, p.n * sizeof(float)) == 0);
    for (index_t j = p.n; j < ld; ++j) CHECK(padded[t * ld + j] == 7.0f);
  }
}

TEST_CASE("lightning_indexer_scores: a NaN code propagates, negative dots are cut by the ReLU") {
  fp8_problem p(2, 3, 16, 20, 8);
  p.ranges = {0, 20, 0, 20};
  p.q[0] = dsa::fp8_e4m3::from_bits(0x7F);  // NaN in row 0, head 0
  // Row 1: every dot is negative except head 2's, so only head 2 contributes.
  for (index_t h = 0; h < 3; ++h)
    for (index_t i = 0; i < 16; ++i) p.q[(3 + h) * 16 + i] = dsa::fp8_e4m3(h == 2 ? 1.0f : -1.0f);
  for (auto& x : p.k) x = dsa::fp8_e4m3(0.5f);
  const auto ours = p.run(dsa::cpu);
  for (index_t s = 0; s < 20; ++s) {
    CHECK(std::isnan(ours[s]));
    CHECK(ours[20 + s] == doctest::Approx(p.w[5] * 8.0f * p.k_scale[s]).epsilon(1e-6));
  }
}

TEST_CASE("lightning_indexer_scores fp32 overload matches the float64 formula") {
  const index_t m = 7, heads = 6, d = 33, n = 129;
  auto q = dsa_test::normal(static_cast<std::size_t>(m * heads * d), 1);
  auto w = dsa_test::normal(static_cast<std::size_t>(m * heads), 2);
  auto k = dsa_test::normal(static_cast<std::size_t>(n * d), 3);
  std::vector<float> ks(static_cast<std::size_t>(n), 1.0f);
  std::vector<std::int32_t> ranges(static_cast<std::size_t>(2 * m));
  for (index_t t = 0; t < m; ++t) {
    ranges[2 * t] = static_cast<std::int32_t>(t);
    ranges[2 * t + 1] = static_cast<std::int32_t>(n - 3 * t);
  }
  std::vector<float> scores(static_cast<std::size_t>(m * n));
  dsa::lightning_indexer_scores(dsa::cpu, dsa::make_view(q.data(), {m, heads, d}), dsa::make_view(w.data(), {m, heads}),
                                dsa::make_view(k.data(), {n, d}), dsa::make_view(ks.data(), {n}),
                                dsa::make_view(ranges.data(), {m, 2}), dsa::make_view(scores.data(), {m, n}));
  dsa_test::indexer_problem p;
  p.m = m, p.heads = heads, p.d = d, p.n = n;
  p.q.assign(q.begin(), q.end());
  p.w.assign(w.begin(), w.end());
  p.k.assign(k.begin(), k.end());
  p.k_scale.assign(ks.begin(), ks.end());
  p.ranges = ranges;
  check_against_reference(scores, dsa_test::indexer_scores_reference(p), m, n, 1e-5);
}

TEST_CASE("lightning_indexer_scores front-end checks") {
  const fp8_problem p(3, 4, 8, 10, 1);
  std::vector<float> scores(static_cast<std::size_t>(p.m * p.n));
  auto sv = dsa::make_view(scores.data(), {p.m, p.n});
  using dsa::make_view;
  std::vector<float> w_bad(static_cast<std::size_t>(p.m * 5));
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(dsa::cpu, p.qv(), make_view(w_bad.data(), {p.m, 5}), p.kv(),
                                                     p.ksv(), p.rv(), sv),
                       doctest::Contains("dsa::lightning_indexer_scores: w.extent(1) = 5; expected 4"), dsa::error);
  std::vector<dsa::fp8_e4m3> k_bad(static_cast<std::size_t>(p.n * 9));
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(dsa::cpu, p.qv(), p.wv(), make_view(k_bad.data(), {p.n, 9}),
                                                     p.ksv(), p.rv(), sv),
                       doctest::Contains("dsa::lightning_indexer_scores: k.extent(1) = 9; expected 8"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(dsa::cpu, p.qv(), p.wv(), make_view(k_bad.data(), {9, 8}),
                                                     p.ksv(), p.rv(), sv),
                       doctest::Contains("dsa::lightning_indexer_scores: k.extent(0) = 9; expected 10"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(dsa::cpu, p.qv(), p.wv(), p.kv(),
                                                     make_view(p.k_scale.data(), {9}), p.rv(), sv),
                       doctest::Contains("k_scale.extent(0) = 9; expected 10"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(dsa::cpu, p.qv(), p.wv(), p.kv(), p.ksv(), p.rv(),
                                                     make_view(scores.data(), {2, 15})),
                       doctest::Contains("dsa::lightning_indexer_scores: scores.extent(0) = 2; expected 3"),
                       dsa::error);
  {
    auto r = p.ranges;
    r[2] = 6, r[3] = 5;  // start > end in row 1
    CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(dsa::cpu, p.qv(), p.wv(), p.kv(), p.ksv(),
                                                       make_view(r.data(), {p.m, 2}), sv),
                         doctest::Contains("dsa::lightning_indexer_scores: ranges(1, 1) = 5; expected an end in [start, n] = [6, 10]"),
                         dsa::error);
    r[2] = -1;
    CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(dsa::cpu, p.qv(), p.wv(), p.kv(), p.ksv(),
                                                       make_view(r.data(), {p.m, 2}), sv),
                         doctest::Contains("ranges(1, 0) = -1; expected a start in [0, 10]"), dsa::error);
    r[2] = 0, r[3] = 11;
    CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(dsa::cpu, p.qv(), p.wv(), p.kv(), p.ksv(),
                                                       make_view(r.data(), {p.m, 2}), sv),
                         doctest::Contains("ranges(1, 1) = 11"), dsa::error);
    CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(dsa::cpu, p.qv(), p.wv(), p.kv(), p.ksv(),
                                                       make_view(r.data(), {2, 2}), sv),
                         doctest::Contains("ranges.extent(0) = 2; expected 3"), dsa::error);
  }
  // Non-unit inner stride, null data.
  std::vector<float> w2(static_cast<std::size_t>(p.m * 8));
  dsa::tensor_view<const float, 2> w_str(w2.data(), {p.m, 4}, {8, 2});
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(dsa::cpu, p.qv(), w_str, p.kv(), p.ksv(), p.rv(), sv),
                       doctest::Contains("w.stride(1) = 2; expected 1"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(dsa::cpu, p.qv(), p.wv(),
                                                     dsa::tensor_view<const dsa::fp8_e4m3, 2>(nullptr, {p.n, p.d}),
                                                     p.ksv(), p.rv(), sv),
                       doctest::Contains("k.data = null"), dsa::error);
}

TEST_CASE("lightning_indexer_scores_paged equals the dense op through a scrambled page table") {
  const index_t m = 5, heads = 9, n = 150;
  fp8_problem p(m, heads, 128, n, 77);
  for (index_t block_size : {1, 16, 64, 200}) {
    const index_t max_blocks = (n + block_size - 1) / block_size + 1;  // one spare column
    const index_t pool = 2 * max_blocks;                               // more blocks than used
    // Per row a different permutation of physical blocks; the logical keys are the same, so
    // the slot of (row t, position p) must hold key p for every row: give each row its own
    // copy of the keys in its own blocks.
    std::vector<std::int32_t> table(static_cast<std::size_t>(m * max_blocks), -1);
    const index_t slots = m * pool * block_size;
    std::vector<std::uint8_t> cache(static_cast<std::size_t>(slots * 132), 0xEE);
    for (index_t t = 0; t < m; ++t) {
      std::vector<index_t> slot_of(static_cast<std::size_t>(n));
      for (index_t b = 0; b * block_size < n; ++b) {
        const index_t phys = t * pool + (b * 7 + t) % pool;  // 7 is coprime to every pool here
        table[t * max_blocks + b] = static_cast<std::int32_t>(phys);
        for (index_t o = 0; o < block_size && b * block_size + o < n; ++o) slot_of[b * block_size + o] = phys * block_size + o;
      }
      const auto rows = pack_cache(p, slot_of, slots);
      for (index_t s = 0; s < n; ++s) std::memcpy(cache.data() + slot_of[s] * 132, rows.data() + slot_of[s] * 132, 132);
    }
    // Blocks a row's range does not reach may hold garbage: row 3's range is [3, 153 - ...).
    // Make the entries past each range invalid to show they are never read.
    for (index_t t = 0; t < m; ++t) {
      const index_t end = p.ranges[2 * t + 1], start = p.ranges[2 * t];
      for (index_t b = 0; b < max_blocks; ++b) {
        if (start == end || b * block_size >= end || (b + 1) * block_size <= start) table[t * max_blocks + b] = -1;
      }
    }
    std::vector<float> paged(static_cast<std::size_t>(m * n));
    dsa::lightning_indexer_scores_paged(dsa::cpu, p.qv(), p.wv(), dsa::make_view(cache.data(), {slots, 132}),
                                        dsa::make_view(table.data(), {m, max_blocks}), block_size, p.rv(),
                                        dsa::make_view(paged.data(), {m, n}));
    const auto dense = p.run(dsa::cpu);
    INFO("block_size = " << block_size);
    CHECK(std::memcmp(paged.data(), dense.data(), dense.size() * sizeof(float)) == 0);
    std::vector<float> paged1(static_cast<std::size_t>(m * n));
    dsa::lightning_indexer_scores_paged(dsa::cpu_backend{1}, p.qv(), p.wv(), dsa::make_view(cache.data(), {slots, 132}),
                                        dsa::make_view(table.data(), {m, max_blocks}), block_size, p.rv(),
                                        dsa::make_view(paged1.data(), {m, n}));
    CHECK(std::memcmp(paged.data(), paged1.data(), paged.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("lightning_indexer_scores_paged front-end checks") {
  const index_t m = 2, heads = 3, n = 40, block_size = 16, max_blocks = 3, slots = 64;
  fp8_problem p(m, heads, 128, n, 9);
  p.ranges = {0, 40, 20, 33};
  std::vector<std::uint8_t> cache(static_cast<std::size_t>(slots * 132));
  std::vector<std::int32_t> table = {0, 1, 2, -1, 3, 0};
  std::vector<float> scores(static_cast<std::size_t>(m * n));
  auto cv = dsa::make_view(cache.data(), {slots, 132});
  auto sv = dsa::make_view(scores.data(), {m, n});
  auto run = [&](auto cache_view, auto table_view, index_t bs, auto score_view) {
    dsa::lightning_indexer_scores_paged(dsa::cpu, p.qv(), p.wv(), cache_view, table_view, bs, p.rv(), score_view);
  };
  auto tv = [&] { return dsa::make_view(table.data(), {m, max_blocks}); };
  // Valid as is: row 1 reads positions [20, 33) = blocks 1 and 2, never the -1 of block 0.
  CHECK_NOTHROW(run(cv, tv(), block_size, sv));
  table[4] = 4;  // row 1, block 1 -> slots 64..79: past the cache
  CHECK_THROWS_WITH_AS(run(cv, tv(), block_size, sv),
                       doctest::Contains("dsa::lightning_indexer_scores_paged: block_table(1, 1) = 4; expected a "
                                         "block index in [0, 3] (row 1 reads logical positions [20, 31]"),
                       dsa::error);
  table[4] = 3;
  table[5] = 3;  // row 1, block 2 -> positions 32 only -> slot 48: in range
  CHECK_NOTHROW(run(cv, tv(), block_size, sv));
  table[2] = 3;  // row 0, block 2 reads positions 32..39 -> slots 48..55: fine
  CHECK_NOTHROW(run(cv, tv(), block_size, sv));
  table[0] = -2;
  CHECK_THROWS_WITH_AS(run(cv, tv(), block_size, sv), doctest::Contains("block_table(0, 0) = -2"), dsa::error);
  table[0] = 0;
  CHECK_THROWS_WITH_AS(run(cv, tv(), 0, sv), doctest::Contains("block_size = 0; expected >= 1"), dsa::error);
  std::vector<float> wide(static_cast<std::size_t>(m * 49));
  CHECK_THROWS_WITH_AS(run(cv, tv(), block_size, dsa::make_view(wide.data(), {m, 49})),
                       doctest::Contains("scores.extent(1) = 49; expected <= block_table.extent(1) * block_size = 3 * 16"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(run(dsa::make_view(cache.data(), {slots * 2, 66}), tv(), block_size, sv),
                       doctest::Contains("cache.extent(1) = 66; expected 132"), dsa::error);
  CHECK_THROWS_WITH_AS(run(cv, dsa::make_view(table.data(), {1, 6}), block_size, sv),
                       doctest::Contains("block_table.extent(0) = 1; expected 2"), dsa::error);
  fp8_problem small_d(m, heads, 64, n, 9);
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores_paged(dsa::cpu, small_d.qv(), small_d.wv(), cv, tv(), block_size,
                                                           p.rv(), sv),
                       doctest::Contains("q.extent(2) = 64; expected 128"), dsa::error);
}

namespace {

struct float_problem {
  index_t m, heads, d, n;
  std::vector<float> q, w, k, ks, g;
  std::vector<std::int32_t> ranges;

  dsa_test::indexer_problem as_double() const {
    dsa_test::indexer_problem p;
    p.m = m, p.heads = heads, p.d = d, p.n = n;
    p.q.assign(q.begin(), q.end());
    p.w.assign(w.begin(), w.end());
    p.k.assign(k.begin(), k.end());
    p.k_scale.assign(ks.begin(), ks.end());
    p.ranges = ranges;
    return p;
  }
};

float_problem make_float_problem(std::uint64_t seed) {
  float_problem f{5, 3, 6, 9, {}, {}, {}, {}, {}, {}};
  f.q = dsa_test::normal(static_cast<std::size_t>(f.m * f.heads * f.d), seed);
  f.w = dsa_test::normal(static_cast<std::size_t>(f.m * f.heads), seed + 1);
  f.k = dsa_test::normal(static_cast<std::size_t>(f.n * f.d), seed + 2);
  f.ks = dsa_test::uniform(static_cast<std::size_t>(f.n), seed + 3, 0.5f, 2.0f);
  f.g = dsa_test::normal(static_cast<std::size_t>(f.m * f.n), seed + 4);
  f.ranges = {0, 9, 0, 4, 2, 8, 5, 5, 1, 9};
  // The out-of-range upstream gradient must be ignored: poison it.
  for (index_t t = 0; t < f.m; ++t)
    for (index_t s = 0; s < f.n; ++s)
      if (s < f.ranges[2 * t] || s >= f.ranges[2 * t + 1]) f.g[t * f.n + s] = std::numeric_limits<float>::quiet_NaN();
  return f;
}

}  // namespace

TEST_CASE("lightning_indexer_backward matches central finite differences") {
  const float_problem f = make_float_problem(101);
  const auto base = f.as_double();
  REQUIRE(dsa_test::indexer_min_abs_dot(base) > 1e-3);  // steps of 1e-4 never cross the kink
  std::vector<float> gq(f.q.size()), gw(f.w.size()), gk(f.k.size());
  dsa::lightning_indexer_backward(dsa::cpu, dsa::make_view(f.q.data(), {f.m, f.heads, f.d}),
                                  dsa::make_view(f.w.data(), {f.m, f.heads}), dsa::make_view(f.k.data(), {f.n, f.d}),
                                  dsa::make_view(f.ks.data(), {f.n}), dsa::make_view(f.ranges.data(), {f.m, 2}),
                                  dsa::make_view(f.g.data(), {f.m, f.n}), dsa::make_view(gq.data(), {f.m, f.heads, f.d}),
                                  dsa::make_view(gw.data(), {f.m, f.heads}), dsa::make_view(gk.data(), {f.n, f.d}));
  const double h = 1e-4;
  auto fd = [&](std::vector<double> dsa_test::indexer_problem::*field, std::size_t i) {
    auto p = base;
    (p.*field)[i] += h;
    const double up = dsa_test::indexer_linear_loss(p, f.g);
    (p.*field)[i] -= 2 * h;
    const double down = dsa_test::indexer_linear_loss(p, f.g);
    return (up - down) / (2 * h);
  };
  auto compare = [&](const char* name, const std::vector<float>& analytic, std::vector<double> dsa_test::indexer_problem::*field) {
    double scale = 0.0;
    std::vector<double> numeric(analytic.size());
    for (std::size_t i = 0; i < analytic.size(); ++i) {
      numeric[i] = fd(field, i);
      scale = std::max(scale, std::abs(numeric[i]));
    }
    REQUIRE(scale > 0.1);  // a test of something
    for (std::size_t i = 0; i < analytic.size(); ++i) {
      INFO(name << "[" << i << "]: analytic " << analytic[i] << ", numeric " << numeric[i]);
      CHECK(std::abs(analytic[i] - numeric[i]) <= 1e-5 * scale);
    }
  };
  compare("grad_q", gq, &dsa_test::indexer_problem::q);
  compare("grad_w", gw, &dsa_test::indexer_problem::w);
  compare("grad_k", gk, &dsa_test::indexer_problem::k);
}

TEST_CASE("lightning_indexer_backward: absent outputs, determinism, zero rows") {
  float_problem f = make_float_problem(7);
  auto run = [&](const dsa::cpu_backend& be, bool want_q, bool want_w, bool want_k) {
    std::vector<float> gq(f.q.size(), 5.0f), gw(f.w.size(), 5.0f), gk(f.k.size(), 5.0f);
    dsa::lightning_indexer_backward(
        be, dsa::make_view(f.q.data(), {f.m, f.heads, f.d}), dsa::make_view(f.w.data(), {f.m, f.heads}),
        dsa::make_view(f.k.data(), {f.n, f.d}), dsa::make_view(f.ks.data(), {f.n}),
        dsa::make_view(f.ranges.data(), {f.m, 2}), dsa::make_view(f.g.data(), {f.m, f.n}),
        want_q ? dsa::make_view(gq.data(), {f.m, f.heads, f.d}) : dsa::tensor_view<float, 3>{},
        want_w ? dsa::make_view(gw.data(), {f.m, f.heads}) : dsa::tensor_view<float, 2>{},
        want_k ? dsa::make_view(gk.data(), {f.n, f.d}) : dsa::tensor_view<float, 2>{});
    return std::vector<std::vector<float>>{gq, gw, gk};
  };
  const auto all = run(dsa::cpu_backend{1}, true, true, true);
  for (int threads : {2, 5}) CHECK(run(dsa::cpu_backend{threads}, true, true, true) == all);
  const auto only_k = run(dsa::cpu, false, false, true);
  CHECK(only_k[2] == all[2]);
  CHECK(only_k[0] == std::vector<float>(f.q.size(), 5.0f));
  CHECK(only_k[1] == std::vector<float>(f.w.size(), 5.0f));
  const auto only_w = run(dsa::cpu, false, true, false);
  CHECK(only_w[1] == all[1]);
  CHECK(only_w[2] == std::vector<float>(f.k.size(), 5.0f));
  // Row 3 has an empty range: zero gradient for its q and w.
  for (index_t i = 0; i < f.heads * f.d; ++i) CHECK(all[0][3 * f.heads * f.d + i] == 0.0f);
  for (index_t h = 0; h < f.heads; ++h) CHECK(all[1][3 * f.heads + h] == 0.0f);
}

namespace {

// The backward's order written out as its definition (docs/decisions.md "Backward"): the
// forward's per-head dots (i ascending from +0); per row, keys ascending, then heads; grad_k per
// key, rows ascending, then heads; every multiply-add rounded as dsa::detail::fma_if_fast.
std::vector<std::vector<float>> backward_loop_nest(const float_problem& f) {
  std::vector<float> gq(f.q.size(), 0.0f), gw(f.w.size(), 0.0f), gk(f.k.size(), 0.0f);
  auto qrow = [&](index_t t, index_t h) { return f.q.data() + (t * f.heads + h) * f.d; };
  auto dot = [&](const float* a, const float* b) {
    float acc = 0.0f;
    for (index_t i = 0; i < f.d; ++i) acc = dsa::detail::fma_if_fast(a[i], b[i], acc);
    return acc;
  };
  for (index_t t = 0; t < f.m; ++t) {
    for (index_t s = f.ranges[2 * t]; s < f.ranges[2 * t + 1]; ++s) {
      const float g = f.g[t * f.n + s] * f.ks[s];
      if (g == 0.0f) continue;
      const float* kr = f.k.data() + s * f.d;
      for (index_t h = 0; h < f.heads; ++h) {
        const float z = dot(qrow(t, h), kr);
        if (!(z > 0.0f)) continue;
        gw[t * f.heads + h] = dsa::detail::fma_if_fast(g, z, gw[t * f.heads + h]);
        const float c = g * f.w[t * f.heads + h];
        for (index_t i = 0; i < f.d; ++i) gq[(t * f.heads + h) * f.d + i] = dsa::detail::fma_if_fast(c, kr[i], gq[(t * f.heads + h) * f.d + i]);
      }
    }
  }
  for (index_t s = 0; s < f.n; ++s) {
    for (index_t t = 0; t < f.m; ++t) {
      if (s < f.ranges[2 * t] || s >= f.ranges[2 * t + 1]) continue;
      const float g = f.g[t * f.n + s] * f.ks[s];
      if (g == 0.0f) continue;
      for (index_t h = 0; h < f.heads; ++h) {
        const float z = dot(qrow(t, h), f.k.data() + s * f.d);
        if (!(z > 0.0f)) continue;
        const float c = g * f.w[t * f.heads + h];
        for (index_t i = 0; i < f.d; ++i) gk[s * f.d + i] = dsa::detail::fma_if_fast(c, qrow(t, h)[i], gk[s * f.d + i]);
      }
    }
  }
  return {gq, gw, gk};
}

// The first index where a and b differ in bits (both NaN counts as equal), or -1.
index_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!dsa_test::same_bits_or_both_nan(a[i], b[i])) return static_cast<index_t>(i);
  }
  return -1;
}

}  // namespace

TEST_CASE("lightning_indexer_backward: the bits of its defining loop nest, for any thread count") {
  // Shapes around the kernel's blocks: heads around the head block (8 with AVX-512), d around
  // the 16- and 128-wide chunks, keys around the 16-key tiles, ragged and empty ranges, zero
  // upstream gradients, a NaN and an infinity in the inputs.
  struct shape {
    index_t m, heads, d, n;
  };
  for (const shape sh : {shape{3, 1, 1, 5}, shape{7, 5, 37, 40}, shape{4, 11, 130, 33}, shape{9, 16, 128, 70},
                         shape{2, 64, 128, 48}, shape{5, 9, 144, 17}}) {
    INFO("m = " << sh.m << ", heads = " << sh.heads << ", d = " << sh.d << ", n = " << sh.n);
    const std::uint64_t seed = static_cast<std::uint64_t>(sh.m * 1000 + sh.heads * 100 + sh.d + sh.n);
    float_problem f{sh.m, sh.heads, sh.d, sh.n, {}, {}, {}, {}, {}, {}};
    f.q = dsa_test::normal(static_cast<std::size_t>(f.m * f.heads * f.d), seed);
    f.w = dsa_test::normal(static_cast<std::size_t>(f.m * f.heads), seed + 1);
    f.k = dsa_test::normal(static_cast<std::size_t>(f.n * f.d), seed + 2);
    f.ks = dsa_test::uniform(static_cast<std::size_t>(f.n), seed + 3, 0.5f, 2.0f);
    f.g = dsa_test::normal(static_cast<std::size_t>(f.m * f.n), seed + 4);
    std::mt19937_64 rng(seed);
    for (index_t t = 0; t < f.m; ++t) {
      const auto a = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(f.n + 1));
      const auto b = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(f.n + 1));
      f.ranges.push_back(std::min(a, b));
      f.ranges.push_back(t == 1 ? std::min(a, b) : std::max(a, b));  // row 1: empty
    }
    for (index_t t = 0; t < f.m; ++t) {
      for (index_t s = 0; s < f.n; ++s) {
        float& g = f.g[static_cast<std::size_t>(t * f.n + s)];
        if (s < f.ranges[2 * t] || s >= f.ranges[2 * t + 1]) {
          g = std::numeric_limits<float>::quiet_NaN();  // never read
        } else if (rng() % 5 == 0) {
          g = 0.0f;
        }
      }
    }
    f.k[static_cast<std::size_t>(f.d * (f.n / 2))] = std::numeric_limits<float>::quiet_NaN();
    f.q[static_cast<std::size_t>(f.q.size() / 3)] = std::numeric_limits<float>::infinity();
    const auto expected = backward_loop_nest(f);
    for (int threads : {1, 2, 3}) {
      CAPTURE(threads);
      std::vector<float> gq(f.q.size(), 7.0f), gw(f.w.size(), 7.0f), gk(f.k.size(), 7.0f);
      dsa::lightning_indexer_backward(
          dsa::cpu_backend{threads}, dsa::make_view(f.q.data(), {f.m, f.heads, f.d}),
          dsa::make_view(f.w.data(), {f.m, f.heads}), dsa::make_view(f.k.data(), {f.n, f.d}),
          dsa::make_view(f.ks.data(), {f.n}), dsa::make_view(f.ranges.data(), {f.m, 2}),
          dsa::make_view(f.g.data(), {f.m, f.n}), dsa::make_view(gq.data(), {f.m, f.heads, f.d}),
          dsa::make_view(gw.data(), {f.m, f.heads}), dsa::make_view(gk.data(), {f.n, f.d}));
      CHECK(first_difference(gq, expected[0]) == -1);
      CHECK(first_difference(gw, expected[1]) == -1);
      CHECK(first_difference(gk, expected[2]) == -1);
    }
  }
}

TEST_CASE("lightning_indexer_backward front-end checks") {
  float_problem f = make_float_problem(3);
  std::vector<float> gq(f.q.size()), gw(f.w.size()), gk(f.k.size());
  auto run = [&](dsa::tensor_view<const float, 2> g, dsa::tensor_view<float, 3> gqv, dsa::tensor_view<float, 2> gkv) {
    dsa::lightning_indexer_backward(dsa::cpu, dsa::make_view(f.q.data(), {f.m, f.heads, f.d}),
                                    dsa::make_view(f.w.data(), {f.m, f.heads}), dsa::make_view(f.k.data(), {f.n, f.d}),
                                    dsa::make_view(f.ks.data(), {f.n}), dsa::make_view(f.ranges.data(), {f.m, 2}), g,
                                    gqv, dsa::make_view(gw.data(), {f.m, f.heads}), gkv);
  };
  auto g = dsa::make_view(f.g.data(), {f.m, f.n});
  auto gqv = dsa::make_view(gq.data(), {f.m, f.heads, f.d});
  auto gkv = dsa::make_view(gk.data(), {f.n, f.d});
  CHECK_NOTHROW(run(g, gqv, gkv));
  CHECK_THROWS_WITH_AS(run(dsa::make_view(f.g.data(), {f.m - 1, f.n}), gqv, gkv),
                       doctest::Contains("dsa::lightning_indexer_backward: grad_scores.extent(0) = 4; expected 5"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(run(g, dsa::make_view(gq.data(), {f.m, f.heads, f.d - 1}), gkv),
                       doctest::Contains("dsa::lightning_indexer_backward: grad_q.extent(2) = 5; expected 6"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(run(g, gqv, dsa::make_view(gk.data(), {f.n - 1, f.d})),
                       doctest::Contains("grad_k.extent(0) = 8; expected 9"), dsa::error);
  CHECK_THROWS_WITH_AS(run(g, gqv, dsa::tensor_view<float, 2>(nullptr, {f.n, f.d})),
                       doctest::Contains("grad_k.data = null"), dsa::error);
}
