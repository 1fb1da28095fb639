// The persistent worker threads behind cpu_detail::parallel_for.
//
// parallel_for used to start a std::thread per chunk and join it: 20-50 us per call, visible
// against kernels of a few microseconds (top-k of one 8K row, a small Hadamard batch). The pool
// keeps those threads alive between calls. What a caller sees is unchanged:
//
//   - chunk c of a call runs on its own thread: the caller runs chunk 0, every other chunk goes
//     to a distinct idle worker (the pool grows when none is idle), so cpu_backend{n} still
//     means n threads and the static partition, hence every result, does not change;
//   - several threads may call at once: each call takes its own idle workers, so calls never
//     wait for each other's work, and no call waits on a lock held while a body runs;
//   - an exception thrown by a body (on any chunk) is rethrown to the caller once every chunk
//     has finished; when several chunks throw, the lowest chunk's exception wins;
//   - a parallel_for issued from inside a body (on a worker or on the caller's chunk 0) runs
//     inline on that thread, so nesting can never deadlock on busy workers;
//   - at exit the pool's destructor stops and joins every worker; in a child process after
//     fork() (where the workers do not exist) and after that destructor, calls fall back to
//     threads started for the call, as before.
//
// A worker that finishes spins for a short while (~50 us) before it blocks, and so does a caller
// waiting for its workers, so that back-to-back calls (a kernel's passes) do not pay a futex
// wake-up each.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#define DSA_THREAD_POOL_ATFORK 1
#else
#define DSA_THREAD_POOL_ATFORK 0
#endif

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cpu/arch/isa.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

/// True while this thread runs a parallel_for chunk (always, on a worker): a nested
/// parallel_for then runs inline.
inline thread_local bool in_parallel_region = false;

/// Set by the pool's destructor and, in a child process, by fork(): from then on no call uses
/// the pool (a forked child has none of its threads). Constant-initialised and trivially
/// destructible, so they stay valid during static destruction.
inline std::atomic<bool> pool_destroyed{false};
inline std::atomic<bool> pool_forked{false};

inline bool pool_usable() {
  return !pool_destroyed.load(std::memory_order_acquire) && !pool_forked.load(std::memory_order_acquire);
}

inline void cpu_relax() {
#if DSA_CPU_X86
  __builtin_ia32_pause();
#elif DSA_CPU_AARCH64
  asm volatile("yield");
#else
  std::this_thread::yield();
#endif
}

/// How long a thread polls before it blocks on a condition variable.
inline constexpr std::chrono::microseconds spin_time{50};

/// Polls `ready()` for up to spin_time; true if it became true. It yields the CPU between bursts
/// of polling, so that on an oversubscribed machine the thread it waits for can run.
template <class Ready>
bool spin_until(Ready&& ready) {
  if (ready()) return true;
  const auto deadline = std::chrono::steady_clock::now() + spin_time;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      cpu_relax();
      if (ready()) return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
    std::this_thread::yield();
  }
}

/// Hardware threads (at least 1), cached.
inline int hardware_threads() {
  static const int hw = [] {
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : static_cast<int>(n);
  }();
  return hw;
}

/// Where a calling thread's workers report completion: one per calling thread (thread_local),
/// so it outlives every job the thread issues.
struct waiter {
  std::mutex m;
  std::condition_variable cv;
};

/// One parallel_for call, on the caller's stack.
struct job {
  void (*run_chunk)(void* ctx, index_t chunk) = nullptr;
  void* ctx = nullptr;
  waiter* done = nullptr;
  /// Whether the threads of this call poll before blocking: only when they fit on the hardware
  /// threads (polling threads that outnumber the cores only delay the ones being waited for).
  bool spin = true;
  /// Chunks still running on workers; decremented under done->m (so that the caller's final
  /// lock of done->m proves no worker touches the job any more).
  std::atomic<index_t> pending{0};
  std::exception_ptr error;  // of the lowest failing chunk; under done->m
  index_t error_chunk = 0;

  void record(index_t chunk, std::exception_ptr e) {
    if (!error || chunk < error_chunk) {
      error = std::move(e);
      error_chunk = chunk;
    }
  }
};

class thread_pool;

struct worker {
  std::mutex m;
  std::condition_variable cv;
  std::atomic<job*> task{nullptr};  // stored (release) under m by the caller that took this worker
  index_t chunk = 0;                // written before `task`
  std::atomic<bool> stop{false};
  std::thread thread;
};

class thread_pool {
 public:
  /// Upper bound on pooled workers; chunks beyond it get a thread of their own for the call.
  static constexpr std::size_t max_workers = 256;

  thread_pool() {
#if DSA_THREAD_POOL_ATFORK
    // The child of a fork() has none of the workers: never hand it one, never join them.
    pthread_atfork(nullptr, nullptr, [] { pool_forked.store(true); });
#endif
  }

  ~thread_pool() {
    pool_destroyed.store(true);
    // In a forked child the workers do not exist: joining them would hang. Leak them instead.
    if (pool_forked.load()) return;
    std::vector<worker*> all;
    {
      // Not held while joining: a worker finishing a chunk takes this lock to go idle.
      std::lock_guard<std::mutex> lock(m_);
      stopping_ = true;
      all.swap(all_);
      idle_.clear();
    }
    for (worker* w : all) {
      {
        std::lock_guard<std::mutex> wl(w->m);
        w->stop.store(true, std::memory_order_release);
      }
      w->cv.notify_one();
    }
    for (worker* w : all) {
      if (w->thread.joinable()) w->thread.join();  // a worker runs a task it holds before it stops
      delete w;
    }
  }

  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  /// Workers started so far (idle or busy).
  std::size_t size() {
    std::lock_guard<std::mutex> lock(m_);
    return all_.size();
  }

  /// Runs run_chunk(ctx, c) for c in [0, chunks): c = 0 on the calling thread, every other c on
  /// its own thread: a worker of `pool`, or a thread started for the call when `pool` is null or
  /// full. Returns when all have finished; rethrows the lowest chunk's exception.
  static void run(thread_pool* pool, index_t chunks, void (*run_chunk)(void*, index_t), void* ctx) {
    static thread_local waiter done;
    job j;
    j.run_chunk = run_chunk;
    j.ctx = ctx;
    j.done = &done;
    j.spin = chunks <= hardware_threads();
    j.pending.store(chunks - 1, std::memory_order_relaxed);

    std::vector<worker*> taken;
    if (pool != nullptr) pool->acquire(static_cast<std::size_t>(chunks - 1), taken);
    index_t c = 1;
    for (worker* w : taken) {
      {
        std::lock_guard<std::mutex> wl(w->m);
        w->chunk = c++;
        w->task.store(&j, std::memory_order_release);
      }
      w->cv.notify_one();
    }
    // Chunks no pooled worker could take (the pool is full or unusable): a thread each, or this
    // thread when none can be started.
    std::vector<std::thread> extra;
    for (; c < chunks; ++c) {
      try {
        extra.emplace_back([&j, c] { report(j, c, run_one(j, c)); });
      } catch (const std::system_error&) {
        report(j, c, run_one(j, c));
      }
    }

    std::exception_ptr first;
    in_parallel_region = true;
    try {
      run_chunk(ctx, 0);
    } catch (...) {
      first = std::current_exception();
    }
    in_parallel_region = false;

    for (auto& t : extra) t.join();
    if (j.spin) spin_until([&] { return j.pending.load(std::memory_order_acquire) == 0; });
    {
      std::unique_lock<std::mutex> lock(done.m);
      done.cv.wait(lock, [&] { return j.pending.load(std::memory_order_acquire) == 0; });
    }
    if (first) std::rethrow_exception(first);
    if (j.error) std::rethrow_exception(j.error);
  }

 private:
  // Runs chunk c of j on this thread; the exception it throws, if any.
  static std::exception_ptr run_one(job& j, index_t c) {
    const bool outer = in_parallel_region;
    in_parallel_region = true;
    std::exception_ptr e;
    try {
      j.run_chunk(j.ctx, c);
    } catch (...) {
      e = std::current_exception();
    }
    in_parallel_region = outer;
    return e;
  }

  // Tells j's caller that chunk c has finished; j must not be touched afterwards.
  static void report(job& j, index_t c, std::exception_ptr e) {
    waiter* done = j.done;
    std::lock_guard<std::mutex> lock(done->m);
    if (e) j.record(c, std::move(e));
    if (j.pending.fetch_sub(1, std::memory_order_acq_rel) == 1) done->cv.notify_all();
  }

  // Takes up to n idle workers (starting new ones while the pool is below max_workers).
  void acquire(std::size_t n, std::vector<worker*>& out) {
    if (n == 0 || !pool_usable()) return;
    out.reserve(n);
    std::lock_guard<std::mutex> lock(m_);
    while (!stopping_ && out.size() < n) {
      if (!idle_.empty()) {
        out.push_back(idle_.back());  // most recently used first: likely still spinning
        idle_.pop_back();
      } else if (all_.size() < max_workers) {
        auto* w = new worker;
        try {
          w->thread = std::thread([this, w] { loop(w); });
        } catch (const std::system_error&) {
          delete w;  // no thread to be had: the caller starts its own or runs the chunk itself
          break;
        }
        all_.push_back(w);
        out.push_back(w);
      } else {
        break;
      }
    }
  }

  void release(worker* w) {
    std::lock_guard<std::mutex> lock(m_);
    if (!stopping_) idle_.push_back(w);
  }

  void loop(worker* w) {
    in_parallel_region = true;
    bool spin = false;  // as the last job asked
    for (;;) {
      auto has_work = [w] {
        return w->task.load(std::memory_order_acquire) != nullptr || w->stop.load(std::memory_order_acquire);
      };
      if (!(spin && spin_until(has_work))) {
        std::unique_lock<std::mutex> lock(w->m);
        w->cv.wait(lock, has_work);
      }
      job* j = w->task.load(std::memory_order_acquire);
      if (j == nullptr) return;  // stopped
      const index_t c = w->chunk;
      spin = j->spin;
      w->task.store(nullptr, std::memory_order_relaxed);
      std::exception_ptr e = run_one(*j, c);
      // Idle again before reporting: the caller may issue its next call as soon as it sees the
      // report, and should find this worker free rather than start another.
      release(w);
      report(*j, c, std::move(e));
    }
  }

  std::mutex m_;
  std::vector<worker*> all_;
  std::vector<worker*> idle_;
  bool stopping_ = false;  // set by the destructor: no worker is handed out or parked any more
};


/// The process-wide pool; null once it is unusable (during static destruction, in a forked
/// child).
inline thread_pool* thread_pool_instance() {
  if (!pool_usable()) return nullptr;
  static thread_pool pool;
  return &pool;
}

}  // namespace cpu_detail
DSA_NAMESPACE_END
