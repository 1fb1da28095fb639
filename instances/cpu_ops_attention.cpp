// The CPU ops compiled once for dsa's own programs (dsa/cpu/op_instances.hpp): sparse MLA and
// sparse MHA attention.
#include "dsa/cpu/sparse_mha_attention.hpp"
#include "dsa/cpu/sparse_mla_attention.hpp"

DSA_NAMESPACE_BEGIN
DSA_CPU_SPARSE_MLA_ATTENTION_INSTANCES(DSA_DEFINE_INSTANCE)
DSA_CPU_SPARSE_MHA_ATTENTION_INSTANCES(DSA_DEFINE_INSTANCE)
DSA_NAMESPACE_END
