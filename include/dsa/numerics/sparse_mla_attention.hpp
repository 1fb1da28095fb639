// Arithmetic of sparse MLA attention (DESIGN.md §3.5) shared by every backend, beside the online
// softmax (numerics/online_softmax.hpp): which indices are used, and the decode of a 656-byte
// FP8 cache row (format and field accessors: numerics/kv_cache.hpp) straight to fp32 for the
// logits and P·V products.
#pragma once

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/numerics/fp8_quant.hpp"
#include "dsa/numerics/kv_cache.hpp"

DSA_NAMESPACE_BEGIN

/// True when a user-supplied kv index selects a row of a cache with n rows. Any other value
/// (-1 padding, other negatives, >= n) marks an unused entry.
DSA_HOST_DEVICE DSA_FORCEINLINE bool sparse_mla_index_valid(std::int32_t j, index_t n) {
  return j >= 0 && static_cast<index_t>(j) < n;
}

/// Decodes a whole FP8 cache row into 576 fp32 values (latent then RoPE): code · scale in fp32,
/// the bf16 RoPE widened. Equal to the bf16 values of kv_fp8_row_decode (kv_cache_fp8_unpack)
/// whenever code · scale is exact in bf16, which holds for every scale act_quant can produce.
DSA_HOST_DEVICE inline void sparse_mla_fp8_row_to_f32(const std::uint8_t* row, float* out) {
  for (index_t g = 0; g < kv_fp8_num_scales; ++g) {
    const float s = kv_fp8_row_scale(row, g);
    for (index_t j = g * kv_fp8_group; j < (g + 1) * kv_fp8_group; ++j) {
      out[j] = dequantize_e4m3(kv_fp8_row_code(row, j), s);
    }
  }
  for (index_t j = 0; j < kv_rope_dim; ++j) out[kv_latent_dim + j] = kv_fp8_row_rope(row, j).to_float();
}

DSA_NAMESPACE_END
