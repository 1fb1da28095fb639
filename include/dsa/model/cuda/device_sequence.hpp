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
#include <optional>
#include <string>
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
class device_sequence {
 public:
  device_sequence(index_t max_tokens, index_t num_layers, index_t latent_dim, index_t rope_dim, std::uint64_t owner)
      : max_tokens_(max_tokens), owner_(owner) {
    if (max_tokens < 1) fail("model::sequence", "max_tokens", max_tokens, ">= 1");
    layers_.reserve(static_cast<std::size_t>(num_layers));
    for (index_t l = 0; l < num_layers; ++l) layers_.emplace_back(latent_dim, rope_dim);
  }

  device_sequence(device_sequence&&) noexcept = default;
  device_sequence& operator=(device_sequence&&) noexcept = default;

  /// Tokens processed so far: the next token goes to position length().
  index_t length() const { return length_; }
  /// The most tokens this sequence may hold.
  index_t max_tokens() const { return max_tokens_; }
  /// Device cache bytes allocated (grows with length()).
  std::size_t cache_bytes() const {
    std::size_t b = 0;
    for (const auto& l : layers_) b += l.bytes();
    return b;
  }
  index_t num_layers() const { return static_cast<index_t>(layers_.size()); }
  device_layer_cache& layer(index_t l) { return layers_[static_cast<std::size_t>(l)]; }
  const device_layer_cache& layer(index_t l) const { return layers_[static_cast<std::size_t>(l)]; }

  /// Forgets every token (keeps the allocation): the sequence restarts at position 0.
  void reset() {
    length_ = 0;
    nonfinite_.reset();
  }

  /// Grows every layer's storage to hold `rows` positions (geometric growth, capped at
  /// max_tokens), copying the filled positions on `stream`.
  void reserve(index_t rows, cudaStream_t stream) {
    if (rows <= reserved_) return;
    const index_t target = grown_cache_rows(reserved_, rows, max_tokens_);
    for (auto& l : layers_) l.reserve_rows(target, length_, stream);
    reserved_ = target;
  }
  /// Marks `n` more positions as filled (called by the forward pass after every layer wrote them).
  void advance(index_t n) { length_ += n; }
  /// The transformer this sequence was created by (sequences are not interchangeable).
  std::uint64_t owner() const { return owner_; }

  /// Where this sequence's values first stopped being finite (dsa/model/nonfinite.hpp), if they
  /// ever did; kept until reset().
  const std::optional<nonfinite_site>& first_nonfinite() const { return nonfinite_; }
  /// Records `site` unless an earlier one is recorded (called by the forward pass).
  void note_nonfinite(const nonfinite_site& site) {
    if (!nonfinite_) nonfinite_ = site;
  }

 private:
  index_t max_tokens_;
  std::uint64_t owner_;
  index_t length_ = 0;
  index_t reserved_ = 0;
  std::optional<nonfinite_site> nonfinite_;
  std::vector<device_layer_cache> layers_;
};

}  // namespace model
DSA_NAMESPACE_END
