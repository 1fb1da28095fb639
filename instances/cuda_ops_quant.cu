// The CUDA ops compiled once for dsa's own programs (dsa/core/op_instances.hpp), family "quant"
// (docs/architecture.md, "Op families"): the Hadamard transform, the FP8 quantizers and the KV /
// indexer cache rows.
#include "dsa/cuda/fp8_quant.cuh"
#include "dsa/cuda/hadamard.cuh"
#include "dsa/cuda/kv_cache.cuh"

DSA_NAMESPACE_BEGIN
DSA_QUANT_FAMILY_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_NAMESPACE_END
