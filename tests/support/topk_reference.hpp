// Test oracle of top-k (docs/design.md, "Top-k") by sorting: stable sort of the range by
// (-score, index) with NaN above every number (torch.topk's order), take k, sort ascending, pad
// with -1. Slow on purpose.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace dsa_test {

inline std::vector<std::int32_t> topk_reference(const float* row, std::int32_t start, std::int32_t end, std::int64_t k) {
  std::vector<std::int32_t> idx;
  for (std::int32_t j = start; j < end; ++j) idx.push_back(j);
  // NaN first, then by value; -0.0 == +0.0 under operator>, so they tie and keep index order.
  std::stable_sort(idx.begin(), idx.end(), [&](std::int32_t a, std::int32_t b) {
    const bool na = std::isnan(row[a]), nb = std::isnan(row[b]);
    if (na || nb) return na && !nb;
    return row[a] > row[b];
  });
  if (static_cast<std::int64_t>(idx.size()) > k) idx.resize(static_cast<std::size_t>(k));
  std::sort(idx.begin(), idx.end());
  idx.resize(static_cast<std::size_t>(k), -1);
  return idx;
}

}  // namespace dsa_test
