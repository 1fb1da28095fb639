// Validation shared by the ops that take per-row key ranges (docs/architecture.md, "Row
// ranges"): an int32 view [m, 2] of (start, end) with 0 <= start <= end <= n.
#pragma once

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
    for (index_t t = 0; t < m; ++t) {
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

}  // namespace detail
DSA_NAMESPACE_END
