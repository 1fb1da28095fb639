// CUDA backend of sparse_mla_attention over the bf16 and the FP8 kv cache. Two kernels compute
// the attention: the exact SIMT kernel (kernels/sparse_mla_attention_kernel.cuh), the validation
// reference, and the tensor-core one (kernels/sparse_mla_attention_fast_kernel.cuh), which runs
// when cuda_backend::kernels is cuda_kernel_path::fast, the device has mma.sync and
// the call is one it holds (kernel_choice.hpp: d_qk a multiple of 64 up to 576, d_v a multiple of
// 32 up to 512, 16-byte aligned q and cache rows); the exact kernel runs every other call.
//
// config.num_splits = 1 runs one kernel that writes out and lse directly (no workspace: the
// workspace-less overloads). More splits need the workspace overload: the attention kernel writes
// each split's partial state to the workspace and a combine kernel merges them in ascending split
// order (sparse_mla_attention_workspace_size, sparse_mla_attention_num_splits in
// ops/sparse_mla_attention.hpp). probs, when requested, is a third kernel that needs the final
// lse (the exact kernel's, after either attention kernel). All on be.stream, without allocation
// or synchronisation.
//
// Limits of the exact kernels (dsa::error before any launch): d_v <= 512, and the head group's
// queries plus a tile of 32 rows in fp32 must fit the device's shared memory: (48 · d_qk + 512) ·
// 4 bytes + 320 (110 KB for V3.2's d_qk = 576, so sm_80 / sm_90 and not the 99 KB of sm_86 /
// sm_89). The fast kernel needs 157 KB (one K tile) or 195-226 KB (prefetching) at d_qk = 576.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "dsa/core/backend.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/kernel_choice.hpp"
#include "dsa/cuda/kernels/sparse_mla_attention_fast_kernel.cuh"
#include "dsa/cuda/kernels/sparse_mla_attention_kernel.cuh"
#include "dsa/cuda/launch.cuh"
#include "dsa/ops/sparse_mla_attention.hpp"

DSA_NAMESPACE_BEGIN

namespace cuda_detail {

/// Most dynamic shared memory any supported GPU lets a block opt into (sm_90: 227 KB); larger
/// requests fail before the device is queried.
inline constexpr index_t sparse_mla_smem_ceiling = 227 * 1024;

template <class O>
cuda_kernels::sparse_mla_params<O> make_sparse_mla_params(tensor_view<const bf16, 3, device_space> q,
                                                          tensor_view<const std::int32_t, 2, device_space> indices,
                                                          tensor_view<O, 3, device_space> out,
                                                          tensor_view<float, 2, device_space> lse,
                                                          const sparse_mla_config& cfg,
                                                          tensor_view<float, 2, device_space> probs) {
  cuda_kernels::sparse_mla_params<O> p;
  p.q = q.data_handle();
  p.q_stride0 = q.stride(0);
  p.q_stride1 = q.stride(1);
  p.indices = indices.data_handle();
  p.index_row_stride = indices.stride(0);
  p.s = q.extent(0);
  p.h = q.extent(1);
  p.d_qk = q.extent(2);
  p.d_v = cfg.d_v;
  p.k = indices.extent(1);
  p.scale = cfg.softmax_scale;
  p.num_splits = cfg.num_splits;
  p.out = out.data_handle();
  p.out_stride0 = out.stride(0);
  p.out_stride1 = out.stride(1);
  p.lse = lse.data_handle();
  p.lse_stride = lse.stride(0);
  if (!probs.is_absent()) {
    p.probs = probs.data_handle();
    p.probs_stride = probs.stride(0);
  }
  return p;
}

// The kernels' own limits, checked before any CUDA call; returns the dynamic shared memory.
inline index_t check_sparse_mla_cuda_limits(index_t d_qk, index_t d_v) {
  constexpr const char* op = detail::sparse_mla_op_name;
  check(d_v <= cuda_kernels::sparse_mla_max_dv, op, "config.d_v", d_v,
        "at most " + std::to_string(cuda_kernels::sparse_mla_max_dv) + " on the CUDA backend");
  const index_t smem = cuda_kernels::sparse_mla_smem_bytes(d_qk);
  constexpr index_t static_bytes = cuda_kernels::sparse_mla_static_smem_bytes;
  check(smem + static_bytes <= sparse_mla_smem_ceiling, op, "q.extent(2)", d_qk,
        "at most " + std::to_string(((sparse_mla_smem_ceiling - static_bytes) / 4 - 512) / 48) +
            " on the CUDA backend (a tile of rows in shared memory)");
  return smem;
}

/// The tensor-core kernel over every (token, 64-head group, split) item.
template <bool Fp8, bool Prefetch, class O>
void launch_sparse_mla_fast(const cuda_backend& be, const cuda_kernels::sparse_mla_params<O>& p) {
  const index_t smem = cuda_kernels::mla_fast_smem(static_cast<int>(p.d_qk), Fp8, Prefetch).bytes;
  auto* kernel = cuda_kernels::sparse_mla_attention_fast_kernel<Fp8, Prefetch, O>;
  allow_dynamic_shared_memory(kernel, smem);
  const index_t groups = (p.h + cuda_kernels::mla_fast_heads - 1) / cuda_kernels::mla_fast_heads;
  kernel<<<grid_blocks(p.s * groups * p.num_splits, 1), cuda_kernels::mla_fast_threads,
           static_cast<std::size_t>(smem), be.stream>>>(p);
  DSA_CUDA_CHECK_LAUNCH();
}

/// Which attention kernel serves this call on this device (kernel_choice.hpp).
template <bool Fp8, class O>
sparse_mla_kernel sparse_mla_kernel_for(const cuda_backend& be, const cuda_kernels::sparse_mla_params<O>& p) {
  if (be.kernels != cuda_kernel_path::fast) return sparse_mla_kernel::exact;
  const void* kv = Fp8 ? static_cast<const void*>(p.kv_fp8) : static_cast<const void*>(p.kv);
  const index_t row_bytes = p.kv_row_stride * (Fp8 ? 1 : static_cast<index_t>(sizeof(bf16)));
  sparse_mla_call c;
  c.d_qk = p.d_qk;
  c.d_v = p.d_v;
  c.fp8 = Fp8;
  c.aligned = kv != nullptr && aligned_to(kv, 16) && row_bytes % 16 == 0 && aligned_to(p.q, 16) &&
              p.q_stride0 * static_cast<index_t>(sizeof(bf16)) % 16 == 0 &&
              p.q_stride1 * static_cast<index_t>(sizeof(bf16)) % 16 == 0;
  return choose_sparse_mla_kernel(be.kernels, current_device_caps(), c);
}

template <bool Fp8, class O>
void launch_sparse_mla(const cuda_backend& be, cuda_kernels::sparse_mla_params<O> p,
                       tensor_view<std::byte, 1, device_space> workspace) {
  const index_t smem = check_sparse_mla_cuda_limits(p.d_qk, p.d_v);
  check_kernel_path(detail::sparse_mla_op_name, be.kernels);
  if (p.s == 0 || p.h == 0) return;
  if (p.num_splits > 1) {
    // The front-end checked the workspace's size and alignment.
    const sparse_mla_workspace_layout layout = sparse_mla_workspace(p.s, p.h, p.d_v, p.num_splits);
    p.part_state = reinterpret_cast<float2*>(workspace.data_handle());
    p.part_acc = reinterpret_cast<float*>(workspace.data_handle() + layout.acc_offset);
  }
  const sparse_mla_kernel kernel = sparse_mla_kernel_for<Fp8>(be, p);
  if (kernel == sparse_mla_kernel::exact || (p.probs != nullptr && p.k > 0)) {
    // The exact attention kernel, or the probs kernel after either, holds a tile of fp32 rows.
    const index_t device_max = max_dynamic_shared_memory();
    const index_t block_bytes = smem + cuda_kernels::sparse_mla_static_smem_bytes;
    check(block_bytes <= device_max, detail::sparse_mla_op_name, "q.extent(2)", p.d_qk,
          "a width whose tile (" + std::to_string(block_bytes) + " bytes of shared memory) fits this device's " +
              std::to_string(device_max) + " bytes");
  }
  switch (kernel) {
    case sparse_mla_kernel::fast_prefetch: launch_sparse_mla_fast<Fp8, true>(be, p); break;
    case sparse_mla_kernel::fast_direct: launch_sparse_mla_fast<Fp8, false>(be, p); break;
    case sparse_mla_kernel::exact: {
      const index_t groups = (p.h + cuda_kernels::sparse_mla_heads - 1) / cuda_kernels::sparse_mla_heads;
      auto* attention = cuda_kernels::sparse_mla_attention_kernel<Fp8, O>;
      allow_dynamic_shared_memory(attention, smem);
      attention<<<grid_blocks(p.s * groups * p.num_splits, 1), cuda_kernels::sparse_mla_threads,
                  static_cast<std::size_t>(smem), be.stream>>>(p);
      DSA_CUDA_CHECK_LAUNCH();
      break;
    }
  }
  if (p.num_splits > 1) {
    cuda_kernels::sparse_mla_combine_kernel<O>
        <<<grid_blocks(p.s * p.h, 1), cuda_kernels::sparse_mla_combine_threads, 0, be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  }
  if (p.probs != nullptr && p.k > 0) {
    auto* probs = cuda_kernels::sparse_mla_probs_kernel<Fp8, O>;
    allow_dynamic_shared_memory(probs, smem);
    const index_t tiles = (p.k + cuda_kernels::sparse_mla_tile - 1) / cuda_kernels::sparse_mla_tile;
    probs<<<grid_blocks(p.s * tiles, 1), cuda_kernels::sparse_mla_threads, static_cast<std::size_t>(smem),
            be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace cuda_detail

template <>
struct op_impl<cuda_backend, sparse_mla_attention_op> {
  template <class O>
  static void run(const cuda_backend& be, tensor_view<const bf16, 3, device_space> q,
                  tensor_view<const bf16, 2, device_space> kv, tensor_view<const std::int32_t, 2, device_space> indices,
                  tensor_view<O, 3, device_space> out, tensor_view<float, 2, device_space> lse,
                  const sparse_mla_config& cfg, tensor_view<float, 2, device_space> probs,
                  tensor_view<std::byte, 1, device_space> workspace = {}) {
    cuda_kernels::sparse_mla_params<O> p = cuda_detail::make_sparse_mla_params(q, indices, out, lse, cfg, probs);
    p.kv = kv.data_handle();
    p.kv_row_stride = kv.stride(0);
    p.n = kv.extent(0);
    cuda_detail::launch_sparse_mla<false>(be, p, workspace);
  }
};

template <>
struct op_impl<cuda_backend, sparse_mla_attention_fp8_op> {
  template <class O>
  static void run(const cuda_backend& be, tensor_view<const bf16, 3, device_space> q,
                  tensor_view<const std::uint8_t, 2, device_space> kv_fp8,
                  tensor_view<const std::int32_t, 2, device_space> indices, tensor_view<O, 3, device_space> out,
                  tensor_view<float, 2, device_space> lse, const sparse_mla_config& cfg,
                  tensor_view<float, 2, device_space> probs, tensor_view<std::byte, 1, device_space> workspace = {}) {
    cuda_kernels::sparse_mla_params<O> p = cuda_detail::make_sparse_mla_params(q, indices, out, lse, cfg, probs);
    p.kv_fp8 = kv_fp8.data_handle();
    p.kv_row_stride = kv_fp8.stride(0);
    p.n = kv_fp8.extent(0);
    cuda_detail::launch_sparse_mla<true>(be, p, workspace);
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CUDA_OP_INSTANCES(DSA_SPARSE_MLA_ATTENTION_INSTANCES)
