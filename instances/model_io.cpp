// The model's file I/O (config.json and safetensors parsing, weights::load, the random-checkpoint
// writer), compiled once for dsa's own programs: they build with DSA_EXTERN_CPU_TRANSFORMER, under
// which those functions are only declared (dsa/model/io_linkage.hpp), and link this file through
// the target dsa_model_io (which dsa_cpu_transformer brings). Kept apart from the forward pass
// (cpu_transformer.cpp) so the two compile in parallel, and programs that only read checkpoints
// need not compile the pass.
#define DSA_CPU_TRANSFORMER_INSTANCE
#include "dsa/model/config.hpp"
#include "dsa/model/random_checkpoint.hpp"
#include "dsa/model/safetensors.hpp"
#include "dsa/model/weights.hpp"
