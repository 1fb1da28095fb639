// The CPU ops compiled once for dsa's own programs (dsa/core/op_instances.hpp): the lightning
// indexer, its weights and KL losses, top-k selection and gather.
#include "dsa/cpu/indexer_kl_loss.hpp"
#include "dsa/cpu/indexer_weights.hpp"
#include "dsa/cpu/lightning_indexer.hpp"
#include "dsa/cpu/topk.hpp"

DSA_NAMESPACE_BEGIN
DSA_LIGHTNING_INDEXER_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_INDEXER_WEIGHTS_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_INDEXER_KL_LOSS_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_CPU_INDEXER_KL_LOSS_ALLOCATING_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_TOPK_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_NAMESPACE_END
