// Concurrency: many threads calling every op at once, each with its own buffers and a
// cpu_backend{2} (so each call spawns workers of its own), give exactly the single-threaded
// results. Run under ThreadSanitizer by the `tsan` preset, this also shows the ops share no
// mutable state (no static scratch, no lazily initialised tables without synchronisation).
#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/dsa.hpp"
#include "support/op_suite.hpp"

TEST_CASE("8 threads running every op concurrently match a single-threaded run") {
  const auto reference = dsa_test::run_op_suite(dsa::cpu_backend{1});
  constexpr int n_threads = 8;
  constexpr int rounds = 2;
  std::vector<std::vector<dsa_test::op_output>> results(n_threads * rounds);
  std::atomic<int> ready{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < n_threads; ++i) {
    threads.emplace_back([&, i] {
      // Start together, so the calls really overlap.
      ready.fetch_add(1);
      while (ready.load() < n_threads) std::this_thread::yield();
      try {
        for (int r = 0; r < rounds; ++r) results[static_cast<std::size_t>(i * rounds + r)] = dsa_test::run_op_suite(dsa::cpu_backend{2});
      } catch (...) {
        failures.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(failures.load() == 0);
  for (std::size_t i = 0; i < results.size(); ++i) {
    CAPTURE(i);
    REQUIRE(results[i].size() == reference.size());
    for (std::size_t j = 0; j < reference.size(); ++j) {
      CAPTURE(reference[j].name);
      CHECK(results[i][j].bytes == reference[j].bytes);
    }
  }
}

TEST_CASE("errors thrown concurrently from many threads are independent") {
  // Each thread gets a bad argument naming its own value; messages must not mix.
  constexpr int n_threads = 8;
  std::vector<std::string> messages(n_threads);
  std::vector<std::thread> threads;
  for (int i = 0; i < n_threads; ++i) {
    threads.emplace_back([&, i] {
      std::vector<float> x(static_cast<std::size_t>(100 + i)), y(x.size());
      try {
        dsa::hadamard_transform(dsa::cpu_backend{2}, dsa::make_view(x.data(), {dsa::index_t{1}, dsa::index_t{100 + i}}),
                                dsa::make_view(y.data(), {dsa::index_t{1}, dsa::index_t{100 + i}}), 1.0f);
      } catch (const dsa::error& e) {
        messages[static_cast<std::size_t>(i)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < n_threads; ++i) {
    CAPTURE(i);
    CHECK(messages[static_cast<std::size_t>(i)] ==
          "dsa::hadamard_transform: x.extent(1) = " + std::to_string(100 + i) +
              "; expected a power of two <= 32768, or 12, 20, 28 or 40 times one");
  }
}
