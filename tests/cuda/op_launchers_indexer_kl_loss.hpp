// The indexer KL losses on the CUDA backend, instantiated by nvcc (op_launchers_indexer_kl_loss.cu)
// for the doctest tests (test_ops_indexer_kl_loss.cpp): each function is exactly
// dsa::<op>(be, ...) with device views (see op_launchers.hpp for the pattern).
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsa/core/tensor_view.hpp"
#include "dsa/cuda/backend.hpp"

namespace dsa_test::cuda_ops {

void indexer_kl_loss_dense(const dsa::cuda_backend& be, dsa::device_view<const float, 3> attn,
                           dsa::device_view<const float, 2> index_scores, dsa::device_view<const std::int32_t, 2> ranges,
                           dsa::device_view<float, 1> loss, dsa::device_view<float, 2> grad_index,
                           dsa::device_view<std::byte, 1> workspace);
void indexer_kl_loss_sparse(const dsa::cuda_backend& be, dsa::device_view<const float, 3> attn,
                            dsa::device_view<const float, 2> index_scores, dsa::device_view<const std::int32_t, 2> topk,
                            dsa::device_view<float, 1> loss, dsa::device_view<float, 2> grad_index,
                            dsa::device_view<std::byte, 1> workspace);

}  // namespace dsa_test::cuda_ops
