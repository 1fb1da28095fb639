// Sparse MLA attention on the CUDA backend, for the doctest tests (see
// op_launchers_sparse_mla_attention.hpp).
#include "op_launchers_sparse_mla_attention.hpp"

#include "dsa/cuda/sparse_mla_attention.cuh"

namespace dsa_test::cuda_ops {

#define DSA_TEST_SPARSE_MLA_LAUNCHERS(KV, O)                                                                        \
  void sparse_mla_attention(const dsa::cuda_backend& be, dview<const dsa::bf16, 3> q, dview<const KV, 2> kv,        \
                            dview<const std::int32_t, 2> indices, dview<O, 3> out, dview<float, 2> lse,             \
                            const dsa::sparse_mla_config& cfg, dview<float, 2> probs) {                             \
    dsa::sparse_mla_attention(be, q, kv, indices, out, lse, cfg, probs);                                            \
  }                                                                                                                 \
  void sparse_mla_attention(const dsa::cuda_backend& be, dview<const dsa::bf16, 3> q, dview<const KV, 2> kv,        \
                            dview<const std::int32_t, 2> indices, dview<O, 3> out, dview<float, 2> lse,             \
                            const dsa::sparse_mla_config& cfg, dview<std::byte, 1> workspace, dview<float, 2> probs) { \
    dsa::sparse_mla_attention(be, q, kv, indices, out, lse, cfg, workspace, probs);                                 \
  }

DSA_TEST_SPARSE_MLA_LAUNCHERS(dsa::bf16, float)
DSA_TEST_SPARSE_MLA_LAUNCHERS(dsa::bf16, dsa::bf16)
DSA_TEST_SPARSE_MLA_LAUNCHERS(std::uint8_t, float)
DSA_TEST_SPARSE_MLA_LAUNCHERS(std::uint8_t, dsa::bf16)
#undef DSA_TEST_SPARSE_MLA_LAUNCHERS

}  // namespace dsa_test::cuda_ops
