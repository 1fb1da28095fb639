// The CPU ops compiled once for dsa's own programs (dsa/core/op_instances.hpp), family
// "attention" (docs/architecture.md, "Op families"): sparse MLA and sparse MHA attention.
#include "dsa/cpu/sparse_mha_attention.hpp"
#include "dsa/cpu/sparse_mla_attention.hpp"

DSA_NAMESPACE_BEGIN
DSA_ATTENTION_FAMILY_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_NAMESPACE_END
