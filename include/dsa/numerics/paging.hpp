// Page-table arithmetic of the paged KV / indexer caches (vLLM-style block tables), shared by
// every backend: logical position p of a sequence lives in physical slot
//   block_table_row[p / block_size] * block_size + p % block_size.
#pragma once

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"

DSA_NAMESPACE_BEGIN

/// Physical cache slot of logical position p (p >= 0, block_size >= 1). The caller has checked
/// that the block-table entry is a valid block; index_t arithmetic, so no int32 overflow.
DSA_HOST_DEVICE DSA_FORCEINLINE index_t paged_cache_slot(const std::int32_t* block_table_row, index_t block_size,
                                                         index_t p) {
  return static_cast<index_t>(block_table_row[p / block_size]) * block_size + p % block_size;
}

DSA_NAMESPACE_END
