// The non-finite watch of dsa/model/nonfinite.hpp on the device: each watched point of a layer
// is one kernel that folds the (layer, stage, row) key of every NaN or infinite value into one
// device word with atomicMin, so the word ends holding the chunk's first site in the order of
// computation; the transformer reads it back at the end of the chunk, where it waits anyway.
//
// nvcc only. Part of the dsa::model and dsa::cuda targets.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/launch.cuh"
#include "dsa/cuda/memory.hpp"
#include "dsa/model/nonfinite.hpp"

DSA_NAMESPACE_BEGIN
namespace model {
namespace nonfinite_detail {

/// Grid-stride over x [rows, cols] (row stride `ld` elements), or, with causal_start >= 0, over
/// the causal range [0, causal_start + r + 1) of each row r: every non-finite element's key
/// (`base` = encode(layer, stage, 0) plus its row) is folded into *first with atomicMin.
/// (A template so that the header can be included by several translation units.)
template <class T>
__global__ void watch_kernel(const T* x, index_t rows, index_t cols, index_t ld, index_t causal_start,
                             std::uint64_t base, unsigned long long* first) {
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
    if (bad) atomicMin(first, static_cast<unsigned long long>(base + static_cast<std::uint64_t>(r)));
  }
}

}  // namespace nonfinite_detail

/// The watch of one forward chunk on the device (the host one's interface): each point is one
/// kernel on the stream; first() reads the word back.
template <>
class nonfinite_watch<device_space> {
 public:
  /// The layer being run (set by the transformer before each layer).
  index_t layer = 0;

  explicit nonfinite_watch(const cuda_backend& be) : stream_(be.stream), word_(1, be.stream) {
    DSA_CUDA_CHECK(cudaMemsetAsync(word_.data(), 0xFF, sizeof(unsigned long long), stream_));  // nonfinite_detail::none
  }

  /// A [rows, cols] bf16 activation of the chunk's tokens.
  void watch(device_view<const bf16, 2> x, nonfinite_stage stage) { launch(x, -1, stage); }

  /// Index scores [rows, n] of the tokens at positions first_position + r, in their causal ranges.
  void watch_scores(device_view<const float, 2> s, index_t first_position) {
    launch(s, first_position, nonfinite_stage::index_scores);
  }

  /// The first site's key, nonfinite_detail::none if every watched value was finite.
  /// Synchronises the stream.
  std::uint64_t first() const {
    unsigned long long key = 0;
    DSA_CUDA_CHECK(cudaMemcpyAsync(&key, word_.data(), sizeof key, cudaMemcpyDeviceToHost, stream_));
    DSA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return key;
  }

 private:
  template <class T>
  void launch(device_view<const T, 2> x, index_t causal_start, nonfinite_stage stage) {
    if (x.size() == 0) return;
    constexpr int threads = 256;
    nonfinite_detail::watch_kernel<T><<<cuda_detail::grid_blocks(x.size(), threads * 8), threads, 0, stream_>>>(
        x.data_handle(), x.extent(0), x.extent(1), x.stride(0), causal_start,
        nonfinite_detail::encode(layer, stage, 0), word_.data());
    DSA_CUDA_CHECK(cudaGetLastError());
  }

  cudaStream_t stream_;
  device_buffer<unsigned long long> word_;
};

}  // namespace model
DSA_NAMESPACE_END
