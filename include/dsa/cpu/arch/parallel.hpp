// Splitting CPU work over the backend's threads.
//
// Work is split over independent index ranges (rows, heads, blocks) with a static partition, so
// no floating-point reduction ever depends on the thread count: results are bit-identical for
// every dsa::cpu_backend{n}. The chunks run on the persistent workers of cpu/arch/thread_pool.hpp
// (no thread is started per call); a parallel_for issued from inside a body runs inline.
// parallel_items hands out work items dynamically instead, for items of very unequal cost; each
// item's result still depends on the item alone.
#pragma once

#include <algorithm>
#include <atomic>
#include <thread>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cpu/arch/thread_pool.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

/// Threads the backend asks for (0 = every hardware thread).
inline int thread_count(const cpu_backend& be) {
  if (be.num_threads > 0) return be.num_threads;
  return hardware_threads();  // cached: glibc reads /sys for it
}

/// Calls body(begin, end) over a partition of [0, n) into contiguous chunks, one per thread,
/// each at least `grain` long. The calling thread takes the first chunk, each other chunk runs
/// on its own pooled worker. An exception thrown by body is rethrown here after every chunk has
/// finished (the lowest chunk's, if several throw). Called from inside a body, it runs
/// body(0, n) inline.
template <class Body>
void parallel_for(const cpu_backend& be, index_t n, index_t grain, Body&& body) {
  if (n <= 0) return;
  grain = std::max<index_t>(grain, 1);
  // Rounded down, so that every chunk really is >= grain long (rounding up made 7 items with
  // grain 3 into chunks of 2, 2 and 3).
  const index_t max_chunks = std::max<index_t>(n / grain, 1);
  const index_t chunks = std::min<index_t>(thread_count(be), max_chunks);
  if (chunks <= 1 || in_parallel_region) {
    body(index_t{0}, n);
    return;
  }
  struct context {
    Body& body;
    index_t n, chunks;
  } ctx{body, n, chunks};
  auto run_chunk = [](void* p, index_t c) {
    auto& x = *static_cast<context*>(p);
    x.body(x.n * c / x.chunks, x.n * (c + 1) / x.chunks);
  };
  thread_pool::run(thread_pool_instance(), chunks, run_chunk, &ctx);
}

/// Calls body(item, scratch) for every item in [0, count), handing items to the backend's
/// threads one at a time from a shared counter (balances causal ranges, where rows differ
/// wildly in cost). Each item's result depends only on the item, never on the thread that ran
/// it, so outputs stay bit-identical for every thread count. `make_scratch()` builds one
/// thread's scratch space.
template <class MakeScratch, class Body>
void parallel_items(const cpu_backend& be, index_t count, MakeScratch&& make_scratch, Body&& body) {
  if (count <= 0) return;
  std::atomic<index_t> next{0};
  const index_t workers = std::min<index_t>(thread_count(be), count);
  parallel_for(be, workers, 1, [&](index_t, index_t) {
    auto scratch = make_scratch();
    for (index_t i = next.fetch_add(1, std::memory_order_relaxed); i < count;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      body(i, scratch);
    }
  });
}

}  // namespace cpu_detail
DSA_NAMESPACE_END
