// dsa's ops on the CUDA backend for the Python binding (DSA_ENABLE_CUDA=ON builds only).
//
// The binding's op files are .cpp files compiled by the host compiler with nanobind; the CUDA
// implementations (op_impl<cuda_backend, ...> in dsa/cuda/*.cuh) need nvcc. As the CUDA tests'
// launchers do (tests/cuda/op_launchers.hpp), the two meet through plain C++ declarations: each
// function here is exactly `dsa::<op>(be, args...)`, defined and explicitly instantiated, for the
// argument types the binding passes, in python/src/cuda/*.cu. So the real front-ends (every
// argument check), op_impl and kernels run, and nothing of nanobind or Python crosses into nvcc.
// A combination the binding calls but no .cu instantiates is an undefined symbol, which fails
// `import dsa` (extension modules are loaded with RTLD_NOW), so the import test catches it.
//
// Host-only: <cuda_runtime_api.h> and <cublas_v2.h> through dsa/cuda/backend.hpp; g++ compiles it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "elements.hpp"

namespace dsa_py::cuda_ops {

template <class T, std::size_t R>
using dview = dsa::device_view<T, R>;

#define DSA_PY_CUDA_OPS(X)          \
  X(hadamard_transform)             \
  X(act_quant)                      \
  X(act_dequant)                    \
  X(weight_quant)                   \
  X(weight_dequant)                 \
  X(kv_cache_fp8_pack)              \
  X(kv_cache_fp8_unpack)            \
  X(indexer_cache_pack)             \
  X(indexer_cache_unpack)           \
  X(topk_indices)                   \
  X(topk_indices_paged)             \
  X(gather_rows)                    \
  X(lightning_indexer_scores)       \
  X(lightning_indexer_scores_paged) \
  X(lightning_indexer_backward)     \
  X(lightning_indexer_weights)      \
  X(sparse_mla_attention)           \
  X(sparse_mha_attention)           \
  X(indexer_kl_loss_dense)          \
  X(indexer_kl_loss_sparse)         \
  X(moe_route)                      \
  X(moe_combine)                    \
  X(fp8_linear)                     \
  X(linear)                         \
  X(rms_norm)                       \
  X(add_rms_norm)                   \
  X(layer_norm)                     \
  X(rope_apply)                     \
  X(swiglu)

/// `void NAME(const dsa::cuda_backend& be, Args... args)`: dsa::NAME(be, args...).
#define DSA_PY_DECLARE_CUDA_OP(name) \
  template <class... Args>           \
  void name(const dsa::cuda_backend& be, Args... args);
DSA_PY_CUDA_OPS(DSA_PY_DECLARE_CUDA_OP)
#undef DSA_PY_DECLARE_CUDA_OP

}  // namespace dsa_py::cuda_ops
