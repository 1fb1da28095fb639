// Top-k selection and row gathering (docs/design.md "Top-k").
//
// topk_indices: per row, the k largest scores inside the row's range [start, end), as int32
// column indices in ASCENDING index order, padded with -1 when the range holds fewer than k
// positions. NaN ranks above every number and -inf below (torch.topk's order); ties go to the
// smaller index; -0.0 and +0.0 tie (see dsa/numerics/topk.hpp). O(n) per row by radix select on
// order-preserving keys.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "dsa/core/aliasing.hpp"
#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/op_instances.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/numerics/topk.hpp"
#include "dsa/numerics/topk_split.hpp"
#include "dsa/ops/row_ranges.hpp"
#include "dsa/ops/workspace.hpp"

DSA_NAMESPACE_BEGIN

/// Op tags (op_impl<Backend, tag> implements them).
struct topk_indices_op {};
struct topk_indices_paged_op {};
struct gather_rows_op {};

namespace detail {

template <class Space>
void check_topk_common(std::string_view op, const tensor_view<const float, 2, Space>& scores,
                       const tensor_view<const std::int32_t, 2, Space>& ranges, index_t k,
                       const tensor_view<std::int32_t, 2, Space>& out, std::string_view out_name) {
  check_valid(op, "scores", scores);
  check_inner_contiguous(op, "scores", scores);
  const index_t m = scores.extent(0);
  const index_t n = scores.extent(1);
  // Selected positions are returned as int32.
  check(n <= std::numeric_limits<std::int32_t>::max(), op, "scores.extent(1)", n, "<= 2^31 - 1 (int32 indices)");
  check(k >= 1, op, "k", k, ">= 1");
  check_row_ranges(op, ranges, m, n);
  check_valid(op, out_name, out);
  check_extent(op, out_name, out, 0, m, "scores.extent(0), one row per score row");
  check_extent(op, out_name, out, 1, k, "k");
  check_inner_contiguous(op, out_name, out);
  // Rows are written by different threads: they must not share memory, nor overlap the inputs.
  check_disjoint_rows(op, out_name, out);
  check_no_overlap(op, out_name, out, "scores", scores, false);
  check_no_overlap(op, out_name, out, "ranges", ranges, false);
}

}  // namespace detail

/// indices [m, k] = the k best columns of each row of scores [m, n] within ranges [m, 2],
/// ascending, -1 padded. k >= 1; k may exceed a row's range.
template <backend B>
void topk_indices(const B& be, in_view<B, float, 2> scores, in_view<B, std::int32_t, 2> ranges, index_t k,
                  out_view<B, std::int32_t, 2> indices) {
  detail::check_topk_common("topk_indices", scores, ranges, k, indices, "indices");
  dispatch<topk_indices_op>(be, scores, ranges, k, indices);
}

/// Bytes of scratch memory the workspace overload of topk_indices uses for scores [m, n]: none
/// unless the rows are few and long (1 <= m <= 8, n >= 8192: topk_split_applies), where the CUDA
/// backend splits each row over many blocks and keeps the merged radix histograms (4 x 256
/// counts per row) and each block's counts there (dsa/numerics/topk_split.hpp). A pure function
/// of the shapes (m, n >= 0).
inline index_t topk_indices_workspace_size(index_t m, index_t n) {
  check(m >= 0, "topk_indices_workspace_size", "m", m, ">= 0");
  check(n >= 0, "topk_indices_workspace_size", "n", n, ">= 0");
  if (!topk_split_applies(m, n)) return 0;
  return topk_split_histogram_bytes(m) + topk_split_count_bytes(m, n);
}

/// topk_indices with scratch memory: `workspace` holds at least topk_indices_workspace_size(m,
/// n) bytes (none for most shapes: an absent view is then accepted), 16-byte aligned, contiguous
/// and disjoint from every other argument. The results are those of the overload above, bit for
/// bit; on the CUDA backend a few long rows are split over many blocks (the whole GPU works on
/// one decode row instead of one SM). The CPU backend checks the workspace and ignores it.
template <backend B>
void topk_indices(const B& be, in_view<B, float, 2> scores, in_view<B, std::int32_t, 2> ranges, index_t k,
                  out_view<B, std::int32_t, 2> indices, out_view<B, std::byte, 1> workspace) {
  constexpr const char* op = "topk_indices";
  detail::check_topk_common(op, scores, ranges, k, indices, "indices");
  const index_t need = topk_indices_workspace_size(scores.extent(0), scores.extent(1));
  if (detail::check_workspace(op, workspace, need, "topk_indices_workspace_size(m, n)")) {
    detail::check_no_overlap(op, "workspace", workspace, "scores", scores, false);
    detail::check_no_overlap(op, "workspace", workspace, "ranges", ranges, false);
    detail::check_no_overlap(op, "workspace", workspace, "indices", indices, false);
  }
  dispatch<topk_indices_op>(be, scores, ranges, k, indices, workspace);
}

/// The selection of topk_indices mapped through a page table to physical cache slots:
/// logical position p of row t becomes block_table(t, p / block_size) * block_size +
/// p % block_size; -1 padding stays -1; order is ascending LOGICAL position.
/// block_table [m, max_blocks], block_size >= 1, scores.extent(1) <= max_blocks * block_size.
/// For host memory the block-table entries of every block a row's range covers are checked to
/// be >= 0 and to give slots that fit int32 (the op sees no cache, so slots are not checked
/// against a cache size: the consumer, e.g. gather_rows, checks them).
template <backend B>
void topk_indices_paged(const B& be, in_view<B, float, 2> scores, in_view<B, std::int32_t, 2> ranges, index_t k,
                        in_view<B, std::int32_t, 2> block_table, index_t block_size,
                        out_view<B, std::int32_t, 2> slots) {
  constexpr std::string_view op = "topk_indices_paged";
  detail::check_topk_common(op, scores, ranges, k, slots, "slots");
  check(block_size >= 1, op, "block_size", block_size, ">= 1");
  check_valid(op, "block_table", block_table);
  const index_t m = scores.extent(0);
  const index_t n = scores.extent(1);
  check_extent(op, "block_table", block_table, 0, m, "scores.extent(0), one page-table row per score row");
  check_inner_contiguous(op, "block_table", block_table);
  detail::check_no_overlap(op, "slots", slots, "block_table", block_table, false);
  const index_t max_blocks = block_table.extent(1);
  const index_t blocks_needed = n / block_size + (n % block_size != 0 ? 1 : 0);
  if (blocks_needed > max_blocks) {
    fail(op, "scores.extent(1)", n,
         "<= block_table.extent(1) * block_size = " + std::to_string(max_blocks) + " * " +
             std::to_string(block_size));
  }
  // Slots are int32: the highest slot a block may reach is INT32_MAX.
  detail::check_block_table(op, ranges, block_table, block_size,
                            index_t{std::numeric_limits<std::int32_t>::max()} + 1, "covers", "slots must fit int32");
  dispatch<topk_indices_paged_op>(be, scores, ranges, k, block_table, block_size, slots);
}

/// dst[t, j, :] = src[indices(t, j), :], zeros where indices(t, j) == -1.
///   src [n, d], indices [m, k] int32, dst [m, k, d]; T any trivially copyable element type
///   (float, bf16, uint8_t cache rows, ...). Any index other than -1 outside [0, n) is an error,
///   detected (for host memory) before anything is written.
template <backend B, class T>
void gather_rows(const B& be, in_view<B, T, 2> src, in_view<B, std::int32_t, 2> indices, out_view<B, T, 3> dst) {
  static_assert(std::is_trivially_copyable_v<T>, "dsa::gather_rows: T must be trivially copyable");
  constexpr std::string_view op = "gather_rows";
  check_valid(op, "src", src);
  check_inner_contiguous(op, "src", src);
  check_valid(op, "indices", indices);
  check_inner_contiguous(op, "indices", indices);
  check_valid(op, "dst", dst);
  check_extent(op, "dst", dst, 0, indices.extent(0), "indices.extent(0)");
  check_extent(op, "dst", dst, 1, indices.extent(1), "indices.extent(1)");
  check_extent(op, "dst", dst, 2, src.extent(1), "src.extent(1), the row length");
  check_inner_contiguous(op, "dst", dst);
  detail::check_disjoint_rows(op, "dst", dst);
  detail::check_no_overlap(op, "dst", dst, "src", src, false);
  detail::check_no_overlap(op, "dst", dst, "indices", indices, false);
  if constexpr (detail::host_readable_v<typename B::memory_space>) {
    const index_t n = src.extent(0);
    for (index_t t = 0; t < indices.extent(0); ++t) {
      for (index_t j = 0; j < indices.extent(1); ++j) {
        const index_t i = indices(t, j);
        if (i != -1 && (i < 0 || i >= n)) {
          fail(op, "indices" + detail::index_string(t, j), i,
               "-1 (unused) or a row in [0, " + std::to_string(n) + ") of src");
        }
      }
    }
  }
  // Nothing to write (and an empty dst may have a null pointer the rows would be offset from).
  if (dst.empty()) return;
  dispatch<gather_rows_op>(be, src, indices, dst);
}

DSA_NAMESPACE_END

// The type combinations dsa's own programs compile once per backend (dsa/core/op_instances.hpp):
// gather_rows of float and bf16 rows, of cache-row bytes, and of any 2-, 4- or 8-byte element as
// the unsigned integer of its size (the Python binding gathers every dtype that way).
#define DSA_TOPK_INSTANCES(X, B) \
  X(void topk_indices<B>(const B&, in_view<B, float, 2>, in_view<B, std::int32_t, 2>, index_t, out_view<B, std::int32_t, 2>)) \
  X(void topk_indices<B>(const B&, in_view<B, float, 2>, in_view<B, std::int32_t, 2>, index_t, out_view<B, std::int32_t, 2>, out_view<B, std::byte, 1>)) \
  X(void topk_indices_paged<B>(const B&, in_view<B, float, 2>, in_view<B, std::int32_t, 2>, index_t, in_view<B, std::int32_t, 2>, index_t, out_view<B, std::int32_t, 2>)) \
  X(void gather_rows<B, float>(const B&, in_view<B, float, 2>, in_view<B, std::int32_t, 2>, out_view<B, float, 3>)) \
  X(void gather_rows<B, bf16>(const B&, in_view<B, bf16, 2>, in_view<B, std::int32_t, 2>, out_view<B, bf16, 3>)) \
  X(void gather_rows<B, std::uint8_t>(const B&, in_view<B, std::uint8_t, 2>, in_view<B, std::int32_t, 2>, out_view<B, std::uint8_t, 3>)) \
  X(void gather_rows<B, std::uint16_t>(const B&, in_view<B, std::uint16_t, 2>, in_view<B, std::int32_t, 2>, out_view<B, std::uint16_t, 3>)) \
  X(void gather_rows<B, std::uint32_t>(const B&, in_view<B, std::uint32_t, 2>, in_view<B, std::int32_t, 2>, out_view<B, std::uint32_t, 3>)) \
  X(void gather_rows<B, std::uint64_t>(const B&, in_view<B, std::uint64_t, 2>, in_view<B, std::int32_t, 2>, out_view<B, std::uint64_t, 3>))
