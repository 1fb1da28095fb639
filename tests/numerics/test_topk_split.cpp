// The split top-k's merge logic (dsa/numerics/topk_split.hpp) replayed on the host: the CTAs of
// the CUDA kernels (kernels/topk_kernel.cuh, topk_split_*) simulated one chunk at a time, in a
// shuffled order (the device adds the chunks' histograms in any order), with the block-wide walk
// of topk_split_walk (every bucket tests topk_bucket_selected against an inclusive scan) and the
// emission's 256-key scans, must give dsa::topk_indices's CPU result bit for bit: random rows,
// heavy ties, NaN / ±inf / ±0 / denormals, ranges that do not start at 0, k at and beyond the
// range, rows that are not a whole number of chunks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "dsa/cpu/topk.hpp"
#include "dsa/numerics/topk.hpp"
#include "dsa/numerics/topk_split.hpp"
#include "dsa/ops/topk.hpp"

namespace {

using dsa::index_t;
constexpr int threads = 256;  // topk_split_threads: one bucket per thread in the walk

// topk_split_walk as the block runs it: thread i holds bucket 255 - i, an inclusive scan over the
// threads gives the count above each bucket, and exactly one bucket must accept. Checked against
// the sequential walk of the one-block kernel and the CPU.
dsa::topk_radix_state block_walk(const std::uint32_t* merged, dsa::topk_radix_state s) {
  std::uint32_t inclusive = 0;
  int accepted = 0;
  dsa::topk_radix_state next{};
  for (int tid = 0; tid < threads; ++tid) {
    const int b = 255 - tid;
    const std::uint32_t count = merged[b];
    inclusive += count;
    const std::uint32_t above = inclusive - count;
    if (dsa::topk_bucket_selected(b, above, count, s.remaining)) {
      ++accepted;
      next = {(s.prefix << 8) | static_cast<std::uint32_t>(b), s.remaining - above};
    }
  }
  CHECK(accepted == 1);
  const dsa::topk_radix_state sequential = dsa::topk_radix_advance(merged, s);
  CHECK(next.prefix == sequential.prefix);
  CHECK(next.remaining == sequential.remaining);
  return next;
}

// One row through the split kernels' logic: [start, end) of `row` (n columns), k positions.
std::vector<std::int32_t> replay_split_row(const float* row, index_t n, index_t start, index_t end, index_t k,
                                           std::mt19937_64& rng) {
  const index_t len = end - start;
  const index_t chunks = dsa::topk_split_chunks(n);
  std::vector<index_t> order(static_cast<std::size_t>(chunks));
  std::iota(order.begin(), order.end(), index_t{0});
  const float* x = row + start;

  // 1. The radix passes: each chunk's histogram added into the merged one in a shuffled order.
  dsa::topk_radix_state s{dsa::topk_no_key, 0u};
  if (len > k) {
    s = {0u, static_cast<std::uint32_t>(k)};
    for (int pass = 0; pass < dsa::topk_radix_passes; ++pass) {
      std::vector<std::uint32_t> merged(dsa::topk_radix_buckets, 0u);
      std::shuffle(order.begin(), order.end(), rng);
      const int shift = 8 * (dsa::topk_radix_passes - pass);
      for (const index_t c : order) {
        const dsa::topk_split_range ch = dsa::topk_split_chunk(len, c);
        std::vector<std::uint32_t> local(dsa::topk_radix_buckets, 0u);
        for (index_t j = ch.begin; j < ch.end; ++j) {
          const std::uint32_t key = dsa::topk_radix_key(x[j]);
          if (pass == 0 || (key >> shift) == s.prefix) ++local[dsa::topk_radix_digit(key, pass)];
        }
        for (int b = 0; b < dsa::topk_radix_buckets; ++b) merged[static_cast<std::size_t>(b)] += local[static_cast<std::size_t>(b)];
      }
      s = block_walk(merged.data(), s);
    }
  }

  // 2. Each chunk's keys > T and == T.
  std::vector<std::uint32_t> gt(static_cast<std::size_t>(chunks), 0u), eq(static_cast<std::size_t>(chunks), 0u);
  for (index_t c = 0; c < chunks; ++c) {
    const dsa::topk_split_range ch = dsa::topk_split_chunk(len, c);
    if (len <= k) {
      gt[static_cast<std::size_t>(c)] = static_cast<std::uint32_t>(ch.end - ch.begin);
      continue;
    }
    for (index_t j = ch.begin; j < ch.end; ++j) {
      const std::uint32_t key = dsa::topk_radix_key(x[j]);
      gt[static_cast<std::size_t>(c)] += key > s.prefix ? 1u : 0u;
      eq[static_cast<std::size_t>(c)] += key == s.prefix ? 1u : 0u;
    }
  }

  // 3. The emission, chunk by chunk in a shuffled order, each from its own offset.
  std::vector<std::int32_t> out(static_cast<std::size_t>(k), 0x5A5A5A5A);  // never-written marker
  std::shuffle(order.begin(), order.end(), rng);
  for (const index_t c : order) {
    index_t gt_before = 0, eq_before = 0, gt_total = 0, eq_total = 0;
    for (index_t i = 0; i < chunks; ++i) {
      if (i < c) {
        gt_before += gt[static_cast<std::size_t>(i)];
        eq_before += eq[static_cast<std::size_t>(i)];
      }
      gt_total += gt[static_cast<std::size_t>(i)];
      eq_total += eq[static_cast<std::size_t>(i)];
    }
    const dsa::topk_split_start first = dsa::topk_split_emission_start(gt_before, eq_before, s.remaining);
    const dsa::topk_split_range ch = dsa::topk_split_chunk(len, c);
    index_t written = first.position;
    std::uint32_t ties_seen = 0;
    for (index_t j0 = ch.begin; j0 < ch.end && written < k; j0 += threads) {
      // The block's exclusive scan of (gt | tie << 16) over its 256 threads.
      std::uint32_t before_gt = 0, before_tie = 0;
      const std::uint32_t ties_left = first.ties_left > ties_seen ? first.ties_left - ties_seen : 0u;
      for (int tid = 0; tid < threads; ++tid) {
        const index_t j = j0 + tid;
        const std::uint32_t key = j < ch.end ? dsa::topk_radix_key(x[j]) : dsa::topk_no_key;
        const bool g = key > s.prefix;
        const bool tie = key == s.prefix && key != dsa::topk_no_key;
        const bool take = g || (tie && before_tie < ties_left);
        const index_t pos = written + before_gt + std::min(before_tie, ties_left);
        if (take && pos < k) out[static_cast<std::size_t>(pos)] = static_cast<std::int32_t>(start + j);
        before_gt += g ? 1u : 0u;
        before_tie += tie ? 1u : 0u;
      }
      written += before_gt + std::min(before_tie, ties_left);
      ties_seen += before_tie;
    }
    const index_t selected = dsa::topk_split_selected(gt_total, eq_total, s.remaining);
    for (int tid = 0; tid < threads; ++tid) {
      for (index_t i = selected + c * threads + tid; i < k; i += chunks * threads) out[static_cast<std::size_t>(i)] = -1;
    }
  }
  return out;
}

enum class pattern { normal, ties, specials, equal };

std::vector<float> make_row(index_t n, pattern kind, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> r(static_cast<std::size_t>(n));
  for (float& v : r) v = normal(rng);
  const float special[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity(),
                           0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), -3e38f, 3e38f};
  switch (kind) {
    case pattern::normal: break;
    case pattern::ties:
      for (float& v : r) v = std::round(v);
      break;
    case pattern::specials:
      for (float& v : r) {
        if (rng() % 4 == 0) v = special[rng() % std::size(special)];
      }
      break;
    case pattern::equal:
      std::fill(r.begin(), r.end(), 1.5f);
      break;
  }
  return r;
}

void check_row(index_t n, index_t start, index_t end, index_t k, pattern kind, std::uint64_t seed) {
  CAPTURE(n);
  CAPTURE(start);
  CAPTURE(end);
  CAPTURE(k);
  CAPTURE(static_cast<int>(kind));
  std::mt19937_64 rng(seed);
  const std::vector<float> row = make_row(n, kind, rng);
  const std::vector<std::int32_t> ranges = {static_cast<std::int32_t>(start), static_cast<std::int32_t>(end)};
  std::vector<std::int32_t> expected(static_cast<std::size_t>(k));
  dsa::topk_indices(dsa::cpu, dsa::make_view(row.data(), {1, n}), dsa::make_view(ranges.data(), {1, 2}), k,
                    dsa::make_view(expected.data(), {1, k}));
  CHECK(replay_split_row(row.data(), n, start, end, k, rng) == expected);
}

}  // namespace

TEST_CASE("topk_bucket_selected accepts exactly the bucket of topk_radix_find_bucket's walk") {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::uint32_t> hist(256, 0u);
    const int filled = 1 + static_cast<int>(rng() % 20);
    for (int i = 0; i < filled; ++i) hist[rng() % 256] += static_cast<std::uint32_t>(rng() % 50);
    if (trial % 3 == 0) hist[0] += 7;  // the walk's fall-through bucket
    const std::uint32_t total = std::accumulate(hist.begin(), hist.end(), 0u);
    const std::uint32_t remaining = 1 + static_cast<std::uint32_t>(rng() % (total + 5));
    CAPTURE(remaining);
    (void)block_walk(hist.data(), dsa::topk_radix_state{0u, remaining});
  }
}

TEST_CASE("topk_split_chunk, topk_split_emission_start and topk_split_selected") {
  CHECK(dsa::topk_split_chunks(0) == 0);
  CHECK(dsa::topk_split_chunks(1) == 1);
  CHECK(dsa::topk_split_chunks(131072) == 128);
  CHECK(dsa::topk_split_chunks(131073) == 129);
  CHECK(dsa::topk_split_chunk(2500, 2).begin == 2048);
  CHECK(dsa::topk_split_chunk(2500, 2).end == 2500);
  CHECK(dsa::topk_split_chunk(2500, 3).begin == dsa::topk_split_chunk(2500, 3).end);  // past the range: empty
  // 10 keys > T and 7 ties before; r = 4: the ties are used up, the chunk takes none.
  CHECK(dsa::topk_split_emission_start(10, 7, 4).position == 14);
  CHECK(dsa::topk_split_emission_start(10, 7, 4).ties_left == 0u);
  CHECK(dsa::topk_split_emission_start(10, 2, 4).position == 12);
  CHECK(dsa::topk_split_emission_start(10, 2, 4).ties_left == 2u);
  CHECK(dsa::topk_split_selected(30, 9, 4) == 34);
  CHECK(dsa::topk_split_selected(30, 2, 4) == 32);
  CHECK(dsa::topk_split_applies(1, 8192));
  CHECK(dsa::topk_split_applies(8, 131072));
  CHECK_FALSE(dsa::topk_split_applies(9, 131072));
  CHECK_FALSE(dsa::topk_split_applies(0, 131072));
  CHECK_FALSE(dsa::topk_split_applies(1, 8191));
}

TEST_CASE("topk_indices_workspace_size: zero where one block per row serves, the split's scratch elsewhere") {
  CHECK(dsa::topk_indices_workspace_size(64, 131072) == 0);
  CHECK(dsa::topk_indices_workspace_size(1, 4096) == 0);
  CHECK(dsa::topk_indices_workspace_size(1, 131072) == 4 * 256 * 4 + 128 * 8);
  CHECK(dsa::topk_indices_workspace_size(3, 10000) == 3 * 4 * 256 * 4 + 240);  // 3 rows x 10 chunks x 8 bytes
  CHECK_THROWS_AS(dsa::topk_indices_workspace_size(-1, 10), dsa::error);
}

TEST_CASE("the split top-k's CTAs replayed on the host select the CPU backend's indices, in its order") {
  std::uint64_t seed = 100;
  for (const pattern kind : {pattern::normal, pattern::ties, pattern::specials, pattern::equal}) {
    check_row(8192, 0, 8192, 2048, kind, ++seed);         // the smallest split row
    check_row(20000, 0, 20000, 2048, kind, ++seed);       // a partial last chunk
    check_row(20000, 3000, 17001, 512, kind, ++seed);     // a range that starts inside a chunk
    check_row(20000, 0, 19999, 1, kind, ++seed);          // k = 1
    check_row(20000, 0, 2049, 2048, kind, ++seed);        // one key more than k
    check_row(20000, 100, 2148, 2048, kind, ++seed);      // exactly k keys: no radix pass
    check_row(20000, 5, 1005, 2048, kind, ++seed);        // fewer keys than k: -1 padding
    check_row(20000, 7000, 7000, 64, kind, ++seed);       // an empty range: all -1
    check_row(40000, 0, 40000, 30000, kind, ++seed);      // k close to the range
  }
}

TEST_CASE("the split top-k's host replay on V3.2's decode row: top-2048 of 128K keys") {
  check_row(131072, 0, 131072, 2048, pattern::normal, 7);
  check_row(131072, 0, 131072, 2048, pattern::ties, 8);
  check_row(131072 + 333, 0, 131072 + 300, 2048, pattern::specials, 9);
}

TEST_CASE("topk_indices workspace overload on the CPU: checked, ignored, the same indices") {
  const index_t m = 2, n = 9000, k = 100;
  std::mt19937_64 rng(11);
  std::vector<float> s(static_cast<std::size_t>(m * n));
  std::normal_distribution<float> normal;
  for (float& v : s) v = normal(rng);
  const std::vector<std::int32_t> ranges = {0, 9000, 10, 5000};
  std::vector<std::int32_t> a(static_cast<std::size_t>(m * k)), b(a.size());
  dsa::topk_indices(dsa::cpu, dsa::make_view(s.data(), {m, n}), dsa::make_view(ranges.data(), {m, 2}), k,
                    dsa::make_view(a.data(), {m, k}));
  const index_t bytes = dsa::topk_indices_workspace_size(m, n);
  REQUIRE(bytes > 0);
  alignas(16) static std::byte ws[1 << 16];
  REQUIRE(bytes <= static_cast<index_t>(sizeof ws));
  dsa::topk_indices(dsa::cpu, dsa::make_view(s.data(), {m, n}), dsa::make_view(ranges.data(), {m, 2}), k,
                    dsa::make_view(b.data(), {m, k}), dsa::make_view(ws, {bytes}));
  CHECK(a == b);
  CHECK_THROWS_WITH_AS(dsa::topk_indices(dsa::cpu, dsa::make_view(s.data(), {m, n}),
                                         dsa::make_view(ranges.data(), {m, 2}), k, dsa::make_view(b.data(), {m, k}),
                                         dsa::make_view(ws, {bytes - 16})),
                       doctest::Contains("dsa::topk_indices: workspace.extent(0)"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::topk_indices(dsa::cpu, dsa::make_view(s.data(), {m, n}),
                                         dsa::make_view(ranges.data(), {m, 2}), k, dsa::make_view(b.data(), {m, k}),
                                         dsa::make_view(ws + 4, {bytes})),
                       doctest::Contains("16-byte aligned"), dsa::error);
}
