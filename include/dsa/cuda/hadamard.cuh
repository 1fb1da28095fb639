// CUDA backend of dsa::hadamard_transform (kernel: kernels/hadamard_kernel.cuh).
//
// Bit-identical to the CPU backend (same fp32 operations in the same order). A row is
// transformed in shared memory, so n * 4 bytes must fit the device's opt-in shared memory per
// block: every 2^m size (up to 128 KB) on sm_80 and sm_90, and the c * 2^m sizes up to
// 40 * 1024 (sm_80) or 28 * 2048 / 12 * 4096 (sm_90). Larger sizes throw dsa::error before any
// launch (docs/decisions.md, "CUDA kernels").
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "dsa/core/backend.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/kernels/hadamard_kernel.cuh"
#include "dsa/cuda/launch.cuh"
#include "dsa/numerics/hadamard.hpp"
#include "dsa/ops/hadamard.hpp"

DSA_NAMESPACE_BEGIN

template <>
struct op_impl<cuda_backend, hadamard_transform_op> {
  template <class T>
  static void run(const cuda_backend& be, tensor_view<const T, 2, device_space> x, tensor_view<T, 2, device_space> y,
                  float scale) {
    const index_t n = x.extent(1);
    const index_t row_bytes = n * static_cast<index_t>(sizeof(float));
    const index_t limit = cuda_detail::max_dynamic_shared_memory();
    const index_t block_bytes = row_bytes + cuda_kernels::hadamard_static_smem_bytes;
    if (block_bytes > limit) {
      fail("hadamard_transform", "x.extent(1)", n,
           "a size whose fp32 row fits the device's shared memory per block on the CUDA backend (" +
               std::to_string(block_bytes) + " bytes with the kernel's own > " + std::to_string(limit) + ")");
    }
    cuda_kernels::hadamard_params<T> p;
    p.x = x.data_handle();
    p.x_row_stride = x.stride(0);
    p.y = y.data_handle();
    p.y_row_stride = y.stride(0);
    p.rows = x.extent(0);
    p.scale = scale;
    p.plan = make_hadamard_plan(n);
    // Short rows are batched so that a block works on about 4096 values (16 KB of shared
    // memory); long rows get a block of their own, and the wider block from 8192 values on.
    p.rows_per_block = static_cast<int>(std::clamp<index_t>(4096 / n, 1, p.rows));
    const index_t smem = static_cast<index_t>(p.rows_per_block) * row_bytes;
    const index_t tiles = (p.rows + p.rows_per_block - 1) / p.rows_per_block;
    if (n >= 8192) {
      launch<1024>(be, p, tiles, smem);
    } else {
      launch<256>(be, p, tiles, smem);
    }
  }

 private:
  template <int Threads, class T>
  static void launch(const cuda_backend& be, const cuda_kernels::hadamard_params<T>& p, index_t tiles, index_t smem) {
    auto* kernel = &cuda_kernels::hadamard_transform_kernel<T, Threads>;
    cuda_detail::allow_dynamic_shared_memory(kernel, smem);
    kernel<<<cuda_detail::grid_blocks(tiles, 1), Threads, static_cast<std::size_t>(smem), be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CUDA_OP_INSTANCES(DSA_HADAMARD_INSTANCES)
