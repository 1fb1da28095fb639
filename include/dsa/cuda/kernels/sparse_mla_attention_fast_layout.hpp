// Lane and shared-memory layout of the tensor-core sparse MLA kernel
// (kernels/sparse_mla_attention_fast_kernel.cuh), in constexpr DSA_HOST_DEVICE functions that
// the kernel computes its addresses with and that the CPU warp model
// (tests/numerics/test_mma_warp_model.cpp) replays lane by lane against a plain matrix product.
//
// A block of 256 threads (8 warps) takes a token, 64 heads and one split of the token's index
// entries, in tiles of 64 entries. Warp w works on head block hb = w % 4 (heads 16 hb .. 16 hb +
// 15 of the group) and half = w / 4:
//   S = Q K^T    keys 32 half .. 32 half + 31 of the tile, all of d_qk (4 n-blocks of 8 keys);
//   softmax      the two halves of a head block exchange their row maxima through shared memory,
//                so both rescale with the same running maximum;
//   O += P V     output columns half · d_v / 2 .. (half + 1) · d_v / 2 - 1, all 64 keys of the
//                tile: P goes through shared memory (each half wrote its 32 keys' columns).
// Shared memory, in 16-byte chunks of bf16 rows swizzled by arch/mma.hpp's swizzle_ldsm_chunk:
//   Q   [64 heads][d_qk]   (ldmatrix A operand of S)
//   K   [64 keys][d_qk]    (ldmatrix B operand of S, and .trans B operand of P V: V = K[:, :d_v])
//   P   [64 heads][64 keys] bf16 (ldmatrix A operand of P V)
// and the row maxima / sums of the two halves and the tile's cache rows.
//
// Plain C++: g++ compiles it for the warp model.
#pragma once

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/cuda/arch/mma.hpp"
#include "dsa/numerics/kv_cache.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

/// Threads of a block (8 warps).
inline constexpr int mla_fast_threads = 256;
/// Heads per block: four m16 head blocks.
inline constexpr int mla_fast_heads = 64;
/// Index entries (keys) per tile.
inline constexpr int mla_fast_tile = 64;
/// Widest d_qk (V3.2's 576) and d_v (512) the kernel holds: d_qk a multiple of 64 (whole
/// 128-byte swizzle groups per row), d_v a multiple of 32 (each half a multiple of 16 columns).
inline constexpr int mla_fast_max_dqk = 576;
inline constexpr int mla_fast_max_dv = 512;
/// Output n-blocks (8 columns) one warp accumulates at most: half of d_v.
inline constexpr int mla_fast_max_out_blocks = mla_fast_max_dv / 2 / cuda_arch::mma_n;

/// Head block (0..3) and half (0..1) of warp w.
constexpr DSA_HOST_DEVICE int mla_fast_head_block(int warp) { return warp & 3; }
constexpr DSA_HOST_DEVICE int mla_fast_half(int warp) { return warp >> 2; }

/// Byte offset of 16-byte chunk `chunk` of row `row` in a bf16 tile of `row_chunks` chunks per
/// row (a multiple of 8).
constexpr DSA_HOST_DEVICE int mla_tile_offset(int row, int chunk, int row_chunks) {
  return (row * row_chunks + cuda_arch::swizzle_ldsm_chunk(row, chunk)) * 16;
}

/// Chunks per row of the P tile (64 keys of bf16).
inline constexpr int mla_p_row_chunks = mla_fast_tile * 2 / 16;

// ---- S = Q K^T -----------------------------------------------------------------------------------

/// The Q-tile address `lane` supplies to ldmatrix for the A operand of k-step ks (16 columns of
/// d_qk) of head block hb.
constexpr DSA_HOST_DEVICE int mla_qk_a_offset(int lane, int hb, int ks, int row_chunks) {
  return mla_tile_offset(16 * hb + cuda_arch::ldsm_a_row(lane), 2 * ks + cuda_arch::ldsm_a_chunk(lane), row_chunks);
}

/// The K-tile address for the B operand of n-blocks 2 np and 2 np + 1 (keys 32 half + 16 np ..
/// + 15) at k-step ks.
constexpr DSA_HOST_DEVICE int mla_qk_b_offset(int lane, int half, int np, int ks, int row_chunks) {
  return mla_tile_offset(32 * half + 16 * np + cuda_arch::ldsm_b_row(lane), 2 * ks + cuda_arch::ldsm_b_chunk(lane),
                         row_chunks);
}

/// Four k-steps span one 128-byte swizzle group, so an address four k-steps on is 128 bytes on:
/// the kernel computes the offsets of k-steps 0..3 once and adds this per group.
inline constexpr int mla_kstep_group_bytes = 128;

/// Head (row of the group's 64) of S element i of `lane` in head block hb.
constexpr DSA_HOST_DEVICE int mla_s_head(int lane, int hb, int i) { return 16 * hb + cuda_arch::mma_c_row(lane, i); }
/// Key (entry of the tile, 0..63) of S element i of n-block nb (0..3) of `lane` in half `half`.
constexpr DSA_HOST_DEVICE int mla_s_key(int lane, int half, int nb, int i) {
  return 32 * half + 8 * nb + cuda_arch::mma_c_col(lane, i);
}

/// The P-tile address of the bf16 pair S elements 2 pr and 2 pr + 1 (pr 0..1: rows groupID and
/// groupID + 8) of n-block nb become: one 4-byte store.
constexpr DSA_HOST_DEVICE int mla_p_store_offset(int lane, int hb, int half, int nb, int pr) {
  const int row = mla_s_head(lane, hb, 2 * pr);
  const int key = mla_s_key(lane, half, nb, 2 * pr);
  return mla_tile_offset(row, key / 8, mla_p_row_chunks) + (key % 8) * 2;
}

// ---- O += P V --------------------------------------------------------------------------------------

/// The P-tile address for the A operand of k-step ks (keys 16 ks .. 16 ks + 15) of head block hb.
constexpr DSA_HOST_DEVICE int mla_pv_a_offset(int lane, int hb, int ks) {
  return mla_tile_offset(16 * hb + cuda_arch::ldsm_a_row(lane), 2 * ks + cuda_arch::ldsm_a_chunk(lane),
                         mla_p_row_chunks);
}

/// The K-tile address for the .trans B operand of k-step ks and the two n-blocks of output
/// columns col0 .. col0 + 15 (col0 a multiple of 16): V = K[:, :d_v].
constexpr DSA_HOST_DEVICE int mla_pv_b_offset(int lane, int ks, int col0, int row_chunks) {
  return mla_tile_offset(16 * ks + cuda_arch::ldsm_bt_row(lane), col0 / 8 + cuda_arch::ldsm_bt_chunk(lane), row_chunks);
}

/// First output column of half `half`.
constexpr DSA_HOST_DEVICE int mla_out_col_base(int half, int d_v) { return half * (d_v / 2); }
/// Output column of accumulator element i of n-block nb of `lane` in half `half` (its head is
/// mla_s_head(lane, hb, i)).
constexpr DSA_HOST_DEVICE int mla_out_col(int lane, int half, int d_v, int nb, int i) {
  return mla_out_col_base(half, d_v) + 8 * nb + cuda_arch::mma_c_col(lane, i);
}

// ---- FP8 rows ----------------------------------------------------------------------------------------
//
// A 656-byte row (numerics/kv_cache.hpp) is 41 chunks of 16 bytes: latent codes in chunks 0..31,
// the four scales in chunk 32, the bf16 RoPE values in chunks 33..40. Latent chunk c (16 codes of
// scale group c / 8) becomes the bf16 chunks 2 c and 2 c + 1 of the K-tile row; RoPE chunk 33 + r
// is copied to chunk 64 + r.
inline constexpr int mla_fp8_row_chunks = static_cast<int>(kv_fp8_row_bytes / 16);
inline constexpr int mla_fp8_latent_chunks = static_cast<int>(kv_latent_dim / 16);
inline constexpr int mla_fp8_rope_chunk = static_cast<int>(kv_fp8_rope_offset / 16);
inline constexpr int mla_fp8_rope_chunks = static_cast<int>(2 * kv_rope_dim / 16);
/// Work units of one row's decode: the latent chunks, then the RoPE chunks.
inline constexpr int mla_fp8_units = mla_fp8_latent_chunks + mla_fp8_rope_chunks;
static_assert(kv_fp8_row_bytes % 16 == 0 && kv_fp8_rope_offset % 16 == 0 && kv_fp8_scale_offset % 16 == 0);

/// Whether decode unit u (0..39) of a row is latent (16 codes) rather than RoPE (16 bytes).
constexpr DSA_HOST_DEVICE bool mla_fp8_unit_is_latent(int u) { return u < mla_fp8_latent_chunks; }
/// The row chunk unit u reads.
constexpr DSA_HOST_DEVICE int mla_fp8_unit_source_chunk(int u) {
  return mla_fp8_unit_is_latent(u) ? u : mla_fp8_rope_chunk + (u - mla_fp8_latent_chunks);
}
/// The scale group (0..3) of latent unit u.
constexpr DSA_HOST_DEVICE int mla_fp8_unit_scale_group(int u) { return u / static_cast<int>(kv_fp8_group / 16); }
/// The K-tile chunk that half h (0: values 0..7, 1: values 8..15) of latent unit u's 16 bf16
/// values goes to, or (h = 0) that RoPE unit u's 16 bytes go to.
constexpr DSA_HOST_DEVICE int mla_fp8_unit_dest_chunk(int u, int h) {
  return mla_fp8_unit_is_latent(u) ? 2 * u + h : 2 * mla_fp8_latent_chunks + (u - mla_fp8_latent_chunks);
}
static_assert(mla_fp8_row_chunks == 41 && mla_fp8_latent_chunks == 32 && mla_fp8_rope_chunk == 33 &&
              mla_fp8_rope_chunks == 8 && mla_fp8_units == 40);

// ---- shared memory -----------------------------------------------------------------------------------

/// Byte offsets of the kernel's dynamic shared memory. `fp8`: rows come from the 656-byte cache;
/// `prefetch`: the next tile is fetched while this one is computed (a second K tile for bf16
/// rows, a raw FP8 staging tile for FP8 rows; without it the FP8 rows are decoded straight from
/// global memory).
struct mla_fast_smem_layout {
  int q = 0;
  int k0 = 0;
  int k1 = 0;    // == k0 without a second K tile
  int raw = 0;   // FP8 staging tile [64][656] (fp8 && prefetch), else unused
  int p = 0;
  int red = 0;   // float [2 halves][64 heads] row maxima, then [2][64] row sums
  int rows = 0;  // int [2][64]: the cache rows of this tile and the next, -1 unused
  int bytes = 0;
};

constexpr DSA_HOST_DEVICE mla_fast_smem_layout mla_fast_smem(int d_qk, bool fp8, bool prefetch) {
  mla_fast_smem_layout l;
  const int tile = mla_fast_tile * d_qk * 2;
  l.q = 0;
  l.k0 = mla_fast_heads * d_qk * 2;
  l.k1 = prefetch && !fp8 ? l.k0 + tile : l.k0;
  int end = l.k1 + tile;
  l.raw = end;
  if (fp8 && prefetch) end += mla_fast_tile * static_cast<int>(kv_fp8_row_bytes);
  l.p = end;
  l.red = l.p + mla_fast_heads * mla_fast_tile * 2;
  l.rows = l.red + 4 * mla_fast_heads * 4;
  l.bytes = l.rows + 2 * mla_fast_tile * 4;
  return l;
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
