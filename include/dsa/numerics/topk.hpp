// The radix keys of top-k selection (docs/design.md, "Top-k"), shared by every backend.
//
// A float maps to a uint32 whose unsigned order is the selection order, so a radix select on the
// keys (8-bit digits, most significant first) finds the k-th largest score in O(n):
//   - numbers, -inf and +inf included: positive floats get the sign bit set, negative floats are
//     bit-inverted; -inf has the smallest key (0x007FFFFF), +inf the largest of the numbers;
//   - -0.0 is canonicalised to +0.0 first: the two compare equal in IEEE arithmetic, so they
//     tie, and a tie goes to the smaller index like any other;
//   - NaN (any sign or payload) ranks above every number, as torch.topk ranks it in DeepSeek's
//     reference: key 0xFFFFFFFF. A score that went NaN is selected, so the NaN reaches the
//     attention that reads the row's selection instead of turning it into "no key".
// Every score in a row's range is selectable; only positions outside the range are never
// selected (the -1 padding when the range holds fewer than k). Key 0 is no score's key.
#pragma once

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/types.hpp"

DSA_NAMESPACE_BEGIN

/// The key of no score (every float's key is >= 0x007FFFFF): marks "no element" in kernels that
/// pad a block's lanes past the end of a row.
inline constexpr std::uint32_t topk_no_key = 0u;

/// The key of every NaN: above +inf's 0xFF800000.
inline constexpr std::uint32_t topk_nan_key = 0xFFFFFFFFu;

/// Order-preserving key of a score; NaN gives topk_nan_key.
DSA_HOST_DEVICE DSA_FORCEINLINE std::uint32_t topk_radix_key(float x) {
  std::uint32_t u = detail::float_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return topk_nan_key;
  if (u == 0x80000000u) u = 0u;  // -0.0 ties with +0.0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/// Number of 8-bit radix passes over a 32-bit key.
inline constexpr int topk_radix_passes = 4;
/// Buckets per radix pass.
inline constexpr int topk_radix_buckets = 256;

/// The digit of `key` examined by radix pass `pass` (0 = most significant byte).
DSA_HOST_DEVICE DSA_FORCEINLINE std::uint32_t topk_radix_digit(std::uint32_t key, int pass) {
  return (key >> (8 * (topk_radix_passes - 1 - pass))) & 0xFFu;
}

/// Given the histogram of one pass and the number `remaining` (>= 1) of elements still to
/// select among those counted, returns the digit whose bucket holds the remaining-th largest
/// element and lowers `remaining` by the count of all larger buckets.
DSA_HOST_DEVICE inline std::uint32_t topk_radix_find_bucket(const std::uint32_t* histogram, std::uint32_t& remaining) {
  for (int b = topk_radix_buckets - 1; b > 0; --b) {
    const std::uint32_t c = histogram[b];
    if (c >= remaining) return static_cast<std::uint32_t>(b);
    remaining -= c;
  }
  return 0u;
}

DSA_NAMESPACE_END
