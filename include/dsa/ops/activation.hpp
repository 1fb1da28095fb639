// The SwiGLU activation of DeepSeek's dense MLP and MoE experts: y = silu(gate) * up, computed
// in fp32 and rounded once to bf16. Numerics in dsa/numerics/activation.hpp.
#pragma once

#include <string_view>

#include "dsa/core/backend.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/op_instances.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/activation.hpp"
#include "dsa/ops/dense_checks.hpp"

DSA_NAMESPACE_BEGIN

struct swiglu_op {};

/// y = bf16(fl32(silu(gate) * up)) elementwise over [t, n] bf16 matrices (gate = w1 x, up = w3 x).
/// y may be exactly gate's or up's memory (in place) or must be disjoint from both.
template <backend B>
void swiglu(const B& be, in_view<B, bf16, 2> gate, in_view<B, bf16, 2> up, out_view<B, bf16, 2> y) {
  constexpr std::string_view op = "swiglu";
  detail::check_operand(op, "gate", gate);
  detail::check_operand(op, "up", up);
  detail::check_operand(op, "y", y);
  check_extent(op, "up", up, 0, gate.extent(0), "gate.extent(0)");
  check_extent(op, "up", up, 1, gate.extent(1), "gate.extent(1)");
  check_extent(op, "y", y, 0, gate.extent(0), "gate.extent(0)");
  check_extent(op, "y", y, 1, gate.extent(1), "gate.extent(1)");
  detail::check_disjoint_rows(op, "y", y);
  detail::check_no_overlap(op, "y", y, "gate", gate, true);
  detail::check_no_overlap(op, "y", y, "up", up, true);
  if (y.empty()) return;
  dispatch<swiglu_op>(be, gate, up, y);
}

DSA_NAMESPACE_END

// The type combinations dsa's own programs compile once per backend (dsa/core/op_instances.hpp).
#define DSA_SWIGLU_INSTANCES(X, B) \
  X(void swiglu<B>(const B&, in_view<B, bf16, 2>, in_view<B, bf16, 2>, out_view<B, bf16, 2>))
