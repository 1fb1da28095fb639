// The CPU ops compiled once for dsa's own programs (dsa/core/op_instances.hpp): the rest of a
// layer -- FP8 quantization, Hadamard, norms, RoPE, SwiGLU, the KV caches and MoE routing.
#include "dsa/cpu/activation.hpp"
#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/cpu/hadamard.hpp"
#include "dsa/cpu/kv_cache.hpp"
#include "dsa/cpu/moe_combine.hpp"
#include "dsa/cpu/moe_routing.hpp"
#include "dsa/cpu/norm.hpp"
#include "dsa/cpu/rope.hpp"

DSA_NAMESPACE_BEGIN
DSA_FP8_QUANT_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_HADAMARD_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_NORM_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_ROPE_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_SWIGLU_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_KV_CACHE_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_MOE_ROUTING_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_MOE_COMBINE_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_NAMESPACE_END
