// Which kernel the CUDA backend runs for the ops that have two (docs/cuda.md, "Exact and fast
// kernels"): the fast tensor-core kernel when the backend asks for it (cuda_backend::kernels ==
// cuda_kernel_path::fast, the default), the device has mma.sync (sm_80+), the shapes are ones the
// kernel holds and the arguments are aligned for its 16-byte copies; the exact kernel otherwise.
// The choice is a pure function of those facts, so the host tests check it without a GPU; the op
// implementations (cuda/sparse_mla_attention.cuh, cuda/lightning_indexer.cuh) ask the device for
// its capability and shared memory and call it before any launch.
//
// Host code (g++ or nvcc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string_view>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/kernels/lightning_indexer_fast_layout.hpp"
#include "dsa/cuda/kernels/sparse_mla_attention_fast_layout.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_detail {

/// What the choice needs to know of the device.
struct device_caps {
  int compute_capability = 0;  ///< 10 · major + minor (90 for sm_90)
  index_t max_smem = 0;        ///< opt-in shared memory per block, bytes
};

/// mma.sync.m16n8k16 with bf16 / f16 operands: sm_80 and later.
inline constexpr int mma_sync_min_compute_capability = 80;

/// The current device's capability and opt-in shared memory (host queries: no synchronisation,
/// nothing enqueued).
inline device_caps current_device_caps() {
  int device = 0, major = 0, minor = 0, smem = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&device));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return device_caps{10 * major + minor, smem};
}

/// Throws dsa::error naming `op` when `path` is neither enumerator (a value cast from an
/// integer): before any CUDA call, as for cuda_backend::linear.
inline void check_kernel_path(std::string_view op, cuda_kernel_path path) {
  if (path != cuda_kernel_path::fast && path != cuda_kernel_path::exact) {
    fail(op, "backend.kernels", static_cast<int>(path), "cuda_kernel_path::fast (0) or cuda_kernel_path::exact (1)");
  }
}

/// Whether the backend asks for the fast kernels on a device that has mma.sync.
inline bool fast_kernels_wanted(cuda_kernel_path path, const device_caps& dev) {
  return path == cuda_kernel_path::fast && dev.compute_capability >= mma_sync_min_compute_capability;
}

/// `p` is a multiple of `bytes` (a power of two).
inline bool aligned_to(const void* p, std::uintptr_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

// ---- sparse_mla_attention -------------------------------------------------------------------------

enum class sparse_mla_kernel : unsigned char {
  exact,          ///< the SIMT kernels
  fast_direct,    ///< tensor cores, one K tile (FP8 rows decoded from global memory)
  fast_prefetch,  ///< tensor cores, the next tile fetched while this one is computed
};

/// The facts of a sparse_mla_attention call the choice depends on. `aligned`: q's data and outer
/// strides and the cache's data and row stride are multiples of 16 bytes.
struct sparse_mla_call {
  index_t d_qk = 0;
  index_t d_v = 0;
  bool fp8 = false;
  bool aligned = false;
};

inline sparse_mla_kernel choose_sparse_mla_kernel(cuda_kernel_path path, const device_caps& dev,
                                                  const sparse_mla_call& c) {
  if (!fast_kernels_wanted(path, dev) || !c.aligned) return sparse_mla_kernel::exact;
  if (c.d_qk % 64 != 0 || c.d_qk > cuda_kernels::mla_fast_max_dqk) return sparse_mla_kernel::exact;
  if (c.d_v % 32 != 0 || c.d_v > cuda_kernels::mla_fast_max_dv || c.d_v > c.d_qk) return sparse_mla_kernel::exact;
  const int d = static_cast<int>(c.d_qk);
  if (cuda_kernels::mla_fast_smem(d, c.fp8, true).bytes <= dev.max_smem) return sparse_mla_kernel::fast_prefetch;
  if (cuda_kernels::mla_fast_smem(d, c.fp8, false).bytes <= dev.max_smem) return sparse_mla_kernel::fast_direct;
  return sparse_mla_kernel::exact;
}

// ---- lightning_indexer_scores (FP8) and lightning_indexer_scores_paged ----------------------------

enum class indexer_kernel : unsigned char {
  exact,        ///< the SIMT kernel, bit-identical with the CPU
  fast_copy16,  ///< tensor cores, key rows copied 16 bytes at a time
  fast_copy4,   ///< tensor cores, key rows copied 4 bytes at a time (e.g. 132-byte cache rows)
};

/// The facts of an FP8 indexer call the choice depends on (addresses and strides in bytes: the
/// codes are one byte each). Keys: `k` rows (plain) or cache rows (paged).
struct indexer_call {
  index_t heads = 0;
  index_t d = 0;
  const void* q = nullptr;
  index_t q_stride0 = 0, q_stride1 = 0;
  const void* keys = nullptr;
  index_t key_stride = 0;
};

inline indexer_kernel choose_indexer_kernel(cuda_kernel_path path, const device_caps& dev, const indexer_call& c) {
  if (!fast_kernels_wanted(path, dev)) return indexer_kernel::exact;
  if (c.d != cuda_kernels::indexer_fast_dim || c.heads < 1 || c.heads > cuda_kernels::indexer_fast_max_heads) {
    return indexer_kernel::exact;
  }
  if (cuda_kernels::indexer_fast_smem().bytes > dev.max_smem) return indexer_kernel::exact;
  if (!aligned_to(c.q, 16) || c.q_stride0 % 16 != 0 || c.q_stride1 % 16 != 0) return indexer_kernel::exact;
  if (aligned_to(c.keys, 16) && c.key_stride % 16 == 0) return indexer_kernel::fast_copy16;
  if (aligned_to(c.keys, 4) && c.key_stride % 4 == 0) return indexer_kernel::fast_copy4;
  return indexer_kernel::exact;
}

/// Query rows of one fast indexer item: all of them up to 64 (a key tile's codes are converted
/// once for every row that reads it); paged calls take one row per item (each its own table).
inline int indexer_fast_rows_per_item(index_t m, bool paged) {
  if (paged) return 1;
  return static_cast<int>(m < cuda_kernels::indexer_fast_max_rows ? (m < 1 ? 1 : m) : cuda_kernels::indexer_fast_max_rows);
}

}  // namespace cuda_detail
DSA_NAMESPACE_END
