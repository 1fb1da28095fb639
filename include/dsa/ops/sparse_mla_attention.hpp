// Sparse MLA attention (docs/design.md "Sparse MLA attention"): MQA-mode attention of every query head over the kv
// rows its token selected, with the latent cache shared by all heads (FlashMLA's sparse decode
// and prefill kernels for DeepSeek-V3.2).
//
//   q        [s, h, d_qk] bf16     (V3.2: d_qk = 576 = 512 latent + 64 rope)
//   kv       [n, d_qk]    bf16, or [n, 656] uint8 FP8 cache rows (format: numerics/kv_cache.hpp)
//   indices  [s, k]       int32: the kv rows token t attends to. An entry that is negative or >= n
//                         is unused (-1 is the padding of top-k). Entries are independent: a row
//                         listed twice counts twice, as in FlashMLA.
//   out      [s, h, d_v]  float or bf16: P · kv[j, :d_v] with P = softmax over the used entries of
//                         softmax_scale · q·kv_j (fp32 logits, online softmax in fp32, out rounded once)
//   lse      [s, h]       natural-log logsumexp of the scaled logits
//   probs    [s, k]       optional: sum over heads of P at each entry (0 for unused entries), the
//                         target distribution (times h) of the indexer's KL loss
//
// A token without any used entry gives out = 0, lse = +inf and probs = 0.
//
// Split-k (config.num_splits > 1): the CUDA backend can cut each token's entries into
// num_splits ranges processed in parallel and merged afterwards (FlashMLA's split-k); this needs
// scratch memory, passed by the overload with a `workspace` argument of at least
// sparse_mla_attention_workspace_size(...) bytes. The result equals the one-split result up to
// fp32 rounding. The CPU backend computes in one pass whatever num_splits says (it needs no
// workspace but accepts and checks one, so the same call compiles for both backends).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "dsa/core/aliasing.hpp"
#include "dsa/core/backend.hpp"
#include "dsa/core/checked_math.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/op_instances.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/numerics/sparse_mla_attention.hpp"
#include "dsa/ops/workspace.hpp"

DSA_NAMESPACE_BEGIN

/// Op tag: sparse MLA attention over a bf16 kv cache [n, d_qk].
struct sparse_mla_attention_op {};
/// Op tag: sparse MLA attention over the 656-byte FP8 kv cache rows of V3.2.
struct sparse_mla_attention_fp8_op {};

struct sparse_mla_config {
  /// Multiplies q·kv before the softmax; must be finite and > 0 (V3.2: d_qk^-0.5 of the
  /// unabsorbed head dim, times mscale^2 with YaRN).
  float softmax_scale = 0.0f;
  /// Output width: out = P · kv[:, :d_v]; 1 <= d_v <= d_qk (512 for the FP8 cache).
  index_t d_v = 512;
  /// Key splits per token, in [1, sparse_mla_max_splits]: 1 (one pass, no workspace), or more
  /// with a workspace (see the top of this header). sparse_mla_attention_num_splits suggests one.
  index_t num_splits = 1;
};

namespace detail {

// sparse_mla_workspace(s, h, d_v, num_splits).bytes (s, h >= 0, d_v >= 1, num_splits in
// [1, sparse_mla_max_splits]), computed with overflow-checked arithmetic on the same formula:
// a quantity of the layout that does not fit index_t throws dsa::error naming `op` and the four
// arguments (`names`).
inline index_t sparse_mla_workspace_bytes(std::string_view op, std::string_view names, index_t s, index_t h,
                                          index_t d_v, index_t num_splits) {
  if (num_splits <= 1) return 0;
  // Appended piece by piece: GCC 12 gives a false -Wrestrict on "(" + std::to_string(...) at -O3.
  std::string values = "(";
  for (const index_t v : {s, h, d_v, num_splits}) {
    if (values.size() > 1) values += ", ";
    values += std::to_string(v);
  }
  values += ')';
  constexpr std::string_view expected =
      "a workspace size (8 * num_splits * s * h, rounded up to 16, + 4 * num_splits * s * h * d_v bytes) that fits "
      "in int64";
  auto mul = [&](index_t a, index_t b) { return checked_mul(a, b, op, names, values, expected); };
  const index_t states = mul(mul(num_splits, s), h);
  const index_t acc_offset = checked_round_up(mul(states, index_t{8}), index_t{16}, op, names, values, expected);
  return checked_add(acc_offset, mul(mul(states, d_v), index_t{4}), op, names, values, expected);
}

}  // namespace detail

/// Bytes of workspace sparse_mla_attention needs for s tokens, h heads, d_v output columns and
/// num_splits key splits: 0 for one split, else 8·S·s·h (the partial (max, sum) pairs, rounded up
/// to 16 bytes) + 4·S·s·h·d_v (the partial fp32 accumulators), S = num_splits. A pure function of
/// its arguments, callable on the host without a device.
inline index_t sparse_mla_attention_workspace_size(index_t s, index_t h, index_t d_v, index_t num_splits) {
  constexpr const char* op = "sparse_mla_attention_workspace_size";
  check(s >= 0, op, "s", s, ">= 0");
  check(h >= 0, op, "h", h, ">= 0");
  check(d_v >= 1, op, "d_v", d_v, ">= 1");
  check(num_splits >= 1 && num_splits <= sparse_mla_max_splits, op, "num_splits", num_splits,
        "a value in [1, " + std::to_string(sparse_mla_max_splits) + "]");
  return detail::sparse_mla_workspace_bytes(op, "(s, h, d_v, num_splits)", s, h, d_v, num_splits);
}

/// A split count for s tokens of h heads and k index entries on a GPU with sm_count
/// multiprocessors: 1 when the s · ceil(h / 16) blocks of 16 heads (the CUDA kernel's head
/// group) already fill every SM twice, else enough splits to do so, each of at least 128 entries,
/// at most sparse_mla_max_splits. Pure; the result only affects speed (and fp32 rounding).
inline index_t sparse_mla_attention_num_splits(index_t s, index_t h, index_t k, index_t sm_count) {
  // Overflow-free for any arguments: a product that does not fit is more blocks than any target.
  if (s <= 0 || h <= 0 || k <= 128) return 1;
  index_t blocks = 0, target = 0;
  if (mul_overflows(s, ceil_div(h, index_t{16}), &blocks)) return 1;
  if (mul_overflows(index_t{2}, sm_count > 0 ? sm_count : index_t{1}, &target)) {
    target = std::numeric_limits<index_t>::max();
  }
  if (blocks >= target) return 1;
  index_t splits = ceil_div(target, blocks);
  splits = std::min(splits, ceil_div(k, index_t{128}));
  return std::clamp<index_t>(splits, 1, sparse_mla_max_splits);
}

namespace detail {

inline constexpr const char* sparse_mla_op_name = "sparse_mla_attention";

// The checks both cache formats share; d_qk is q's last extent.
template <class Space, class O>
void check_sparse_mla_common(const tensor_view<const bf16, 3, Space>& q,
                             const tensor_view<const std::int32_t, 2, Space>& indices,
                             const tensor_view<O, 3, Space>& out, const tensor_view<float, 2, Space>& lse,
                             const sparse_mla_config& cfg, const tensor_view<float, 2, Space>& probs) {
  static_assert(std::is_same_v<O, float> || std::is_same_v<O, bf16>,
                "dsa::sparse_mla_attention: out must be a view of float or dsa::bf16");
  constexpr const char* op = sparse_mla_op_name;
  check_valid(op, "q", q);
  check_valid(op, "indices", indices);
  check_valid(op, "out", out);
  check_valid(op, "lse", lse);
  check_inner_contiguous(op, "q", q);
  check_inner_contiguous(op, "indices", indices);
  check_inner_contiguous(op, "out", out);
  check_inner_contiguous(op, "lse", lse);

  const index_t s = q.extent(0);
  const index_t h = q.extent(1);
  const index_t d_qk = q.extent(2);
  check(d_qk >= 1, op, "q.extent(2)", d_qk, "d_qk >= 1");
  check(std::isfinite(cfg.softmax_scale) && cfg.softmax_scale > 0.0f, op, "config.softmax_scale",
        cfg.softmax_scale, "a finite value > 0");
  check(cfg.d_v >= 1 && cfg.d_v <= d_qk, op, "config.d_v", cfg.d_v,
        "a value in [1, d_qk] = [1, " + std::to_string(d_qk) + "]");
  check(cfg.num_splits >= 1 && cfg.num_splits <= sparse_mla_max_splits, op, "config.num_splits", cfg.num_splits,
        "a value in [1, " + std::to_string(sparse_mla_max_splits) + "]");

  check_extent(op, "indices", indices, 0, s, "q.extent(0), one row per query token");
  check_extent(op, "out", out, 0, s, "q.extent(0), tokens");
  check_extent(op, "out", out, 1, h, "q.extent(1), heads");
  check_extent(op, "out", out, 2, cfg.d_v, "config.d_v");
  check_extent(op, "lse", lse, 0, s, "q.extent(0), tokens");
  check_extent(op, "lse", lse, 1, h, "q.extent(1), heads");
  if (!probs.is_absent()) {
    check_valid(op, "probs", probs);
    check_inner_contiguous(op, "probs", probs);
    check_extent(op, "probs", probs, 0, s, "q.extent(0), tokens");
    check_extent(op, "probs", probs, 1, indices.extent(1), "indices.extent(1), one value per index");
  }
}

// Without a workspace only one split can run.
inline void check_sparse_mla_no_workspace(const sparse_mla_config& cfg) {
  check(cfg.num_splits == 1, sparse_mla_op_name, "config.num_splits", cfg.num_splits,
        "1 without a workspace (pass a workspace of sparse_mla_attention_workspace_size(...) bytes to split)");
}

// The workspace of the split-k overloads (check_workspace, sized for config.num_splits), disjoint
// from every other argument.
template <class Space, class O, class KV>
void check_sparse_mla_workspace(const tensor_view<std::byte, 1, Space>& ws, const tensor_view<const bf16, 3, Space>& q,
                                const tensor_view<const KV, 2, Space>& kv,
                                const tensor_view<const std::int32_t, 2, Space>& indices,
                                const tensor_view<O, 3, Space>& out, const tensor_view<float, 2, Space>& lse,
                                const sparse_mla_config& cfg, const tensor_view<float, 2, Space>& probs) {
  constexpr const char* op = sparse_mla_op_name;
  const index_t need = sparse_mla_workspace_bytes(op, "(q.extent(0), q.extent(1), config.d_v, config.num_splits)",
                                                 q.extent(0), q.extent(1), cfg.d_v, cfg.num_splits);
  if (!check_workspace(op, ws, need, "sparse_mla_attention_workspace_size(s, h, d_v, num_splits)")) return;
  check_no_overlap(op, "workspace", ws, "q", q, false);
  check_no_overlap(op, "workspace", ws, "kv", kv, false);
  check_no_overlap(op, "workspace", ws, "indices", indices, false);
  check_no_overlap(op, "workspace", ws, "out", out, false);
  check_no_overlap(op, "workspace", ws, "lse", lse, false);
  check_no_overlap(op, "workspace", ws, "probs", probs, false);
}

template <class Space, class O>
void check_sparse_mla_bf16(const tensor_view<const bf16, 3, Space>& q, const tensor_view<const bf16, 2, Space>& kv,
                           const tensor_view<const std::int32_t, 2, Space>& indices,
                           const tensor_view<O, 3, Space>& out, const tensor_view<float, 2, Space>& lse,
                           const sparse_mla_config& cfg, const tensor_view<float, 2, Space>& probs) {
  constexpr const char* op = detail::sparse_mla_op_name;
  detail::check_sparse_mla_common(q, indices, out, lse, cfg, probs);
  check_valid(op, "kv", kv);
  check_inner_contiguous(op, "kv", kv);
  check_extent(op, "kv", kv, 1, q.extent(2), "q.extent(2), d_qk");
  detail::check_disjoint_rows(op, "out", out);
  detail::check_no_overlap(op, "out", out, "q", q, false);
  detail::check_no_overlap(op, "out", out, "kv", kv, false);
  detail::check_no_overlap(op, "out", out, "indices", indices, false);
  detail::check_disjoint_rows(op, "lse", lse);
  detail::check_no_overlap(op, "lse", lse, "q", q, false);
  detail::check_no_overlap(op, "lse", lse, "kv", kv, false);
  detail::check_no_overlap(op, "lse", lse, "indices", indices, false);
  detail::check_no_overlap(op, "lse", lse, "out", out, false);
  detail::check_disjoint_rows(op, "probs", probs);
  detail::check_no_overlap(op, "probs", probs, "q", q, false);
  detail::check_no_overlap(op, "probs", probs, "kv", kv, false);
  detail::check_no_overlap(op, "probs", probs, "indices", indices, false);
  detail::check_no_overlap(op, "probs", probs, "out", out, false);
  detail::check_no_overlap(op, "probs", probs, "lse", lse, false);
}

}  // namespace detail

/// Sparse MLA attention over a bf16 cache kv [n, d_qk]; see the top of this header.
/// O is float or bf16. Throws dsa::error on any shape, stride or configuration mismatch, and
/// unless config.num_splits is 1 (splitting needs the workspace overload).
template <backend B, class O>
void sparse_mla_attention(const B& be, in_view<B, bf16, 3> q, in_view<B, bf16, 2> kv,
                          in_view<B, std::int32_t, 2> indices, out_view<B, O, 3> out, out_view<B, float, 2> lse,
                          const sparse_mla_config& cfg, out_view<B, float, 2> probs = {}) {
  detail::check_sparse_mla_bf16(q, kv, indices, out, lse, cfg, probs);
  detail::check_sparse_mla_no_workspace(cfg);
  dispatch<sparse_mla_attention_op>(be, q, kv, indices, out, lse, cfg, probs);
}

/// The same with scratch memory for config.num_splits > 1 key splits: `workspace` holds at least
/// sparse_mla_attention_workspace_size(s, h, d_v, num_splits) bytes (none for one split; an
/// absent view is then accepted), 16-byte aligned, disjoint from every other argument.
template <backend B, class O>
void sparse_mla_attention(const B& be, in_view<B, bf16, 3> q, in_view<B, bf16, 2> kv,
                          in_view<B, std::int32_t, 2> indices, out_view<B, O, 3> out, out_view<B, float, 2> lse,
                          const sparse_mla_config& cfg, out_view<B, std::byte, 1> workspace,
                          out_view<B, float, 2> probs = {}) {
  detail::check_sparse_mla_bf16(q, kv, indices, out, lse, cfg, probs);
  detail::check_sparse_mla_workspace(workspace, q, kv, indices, out, lse, cfg, probs);
  dispatch<sparse_mla_attention_op>(be, q, kv, indices, out, lse, cfg, probs, workspace);
}

namespace detail {

template <class Space, class O>
void check_sparse_mla_fp8(const tensor_view<const bf16, 3, Space>& q,
                          const tensor_view<const std::uint8_t, 2, Space>& kv_fp8,
                          const tensor_view<const std::int32_t, 2, Space>& indices,
                          const tensor_view<O, 3, Space>& out, const tensor_view<float, 2, Space>& lse,
                          const sparse_mla_config& cfg, const tensor_view<float, 2, Space>& probs) {
  constexpr const char* op = detail::sparse_mla_op_name;
  check_valid(op, "q", q);
  check_extent(op, "q", q, 2, kv_dim, "512 latent + 64 rope values, the FP8 cache layout");
  check(cfg.d_v == kv_latent_dim, op, "config.d_v", cfg.d_v, "512 (the latent width of the FP8 cache)");
  detail::check_sparse_mla_common(q, indices, out, lse, cfg, probs);
  check_valid(op, "kv_fp8", kv_fp8);
  check_inner_contiguous(op, "kv_fp8", kv_fp8);
  check_extent(op, "kv_fp8", kv_fp8, 1, kv_fp8_row_bytes,
               "bytes per FP8 cache row: 512 e4m3 + 4 fp32 scales + 64 bf16");
  detail::check_disjoint_rows(op, "out", out);
  detail::check_no_overlap(op, "out", out, "q", q, false);
  detail::check_no_overlap(op, "out", out, "kv_fp8", kv_fp8, false);
  detail::check_no_overlap(op, "out", out, "indices", indices, false);
  detail::check_disjoint_rows(op, "lse", lse);
  detail::check_no_overlap(op, "lse", lse, "q", q, false);
  detail::check_no_overlap(op, "lse", lse, "kv_fp8", kv_fp8, false);
  detail::check_no_overlap(op, "lse", lse, "indices", indices, false);
  detail::check_no_overlap(op, "lse", lse, "out", out, false);
  detail::check_disjoint_rows(op, "probs", probs);
  detail::check_no_overlap(op, "probs", probs, "q", q, false);
  detail::check_no_overlap(op, "probs", probs, "kv_fp8", kv_fp8, false);
  detail::check_no_overlap(op, "probs", probs, "indices", indices, false);
  detail::check_no_overlap(op, "probs", probs, "out", out, false);
  detail::check_no_overlap(op, "probs", probs, "lse", lse, false);
}

}  // namespace detail

/// Sparse MLA attention over the V3.2 FP8 cache, kv_fp8 [n, 656] bytes per row: q must be
/// [s, h, 576] and config.d_v 512. Rows are decoded on the fly, never into a full bf16 copy.
/// config.num_splits must be 1 (splitting needs the workspace overload).
template <backend B, class O>
void sparse_mla_attention(const B& be, in_view<B, bf16, 3> q, in_view<B, std::uint8_t, 2> kv_fp8,
                          in_view<B, std::int32_t, 2> indices, out_view<B, O, 3> out, out_view<B, float, 2> lse,
                          const sparse_mla_config& cfg, out_view<B, float, 2> probs = {}) {
  detail::check_sparse_mla_fp8(q, kv_fp8, indices, out, lse, cfg, probs);
  detail::check_sparse_mla_no_workspace(cfg);
  dispatch<sparse_mla_attention_fp8_op>(be, q, kv_fp8, indices, out, lse, cfg, probs);
}

/// The FP8-cache overload with a split-k workspace (as for the bf16 cache).
template <backend B, class O>
void sparse_mla_attention(const B& be, in_view<B, bf16, 3> q, in_view<B, std::uint8_t, 2> kv_fp8,
                          in_view<B, std::int32_t, 2> indices, out_view<B, O, 3> out, out_view<B, float, 2> lse,
                          const sparse_mla_config& cfg, out_view<B, std::byte, 1> workspace,
                          out_view<B, float, 2> probs = {}) {
  detail::check_sparse_mla_fp8(q, kv_fp8, indices, out, lse, cfg, probs);
  detail::check_sparse_mla_workspace(workspace, q, kv_fp8, indices, out, lse, cfg, probs);
  dispatch<sparse_mla_attention_fp8_op>(be, q, kv_fp8, indices, out, lse, cfg, probs, workspace);
}

DSA_NAMESPACE_END

// The type combinations dsa's own programs compile once per backend (dsa/core/op_instances.hpp).
#define DSA_SPARSE_MLA_ATTENTION_INSTANCES(X, B) \
  X(void sparse_mla_attention<B, float>(const B&, in_view<B, bf16, 3>, in_view<B, bf16, 2>, in_view<B, std::int32_t, 2>, out_view<B, float, 3>, out_view<B, float, 2>, const sparse_mla_config&, out_view<B, float, 2>)) \
  X(void sparse_mla_attention<B, float>(const B&, in_view<B, bf16, 3>, in_view<B, bf16, 2>, in_view<B, std::int32_t, 2>, out_view<B, float, 3>, out_view<B, float, 2>, const sparse_mla_config&, out_view<B, std::byte, 1>, out_view<B, float, 2>)) \
  X(void sparse_mla_attention<B, bf16>(const B&, in_view<B, bf16, 3>, in_view<B, bf16, 2>, in_view<B, std::int32_t, 2>, out_view<B, bf16, 3>, out_view<B, float, 2>, const sparse_mla_config&, out_view<B, float, 2>)) \
  X(void sparse_mla_attention<B, bf16>(const B&, in_view<B, bf16, 3>, in_view<B, bf16, 2>, in_view<B, std::int32_t, 2>, out_view<B, bf16, 3>, out_view<B, float, 2>, const sparse_mla_config&, out_view<B, std::byte, 1>, out_view<B, float, 2>)) \
  X(void sparse_mla_attention<B, float>(const B&, in_view<B, bf16, 3>, in_view<B, std::uint8_t, 2>, in_view<B, std::int32_t, 2>, out_view<B, float, 3>, out_view<B, float, 2>, const sparse_mla_config&, out_view<B, float, 2>)) \
  X(void sparse_mla_attention<B, float>(const B&, in_view<B, bf16, 3>, in_view<B, std::uint8_t, 2>, in_view<B, std::int32_t, 2>, out_view<B, float, 3>, out_view<B, float, 2>, const sparse_mla_config&, out_view<B, std::byte, 1>, out_view<B, float, 2>)) \
  X(void sparse_mla_attention<B, bf16>(const B&, in_view<B, bf16, 3>, in_view<B, std::uint8_t, 2>, in_view<B, std::int32_t, 2>, out_view<B, bf16, 3>, out_view<B, float, 2>, const sparse_mla_config&, out_view<B, float, 2>)) \
  X(void sparse_mla_attention<B, bf16>(const B&, in_view<B, bf16, 3>, in_view<B, std::uint8_t, 2>, in_view<B, std::int32_t, 2>, out_view<B, bf16, 3>, out_view<B, float, 2>, const sparse_mla_config&, out_view<B, std::byte, 1>, out_view<B, float, 2>))
