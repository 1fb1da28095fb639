// The CUDA ops compiled once for dsa's own programs (dsa/core/op_instances.hpp), family "topk"
// (docs/architecture.md, "Op families"): top-k selection (plain and through a page table) and the
// row gather.
#include "dsa/cuda/topk.cuh"

DSA_NAMESPACE_BEGIN
DSA_TOPK_FAMILY_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_NAMESPACE_END
