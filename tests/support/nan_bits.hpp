// NaN classes of the bit patterns dsa compares across backends. IEEE 754 leaves the sign and
// payload of a NaN result unspecified, and the two sides really differ: x86 produces the "default
// NaN" 0x7FC00000 (and keeps an input NaN's sign), CUDA's conversions and arithmetic produce the
// canonical 0x7FFFFFFF (bf16 0x7FFF, e4m3 0x7F). So "bit-identical" across backends means: equal
// bits, or both NaN (docs/decisions.md, "NaN bits across backends").
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "dsa/core/types.hpp"

namespace dsa_test {

constexpr bool float_bits_nan(std::uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }
constexpr bool bf16_bits_nan(std::uint16_t u) { return (u & 0x7FFFu) > 0x7F80u; }
constexpr bool e4m3_bits_nan(std::uint8_t u) { return (u & 0x7Fu) == 0x7Fu; }
constexpr bool e5m2_bits_nan(std::uint8_t u) { return (u & 0x7Fu) > 0x7Cu; }

/// Whether a value of one of dsa's floating-point element types is a NaN; false for integers and
/// raw bytes (whose format the caller knows: use the *_bits_nan functions).
template <class T>
bool is_nan_value(const T& v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(v);
  } else if constexpr (std::is_same_v<T, dsa::bf16>) {
    return bf16_bits_nan(v.bits);
  } else if constexpr (std::is_same_v<T, dsa::fp8_e4m3>) {
    return e4m3_bits_nan(v.bits);
  } else if constexpr (std::is_same_v<T, dsa::fp8_e5m2>) {
    return e5m2_bits_nan(v.bits);
  } else {
    return false;
  }
}

/// Equal bits, or both NaN.
template <class T>
bool same_bits_or_both_nan(const T& a, const T& b) {
  static_assert(std::is_trivially_copyable_v<T>);
  return std::memcmp(&a, &b, sizeof(T)) == 0 || (is_nan_value(a) && is_nan_value(b));
}

}  // namespace dsa_test
