// Block-level integer scans and reductions for kernels (integer arithmetic only, so the order of
// the operations cannot change a result).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/cuda/arch/warp.cuh"

DSA_NAMESPACE_BEGIN
namespace cuda_arch {

/// Shared memory block_exclusive_sum needs: one word per warp plus the total.
template <int Threads>
struct block_scan_storage {
  std::uint32_t warp_totals[Threads / 32];
  std::uint32_t total;
};

/// Exclusive prefix sum of `v` over the threads of the block in threadIdx.x order; `total`
/// receives the sum over the block. Every thread of the block must call it (it synchronises),
/// with blockDim.x == Threads. The storage may be reused after the call returns.
template <int Threads>
DSA_DEVICE std::uint32_t block_exclusive_sum(std::uint32_t v, block_scan_storage<Threads>& storage,
                                             std::uint32_t& total) {
  static_assert(Threads % 32 == 0 && Threads <= 1024, "dsa::block_exclusive_sum: Threads must be 32 .. 1024 whole warps");
  constexpr int warps = Threads / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  std::uint32_t inclusive = v;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const std::uint32_t o = __shfl_up_sync(full_warp_mask, inclusive, offset);
    if (lane >= offset) inclusive += o;
  }
  if (lane == 31) storage.warp_totals[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    std::uint32_t w = lane < warps ? storage.warp_totals[lane] : 0u;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const std::uint32_t o = __shfl_up_sync(full_warp_mask, w, offset);
      if (lane >= offset) w += o;
    }
    if (lane < warps) storage.warp_totals[lane] = w;  // inclusive over warps
    if (lane == warps - 1) storage.total = w;
  }
  __syncthreads();
  const std::uint32_t before = warp > 0 ? storage.warp_totals[warp - 1] : 0u;
  total = storage.total;
  const std::uint32_t result = before + inclusive - v;
  // Every thread has read the storage before a later call may overwrite it.
  __syncthreads();
  return result;
}

}  // namespace cuda_arch
DSA_NAMESPACE_END
