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
