// The CUDA ops compiled once for dsa's own programs (dsa/core/op_instances.hpp), family "moe"
// (docs/architecture.md, "Op families"): the MoE gate's routing and the weighted combine.
#include "dsa/cuda/moe_combine.cuh"
#include "dsa/cuda/moe_routing.cuh"

DSA_NAMESPACE_BEGIN
DSA_MOE_FAMILY_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_NAMESPACE_END
