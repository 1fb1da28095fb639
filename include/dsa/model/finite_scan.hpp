// dsa::model::first_non_finite: where a checkpoint tensor's stored values stop being numbers.
//
// A NaN or infinite weight does not always show in the logits: a NaN in the indexer's
// weights_proj makes every index score NaN, and top-k (NaN first) then selects positions by their
// index, not their score: the attention goes on over the wrong keys with finite logits (issue 14;
// the forward pass's non-finite watch reports it too, dsa/model/nonfinite.hpp). So
// weights::load scans every tensor it binds, on the stored bit
// patterns (no conversion, no floating-point compare, so DAZ/FTZ and -ffast-math cannot change
// it): e4m3 codes 0x7F / 0xFF (its only NaNs; e4m3 has no infinities), bf16 / f16 / f32 / f64
// with an all-ones exponent. Integer dtypes have nothing to check. The scan is branch-free per
// block of 4096 elements, so it runs at memory speed; only a block that holds a bad value is
// searched element by element.
//
// Part of the dsa::model target.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "dsa/core/config.hpp"
#include "dsa/model/safetensors.hpp"

DSA_NAMESPACE_BEGIN
namespace model {
namespace detail {

// Elements [0, count) of `data` as U, tested with `bad(u)`; the first bad index or -1.
template <class U, class Bad>
std::int64_t first_bad(std::span<const std::byte> data, Bad bad) {
  constexpr std::size_t block = 4096;
  const std::size_t count = data.size() / sizeof(U);
  for (std::size_t b = 0; b < count; b += block) {
    const std::size_t n = std::min(block, count - b);
    U tile[block];
    std::memcpy(tile, data.data() + b * sizeof(U), n * sizeof(U));  // no alignment assumed
    bool any = false;
    for (std::size_t i = 0; i < n; ++i) any |= bad(tile[i]);
    if (!any) continue;
    for (std::size_t i = 0; i < n; ++i) {
      if (bad(tile[i])) return static_cast<std::int64_t>(b + i);
    }
  }
  return -1;
}

}  // namespace detail

/// The flat index of the first NaN or infinite element of a tensor stored as `type` in `data`,
/// or -1 when every element is finite (always -1 for integer and boolean dtypes).
inline std::int64_t first_non_finite(dtype type, std::span<const std::byte> data) {
  using detail::first_bad;
  switch (type) {
    case dtype::f8_e4m3: return first_bad<std::uint8_t>(data, [](std::uint8_t c) { return (c & 0x7Fu) == 0x7Fu; });
    case dtype::f8_e5m2: return first_bad<std::uint8_t>(data, [](std::uint8_t c) { return (c & 0x7Cu) == 0x7Cu; });
    case dtype::bf16: return first_bad<std::uint16_t>(data, [](std::uint16_t u) { return (u & 0x7F80u) == 0x7F80u; });
    case dtype::f16: return first_bad<std::uint16_t>(data, [](std::uint16_t u) { return (u & 0x7C00u) == 0x7C00u; });
    case dtype::f32:
      return first_bad<std::uint32_t>(data, [](std::uint32_t u) { return (u & 0x7F800000u) == 0x7F800000u; });
    case dtype::f64:
      return first_bad<std::uint64_t>(
          data, [](std::uint64_t u) { return (u & 0x7FF0000000000000ull) == 0x7FF0000000000000ull; });
    default: return -1;
  }
}

}  // namespace model
DSA_NAMESPACE_END
