// The CPU ops compiled once for dsa's own programs (dsa/core/op_instances.hpp), family "topk"
// (docs/architecture.md, "Op families"): top-k selection (plain and through a page table) and the
// row gather.
#include "dsa/cpu/topk.hpp"

DSA_NAMESPACE_BEGIN
DSA_TOPK_FAMILY_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_NAMESPACE_END
