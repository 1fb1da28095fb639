// The MoE combine (un-permute and weighted sum) of DeepSeek-V3.2's MoE block:
//
//   y[t] = bf16( sum_j w[t, j] · expert_out[rows[t, j]]  +  shared[t] )      (fp32 sum)
//
//   expert_out [R, d] bf16:  the routed experts' outputs, one row per (token, expert) assignment,
//                            in whatever order the experts were run (e.g. grouped by expert)
//   rows       [t, k] int32: which row of expert_out holds token t's j-th expert (-1: none)
//   weights    [t, k] fp32:  the routing weights of moe_route
//   shared     [t, d] bf16:  the shared experts' output, or an absent view
//   y          [t, d] bf16
// Order and rounding in numerics/moe_combine.hpp: slot order j = 0..k-1 (moe_route's ascending
// expert ids, the reference's loop order), each product rounded to fp32, then the shared expert.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "dsa/core/backend.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/op_instances.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/moe_combine.hpp"
#include "dsa/ops/dense_checks.hpp"

DSA_NAMESPACE_BEGIN

struct moe_combine_op {};

/// See the top of this header. For host memory every entry of rows is checked to be -1 or a row
/// of expert_out before anything is written.
template <backend B>
void moe_combine(const B& be, in_view<B, bf16, 2> expert_out, in_view<B, std::int32_t, 2> rows,
                 in_view<B, float, 2> weights, in_view<B, bf16, 2> shared, out_view<B, bf16, 2> y) {
  constexpr std::string_view op = "moe_combine";
  detail::check_operand(op, "expert_out", expert_out);
  detail::check_operand(op, "rows", rows);
  detail::check_operand(op, "weights", weights);
  detail::check_operand(op, "y", y);
  const index_t t = y.extent(0);
  const index_t d = y.extent(1);
  const index_t k = rows.extent(1);
  check_extent(op, "rows", rows, 0, t, "y.extent(0), tokens");
  check_extent(op, "weights", weights, 0, t, "y.extent(0), tokens");
  check_extent(op, "weights", weights, 1, k, "rows.extent(1), experts per token");
  check_extent(op, "expert_out", expert_out, 1, d, "y.extent(1), features");
  if (!shared.is_absent()) {
    detail::check_operand(op, "shared", shared);
    check_extent(op, "shared", shared, 0, t, "y.extent(0), tokens");
    check_extent(op, "shared", shared, 1, d, "y.extent(1), features");
    detail::check_no_overlap(op, "y", y, "shared", shared, true);
  }
  detail::check_disjoint_rows(op, "y", y);
  detail::check_no_overlap(op, "y", y, "expert_out", expert_out, false);
  detail::check_no_overlap(op, "y", y, "rows", rows, false);
  detail::check_no_overlap(op, "y", y, "weights", weights, false);
  if constexpr (std::is_same_v<typename B::memory_space, host_space>) {
    const index_t r = expert_out.extent(0);
    for (index_t i = 0; i < t; ++i) {
      for (index_t j = 0; j < k; ++j) {
        const std::int32_t row = rows(i, j);
        if (row != -1 && (row < 0 || row >= r)) {
          fail(op, "rows(" + std::to_string(i) + ", " + std::to_string(j) + ")", row,
               "-1 (no expert) or a row of expert_out in [0, " + std::to_string(r) + ")");
        }
      }
    }
  }
  if (y.empty()) return;
  dispatch<moe_combine_op>(be, expert_out, rows, weights, shared, y);
}

DSA_NAMESPACE_END

// The type combinations dsa's own programs compile once per backend (dsa/core/op_instances.hpp).
#define DSA_MOE_COMBINE_INSTANCES(X, B) \
  X(void moe_combine<B>(const B&, in_view<B, bf16, 2>, in_view<B, std::int32_t, 2>, in_view<B, float, 2>, in_view<B, bf16, 2>, out_view<B, bf16, 2>))
