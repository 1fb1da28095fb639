// The CUDA forward pass, compiled once for dsa's own programs: they build with
// DSA_EXTERN_CUDA_TRANSFORMER (dsa/model/cuda/transformer.hpp) and link this instance (target
// dsa_cuda_transformer, cmake/dsaCuda.cmake), so that host-compiled tests, tools and the Python
// binding run transformer<cuda_backend> without nvcc compiling it in each of them.
#include "dsa/model/cuda/transformer.cuh"

template class dsa::model::transformer<dsa::cuda_backend>;
// The MoE decode steps' grouped experts (dsa/model/cuda/moe.cuh), which the CUDA tests call
// beside the host grouping's path.
template dsa::model::layer_buffer<dsa::cuda_backend, std::int32_t>
dsa::model::moe_experts_grouped_on_device<dsa::cuda_backend>(
    const dsa::model::layer_context<dsa::cuda_backend>&, const dsa::model::device_moe_weights&,
    dsa::device_view<const dsa::bf16, 2>, dsa::device_view<const std::int32_t, 2>, dsa::device_view<dsa::bf16, 2>);
