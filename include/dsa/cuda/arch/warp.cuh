// Warp-level reductions for kernels.
//
// Butterfly (xor-shuffle) reductions: after log2(Width) steps every lane of each Width-lane group
// holds the result, and — because each step adds or compares the same two values in every lane,
// only in swapped operand order — every lane holds the same bits. The order of the operations is
// fixed, so results are bit-identical run to run; it is a tree, not the sequential order of a CPU
// loop, so a CPU reference that must match bit for bit has to sum in the same tree.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "dsa/core/config.hpp"
#include "dsa/numerics/fp32_ops.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_arch {

inline constexpr unsigned full_warp_mask = 0xFFFFFFFFu;

template <int Width>
inline constexpr bool valid_shuffle_width = Width >= 1 && Width <= 32 && (Width & (Width - 1)) == 0;

/// Sum over each group of Width consecutive lanes (Width a power of two <= 32). `mask` names the
/// participating lanes, as for __shfl_xor_sync; all lanes of a group must participate.
template <int Width = 32, class T>
DSA_DEVICE DSA_FORCEINLINE T warp_reduce_sum(T v, unsigned mask = full_warp_mask) {
  static_assert(valid_shuffle_width<Width>, "dsa::warp_reduce_sum: Width must be a power of two <= 32");
#pragma unroll
  for (int offset = Width / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(mask, v, offset, Width);
  return v;
}

/// Maximum over each group of Width consecutive lanes. For float this is fmaxf: a NaN lane is
/// ignored unless every lane is NaN (callers that must propagate NaN test for it themselves).
template <int Width = 32, class T>
DSA_DEVICE DSA_FORCEINLINE T warp_reduce_max(T v, unsigned mask = full_warp_mask) {
  static_assert(valid_shuffle_width<Width>, "dsa::warp_reduce_max: Width must be a power of two <= 32");
#pragma unroll
  for (int offset = Width / 2; offset > 0; offset /= 2) {
    const T o = __shfl_xor_sync(mask, v, offset, Width);
    if constexpr (std::is_same_v<T, float>) {
      v = fmaxf(v, o);
    } else {
      v = o > v ? o : v;
    }
  }
  return v;
}

/// Maximum over each group of Width consecutive lanes that is NaN when any lane is NaN
/// (detail::max_propagate_nan): the softmax maxima, where a dropped NaN would become "no
/// attention". Every lane ends with the same value (NaN payloads aside).
template <int Width = 32>
DSA_DEVICE DSA_FORCEINLINE float warp_reduce_max_propagate_nan(float v, unsigned mask = full_warp_mask) {
  static_assert(valid_shuffle_width<Width>, "dsa::warp_reduce_max_propagate_nan: Width must be a power of two <= 32");
#pragma unroll
  for (int offset = Width / 2; offset > 0; offset /= 2) {
    v = ::dsa::detail::max_propagate_nan(v, __shfl_xor_sync(mask, v, offset, Width));
  }
  return v;
}

/// Minimum, as warp_reduce_max.
template <int Width = 32, class T>
DSA_DEVICE DSA_FORCEINLINE T warp_reduce_min(T v, unsigned mask = full_warp_mask) {
  static_assert(valid_shuffle_width<Width>, "dsa::warp_reduce_min: Width must be a power of two <= 32");
#pragma unroll
  for (int offset = Width / 2; offset > 0; offset /= 2) {
    const T o = __shfl_xor_sync(mask, v, offset, Width);
    if constexpr (std::is_same_v<T, float>) {
      v = fminf(v, o);
    } else {
      v = o < v ? o : v;
    }
  }
  return v;
}

}  // namespace cuda_arch
DSA_NAMESPACE_END
