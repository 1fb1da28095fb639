// Lane and shared-memory layout of the tensor-core lightning indexer
// (kernels/lightning_indexer_fast_kernel.cuh), in constexpr DSA_HOST_DEVICE functions that the
// kernel computes its addresses with and that the CPU warp model
// (tests/numerics/test_mma_warp_model.cpp) replays lane by lane against plain dot products.
//
// The score's dot products q[t, h] · k[s] are one matrix product per query row: M = keys, N =
// heads, K = d (128, two slabs of 64). Keys as the M side put the heads in the accumulator's
// columns, so the ReLU-weighted head sum is a sum over a lane's own registers (2 heads per
// n-block, 8 n-blocks) and then over the four lanes of its group (two xor shuffles).
// A block of 256 threads (8 warps) takes up to 64 query rows and 256 keys: warp w owns keys
// 32 w .. 32 w + 31 (two m16 blocks), whose e4m3 codes it holds as f16 A fragments in registers
// for the whole block; the query heads of two rows at a time are f16 B operands in shared memory.
// Both sides are read 16 bytes per lane (arch/mma.hpp's FP8 pairing: a lane's 16 contiguous
// columns are four k-steps), the keys as raw e4m3 codes (converted in registers), the queries
// converted to f16 once per block when staged.
//
// Plain C++: g++ compiles it for the warp model.
#pragma once

#include "dsa/core/config.hpp"
#include "dsa/cuda/arch/mma.hpp"
#include "dsa/numerics/kv_cache.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

/// Threads of a block (8 warps).
inline constexpr int indexer_fast_threads = 256;
/// Keys per warp (two m16 blocks) and per block.
inline constexpr int indexer_fast_warp_keys = 32;
inline constexpr int indexer_fast_keys = indexer_fast_warp_keys * indexer_fast_threads / 32;
/// Head dimension the kernel holds (V3.2's, the paged cache's), as two slabs of 64 columns.
inline constexpr int indexer_fast_dim = 128;
inline constexpr int indexer_fast_slabs = indexer_fast_dim / 64;
/// Most heads (eight n-blocks of 8).
inline constexpr int indexer_fast_max_heads = 64;
/// Query rows per block item at most, and rows staged per round (two buffers of them).
inline constexpr int indexer_fast_max_rows = 64;
inline constexpr int indexer_fast_stage_rows = 2;
static_assert(indexer_fast_dim == indexer_cache_dim);

/// Bytes of a key row in the key tile (its e4m3 codes) and of a head row in the query tile (f16).
inline constexpr int indexer_key_row_bytes = indexer_fast_dim;
inline constexpr int indexer_query_row_bytes = 2 * indexer_fast_dim;

/// Byte offset of 16-byte chunk `chunk` (0..7) of key `key` (0..255) in the key tile.
constexpr DSA_HOST_DEVICE int indexer_key_offset(int key, int chunk) {
  return key * indexer_key_row_bytes + cuda_arch::swizzle_fp8_key_chunk(key, chunk) * 16;
}

/// Byte offset of 16-byte chunk `chunk` (0..15) of head row `row` (stage row · 64 + head) in a
/// query tile.
constexpr DSA_HOST_DEVICE int indexer_query_offset(int row, int chunk) {
  return row * indexer_query_row_bytes + cuda_arch::swizzle_f16_query_chunk(row, chunk) * 16;
}

/// The key (0..255 in the tile) whose codes `lane` of warp w loads for m-block mb (0..1): `load`
/// 0 for row groupID, 1 for row groupID + 8.
constexpr DSA_HOST_DEVICE int indexer_a_key(int warp, int lane, int mb, int load) {
  return indexer_fast_warp_keys * warp + 16 * mb + cuda_arch::mma_group(lane) + 8 * load;
}
/// The key-tile chunk (16 codes) `lane` loads for slab `slab`: physical columns 64 slab + 16 t ..
/// + 15, t = threadID_in_group (arch/mma.hpp, fp8_slab_column).
constexpr DSA_HOST_DEVICE int indexer_a_chunk(int lane, int slab) { return 4 * slab + cuda_arch::mma_thread_in_group(lane); }

/// The query-tile head row `lane` reads for n-block nb of stage row sr: head 8 nb + groupID.
constexpr DSA_HOST_DEVICE int indexer_b_row(int lane, int sr, int nb) {
  return sr * indexer_fast_max_heads + 8 * nb + cuda_arch::mma_group(lane);
}
/// The two query-tile chunks (8 f16 each) holding the lane's physical columns 64 slab + 16 t ..
/// + 15: chunk 8 slab + 2 t + half.
constexpr DSA_HOST_DEVICE int indexer_b_chunk(int lane, int slab, int half) {
  return 8 * slab + 2 * cuda_arch::mma_thread_in_group(lane) + half;
}

/// Head of accumulator element i of n-block nb (its key is indexer_c_key).
constexpr DSA_HOST_DEVICE int indexer_c_head(int lane, int nb, int i) { return 8 * nb + cuda_arch::mma_c_col(lane, i); }
/// Key (0..255 in the tile) of accumulator element i of m-block mb of warp w.
constexpr DSA_HOST_DEVICE int indexer_c_key(int warp, int lane, int mb, int i) {
  return indexer_fast_warp_keys * warp + 16 * mb + cuda_arch::mma_c_row(lane, i);
}

/// After the head sum (over the lane's registers, then the group's four lanes) every lane of a
/// group holds the scores of its keys groupID and groupID + 8 of both m-blocks; lane t of the
/// group writes one of the four: m-block t / 2, row half t % 2, so that a warp's 32 stores cover
/// its 32 keys.
constexpr DSA_HOST_DEVICE int indexer_store_mblock(int lane) { return cuda_arch::mma_thread_in_group(lane) >> 1; }
constexpr DSA_HOST_DEVICE int indexer_store_half(int lane) { return cuda_arch::mma_thread_in_group(lane) & 1; }
constexpr DSA_HOST_DEVICE int indexer_store_key(int warp, int lane) {
  return indexer_fast_warp_keys * warp + 16 * indexer_store_mblock(lane) + 8 * indexer_store_half(lane) +
         cuda_arch::mma_group(lane);
}

/// Byte offsets of the kernel's shared memory.
struct indexer_fast_smem_layout {
  int keys = 0;     // e4m3 codes [256][128]
  int queries = 0;  // f16 [2 buffers][2 rows · 64 heads][128]
  int scale = 0;    // float [256]: the keys' scales (0 for unreadable keys)
  int slot = 0;     // int64 [256]: the row each key is read from (plain: s, paged: its cache
                    // slot), -1 where it cannot be read (plain: s >= n; paged: no slot)
  int range = 0;    // int [64][2]: the item's rows' clamped ranges
  int bytes = 0;
};

constexpr DSA_HOST_DEVICE indexer_fast_smem_layout indexer_fast_smem() {
  indexer_fast_smem_layout l;
  l.keys = 0;
  l.queries = indexer_fast_keys * indexer_key_row_bytes;
  l.scale = l.queries + 2 * indexer_fast_stage_rows * indexer_fast_max_heads * indexer_query_row_bytes;
  l.slot = l.scale + indexer_fast_keys * 4;
  l.range = l.slot + indexer_fast_keys * 8;
  l.bytes = l.range + indexer_fast_max_rows * 2 * 4;
  return l;
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
