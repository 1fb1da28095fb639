// CPU backend of sparse_mha_attention (ops/sparse_mha_attention.hpp). Every (token, head) is the
// sequence of numerics/sparse_mha_attention.hpp: logits of the used entries (fp32 dots, i
// ascending from +0), their maximum, exponentials summed in entry order, probabilities, and
// out = sum_j fl32(p_j · v_j) in entry order; so results are bit-identical for every thread count
// and between the two paths below, and equal to the plain loop of
// tests/support/sparse_mha_sequence.hpp. The dots run in the register-blocked micro-kernels of
// cpu/kernels/attention_tiles.hpp on rows decoded to fp32 once per work item.
//
//   - Shared keys (k_nope and v broadcast over heads, stride(1) == 0: the absorbed MQA decode over
//     the latent cache): a work item is a token and a group of its heads; the logits are
//     vectorised over heads, P · V over output columns. A decode token's heads are split over
//     the threads. Scratch per thread: the group's logits over all used entries (k x heads floats).
//   - Per-head keys (the MHA prefill, whose k_nope and v are the up-projected [n, h, d]): a work
//     item is a head and a block of 16 tokens, whose lanes the logits are vectorised over: the
//     dots of every token of the block with every key row any of them uses (in a causal prefill
//     the block's rows overlap almost entirely; in the worst case this is 16x the used pairs),
//     then per token its softmax and P · V over its own entries, gathered. Scratch per thread:
//     one int per key row and, per row of the block's union, 16 dots and d_v values.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/cpu/kernels/attention_tiles.hpp"
#include "dsa/cpu/kernels/exp_via_double.hpp"
#include "dsa/numerics/sparse_mha_attention.hpp"
#include "dsa/ops/sparse_mha_attention.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

/// Used entries per decoded tile of the shared-key path.
inline constexpr index_t sparse_mha_key_tile = 64;
/// Heads per block: the unit in which a token's heads are split over threads.
inline constexpr index_t sparse_mha_head_block = 16;

// The op's arguments. The paths bind references to the members rather than a structured
// binding: their lambdas capture them, which clang before 16 refuses for structured bindings.
struct sparse_mha_args {
  tensor_view<const bf16, 3> q;
  tensor_view<const bf16, 3> k_nope;
  tensor_view<const bf16, 2> k_rope;
  tensor_view<const bf16, 3> v;
  tensor_view<const std::int32_t, 2> indices;
  tensor_view<bf16, 3> out;
  tensor_view<float, 2> lse;
  sparse_mha_config cfg;
};

/// Query tokens per work item of the per-head path: one vector of lanes.
inline constexpr index_t sparse_mha_token_block = tiles::lanes;

inline void sparse_mha_per_head_keys(const cpu_backend& be, const sparse_mha_args& a) {
  const auto &q = a.q, &k_nope = a.k_nope, &v = a.v;
  const auto& k_rope = a.k_rope;
  const auto& indices = a.indices;
  const auto& out = a.out;
  const auto& lse = a.lse;
  const auto& cfg = a.cfg;
  const index_t s = q.extent(0), h = q.extent(1), n = k_nope.extent(0);
  const index_t d_nope = k_nope.extent(2), d_rope = k_rope.extent(1), d_v = v.extent(2);
  const index_t d_qk = d_nope + d_rope;
  const index_t k = indices.extent(1);
  const bool want_lse = !lse.is_absent();
  const bool split = cfg.rounding == attention_rounding::bf16_split;
  if (s == 0 || h == 0) return;

  const index_t tb = sparse_mha_token_block;
  const index_t token_blocks = (s + tb - 1) / tb;
  const index_t tile = sparse_mha_key_tile;
  const index_t kstride = tiles::pad(d_qk);
  const index_t dvpad = tiles::pad(d_v);

  // Head-major items: a thread's consecutive items read the same head's keys.
  parallel_for(be, h * token_blocks, 1, [&](index_t begin, index_t end) {
    // Zero-initialised: the micro-kernels read (and the results ignore) the padding lanes.
    std::vector<float> qt(static_cast<std::size_t>(d_qk * tb));  // queries, [d_qk, tb]
    std::vector<float> kt(static_cast<std::size_t>(tile * kstride));
    std::vector<float> st, st_rope, vt;  // per union row: dots [u, tb], values [u, dvpad]
    std::vector<float> lg(static_cast<std::size_t>(k));
    std::vector<float> acc(static_cast<std::size_t>(dvpad));
    std::vector<std::int32_t> slot(static_cast<std::size_t>(n), -1);  // key row -> union row
    std::vector<std::int32_t> uni;                                    // union rows' key rows
    std::vector<std::int32_t> used;                                   // a token's union rows

    for (index_t item = begin; item < end; ++item) {
      const index_t hh = item / token_blocks;
      const index_t t0 = (item % token_blocks) * tb, tn = std::min(tb, s - t0);

      // The union of the block's used key rows.
      uni.clear();
      for (index_t t = t0; t < t0 + tn; ++t) {
        for (index_t e = 0; e < k; ++e) {
          const std::int32_t r = indices(t, e);
          if (!sparse_mha_index_valid(r, n) || slot[static_cast<std::size_t>(r)] >= 0) continue;
          slot[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(uni.size());
          uni.push_back(r);
        }
      }
      const index_t un = static_cast<index_t>(uni.size());
      st.resize(static_cast<std::size_t>(un * tb));
      if (split) st_rope.resize(static_cast<std::size_t>(un * tb));
      vt.resize(static_cast<std::size_t>(un * dvpad));

      for (index_t t = 0; t < tn; ++t) {
        const bf16* src = &q(t0 + t, hh, 0);
        for (index_t c = 0; c < d_qk; ++c) qt[static_cast<std::size_t>(c * tb + t)] = src[c].to_float();
      }
      for (index_t c = 0; c < d_qk; ++c) std::fill_n(qt.data() + c * tb + tn, tb - tn, 0.0f);

      // Dots of every (token, union row) and the union's values, a tile of rows at a time.
      for (index_t u0 = 0; u0 < un; u0 += tile) {
        const index_t jn = std::min(tile, un - u0);
        for (index_t j = 0; j < jn; ++j) {
          const index_t r = uni[static_cast<std::size_t>(u0 + j)];
          float* dst = kt.data() + j * kstride;
          tiles::widen_bf16(&k_nope(r, hh, 0), d_nope, dst);
          if (d_rope > 0) tiles::widen_bf16(k_rope.row(r), d_rope, dst + d_nope);
          float* vd = vt.data() + (u0 + j) * dvpad;
          tiles::widen_bf16(&v(r, hh, 0), d_v, vd);
          std::fill(vd + d_v, vd + dvpad, 0.0f);
        }
        if (split) {
          tiles::tile_logits(qt.data(), tb, kt.data(), kstride, d_nope, jn, st.data() + u0 * tb);
          tiles::tile_logits(qt.data() + d_nope * tb, tb, kt.data() + d_nope, kstride, d_rope, jn, st_rope.data() + u0 * tb);
        } else {
          tiles::tile_logits(qt.data(), tb, kt.data(), kstride, d_qk, jn, st.data() + u0 * tb);
        }
      }

      // Each token: its entries' logits, softmax and P · V in entry order.
      for (index_t t = 0; t < tn; ++t) {
        used.clear();
        float m = -std::numeric_limits<float>::infinity();
        for (index_t e = 0; e < k; ++e) {
          const std::int32_t r = indices(t0 + t, e);
          if (!sparse_mha_index_valid(r, n)) continue;
          const std::int32_t u = slot[static_cast<std::size_t>(r)];
          const std::size_t x = static_cast<std::size_t>(u * tb + t);
          const float l = split ? sparse_mha_split_logit(st[x], st_rope[x], cfg.softmax_scale)
                                : sparse_mha_scaled_logit(st[x], cfg.softmax_scale, cfg.rounding);
          lg[used.size()] = l;
          used.push_back(u);
          m = sparse_mha_max(m, l);
        }
        bf16* o = &out(t0 + t, hh, 0);
        if (sparse_mha_row_empty(m)) {
          std::fill(o, o + d_v, bf16(0.0f));
          if (want_lse) lse(t0 + t, hh) = std::numeric_limits<float>::infinity();
          continue;
        }
        const index_t cnt = static_cast<index_t>(used.size());
        for (index_t e = 0; e < cnt; ++e) lg[static_cast<std::size_t>(e)] -= m;
        exp_via_double(lg.data(), lg.data(), cnt);
        float sum = 0.0f;
        for (index_t e = 0; e < cnt; ++e) sum += lg[static_cast<std::size_t>(e)];
        for (index_t e = 0; e < cnt; ++e) lg[static_cast<std::size_t>(e)] = sparse_mha_prob(lg[static_cast<std::size_t>(e)], sum, cfg.rounding);
        std::fill(acc.begin(), acc.end(), 0.0f);
        tiles::pv_gather_sequential(lg.data(), used.data(), cnt, vt.data(), dvpad, acc.data(), dvpad);
        for (index_t c = 0; c < d_v; ++c) o[c] = bf16(acc[static_cast<std::size_t>(c)]);
        if (want_lse) lse(t0 + t, hh) = m + static_cast<float>(std::log(static_cast<double>(sum)));
      }
      for (const std::int32_t r : uni) slot[static_cast<std::size_t>(r)] = -1;
    }
  });
}

inline void sparse_mha_shared_keys(const cpu_backend& be, const sparse_mha_args& a) {
  const auto &q = a.q, &k_nope = a.k_nope, &v = a.v;
  const auto& k_rope = a.k_rope;
  const auto& indices = a.indices;
  const auto& out = a.out;
  const auto& lse = a.lse;
  const auto& cfg = a.cfg;
  const index_t s = q.extent(0), h = q.extent(1), n = k_nope.extent(0);
  const index_t d_nope = k_nope.extent(2), d_rope = k_rope.extent(1), d_v = v.extent(2);
  const index_t d_qk = d_nope + d_rope;
  const index_t k = indices.extent(1);
  const bool want_lse = !lse.is_absent();
  const bool split = cfg.rounding == attention_rounding::bf16_split;
  if (s == 0 || h == 0) return;

  // A token's head blocks form `groups` work items when there are fewer tokens than threads.
  const index_t hb = sparse_mha_head_block;
  const index_t blocks = (h + hb - 1) / hb;
  const index_t groups = std::clamp<index_t>((thread_count(be) + s - 1) / s, 1, blocks);
  const index_t group_blocks = (blocks + groups - 1) / groups;
  const index_t group_heads = std::min(h, group_blocks * hb);
  const index_t tile = sparse_mha_key_tile;
  const index_t hpad = tiles::pad(group_heads);
  const index_t kstride = tiles::pad(d_qk);
  const index_t dvpad = tiles::pad(d_v);
  // V is the keys' nope part (the latent cache in absorbed decode): its decoded tile is reused.
  const bool v_is_key = v.data_handle() == k_nope.data_handle() && v.stride(0) == k_nope.stride(0) && d_v <= d_nope;
  const index_t vstride = v_is_key ? kstride : dvpad;

  parallel_for(be, s * groups, 1, [&](index_t begin, index_t end) {
    // Zero-initialised: the micro-kernels read (and the results ignore) the padding lanes.
    std::vector<float> qt(static_cast<std::size_t>(d_qk * hpad));  // queries, [d_qk, hpad]
    std::vector<float> kt(static_cast<std::size_t>(tile * kstride));  // decoded keys, [tile, kstride]
    std::vector<float> vt(v_is_key ? 0 : static_cast<std::size_t>(tile * dvpad));
    std::vector<float> st(static_cast<std::size_t>(tile * hpad));  // dots, [tile, hpad]
    std::vector<float> st_rope(split ? static_cast<std::size_t>(tile * hpad) : 0);
    std::vector<float> pm(static_cast<std::size_t>(hpad * tile));  // probabilities, [hpad, tile]
    std::vector<float> acc(static_cast<std::size_t>(hpad * dvpad));
    std::vector<float> m(static_cast<std::size_t>(hpad)), sum(static_cast<std::size_t>(hpad));
    std::vector<float> lg;  // logits, then exponentials, [cnt, hpad]
    std::vector<index_t> used;
    used.reserve(static_cast<std::size_t>(k));

    const auto decode_keys = [&](index_t j0, index_t jn) {
      for (index_t j = 0; j < jn; ++j) {
        const index_t r = used[static_cast<std::size_t>(j0 + j)];
        float* dst = kt.data() + j * kstride;
        tiles::widen_bf16(&k_nope(r, 0, 0), d_nope, dst);
        if (d_rope > 0) tiles::widen_bf16(k_rope.row(r), d_rope, dst + d_nope);
      }
    };

    for (index_t item = begin; item < end; ++item) {
      const index_t t = item / groups;
      const index_t h0 = (item % groups) * group_blocks * hb;
      if (h0 >= h) continue;
      const index_t hn = std::min(group_heads, h - h0);

      used.clear();
      for (index_t e = 0; e < k; ++e) {
        const std::int32_t j = indices(t, e);
        if (sparse_mha_index_valid(j, n)) used.push_back(j);
      }
      const index_t cnt = static_cast<index_t>(used.size());
      lg.resize(static_cast<std::size_t>(cnt * hpad));

      for (index_t i = 0; i < hn; ++i) {
        const bf16* src = &q(t, h0 + i, 0);
        for (index_t c = 0; c < d_qk; ++c) qt[static_cast<std::size_t>(c * hpad + i)] = src[c].to_float();
      }
      for (index_t c = 0; c < d_qk; ++c) std::fill_n(qt.data() + c * hpad + hn, hpad - hn, 0.0f);
      std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());

      // Logits and their maximum.
      for (index_t j0 = 0; j0 < cnt; j0 += tile) {
        const index_t jn = std::min(tile, cnt - j0);
        decode_keys(j0, jn);
        float* l = lg.data() + j0 * hpad;
        if (split) {
          tiles::tile_logits(qt.data(), hpad, kt.data(), kstride, d_nope, jn, st.data());
          tiles::tile_logits(qt.data() + d_nope * hpad, hpad, kt.data() + d_nope, kstride, d_rope, jn, st_rope.data());
          for (index_t j = 0; j < jn; ++j)
            for (index_t i = 0; i < hn; ++i) {
              const index_t x = j * hpad + i;
              l[x] = sparse_mha_split_logit(st[static_cast<std::size_t>(x)], st_rope[static_cast<std::size_t>(x)],
                                            cfg.softmax_scale);
            }
        } else {
          tiles::tile_logits(qt.data(), hpad, kt.data(), kstride, d_qk, jn, st.data());
          for (index_t j = 0; j < jn; ++j)
            for (index_t i = 0; i < hn; ++i) {
              const index_t x = j * hpad + i;
              l[x] = sparse_mha_scaled_logit(st[static_cast<std::size_t>(x)], cfg.softmax_scale, cfg.rounding);
            }
        }
        for (index_t j = 0; j < jn; ++j)
          for (index_t i = 0; i < hn; ++i) m[static_cast<std::size_t>(i)] = sparse_mha_max(m[static_cast<std::size_t>(i)], l[j * hpad + i]);
      }

      // Exponentials, summed in entry order (an empty head's values are never read).
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (index_t j = 0; j < cnt; ++j) {
        float* l = lg.data() + j * hpad;
        for (index_t i = 0; i < hn; ++i) l[i] -= m[static_cast<std::size_t>(i)];
      }
      if (hn == hpad) {
        exp_via_double(lg.data(), lg.data(), cnt * hpad);  // one run: no padding lanes between rows
      } else {
        for (index_t j = 0; j < cnt; ++j) exp_via_double(lg.data() + j * hpad, lg.data() + j * hpad, hn);
      }
      for (index_t j = 0; j < cnt; ++j) {
        const float* l = lg.data() + j * hpad;
        for (index_t i = 0; i < hn; ++i) sum[static_cast<std::size_t>(i)] += l[i];
      }

      // out = P · V, product by product in entry order.
      std::fill_n(acc.data(), hn * dvpad, 0.0f);
      for (index_t j0 = 0; j0 < cnt; j0 += tile) {
        const index_t jn = std::min(tile, cnt - j0);
        for (index_t i = 0; i < hn; ++i)
          for (index_t j = 0; j < jn; ++j) {
            pm[static_cast<std::size_t>(i * tile + j)] =
                sparse_mha_prob(lg[static_cast<std::size_t>((j0 + j) * hpad + i)], sum[static_cast<std::size_t>(i)], cfg.rounding);
          }
        const float* vrows = kt.data();
        if (v_is_key) {
          decode_keys(j0, jn);
        } else {
          for (index_t j = 0; j < jn; ++j) tiles::widen_bf16(&v(used[static_cast<std::size_t>(j0 + j)], 0, 0), d_v, vt.data() + j * dvpad);
          vrows = vt.data();
        }
        tiles::tile_pv_sequential(pm.data(), tile, vrows, vstride, jn, acc.data(), dvpad, hn, dvpad);
      }

      for (index_t i = 0; i < hn; ++i) {
        bf16* o = &out(t, h0 + i, 0);
        const float mi = m[static_cast<std::size_t>(i)];
        if (sparse_mha_row_empty(mi)) {
          std::fill(o, o + d_v, bf16(0.0f));
          if (want_lse) lse(t, h0 + i) = std::numeric_limits<float>::infinity();
          continue;
        }
        const float* ai = acc.data() + i * dvpad;
        for (index_t c = 0; c < d_v; ++c) o[c] = bf16(ai[c]);
        if (want_lse) lse(t, h0 + i) = mi + static_cast<float>(std::log(static_cast<double>(sum[static_cast<std::size_t>(i)])));
      }
    }
  });
}

}  // namespace cpu_detail

template <>
struct op_impl<cpu_backend, sparse_mha_attention_op> {
  static void run(const cpu_backend& be, tensor_view<const bf16, 3> q, tensor_view<const bf16, 3> k_nope,
                  tensor_view<const bf16, 2> k_rope, tensor_view<const bf16, 3> v,
                  tensor_view<const std::int32_t, 2> indices, tensor_view<bf16, 3> out, const sparse_mha_config& cfg,
                  tensor_view<float, 2> lse) {
    const cpu_detail::sparse_mha_args a{q, k_nope, k_rope, v, indices, out, lse, cfg};
    if (k_nope.stride(1) == 0 && v.stride(1) == 0) {
      cpu_detail::sparse_mha_shared_keys(be, a);
    } else {
      cpu_detail::sparse_mha_per_head_keys(be, a);
    }
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CPU_OP_INSTANCES(DSA_SPARSE_MHA_ATTENTION_INSTANCES)
