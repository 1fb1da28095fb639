// Sparse MLA attention on the CUDA backend (cuda/ops.hpp): q bf16; kv bf16 rows or 656-byte FP8
// cache rows; out float32 or bf16; with or without the split-k workspace.
#include "cuda/define.cuh"
#include "dsa/cuda/sparse_mla_attention.cuh"

namespace dsa_py::cuda_ops {

DSA_PY_DEFINE_CUDA_OP(sparse_mla_attention)

#define DSA_PY_MLA(KV, O)                                                                                  \
  template void sparse_mla_attention(const cuda_backend&, dview<const bf16, 3>, dview<const KV, 2>,        \
                                     dview<const i32, 2>, dview<O, 3>, dview<float, 2>, dsa::sparse_mla_config, \
                                     dview<float, 2>);                                                     \
  template void sparse_mla_attention(const cuda_backend&, dview<const bf16, 3>, dview<const KV, 2>,        \
                                     dview<const i32, 2>, dview<O, 3>, dview<float, 2>, dsa::sparse_mla_config, \
                                     dview<std::byte, 1>, dview<float, 2>);
DSA_PY_MLA(bf16, float)
DSA_PY_MLA(bf16, bf16)
DSA_PY_MLA(u8, float)
DSA_PY_MLA(u8, bf16)
#undef DSA_PY_MLA

}  // namespace dsa_py::cuda_ops
