// Overflow-checked integer arithmetic for the host-side size computations (element counts,
// workspace sizes, shapes derived from file contents): signed overflow is undefined behaviour,
// and a wrapped size makes an op silently do nothing or index out of bounds. Host code only
// (the throwing helpers use dsa::error); ceil_div is also usable on the device.
#pragma once

#include <string_view>
#include <type_traits>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"

DSA_NAMESPACE_BEGIN

/// *out = a * b; returns true (and leaves *out unspecified) when the exact product does not fit I.
template <class I>
[[nodiscard]] constexpr bool mul_overflows(I a, I b, I* out) noexcept {
  static_assert(std::is_integral_v<I> && !std::is_same_v<I, bool>, "dsa::mul_overflows: I must be an integer type");
  return __builtin_mul_overflow(a, b, out);
}

/// *out = a + b; returns true (and leaves *out unspecified) when the exact sum does not fit I.
template <class I>
[[nodiscard]] constexpr bool add_overflows(I a, I b, I* out) noexcept {
  static_assert(std::is_integral_v<I> && !std::is_same_v<I, bool>, "dsa::add_overflows: I must be an integer type");
  return __builtin_add_overflow(a, b, out);
}

/// a * b; throws dsa::error "dsa::<op>: <argument> = <value>; expected <expected>" when the
/// product does not fit I.
template <class I, class V>
I checked_mul(I a, I b, std::string_view op, std::string_view argument, const V& value, std::string_view expected) {
  I r{};
  if (mul_overflows(a, b, &r)) fail(op, argument, value, expected);
  return r;
}

/// a + b; throws dsa::error as checked_mul when the sum does not fit I.
template <class I, class V>
I checked_add(I a, I b, std::string_view op, std::string_view argument, const V& value, std::string_view expected) {
  I r{};
  if (add_overflows(a, b, &r)) fail(op, argument, value, expected);
  return r;
}

/// ceil(a / b) for a >= 0 and b > 0, exact over the whole range of I (unlike (a + b - 1) / b,
/// which overflows for a near the maximum).
template <class I>
DSA_HOST_DEVICE constexpr I ceil_div(I a, I b) {
  return static_cast<I>(a / b + (a % b != 0 ? 1 : 0));
}

/// x rounded up to a multiple of m (x >= 0, m > 0); throws as checked_mul when that does not fit I.
template <class I, class V>
I checked_round_up(I x, I m, std::string_view op, std::string_view argument, const V& value,
                   std::string_view expected) {
  return checked_mul(ceil_div(x, m), m, op, argument, value, expected);
}

DSA_NAMESPACE_END
