// dsa::model::transformer<cuda_backend> with everything it needs to be compiled: the model's
// device-specific pieces (dsa/model/cuda/transformer.hpp), the CUDA implementations of the ops its
// layers call, the MoE decode steps' grouping by expert (dsa/model/cuda/moe.cuh) and the device
// side of the non-finite watch. nvcc only; host-compiled code includes
// dsa/model/cuda/transformer.hpp under DSA_EXTERN_CUDA_TRANSFORMER instead (that header says how).
//
// Part of the dsa::model and dsa::cuda targets.
#pragma once

#include "dsa/model/cuda/host_copy.cuh"
#include "dsa/model/cuda/moe.cuh"
#include "dsa/model/cuda/nonfinite.cuh"
#include "dsa/model/cuda/transformer.hpp"

#include "dsa/cuda/activation.cuh"
#include "dsa/cuda/fp8_quant.cuh"
#include "dsa/cuda/hadamard.cuh"
#include "dsa/cuda/indexer_weights.cuh"
#include "dsa/cuda/kv_cache.cuh"
#include "dsa/cuda/lightning_indexer.cuh"
#include "dsa/cuda/linear.cuh"
#include "dsa/cuda/moe_combine.cuh"
#include "dsa/cuda/moe_routing.cuh"
#include "dsa/cuda/norm.cuh"
#include "dsa/cuda/rope.cuh"
#include "dsa/cuda/sparse_mha_attention.cuh"
#include "dsa/cuda/topk.cuh"
