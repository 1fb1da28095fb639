// The CPU ops compiled once for dsa's own programs (tests, tools, examples, benchmarks).
//
// dsa is header-only: an op is compiled in every translation unit that calls it, which for a
// program of many such units (a test suite) is most of its build time. Each cpu/<op>.hpp names
// the type combinations of its front-ends in a list, DSA_CPU_<OP>_INSTANCES(X), and ends with
// DSA_DECLARE_CPU_OP_INSTANCES(that list): where DSA_EXTERN_CPU_OPS is defined, the list is
// declared `extern template`, so calls compile to calls and instances/cpu_ops_*.cpp (target
// dsa_cpu_ops, cmake/dsaTargets.cmake) holds the one definition. Combinations a list does not
// name, and every program built without the macro, instantiate as usual; nothing installed
// needs the instance files.
//
// An engine can do the same: define DSA_EXTERN_CPU_OPS in every translation unit and, in one
// built with the same flags, expand every list with DSA_DEFINE_INSTANCE inside the dsa namespace
// (as instances/cpu_ops_*.cpp do). Code built with other flags (dsa's AVX-512 test variants)
// must neither define the macro nor link those instances: it would call code compiled for
// another target.
#pragma once

#include "dsa/core/config.hpp"

#define DSA_EXTERN_INSTANCE(...) extern template __VA_ARGS__;
#define DSA_DEFINE_INSTANCE(...) template __VA_ARGS__;

#if defined(DSA_EXTERN_CPU_OPS)
#define DSA_DECLARE_CPU_OP_INSTANCES(list) DSA_NAMESPACE_BEGIN list(DSA_EXTERN_INSTANCE) DSA_NAMESPACE_END
#else
#define DSA_DECLARE_CPU_OP_INSTANCES(list)
#endif
