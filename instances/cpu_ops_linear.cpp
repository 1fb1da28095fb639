// The CPU ops compiled once for dsa's own programs (dsa/core/op_instances.hpp): the dense and FP8
// linear layers. The ops are split over four files (cpu_ops_*.cpp) that compile in parallel.
#include "dsa/cpu/linear.hpp"

DSA_NAMESPACE_BEGIN
DSA_LINEAR_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_CPU_PACKED_FP8_LINEAR_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_NAMESPACE_END
