// The routed experts of an MoE decode step on the CUDA backend without the host
// (moe_experts_grouped_on_device, declared in dsa/model/layers/moe.hpp): the grouping by expert
// by one kernel, then the experts' MLPs as grouped decode GEMVs, so that nothing in the step
// waits for the host to learn how many tokens each expert got.
//
//   moe_group_kernel       one block: each thread counts the slots of some experts, one thread
//                          scans the counts into offsets and the list of experts with slots, then
//                          each thread places some slots (dsa/numerics/moe_grouping.hpp, the
//                          layout group_by_expert gives on the host; rows no slot takes keep
//                          token_of -1, which gather_rows reads as zeros);
//   gather_rows            the routed tokens' rows in the grouped order, once for all experts;
//   3 grouped GEMVs        gate_proj and up_proj, swiglu over all rows, then down_proj
//                          (cuda_kernels::fp8_grouped_gemv_kernel: a block per column group and
//                          active expert, that expert's weight from the layer's expert table).
//
// Every row's numbers are fp8_linear's exact decode GEMV's, so with the exact kernels the layer's
// output is the bits of the host grouping's per-expert calls. The fast kernels' fp8_linear may
// run a decode product on the tensor cores instead (dsa/cuda/fp8_linear_plan.hpp); this path keeps
// the GEMV, which streams the few rows' weights at the same bandwidth.
//
// nvcc only; included by dsa/model/cuda/transformer.cuh. Part of the dsa::model and dsa::cuda
// targets.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/linear.cuh"
#include "dsa/model/layers/moe.hpp"
#include "dsa/numerics/moe_grouping.hpp"

DSA_NAMESPACE_BEGIN
namespace model {
namespace detail {

/// Threads of the grouping block. A decode step has at most moe_grouped_max_tokens * top_k slots
/// (64 for DeepSeek-V3.2) and n_routed_experts counts (256): a few loop trips per thread.
inline constexpr int moe_group_threads = 256;

// (A template, as every kernel of a header that several translation units may include.)
template <int Threads>
__global__ void __launch_bounds__(Threads) moe_group_kernel(const std::int32_t* ids, index_t slots, index_t k,
                                                            index_t n_experts, std::int32_t* count, std::int32_t* offset,
                                                            std::int32_t* active, std::int32_t* n_active,
                                                            std::int32_t* rows, std::int32_t* token_of) {
  const index_t tid = threadIdx.x;
  for (index_t e = tid; e < n_experts; e += Threads) count[e] = moe_expert_count(ids, slots, e);
  for (index_t r = tid; r < slots; r += Threads) token_of[r] = -1;
  __syncthreads();  // the block's global writes are visible to all of its threads
  if (tid == 0) *n_active = moe_expert_offsets(count, n_experts, offset, active);
  __syncthreads();
  for (index_t i = tid; i < slots; i += Threads) moe_place_slot(ids, i, k, n_experts, offset, rows, token_of);
}

}  // namespace detail

template <class B>
layer_buffer<B, std::int32_t> moe_experts_grouped_on_device(const layer_context<B>& ctx,
                                                            const basic_moe_weights<typename B::memory_space>& w,
                                                            in_view<B, bf16, 2> x, in_view<B, std::int32_t, 2> ids,
                                                            out_view<B, bf16, 2> expert_out) {
  static_assert(std::is_same_v<B, cuda_backend>, "the grouped decode experts run on the CUDA backend");
  const index_t t = ids.extent(0), k = ids.extent(1), d = x.extent(1), slots = t * k;
  const index_t n_experts = static_cast<index_t>(w.experts.size());
  check(!w.expert_table.is_absent() && w.expert_table.extent(0) == 3 && w.expert_table.extent(1) == n_experts,
        "model::moe_forward", "expert_table.shape", shape_string(w.expert_table),
        "[3, " + std::to_string(n_experts) + "] (the FP8 experts' table of device_weights)");
  check(t <= moe_grouped_max_tokens, "model::moe_forward", "tokens", t,
        "at most " + std::to_string(moe_grouped_max_tokens) + " for the grouped decode experts");
  const index_t max_active = std::min(n_experts, slots);
  auto count = make_buffer<std::int32_t>(ctx, n_experts);
  auto offset = make_buffer<std::int32_t>(ctx, n_experts + 1);
  auto active = make_buffer<std::int32_t>(ctx, std::max<index_t>(max_active, 1));
  auto n_active = make_buffer<std::int32_t>(ctx, 1);
  auto rows = make_buffer<std::int32_t>(ctx, slots);
  auto token_of = make_buffer<std::int32_t>(ctx, slots);
  if (slots == 0 || n_experts == 0) return rows;
  detail::moe_group_kernel<detail::moe_group_threads><<<1, detail::moe_group_threads, 0, ctx.be.stream>>>(
      ids.data_handle(), slots, k, n_experts, count.data(), offset.data(), active.data(), n_active.data(), rows.data(),
      token_of.data());
  DSA_CUDA_CHECK_LAUNCH();

  const index_t inter = w.experts.front().gate_proj.out_features();
  auto xe = make_buffer<bf16>(ctx, slots * d);
  gather_rows(ctx.be, x, std::as_const(token_of).view({1, slots}), xe.view({1, slots, d}));
  auto g = make_buffer<bf16>(ctx, slots * inter), u = make_buffer<bf16>(ctx, slots * inter);
  const fp8_weight_ref* table = w.expert_table.data_handle();
  // One projection (row `projection` of the table: gate, up, down) of every active expert's rows.
  const auto grouped_gemv = [&](const bf16* in, index_t in_features, index_t projection, bf16* out,
                                index_t out_row_stride, index_t out_features) {
    cuda_detail::run_fp8_linear_grouped<bf16, bf16>(ctx.be, in, in_features, table + projection * n_experts,
                                                     offset.data(), active.data(), n_active.data(), max_active, out,
                                                     out_row_stride, in_features, out_features, ctx.act_format);
  };
  grouped_gemv(xe.data(), d, 0, g.data(), inter, inter);  // gate_proj (w1)
  grouped_gemv(xe.data(), d, 1, u.data(), inter, inter);  // up_proj (w3)
  const auto gv = g.view({slots, inter});
  swiglu(ctx.be, in_view<B, bf16, 2>(gv), std::as_const(u).view({slots, inter}), gv);
  grouped_gemv(g.data(), inter, 2, expert_out.data_handle(), expert_out.stride(0), d);  // down_proj (w2)
  return rows;
}

}  // namespace model
DSA_NAMESPACE_END
