// cpu_detail::parallel_for: an exact static partition of [0, n) into contiguous chunks.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/cpu/parallel.hpp"

using dsa::index_t;

namespace {

struct chunk {
  index_t begin, end;
  std::thread::id thread;
};

std::vector<chunk> run(int threads, index_t n, index_t grain, std::vector<int>* hits = nullptr) {
  std::mutex m;
  std::vector<chunk> chunks;
  dsa::cpu_detail::parallel_for(dsa::cpu_backend{threads}, n, grain, [&](index_t b, index_t e) {
    if (hits) {
      for (index_t i = b; i < e; ++i) ++(*hits)[static_cast<std::size_t>(i)];  // disjoint ranges: no race
    }
    std::lock_guard<std::mutex> lock(m);
    chunks.push_back({b, e, std::this_thread::get_id()});
  });
  std::sort(chunks.begin(), chunks.end(), [](const chunk& a, const chunk& b) { return a.begin < b.begin; });
  return chunks;
}

}  // namespace

TEST_CASE("parallel_for covers [0, n) exactly once with contiguous chunks") {
  for (index_t n : {0, 1, 2, 7, 1000}) {
    for (int threads : {1, 2, 3, 8}) {
      for (index_t grain : {1, 3, 64}) {
        CAPTURE(n);
        CAPTURE(threads);
        CAPTURE(grain);
        std::vector<int> hits(static_cast<std::size_t>(n), 0);
        const auto chunks = run(threads, n, grain, &hits);
        CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
        if (n == 0) {
          CHECK(chunks.empty());  // the body is never called for empty work
          continue;
        }
        REQUIRE_FALSE(chunks.empty());
        CHECK(chunks.front().begin == 0);
        CHECK(chunks.back().end == n);
        for (std::size_t c = 0; c < chunks.size(); ++c) {
          CHECK(chunks[c].begin < chunks[c].end);  // no empty chunks
          if (c > 0) CHECK(chunks[c].begin == chunks[c - 1].end);
          // Grain respected: every chunk is at least `grain` long unless all the work is smaller.
          CHECK(chunks[c].end - chunks[c].begin >= std::min(grain, n));
        }
        CHECK(chunks.size() <= static_cast<std::size_t>(threads));
        // Full use of the threads when the grain allows it.
        CHECK(chunks.size() == static_cast<std::size_t>(std::min<index_t>(threads, std::max<index_t>(n / grain, 1))));
        // The calling thread takes the first chunk; every chunk runs on its own thread.
        CHECK(chunks.front().thread == std::this_thread::get_id());
        std::set<std::thread::id> ids;
        for (const auto& c : chunks) ids.insert(c.thread);
        CHECK(ids.size() == chunks.size());
      }
    }
  }
}

TEST_CASE("parallel_for: the partition depends only on n, grain and the thread count") {
  const auto a = run(3, 1000, 16);
  const auto b = run(3, 1000, 16);
  REQUIRE(a.size() == b.size());
  for (std::size_t c = 0; c < a.size(); ++c) {
    CHECK(a[c].begin == b[c].begin);
    CHECK(a[c].end == b[c].end);
  }
  // Balanced: chunk sizes differ by at most one.
  index_t lo = 1000, hi = 0;
  for (const auto& c : a) {
    lo = std::min(lo, c.end - c.begin);
    hi = std::max(hi, c.end - c.begin);
  }
  CHECK(hi - lo <= 1);
}

TEST_CASE("parallel_for: a grain <= 0 counts as 1, negative n does nothing") {
  CHECK(run(4, 8, 0).size() == 4);
  CHECK(run(4, 8, -5).size() == 4);
  CHECK(run(4, -3, 1).empty());
}

TEST_CASE("thread_count: explicit counts, and 0 = every hardware thread") {
  CHECK(dsa::cpu_detail::thread_count(dsa::cpu_backend{1}) == 1);
  CHECK(dsa::cpu_detail::thread_count(dsa::cpu_backend{5}) == 5);
  const unsigned hw = std::thread::hardware_concurrency();
  CHECK(dsa::cpu_detail::thread_count(dsa::cpu) == (hw == 0 ? 1 : static_cast<int>(hw)));
  std::atomic<index_t> total{0};
  dsa::cpu_detail::parallel_for(dsa::cpu, 12345, 1, [&](index_t b, index_t e) { total += e - b; });
  CHECK(total.load() == 12345);
}
