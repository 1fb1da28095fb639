// Umbrella header for the CUDA backend: core types, dsa::cuda_backend, device memory, errors and
// the device-side building blocks (arch/). Compile with nvcc (C++20, --expt-relaxed-constexpr,
// which the dsa::cuda CMake target adds). The CUDA op implementations (op_impl<cuda_backend, ...>)
// are included here as they land; until then no op dispatches to this backend.
#pragma once

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"

#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/memory.cuh"

#include "dsa/cuda/arch/fp8.cuh"
#include "dsa/cuda/arch/warp.cuh"
