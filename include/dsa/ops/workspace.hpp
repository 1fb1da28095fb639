// Validation of the `workspace` argument of the ops that need scratch memory (docs/cuda.md, "No
// implicit allocation"): the caller passes at least the bytes the op's pure size function gives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"

DSA_NAMESPACE_BEGIN
namespace detail {

/// Throws unless `ws` holds at least `need` bytes (`size_call` names the size function in the
/// message), contiguous and 16-byte aligned when it holds any; an absent view is accepted when
/// nothing is needed. Returns whether the workspace holds bytes, i.e. whether the caller must
/// still check it against every other argument for overlap (the kernels write it).
template <class Space>
bool check_workspace(const char* op, const tensor_view<std::byte, 1, Space>& ws, index_t need,
                     const std::string& size_call) {
  if (need == 0 && ws.is_absent()) return false;
  check_valid(op, "workspace", ws);
  check(ws.extent(0) >= need, op, "workspace.extent(0)", ws.extent(0),
        "at least " + size_call + " = " + std::to_string(need) + " bytes");
  if (ws.extent(0) == 0) return false;
  check(ws.stride(0) == 1, op, "workspace.stride(0)", ws.stride(0), "1 (contiguous bytes)");
  check(reinterpret_cast<std::uintptr_t>(ws.data_handle()) % 16 == 0, op, "workspace.data_handle() % 16",
        reinterpret_cast<std::uintptr_t>(ws.data_handle()) % 16, "0 (16-byte aligned)");
  return true;
}

}  // namespace detail
DSA_NAMESPACE_END
