// The CUDA ops compiled once for dsa's own programs (dsa/core/op_instances.hpp), family "indexer"
// (docs/architecture.md, "Op families"): the lightning indexer's scores (contiguous and paged),
// its backward, its head weights and the indexer KL losses.
#include "dsa/cuda/indexer_kl_loss.cuh"
#include "dsa/cuda/indexer_weights.cuh"
#include "dsa/cuda/lightning_indexer.cuh"

DSA_NAMESPACE_BEGIN
DSA_INDEXER_FAMILY_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_NAMESPACE_END
