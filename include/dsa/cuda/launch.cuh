// Host-side helpers shared by the CUDA op implementations: grid sizes and the device's shared
// memory limits. Everything here is host code; kernels are in kernels/.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cuda/error.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_detail {

/// Most blocks any dsa kernel launches along x: kernels loop over the rest (grid-stride), so a
/// problem of any size launches, and 2^20 blocks keep every current GPU full.
inline constexpr index_t max_grid_blocks = index_t{1} << 20;

/// Blocks for `items` work items of `per_block` items each, at least 1, at most max_grid_blocks.
inline unsigned grid_blocks(index_t items, index_t per_block) {
  const index_t blocks = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(std::clamp<index_t>(blocks, 1, max_grid_blocks));
}

/// The y extent of a grid (65535 on every GPU): kernels whose row tiles are blockIdx.y loop over the
/// tiles beyond it.
inline constexpr index_t max_grid_y = 65535;

/// Blocks along y for `tiles` row tiles: at least 1, at most `cap` (max_grid_y; the tests lower it
/// so that the kernels' tile loops run on small shapes, under the sanitizers too).
inline unsigned grid_rows(index_t tiles, index_t cap = max_grid_y) {
  return static_cast<unsigned>(std::clamp<index_t>(tiles, 1, std::clamp<index_t>(cap, 1, max_grid_y)));
}

/// Dynamic shared memory a block may opt into on the current device (cudaDevAttrMaxSharedMemoryPerBlockOptin):
/// 227 KB on sm_90, 163 KB on sm_80, 99 KB on sm_86/sm_89. A host query that neither
/// synchronises nor enqueues anything, so ops stay capturable in CUDA graphs.
inline index_t max_dynamic_shared_memory() {
  int device = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&device));
  int bytes = 0;
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return bytes;
}

/// Shared memory a block gets without opting in: static and dynamic together.
inline constexpr index_t default_shared_memory = 48 * 1024;

/// Lets `kernel` launch with `bytes` of dynamic shared memory. A block's static and dynamic
/// shared memory together must fit: above default_shared_memory the kernel has to opt in, and
/// the sum must fit the device's opt-in limit (max_dynamic_shared_memory, which the op's
/// front-end checks, static bytes included, before any CUDA call). The static size comes from
/// the kernel itself (cudaFuncGetAttributes, a host query), so a kernel whose dynamic bytes are
/// just under 48 KB still opts in (Hadamard's n = 12288 rows: 48 KB dynamic + 320 B static).
template <class Kernel>
void allow_dynamic_shared_memory(Kernel* kernel, index_t bytes) {
  if (bytes == 0) return;
  cudaFuncAttributes attributes{};
  DSA_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  if (bytes + static_cast<index_t>(attributes.sharedSizeBytes) > default_shared_memory) {
    DSA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }
}

}  // namespace cuda_detail
DSA_NAMESPACE_END
