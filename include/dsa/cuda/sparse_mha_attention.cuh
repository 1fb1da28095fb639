// CUDA backend of dsa::sparse_mha_attention (kernel: kernels/sparse_mha_attention_kernel.cuh): a
// block per (token, head), the CPU's two-pass softmax and summation orders with the shared
// numerics. No workspace; index rows longer than 2048 entries recompute their logits per pass.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/kernels/sparse_mha_attention_kernel.cuh"
#include "dsa/cuda/launch.cuh"
#include "dsa/ops/sparse_mha_attention.hpp"

DSA_NAMESPACE_BEGIN

template <>
struct op_impl<cuda_backend, sparse_mha_attention_op> {
  static void run(const cuda_backend& be, tensor_view<const bf16, 3, device_space> q,
                  tensor_view<const bf16, 3, device_space> k_nope, tensor_view<const bf16, 2, device_space> k_rope,
                  tensor_view<const bf16, 3, device_space> v, tensor_view<const std::int32_t, 2, device_space> indices,
                  tensor_view<bf16, 3, device_space> out, const sparse_mha_config& cfg,
                  tensor_view<float, 2, device_space> lse) {
    constexpr int threads = cuda_kernels::sparse_mha_threads;
    cuda_kernels::sparse_mha_params p;
    p.q = q.data_handle();
    p.q_stride0 = q.stride(0);
    p.q_stride1 = q.stride(1);
    p.k_nope = k_nope.data_handle();
    p.k_nope_stride0 = k_nope.stride(0);
    p.k_nope_stride1 = k_nope.stride(1);
    p.k_rope = k_rope.data_handle();
    p.k_rope_stride0 = k_rope.stride(0);
    p.v = v.data_handle();
    p.v_stride0 = v.stride(0);
    p.v_stride1 = v.stride(1);
    p.indices = indices.data_handle();
    p.indices_stride0 = indices.stride(0);
    p.out = out.data_handle();
    p.out_stride0 = out.stride(0);
    p.out_stride1 = out.stride(1);
    if (!lse.is_absent()) {
      p.lse = lse.data_handle();
      p.lse_stride0 = lse.stride(0);
      p.lse_stride1 = lse.stride(1);
    }
    p.s = q.extent(0);
    p.h = q.extent(1);
    p.n = k_nope.extent(0);
    p.k = indices.extent(1);
    p.d_nope = k_nope.extent(2);
    p.d_rope = k_rope.extent(1);
    p.d_v = v.extent(2);
    p.scale = cfg.softmax_scale;
    p.rounding = cfg.rounding;
    cuda_kernels::sparse_mha_kernel<threads>
        <<<cuda_detail::grid_blocks(p.s * p.h, 1), threads, 0, be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CUDA_OP_INSTANCES(DSA_SPARSE_MHA_ATTENTION_INSTANCES)
