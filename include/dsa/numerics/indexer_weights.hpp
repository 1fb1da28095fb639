// The arithmetic of the lightning indexer's head weights (ops/indexer_weights.hpp), shared by
// the CPU and CUDA backends. DeepSeek-V3.2's reference:
//   weights = weights_proj(x) * n_heads^-0.5;  weights = weights * q_scale * head_dim^-0.5
// evaluated left to right in fp32 with the Python constants rounded to fp32:
//   w = fl32(fl32(fl32(proj * head_scale) * q_scale) * dim_scale)
#pragma once

#include "dsa/core/config.hpp"
#include "dsa/numerics/fp32_ops.hpp"

DSA_NAMESPACE_BEGIN

/// One folded head weight; each product is rounded to fp32 separately (never fused).
DSA_HOST_DEVICE DSA_FORCEINLINE float indexer_head_weight(float proj, float q_scale, float head_scale, float dim_scale) {
  return detail::mul_rn(detail::mul_rn(detail::mul_rn(proj, head_scale), q_scale), dim_scale);
}

DSA_NAMESPACE_END
