// dsa::model::sequence: the per-sequence state of the reference forward pass, its KV caches.
//
// Per layer and per token it keeps what DeepSeek-V3.2's reference caches:
//   - the MLA row [kv_lora_rank + qk_rope_head_dim] bf16: the latent c after kv_norm and its FP8
//     round trip (1 x 128 groups, the reference's simulation of the FP8 cache), then k_pe after
//     RoPE (not quantized). One row serves both attention modes: its latent part is what the
//     prefill up-projects to per-head keys and values, and the whole row is the shared key of
//     the absorbed decode.
//   - the indexer key row: 132 bytes, 128 e4m3 codes and the fp32 scale (indexer_cache_pack).
// Storage grows with the tokens appended (geometrically, like std::vector), up to the sequence's
// max_tokens; nothing is allocated for positions not yet reached. Sequences are independent:
// any number of them, of any lengths, can be advanced in any interleaving.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/model/nonfinite.hpp"
#include "dsa/numerics/kv_cache.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

/// The caches of one layer of one sequence.
class layer_cache {
 public:
  layer_cache(index_t latent_dim, index_t rope_dim) : latent_(latent_dim), rope_(rope_dim) {}

  index_t latent_dim() const { return latent_; }
  index_t rope_dim() const { return rope_; }
  index_t row_dim() const { return latent_ + rope_; }

  /// MLA rows [rows, latent + rope] (latent c, then k_pe) of positions [0, rows).
  host_view<bf16, 2> mla(index_t rows) { return host_view<bf16, 2>(mla_.data(), {rows, row_dim()}); }
  host_view<const bf16, 2> mla(index_t rows) const {
    return host_view<const bf16, 2>(mla_.data(), {rows, row_dim()});
  }
  /// Indexer key rows [rows, 132] of positions [0, rows).
  host_view<std::uint8_t, 2> index_keys(index_t rows) {
    return host_view<std::uint8_t, 2>(keys_.data(), {rows, indexer_cache_row_bytes});
  }
  host_view<const std::uint8_t, 2> index_keys(index_t rows) const {
    return host_view<const std::uint8_t, 2>(keys_.data(), {rows, indexer_cache_row_bytes});
  }

  /// Makes room for `rows` positions (keeps the contents: all of them, not only the `filled`
  /// ones the device cache copies).
  // The sequence already grows its target geometrically (capped at max_tokens); reserve exactly
  // first so that vector::resize does not double the capacity a second time.
  void reserve_rows(index_t rows, index_t /*filled*/) {
    const auto mla_size = static_cast<std::size_t>(rows * row_dim());
    const auto key_size = static_cast<std::size_t>(rows * indexer_cache_row_bytes);
    mla_.reserve(mla_size);
    mla_.resize(mla_size);
    keys_.reserve(key_size);
    keys_.resize(key_size);
  }
  std::size_t bytes() const { return mla_.capacity() * sizeof(bf16) + keys_.capacity(); }

 private:
  index_t latent_, rope_;
  std::vector<bf16> mla_;
  std::vector<std::uint8_t> keys_;
};

/// The rows a sequence's caches grow to so that `rows` positions fit (rows > reserved): geometric
/// growth from `reserved` (from `rows` the first time), capped at max_tokens.
inline index_t grown_cache_rows(index_t reserved, index_t rows, index_t max_tokens) {
  index_t target = reserved == 0 ? rows : reserved;
  while (target < rows) target *= 2;
  return target > max_tokens ? max_tokens : target;
}

/// One sequence: its length and the caches of every layer (LayerCache: layer_cache here,
/// device_layer_cache in dsa/model/cuda/device_sequence.hpp). Created by
/// transformer::new_sequence(); advanced by transformer::forward().
template <class LayerCache>
class basic_sequence {
 public:
  using layer_cache_type = LayerCache;

  basic_sequence(index_t max_tokens, index_t num_layers, index_t latent_dim, index_t rope_dim, std::uint64_t owner)
      : max_tokens_(max_tokens), owner_(owner) {
    if (max_tokens < 1) fail("model::sequence", "max_tokens", max_tokens, ">= 1");
    layers_.reserve(static_cast<std::size_t>(num_layers));
    for (index_t l = 0; l < num_layers; ++l) layers_.emplace_back(latent_dim, rope_dim);
  }

  /// Tokens processed so far: the next token goes to position length().
  index_t length() const { return length_; }
  /// The most tokens this sequence may hold.
  index_t max_tokens() const { return max_tokens_; }
  /// Cache bytes allocated (grows linearly with length()).
  std::size_t cache_bytes() const {
    std::size_t b = 0;
    for (const auto& l : layers_) b += l.bytes();
    return b;
  }
  index_t num_layers() const { return static_cast<index_t>(layers_.size()); }
  LayerCache& layer(index_t l) { return layers_[static_cast<std::size_t>(l)]; }
  const LayerCache& layer(index_t l) const { return layers_[static_cast<std::size_t>(l)]; }

  /// Forgets every token (keeps the allocation): the sequence restarts at position 0.
  void reset() {
    length_ = 0;
    nonfinite_.reset();
  }

  /// Grows every layer's storage to hold `rows` positions (geometric growth, capped at
  /// max_tokens), keeping the filled ones; `copy` is what the layer cache needs to move them
  /// (the device caches: the stream).
  template <class... Copy>
  void reserve(index_t rows, Copy... copy) {
    if (rows <= reserved_) return;
    const index_t target = grown_cache_rows(reserved_, rows, max_tokens_);
    for (auto& l : layers_) l.reserve_rows(target, length_, copy...);
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
  std::vector<LayerCache> layers_;
};

/// A sequence of the CPU transformer: its caches in host memory.
using sequence = basic_sequence<layer_cache>;

}  // namespace model
DSA_NAMESPACE_END
