// The CUDA ops compiled once for dsa's own programs (dsa/core/op_instances.hpp): the lightning
// indexer, its weights and KL losses.
#include "dsa/cuda/indexer_kl_loss.cuh"
#include "dsa/cuda/indexer_weights.cuh"
#include "dsa/cuda/lightning_indexer.cuh"

DSA_NAMESPACE_BEGIN
DSA_LIGHTNING_INDEXER_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_INDEXER_WEIGHTS_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_INDEXER_KL_LOSS_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_NAMESPACE_END
