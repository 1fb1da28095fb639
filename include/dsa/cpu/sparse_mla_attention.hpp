// CPU backend of sparse MLA attention (ops/sparse_mla_attention.hpp).
//
// A work item is a query token and a group of its heads. It walks the token's used kv entries
// in tiles of sparse_mla_key_tile rows, decodes each tile once into fp32 (bf16 -> fp32, or the
// FP8 row decode) and shares it between all the heads of the group, which is what makes MQA
// attention compute-bound. Per tile, the two micro-kernels of cpu/kernels/attention_tiles.hpp: the
// logits vectorised over heads, and P·V as a partial sum per tile added to the accumulator.
// The online softmax between them is the scalar sequence of numerics/online_softmax.hpp.
//
// Every output element is computed by the same sequence of operations however heads and tokens
// are grouped (the blocking only chooses which independent sums are in flight together), so
// results are bit-identical for every dsa::cpu_backend{n}. With many tokens a group is all of a
// token's heads (prefill); with fewer tokens than threads (decode) a token's head blocks are
// split over the threads. The P·V products are not exact, so a build whose compiler contracts
// them into FMAs (-march with FMA) may differ from one without in the last ulp.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/cpu/arch/prefetch.hpp"
#include "dsa/cpu/kernels/attention_tiles.hpp"
#include "dsa/cpu/kernels/e4m3_value.hpp"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/numerics/online_softmax.hpp"
#include "dsa/numerics/sparse_mla_attention.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

/// kv entries per online-softmax step.
inline constexpr index_t sparse_mla_key_tile = 64;
/// Heads per block: the unit in which one decode token's heads are split over threads, and in
/// which the head sum of `probs` is formed.
inline constexpr index_t sparse_mla_head_block = 16;
/// Upper bound (in floats) of the per-block partial sums of `probs` kept at once.
inline constexpr index_t sparse_mla_probs_scratch = index_t{1} << 24;

// Decodes bf16 cache rows into fp32.
struct sparse_mla_bf16_rows {
  tensor_view<const bf16, 2> kv;
  index_t rows() const { return kv.extent(0); }
  void decode(index_t j, float* DSA_RESTRICT dst) const { tiles::widen_bf16(kv.row(j), kv.extent(1), dst); }
  void prefetch(index_t j) const { prefetch_read(kv.row(j), kv.extent(1) * static_cast<index_t>(sizeof(bf16))); }
};

// Decodes FP8 cache rows into fp32, bit-identical to sparse_mla_fp8_row_to_f32 (tested): the
// codes through e4m3_value (no table, vectorises), then code · scale in fp32, and the bf16 RoPE
// widened.
struct sparse_mla_fp8_rows {
  tensor_view<const std::uint8_t, 2> kv;
  index_t rows() const { return kv.extent(0); }
  void prefetch(index_t j) const { prefetch_read(kv.row(j), kv.extent(1)); }
  void decode(index_t j, float* DSA_RESTRICT dst) const {
    const std::uint8_t* DSA_RESTRICT row = kv.row(j);
    for (index_t g = 0; g < kv_fp8_num_scales; ++g) {
      const float s = kv_fp8_row_scale(row, g);
      index_t i = g * kv_fp8_group;
      const index_t end = i + kv_fp8_group;
      // Vector decodes give e4m3_value's bits; a NaN scale stays on the scalar loop, whose
      // operand order decides which of two NaNs a product returns.
      if ((detail::float_bits(s) & 0x7FFFFFFFu) <= 0x7F800000u) {
#if DSA_CPU_HAS_AVX512
        for (; i + 16 <= end; i += 16) {
          const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i));
          _mm512_storeu_ps(dst + i, _mm512_mul_ps(e4m3_values16(c), _mm512_set1_ps(s)));
        }
#elif DSA_CPU_HAS_AVX2
        for (; i + 8 <= end; i += 8) {
          const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i));
          _mm256_storeu_ps(dst + i, _mm256_mul_ps(e4m3_values8(c), _mm256_set1_ps(s)));
        }
#endif
      }
      for (; i < end; ++i) dst[i] = e4m3_value(row[i]) * s;
    }
    for (index_t c = 0; c < kv_rope_dim; ++c) {
      std::uint16_t b;
      std::memcpy(&b, row + kv_fp8_rope_offset + 2 * c, sizeof b);
      dst[kv_latent_dim + c] = detail::bits_float(static_cast<std::uint32_t>(b) << 16);
    }
  }
};

template <class Rows, class O>
void sparse_mla_attention_cpu(const cpu_backend& be, const tensor_view<const bf16, 3>& q, const Rows& kv,
                              const tensor_view<const std::int32_t, 2>& indices, const tensor_view<O, 3>& out,
                              const tensor_view<float, 2>& lse, const sparse_mla_config& cfg,
                              const tensor_view<float, 2>& probs) {
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

  // A work item is a token and a group of its head blocks; the group shares each decoded tile.
  // With fewer tokens than threads a token's blocks are split into several groups. Each head's
  // arithmetic is the same in any grouping, so the split is free to follow the thread count.
  const index_t threads = thread_count(be);
  const index_t groups = std::clamp<index_t>((threads + s - 1) / s, 1, blocks);
  const index_t group_blocks = (blocks + groups - 1) / groups;
  const index_t group_heads = std::min(h, group_blocks * hb);

  // Padded extents of the per-thread matrices (rows of 16-float vectors).
  const index_t hpad = tiles::pad(group_heads);
  const index_t kstride = tiles::pad(d_qk);
  const index_t dvpad = tiles::pad(d_v);

  // probs sums P over heads: per-block partials, added in block order once all blocks of a
  // token are done (they may run on different threads). Tokens are processed in chunks so that
  // the partials stay bounded.
  index_t chunk = s;
  std::vector<float> partial;
  if (want_probs) {
    chunk = std::clamp<index_t>(sparse_mla_probs_scratch / (blocks * k), 1, s);
    partial.resize(static_cast<std::size_t>(chunk * blocks * k));
  }

  for (index_t t0 = 0; t0 < s; t0 += chunk) {
    const index_t tn = std::min(chunk, s - t0);
    parallel_for(be, tn * groups, 1, [&](index_t begin, index_t end) {
      // Zero-initialised: the padding lanes are read (and ignored) by the micro-kernels.
      std::vector<float> qt(static_cast<std::size_t>(d_qk * hpad));      // queries, [d_qk, hpad]
      std::vector<float> kt(static_cast<std::size_t>(tile * kstride));   // decoded tile, [tile, kstride]
      std::vector<float> st(static_cast<std::size_t>(tile * hpad));      // logits, [tile, hpad]
      std::vector<float> head_scratch(static_cast<std::size_t>(2 * hpad));  // tile maxima, sums
      std::vector<float> acc(static_cast<std::size_t>(hpad * dvpad));    // unnormalised outputs
      std::vector<float> logits;                                         // [g_hn, cnt] (probs only)
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
          for (index_t c = 0; c < d_qk; ++c) {
            qt[static_cast<std::size_t>(c * hpad + i)] = detail::bits_float(static_cast<std::uint32_t>(src[c].bits) << 16);
          }
          state[static_cast<std::size_t>(i)] = online_softmax_state{};
        }
        for (index_t c = 0; c < d_qk; ++c) std::fill_n(qt.data() + c * hpad + g_hn, hpad - g_hn, 0.0f);
        std::fill_n(acc.data(), g_hn * dvpad, 0.0f);
        if (want_probs) logits.resize(static_cast<std::size_t>(g_hn * cnt));

        for (index_t j0 = 0; j0 < cnt; j0 += tile) {
          const index_t jn = std::min(tile, cnt - j0);
          // The next tile's rows, gathered from anywhere in the cache, are fetched while this one
          // computes (about 20 us of arithmetic per tile against DRAM latency per row).
          for (index_t j = j0 + tile; j < std::min(cnt, j0 + 2 * tile); ++j) kv.prefetch(used_row[static_cast<std::size_t>(j)]);
          for (index_t j = 0; j < jn; ++j) kv.decode(used_row[static_cast<std::size_t>(j0 + j)], kt.data() + j * kstride);
          tiles::tile_logits(qt.data(), hpad, kt.data(), kstride, d_qk, jn, st.data());

          // The online softmax of every head over the tile, in place in the logits [jn, hpad]: each
          // head's sequence of operations as numerics/online_softmax.hpp orders it, with the heads
          // innermost so that the scaling, the maxima and the sums vectorise across them (only the
          // exps are calls): scaled logits and tile maxima, the rescale, the weights, their sums.
          float* tmax = head_scratch.data();
          float* sum = tmax + hpad;
          std::fill_n(tmax, g_hn, detail::neg_inf_f32());
          for (index_t j = 0; j < jn; ++j) {
            float* x = st.data() + j * hpad;
            for (index_t i = 0; i < g_hn; ++i) {
              x[i] *= scale;
              tmax[i] = detail::max_propagate_nan(tmax[i], x[i]);
            }
          }
          for (index_t i = 0; i < g_hn; ++i) {
            online_softmax_state& sti = state[static_cast<std::size_t>(i)];
            if (want_probs) {
              for (index_t j = 0; j < jn; ++j) logits[static_cast<std::size_t>(i * cnt + j0 + j)] = st[static_cast<std::size_t>(j * hpad + i)];
            }
            const float alpha = online_softmax_rescale(sti, tmax[i]);
            if (alpha != 1.0f) {
              float* a = acc.data() + i * dvpad;
              for (index_t c = 0; c < d_v; ++c) a[c] *= alpha;
            }
            sum[i] = sti.sum;
          }
          for (index_t j = 0; j < jn; ++j) {
            float* x = st.data() + j * hpad;
            for (index_t i = 0; i < g_hn; ++i) x[i] = online_softmax_weight(state[static_cast<std::size_t>(i)], x[i]);
          }
          for (index_t j = 0; j < jn; ++j) {
            const float* w = st.data() + j * hpad;
            for (index_t i = 0; i < g_hn; ++i) sum[i] += w[i];
          }
          for (index_t i = 0; i < g_hn; ++i) state[static_cast<std::size_t>(i)].sum = sum[i];
          tiles::tile_pv(st.data(), 1, hpad, kt.data(), kstride, jn, acc.data(), dvpad, g_hn, dvpad);
        }

        for (index_t i = 0; i < g_hn; ++i) {
          const online_softmax_state& sti = state[static_cast<std::size_t>(i)];
          O* dst = &out(t, g_h0 + i, 0);
          const float* a = acc.data() + i * dvpad;
          for (index_t c = 0; c < d_v; ++c) dst[c] = from_float<O>(online_softmax_normalize(sti, a[c]));
          lse(t, g_h0 + i) = online_softmax_lse(sti);
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
                p += online_softmax_probability(state[static_cast<std::size_t>(i)], logits[static_cast<std::size_t>(i * cnt + e)]);
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
  // The split-k overload: the CPU computes in one pass and needs no scratch memory.
  template <class O>
  static void run(const cpu_backend& be, const tensor_view<const bf16, 3>& q, const tensor_view<const bf16, 2>& kv,
                  const tensor_view<const std::int32_t, 2>& indices, const tensor_view<O, 3>& out,
                  const tensor_view<float, 2>& lse, const sparse_mla_config& cfg, const tensor_view<float, 2>& probs,
                  const tensor_view<std::byte, 1>& /*workspace*/) {
    run(be, q, kv, indices, out, lse, cfg, probs);
  }
};

template <>
struct op_impl<cpu_backend, sparse_mla_attention_fp8_op> {
  template <class O>
  static void run(const cpu_backend& be, const tensor_view<const bf16, 3>& q,
                  const tensor_view<const std::uint8_t, 2>& kv_fp8, const tensor_view<const std::int32_t, 2>& indices,
                  const tensor_view<O, 3>& out, const tensor_view<float, 2>& lse, const sparse_mla_config& cfg,
                  const tensor_view<float, 2>& probs) {
    cpu_detail::sparse_mla_attention_cpu(be, q, cpu_detail::sparse_mla_fp8_rows{kv_fp8}, indices, out, lse, cfg, probs);
  }
  // The split-k overload: the CPU computes in one pass and needs no scratch memory.
  template <class O>
  static void run(const cpu_backend& be, const tensor_view<const bf16, 3>& q,
                  const tensor_view<const std::uint8_t, 2>& kv_fp8, const tensor_view<const std::int32_t, 2>& indices,
                  const tensor_view<O, 3>& out, const tensor_view<float, 2>& lse, const sparse_mla_config& cfg,
                  const tensor_view<float, 2>& probs, const tensor_view<std::byte, 1>& /*workspace*/) {
    run(be, q, kv_fp8, indices, out, lse, cfg, probs);
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CPU_OP_INSTANCES(DSA_SPARSE_MLA_ATTENTION_INSTANCES)
