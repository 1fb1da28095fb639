// The CPU ops compiled once for dsa's own programs (dsa/core/op_instances.hpp), family "dense"
// (docs/architecture.md, "Op families"): linear and fp8_linear (also on packed FP8 weights), the
// norms, RoPE and SwiGLU. The families' six files compile in parallel.
#include "dsa/cpu/activation.hpp"
#include "dsa/cpu/linear.hpp"
#include "dsa/cpu/norm.hpp"
#include "dsa/cpu/rope.hpp"

DSA_NAMESPACE_BEGIN
DSA_DENSE_FAMILY_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_CPU_PACKED_FP8_LINEAR_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_NAMESPACE_END
