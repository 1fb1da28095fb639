// CUDA backend of topk_indices, topk_indices_paged and gather_rows (kernels:
// kernels/topk_kernel.cuh). Top-k runs one block per row with a shared-memory histogram and needs
// no workspace; the workspace overload of topk_indices splits a few long rows (decode: one row of
// up to 128K+ keys per sequence) over many blocks, which keep their merged histograms and counts
// in the workspace (dsa/numerics/topk_split.hpp). The outputs are integers identical to the CPU
// backend's for every input the front-end accepts, whichever kernel runs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/kernels/topk_kernel.cuh"
#include "dsa/cuda/launch.cuh"
#include "dsa/ops/topk.hpp"

DSA_NAMESPACE_BEGIN

namespace cuda_detail {

/// Threads per top-k block: 1024 from 64K columns on (rows that long are few and wide), else 256.
inline constexpr int topk_threads_small = 256;
inline constexpr int topk_threads_large = 1024;

inline cuda_kernels::topk_params make_topk_params(tensor_view<const float, 2, device_space> scores,
                                                  tensor_view<const std::int32_t, 2, device_space> ranges, index_t k,
                                                  tensor_view<std::int32_t, 2, device_space> out) {
  cuda_kernels::topk_params p;
  p.scores = scores.data_handle();
  p.score_row_stride = scores.stride(0);
  p.ranges = ranges.data_handle();
  p.range_row_stride = ranges.stride(0);
  p.rows = scores.extent(0);
  p.n = scores.extent(1);
  p.k = k;
  p.out = out.data_handle();
  p.out_row_stride = out.stride(0);
  return p;
}

inline void launch_topk(const cuda_backend& be, const cuda_kernels::topk_params& p) {
  if (p.rows == 0) return;
  if (p.n >= 65536) {
    cuda_kernels::topk_kernel<topk_threads_large>
        <<<grid_blocks(p.rows, 1), topk_threads_large, 0, be.stream>>>(p);
  } else {
    cuda_kernels::topk_kernel<topk_threads_small>
        <<<grid_blocks(p.rows, 1), topk_threads_small, 0, be.stream>>>(p);
  }
  DSA_CUDA_CHECK_LAUNCH();
}

/// The split top-k (kernels/topk_kernel.cuh) over a workspace of topk_indices_workspace_size
/// bytes: a zeroed histogram region, the four radix passes, the counts, the emission. Six
/// launches and a memset, none of which waits for the host.
inline void launch_topk_split(const cuda_backend& be, const cuda_kernels::topk_params& row,
                              tensor_view<std::byte, 1, device_space> workspace) {
  cuda_kernels::topk_split_params p;
  p.row = row;
  p.chunks = topk_split_chunks(row.n);
  const index_t hist_bytes = topk_split_histogram_bytes(row.rows);
  p.histograms = reinterpret_cast<std::uint32_t*>(workspace.data_handle());
  p.counts = reinterpret_cast<std::uint32_t*>(workspace.data_handle() + hist_bytes);
  DSA_CUDA_CHECK(cudaMemsetAsync(p.histograms, 0, static_cast<std::size_t>(hist_bytes), be.stream));
  const dim3 grid(static_cast<unsigned>(p.chunks), static_cast<unsigned>(row.rows));
  constexpr int threads = cuda_kernels::topk_split_threads;
  for (int pass = 0; pass < topk_radix_passes; ++pass) {
    cuda_kernels::topk_split_histogram_kernel<threads><<<grid, threads, 0, be.stream>>>(p, pass);
    DSA_CUDA_CHECK_LAUNCH();
  }
  cuda_kernels::topk_split_count_kernel<threads><<<grid, threads, 0, be.stream>>>(p);
  DSA_CUDA_CHECK_LAUNCH();
  cuda_kernels::topk_split_emission_kernel<threads><<<grid, threads, 0, be.stream>>>(p);
  DSA_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda_detail

template <>
struct op_impl<cuda_backend, topk_indices_op> {
  static void run(const cuda_backend& be, tensor_view<const float, 2, device_space> scores,
                  tensor_view<const std::int32_t, 2, device_space> ranges, index_t k,
                  tensor_view<std::int32_t, 2, device_space> indices) {
    cuda_detail::launch_topk(be, cuda_detail::make_topk_params(scores, ranges, k, indices));
  }
  // With a workspace: a few long rows split over many blocks (topk_split_applies), the same
  // indices as the one-block kernel; every other shape runs that kernel.
  static void run(const cuda_backend& be, tensor_view<const float, 2, device_space> scores,
                  tensor_view<const std::int32_t, 2, device_space> ranges, index_t k,
                  tensor_view<std::int32_t, 2, device_space> indices, tensor_view<std::byte, 1, device_space> workspace) {
    const cuda_kernels::topk_params p = cuda_detail::make_topk_params(scores, ranges, k, indices);
    if (topk_split_applies(p.rows, p.n)) {
      cuda_detail::launch_topk_split(be, p, workspace);
    } else {
      cuda_detail::launch_topk(be, p);
    }
  }
};

template <>
struct op_impl<cuda_backend, topk_indices_paged_op> {
  static void run(const cuda_backend& be, tensor_view<const float, 2, device_space> scores,
                  tensor_view<const std::int32_t, 2, device_space> ranges, index_t k,
                  tensor_view<const std::int32_t, 2, device_space> block_table, index_t block_size,
                  tensor_view<std::int32_t, 2, device_space> slots) {
    cuda_kernels::topk_params p = cuda_detail::make_topk_params(scores, ranges, k, slots);
    p.block_table = block_table.data_handle();
    p.table_row_stride = block_table.stride(0);
    p.max_blocks = block_table.extent(1);
    p.block_size = block_size;
    cuda_detail::launch_topk(be, p);
  }
};

template <>
struct op_impl<cuda_backend, gather_rows_op> {
  template <class T>
  static void run(const cuda_backend& be, tensor_view<const T, 2, device_space> src,
                  tensor_view<const std::int32_t, 2, device_space> indices, tensor_view<T, 3, device_space> dst) {
    const index_t row_bytes = src.extent(1) * static_cast<index_t>(sizeof(T));
    if (indices.empty() || row_bytes == 0) return;
    // Whole rows as 16-byte words when every row start and length allow it (cache rows of 656
    // bytes, bf16 rows of 576 values, ...), else element by element.
    const auto aligned = [](const void* ptr, index_t stride_elems) {
      return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0 &&
             (stride_elems * static_cast<index_t>(sizeof(T))) % 16 == 0;
    };
    const bool vector = row_bytes % 16 == 0 && aligned(src.data_handle(), src.stride(0)) &&
                        aligned(dst.data_handle(), dst.stride(0)) && aligned(dst.data_handle(), dst.stride(1));
    if (vector) {
      cuda_kernels::gather_params<uint4> p;
      p.src = reinterpret_cast<const uint4*>(src.data_handle());
      p.src_row_stride = src.stride(0) * static_cast<index_t>(sizeof(T)) / 16;
      p.dst = reinterpret_cast<uint4*>(dst.data_handle());
      p.dst_stride0 = dst.stride(0) * static_cast<index_t>(sizeof(T)) / 16;
      p.dst_stride1 = dst.stride(1) * static_cast<index_t>(sizeof(T)) / 16;
      p.d = row_bytes / 16;
      launch(be, p, src.extent(0), indices);
    } else {
      cuda_kernels::gather_params<T> p;
      p.src = src.data_handle();
      p.src_row_stride = src.stride(0);
      p.dst = dst.data_handle();
      p.dst_stride0 = dst.stride(0);
      p.dst_stride1 = dst.stride(1);
      p.d = src.extent(1);
      launch(be, p, src.extent(0), indices);
    }
  }

 private:
  template <class U>
  static void launch(const cuda_backend& be, cuda_kernels::gather_params<U> p, index_t n,
                     tensor_view<const std::int32_t, 2, device_space> indices) {
    constexpr int threads = 256;
    p.n = n;
    p.indices = indices.data_handle();
    p.index_row_stride = indices.stride(0);
    p.m = indices.extent(0);
    p.k = indices.extent(1);
    cuda_kernels::gather_rows_kernel<U, threads>
        <<<cuda_detail::grid_blocks(p.m * p.k, threads / 32), threads, 0, be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CUDA_OP_INSTANCES(DSA_TOPK_INSTANCES)
