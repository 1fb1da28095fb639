// The ops compiled once for dsa's own programs (tests, tools, examples, benchmarks).
//
// dsa is header-only: an op is compiled in every translation unit that calls it, which for a
// program of many such units (a test suite) is most of its build time. Each ops/<op>.hpp names
// the type combinations of its front-ends in a list, DSA_<OP>_INSTANCES(X, B), for a backend B;
// cpu/<op>.hpp ends with DSA_DECLARE_CPU_OP_INSTANCES(that list) and cuda/<op>.cuh with
// DSA_DECLARE_CUDA_OP_INSTANCES(it). Where DSA_EXTERN_CPU_OPS (DSA_EXTERN_CUDA_OPS) is defined,
// the list is declared `extern template` for cpu_backend (cuda_backend): calls compile to calls,
// and instances/cpu_ops_*.cpp (instances/cuda_ops_*.cu) hold the one definition, in the targets
// dsa_cpu_ops and dsa_cuda_ops (cmake/). Combinations a list does not name, and every program
// built without the macros, instantiate as usual; nothing installed needs the instance files.
//
// An engine can do the same: define the macro in every translation unit and, in one built with
// the same flags, expand every list of the backend with DSA_DEFINE_INSTANCE inside the dsa
// namespace (as the instance files do). Code built with other flags (dsa's AVX-512 test
// variants, its --use_fast_math launchers) must neither define the macro nor link those
// instances: it would call code compiled for another target.
#pragma once

#include "dsa/core/config.hpp"

#define DSA_EXTERN_INSTANCE(...) extern template __VA_ARGS__;
#define DSA_DEFINE_INSTANCE(...) template __VA_ARGS__;

#if defined(DSA_EXTERN_CPU_OPS)
#define DSA_DECLARE_CPU_OP_INSTANCES(list) DSA_NAMESPACE_BEGIN list(DSA_EXTERN_INSTANCE, cpu_backend) DSA_NAMESPACE_END
#else
#define DSA_DECLARE_CPU_OP_INSTANCES(list)
#endif

#if defined(DSA_EXTERN_CUDA_OPS)
#define DSA_DECLARE_CUDA_OP_INSTANCES(list) DSA_NAMESPACE_BEGIN list(DSA_EXTERN_INSTANCE, cuda_backend) DSA_NAMESPACE_END
#else
#define DSA_DECLARE_CUDA_OP_INSTANCES(list)
#endif
