// Which x86-64 (or other) level the CPU op instances beside this file were compiled for: compiled
// into dsa_cpu_ops and into each per-level libdsa_cpu.so (cmake/dsaCpuDispatch.cmake), so a
// program that calls the instances reports the level it runs, whichever library the loader chose.
#include "dsa/cpu/arch/isa.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

isa_level instances_isa_level() noexcept { return compiled_isa_level(); }

}  // namespace cpu_detail
DSA_NAMESPACE_END
