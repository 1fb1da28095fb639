// What every dsa::model::transformer<Backend> shares, whatever memory its activations live in:
// the forward-call options and callbacks, the declaration of the class template, and the
// argument checks of forward(), so that every backend rejects a bad call with the same message.
//
// Portable: no op implementation, no Eigen, no CUDA (compiles with g++ and nvcc). Part of the
// dsa::model target.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/model/nonfinite.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

/// The reference forward pass (dsa/model/basic_transformer.hpp; include dsa/model/transformer.hpp
/// for the CPU backend, dsa/model/cuda/transformer.hpp for dsa::cuda_backend).
template <class Backend>
class transformer;

/// What an observer sees after each layer of a forward call (host views, valid during the call
/// only; a device transformer copies them to the host first).
struct layer_trace {
  index_t layer = 0;
  index_t start = 0;                         ///< position of the first token of the chunk
  /// [t, selection_width(index_topk, start + t)] selected positions, -1 padded
  host_view<const std::int32_t, 2> topk;
  host_view<const bf16, 2> ffn_out;          ///< [t, hidden] the layer's FFN output
  host_view<const bf16, 2> residual;         ///< [t, hidden] the residual stream it is added to
  /// [t, num_experts_per_tok] the routed experts of each token in slot order (moe_route's ids);
  /// empty (0 x 0) for a dense-FFN layer. A routing near-tie shows here first when two backends
  /// or engines disagree on a layer's FFN output.
  host_view<const std::int32_t, 2> experts;
  /// The index of the sequence in a batched call (0 for forward(seq, tokens)): a batched call
  /// reports each layer once per sequence, with that sequence's rows.
  index_t sequence = 0;
};

/// Progress of a forward call: called after each layer of each chunk (of a batched call: of each
/// round). For one sequence the counts are positions; for a batch, tokens of the call.
struct forward_progress {
  index_t chunk_begin = 0, chunk_end = 0;  ///< the chunk's first position and the one after it
  index_t total_end = 0;                   ///< position after the last token of the call
  index_t layer = 0, num_layers = 0;       ///< layer just finished
};

struct forward_options {
  std::function<void(const layer_trace&)> observer;
  std::function<void(const forward_progress&)> progress;
  /// Longest chunk a prefill is processed in (index scores cost chunk x length floats).
  index_t max_chunk = 4096;
  /// Non-finite logits: a nonfinite_error naming where the values first stopped being finite
  /// (the default), or returned as they are (dsa/model/nonfinite.hpp).
  nonfinite_policy on_nonfinite = nonfinite_policy::error;
  /// The logits of every new token ([t, vocab] per sequence), not only of the last one.
  bool all_logits = false;
};

namespace detail {

/// The checks of transformer::forward(seq, tokens, opt), in the order every backend runs them,
/// before anything is computed or allocated: `seq` was made by this transformer (`owner_id`,
/// `num_layers`), the tokens are non-empty, fit in the sequence and are ids in [0, vocab_size),
/// max_chunk >= 1. Returns the tokens as int32 (the ops' index type).
template <class Seq, class Token>
std::vector<std::int32_t> checked_forward_tokens(const Seq& seq, std::uint64_t owner_id, index_t num_layers,
                                                 index_t vocab_size, std::span<const Token> tokens,
                                                 const forward_options& opt) {
  static_assert(std::is_integral_v<Token>, "dsa::model::transformer::forward: tokens must be integers");
  constexpr std::string_view op = "model::transformer::forward";
  if (seq.owner() != owner_id || seq.num_layers() != num_layers) {
    fail(op, "seq", "a sequence of another transformer", "a sequence made by this transformer's new_sequence()");
  }
  const index_t n = static_cast<index_t>(tokens.size());
  if (n < 1) fail(op, "tokens.size()", n, ">= 1");
  if (n > seq.max_tokens() - seq.length()) {
    fail(op, "tokens.size()", n,
         "at most max_tokens - length = " + std::to_string(seq.max_tokens() - seq.length()) + " (the sequence is full)");
  }
  if (opt.max_chunk < 1) fail(op, "options.max_chunk", opt.max_chunk, ">= 1");
  std::vector<std::int32_t> ids(tokens.size());
  for (index_t i = 0; i < n; ++i) {
    const auto tok = tokens[static_cast<std::size_t>(i)];
    if (tok < 0 || static_cast<std::uint64_t>(tok) >= static_cast<std::uint64_t>(vocab_size)) {
      fail(op, "tokens[" + std::to_string(i) + "]", static_cast<std::int64_t>(tok),
           "a token id in [0, vocab_size = " + std::to_string(vocab_size) + ")");
    }
    ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(tok);
  }
  return ids;
}

/// The check of transformer::new_sequence(max_tokens) beyond the sequence's own (max_tokens >= 1):
/// max_tokens <= max_position_embeddings. Positions past it have no rotary embedding (rope_apply
/// rejects them), and the caches and index scores grow with max_tokens: refused before anything
/// is allocated.
inline void check_new_sequence(index_t max_tokens, index_t max_position_embeddings) {
  if (max_tokens > max_position_embeddings) {
    fail("model::transformer::new_sequence", "max_tokens", max_tokens,
         "<= max_position_embeddings = " + std::to_string(max_position_embeddings) +
             " (the positions the model has a rotary embedding for)");
  }
}

/// layer_trace::experts of a layer: the routed ids [t, num_experts_per_tok] moe_forward wrote to
/// `routed` for an MoE layer, 0 x 0 for a dense one (whose `routed` is stale or empty).
inline host_view<const std::int32_t, 2> routed_experts(const std::vector<std::int32_t>& routed, bool moe_layer,
                                                       index_t t, index_t num_experts_per_tok) {
  return make_view(routed.data(), {moe_layer ? t : 0, moe_layer ? num_experts_per_tok : 0});
}

/// Columns of the top-k selection of a chunk ending at position `end` (exclusive):
/// min(index_topk, end). No token of the chunk has more than `end` causal positions, so wider
/// columns would only hold -1 padding; the selection buffer stays proportional to the positions
/// present, whatever index_topk a config.json claims (issue 14).
inline index_t selection_width(index_t index_topk, index_t end) { return std::min(index_topk, end); }

/// A new transformer's id, unique among the transformers of every backend in the process; its
/// sequences carry it (owner()), so forward() can reject a sequence of another transformer.
inline std::uint64_t next_transformer_id() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1);
}

/// Calls chunk(begin, end, last) over [0, n) in consecutive pieces of at most max_chunk tokens
/// (how forward() splits a long prefill); `last` is true for the piece that ends at n.
template <class Chunk>
void for_each_chunk(index_t n, index_t max_chunk, Chunk&& chunk) {
  for (index_t b = 0; b < n; b += max_chunk) {
    const index_t e = std::min(n, b + max_chunk);
    chunk(b, e, e == n);
  }
}

/// The positions start .. start + t - 1 of a chunk, as int32 (the ops' index type).
inline std::vector<std::int32_t> chunk_positions(index_t start, index_t t) {
  std::vector<std::int32_t> positions(static_cast<std::size_t>(t));
  for (index_t i = 0; i < t; ++i) positions[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(start + i);
  return positions;
}

}  // namespace detail
}  // namespace model
DSA_NAMESPACE_END
