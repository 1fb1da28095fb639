// cpu_detail::parallel_for: an exact static partition of [0, n) into contiguous chunks, run on
// the persistent pool of cpu/arch/thread_pool.hpp (workers reused, exceptions rethrown to the
// caller, nested calls inline, concurrent callers).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/wait.h>
#include <unistd.h>
#endif

#include "dsa/core/backend.hpp"
#include "dsa/cpu/arch/parallel.hpp"

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

TEST_CASE("parallel_for reuses its workers: no thread is started per call") {
  auto* pool = dsa::cpu_detail::thread_pool_instance();
  REQUIRE(pool != nullptr);
  run(4, 100, 1);  // make sure the pool has (at least) the 3 workers of a 4-thread call
  const std::size_t size = pool->size();
  std::set<std::thread::id> first;
  for (const auto& c : run(4, 100, 1)) first.insert(c.thread);
  for (int i = 0; i < 200; ++i) {
    const auto chunks = run(4, 100, 1);
    std::set<std::thread::id> ids;
    for (const auto& c : chunks) ids.insert(c.thread);
    CHECK(ids.size() == 4);  // still one thread per chunk
  }
  // Sequential calls find the previous call's workers idle again.
  CHECK(pool->size() == size);
}

TEST_CASE("parallel_for rethrows a body's exception in the caller, after every chunk finished") {
  for (int thrower : {0, 1, 3}) {
    CAPTURE(thrower);
    std::atomic<int> finished{0};
    bool caught = false;
    try {
      dsa::cpu_detail::parallel_for(dsa::cpu_backend{4}, 4, 1, [&](index_t b, index_t) {
        if (b == thrower) throw std::runtime_error("chunk " + std::to_string(b));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // still running when chunk 0 throws
        finished.fetch_add(1);
      });
    } catch (const std::runtime_error& e) {
      caught = true;
      CHECK(std::string(e.what()) == "chunk " + std::to_string(thrower));
      CHECK(finished.load() == 3);  // the others ran to completion before the rethrow
    }
    CHECK(caught);
  }
  // Several chunks throw: the lowest chunk's exception is the one rethrown, on every run.
  for (int rep = 0; rep < 20; ++rep) {
    try {
      dsa::cpu_detail::parallel_for(dsa::cpu_backend{4}, 4, 1, [&](index_t b, index_t) {
        if (b >= 1) throw std::runtime_error("chunk " + std::to_string(b));
      });
      FAIL("no exception");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "chunk 1");
    }
  }
  // The pool is still usable afterwards.
  CHECK(run(4, 8, 1).size() == 4);
}

TEST_CASE("a parallel_for inside a body runs inline on that thread") {
  std::mutex m;
  std::vector<std::pair<std::thread::id, std::thread::id>> seen;  // (outer thread, inner thread)
  std::atomic<index_t> inner_total{0};
  std::atomic<int> inner_calls{0};
  dsa::cpu_detail::parallel_for(dsa::cpu_backend{2}, 2, 1, [&](index_t, index_t) {
    const auto outer = std::this_thread::get_id();
    dsa::cpu_detail::parallel_for(dsa::cpu_backend{4}, 100, 1, [&](index_t b, index_t e) {
      inner_calls.fetch_add(1);
      inner_total += e - b;
      std::lock_guard<std::mutex> lock(m);
      seen.emplace_back(outer, std::this_thread::get_id());
    });
  });
  CHECK(inner_calls.load() == 2);  // one inline call over the whole range per outer chunk
  CHECK(inner_total.load() == 200);
  REQUIRE(seen.size() == 2);
  for (const auto& [outer, inner] : seen) CHECK(outer == inner);
}

TEST_CASE("parallel_for from many threads at once, on different backends") {
  constexpr int callers = 8;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < callers; ++i) {
    threads.emplace_back([&, i] {
      const int t = 1 + i % 4;
      for (int rep = 0; rep < 50; ++rep) {
        const index_t n = 1 + 37 * (rep % 7);
        std::vector<int> hits(static_cast<std::size_t>(n), 0);
        dsa::cpu_detail::parallel_for(dsa::cpu_backend{t}, n, 1, [&](index_t b, index_t e) {
          for (index_t k = b; k < e; ++k) ++hits[static_cast<std::size_t>(k)];
        });
        if (!std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; })) failures.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures.load() == 0);
}

#if defined(__SANITIZE_THREAD__)
#define DSA_TEST_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DSA_TEST_UNDER_TSAN 1
#endif
#endif
#if (defined(__unix__) || defined(__APPLE__)) && !defined(DSA_TEST_UNDER_TSAN) && !defined(DSA_TEST_UNDER_EMULATOR)
// ThreadSanitizer stops a child that starts threads after a multi-threaded fork, and qemu-user
// 7.2 aborts in such a child (an assertion in its vCPU setup), hence the guards.
TEST_CASE("a forked child, which has none of the pool's workers, still runs parallel_for") {
  run(2, 10, 1);  // the parent's pool has workers
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Would wait forever for the parent's workers if the pool handed them out here.
    std::atomic<index_t> total{0};
    std::set<std::thread::id> ids;
    std::mutex m;
    dsa::cpu_detail::parallel_for(dsa::cpu_backend{3}, 300, 1, [&](index_t b, index_t e) {
      total += e - b;
      std::lock_guard<std::mutex> lock(m);
      ids.insert(std::this_thread::get_id());
    });
    ::_exit(total.load() == 300 && ids.size() == 3 ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
#endif
