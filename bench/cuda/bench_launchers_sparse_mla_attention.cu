// sparse_mla_attention (bf16 and FP8 caches, bf16 output, with the split-k workspace) on the CUDA
// backend for bench_cuda_sparse_mla_attention.cpp (see bench_launchers.hpp).
#include "bench_launchers.hpp"

#include "dsa/cuda/sparse_mla_attention.cuh"

namespace dsa_bench::cuda {

void sparse_mla_attention(const cuda_backend& be, dview<const bf16, 3> q, dview<const bf16, 2> kv,
                          dview<const std::int32_t, 2> indices, dview<bf16, 3> out, dview<float, 2> lse,
                          const dsa::sparse_mla_config& cfg, dview<std::byte, 1> workspace) {
  dsa::sparse_mla_attention(be, q, kv, indices, out, lse, cfg, workspace);
}
void sparse_mla_attention(const cuda_backend& be, dview<const bf16, 3> q, dview<const std::uint8_t, 2> kv_fp8,
                          dview<const std::int32_t, 2> indices, dview<bf16, 3> out, dview<float, 2> lse,
                          const dsa::sparse_mla_config& cfg, dview<std::byte, 1> workspace) {
  dsa::sparse_mla_attention(be, q, kv_fp8, indices, out, lse, cfg, workspace);
}

}  // namespace dsa_bench::cuda
