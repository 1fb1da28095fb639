// How the model's file I/O is compiled: the parsing and validation of config.json and of
// safetensors checkpoints, the binding of a checkpoint's tensors (weights::load) and the
// random-checkpoint writer. JSON parsing and those checks are the bulk of a model-level
// translation unit's compile time (under ASan + UBSan: about 70 of a test's 90 seconds).
//
// dsa is header-only: by default these functions are inline and compiled wherever they are
// used. A program that defines DSA_EXTERN_CPU_TRANSFORMER (dsa/model/transformer.hpp; dsa's own
// tests and tools do) compiles them once instead: in its translation units they are plain
// declarations, and the one that also defines DSA_CPU_TRANSFORMER_INSTANCE
// (instances/model_io.cpp) holds their definitions. Define both macros the same way in
// every translation unit of the program.
#pragma once

#if defined(DSA_EXTERN_CPU_TRANSFORMER)
#define DSA_MODEL_IO
#if defined(DSA_CPU_TRANSFORMER_INSTANCE)
#define DSA_MODEL_IO_DEFINITIONS 1
#else
#define DSA_MODEL_IO_DEFINITIONS 0
#endif
#else
#define DSA_MODEL_IO inline
#define DSA_MODEL_IO_DEFINITIONS 1
#endif
