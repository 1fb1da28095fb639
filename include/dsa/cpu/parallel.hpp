// Splitting CPU work over the backend's threads.
//
// Work is split over independent index ranges (rows, heads, blocks) with a static partition, so
// no floating-point reduction ever depends on the thread count: results are bit-identical for
// every dsa::cpu_backend{n}.
#pragma once

#include <algorithm>
#include <thread>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

/// Threads the backend asks for (0 = every hardware thread).
inline int thread_count(const cpu_backend& be) {
  if (be.num_threads > 0) return be.num_threads;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

/// Calls body(begin, end) over a partition of [0, n) into contiguous chunks, one per thread,
/// each at least `grain` long. The calling thread takes the first chunk.
template <class Body>
void parallel_for(const cpu_backend& be, index_t n, index_t grain, Body&& body) {
  if (n <= 0) return;
  grain = std::max<index_t>(grain, 1);
  // Rounded down, so that every chunk really is >= grain long (rounding up made 7 items with
  // grain 3 into chunks of 2, 2 and 3).
  const index_t max_chunks = std::max<index_t>(n / grain, 1);
  const index_t chunks = std::min<index_t>(thread_count(be), max_chunks);
  if (chunks <= 1) {
    body(index_t{0}, n);
    return;
  }
  std::vector<std::thread> workers;
  workers.reserve(static_cast<std::size_t>(chunks - 1));
  auto bounds = [&](index_t c) { return n * c / chunks; };
  for (index_t c = 1; c < chunks; ++c) {
    workers.emplace_back([&body, b = bounds(c), e = bounds(c + 1)] { body(b, e); });
  }
  body(bounds(0), bounds(1));
  for (auto& w : workers) w.join();
}

}  // namespace cpu_detail
DSA_NAMESPACE_END
