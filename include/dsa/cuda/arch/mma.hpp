// Lane layouts of the tensor-core kernels: which matrix element each lane of a warp holds in the
// registers of mma.sync.aligned.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16 with
// floating point type"), which row address each lane hands to ldmatrix.x4, where a 16-byte chunk
// of a tile row lives in shared memory (the XOR swizzles), and how FP8 codes are paired into the
// 16-bit halves of an operand register.
//
// Every function is constexpr and DSA_HOST_DEVICE: the fast kernels (kernels/*_fast_kernel.cuh)
// compute their addresses and read their accumulators with these functions, and the CPU warp
// model (tests/numerics/test_mma_warp_model.cpp) replays every lane of a tile with the same
// functions against its own model of ldmatrix and mma, written from the PTX ISA, on small-integer
// data whose products and sums are exact in any order, and must match a plain matrix product bit
// for bit. A wrong layout there is a wrong answer here, found without a GPU.
//
// Plain C++ (no CUDA header): g++ compiles it for the warp model. The PTX wrappers that use these
// layouts (ldmatrix, mma, cp.async) are in arch/mma.cuh.
#pragma once

#include <cstdint>

#include "dsa/core/config.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_arch {

// ---- mma.m16n8k16 fragments (16-bit A and B, fp32 C and D) ----------------------------------------
//
// A is 16 x 16 (row-major: row = m, column = k), four 32-bit registers a0..a3 per lane holding
// eight 16-bit elements: element i lives in register i / 2, half i % 2 (half 0 = bits 0-15).
// B is 16 x 8 (row = k, column = n), two registers, elements 0..3. C and D are 16 x 8 fp32, four
// registers, elements 0..3. groupID = lane / 4 and threadID_in_group = lane % 4, as the ISA names
// them.

inline constexpr int mma_m = 16;
inline constexpr int mma_n = 8;
inline constexpr int mma_k = 16;

constexpr DSA_HOST_DEVICE int mma_group(int lane) { return lane >> 2; }
constexpr DSA_HOST_DEVICE int mma_thread_in_group(int lane) { return lane & 3; }

/// Row (m) of A element i (0..7) of `lane`: groupID for i in {0, 1, 4, 5}, groupID + 8 otherwise.
constexpr DSA_HOST_DEVICE int mma_a_row(int lane, int i) { return mma_group(lane) + 8 * ((i >> 1) & 1); }
/// Column (k) of A element i: 2 threadID_in_group + i % 2, plus 8 for i >= 4.
constexpr DSA_HOST_DEVICE int mma_a_col(int lane, int i) {
  return 2 * mma_thread_in_group(lane) + (i & 1) + 8 * (i >> 2);
}
/// Row (k) of B element i (0..3): 2 threadID_in_group + i % 2, plus 8 for i >= 2.
constexpr DSA_HOST_DEVICE int mma_b_row(int lane, int i) {
  return 2 * mma_thread_in_group(lane) + (i & 1) + 8 * (i >> 1);
}
/// Column (n) of B element i: groupID.
constexpr DSA_HOST_DEVICE int mma_b_col(int lane, int /*i*/) { return mma_group(lane); }
/// Row (m) of C / D element i (0..3): groupID, plus 8 for i >= 2.
constexpr DSA_HOST_DEVICE int mma_c_row(int lane, int i) { return mma_group(lane) + 8 * (i >> 1); }
/// Column (n) of C / D element i: 2 threadID_in_group + i % 2.
constexpr DSA_HOST_DEVICE int mma_c_col(int lane, int i) { return 2 * mma_thread_in_group(lane) + (i & 1); }

// ---- ldmatrix.sync.aligned.m8n8.x4.shared.b16 --------------------------------------------------------
//
// Four 8 x 8 matrices of 16-bit elements, each row 16 contiguous bytes in shared memory. Lanes
// 8j .. 8j + 7 supply the addresses of rows 0..7 of matrix j; lane l receives matrix j in its
// register j: row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 (with .trans: rows 2 (l % 4) and
// 2 (l % 4) + 1 of column l / 4). The kernels tile a 16 x 16 operand into the four matrices so
// that register j is exactly mma register j:
//   A (rows m, 16-byte chunks of k):              matrix j = rows 8 (j % 2) .., chunk j / 2;
//   B from rows n (k contiguous), two n-blocks:   matrix j = rows 8 (j / 2) .., chunk j % 2;
//   B from rows k (n contiguous, .trans):         matrix j = rows 8 (j % 2) .., chunk j / 2,
// where for B, registers 0-1 are the first n-block's b0-b1 and registers 2-3 the second's.

/// The matrix (0..3) whose row address `lane` supplies.
constexpr DSA_HOST_DEVICE int ldmatrix_matrix(int lane) { return lane >> 3; }
/// The row (0..7) of that matrix.
constexpr DSA_HOST_DEVICE int ldmatrix_row(int lane) { return lane & 7; }

/// A operand (16 rows of m, 16 columns of k from a row-major tile): the tile row (0..15) and the
/// 16-byte chunk (0..1, 8 columns each) whose address `lane` supplies.
constexpr DSA_HOST_DEVICE int ldsm_a_row(int lane) { return ldmatrix_row(lane) + 8 * (ldmatrix_matrix(lane) & 1); }
constexpr DSA_HOST_DEVICE int ldsm_a_chunk(int lane) { return ldmatrix_matrix(lane) >> 1; }
/// B operand of two adjacent n-blocks read from a tile whose rows are n (k contiguous), no
/// .trans: the tile row (0..15: n within the two blocks) and the chunk of k (0..1).
constexpr DSA_HOST_DEVICE int ldsm_b_row(int lane) { return ldmatrix_row(lane) + 8 * (ldmatrix_matrix(lane) >> 1); }
constexpr DSA_HOST_DEVICE int ldsm_b_chunk(int lane) { return ldmatrix_matrix(lane) & 1; }
/// B operand of two adjacent n-blocks read with .trans from a tile whose rows are k (n
/// contiguous): the tile row (0..15: k) and the chunk of n (0..1: which n-block).
constexpr DSA_HOST_DEVICE int ldsm_bt_row(int lane) { return ldmatrix_row(lane) + 8 * (ldmatrix_matrix(lane) & 1); }
constexpr DSA_HOST_DEVICE int ldsm_bt_chunk(int lane) { return ldmatrix_matrix(lane) >> 1; }

// ---- shared-memory swizzles ------------------------------------------------------------------------
//
// Shared memory has 32 banks of 4 bytes: the 128 bytes of a row of banks, as eight 16-byte bank
// groups. A tile whose row pitch is a multiple of 128 bytes puts chunk c of every row in the same
// bank group, so eight rows read at one column (ldmatrix's eight row addresses) conflict 8 ways.
// The swizzles below store chunk c of row r at another chunk of the same row, a bijection per row.

/// The tiles read by ldmatrix (rows of a multiple of 8 chunks): chunk ^ (row % 8). The eight rows
/// of an 8 x 8 matrix then sit in eight different bank groups, and so do the chunks one lane
/// writes for eight consecutive rows.
constexpr DSA_HOST_DEVICE int swizzle_ldsm_chunk(int row, int chunk) { return chunk ^ (row & 7); }

/// The FP8 key tile of the fast indexer (128-byte rows of e4m3 codes, 8 chunks): a quarter-warp's
/// 16-byte loads (LDS.128) are chunks 0..3 (+ 4 s) of two consecutive rows; chunk ^ (4 (row % 2))
/// sends the odd row's four to the other half of the banks.
constexpr DSA_HOST_DEVICE int swizzle_fp8_key_chunk(int row, int chunk) { return chunk ^ ((row & 1) << 2); }

/// The f16 query tile of the fast indexer (256-byte rows, 16 chunks): a quarter-warp's 16-byte
/// loads are the even (or odd) chunks 2t (+ 8 s) of two consecutive rows; chunk ^ (row % 2)
/// interleaves the odd row's into the other bank groups.
constexpr DSA_HOST_DEVICE int swizzle_f16_query_chunk(int row, int chunk) { return chunk ^ (row & 1); }

// ---- FP8 pairs in operand registers (the fast indexer) ---------------------------------------------
//
// A dot product over k does not depend on the order of k, so q and k may permute their columns
// alike. The fast indexer reads a key's (and a query head's) codes 16 contiguous bytes per lane:
// lane threadID_in_group t owns physical columns 16 t .. 16 t + 15 of each 64-column slab, i.e.
// four k-steps of 16. Within k-step j of the slab, mma column (A) or row (B) kk = 2 t + e + 8 h
// (e, h in {0, 1}: A element / B element order) is physical column 16 t + 4 j + 2 h + e: byte
// pair h of 32-bit word j of the lane's 16 bytes, so that one cvt.rn.f16x2.e4m3x2 of that pair is
// one operand register, in element order.

/// The physical column (0..63 within a 64-column slab) of logical column kk (0..15) of k-step j
/// (0..3) of the slab.
constexpr DSA_HOST_DEVICE int fp8_slab_column(int j, int kk) {
  return 16 * ((kk & 7) >> 1) + 4 * j + 2 * (kk >> 3) + (kk & 1);
}

/// The 16-bit code pair (lower byte = lower element) of A register r (0..3) of k-step j, given
/// the lane's two 16-byte loads as words: load 0 (row groupID) and load 1 (row groupID + 8).
/// Register r holds row groupID + 8 (r % 2) and columns 2t + 8 (r / 2) + {0, 1}, so it is pair
/// r / 2 of word j of load r % 2.
constexpr DSA_HOST_DEVICE std::uint32_t fp8_a_pair(const std::uint32_t (&load0)[4], const std::uint32_t (&load1)[4],
                                                   int j, int r) {
  return ((r & 1) != 0 ? load1[j] : load0[j]) >> (16 * (r >> 1)) & 0xFFFFu;
}

/// The f16 word (two f16, lower = lower element) of B register r (0..1) of k-step j among the
/// lane's 8 words of a query head's 16 physical columns 16 t .. 16 t + 15 (already converted to
/// f16): register r holds rows 2t + 8 r + {0, 1}, physical columns 16 t + 4 j + 2 r + {0, 1},
/// i.e. word 2 j + r.
constexpr DSA_HOST_DEVICE int f16_b_word(int j, int r) { return 2 * j + r; }

}  // namespace cuda_arch
DSA_NAMESPACE_END
