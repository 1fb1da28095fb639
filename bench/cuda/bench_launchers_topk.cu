// Top-k selection and the row gather on the CUDA backend for bench_cuda_topk.cpp (see
// bench_launchers.hpp).
#include "bench_launchers.hpp"

#include "dsa/cuda/topk.cuh"

namespace dsa_bench::cuda {

void topk_indices(const cuda_backend& be, dview<const float, 2> scores, dview<const std::int32_t, 2> ranges, index_t k,
                  dview<std::int32_t, 2> indices) {
  dsa::topk_indices(be, scores, ranges, k, indices);
}
void gather_rows(const cuda_backend& be, dview<const std::uint8_t, 2> src, dview<const std::int32_t, 2> indices,
                 dview<std::uint8_t, 3> dst) {
  dsa::gather_rows(be, src, indices, dst);
}

}  // namespace dsa_bench::cuda
