// Umbrella header for the CUDA backend: core types, dsa::cuda_backend, device memory, errors, the
// device-side building blocks (arch/) and the op implementations (op_impl<cuda_backend, ...>).
// Compile with nvcc (C++20, --expt-relaxed-constexpr, which the dsa::cuda CMake target adds).
// docs/cuda.md lists which ops have a CUDA implementation; calling one that has none is a
// compile error (dispatch's static_assert).
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
#include "dsa/cuda/arch/mma.cuh"
#include "dsa/cuda/arch/warp.cuh"

#include "dsa/cuda/launch.cuh"

#include "dsa/cuda/hadamard.cuh"
#include "dsa/cuda/fp8_quant.cuh"
#include "dsa/cuda/kv_cache.cuh"
#include "dsa/cuda/topk.cuh"
#include "dsa/cuda/lightning_indexer.cuh"
#include "dsa/cuda/blas.hpp"
#include "dsa/cuda/activation.cuh"
#include "dsa/cuda/linear.cuh"
#include "dsa/cuda/norm.cuh"
#include "dsa/cuda/rope.cuh"
#include "dsa/cuda/sparse_mha_attention.cuh"
#include "dsa/cuda/indexer_kl_loss.cuh"
#include "dsa/cuda/indexer_weights.cuh"
#include "dsa/cuda/moe_combine.cuh"
#include "dsa/cuda/moe_routing.cuh"
#include "dsa/cuda/sparse_mla_attention.cuh"
