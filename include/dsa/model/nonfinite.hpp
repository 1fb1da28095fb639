// Where a forward pass stopped producing numbers, and what forward() does about it.
//
// Finite weights can still overflow at run time (a weight_scale_inv of 3e38, an indexer
// weights_proj at +-3e38 in bf16): the activations become inf or NaN. The ops propagate NaN to
// exactly the outputs that read it (docs/robustness.md), so such a run ends in non-finite
// logits; these are never a result. forward() watches four points of every layer (the index
// scores in each token's causal range, the attention output, the residual stream after it, the
// FFN / MoE output), remembers per sequence the first (layer, stage, position) where a value
// stopped being finite, and when the logits it returns are not finite it throws nonfinite_error
// naming that site (or, with nonfinite_policy::propagate, returns them and leaves the site in
// sequence::first_nonfinite()). A site with finite logits is possible: index scores that went NaN
// still select positions (NaN ranks first, as in the reference's torch.topk), and the attention
// over them may stay finite; the tools warn about it (docs/robustness.md).
//
// The watch costs one pass over each watched tensor (a few per cent of a layer at the smallest
// widths, far less at real ones) and stops once the sequence has a site.
//
// Portable: no op implementation, no CUDA runtime (compiles with g++ and nvcc). Part of the
// dsa::model target.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

/// What forward() does when the logits it would return are not finite.
enum class nonfinite_policy {
  error,      ///< throw nonfinite_error (the default): a run that went non-finite is not a result
  propagate,  ///< return them; sequence::first_nonfinite() says where they came from
};

/// The points of a layer forward() watches, in the order they are computed.
enum class nonfinite_stage : std::uint32_t {
  index_scores = 0,      ///< the indexer's scores in the token's causal range
  attention_output = 1,  ///< the MLA block's output
  residual_stream = 2,   ///< the bf16 residual after adding it (a sum of finite values can overflow)
  ffn_output = 3,        ///< the dense FFN's or the MoE's output
  logits = 4,            ///< the final norm and lm_head (layer = num_layers)
};

inline const char* to_string(nonfinite_stage s) {
  switch (s) {
    case nonfinite_stage::index_scores: return "index scores";
    case nonfinite_stage::attention_output: return "attention output";
    case nonfinite_stage::residual_stream: return "residual stream";
    case nonfinite_stage::ffn_output: return "FFN output";
    case nonfinite_stage::logits: return "logits";
  }
  return "?";
}

/// The first value of a sequence that was not finite: which layer, which point of it, which
/// token's row.
struct nonfinite_site {
  index_t layer = 0;  ///< 0-based; num_layers for the logits
  nonfinite_stage stage = nonfinite_stage::attention_output;
  index_t position = 0;  ///< the position of the token in the sequence

  std::string to_string() const {
    if (stage == nonfinite_stage::logits) return "the logits of position " + std::to_string(position);
    return "layer " + std::to_string(layer) + "'s " + ::dsa::model::to_string(stage) + " at position " +
           std::to_string(position);
  }
  friend bool operator==(const nonfinite_site&, const nonfinite_site&) = default;
};

/// forward() found non-finite logits (nonfinite_policy::error).
class nonfinite_error : public error {
 public:
  nonfinite_error(const std::string& what, nonfinite_site first) : error(what), site_(first) {}
  /// Where the sequence's values first stopped being finite.
  const nonfinite_site& site() const { return site_; }

 private:
  nonfinite_site site_;
};

namespace detail {

/// A site as one 64-bit key whose unsigned order is the order of computation within a call
/// (layer, then stage, then row): the smallest key of a call is its first site. The device watch
/// keeps it with one atomicMin.
DSA_HOST_DEVICE constexpr std::uint64_t encode(index_t layer, nonfinite_stage stage, index_t row) {
  return (static_cast<std::uint64_t>(layer) << 35) | (static_cast<std::uint64_t>(stage) << 32) |
         static_cast<std::uint64_t>(row);
}
/// No site yet.
inline constexpr std::uint64_t none = ~std::uint64_t{0};

inline nonfinite_site decode(std::uint64_t key, index_t first_position) {
  return {static_cast<index_t>(key >> 35), static_cast<nonfinite_stage>((key >> 32) & 7u),
          first_position + static_cast<index_t>(key & 0xFFFFFFFFu)};
}

/// bf16 bits with an all-ones exponent: inf or NaN.
DSA_HOST_DEVICE constexpr bool bf16_bits_nonfinite(std::uint16_t bits) { return (bits & 0x7F80u) == 0x7F80u; }

}  // namespace detail

/// The watch of one round of a forward call: for each sequence (segment) of the round, the key of
/// its first non-finite value over every watched point. Segment s owns the rows
/// [rows[s], rows[s + 1]) of the round's activations. The host one is here;
/// dsa/model/cuda/nonfinite.cuh has the device one, for the layers' layer_context<Backend>::watch.
template <class Space>
class nonfinite_watch;

template <>
class nonfinite_watch<host_space> {
 public:
  /// `rows`: each segment's first row, then the round's row count (segments + 1 entries). For any
  /// host backend (the device watch takes its backend's stream).
  template <class Backend>
  nonfinite_watch(const Backend&, std::span<const index_t> rows)
      : rows_(rows.begin(), rows.end()), keys_(rows.size() - 1, detail::none) {}

  /// The layer being run (set by the transformer before each layer).
  index_t layer = 0;

  /// A [rows, cols] bf16 activation of the round's tokens.
  void watch(host_view<const bf16, 2> x, nonfinite_stage stage) {
    for (std::size_t s = 0; s < keys_.size(); ++s) {
      if (keys_[s] != detail::none) continue;  // every later key is larger
      for (index_t r = rows_[s]; r < rows_[s + 1]; ++r) {
        const bf16* row = x.row(r);
        bool bad = false;  // branch-free over the row: the all-finite case runs at memory speed
        for (index_t c = 0; c < x.extent(1); ++c) bad |= detail::bf16_bits_nonfinite(row[c].bits);
        if (bad) {
          keys_[s] = detail::encode(layer, stage, r - rows_[s]);
          break;
        }
      }
    }
  }

  /// Index scores [t, n] of segment `segment`, its tokens at positions first_position + r: the
  /// causal range [0, first_position + r + 1) of each row (outside it the scores are -inf by
  /// definition).
  void watch_scores(std::size_t segment, host_view<const float, 2> s, index_t first_position) {
    if (keys_[segment] != detail::none) return;
    for (index_t r = 0; r < s.extent(0); ++r) {
      const float* row = s.row(r);
      const index_t end = std::min(first_position + r + 1, s.extent(1));
      bool bad = false;
      for (index_t c = 0; c < end; ++c) {
        std::uint32_t u;
        std::memcpy(&u, row + c, 4);
        bad |= (u & 0x7F800000u) == 0x7F800000u;
      }
      if (bad) {
        keys_[segment] = detail::encode(layer, nonfinite_stage::index_scores, r);
        return;
      }
    }
  }

  /// Each segment's first site's key (relative to its first row), detail::none where
  /// every watched value was finite.
  std::vector<std::uint64_t> first() const { return keys_; }

 private:
  std::vector<index_t> rows_;
  std::vector<std::uint64_t> keys_;
};

namespace detail {

/// The end of forward(): if `logits` (of the token at `position`) are not all finite, records the
/// logits as the sequence's first non-finite site when it has none, then throws nonfinite_error
/// unless `policy` is propagate. `Seq` is sequence or device_sequence.
template <class Seq>
void check_logits(std::span<const float> logits, Seq& seq, index_t position, index_t num_layers, nonfinite_policy policy) {
  index_t nan = 0, inf = 0;
  for (const float v : logits) {
    nan += std::isnan(v) ? 1 : 0;
    inf += std::isinf(v) ? 1 : 0;
  }
  if (nan == 0 && inf == 0) return;
  if (!seq.first_nonfinite()) seq.note_nonfinite({num_layers, nonfinite_stage::logits, position});
  if (policy == nonfinite_policy::propagate) return;
  const nonfinite_site site = *seq.first_nonfinite();
  throw nonfinite_error(
      error_message("model::transformer::forward", "logits",
                    std::to_string(nan) + " NaN and " + std::to_string(inf) + " infinite of " +
                        std::to_string(logits.size()) + " values (position " + std::to_string(position) + ")",
                    "finite logits; the sequence's values first stopped being finite in " + site.to_string() +
                        " (a weight or scale too large for the arithmetic, or NaN or inf reaching the model; "
                        "forward_options::on_nonfinite = propagate returns such logits)"),
      site);
}

}  // namespace detail
}  // namespace model
DSA_NAMESPACE_END
