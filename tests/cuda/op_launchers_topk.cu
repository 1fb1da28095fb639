// Top-k selection and row gathering on the CUDA backend, for the doctest tests (see
// op_launchers.hpp).
#include "op_launchers.hpp"

#include "dsa/cuda.cuh"

namespace dsa_test::cuda_ops {

void topk_indices(const cuda_backend& be, dview<const float, 2> scores, dview<const std::int32_t, 2> ranges, index_t k,
                  dview<std::int32_t, 2> indices) {
  dsa::topk_indices(be, scores, ranges, k, indices);
}
void topk_indices_paged(const cuda_backend& be, dview<const float, 2> scores, dview<const std::int32_t, 2> ranges,
                        index_t k, dview<const std::int32_t, 2> block_table, index_t block_size,
                        dview<std::int32_t, 2> slots) {
  dsa::topk_indices_paged(be, scores, ranges, k, block_table, block_size, slots);
}
void gather_rows(const cuda_backend& be, dview<const float, 2> src, dview<const std::int32_t, 2> indices,
                 dview<float, 3> dst) {
  dsa::gather_rows(be, src, indices, dst);
}
void gather_rows(const cuda_backend& be, dview<const bf16, 2> src, dview<const std::int32_t, 2> indices,
                 dview<bf16, 3> dst) {
  dsa::gather_rows(be, src, indices, dst);
}
void gather_rows(const cuda_backend& be, dview<const std::uint8_t, 2> src, dview<const std::int32_t, 2> indices,
                 dview<std::uint8_t, 3> dst) {
  dsa::gather_rows(be, src, indices, dst);
}

}  // namespace dsa_test::cuda_ops
