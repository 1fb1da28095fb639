// The CUDA ops compiled once for dsa's own programs (dsa/core/op_instances.hpp), family
// "attention" (docs/architecture.md, "Op families"): sparse MLA and sparse MHA attention.
#include "dsa/cuda/sparse_mha_attention.cuh"
#include "dsa/cuda/sparse_mla_attention.cuh"

DSA_NAMESPACE_BEGIN
DSA_ATTENTION_FAMILY_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_NAMESPACE_END
