// CPU backend of sparse MLA attention (ops/sparse_mla_attention.hpp).
//
// Heads are processed in blocks of sparse_mla_head_block. A work item is a query token and a
// group of its head blocks: it walks the token's used kv entries in tiles of sparse_mla_key_tile
// rows, gathers each tile once into fp32 (bf16 -> fp32, or the FP8 row decode), and for every
// block of the group computes the logits as one GEMM [heads, d_qk] x [d_qk, tile] and P·V as
// another, [heads, tile] x [tile, d_v]. Sharing each gathered tile between all the heads is what
// makes MQA attention compute-bound.
//
// The block size is a constant and a tile's GEMM shapes depend only on the token's entry count,
// so every output element is computed by the same sequence of operations however blocks are
// grouped: results are bit-identical for every dsa::cpu_backend{n}. With many tokens a group is
// all of a token's heads (prefill); with fewer tokens than threads (decode) a token's blocks are
// split over the threads.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/parallel.hpp"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/numerics/online_softmax.hpp"
#include "dsa/numerics/sparse_mla_attention.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

/// kv entries per online-softmax step.
inline constexpr index_t sparse_mla_key_tile = 64;
/// Heads per GEMM. A constant, so that results never depend on the thread count; it also bounds
/// how finely one decode token's 128 heads can be split over threads.
inline constexpr index_t sparse_mla_head_block = 16;
/// Upper bound (in floats) of the per-block partial sums of `probs` kept at once.
inline constexpr index_t sparse_mla_probs_scratch = index_t{1} << 24;

// Gathers bf16 cache rows into fp32.
struct sparse_mla_bf16_rows {
  tensor_view<const bf16, 2> kv;
  index_t rows() const { return kv.extent(0); }
  void decode(index_t j, float* dst) const {
    const bf16* src = kv.row(j);
    const index_t d = kv.extent(1);
    for (index_t c = 0; c < d; ++c) dst[c] = src[c].to_float();
  }
};

// Decodes FP8 cache rows into fp32 through a table of the 256 e4m3 values: exactly the values of
// fp8_e4m3::to_float, so the result equals sparse_mla_fp8_row_to_f32 bit for bit.
struct sparse_mla_fp8_rows {
  tensor_view<const std::uint8_t, 2> kv;
  const float* e4m3_table;
  index_t rows() const { return kv.extent(0); }
  void decode(index_t j, float* dst) const {
    const std::uint8_t* row = kv.row(j);
    for (index_t g = 0; g < kv_fp8_num_scales; ++g) {
      const float s = kv_fp8_row_scale(row, g);
      for (index_t i = g * kv_fp8_group; i < (g + 1) * kv_fp8_group; ++i) dst[i] = e4m3_table[row[i]] * s;
    }
    for (index_t j2 = 0; j2 < kv_rope_dim; ++j2) dst[kv_latent_dim + j2] = kv_fp8_row_rope(row, j2).to_float();
  }
};

inline const float* sparse_mla_e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<std::size_t>(c)] = fp8_e4m3::from_bits(static_cast<std::uint8_t>(c)).to_float();
    return t;
  }();
  return table.data();
}

template <class Rows, class O>
void sparse_mla_attention_cpu(const cpu_backend& be, const tensor_view<const bf16, 3>& q, const Rows& kv,
                              const tensor_view<const std::int32_t, 2>& indices, const tensor_view<O, 3>& out,
                              const tensor_view<float, 2>& lse, const sparse_mla_config& cfg,
                              const tensor_view<float, 2>& probs) {
  using row_major = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  const index_t s = q.extent(0);
  const index_t h = q.extent(1);
  const index_t d_qk = q.extent(2);
  const index_t d_v = cfg.d_v;
  const index_t k = indices.extent(1);
  const index_t n = kv.rows();
  const float scale = cfg.softmax_scale;
  const bool want_probs = !probs.is_absent() && k > 0;
  if (s == 0 || h == 0) return;

  const index_t hb = sparse_mla_head_block;
  const index_t blocks = (h + hb - 1) / hb;
  const index_t tile = sparse_mla_key_tile;

  // A work item is a token and a group of its head blocks; the group shares each gathered tile.
  // With fewer tokens than threads a token's blocks are split into several groups. Each block's
  // arithmetic is the same in any grouping, so the split is free to follow the thread count.
  const index_t threads = thread_count(be);
  const index_t groups = std::clamp<index_t>((threads + s - 1) / s, 1, blocks);
  const index_t group_blocks = (blocks + groups - 1) / groups;
  const index_t group_heads = std::min(h, group_blocks * hb);

  // probs sums P over heads: per-block partials, added in block order once all blocks of a
  // token are done (they may run on different threads). Tokens are processed in chunks so that
  // the partials stay bounded.
  index_t chunk = s;
  std::vector<float> partial;
  if (want_probs) {
    chunk = std::clamp<index_t>(sparse_mla_probs_scratch / (blocks * k), 1, s);
    partial.resize(static_cast<std::size_t>(chunk * blocks * k));
  }

  // Eigen sizes its GEMM blocking from cache sizes it caches in statics on first use; query them
  // here, before the worker threads start.
  Eigen::initParallel();

  for (index_t t0 = 0; t0 < s; t0 += chunk) {
    const index_t tn = std::min(chunk, s - t0);
    parallel_for(be, tn * groups, 1, [&](index_t begin, index_t end) {
      row_major qf(group_heads, d_qk);  // the group's queries in fp32
      row_major kt(tile, d_qk);         // the gathered kv tile
      row_major sc(hb, tile);           // one block's scaled logits, then weights
      row_major acc(group_heads, d_v);  // unnormalised outputs
      row_major logits;                 // every scaled logit of the group (probs only)
      std::vector<online_softmax_state> state(static_cast<std::size_t>(group_heads));
      std::vector<index_t> used_pos;  // positions in the indices row of the used entries
      std::vector<index_t> used_row;  // their kv rows
      used_pos.reserve(static_cast<std::size_t>(k));
      used_row.reserve(static_cast<std::size_t>(k));

      for (index_t item = begin; item < end; ++item) {
        const index_t tl = item / groups;
        const index_t t = t0 + tl;
        const index_t b_begin = (item % groups) * group_blocks;
        const index_t b_end = std::min(blocks, b_begin + group_blocks);
        if (b_begin >= b_end) continue;
        const index_t g_h0 = b_begin * hb;                     // first head of the group
        const index_t g_hn = std::min(h, b_end * hb) - g_h0;  // heads in the group

        used_pos.clear();
        used_row.clear();
        for (index_t e = 0; e < k; ++e) {
          const std::int32_t j = indices(t, e);
          if (sparse_mla_index_valid(j, n)) {
            used_pos.push_back(e);
            used_row.push_back(j);
          }
        }
        const index_t cnt = static_cast<index_t>(used_pos.size());

        for (index_t i = 0; i < g_hn; ++i) {
          const bf16* src = &q(t, g_h0 + i, 0);
          float* dst = &qf(i, 0);
          for (index_t c = 0; c < d_qk; ++c) dst[c] = src[c].to_float();
          state[static_cast<std::size_t>(i)] = online_softmax_state{};
        }
        acc.topRows(g_hn).setZero();
        if (want_probs) logits.resize(g_hn, cnt);

        for (index_t j0 = 0; j0 < cnt; j0 += tile) {
          const index_t jn = std::min(tile, cnt - j0);
          for (index_t j = 0; j < jn; ++j) kv.decode(used_row[static_cast<std::size_t>(j0 + j)], &kt(j, 0));
          const auto k_tile = kt.topRows(jn);

          for (index_t b = b_begin; b < b_end; ++b) {
            const index_t r0 = b * hb - g_h0;  // the block's first row in the group's matrices
            const index_t hn = std::min(hb, h - b * hb);
            auto s_tile = sc.topLeftCorner(hn, jn);
            s_tile.noalias() = qf.middleRows(r0, hn) * k_tile.transpose();

            for (index_t i = 0; i < hn; ++i) {
              online_softmax_state& st = state[static_cast<std::size_t>(r0 + i)];
              float tile_max = detail::neg_inf_f32();
              for (index_t j = 0; j < jn; ++j) {
                const float x = s_tile(i, j) * scale;
                s_tile(i, j) = x;
                tile_max = std::max(tile_max, x);
              }
              const float alpha = online_softmax_rescale(st, tile_max);
              if (alpha != 1.0f) acc.row(r0 + i) *= alpha;
              for (index_t j = 0; j < jn; ++j) {
                const float x = s_tile(i, j);
                if (want_probs) logits(r0 + i, j0 + j) = x;
                const float w = online_softmax_weight(st, x);
                st.sum += w;
                s_tile(i, j) = w;
              }
            }
            acc.middleRows(r0, hn).noalias() += s_tile * k_tile.leftCols(d_v);
          }
        }

        for (index_t i = 0; i < g_hn; ++i) {
          const online_softmax_state& st = state[static_cast<std::size_t>(i)];
          O* dst = &out(t, g_h0 + i, 0);
          for (index_t c = 0; c < d_v; ++c) dst[c] = from_float<O>(online_softmax_normalize(st, acc(i, c)));
          lse(t, g_h0 + i) = online_softmax_lse(st);
        }

        if (want_probs) {
          for (index_t b = b_begin; b < b_end; ++b) {
            const index_t r0 = b * hb - g_h0;
            const index_t hn = std::min(hb, h - b * hb);
            float* part = partial.data() + (tl * blocks + b) * k;
            std::fill(part, part + k, 0.0f);
            for (index_t e = 0; e < cnt; ++e) {
              float p = 0.0f;
              for (index_t i = r0; i < r0 + hn; ++i) {
                p += online_softmax_probability(state[static_cast<std::size_t>(i)], logits(i, e));
              }
              part[used_pos[static_cast<std::size_t>(e)]] = p;
            }
          }
        }
      }
    });

    if (want_probs) {
      parallel_for(be, tn, 1, [&](index_t begin, index_t end) {
        for (index_t tl = begin; tl < end; ++tl) {
          float* dst = probs.row(t0 + tl);
          for (index_t e = 0; e < k; ++e) {
            float p = 0.0f;
            for (index_t b = 0; b < blocks; ++b) p += partial[static_cast<std::size_t>((tl * blocks + b) * k + e)];
            dst[e] = p;
          }
        }
      });
    }
  }
}

}  // namespace cpu_detail

template <>
struct op_impl<cpu_backend, sparse_mla_attention_op> {
  template <class O>
  static void run(const cpu_backend& be, const tensor_view<const bf16, 3>& q, const tensor_view<const bf16, 2>& kv,
                  const tensor_view<const std::int32_t, 2>& indices, const tensor_view<O, 3>& out,
                  const tensor_view<float, 2>& lse, const sparse_mla_config& cfg, const tensor_view<float, 2>& probs) {
    cpu_detail::sparse_mla_attention_cpu(be, q, cpu_detail::sparse_mla_bf16_rows{kv}, indices, out, lse, cfg, probs);
  }
};

template <>
struct op_impl<cpu_backend, sparse_mla_attention_fp8_op> {
  template <class O>
  static void run(const cpu_backend& be, const tensor_view<const bf16, 3>& q,
                  const tensor_view<const std::uint8_t, 2>& kv_fp8, const tensor_view<const std::int32_t, 2>& indices,
                  const tensor_view<O, 3>& out, const tensor_view<float, 2>& lse, const sparse_mla_config& cfg,
                  const tensor_view<float, 2>& probs) {
    cpu_detail::sparse_mla_attention_cpu(be, q,
                                         cpu_detail::sparse_mla_fp8_rows{kv_fp8, cpu_detail::sparse_mla_e4m3_table()},
                                         indices, out, lse, cfg, probs);
  }
};

DSA_NAMESPACE_END
