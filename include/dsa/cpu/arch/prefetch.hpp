// Software prefetch of a byte range, one request per 64-byte line: for reading, or for writing
// (the line is fetched for ownership, e.g. PREFETCHW, where the target has it). A prefetch never
// faults, so the range may lie beyond the caller's data; form such an address as an integer
// (prefetch_address), since pointer arithmetic past the end of an object is undefined.
#pragma once

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

/// p + bytes as an address to prefetch (no pointer arithmetic).
DSA_FORCEINLINE const void* prefetch_address(const void* p, std::uintptr_t bytes) {
  return reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) + bytes);
}

DSA_FORCEINLINE void prefetch_read(const void* p, index_t bytes) {
  for (index_t b = 0; b < bytes; b += 64) __builtin_prefetch(prefetch_address(p, static_cast<std::uintptr_t>(b)), 0, 3);
}

DSA_FORCEINLINE void prefetch_write(const void* p, index_t bytes) {
  for (index_t b = 0; b < bytes; b += 64) __builtin_prefetch(prefetch_address(p, static_cast<std::uintptr_t>(b)), 1, 3);
}

}  // namespace cpu_detail
DSA_NAMESPACE_END
