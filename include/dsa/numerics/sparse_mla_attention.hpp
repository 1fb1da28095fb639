// Arithmetic of sparse MLA attention (docs/design.md "Sparse MLA attention") shared by every backend, beside the online
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

// ---- split-k (the CUDA backend's FlashMLA-style key splits) -------------------------------------
//
// A token's k index entries can be cut into num_splits contiguous ranges processed by different
// blocks, each producing a partial online-softmax state (max, sum) and an unnormalised fp32
// accumulator, merged afterwards in ascending split order with online_softmax_merge. The CPU
// backend processes all entries in one pass; the two differ only by fp32 rounding (the merge is
// exact in real arithmetic), bounded in docs/decisions.md and tested in
// tests/numerics/test_sparse_mla_split.cpp.

/// Most key splits of one token (the workspace and the combine loop grow with it; FlashMLA's
/// schedulers stay well below).
inline constexpr index_t sparse_mla_max_splits = 64;

/// Half-open range [begin, end) of index entries of one split.
struct sparse_mla_split_range {
  index_t begin = 0;
  index_t end = 0;
};

/// Entries of split `split` (0 <= split < num_splits) of a row of k entries: contiguous ranges of
/// ceil(k / num_splits) entries rounded up to a multiple of `align` (a kernel's key tile), so
/// every split but the last starts on a tile boundary. Trailing splits may be empty; the ranges
/// are disjoint, ascending and cover [0, k).
DSA_HOST_DEVICE DSA_FORCEINLINE sparse_mla_split_range sparse_mla_split(index_t k, index_t num_splits, index_t split,
                                                                       index_t align) {
  const index_t per = (k + num_splits - 1) / num_splits;
  const index_t chunk = (per + align - 1) / align * align;
  sparse_mla_split_range r;
  r.begin = split * chunk < k ? split * chunk : k;
  r.end = r.begin + chunk < k ? r.begin + chunk : k;
  return r;
}

/// Layout of the split-k workspace of s tokens, h heads, d_v output columns and num_splits > 1
/// splits: the partial states (max, sum) as float pairs [num_splits, s, h] from byte 0, then the
/// partial accumulators float [num_splits, s, h, d_v] from `acc_offset` (16-byte aligned).
/// One split needs no workspace (the kernel writes out and lse directly): bytes = 0.
struct sparse_mla_workspace_layout {
  index_t acc_offset = 0;
  index_t bytes = 0;
};

DSA_HOST_DEVICE DSA_FORCEINLINE sparse_mla_workspace_layout sparse_mla_workspace(index_t s, index_t h, index_t d_v,
                                                                                index_t num_splits) {
  sparse_mla_workspace_layout w;
  if (num_splits <= 1) return w;
  const index_t states = num_splits * s * h;
  w.acc_offset = (states * 2 * index_t{4} + 15) / 16 * 16;
  w.bytes = w.acc_offset + states * d_v * index_t{4};
  return w;
}

DSA_NAMESPACE_END
