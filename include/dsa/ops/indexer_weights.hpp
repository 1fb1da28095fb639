// The lightning indexer's per-head weights w [m, H] (the `w` input of lightning_indexer_scores),
// folded as DeepSeek-V3.2's reference does (numerics/indexer_weights.hpp):
//   w[t, h] = fl32(fl32(fl32(proj[t, h] · head_scale) · q_scale[t, h]) · dim_scale)
// proj = weights_proj · x in fp32, head_scale = index_n_heads^-0.5, q_scale = the act_quant scale
// of q[t, h], dim_scale = index_head_dim^-0.5 (the reference's softmax_scale).
#pragma once

#include <cmath>
#include <string_view>

#include "dsa/core/backend.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/op_instances.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/numerics/indexer_weights.hpp"
#include "dsa/ops/dense_checks.hpp"

DSA_NAMESPACE_BEGIN

struct lightning_indexer_weights_op {};

/// proj, q_scale and w are [m, H] fp32; w may be exactly proj's memory (in place). The scales
/// must be finite and > 0.
template <backend B>
void lightning_indexer_weights(const B& be, in_view<B, float, 2> proj, in_view<B, float, 2> q_scale, out_view<B, float, 2> w,
                     float head_scale, float dim_scale) {
  constexpr std::string_view op = "lightning_indexer_weights";
  detail::check_operand(op, "proj", proj);
  detail::check_operand(op, "q_scale", q_scale);
  detail::check_operand(op, "w", w);
  check(std::isfinite(head_scale) && head_scale > 0.0f, op, "head_scale", head_scale, "a finite value > 0");
  check(std::isfinite(dim_scale) && dim_scale > 0.0f, op, "dim_scale", dim_scale, "a finite value > 0");
  check_extent(op, "q_scale", q_scale, 0, proj.extent(0), "proj.extent(0), tokens");
  check_extent(op, "q_scale", q_scale, 1, proj.extent(1), "proj.extent(1), heads");
  check_extent(op, "w", w, 0, proj.extent(0), "proj.extent(0), tokens");
  check_extent(op, "w", w, 1, proj.extent(1), "proj.extent(1), heads");
  detail::check_disjoint_rows(op, "w", w);
  detail::check_no_overlap(op, "w", w, "proj", proj, true);
  detail::check_no_overlap(op, "w", w, "q_scale", q_scale, false);
  if (w.empty()) return;
  dispatch<lightning_indexer_weights_op>(be, proj, q_scale, w, head_scale, dim_scale);
}

DSA_NAMESPACE_END

// The type combinations dsa's own programs compile once per backend (dsa/core/op_instances.hpp).
#define DSA_INDEXER_WEIGHTS_INSTANCES(X, B) \
  X(void lightning_indexer_weights<B>(const B&, in_view<B, float, 2>, in_view<B, float, 2>, out_view<B, float, 2>, float, float))
