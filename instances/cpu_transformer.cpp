// The CPU forward pass, compiled once for dsa's own programs (tests, tools, examples, benchmarks):
// they build with DSA_EXTERN_CPU_TRANSFORMER (dsa/model/transformer.hpp) and link this instance
// (target dsa_cpu_transformer, cmake/dsaTargets.cmake) instead of compiling every layer's ops in
// each of their translation units. The library itself stays header-only: nothing installed or
// exported needs this file.
// The model's file I/O, which the pass calls, is compiled once beside it: model_io.cpp.
#include "dsa/model/transformer.hpp"

template class dsa::model::transformer<dsa::cpu_backend>;
