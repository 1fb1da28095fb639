// The model's file I/O (config.json and safetensors parsing, weights::load, the random-checkpoint
// writer), compiled once for dsa's own programs: they build with DSA_EXTERN_CPU_TRANSFORMER, under
// which those functions are only declared (dsa/model/io_linkage.hpp), and link this file through
// the target dsa_cpu_transformer. Kept apart from the forward pass (cpu_transformer.cpp) so the two
// compile in parallel.
#define DSA_CPU_TRANSFORMER_INSTANCE
#include "dsa/model/config.hpp"
#include "dsa/model/random_checkpoint.hpp"
#include "dsa/model/safetensors.hpp"
#include "dsa/model/weights.hpp"
