// The non-finite watch of dsa/model/nonfinite.hpp on the device: each watched point of a layer
// is one kernel that folds the (layer, stage, row) key of every NaN or infinite value into one
// device word with atomicMin, so the word ends holding the chunk's first site in the order of
// computation; forward() reads it back at the end of the chunk, where it waits anyway
// (enqueue() does not: nothing of it waits).
//
// nvcc only. Part of the dsa::model and dsa::cuda targets.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/launch.cuh"
#include "dsa/cuda/memory.hpp"
#include "dsa/model/cuda/host_copy.cuh"
#include "dsa/model/cuda/layer_memory.hpp"
#include "dsa/model/nonfinite.hpp"

DSA_NAMESPACE_BEGIN
namespace model {
namespace detail {

/// Grid-stride over x [rows, cols] (row stride `ld` elements): the key of every non-finite
/// element, `base` = encode(layer, stage, 0) plus its row within its segment, is folded into its
/// segment's word with atomicMin. With causal_start >= 0 (index scores, one segment), only the
/// causal range [0, causal_start + r + 1) of each row r is read.
/// (A template so that the header can be included by several translation units.)
template <class T>
__global__ void watch_kernel(const T* x, index_t rows, index_t cols, index_t ld, index_t causal_start,
                             std::uint64_t base, const std::int32_t* segment_of, const index_t* first_row,
                             unsigned long long* words) {
  const index_t n = rows * cols;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t r = i / cols, c = i - r * cols;
    if (causal_start >= 0 && c > causal_start + r) continue;
    bool bad;
    if constexpr (sizeof(T) == 2) {
      bad = bf16_bits_nonfinite(x[r * ld + c].bits);
    } else {
      bad = !isfinite(x[r * ld + c]);
    }
    if (!bad) continue;
    const std::int32_t s = segment_of ? segment_of[r] : 0;
    const index_t r0 = first_row ? first_row[s] : 0;
    atomicMin(words + s, static_cast<unsigned long long>(base + static_cast<std::uint64_t>(r - r0)));
  }
}

}  // namespace detail

/// The watch of one round on the device (the host one's interface): each point is one kernel on
/// the stream, folding into one word per segment; first() reads the words back.
template <>
class nonfinite_watch<device_space> {
 public:
  nonfinite_watch(const cuda_backend& be, std::span<const index_t> rows) : stream_(be.stream) {
    const std::size_t n = rows.size() - 1;
    std::vector<std::int32_t> segment_of(static_cast<std::size_t>(rows.back()));
    for (std::size_t s = 0; s < n; ++s) {
      for (index_t r = rows[s]; r < rows[s + 1]; ++r) segment_of[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(s);
    }
    words_ = device_buffer<unsigned long long>(static_cast<index_t>(n), stream_);
    DSA_CUDA_CHECK(cudaMemsetAsync(words_.data(), 0xFF, words_.size_bytes(), stream_));  // detail::none
    // Without waiting where they are small (a decode round's): a graph can capture the copies.
    segment_of_ = layer_memory<cuda_backend>::upload_async(be, std::span<const std::int32_t>(segment_of));
    first_row_ = layer_memory<cuda_backend>::upload_async(be, rows);
  }

  /// The layer being run (set by the transformer before each layer).
  index_t layer = 0;

  /// A [rows, cols] bf16 activation of the round's tokens.
  void watch(device_view<const bf16, 2> x, nonfinite_stage stage) {
    launch(x, -1, stage, segment_of_.data(), first_row_.data(), words_.data());
  }

  /// Index scores [t, n] of segment `segment`, its tokens at positions first_position + r, in
  /// their causal ranges.
  void watch_scores(std::size_t segment, device_view<const float, 2> s, index_t first_position) {
    launch(s, first_position, nonfinite_stage::index_scores, nullptr, nullptr,
           words_.data() + static_cast<std::ptrdiff_t>(segment));
  }

  /// Each segment's first site's key, detail::none where every watched value was
  /// finite. Synchronises the stream.
  std::vector<std::uint64_t> first() const {
    std::vector<unsigned long long> keys(static_cast<std::size_t>(words_.size()));
    copy_to_host(std::span<unsigned long long>(keys), words_, stream_);
    DSA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return std::vector<std::uint64_t>(keys.begin(), keys.end());
  }

 private:
  template <class T>
  void launch(device_view<const T, 2> x, index_t causal_start, nonfinite_stage stage, const std::int32_t* segment_of,
              const index_t* first_row, unsigned long long* words) {
    if (x.size() == 0) return;
    constexpr int threads = 256;
    detail::watch_kernel<T><<<cuda_detail::grid_blocks(x.size(), threads * 8), threads, 0, stream_>>>(
        x.data_handle(), x.extent(0), x.extent(1), x.stride(0), causal_start,
        detail::encode(layer, stage, 0), segment_of, first_row, words);
    DSA_CUDA_CHECK(cudaGetLastError());
  }

  cudaStream_t stream_;
  device_buffer<unsigned long long> words_;
  device_buffer<std::int32_t> segment_of_;
  device_buffer<index_t> first_row_;
};

}  // namespace model
DSA_NAMESPACE_END
