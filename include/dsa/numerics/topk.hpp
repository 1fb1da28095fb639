// The radix keys of top-k selection (DESIGN.md §3.4), shared by every backend.
//
// A float maps to a uint32 whose unsigned order is the float order, so a radix select on the
// keys (8-bit digits, most significant first) finds the k-th largest score in O(n):
//   - finite values and +inf: positive floats get the sign bit set, negative floats are
//     bit-inverted; the keys of all of them are > 0x007FFFFF;
//   - -0.0 is canonicalised to +0.0 first: the two compare equal in IEEE arithmetic, so they
//     tie, and a tie goes to the smaller index like any other;
//   - NaN (any sign or payload) and -inf map to key 0, which is never selected.
#pragma once

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/types.hpp"

DSA_NAMESPACE_BEGIN

/// The key reserved for "never selected" (NaN and -inf).
inline constexpr std::uint32_t topk_unselectable_key = 0u;

/// Order-preserving key of a score; NaN and -inf give topk_unselectable_key.
DSA_HOST_DEVICE DSA_FORCEINLINE std::uint32_t topk_radix_key(float x) {
  std::uint32_t u = detail::float_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return topk_unselectable_key;  // NaN
  if (u == 0xFF800000u) return topk_unselectable_key;                  // -inf
  if (u == 0x80000000u) u = 0u;                                        // -0.0 ties with +0.0
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
