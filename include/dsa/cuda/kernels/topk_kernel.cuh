// Kernels of topk_indices, topk_indices_paged and gather_rows on the CUDA backend.
//
// Top-k: one block per row, radix select on the shared keys of dsa/numerics/topk.hpp, O(n) per
// row and no scratch memory beyond a 1 KB shared histogram:
//   pass 0    keys of the row's range, histogram of their top byte (every score of the range is
//             selectable, NaN above every number: numerics/topk.hpp); pass 1 .. 3 histogram the next byte of the keys that share the prefix found
//             so far. After each pass one thread walks the histogram with topk_radix_find_bucket
//             (the CPU's walk), so the threshold key T and the number r of T-valued elements to
//             take are the CPU's;
//   emission  the row again in index order, a block-wide chunk at a time: every key > T and the
//             first r keys == T, placed by an exclusive scan (cub::BlockScan), so the output is
//             ascending and ties go to the smaller index, as on the CPU. A range of fewer than k
//             positions: all of them, then -1.
// The results are integers and equal the CPU backend's exactly. Histogram updates are
// warp-aggregated (__match_any_sync) because scores of one row often share their top bytes.
//
// Ranges, and page-table entries, come from device memory that the front-end cannot read: a
// range is clamped to 0 <= start <= end <= n, and a position whose page-table entry is negative
// or whose slot would not fit int32 is written as -1. Nothing is ever read or written out of
// bounds whatever the device-side values.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <cub/block/block_scan.cuh>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cuda/arch/warp.cuh"
#include "dsa/numerics/paging.hpp"
#include "dsa/numerics/topk.hpp"
#include "dsa/numerics/topk_split.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

struct topk_params {
  const float* scores = nullptr;
  index_t score_row_stride = 0;
  const std::int32_t* ranges = nullptr;
  index_t range_row_stride = 0;
  index_t rows = 0;
  index_t n = 0;
  index_t k = 0;
  std::int32_t* out = nullptr;
  index_t out_row_stride = 0;
  // Paged variant only (block_table == nullptr otherwise).
  const std::int32_t* block_table = nullptr;
  index_t table_row_stride = 0;
  index_t max_blocks = 0;
  index_t block_size = 1;
};


/// Adds one to hist[bucket] for every lane whose bucket is < 256, one atomic per distinct bucket
/// of the warp. Every lane of the warp must call it.
DSA_DEVICE DSA_FORCEINLINE void warp_histogram_add(std::uint32_t* hist, std::uint32_t bucket) {
  const unsigned peers = __match_any_sync(cuda_arch::full_warp_mask, bucket);
  const int leader = __ffs(static_cast<int>(peers)) - 1;
  if (bucket < topk_radix_buckets && static_cast<int>(threadIdx.x % 32) == leader) {
    atomicAdd(hist + bucket, static_cast<std::uint32_t>(__popc(peers)));
  }
}

/// Logical position p of row `row` as written to the output: p itself, or its cache slot.
DSA_DEVICE DSA_FORCEINLINE std::int32_t output_position(const topk_params& p, index_t row, index_t pos) {
  if (p.block_table == nullptr) return static_cast<std::int32_t>(pos);
  const index_t b = pos / p.block_size;
  if (b >= p.max_blocks) return -1;
  const index_t entry = p.block_table[row * p.table_row_stride + b];
  if (entry < 0) return -1;
  const index_t slot = entry * p.block_size + pos % p.block_size;
  return slot <= 0x7FFFFFFF ? static_cast<std::int32_t>(slot) : -1;
}


// (Threads, 1): without a minimum-blocks bound ptxas aimed for full occupancy at 32 registers and
// spilled to local memory around the block scan.
template <int Threads>
__global__ void __launch_bounds__(Threads, 1) topk_kernel(const topk_params p) {
  static_assert(Threads % 32 == 0 && Threads <= 1024);
  __shared__ std::uint32_t hist[topk_radix_buckets];
  __shared__ std::uint32_t threshold_prefix;
  __shared__ std::uint32_t remaining_shared;
  // Warp scans, then a scan of the warp totals (the smallest shared storage of CUB's scans).
  using block_scan = cub::BlockScan<std::uint32_t, Threads, cub::BLOCK_SCAN_WARP_SCANS>;
  __shared__ typename block_scan::TempStorage scan;
  const int tid = static_cast<int>(threadIdx.x);

  for (index_t t = blockIdx.x; t < p.rows; t += gridDim.x) {
    index_t start = p.ranges[t * p.range_row_stride];
    index_t end = p.ranges[t * p.range_row_stride + 1];
    start = start < 0 ? 0 : (start > p.n ? p.n : start);
    end = end < start ? start : (end > p.n ? p.n : end);
    const index_t len = end - start;
    const float* x = p.scores + t * p.score_row_stride + start;

    // Threshold T (as a key) and r; T = topk_no_key, r = 0 takes every key of the range.
    std::uint32_t threshold = topk_no_key;
    std::uint32_t remaining = 0u;
    if (len > p.k) {  // block-uniform; then k < 2^31
      // Pass 0: top-byte histogram.
      for (int b = tid; b < topk_radix_buckets; b += Threads) hist[b] = 0u;
      __syncthreads();
      for (index_t j0 = 0; j0 < len; j0 += Threads) {
        const index_t j = j0 + tid;
        const std::uint32_t bucket = j < len ? topk_radix_digit(topk_radix_key(x[j]), 0) : 0xFFFFFFFFu;
        warp_histogram_add(hist, bucket);
      }
      __syncthreads();
      if (tid == 0) {
        std::uint32_t r = static_cast<std::uint32_t>(p.k);
        threshold_prefix = topk_radix_find_bucket(hist, r);
        remaining_shared = r;
      }
      __syncthreads();
      for (int pass = 1; pass < topk_radix_passes; ++pass) {
        const std::uint32_t prefix = threshold_prefix;
        const int shift = 8 * (topk_radix_passes - pass);
        for (int b = tid; b < topk_radix_buckets; b += Threads) hist[b] = 0u;
        __syncthreads();
        for (index_t j0 = 0; j0 < len; j0 += Threads) {
          const index_t j = j0 + tid;
          std::uint32_t bucket = 0xFFFFFFFFu;
          if (j < len) {
            const std::uint32_t key = topk_radix_key(x[j]);
            if ((key >> shift) == prefix) bucket = topk_radix_digit(key, pass);
          }
          warp_histogram_add(hist, bucket);
        }
        __syncthreads();
        if (tid == 0) {
          std::uint32_t r = remaining_shared;
          const std::uint32_t digit = topk_radix_find_bucket(hist, r);
          threshold_prefix = (prefix << 8) | digit;
          remaining_shared = r;
        }
        __syncthreads();
      }
      threshold = threshold_prefix;
      remaining = remaining_shared;
    }

    // Emission in index order: keys > T, and the first `remaining` keys == T.
    std::int32_t* out = p.out + t * p.out_row_stride;
    index_t written = 0;
    std::uint32_t ties_seen = 0;
    for (index_t j0 = 0; j0 < len && written < p.k; j0 += Threads) {
      const index_t j = j0 + tid;
      std::uint32_t key = topk_no_key;
      if (j < len) key = topk_radix_key(x[j]);
      const bool gt = key > threshold;
      const bool tie = key == threshold && key != topk_no_key;
      // Low half: keys > T before this thread; high half: ties before it (each < 2^16).
      std::uint32_t before = 0, total = 0;
      block_scan(scan).ExclusiveSum((gt ? 1u : 0u) | (tie ? 0x10000u : 0u), before, total);
      // Every thread has its result before the next chunk's scan reuses the storage.
      __syncthreads();
      const std::uint32_t ties_left = remaining > ties_seen ? remaining - ties_seen : 0u;
      const std::uint32_t ties_before = before >> 16;
      const bool take = gt || (tie && ties_before < ties_left);
      const index_t pos = written + (before & 0xFFFFu) + (ties_before < ties_left ? ties_before : ties_left);
      if (take && pos < p.k) out[pos] = output_position(p, t, start + j);
      const std::uint32_t total_ties = total >> 16;
      written += (total & 0xFFFFu) + (total_ties < ties_left ? total_ties : ties_left);
      ties_seen += total_ties;
    }
    for (index_t i = (written < p.k ? written : p.k) + tid; i < p.k; i += Threads) out[i] = -1;
    // hist and the shared scalars are reused by the next row.
    __syncthreads();
  }
}

// The split top-k (dsa/numerics/topk_split.hpp): a few long rows, each cut into chunks of
// topk_split_chunk_keys keys, one block per (chunk, row), grid (topk_split_chunks(n), rows):
//   topk_split_histogram_kernel (x4, pass 0..3): the chunk's histogram of digit `pass` of its
//       keys under the prefix found so far, added into the row's merged histogram of that pass
//       (integer atomics: the sum does not depend on the order the blocks add in);
//   topk_split_count_kernel: the chunk's keys > T and == T;
//   topk_split_emission_kernel: the chunk's selected keys in index order from its offset, and
//       its share of the row's -1 padding.
// Every block derives the prefix (and at the end T and r) itself from the merged histograms of
// the passes before (topk_split_walk), so no block waits for another inside a kernel. Rows whose
// range holds at most k keys skip the passes (T = topk_no_key, r = 0), as in topk_kernel.

/// Threads of the split kernels: one per radix bucket (topk_split_walk takes all 256 at once).
inline constexpr int topk_split_threads = 256;
static_assert(topk_split_threads == topk_radix_buckets);

struct topk_split_params {
  topk_params row;                      ///< scores, ranges, k and out (block_table: the paged form)
  std::uint32_t* histograms = nullptr;  ///< [rows][4][256] merged histograms, zero before pass 0
  std::uint32_t* counts = nullptr;      ///< [rows][chunks][2]: each chunk's keys > T, == T
  index_t chunks = 0;                   ///< topk_split_chunks(n), the grid's x extent
};

using topk_split_scan = cub::BlockScan<std::uint32_t, topk_split_threads, cub::BLOCK_SCAN_WARP_SCANS>;

/// The row's range clamped to [0, n] as topk_kernel clamps it: {start, end}.
DSA_DEVICE DSA_FORCEINLINE void topk_row_range(const topk_params& p, index_t t, index_t& start, index_t& len) {
  index_t s = p.ranges[t * p.range_row_stride];
  index_t e = p.ranges[t * p.range_row_stride + 1];
  s = s < 0 ? 0 : (s > p.n ? p.n : s);
  e = e < s ? s : (e > p.n ? p.n : e);
  start = s;
  len = e - s;
}

/// One pass of topk_radix_find_bucket's walk over a merged histogram, by the whole block at once:
/// thread i holds bucket 255 - i, an inclusive scan gives each bucket the count above it, and the
/// one bucket topk_bucket_selected accepts publishes the next state. Every thread must call it.
DSA_DEVICE DSA_FORCEINLINE topk_radix_state topk_split_walk(const std::uint32_t* merged, topk_radix_state s,
                                                            topk_split_scan::TempStorage& scan,
                                                            topk_radix_state& shared_state) {
  const int b = topk_radix_buckets - 1 - static_cast<int>(threadIdx.x);
  const std::uint32_t count = merged[b];
  std::uint32_t inclusive = 0;
  topk_split_scan(scan).InclusiveSum(count, inclusive);
  const std::uint32_t above = inclusive - count;
  if (topk_bucket_selected(b, above, count, s.remaining)) {
    shared_state = topk_radix_state{(s.prefix << 8) | static_cast<std::uint32_t>(b), s.remaining - above};
  }
  __syncthreads();
  const topk_radix_state next = shared_state;
  __syncthreads();  // shared_state and the scan storage are reused by the next walk
  return next;
}

/// T and r of a row of more than k keys, from its four merged histograms.
DSA_DEVICE DSA_FORCEINLINE topk_radix_state topk_split_threshold(const topk_split_params& p, index_t t, int passes,
                                                                 topk_split_scan::TempStorage& scan,
                                                                 topk_radix_state& shared_state) {
  topk_radix_state s{0u, static_cast<std::uint32_t>(p.row.k)};
  for (int q = 0; q < passes; ++q) {
    s = topk_split_walk(p.histograms + (t * topk_radix_passes + q) * topk_radix_buckets, s, scan, shared_state);
  }
  return s;
}

// (A template, like every kernel in a header several translation units include.)
template <int Threads>
__global__ void __launch_bounds__(Threads) topk_split_histogram_kernel(const topk_split_params p, int pass) {
  static_assert(Threads == topk_split_threads);
  __shared__ std::uint32_t hist[topk_radix_buckets];
  __shared__ typename topk_split_scan::TempStorage scan;
  __shared__ topk_radix_state shared_state;
  const int tid = static_cast<int>(threadIdx.x);
  const index_t t = blockIdx.y;
  index_t start = 0, len = 0;
  topk_row_range(p.row, t, start, len);
  const topk_split_range chunk = topk_split_chunk(len, blockIdx.x);
  if (len <= p.row.k || chunk.begin == chunk.end) return;  // block-uniform
  const topk_radix_state s = topk_split_threshold(p, t, pass, scan, shared_state);
  hist[tid] = 0u;
  __syncthreads();
  const float* x = p.row.scores + t * p.row.score_row_stride + start;
  const int shift = 8 * (topk_radix_passes - pass);  // the prefix's digits, for pass >= 1
  for (index_t j0 = chunk.begin; j0 < chunk.end; j0 += topk_split_threads) {
    const index_t j = j0 + tid;
    std::uint32_t bucket = 0xFFFFFFFFu;
    if (j < chunk.end) {
      const std::uint32_t key = topk_radix_key(x[j]);
      if (pass == 0 || (key >> shift) == s.prefix) bucket = topk_radix_digit(key, pass);
    }
    warp_histogram_add(hist, bucket);
  }
  __syncthreads();
  if (hist[tid] != 0u) {
    atomicAdd(p.histograms + (t * topk_radix_passes + pass) * topk_radix_buckets + tid, hist[tid]);
  }
}

template <int Threads>
__global__ void __launch_bounds__(Threads) topk_split_count_kernel(const topk_split_params p) {
  static_assert(Threads == topk_split_threads);
  __shared__ typename topk_split_scan::TempStorage scan;
  __shared__ topk_radix_state shared_state;
  __shared__ std::uint32_t warp_gt[topk_split_threads / 32], warp_eq[topk_split_threads / 32];
  const int tid = static_cast<int>(threadIdx.x);
  const index_t t = blockIdx.y, c = blockIdx.x;
  index_t start = 0, len = 0;
  topk_row_range(p.row, t, start, len);
  const topk_split_range chunk = topk_split_chunk(len, c);
  std::uint32_t* counts = p.counts + (t * p.chunks + c) * 2;
  if (len <= p.row.k) {  // block-uniform: every key is taken
    if (tid == 0) {
      counts[0] = static_cast<std::uint32_t>(chunk.end - chunk.begin);
      counts[1] = 0u;
    }
    return;
  }
  const topk_radix_state s = topk_split_threshold(p, t, topk_radix_passes, scan, shared_state);
  const float* x = p.row.scores + t * p.row.score_row_stride + start;
  std::uint32_t gt = 0, eq = 0;
  for (index_t j = chunk.begin + tid; j < chunk.end; j += topk_split_threads) {
    const std::uint32_t key = topk_radix_key(x[j]);
    gt += key > s.prefix ? 1u : 0u;
    eq += key == s.prefix ? 1u : 0u;
  }
  gt = cuda_arch::warp_reduce_sum(gt);
  eq = cuda_arch::warp_reduce_sum(eq);
  if (tid % 32 == 0) {
    warp_gt[tid / 32] = gt;
    warp_eq[tid / 32] = eq;
  }
  __syncthreads();
  if (tid == 0) {
    std::uint32_t g = 0, e = 0;
    for (int w = 0; w < topk_split_threads / 32; ++w) {
      g += warp_gt[w];
      e += warp_eq[w];
    }
    counts[0] = g;
    counts[1] = e;
  }
}

template <int Threads>
__global__ void __launch_bounds__(Threads) topk_split_emission_kernel(const topk_split_params p) {
  static_assert(Threads == topk_split_threads);
  using block_scan = cub::BlockScan<std::uint32_t, topk_split_threads, cub::BLOCK_SCAN_WARP_SCANS>;
  __shared__ typename topk_split_scan::TempStorage scan;
  __shared__ topk_radix_state shared_state;
  __shared__ std::uint32_t sums[4][topk_split_threads / 32];
  const int tid = static_cast<int>(threadIdx.x);
  const index_t t = blockIdx.y, c = blockIdx.x;
  index_t start = 0, len = 0;
  topk_row_range(p.row, t, start, len);
  const topk_split_range chunk = topk_split_chunk(len, c);
  topk_radix_state s{topk_no_key, 0u};  // a range of at most k keys: all of them
  if (len > p.row.k) s = topk_split_threshold(p, t, topk_radix_passes, scan, shared_state);

  // The keys > T and == T of the chunks before this one, and of the whole row.
  std::uint32_t part[4] = {0u, 0u, 0u, 0u};  // gt before, eq before, gt total, eq total
  const std::uint32_t* counts = p.counts + t * p.chunks * 2;
  for (index_t i = tid; i < p.chunks; i += topk_split_threads) {
    const std::uint32_t gt = counts[2 * i], eq = counts[2 * i + 1];
    if (i < c) {
      part[0] += gt;
      part[1] += eq;
    }
    part[2] += gt;
    part[3] += eq;
  }
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    part[v] = cuda_arch::warp_reduce_sum(part[v]);
    if (tid % 32 == 0) sums[v][tid / 32] = part[v];
  }
  __syncthreads();
  index_t totals[4] = {0, 0, 0, 0};
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    for (int w = 0; w < topk_split_threads / 32; ++w) totals[v] += sums[v][w];
  }
  const topk_split_start first = topk_split_emission_start(totals[0], totals[1], s.remaining);

  // This chunk's keys > T and its first ties_left ties, in index order (topk_kernel's emission).
  const float* x = p.row.scores + t * p.row.score_row_stride + start;
  std::int32_t* out = p.row.out + t * p.row.out_row_stride;
  index_t written = first.position;
  std::uint32_t ties_seen = 0;
  for (index_t j0 = chunk.begin; j0 < chunk.end && written < p.row.k; j0 += topk_split_threads) {
    const index_t j = j0 + tid;
    std::uint32_t key = topk_no_key;
    if (j < chunk.end) key = topk_radix_key(x[j]);
    const bool gt = key > s.prefix;
    const bool tie = key == s.prefix && key != topk_no_key;
    std::uint32_t before = 0, total = 0;
    block_scan(scan).ExclusiveSum((gt ? 1u : 0u) | (tie ? 0x10000u : 0u), before, total);
    __syncthreads();  // every thread has its result before the next chunk's scan reuses the storage
    const std::uint32_t ties_left = first.ties_left > ties_seen ? first.ties_left - ties_seen : 0u;
    const std::uint32_t ties_before = before >> 16;
    const bool take = gt || (tie && ties_before < ties_left);
    const index_t pos = written + (before & 0xFFFFu) + (ties_before < ties_left ? ties_before : ties_left);
    if (take && pos < p.row.k) out[pos] = output_position(p.row, t, start + j);
    const std::uint32_t total_ties = total >> 16;
    written += (total & 0xFFFFu) + (total_ties < ties_left ? total_ties : ties_left);
    ties_seen += total_ties;
  }
  // The row's -1 padding, shared out over its blocks.
  const index_t selected = topk_split_selected(totals[2], totals[3], s.remaining);
  for (index_t i = selected + c * topk_split_threads + tid; i < p.row.k; i += p.chunks * topk_split_threads) out[i] = -1;
}

template <class T>
struct gather_params {
  const T* src = nullptr;
  index_t src_row_stride = 0;
  index_t n = 0;
  const std::int32_t* indices = nullptr;
  index_t index_row_stride = 0;
  index_t m = 0;
  index_t k = 0;
  T* dst = nullptr;
  index_t dst_stride0 = 0;
  index_t dst_stride1 = 0;
  index_t d = 0;  // elements per row (in units of T)
};

/// One warp per selected row: dst[t, j, :] = src[indices(t, j), :], zeros for an index outside
/// [0, n) (the -1 padding; any other bad device-side index also gives zeros, never a bad read).
/// T is the element type, or uint4 when the op_impl found every row 16-byte aligned.
template <class T, int Threads>
__global__ void __launch_bounds__(Threads) gather_rows_kernel(const gather_params<T> p) {
  constexpr int warps = Threads / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const index_t pairs = p.m * p.k;
  for (index_t e = static_cast<index_t>(blockIdx.x) * warps + threadIdx.x / 32; e < pairs;
       e += static_cast<index_t>(gridDim.x) * warps) {
    const index_t t = e / p.k, j = e - t * p.k;
    const index_t i = p.indices[t * p.index_row_stride + j];
    T* out = p.dst + t * p.dst_stride0 + j * p.dst_stride1;
    if (i >= 0 && i < p.n) {
      const T* in = p.src + i * p.src_row_stride;
      for (index_t c = lane; c < p.d; c += 32) out[c] = in[c];
    } else {
      for (index_t c = lane; c < p.d; c += 32) out[c] = T{};
    }
  }
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
