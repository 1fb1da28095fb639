// CPU backend of top-k selection and row gathering.
//
// Radix select per row, O(n): one pass maps the scores to order-preserving keys and builds the
// histogram of their top byte; the bucket holding the k-th largest key becomes the candidate
// set, which the three remaining byte passes narrow down to the exact threshold key T and the
// number r of elements equal to T still to take. A last pass over the row, in index order,
// emits every key > T and the first r keys == T: the output is ascending and ties go to the
// smaller index without any sorting. Rows are independent and split over threads.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cpu/parallel.hpp"
#include "dsa/numerics/paging.hpp"
#include "dsa/numerics/topk.hpp"
#include "dsa/ops/topk.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

struct topk_scratch {
  std::vector<std::uint32_t> keys;        // radix keys of the row's range
  std::vector<std::uint32_t> candidates;  // positions (relative to start) still in the running
};

/// Writes the k best positions of x[start, end) (absolute column indices, ascending) to
/// out[0, k), -1 padded.
inline void topk_row(const float* x, index_t start, index_t end, index_t k, std::int32_t* out, topk_scratch& sc) {
  const index_t len = end - start;
  sc.keys.resize(static_cast<std::size_t>(len));
  std::uint32_t* keys = sc.keys.data();

  // Pass 0: keys and top-byte histogram. Four interleaved sub-histograms keep runs of equal
  // digits (common: scores share sign and exponent) from serialising on one counter.
  std::array<std::array<std::uint32_t, topk_radix_buckets>, 4> sub{};
  index_t selectable = 0;
  {
    index_t j = 0;
    for (; j + 4 <= len; j += 4) {
      for (int u = 0; u < 4; ++u) {
        const std::uint32_t key = topk_radix_key(x[start + j + u]);
        keys[j + u] = key;
        ++sub[static_cast<std::size_t>(u)][topk_radix_digit(key, 0)];
        selectable += key != topk_unselectable_key;
      }
    }
    for (; j < len; ++j) {
      const std::uint32_t key = topk_radix_key(x[start + j]);
      keys[j] = key;
      ++sub[0][topk_radix_digit(key, 0)];
      selectable += key != topk_unselectable_key;
    }
  }

  index_t written = 0;
  if (selectable <= k) {
    // Everything selectable is taken.
    for (index_t j = 0; j < len; ++j) {
      if (keys[j] != topk_unselectable_key) out[written++] = static_cast<std::int32_t>(start + j);
    }
  } else {
    std::uint32_t histogram[topk_radix_buckets];
    for (int b = 0; b < topk_radix_buckets; ++b) histogram[b] = sub[0][b] + sub[1][b] + sub[2][b] + sub[3][b];
    // remaining: how many of the elements matching the current prefix are still to be taken.
    // selectable > k, so the k-th largest key is selectable (> 0) and the search never ends
    // among unselectable keys.
    auto remaining = static_cast<std::uint32_t>(k);
    std::uint32_t digit = topk_radix_find_bucket(histogram, remaining);
    std::uint32_t threshold = digit;
    // Branch-free compaction: the bucket test is a coin flip on typical rows, and mispredicted
    // branches would cost more than the whole pass.
    sc.candidates.resize(static_cast<std::size_t>(histogram[digit]) + 1);
    std::uint32_t* cand = sc.candidates.data();
    std::size_t count = 0;
    for (index_t j = 0; j < len; ++j) {
      cand[count] = static_cast<std::uint32_t>(j);
      count += topk_radix_digit(keys[j], 0) == digit ? 1 : 0;
    }
    for (int pass = 1; pass < topk_radix_passes; ++pass) {
      std::fill(histogram, histogram + topk_radix_buckets, 0u);
      for (std::size_t c = 0; c < count; ++c) ++histogram[topk_radix_digit(keys[cand[c]], pass)];
      digit = topk_radix_find_bucket(histogram, remaining);
      threshold = (threshold << 8) | digit;
      if (pass + 1 < topk_radix_passes) {
        std::size_t kept = 0;
        for (std::size_t c = 0; c < count; ++c) {
          const std::uint32_t j = cand[c];
          cand[kept] = j;  // kept <= c: in place
          kept += topk_radix_digit(keys[j], pass) == digit ? 1 : 0;
        }
        count = kept;
      }
    }
    // Every key > threshold is taken, and the first `remaining` keys == threshold.
    // Branch-free as well; `written < k` (checked before every store) keeps it in bounds.
    const std::uint32_t ties = remaining;
    std::uint32_t ties_seen = 0;
    for (index_t j = 0; j < len && written < k; ++j) {
      const std::uint32_t key = keys[j];
      const bool tie = key == threshold;
      const bool take = key > threshold || (tie && ties_seen < ties);
      ties_seen += tie ? 1u : 0u;
      out[written] = static_cast<std::int32_t>(start + j);
      written += take ? 1 : 0;
    }
  }
  std::fill(out + written, out + k, std::int32_t{-1});
}

template <class Map>
void topk_rows(const cpu_backend& be, tensor_view<const float, 2> scores, tensor_view<const std::int32_t, 2> ranges,
               index_t k, tensor_view<std::int32_t, 2> out, Map&& map) {
  parallel_for(be, scores.extent(0), 1, [&](index_t t0, index_t t1) {
    topk_scratch sc;
    for (index_t t = t0; t < t1; ++t) {
      std::int32_t* o = out.row(t);
      topk_row(scores.row(t), ranges(t, 0), ranges(t, 1), k, o, sc);
      map(t, o);
    }
  });
}

}  // namespace cpu_detail

template <>
struct op_impl<cpu_backend, topk_indices_op> {
  static void run(const cpu_backend& be, tensor_view<const float, 2> scores, tensor_view<const std::int32_t, 2> ranges,
                  index_t k, tensor_view<std::int32_t, 2> indices) {
    cpu_detail::topk_rows(be, scores, ranges, k, indices, [](index_t, std::int32_t*) {});
  }
};

template <>
struct op_impl<cpu_backend, topk_indices_paged_op> {
  static void run(const cpu_backend& be, tensor_view<const float, 2> scores, tensor_view<const std::int32_t, 2> ranges,
                  index_t k, tensor_view<const std::int32_t, 2> block_table, index_t block_size,
                  tensor_view<std::int32_t, 2> slots) {
    cpu_detail::topk_rows(be, scores, ranges, k, slots, [&](index_t t, std::int32_t* o) {
      // Nothing selected: the row's table may be empty (a null view), so do not touch it.
      if (o[0] < 0) return;
      const std::int32_t* table = block_table.row(t);
      for (index_t j = 0; j < k && o[j] >= 0; ++j) {
        o[j] = static_cast<std::int32_t>(paged_cache_slot(table, block_size, o[j]));
      }
    });
  }
};

template <>
struct op_impl<cpu_backend, gather_rows_op> {
  template <class T>
  static void run(const cpu_backend& be, tensor_view<const T, 2> src, tensor_view<const std::int32_t, 2> indices,
                  tensor_view<T, 3> dst) {
    const index_t n = src.extent(0), k = indices.extent(1), d = src.extent(1);
    const index_t bytes_per_row = d * static_cast<index_t>(sizeof(T));
    cpu_detail::parallel_for(be, indices.extent(0), 1, [&](index_t t0, index_t t1) {
      for (index_t t = t0; t < t1; ++t) {
        for (index_t j = 0; j < k; ++j) {
          T* out = dst.data_handle() + t * dst.stride(0) + j * dst.stride(1);
          const index_t i = indices(t, j);
          // The front-end has rejected every other out-of-range index; the check here keeps
          // this loop from ever reading outside src regardless.
          if (i >= 0 && i < n) {
            if (bytes_per_row > 0) std::memcpy(out, src.row(i), static_cast<std::size_t>(bytes_per_row));
          } else {
            std::fill(out, out + d, T{});
          }
        }
      }
    });
  }
};

DSA_NAMESPACE_END
