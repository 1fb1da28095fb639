// The KV-cache row codecs on the CUDA backend, for the doctest tests (see op_launchers.hpp).
#include "op_launchers.hpp"

#include "dsa/cuda.cuh"

namespace dsa_test::cuda_ops {

void kv_cache_fp8_pack(const cuda_backend& be, dview<const bf16, 2> kv, dview<std::uint8_t, 2> cache,
                       dview<const std::int32_t, 1> slots) {
  dsa::kv_cache_fp8_pack(be, kv, cache, slots);
}
void kv_cache_fp8_unpack(const cuda_backend& be, dview<const std::uint8_t, 2> cache, dview<bf16, 2> kv) {
  dsa::kv_cache_fp8_unpack(be, cache, kv);
}
void indexer_cache_pack(const cuda_backend& be, dview<const fp8_e4m3, 2> k, dview<const float, 1> k_scale,
                        dview<std::uint8_t, 2> cache, dview<const std::int32_t, 1> slots) {
  dsa::indexer_cache_pack(be, k, k_scale, cache, slots);
}
void indexer_cache_unpack(const cuda_backend& be, dview<const std::uint8_t, 2> cache, dview<fp8_e4m3, 2> k,
                          dview<float, 1> k_scale) {
  dsa::indexer_cache_unpack(be, cache, k, k_scale);
}

}  // namespace dsa_test::cuda_ops
