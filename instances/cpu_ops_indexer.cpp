// The CPU ops compiled once for dsa's own programs (dsa/cpu/op_instances.hpp): the lightning
// indexer, its weights and KL losses, top-k selection and gather.
#include "dsa/cpu/indexer_kl_loss.hpp"
#include "dsa/cpu/indexer_weights.hpp"
#include "dsa/cpu/lightning_indexer.hpp"
#include "dsa/cpu/topk.hpp"

DSA_NAMESPACE_BEGIN
DSA_CPU_LIGHTNING_INDEXER_INSTANCES(DSA_DEFINE_INSTANCE)
DSA_CPU_INDEXER_WEIGHTS_INSTANCES(DSA_DEFINE_INSTANCE)
DSA_CPU_INDEXER_KL_LOSS_INSTANCES(DSA_DEFINE_INSTANCE)
DSA_CPU_TOPK_INSTANCES(DSA_DEFINE_INSTANCE)
DSA_NAMESPACE_END
