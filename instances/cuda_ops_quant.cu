// The CUDA ops compiled once for dsa's own programs (dsa/core/op_instances.hpp): FP8 quantization,
// Hadamard and the MoE ops. The ops are split over five files (cuda_ops_*.cu) that nvcc compiles in
// parallel.
#include "dsa/cuda/fp8_quant.cuh"
#include "dsa/cuda/hadamard.cuh"
#include "dsa/cuda/moe_combine.cuh"
#include "dsa/cuda/moe_routing.cuh"

DSA_NAMESPACE_BEGIN
DSA_FP8_QUANT_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_HADAMARD_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_MOE_ROUTING_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_MOE_COMBINE_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_NAMESPACE_END
