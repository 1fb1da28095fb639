// dsa::model::device_sequence: the per-sequence state of the reference forward pass on the CUDA
// backend, with the caches of dsa::model::sequence (dsa/model/sequence.hpp) in device memory:
// per layer the MLA rows [positions, kv_lora_rank + qk_rope_head_dim] bf16 (the latent after
// kv_norm and its FP8 round trip, then k_pe after RoPE) and the 132-byte indexer key rows.
//
// Same semantics as `sequence`: created by transformer<cuda_backend>::new_sequence(max_tokens),
// advanced by forward(), storage that grows geometrically (capped at max_tokens) as tokens are
// appended, reset() to restart at position 0, and an owner id so that a sequence of another
// transformer is rejected. Growing copies the filled rows into the new buffers on the model's
// stream (cudaMalloc'd buffers: the old ones are released by cudaFree, which waits for the copy).
//
// Host-only C++ (g++ or nvcc); part of the dsa::model and dsa::cuda targets.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/memory.hpp"
#include "dsa/model/sequence.hpp"
#include "dsa/numerics/kv_cache.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

/// The caches of one layer of one device sequence.
class device_layer_cache {
 public:
  device_layer_cache(index_t latent_dim, index_t rope_dim) : latent_(latent_dim), rope_(rope_dim) {}

  index_t latent_dim() const { return latent_; }
  index_t rope_dim() const { return rope_; }
  index_t row_dim() const { return latent_ + rope_; }
  /// Positions the storage holds.
  index_t capacity() const { return capacity_; }

  /// MLA rows [rows, latent + rope] of positions [0, rows) (rows <= capacity()).
  device_view<bf16, 2> mla(index_t rows) { return mla_.view({rows, row_dim()}); }
  device_view<const bf16, 2> mla(index_t rows) const { return mla_.view({rows, row_dim()}); }
  /// Indexer key rows [rows, 132] of positions [0, rows).
  device_view<std::uint8_t, 2> index_keys(index_t rows) { return keys_.view({rows, indexer_cache_row_bytes}); }
  device_view<const std::uint8_t, 2> index_keys(index_t rows) const {
    return keys_.view({rows, indexer_cache_row_bytes});
  }

  /// Makes room for `rows` positions, keeping the first `filled` (copied on `stream`).
  void reserve_rows(index_t rows, index_t filled, cudaStream_t stream) {
    if (rows <= capacity_) return;
    device_buffer<bf16> mla(rows * row_dim());
    device_buffer<std::uint8_t> keys(rows * indexer_cache_row_bytes);
    if (filled > 0) {
      copy(mla.data(), mla_.data(), filled * row_dim(), stream);
      copy(keys.data(), keys_.data(), filled * indexer_cache_row_bytes, stream);
    }
    mla_ = std::move(mla);  // cudaFree of the old buffer waits for the copies
    keys_ = std::move(keys);
    capacity_ = rows;
  }
  std::size_t bytes() const { return mla_.size_bytes() + keys_.size_bytes(); }

 private:
  template <class T>
  static void copy(T* dst, const T* src, index_t count, cudaStream_t stream) {
    DSA_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(count) * sizeof(T), cudaMemcpyDeviceToDevice,
                                   stream));
  }

  index_t latent_, rope_;
  index_t capacity_ = 0;
  device_buffer<bf16> mla_;
  device_buffer<std::uint8_t> keys_;
};

/// One sequence on the device: its length and the caches of every layer. Created by
/// transformer<cuda_backend>::new_sequence(); advanced by its forward().
using device_sequence = basic_sequence<device_layer_cache>;

}  // namespace model
DSA_NAMESPACE_END
