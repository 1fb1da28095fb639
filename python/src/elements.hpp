// Element types of the binding that both the nanobind side (common.hpp, g++) and the CUDA
// launchers (cuda/ops.hpp, nvcc) name, so this header includes neither nanobind nor CUDA.
#pragma once

#include <cstddef>

namespace dsa_py {

/// An element of N bytes whatever its type: gather_rows copies rows bit for bit, so it gathers
/// any dtype as the raw_element of its size.
template <std::size_t N>
struct raw_element {
  alignas(N) unsigned char bytes[N];
};
template <class T>
inline constexpr bool is_raw_element = false;
template <std::size_t N>
inline constexpr bool is_raw_element<raw_element<N>> = true;

}  // namespace dsa_py
