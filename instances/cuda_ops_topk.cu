// The CUDA ops compiled once for dsa's own programs (dsa/core/op_instances.hpp): top-k selection,
// gather and the KV caches.
#include "dsa/cuda/kv_cache.cuh"
#include "dsa/cuda/topk.cuh"

DSA_NAMESPACE_BEGIN
DSA_TOPK_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_KV_CACHE_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_NAMESPACE_END
