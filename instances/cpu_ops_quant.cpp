// The CPU ops compiled once for dsa's own programs (dsa/core/op_instances.hpp), family "quant"
// (docs/architecture.md, "Op families"): the Hadamard transform, the FP8 quantizers and the KV /
// indexer cache rows.
#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/cpu/hadamard.hpp"
#include "dsa/cpu/kv_cache.hpp"

DSA_NAMESPACE_BEGIN
DSA_QUANT_FAMILY_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_NAMESPACE_END
