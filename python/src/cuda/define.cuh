// For the .cu files that define and instantiate the launchers declared in ops.hpp: each defines
// its ops with DSA_PY_DEFINE_CUDA_OP(name) after including their CUDA implementations, then
// instantiates them explicitly for the argument types the binding passes.
#pragma once

#include <cstdint>

#include "cuda/ops.hpp"

#define DSA_PY_DEFINE_CUDA_OP(name)                      \
  template <class... Args>                               \
  void name(const dsa::cuda_backend& be, Args... args) { \
    ::dsa::name(be, args...);                            \
  }

namespace dsa_py::cuda_ops {

using dsa::bf16;
using dsa::cuda_backend;
using dsa::fp8_e4m3;
using dsa::index_t;
using i32 = std::int32_t;
using u8 = std::uint8_t;

}  // namespace dsa_py::cuda_ops
