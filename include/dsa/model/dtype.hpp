// The element types of safetensors files (dsa::dtype) and their C++ types: sizes, names as the
// format spells them, parsing, and the shape text of messages. Part of the dsa::model target.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"

DSA_NAMESPACE_BEGIN

/// The element types of the safetensors format that dsa reads and writes.
enum class dtype : std::uint8_t { f8_e4m3, f8_e5m2, bf16, f16, f32, f64, i8, i16, i32, i64, u8, boolean };

/// Bytes per element.
constexpr std::size_t dtype_size(dtype t) {
  switch (t) {
    case dtype::f8_e4m3:
    case dtype::f8_e5m2:
    case dtype::i8:
    case dtype::u8:
    case dtype::boolean:
      return 1;
    case dtype::bf16:
    case dtype::f16:
    case dtype::i16:
      return 2;
    case dtype::f32:
    case dtype::i32:
      return 4;
    case dtype::f64:
    case dtype::i64:
      return 8;
  }
  return 0;
}

/// The name the safetensors header uses: "F8_E4M3", "BF16", "F32", ...
constexpr std::string_view dtype_name(dtype t) {
  switch (t) {
    case dtype::f8_e4m3:
      return "F8_E4M3";
    case dtype::f8_e5m2:
      return "F8_E5M2";
    case dtype::bf16:
      return "BF16";
    case dtype::f16:
      return "F16";
    case dtype::f32:
      return "F32";
    case dtype::f64:
      return "F64";
    case dtype::i8:
      return "I8";
    case dtype::i16:
      return "I16";
    case dtype::i32:
      return "I32";
    case dtype::i64:
      return "I64";
    case dtype::u8:
      return "U8";
    case dtype::boolean:
      return "BOOL";
  }
  return "?";
}

/// The dtype named `name` in a safetensors header, or nothing if dsa does not know it.
inline std::optional<dtype> parse_dtype(std::string_view name) {
  static constexpr std::array all = {dtype::f8_e4m3, dtype::f8_e5m2, dtype::bf16, dtype::f16,
                                     dtype::f32,     dtype::f64,     dtype::i8,   dtype::i16,
                                     dtype::i32,     dtype::i64,     dtype::u8,   dtype::boolean};
  for (dtype t : all) {
    if (dtype_name(t) == name) return t;
  }
  return std::nullopt;
}

namespace detail {
template <class T>
inline constexpr bool always_false = false;
}  // namespace detail

/// The dtype whose elements are stored as C++ type T (float -> F32, dsa::bf16 -> BF16, ...).
/// F16 has no C++ element type in dsa; read it with bytes().
template <class T>
constexpr dtype dtype_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, fp8_e4m3>)
    return dtype::f8_e4m3;
  else if constexpr (std::is_same_v<U, fp8_e5m2>)
    return dtype::f8_e5m2;
  else if constexpr (std::is_same_v<U, bf16>)
    return dtype::bf16;
  else if constexpr (std::is_same_v<U, float>)
    return dtype::f32;
  else if constexpr (std::is_same_v<U, double>)
    return dtype::f64;
  else if constexpr (std::is_same_v<U, std::int8_t>)
    return dtype::i8;
  else if constexpr (std::is_same_v<U, std::int16_t>)
    return dtype::i16;
  else if constexpr (std::is_same_v<U, std::int32_t>)
    return dtype::i32;
  else if constexpr (std::is_same_v<U, std::int64_t>)
    return dtype::i64;
  else if constexpr (std::is_same_v<U, std::uint8_t>)
    return dtype::u8;
  else if constexpr (std::is_same_v<U, bool>)
    return dtype::boolean;
  else
    static_assert(::dsa::detail::always_false<U>, "dsa::dtype_of: no safetensors dtype stores this C++ type");
}

static_assert(sizeof(bool) == 1, "dsa::safetensors: BOOL tensors need a one-byte bool");

/// "[2, 3]"
inline std::string format_shape(std::span<const index_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

DSA_NAMESPACE_END
