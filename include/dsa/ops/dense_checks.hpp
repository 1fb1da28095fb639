// Argument checks shared by the dense building-block ops (linear, norm, rope, activation).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "dsa/core/aliasing.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"

DSA_NAMESPACE_BEGIN
namespace detail {

/// bf16 or float, const or not: the element types the dense ops compute from.
template <class T>
inline constexpr bool is_bf16_or_float = std::is_same_v<std::remove_const_t<T>, float> ||
                                         std::is_same_v<std::remove_const_t<T>, bf16>;

/// A non-null view with unit-stride rows.
template <class View>
void check_operand(std::string_view op, std::string_view name, const View& v) {
  check_valid(op, name, v);
  check_inner_contiguous(op, name, v);
}

/// eps must be a positive finite number.
inline void check_eps(std::string_view op, float eps) {
  if (!(eps > 0.0f) || !std::isfinite(eps)) fail(op, "eps", eps, "a positive finite number");
}

}  // namespace detail
DSA_NAMESPACE_END
