// hadamard_transform, the FP8 quantizers and the cache rows on the CUDA backend (cuda/ops.hpp).
#include "cuda/define.cuh"
#include "dsa/cuda/fp8_quant.cuh"
#include "dsa/cuda/hadamard.cuh"
#include "dsa/cuda/kv_cache.cuh"

namespace dsa_py::cuda_ops {

DSA_PY_DEFINE_CUDA_OP(hadamard_transform)
DSA_PY_DEFINE_CUDA_OP(act_quant)
DSA_PY_DEFINE_CUDA_OP(act_dequant)
DSA_PY_DEFINE_CUDA_OP(weight_quant)
DSA_PY_DEFINE_CUDA_OP(weight_dequant)
DSA_PY_DEFINE_CUDA_OP(kv_cache_fp8_pack)
DSA_PY_DEFINE_CUDA_OP(kv_cache_fp8_unpack)
DSA_PY_DEFINE_CUDA_OP(indexer_cache_pack)
DSA_PY_DEFINE_CUDA_OP(indexer_cache_unpack)

#define DSA_PY_FLOAT_TYPES(T)                                                                                   \
  template void hadamard_transform(const cuda_backend&, dview<const T, 2>, dview<T, 2>, float);                 \
  template void act_quant(const cuda_backend&, dview<const T, 2>, dview<fp8_e4m3, 2>, dview<float, 2>,          \
                          dsa::act_quant_config);                                                               \
  template void act_dequant(const cuda_backend&, dview<const fp8_e4m3, 2>, dview<const float, 2>, dview<T, 2>,  \
                            index_t);                                                                           \
  template void weight_quant(const cuda_backend&, dview<const T, 2>, dview<fp8_e4m3, 2>, dview<float, 2>);     \
  template void weight_dequant(const cuda_backend&, dview<const fp8_e4m3, 2>, dview<const float, 2>, dview<T, 2>);
DSA_PY_FLOAT_TYPES(float)
DSA_PY_FLOAT_TYPES(bf16)
#undef DSA_PY_FLOAT_TYPES

template void kv_cache_fp8_pack(const cuda_backend&, dview<const bf16, 2>, dview<u8, 2>, dview<const i32, 1>);
template void kv_cache_fp8_unpack(const cuda_backend&, dview<const u8, 2>, dview<bf16, 2>);
template void indexer_cache_pack(const cuda_backend&, dview<const fp8_e4m3, 2>, dview<const float, 1>, dview<u8, 2>,
                                 dview<const i32, 1>);
template void indexer_cache_unpack(const cuda_backend&, dview<const u8, 2>, dview<fp8_e4m3, 2>, dview<float, 1>);

}  // namespace dsa_py::cuda_ops
