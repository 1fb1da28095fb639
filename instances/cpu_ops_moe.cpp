// The CPU ops compiled once for dsa's own programs (dsa/core/op_instances.hpp), family "moe"
// (docs/architecture.md, "Op families"): the MoE gate's routing and the weighted combine.
#include "dsa/cpu/moe_combine.hpp"
#include "dsa/cpu/moe_routing.hpp"

DSA_NAMESPACE_BEGIN
DSA_MOE_FAMILY_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_NAMESPACE_END
