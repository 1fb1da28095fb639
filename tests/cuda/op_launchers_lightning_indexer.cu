// The lightning indexer (scores, paged scores, backward) on the CUDA backend, for the doctest
// tests (see op_launchers_lightning_indexer.hpp).
#include "op_launchers_lightning_indexer.hpp"

#include "dsa/cuda.cuh"
#include "dsa/cuda/lightning_indexer.cuh"

namespace dsa_test::cuda_ops {

void lightning_indexer_scores(const dsa::cuda_backend& be, dview<const dsa::fp8_e4m3, 3> q, dview<const float, 2> w,
                              dview<const dsa::fp8_e4m3, 2> k, dview<const float, 1> k_scale,
                              dview<const std::int32_t, 2> ranges, dview<float, 2> scores) {
  dsa::lightning_indexer_scores(be, q, w, k, k_scale, ranges, scores);
}
void lightning_indexer_scores(const dsa::cuda_backend& be, dview<const float, 3> q, dview<const float, 2> w,
                              dview<const float, 2> k, dview<const float, 1> k_scale,
                              dview<const std::int32_t, 2> ranges, dview<float, 2> scores) {
  dsa::lightning_indexer_scores(be, q, w, k, k_scale, ranges, scores);
}
void lightning_indexer_scores_paged(const dsa::cuda_backend& be, dview<const dsa::fp8_e4m3, 3> q,
                                    dview<const float, 2> w, dview<const std::uint8_t, 2> cache,
                                    dview<const std::int32_t, 2> block_table, dsa::index_t block_size,
                                    dview<const std::int32_t, 2> ranges, dview<float, 2> scores) {
  dsa::lightning_indexer_scores_paged(be, q, w, cache, block_table, block_size, ranges, scores);
}
void lightning_indexer_backward(const dsa::cuda_backend& be, dview<const float, 3> q, dview<const float, 2> w,
                                dview<const float, 2> k, dview<const float, 1> k_scale,
                                dview<const std::int32_t, 2> ranges, dview<const float, 2> grad_scores,
                                dview<float, 3> grad_q, dview<float, 2> grad_w, dview<float, 2> grad_k) {
  dsa::lightning_indexer_backward(be, q, w, k, k_scale, ranges, grad_scores, grad_q, grad_w, grad_k);
}

}  // namespace dsa_test::cuda_ops
