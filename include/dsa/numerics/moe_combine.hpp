// The arithmetic of the MoE combine (ops/moe_combine.hpp), shared by the CPU and CUDA backends:
// DeepSeek's `y[idx] += expert(x[idx]) * weights[idx, top]; y += shared_experts(x);
// y.type_as(x)`:
//   acc = +0;  for j = 0 .. k-1 with rows[t, j] >= 0:  acc = fl32(acc + fl32(w[t, j] * e[rows[t, j]]))
//   acc = fl32(acc + shared[t]) when a shared expert is given;  y = bf16(acc)
// Entries are summed in slot order: moe_route returns ascending expert ids, which is the order
// of the reference's loop over experts.
#pragma once

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/fp32_ops.hpp"

DSA_NAMESPACE_BEGIN

/// One routed contribution added to an fp32 accumulator: fl32(acc + fl32(w * e)), never fused.
DSA_HOST_DEVICE DSA_FORCEINLINE float moe_combine_add(float acc, float w, bf16 e) {
  return acc + detail::mul_rn(w, e.to_float());
}

DSA_NAMESPACE_END
