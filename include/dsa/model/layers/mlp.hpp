// The SwiGLU feed-forward (DeepSeek `MLP` / `Expert`): w2(bf16(silu(w1 x) * (w3 x))), with every
// projection an FP8 (or bf16) linear rounded to bf16. Any backend.
#pragma once

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/model/layers/context.hpp"
#include "dsa/model/weights.hpp"
#include "dsa/ops/activation.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

/// y [t, hidden] = down(swiglu(gate(x), up(x))) for x [t, hidden] bf16.
template <class B>
void mlp_forward(const layer_context<B>& ctx, const basic_mlp_weights<typename B::memory_space>& w,
                 in_view<B, bf16, 2> x, out_view<B, bf16, 2> y) {
  const index_t t = x.extent(0), inter = w.gate_proj.out_features();
  auto g = make_buffer<bf16>(ctx, t * inter), u = make_buffer<bf16>(ctx, t * inter);
  const auto gv = g.view({t, inter});
  const auto uv = u.view({t, inter});
  project(ctx, x, w.gate_proj, gv);
  project(ctx, x, w.up_proj, uv);
  swiglu(ctx.be, in_view<B, bf16, 2>(gv), in_view<B, bf16, 2>(uv), gv);
  project(ctx, in_view<B, bf16, 2>(gv), w.down_proj, y);
}

}  // namespace model
DSA_NAMESPACE_END
