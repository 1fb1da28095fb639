// The lightning indexer, top-k, gather_rows and the indexer KL losses on the CUDA backend
// (cuda/ops.hpp).
#include "cuda/define.cuh"
#include "dsa/cuda/indexer_kl_loss.cuh"
#include "dsa/cuda/indexer_weights.cuh"
#include "dsa/cuda/lightning_indexer.cuh"
#include "dsa/cuda/topk.cuh"

namespace dsa_py::cuda_ops {

DSA_PY_DEFINE_CUDA_OP(topk_indices)
DSA_PY_DEFINE_CUDA_OP(topk_indices_paged)
DSA_PY_DEFINE_CUDA_OP(gather_rows)
DSA_PY_DEFINE_CUDA_OP(lightning_indexer_scores)
DSA_PY_DEFINE_CUDA_OP(lightning_indexer_scores_paged)
DSA_PY_DEFINE_CUDA_OP(lightning_indexer_backward)
DSA_PY_DEFINE_CUDA_OP(lightning_indexer_weights)
DSA_PY_DEFINE_CUDA_OP(indexer_kl_loss_dense)
DSA_PY_DEFINE_CUDA_OP(indexer_kl_loss_sparse)

template void topk_indices(const cuda_backend&, dview<const float, 2>, dview<const i32, 2>, index_t, dview<i32, 2>);
template void topk_indices_paged(const cuda_backend&, dview<const float, 2>, dview<const i32, 2>, index_t,
                                 dview<const i32, 2>, index_t, dview<i32, 2>);

#define DSA_PY_GATHER(N)                                                                                  \
  template void gather_rows(const cuda_backend&, dview<const raw_element<N>, 2>, dview<const i32, 2>, \
                            dview<raw_element<N>, 3>);
DSA_PY_GATHER(1)
DSA_PY_GATHER(2)
DSA_PY_GATHER(4)
DSA_PY_GATHER(8)
#undef DSA_PY_GATHER

#define DSA_PY_SCORES(T)                                                                                      \
  template void lightning_indexer_scores(const cuda_backend&, dview<const T, 3>, dview<const float, 2>,        \
                                         dview<const T, 2>, dview<const float, 1>, dview<const i32, 2>,        \
                                         dview<float, 2>);
DSA_PY_SCORES(float)
DSA_PY_SCORES(fp8_e4m3)
#undef DSA_PY_SCORES
template void lightning_indexer_scores_paged(const cuda_backend&, dview<const fp8_e4m3, 3>, dview<const float, 2>,
                                             dview<const u8, 2>, dview<const i32, 2>, index_t, dview<const i32, 2>,
                                             dview<float, 2>);
template void lightning_indexer_backward(const cuda_backend&, dview<const float, 3>, dview<const float, 2>,
                                         dview<const float, 2>, dview<const float, 1>, dview<const i32, 2>,
                                         dview<const float, 2>, dview<float, 3>, dview<float, 2>, dview<float, 2>);
template void lightning_indexer_weights(const cuda_backend&, dview<const float, 2>, dview<const float, 2>,
                                        dview<float, 2>, float, float);

template void indexer_kl_loss_dense(const cuda_backend&, dview<const float, 3>, dview<const float, 2>,
                                    dview<const i32, 2>, dview<float, 1>, dview<float, 2>, dview<std::byte, 1>);
template void indexer_kl_loss_sparse(const cuda_backend&, dview<const float, 3>, dview<const float, 2>,
                                     dview<const i32, 2>, dview<float, 1>, dview<float, 2>, dview<std::byte, 1>);

}  // namespace dsa_py::cuda_ops
