// CPU backend of the lightning indexer (forward, paged forward, backward).
//
// Forward: the work is cut into items of (group of query rows, chunk of 256 keys). An item walks
// its keys in tiles of 16: each key row is decoded to fp32 (vectorised arithmetic, no table),
// the 16 rows are transposed into a d x 16 tile (8 KiB for d = 128, so it stays in L1), and for
// every row of the group a register-blocked micro-kernel computes a block of heads against the
// 16 keys, one 16-lane vector accumulator per head fed by broadcast multiply-adds. The tile is
// decoded once for the whole row group (prefill), and the group's queries once per thread.
// Per element the dot product still runs over i = 0..d-1 sequentially and the head sum over
// h = 0..H-1 with the product rounded first, which is the normative order of
// dsa/numerics/lightning_indexer.hpp: the blocking only decides which independent sums are in
// flight together. Every score is written by exactly one item, so the result is bit-identical
// for any thread count. The micro-kernels (key tiles, head blocks, the backward's row
// accumulation) are kernels/indexer_tiles.hpp; items go to threads by parallel_items
// (arch/parallel.hpp).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/cpu/kernels/indexer_tiles.hpp"
#include "dsa/numerics/fp32_ops.hpp"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/numerics/lightning_indexer.hpp"
#include "dsa/numerics/paging.hpp"
#include "dsa/ops/lightning_indexer.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {
namespace indexer {

inline constexpr index_t key_chunk = 256;  // keys per work item

// Pointer to v(t, h, 0), also when the last extent is 0 (no element is formed; a view without
// elements may be null, and offsetting null is undefined, so it stays null).
template <class T>
DSA_FORCEINLINE T* head_row(const tensor_view<T, 3>& v, index_t t, index_t h) {
  return v.data_handle() == nullptr ? v.data_handle() : v.data_handle() + t * v.stride(0) + h * v.stride(1);
}

// Keys held in a dense [n, d] view with one scale per key.
template <class KT>
struct dense_keys {
  tensor_view<const KT, 2> k;
  tensor_view<const float, 1> k_scale;

  // The tile kt [d, key_tile] of keys [p, p + count) (of the row group that starts at `row`) and
  // their scales; lanes past count repeat the last key (their scores are never written), or are
  // zero where the keys are not FP8 codes. `rows` [key_tile, d] is scratch.
  void load_tile(index_t /*row*/, index_t p, index_t count, float* rows, float* kt, float* scale) const {
    const index_t d = k.extent(1);
    for (index_t j = 0; j < count; ++j) scale[j] = k_scale(p + j);
    std::fill(scale + count, scale + key_tile, 0.0f);
    if constexpr (std::is_same_v<KT, float>) {
      for (index_t j = 0; j < count; ++j) decode_row(k.row(p + j), d, rows + j * d);
      std::fill(rows + count * d, rows + key_tile * d, 0.0f);
      transpose_tile(rows, d, kt);
    } else {
      const std::uint8_t* src[key_tile];
      for (index_t j = 0; j < key_tile; ++j) {
        src[j] = reinterpret_cast<const std::uint8_t*>(k.row(p + std::min(j, count - 1)));
      }
      decode_code_tile(src, d, rows, kt);
    }
  }
};

// Keys held in the paged indexer cache, read through each row's block table. The front-end
// has checked every slot a row's range references.
struct paged_keys {
  tensor_view<const std::uint8_t, 2> cache;
  tensor_view<const std::int32_t, 2> block_table;
  index_t block_size;

  // As dense_keys::load_tile.
  void load_tile(index_t row, index_t p, index_t count, float* rows, float* kt, float* scale) const {
    const std::int32_t* table = block_table.row(row);
    const std::uint8_t* src[key_tile];
    // paged_cache_slot(table, block_size, p + j), stepping through the page instead of dividing
    // per key (a 64-bit division per key was a tenth of the single-query decode).
    index_t b = p / block_size, off = p % block_size;
    for (index_t j = 0; j < key_tile; ++j) {
      if (j < count) {
        src[j] = cache.row(static_cast<index_t>(table[b]) * block_size + off);
        if (++off == block_size) {
          off = 0;
          ++b;
        }
      } else {
        src[j] = src[count - 1];
      }
      scale[j] = j < count ? indexer_cache_row_scale(src[j]) : 0.0f;
    }
    decode_code_tile(src, indexer_cache_dim, rows, kt);
  }
};

// Rows per work item: they share each decoded key tile. Paged rows each have their own block
// table, so there a group is one row.
inline constexpr index_t row_group = 8;

template <class QT, class Keys>
void run_scores(const cpu_backend& be, tensor_view<const QT, 3> q, tensor_view<const float, 2> w, const Keys& keys,
                tensor_view<const std::int32_t, 2> ranges, tensor_view<float, 2> scores, index_t group) {
  const index_t m = q.extent(0), heads = q.extent(1), d = q.extent(2), n = scores.extent(1);
  const index_t chunks_per_row = (n + key_chunk - 1) / key_chunk;
  const index_t groups = (m + group - 1) / group;
  struct scratch {
    std::vector<float> qf, rows, kt;
    float tot[key_tile];
    float scale[key_tile];
    index_t decoded_group = -1;
  };
  parallel_items(
      be, groups * chunks_per_row,
      [&] {
        scratch s;
        s.qf.resize(static_cast<std::size_t>(group * heads * d));
        s.rows.resize(static_cast<std::size_t>(key_tile * d));
        s.kt.resize(static_cast<std::size_t>(d * key_tile));
        return s;
      },
      [&](index_t item, scratch& sc) {
        // Group-major order: consecutive items of a thread mostly share the decoded queries.
        const index_t g = item / chunks_per_row;
        const index_t t0 = g * group, t1 = std::min(m, t0 + group);
        const index_t c0 = (item % chunks_per_row) * key_chunk;
        const index_t c1 = std::min(n, c0 + key_chunk);
        constexpr float neg_inf = -std::numeric_limits<float>::infinity();
        // The union of the group's ranges within the chunk, [lo_all, hi_all).
        index_t lo_all = c1, hi_all = c0;
        for (index_t t = t0; t < t1; ++t) {
          const index_t lo = std::clamp<index_t>(ranges(t, 0), c0, c1);
          const index_t hi = std::clamp<index_t>(ranges(t, 1), lo, c1);
          float* out = scores.row(t);
          std::fill(out + c0, out + lo, neg_inf);
          std::fill(out + hi, out + c1, neg_inf);
          if (lo < hi) {
            lo_all = std::min(lo_all, lo);
            hi_all = std::max(hi_all, hi);
          }
        }
        if (lo_all >= hi_all) return;
        if (sc.decoded_group != g) {
          for (index_t t = t0; t < t1; ++t) {
            for (index_t h = 0; h < heads; ++h) decode_row(head_row(q, t, h), d, sc.qf.data() + ((t - t0) * heads + h) * d);
          }
          sc.decoded_group = g;
        }
        for (index_t p = lo_all; p < hi_all; p += key_tile) {
          const index_t count = std::min(key_tile, hi_all - p);
          keys.load_tile(t0, p, count, sc.rows.data(), sc.kt.data(), sc.scale);
          for (index_t t = t0; t < t1; ++t) {
            // This row's part of the tile: every lane is an independent score, so computing
            // the whole tile and keeping a part gives the same bits as a tile of that part.
            const index_t lo = std::max(p, static_cast<index_t>(ranges(t, 0)));
            const index_t hi = std::min(p + count, static_cast<index_t>(ranges(t, 1)));
            if (lo >= hi) continue;
            tile_scores(sc.qf.data() + (t - t0) * heads * d, heads, d, w.row(t), sc.kt.data(), sc.tot);
            float* out = scores.row(t);
            for (index_t j = lo; j < hi; ++j) out[j] = sc.tot[j - p] * sc.scale[j - p];
          }
        }
      });
}

// ---- backward ------------------------------------------------------------------------------------
//
// The same dots as the forward (keys in vector lanes, each lane summing over i in ascending
// order), then the chain rule per (row, key, head) in the order the reference loop nest uses:
// grad_q and grad_w sum keys in ascending order, grad_k sums rows, then heads, in ascending
// order. The sums over keys or heads run in registers across terms, one output element per lane.

// q(t, ., .) as [heads, d] row-major: the view itself where its heads are d apart, else a copy
// in `copy`.
inline const float* query_rows(const tensor_view<const float, 3>& q, index_t t, std::vector<float>& copy) {
  const index_t heads = q.extent(1), d = q.extent(2);
  if (heads <= 1 || q.stride(1) == d) return head_row(q, t, 0);
  for (index_t h = 0; h < heads; ++h) decode_row(head_row(q, t, h), d, copy.data() + h * d);
  return copy.data();
}

// g[j] = grad_scores(t, p + j) · k_scale(p + j), the upstream gradient of key p + j's score, for
// j in [lo, hi); whether any of them is nonzero (else the keys carry no gradient for row t).
inline bool upstream_gradients(const tensor_view<const float, 2>& grad_scores, const tensor_view<const float, 1>& k_scale,
                               index_t t, index_t p, index_t lo, index_t hi, float* g) {
  bool any = false;
  for (index_t j = lo; j < hi; ++j) {
    g[j] = grad_scores(t, p + j) * k_scale(p + j);
    any = any || g[j] != 0.0f;
  }
  return any;
}

struct backward_scratch {
  std::vector<float> qf, rows, kt, z, coef;  // coef, src: the terms of one accumulate_rows
  std::vector<const float*> src;
  float scale[key_tile];  // load_tile's key scales (the gradients take k_scale themselves)
  backward_scratch(index_t heads, index_t d)
      : qf(static_cast<std::size_t>(heads * d)),
        rows(static_cast<std::size_t>(key_tile * d)),
        kt(static_cast<std::size_t>(d * key_tile)),
        z(static_cast<std::size_t>(heads * key_tile)),
        coef(static_cast<std::size_t>(std::max(heads, key_tile))),
        src(coef.size()) {}
};

// grad_q and grad_w (either may be absent), split over query rows.
inline void backward_queries(const cpu_backend& be, tensor_view<const float, 3> q, tensor_view<const float, 2> w,
                             tensor_view<const float, 2> k, tensor_view<const float, 1> k_scale,
                             tensor_view<const std::int32_t, 2> ranges, tensor_view<const float, 2> grad_scores,
                             tensor_view<float, 3> grad_q, tensor_view<float, 2> grad_w) {
  const index_t m = q.extent(0), heads = q.extent(1), d = q.extent(2);
  const dense_keys<float> keys{k, k_scale};  // the forward's key tiles (zero past a tile's keys)
  parallel_for(be, m, 1, [&](index_t t0, index_t t1) {
    backward_scratch sc(heads, d);
    std::vector<float> gq(static_cast<std::size_t>(heads * d)), gw(static_cast<std::size_t>(heads));
    for (index_t t = t0; t < t1; ++t) {
      std::fill(gq.begin(), gq.end(), 0.0f);
      std::fill(gw.begin(), gw.end(), 0.0f);
      const float* qf = query_rows(q, t, sc.qf);
      const index_t r1 = ranges(t, 1);
      for (index_t p = ranges(t, 0); p < r1; p += key_tile) {
        const index_t count = std::min(key_tile, r1 - p);
        float g[key_tile] = {};  // zero past count: those lanes never count
        if (!upstream_gradients(grad_scores, k_scale, t, p, 0, count, g)) continue;
        keys.load_tile(t, p, count, sc.rows.data(), sc.kt.data(), sc.scale);
        tile_dots(qf, heads, d, sc.kt.data(), sc.z.data());
        const float* krow[key_tile];
        for (index_t j = 0; j < count; ++j) krow[j] = k.row(p + j);
        for (index_t h = 0; h < heads; ++h) {
          // The keys that count, as a bit mask built without branches (about half the ReLUs
          // are active, so a branch per key mispredicted half the time), then walked in
          // ascending order.
          const float* z = sc.z.data() + h * key_tile;
          std::uint32_t on = 0;
          for (index_t j = 0; j < key_tile; ++j) {
            on |= static_cast<std::uint32_t>((g[j] != 0.0f) & lightning_indexer_relu_active(z[j])) << j;
          }
          // grad_w's sum in a register: through memory each term waited on a store forwarding.
          const float wh = w(t, h);
          float gwh = gw[static_cast<std::size_t>(h)];
          std::size_t terms = 0;
          for (; on != 0; on &= on - 1) {
            const int j = std::countr_zero(on);
            gwh = detail::fma_if_fast(g[j], z[j], gwh);
            sc.coef[terms] = g[j] * wh;
            sc.src[terms++] = krow[j];
          }
          gw[static_cast<std::size_t>(h)] = gwh;
          accumulate_rows(gq.data() + h * d, d, sc.src.data(), sc.coef.data(), static_cast<index_t>(terms));
        }
      }
      if (!grad_q.is_absent()) {
        for (index_t h = 0; h < heads; ++h) std::copy_n(gq.data() + h * d, d, head_row(grad_q, t, h));
      }
      if (!grad_w.is_absent()) std::copy_n(gw.data(), heads, grad_w.row(t));
    }
  });
}

// grad_k, split over tiles of key_tile keys.
inline void backward_keys(const cpu_backend& be, tensor_view<const float, 3> q, tensor_view<const float, 2> w,
                          tensor_view<const float, 2> k, tensor_view<const float, 1> k_scale,
                          tensor_view<const std::int32_t, 2> ranges, tensor_view<const float, 2> grad_scores,
                          tensor_view<float, 2> grad_k) {
  const index_t m = q.extent(0), heads = q.extent(1), d = q.extent(2), n = k.extent(0);
  const dense_keys<float> keys{k, k_scale};
  parallel_for(be, (n + key_tile - 1) / key_tile, 1, [&](index_t b0, index_t b1) {
    backward_scratch sc(heads, d);
    for (index_t b = b0; b < b1; ++b) {
      const index_t p = b * key_tile, count = std::min(key_tile, n - p);
      for (index_t j = 0; j < count; ++j) std::fill_n(grad_k.row(p + j), d, 0.0f);
      keys.load_tile(0, p, count, sc.rows.data(), sc.kt.data(), sc.scale);
      for (index_t t = 0; t < m; ++t) {
        const index_t lo = std::max<index_t>(p, ranges(t, 0)) - p;
        const index_t hi = std::min<index_t>(p + count, ranges(t, 1)) - p;
        if (lo >= hi) continue;
        float g[key_tile];
        if (!upstream_gradients(grad_scores, k_scale, t, p, lo, hi, g)) continue;
        const float* qf = query_rows(q, t, sc.qf);
        tile_dots(qf, heads, d, sc.kt.data(), sc.z.data());
        for (index_t j = lo; j < hi; ++j) {
          if (g[j] == 0.0f) continue;
          // The heads that count, 64 at a time as a bit mask (as in backward_queries).
          std::size_t terms = 0;
          for (index_t h0 = 0; h0 < heads; h0 += 64) {
            const index_t hn = std::min<index_t>(64, heads - h0);
            std::uint64_t on = 0;
            for (index_t h = 0; h < hn; ++h) {
              on |= static_cast<std::uint64_t>(lightning_indexer_relu_active(sc.z[static_cast<std::size_t>((h0 + h) * key_tile + j)])) << h;
            }
            for (; on != 0; on &= on - 1) {
              const index_t h = h0 + std::countr_zero(on);
              sc.coef[terms] = g[j] * w(t, h);
              sc.src[terms++] = qf + h * d;
            }
          }
          accumulate_rows(grad_k.row(p + j), d, sc.src.data(), sc.coef.data(), static_cast<index_t>(terms));
        }
      }
    }
  });
}

}  // namespace indexer
}  // namespace cpu_detail

template <>
struct op_impl<cpu_backend, lightning_indexer_scores_op> {
  template <class T>
  static void run(const cpu_backend& be, tensor_view<const T, 3> q, tensor_view<const float, 2> w,
                  tensor_view<const T, 2> k, tensor_view<const float, 1> k_scale,
                  tensor_view<const std::int32_t, 2> ranges, tensor_view<float, 2> scores) {
    static_assert(std::is_same_v<T, fp8_e4m3> || std::is_same_v<T, float>);
    const cpu_detail::indexer::dense_keys<T> keys{k, k_scale};
    cpu_detail::indexer::run_scores(be, q, w, keys, ranges, scores, cpu_detail::indexer::row_group);
  }
};

template <>
struct op_impl<cpu_backend, lightning_indexer_scores_paged_op> {
  static void run(const cpu_backend& be, tensor_view<const fp8_e4m3, 3> q, tensor_view<const float, 2> w,
                  tensor_view<const std::uint8_t, 2> cache, tensor_view<const std::int32_t, 2> block_table,
                  index_t block_size, tensor_view<const std::int32_t, 2> ranges, tensor_view<float, 2> scores) {
    const cpu_detail::indexer::paged_keys keys{cache, block_table, block_size};
    cpu_detail::indexer::run_scores(be, q, w, keys, ranges, scores, 1);
  }
};

template <>
struct op_impl<cpu_backend, lightning_indexer_backward_op> {
  // Two passes, each split over the index its outputs are written by, so that no reduction
  // crosses threads: grad_q and grad_w over query rows, grad_k over keys.
  static void run(const cpu_backend& be, tensor_view<const float, 3> q, tensor_view<const float, 2> w,
                  tensor_view<const float, 2> k, tensor_view<const float, 1> k_scale,
                  tensor_view<const std::int32_t, 2> ranges, tensor_view<const float, 2> grad_scores,
                  tensor_view<float, 3> grad_q, tensor_view<float, 2> grad_w, tensor_view<float, 2> grad_k) {
    if (!grad_q.is_absent() || !grad_w.is_absent()) {
      cpu_detail::indexer::backward_queries(be, q, w, k, k_scale, ranges, grad_scores, grad_q, grad_w);
    }
    if (!grad_k.is_absent()) cpu_detail::indexer::backward_keys(be, q, w, k, k_scale, ranges, grad_scores, grad_k);
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CPU_OP_INSTANCES(DSA_LIGHTNING_INDEXER_INSTANCES)
