// sparse_mla_attention on the CUDA backend for the doctest tests (a .cpp compiled by the host
// compiler): each function is exactly dsa::sparse_mla_attention(be, ...) with device views,
// instantiated by nvcc in op_launchers_sparse_mla_attention.cu. The bf16 and FP8 caches, float
// and bf16 outputs, without and with a split-k workspace.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"

namespace dsa_test::cuda_ops {

template <class T, std::size_t R>
using dview = dsa::device_view<T, R>;

#define DSA_TEST_SPARSE_MLA_LAUNCHERS(KV, O)                                                                        \
  void sparse_mla_attention(const dsa::cuda_backend& be, dview<const dsa::bf16, 3> q, dview<const KV, 2> kv,        \
                            dview<const std::int32_t, 2> indices, dview<O, 3> out, dview<float, 2> lse,             \
                            const dsa::sparse_mla_config& cfg, dview<float, 2> probs);                              \
  void sparse_mla_attention(const dsa::cuda_backend& be, dview<const dsa::bf16, 3> q, dview<const KV, 2> kv,        \
                            dview<const std::int32_t, 2> indices, dview<O, 3> out, dview<float, 2> lse,             \
                            const dsa::sparse_mla_config& cfg, dview<std::byte, 1> workspace, dview<float, 2> probs);

DSA_TEST_SPARSE_MLA_LAUNCHERS(dsa::bf16, float)
DSA_TEST_SPARSE_MLA_LAUNCHERS(dsa::bf16, dsa::bf16)
DSA_TEST_SPARSE_MLA_LAUNCHERS(std::uint8_t, float)
DSA_TEST_SPARSE_MLA_LAUNCHERS(std::uint8_t, dsa::bf16)
#undef DSA_TEST_SPARSE_MLA_LAUNCHERS

}  // namespace dsa_test::cuda_ops
