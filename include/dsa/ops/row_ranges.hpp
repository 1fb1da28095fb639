// Validation shared by the ops that take per-row key ranges (docs/design.md, "Row ranges"): an
// int32 view [m, 2] of (start, end) with 0 <= start <= end <= n.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"

DSA_NAMESPACE_BEGIN
namespace detail {

/// True when the host can read a view's elements: the front-ends check values (ranges,
/// indices, page tables) only then. Device-resident values are guarded by the kernels instead.
template <class Space>
inline constexpr bool host_readable_v = std::is_same_v<Space, host_space>;

/// "(i, j)", appended to an argument name in messages.
inline std::string index_string(index_t i, index_t j) {
  std::string s(1, '(');
  s += std::to_string(i);
  s += ", ";
  s += std::to_string(j);
  s += ')';
  return s;
}

/// Checks the shape [m, 2] of `ranges` and, for host memory, that every row has
/// 0 <= start <= end <= n.
template <class Space>
void check_row_ranges(std::string_view op, const tensor_view<const std::int32_t, 2, Space>& ranges, index_t m,
                      index_t n) {
  check_valid(op, "ranges", ranges);
  check_extent(op, "ranges", ranges, 0, m, "one (start, end) pair per row");
  check_extent(op, "ranges", ranges, 1, 2, "(start, end)");
  check_inner_contiguous(op, "ranges", ranges);
  if constexpr (host_readable_v<Space>) {
    // A broadcast view (stride 0 over rows: one pair for every row) is checked once, so the cost
    // is that of the pairs actually stored, not of m (which zero-width tensors can make anything).
    const index_t rows = ranges.stride(0) == 0 ? std::min<index_t>(m, 1) : m;
    for (index_t t = 0; t < rows; ++t) {
      const index_t start = ranges(t, 0);
      const index_t end = ranges(t, 1);
      if (start < 0 || start > n) {
        fail(op, "ranges" + index_string(t, 0), start, "a start in [0, " + std::to_string(n) + "]");
      }
      if (end < start || end > n) {
        fail(op, "ranges" + index_string(t, 1), end,
             "an end in [start, n] = [" + std::to_string(start) + ", " + std::to_string(n) + "]");
      }
    }
  }
}

/// For host memory: every block-table entry a row's range [start, end) reads through must be a
/// block index whose slots, up to the last offset the row uses in that block, stay below
/// `slot_limit` (the cache rows, or what the output's int32 slots can address). `reads` and
/// `limit` finish the message ("reads"/"covers"; which bound applies).
template <class Space>
void check_block_table(std::string_view op, const tensor_view<const std::int32_t, 2, Space>& ranges,
                       const tensor_view<const std::int32_t, 2, Space>& block_table, index_t block_size,
                       index_t slot_limit, std::string_view reads, const std::string& limit) {
  if constexpr (host_readable_v<Space>) {
    for (index_t t = 0; t < ranges.extent(0); ++t) {
      const index_t start = ranges(t, 0);
      const index_t end = ranges(t, 1);
      if (start == end) continue;
      for (index_t b = start / block_size; b <= (end - 1) / block_size; ++b) {
        const index_t entry = block_table(t, b);
        // The highest offset inside the block this row reads; the block is valid when even that
        // slot is below the limit.
        const index_t last = std::min(end, (b + 1) * block_size) - 1 - b * block_size;
        const index_t max_entry = slot_limit - 1 - last < 0 ? -1 : (slot_limit - 1 - last) / block_size;
        if (entry < 0 || entry > max_entry) {
          fail(op, "block_table" + index_string(t, b), entry,
               "a block index in [0, " + std::to_string(max_entry) + "] (row " + std::to_string(t) + " " +
                   std::string(reads) + " logical positions [" + std::to_string(std::max(start, b * block_size)) +
                   ", " + std::to_string(b * block_size + last) + "] through it; " + limit + ")");
        }
      }
    }
  }
}

}  // namespace detail
DSA_NAMESPACE_END
