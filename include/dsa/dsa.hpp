// Umbrella header: core types, every op's front-end and the CPU backend.
// CUDA users add <dsa/cuda.cuh>; checkpoint loading lives in <dsa/model/...> (target dsa::model).
#pragma once

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"

#include "dsa/ops/fp8_quant.hpp"
#include "dsa/ops/hadamard.hpp"
#include "dsa/ops/indexer_kl_loss.hpp"
#include "dsa/ops/kv_cache.hpp"
#include "dsa/ops/lightning_indexer.hpp"
#include "dsa/ops/moe_routing.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"
#include "dsa/ops/topk.hpp"

#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/cpu/hadamard.hpp"
#include "dsa/cpu/indexer_kl_loss.hpp"
#include "dsa/cpu/kv_cache.hpp"
#include "dsa/cpu/lightning_indexer.hpp"
#include "dsa/cpu/moe_routing.hpp"
#include "dsa/cpu/sparse_mla_attention.hpp"
#include "dsa/cpu/topk.hpp"
