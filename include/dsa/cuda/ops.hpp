// Every op on the CUDA backend, for code that the host compiler builds: g++ and clang++ compile
// this header (nvcc too), and a .cpp file that includes it calls the ops as on any backend,
//
//   #include <dsa/cuda/ops.hpp>
//   dsa::device_buffer<float> scores(m * n, stream);                 // dsa/cuda/memory.hpp
//   dsa::topk_indices(dsa::cuda_backend{stream}, scores_view, ranges, k, indices);
//
// with nothing of CUDA's device code in sight. It brings dsa::cuda_backend, device_buffer and the
// copies, cublas_handle, every op's front-end (ops/*.hpp), and declares every type combination of
// every op's list `extern template` for cuda_backend (dsa/core/op_instances.hpp): a call compiles
// to a call of the instance, which the program must link from one translation unit that nvcc
// compiled with the kernels (dsa's own: instances/cuda_ops_<family>.cu, target dsa_cuda_ops;
// an engine's: one .cu expanding DSA_OP_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend) under
// <dsa/cuda.cuh>). A combination the lists do not name does not compile here (dispatch's
// static_assert: the host compiler cannot instantiate the CUDA implementation); extend the op's
// list. The forward pass does the same through dsa/model/cuda/transformer.hpp
// (DSA_EXTERN_CUDA_TRANSFORMER, target dsa_cuda_transformer).
//
// Part of the dsa::cuda target; linking needs the instances, cudart and cuBLAS.
#pragma once

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/op_instances.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/blas.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/memory.hpp"
#include "dsa/ops/activation.hpp"
#include "dsa/ops/fp8_quant.hpp"
#include "dsa/ops/hadamard.hpp"
#include "dsa/ops/indexer_kl_loss.hpp"
#include "dsa/ops/indexer_weights.hpp"
#include "dsa/ops/kv_cache.hpp"
#include "dsa/ops/lightning_indexer.hpp"
#include "dsa/ops/linear.hpp"
#include "dsa/ops/moe_combine.hpp"
#include "dsa/ops/moe_routing.hpp"
#include "dsa/ops/norm.hpp"
#include "dsa/ops/rope.hpp"
#include "dsa/ops/sparse_mha_attention.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"
#include "dsa/ops/topk.hpp"

DSA_NAMESPACE_BEGIN
DSA_OP_INSTANCES(DSA_EXTERN_INSTANCE, cuda_backend)
DSA_NAMESPACE_END
