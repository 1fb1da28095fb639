// The indexer KL losses on the CUDA backend, for the doctest tests (see
// op_launchers_indexer_kl_loss.hpp).
#include "op_launchers_indexer_kl_loss.hpp"

#include "dsa/cuda/indexer_kl_loss.cuh"

namespace dsa_test::cuda_ops {

void indexer_kl_loss_dense(const dsa::cuda_backend& be, dsa::device_view<const float, 3> attn,
                           dsa::device_view<const float, 2> index_scores, dsa::device_view<const std::int32_t, 2> ranges,
                           dsa::device_view<float, 1> loss, dsa::device_view<float, 2> grad_index,
                           dsa::device_view<std::byte, 1> workspace) {
  dsa::indexer_kl_loss_dense(be, attn, index_scores, ranges, loss, grad_index, workspace);
}

void indexer_kl_loss_sparse(const dsa::cuda_backend& be, dsa::device_view<const float, 3> attn,
                            dsa::device_view<const float, 2> index_scores, dsa::device_view<const std::int32_t, 2> topk,
                            dsa::device_view<float, 1> loss, dsa::device_view<float, 2> grad_index,
                            dsa::device_view<std::byte, 1> workspace) {
  dsa::indexer_kl_loss_sparse(be, attn, index_scores, topk, loss, grad_index, workspace);
}

}  // namespace dsa_test::cuda_ops
