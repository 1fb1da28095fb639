// The grouping of an MoE layer's routed (token, slot) assignments by expert (docs/design.md,
// "FFN"): the layout of the experts' rows that the combine reads, shared by the host grouping
// (group_by_expert, dsa/model/layers/moe.hpp) and the CUDA decode path's grouping kernel
// (dsa/model/cuda/moe.cuh), which computes it without the host.
//
// ids [t, k] (moe_route's expert ids, row-major: slot i is token i / k's (i % k)-th expert) give
//   count[e]    the slots routed to expert e;
//   offset[e]   the first row of expert e: offset[0] = 0, offset[e + 1] = offset[e] + count[e];
//   rank(i)     the slots before slot i routed to its expert;
//   rows[i]     offset[ids[i]] + rank(i), the row holding slot i's expert output;
//   token_of[r] the token whose slot row r holds.
// Slot order is token order (a token's slots are consecutive), so each expert's rows hold its
// tokens ascending, and the same routing gives the same rows on every backend.
//
// The per-element functions below are what the kernel's threads run; they are quadratic in the
// slots (a rank counts the earlier slots), which is what a decode step's few slots want: one
// block, no scan, no host. group_by_expert computes the same layout in one linear pass for any
// number of slots, and tests/model/test_layer_helpers.cpp checks the two agree.
#pragma once

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"

DSA_NAMESPACE_BEGIN

/// Whether a routed id names one of the n experts. moe_route never produces another; the host
/// grouping refuses one (dsa::error); the device grouping, which cannot throw, neither counts nor
/// places it (its row stays -1, which moe_combine skips).
DSA_HOST_DEVICE constexpr bool moe_expert_valid(std::int32_t e, index_t n_experts) {
  return e >= 0 && static_cast<index_t>(e) < n_experts;
}

/// count[e]: the slots of ids[0, slots) routed to expert e.
DSA_HOST_DEVICE inline std::int32_t moe_expert_count(const std::int32_t* ids, index_t slots, index_t e) {
  std::int32_t n = 0;
  for (index_t i = 0; i < slots; ++i) n += ids[i] == e ? 1 : 0;
  return n;
}

/// offset [n_experts + 1] = the exclusive sum of count [n_experts], and active[0, returned) the
/// experts with slots in ascending id (the grouped GEMV's list of experts to run).
DSA_HOST_DEVICE inline std::int32_t moe_expert_offsets(const std::int32_t* count, index_t n_experts,
                                                       std::int32_t* offset, std::int32_t* active) {
  std::int32_t running = 0, n_active = 0;
  for (index_t e = 0; e < n_experts; ++e) {
    offset[e] = running;
    running += count[e];
    if (count[e] > 0) active[n_active++] = static_cast<std::int32_t>(e);
  }
  offset[n_experts] = running;
  return n_active;
}

/// Places slot i: rows[i] = offset[ids[i]] + rank(i) and token_of[rows[i]] = i / k; an id that
/// names no expert leaves rows[i] = -1 and writes no token_of.
DSA_HOST_DEVICE inline void moe_place_slot(const std::int32_t* ids, index_t i, index_t k, index_t n_experts,
                                           const std::int32_t* offset, std::int32_t* rows, std::int32_t* token_of) {
  const std::int32_t e = ids[i];
  if (!moe_expert_valid(e, n_experts)) {
    rows[i] = -1;
    return;
  }
  const std::int32_t r = offset[e] + moe_expert_count(ids, i, e);  // rank: the earlier slots of e
  rows[i] = r;
  token_of[r] = static_cast<std::int32_t>(i / k);
}

DSA_NAMESPACE_END
