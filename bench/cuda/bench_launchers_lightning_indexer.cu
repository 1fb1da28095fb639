// The FP8 lightning indexer (contiguous and paged keys) on the CUDA backend for
// bench_cuda_lightning_indexer.cpp (see bench_launchers.hpp).
#include "bench_launchers.hpp"

#include "dsa/cuda/lightning_indexer.cuh"

namespace dsa_bench::cuda {

void lightning_indexer_scores(const cuda_backend& be, dview<const fp8_e4m3, 3> q, dview<const float, 2> w,
                              dview<const fp8_e4m3, 2> k, dview<const float, 1> k_scale,
                              dview<const std::int32_t, 2> ranges, dview<float, 2> scores) {
  dsa::lightning_indexer_scores(be, q, w, k, k_scale, ranges, scores);
}
void lightning_indexer_scores_paged(const cuda_backend& be, dview<const fp8_e4m3, 3> q, dview<const float, 2> w,
                                    dview<const std::uint8_t, 2> cache, dview<const std::int32_t, 2> block_table,
                                    index_t block_size, dview<const std::int32_t, 2> ranges, dview<float, 2> scores) {
  dsa::lightning_indexer_scores_paged(be, q, w, cache, block_table, block_size, ranges, scores);
}

}  // namespace dsa_bench::cuda
