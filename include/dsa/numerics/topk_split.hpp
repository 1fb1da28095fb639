// The merge logic of the split top-k (docs/design.md "Top-k"): one row of many keys cut into
// chunks, each chunk a CTA of the CUDA kernels (kernels/topk_kernel.cuh, topk_split_*), with the
// exact results of the one-block kernel and of the CPU backend. Shared by the kernels and by the
// host replay that simulates the CTAs (tests/numerics/test_topk_split.cpp).
//
// The selection of a row is defined by its threshold key T and the number r of T-valued keys to
// take (the first r in index order): every key > T and those r ties, emitted in ascending index
// order. The split finds T and r exactly as the one-block kernel does, and places each chunk's
// share at an offset known from the counts of the chunks before it:
//   1. four radix passes (8-bit digits, numerics/topk.hpp). In pass p every chunk histograms the
//      digit p of its keys whose first p digits equal the prefix found so far; the chunks' counts
//      are summed (integer additions: the merged histogram does not depend on their order), and
//      the walk of topk_radix_find_bucket over the merged histogram gives the next digit and the
//      new remaining count. Every CTA replays that walk from the merged histograms of the earlier
//      passes, so all of them agree on the prefix without a grid-wide barrier. The device walks
//      all 256 buckets at once: bucket b is the walk's answer iff topk_bucket_selected(...) holds
//      for it (one b does), given the keys counted in the buckets above it.
//   2. each chunk counts its keys > T (gt) and == T (eq);
//   3. chunk c emits its keys > T and its ties in index order, starting at output position
//      gt_before + min(eq_before, r), with r - min(eq_before, r) ties left to take
//      (topk_split_emission_start), where gt_before and eq_before sum the chunks before it. The
//      positions from the row's total (topk_split_selected) up to k are -1.
// A row whose range holds at most k keys takes them all: T = topk_no_key, r = 0 (every score's
// key is above it), no radix pass at all.
#pragma once

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/numerics/topk.hpp"

DSA_NAMESPACE_BEGIN

/// Keys per chunk (CTA) of the split top-k: a 128K-key row runs on 128 CTAs.
inline constexpr index_t topk_split_chunk_keys = 1024;

/// The shapes the split serves: few rows (decode: one per sequence and token) of many keys. More
/// rows fill the GPU with one block each; shorter rows take a block a few microseconds, less than
/// the split's six launches.
inline constexpr index_t topk_split_max_rows = 8;
inline constexpr index_t topk_split_min_keys = 8192;
DSA_HOST_DEVICE constexpr bool topk_split_applies(index_t rows, index_t n) {
  return rows >= 1 && rows <= topk_split_max_rows && n >= topk_split_min_keys;
}

/// Chunks of a row of n keys (score columns): the grid's x extent.
DSA_HOST_DEVICE constexpr index_t topk_split_chunks(index_t n) {
  return (n + topk_split_chunk_keys - 1) / topk_split_chunk_keys;
}

/// Chunk c of a range of len keys: [begin, end) relative to the range's start (empty past len).
struct topk_split_range {
  index_t begin = 0, end = 0;
};
DSA_HOST_DEVICE constexpr topk_split_range topk_split_chunk(index_t len, index_t c) {
  const index_t b = c * topk_split_chunk_keys;
  const index_t e = b + topk_split_chunk_keys;
  return {b < len ? b : len, e < len ? e : len};
}

/// What the radix passes have found of a row's threshold: the digits so far (as a prefix) and
/// the number of keys still to take among those sharing it. Starts at {0, k}.
struct topk_radix_state {
  std::uint32_t prefix = 0;
  std::uint32_t remaining = 0;
};

/// One pass of the walk over a merged histogram (the one-block kernel's and the CPU's walk).
DSA_HOST_DEVICE inline topk_radix_state topk_radix_advance(const std::uint32_t* merged, topk_radix_state s) {
  const std::uint32_t digit = topk_radix_find_bucket(merged, s.remaining);
  s.prefix = (s.prefix << 8) | digit;
  return s;
}

/// The walk of topk_radix_find_bucket, one bucket at a time: bucket b (count `count`, `above` =
/// the keys counted in the buckets above it) is the walk's answer for `remaining` iff this holds.
/// Exactly one bucket of a histogram satisfies it, and the new remaining is remaining - above.
DSA_HOST_DEVICE constexpr bool topk_bucket_selected(int b, std::uint32_t above, std::uint32_t count,
                                                    std::uint32_t remaining) {
  // The walk stops at the first bucket from the top whose inclusive count reaches `remaining`;
  // when none above bucket 0 does, it returns 0.
  return above < remaining && (b == 0 || above + count >= remaining);
}

/// Where chunk c's selected keys start in the row's output, and how many ties it may still take,
/// from the keys > T (gt_before) and == T (eq_before) of the chunks before it.
struct topk_split_start {
  index_t position = 0;
  std::uint32_t ties_left = 0;
};
DSA_HOST_DEVICE constexpr topk_split_start topk_split_emission_start(index_t gt_before, index_t eq_before,
                                                                     std::uint32_t remaining) {
  const index_t taken = eq_before < static_cast<index_t>(remaining) ? eq_before : static_cast<index_t>(remaining);
  return {gt_before + taken, static_cast<std::uint32_t>(static_cast<index_t>(remaining) - taken)};
}

/// The number of selected positions of a row: its keys > T and min(ties, r); the output holds
/// them in [0, selected) and -1 in [selected, k).
DSA_HOST_DEVICE constexpr index_t topk_split_selected(index_t gt, index_t eq, std::uint32_t remaining) {
  return gt + (eq < static_cast<index_t>(remaining) ? eq : static_cast<index_t>(remaining));
}

/// Bytes of the split's scratch per row: the merged histograms of the four passes, then each
/// chunk's (gt, eq) counts; each part rounded up to 16 bytes.
DSA_HOST_DEVICE constexpr index_t topk_split_histogram_bytes(index_t rows) {
  return (rows * topk_radix_passes * topk_radix_buckets * 4 + 15) / 16 * 16;
}
DSA_HOST_DEVICE constexpr index_t topk_split_count_bytes(index_t rows, index_t n) {
  return (rows * topk_split_chunks(n) * 2 * 4 + 15) / 16 * 16;
}

DSA_NAMESPACE_END
