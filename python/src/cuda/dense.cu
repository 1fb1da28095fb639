// MoE routing and combine and the dense building blocks on the CUDA backend (cuda/ops.hpp).
#include "cuda/define.cuh"
#include "dsa/cuda/activation.cuh"
#include "dsa/cuda/linear.cuh"
#include "dsa/cuda/moe_combine.cuh"
#include "dsa/cuda/moe_routing.cuh"
#include "dsa/cuda/norm.cuh"
#include "dsa/cuda/rope.cuh"
#include "dsa/cuda/sparse_mha_attention.cuh"

namespace dsa_py::cuda_ops {

DSA_PY_DEFINE_CUDA_OP(moe_route)
DSA_PY_DEFINE_CUDA_OP(moe_combine)
DSA_PY_DEFINE_CUDA_OP(fp8_linear)
DSA_PY_DEFINE_CUDA_OP(linear)
DSA_PY_DEFINE_CUDA_OP(rms_norm)
DSA_PY_DEFINE_CUDA_OP(add_rms_norm)
DSA_PY_DEFINE_CUDA_OP(layer_norm)
DSA_PY_DEFINE_CUDA_OP(rope_apply)
DSA_PY_DEFINE_CUDA_OP(swiglu)
DSA_PY_DEFINE_CUDA_OP(sparse_mha_attention)

template void moe_route(const cuda_backend&, dview<const float, 2>, dview<const float, 1>, dview<i32, 2>,
                        dview<float, 2>, dsa::moe_routing_config);
template void moe_combine(const cuda_backend&, dview<const bf16, 2>, dview<const i32, 2>, dview<const float, 2>,
                          dview<const bf16, 2>, dview<bf16, 2>);

#define DSA_PY_FP8_LINEAR(X, O)                                                                         \
  template void fp8_linear(const cuda_backend&, dview<const X, 2>, dview<const fp8_e4m3, 2>,           \
                           dview<const float, 2>, dview<O, 2>, dsa::scale_format);
DSA_PY_FP8_LINEAR(float, float)
DSA_PY_FP8_LINEAR(float, bf16)
DSA_PY_FP8_LINEAR(bf16, float)
DSA_PY_FP8_LINEAR(bf16, bf16)
#undef DSA_PY_FP8_LINEAR

#define DSA_PY_LINEAR(X, W, O) \
  template void linear(const cuda_backend&, dview<const X, 2>, dview<const W, 2>, dview<O, 2>);
DSA_PY_LINEAR(float, float, float)
DSA_PY_LINEAR(float, float, bf16)
DSA_PY_LINEAR(float, bf16, float)
DSA_PY_LINEAR(float, bf16, bf16)
DSA_PY_LINEAR(bf16, float, float)
DSA_PY_LINEAR(bf16, float, bf16)
DSA_PY_LINEAR(bf16, bf16, float)
DSA_PY_LINEAR(bf16, bf16, bf16)
#undef DSA_PY_LINEAR

#define DSA_PY_NORMS(X)                                                                                      \
  template void rms_norm(const cuda_backend&, dview<const X, 2>, dview<const float, 1>, dview<bf16, 2>, float); \
  template void layer_norm(const cuda_backend&, dview<const X, 2>, dview<const float, 1>, dview<const float, 1>, \
                           dview<bf16, 2>, float);
DSA_PY_NORMS(float)
DSA_PY_NORMS(bf16)
#undef DSA_PY_NORMS
template void add_rms_norm(const cuda_backend&, dview<const bf16, 2>, dview<bf16, 2>, dview<const float, 1>,
                           dview<bf16, 2>, float);
template void rope_apply(const cuda_backend&, dview<bf16, 3>, dview<const i32, 1>, dsa::rope_config, dsa::rope_layout);
template void swiglu(const cuda_backend&, dview<const bf16, 2>, dview<const bf16, 2>, dview<bf16, 2>);
template void sparse_mha_attention(const cuda_backend&, dview<const bf16, 3>, dview<const bf16, 3>,
                                   dview<const bf16, 2>, dview<const bf16, 3>, dview<const i32, 2>, dview<bf16, 3>,
                                   dsa::sparse_mha_config, dview<float, 2>);

}  // namespace dsa_py::cuda_ops
