// The SwiGLU feed-forward (DeepSeek `MLP` / `Expert`): w2(bf16(silu(w1 x) * (w3 x))), with every
// projection an FP8 (or bf16) linear rounded to bf16.
#pragma once

#include <vector>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/model/layers/context.hpp"
#include "dsa/model/weights.hpp"
#include "dsa/ops/activation.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

/// y [t, hidden] = down(swiglu(gate(x), up(x))) for x [t, hidden] bf16.
template <class B>
void mlp_forward(const layer_context<B>& ctx, const mlp_weights& w, host_view<const bf16, 2> x, host_view<bf16, 2> y) {
  const index_t t = x.extent(0), inter = w.gate_proj.out_features();
  std::vector<bf16> g(static_cast<std::size_t>(t * inter)), u(g.size());
  const auto gv = make_view(g.data(), {t, inter});
  const auto uv = make_view(u.data(), {t, inter});
  project(ctx, x, w.gate_proj, gv);
  project(ctx, x, w.up_proj, uv);
  swiglu(ctx.be, gv, uv, gv);
  project(ctx, host_view<const bf16, 2>(gv), w.down_proj, y);
}

}  // namespace model
DSA_NAMESPACE_END
