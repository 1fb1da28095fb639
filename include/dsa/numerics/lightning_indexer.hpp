// The arithmetic of the lightning indexer score (docs/design.md "Lightning indexer"), shared by every backend:
//
//   I[t,s] = k_scale[s] · sum_h w[t,h] · ReLU(q[t,h] · k[s])
//
// Normative evaluation order, which the CPU fast path reproduces element for element:
//   1. dot = q[t,h] · k[s] in fp32, i = 0, 1, ..., d-1 sequentially, starting from +0.
//      For e4m3 inputs every product is exact in fp32 (4 + 4 significant bits), so whether the
//      compiler fuses the multiply-add into an FMA cannot change the result of this step.
//   2. ReLU(dot) = dot < 0 ? 0 : dot (NaN propagates rather than being masked).
//   3. acc = sum over h = 0, 1, ..., H-1 sequentially of fl(w[t,h] · ReLU(dot)), starting
//      from +0: the product is rounded to fp32 before the addition, never fused into an FMA
//      (detail::mul_rn), so the result does not depend on -march or contraction flags.
//   4. I = fl(acc · k_scale[s]) (the key scale applied once, after the head sum).
// Every step is therefore a fixed sequence of IEEE fp32 operations: any conforming
// implementation (the CPU kernel, the CUDA kernel) gives the same bits.
//
// Everything here is DSA_HOST_DEVICE, free of exceptions and allocation, so the CUDA kernels
// use the same code. The byte layout of the paged indexer key cache (132 bytes per token) and
// its accessors live in dsa/numerics/kv_cache.hpp.
#pragma once

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/fp32_ops.hpp"

DSA_NAMESPACE_BEGIN

/// ReLU that lets NaN through: a NaN score must stay visible, never turn into a silent 0.
DSA_HOST_DEVICE DSA_FORCEINLINE float lightning_indexer_relu(float x) { return x < 0.0f ? 0.0f : x; }

/// Derivative of ReLU as used by the backward pass: 1 for x > 0, 0 at and below 0.
DSA_HOST_DEVICE DSA_FORCEINLINE bool lightning_indexer_relu_active(float x) { return x > 0.0f; }

/// One head's term of the head sum, fl(w · ReLU(dot)) (steps 2 and 3 of the normative order):
/// the product is rounded on its own, so an implementation that adds it to the running sum
/// cannot fuse the two.
DSA_HOST_DEVICE DSA_FORCEINLINE float lightning_indexer_head_term(float w, float dot) {
  return detail::mul_rn(w, lightning_indexer_relu(dot));
}

/// Physical cache slot of logical position p (>= 0) through one row of a block table with
/// `max_blocks` entries, or -1 when it cannot be followed: the block index is past the row, the
/// entry is negative, or the slot is not below `slots` (the cache rows). Overflow-free for any
/// int32 entry. The paged kernels read device-resident tables, which the front-end cannot check,
/// so every slot they read goes through this (the CPU's checked tables give the same slots:
/// paged_cache_slot).
DSA_HOST_DEVICE DSA_FORCEINLINE index_t lightning_indexer_paged_slot(const std::int32_t* table_row, index_t max_blocks,
                                                                     index_t block_size, index_t p, index_t slots) {
  const index_t b = p / block_size;
  if (b >= max_blocks) return -1;
  const index_t entry = table_row[b];
  // entry * block_size <= slots - 1 keeps the product in range.
  if (entry < 0 || slots <= 0 || entry > (slots - 1) / block_size) return -1;
  const index_t slot = entry * block_size + p % block_size;
  return slot < slots ? slot : -1;
}

/// q · k over d elements in the normative order (sequential, ascending i, fp32). Q and K are
/// float or fp8_e4m3.
template <class Q, class K>
DSA_HOST_DEVICE float lightning_indexer_dot(const Q* q, const K* k, index_t d) {
  float acc = 0.0f;
  for (index_t i = 0; i < d; ++i) acc += to_float(q[i]) * to_float(k[i]);
  return acc;
}

/// One score I[t,s] in the normative order. `q` points at q[t, 0, 0] with `head_stride`
/// elements between heads, `w` at w[t, 0] (unit stride), `k` at k[s, 0].
template <class Q, class K>
DSA_HOST_DEVICE float lightning_indexer_score(const Q* q, index_t head_stride, const float* w, const K* k,
                                              float k_scale, index_t heads, index_t d) {
  float acc = 0.0f;
  for (index_t h = 0; h < heads; ++h) {
    acc += lightning_indexer_head_term(w[h], lightning_indexer_dot(q + h * head_stride, k, d));
  }
  return acc * k_scale;
}

DSA_NAMESPACE_END
