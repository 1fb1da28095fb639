// The lightning indexer ops on the CUDA backend, instantiated by nvcc
// (op_launchers_lightning_indexer.cu) for the doctest tests (.cpp, host compiler); each function
// is exactly dsa::<op>(be, ...) with device views (see op_launchers.hpp for the pattern).
#pragma once

#include <cstdint>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"

namespace dsa_test::cuda_ops {

template <class T, std::size_t R>
using dview = dsa::device_view<T, R>;

void lightning_indexer_scores(const dsa::cuda_backend& be, dview<const dsa::fp8_e4m3, 3> q, dview<const float, 2> w,
                              dview<const dsa::fp8_e4m3, 2> k, dview<const float, 1> k_scale,
                              dview<const std::int32_t, 2> ranges, dview<float, 2> scores);
void lightning_indexer_scores(const dsa::cuda_backend& be, dview<const float, 3> q, dview<const float, 2> w,
                              dview<const float, 2> k, dview<const float, 1> k_scale,
                              dview<const std::int32_t, 2> ranges, dview<float, 2> scores);
void lightning_indexer_scores_paged(const dsa::cuda_backend& be, dview<const dsa::fp8_e4m3, 3> q,
                                    dview<const float, 2> w, dview<const std::uint8_t, 2> cache,
                                    dview<const std::int32_t, 2> block_table, dsa::index_t block_size,
                                    dview<const std::int32_t, 2> ranges, dview<float, 2> scores);
void lightning_indexer_backward(const dsa::cuda_backend& be, dview<const float, 3> q, dview<const float, 2> w,
                                dview<const float, 2> k, dview<const float, 1> k_scale,
                                dview<const std::int32_t, 2> ranges, dview<const float, 2> grad_scores,
                                dview<float, 3> grad_q, dview<float, 2> grad_w, dview<float, 2> grad_k);

}  // namespace dsa_test::cuda_ops
