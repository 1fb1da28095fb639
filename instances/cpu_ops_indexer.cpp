// The CPU ops compiled once for dsa's own programs (dsa/core/op_instances.hpp), family "indexer"
// (docs/architecture.md, "Op families"): the lightning indexer's scores (contiguous and paged),
// its backward, its head weights and the indexer KL losses.
#include "dsa/cpu/indexer_kl_loss.hpp"
#include "dsa/cpu/indexer_weights.hpp"
#include "dsa/cpu/lightning_indexer.hpp"

DSA_NAMESPACE_BEGIN
DSA_INDEXER_FAMILY_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_CPU_INDEXER_KL_LOSS_ALLOCATING_INSTANCES(DSA_DEFINE_INSTANCE, cpu_backend)
DSA_NAMESPACE_END
