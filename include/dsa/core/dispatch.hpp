// From a validated op front-end to the backend's implementation.
#pragma once

#include <utility>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"

DSA_NAMESPACE_BEGIN

/// Calls op_impl<Backend, Op>::run. The front-end has checked every precondition before; the
/// implementation may assume valid shapes.
template <class Op, backend Backend, class... Args>
void dispatch(const Backend& be, Args&&... args) {
  static_assert(has_op_impl<Backend, Op>,
                "dsa: this op has no implementation for this backend in this translation unit; include "
                "<dsa/dsa.hpp> for the CPU backend or <dsa/cuda.cuh> for the CUDA backend");
  op_impl<Backend, Op>::run(be, std::forward<Args>(args)...);
}

DSA_NAMESPACE_END
