// Test oracle of top-k (DESIGN.md §3.4) by sorting: stable sort of the range by (-score, index),
// drop NaN and -inf, take k, sort ascending, pad with -1. Slow on purpose.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace dsa_test {

inline std::vector<std::int32_t> topk_reference(const float* row, std::int32_t start, std::int32_t end, std::int64_t k) {
  std::vector<std::int32_t> idx;
  for (std::int32_t j = start; j < end; ++j) {
    const float x = row[j];
    if (std::isnan(x) || (std::isinf(x) && x < 0)) continue;
    idx.push_back(j);
  }
  // -0.0 == +0.0 under operator>, so they tie and keep index order.
  std::stable_sort(idx.begin(), idx.end(), [&](std::int32_t a, std::int32_t b) { return row[a] > row[b]; });
  if (static_cast<std::int64_t>(idx.size()) > k) idx.resize(static_cast<std::size_t>(k));
  std::sort(idx.begin(), idx.end());
  idx.resize(static_cast<std::size_t>(k), -1);
  return idx;
}

}  // namespace dsa_test
