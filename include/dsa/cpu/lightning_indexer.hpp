// CPU backend of the lightning indexer (forward, paged forward, backward).
//
// Forward: the work is cut into items of (query row, chunk of 256 keys). An item decodes its
// query row to fp32 once, then walks its keys in tiles of 16: the tile is decoded to fp32 and
// transposed (d x 16, 8 KiB for d = 128, so it stays in L1), and a register-blocked micro-kernel
// computes a block of heads against the 16 keys, one 16-lane vector accumulator per head fed by
// broadcast multiply-adds. Per element the dot product still runs over i = 0..d-1 sequentially
// and the head sum over h = 0..H-1 with the product rounded first, which is the normative order
// of dsa/numerics/lightning_indexer.hpp: the blocking only decides which independent sums are in
// flight together. Every score is written by exactly one item, so the
// result is bit-identical for any thread count.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/parallel.hpp"
#include "dsa/numerics/fp32_ops.hpp"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/numerics/lightning_indexer.hpp"
#include "dsa/numerics/paging.hpp"
#include "dsa/ops/lightning_indexer.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

/// The values of the 256 e4m3 codes: decoding through a table keeps bit manipulation out of
/// the inner loops (the table is built from fp8_e4m3::to_float, so it is exact by construction).
inline const float* e4m3_decode_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<std::size_t>(c)] = fp8_e4m3::from_bits(static_cast<std::uint8_t>(c)).to_float();
    return t;
  }();
  return table.data();
}

/// Calls body(item, scratch) for every item in [0, count), handing items to the backend's
/// threads one at a time from a shared counter (balances causal ranges, where rows differ
/// wildly in cost). Each item's result depends only on the item, never on the thread that ran
/// it, so outputs stay bit-identical for every thread count. `make_scratch()` builds one
/// thread's scratch space.
template <class MakeScratch, class Body>
void parallel_items(const cpu_backend& be, index_t count, MakeScratch&& make_scratch, Body&& body) {
  if (count <= 0) return;
  std::atomic<index_t> next{0};
  const index_t workers = std::min<index_t>(thread_count(be), count);
  parallel_for(be, workers, 1, [&](index_t, index_t) {
    auto scratch = make_scratch();
    for (index_t i = next.fetch_add(1, std::memory_order_relaxed); i < count;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      body(i, scratch);
    }
  });
}

namespace indexer {

inline constexpr index_t key_tile = 16;     // keys per micro-kernel call
inline constexpr index_t key_chunk = 256;   // keys per work item
// Heads per micro-kernel call: enough independent accumulators to hide the FMA latency
// without spilling (one 16-key accumulator is 1 zmm, 2 ymm or 4 xmm registers).
#if defined(__AVX512F__)
inline constexpr index_t head_block = 8;
#elif defined(__AVX__)
inline constexpr index_t head_block = 4;
#else
inline constexpr index_t head_block = 2;
#endif

#if defined(__GNUC__)
// One key tile as a GCC/Clang vector: lowered to whatever the target ISA offers, and, unlike
// auto-vectorisation, guaranteed to vectorise over the keys (never across a sum).
typedef float tile_vec __attribute__((vector_size(key_tile * sizeof(float))));

// tot[s] += sum over the HB heads of w[h] · ReLU(qf[h] · kt[:, s]); qf is [HB, d] row-major,
// kt is [d, key_tile] (the transposed key tile).
template <index_t HB>
DSA_FORCEINLINE void head_block_scores(const float* DSA_RESTRICT qf, index_t d, const float* DSA_RESTRICT kt,
                                       const float* DSA_RESTRICT w, float* DSA_RESTRICT tot) {
  tile_vec acc[HB];
  for (index_t hb = 0; hb < HB; ++hb) acc[hb] = tile_vec{};
  for (index_t i = 0; i < d; ++i) {
    tile_vec kv;  // loaded with memcpy: no alignment assumed, no vector-typed ABI
    std::memcpy(&kv, kt + i * key_tile, sizeof kv);
    for (index_t hb = 0; hb < HB; ++hb) acc[hb] += qf[hb * d + i] * kv;
  }
  for (index_t hb = 0; hb < HB; ++hb) {
    float dots[key_tile];
    std::memcpy(dots, &acc[hb], sizeof dots);
    for (index_t s = 0; s < key_tile; ++s) tot[s] += detail::mul_rn(w[hb], lightning_indexer_relu(dots[s]));
  }
}
#else
template <index_t HB>
DSA_FORCEINLINE void head_block_scores(const float* DSA_RESTRICT qf, index_t d, const float* DSA_RESTRICT kt,
                                       const float* DSA_RESTRICT w, float* DSA_RESTRICT tot) {
  float acc[HB][key_tile];
  for (index_t hb = 0; hb < HB; ++hb) {
    for (index_t s = 0; s < key_tile; ++s) acc[hb][s] = 0.0f;
  }
  for (index_t i = 0; i < d; ++i) {
    const float* DSA_RESTRICT kr = kt + i * key_tile;
    for (index_t hb = 0; hb < HB; ++hb) {
      const float qv = qf[hb * d + i];
      for (index_t s = 0; s < key_tile; ++s) acc[hb][s] += qv * kr[s];
    }
  }
  for (index_t hb = 0; hb < HB; ++hb) {
    const float wv = w[hb];
    for (index_t s = 0; s < key_tile; ++s) tot[s] += detail::mul_rn(wv, lightning_indexer_relu(acc[hb][s]));
  }
}
#endif

// tot[s] = sum_h w[h] · ReLU(qf[h] · kt[:, s]) for the key_tile keys of the tile, heads in
// ascending order.
inline void tile_scores(const float* qf, index_t heads, index_t d, const float* w, const float* kt, float* tot) {
  for (index_t s = 0; s < key_tile; ++s) tot[s] = 0.0f;
  index_t h = 0;
  for (; h + head_block <= heads; h += head_block) head_block_scores<head_block>(qf + h * d, d, kt, w + h, tot);
  for (; h < heads; ++h) head_block_scores<1>(qf + h * d, d, kt, w + h, tot);
}

// Pointer to v(t, h, 0), also when the last extent is 0 (no element is formed).
template <class T>
DSA_FORCEINLINE T* head_row(const tensor_view<T, 3>& v, index_t t, index_t h) {
  return v.data_handle() + t * v.stride(0) + h * v.stride(1);
}

template <class T>
DSA_FORCEINLINE float decode(T x, const float* lut) {
  if constexpr (std::is_same_v<T, fp8_e4m3>) {
    return lut[x.bits];
  } else {
    (void)lut;
    return x;
  }
}

// Keys held in a dense [n, d] view with one scale per key.
template <class KT>
struct dense_keys {
  tensor_view<const KT, 2> k;
  tensor_view<const float, 1> k_scale;
  const float* lut;

  // Decodes keys [p, p + count) into the transposed tile kt [d, key_tile] and their scales,
  // zero-filling the unused columns.
  void load(index_t /*row*/, index_t p, index_t count, float* kt, float* scale) const {
    const index_t d = k.extent(1);
    for (index_t j = 0; j < count; ++j) {
      const KT* src = k.row(p + j);
      for (index_t i = 0; i < d; ++i) kt[i * key_tile + j] = decode(src[i], lut);
      scale[j] = k_scale(p + j);
    }
    for (index_t j = count; j < key_tile; ++j) {
      for (index_t i = 0; i < d; ++i) kt[i * key_tile + j] = 0.0f;
      scale[j] = 0.0f;
    }
  }
};

// Keys held in the paged indexer cache, read through each row's block table. The front-end
// has checked every slot a row's range references.
struct paged_keys {
  tensor_view<const std::uint8_t, 2> cache;
  tensor_view<const std::int32_t, 2> block_table;
  index_t block_size;
  const float* lut;

  void load(index_t row, index_t p, index_t count, float* kt, float* scale) const {
    constexpr index_t d = indexer_cache_dim;
    const std::int32_t* table = block_table.row(row);
    for (index_t j = 0; j < count; ++j) {
      const std::uint8_t* src = cache.row(paged_cache_slot(table, block_size, p + j));
      for (index_t i = 0; i < d; ++i) kt[i * key_tile + j] = lut[src[i]];
      scale[j] = indexer_cache_row_scale(src);
    }
    for (index_t j = count; j < key_tile; ++j) {
      for (index_t i = 0; i < d; ++i) kt[i * key_tile + j] = 0.0f;
      scale[j] = 0.0f;
    }
  }
};

template <class QT, class Keys>
void run_scores(const cpu_backend& be, tensor_view<const QT, 3> q, tensor_view<const float, 2> w, const Keys& keys,
                tensor_view<const std::int32_t, 2> ranges, tensor_view<float, 2> scores) {
  const index_t m = q.extent(0), heads = q.extent(1), d = q.extent(2), n = scores.extent(1);
  const index_t chunks_per_row = (n + key_chunk - 1) / key_chunk;
  const float* lut = e4m3_decode_table();
  struct scratch {
    std::vector<float> qf, kt;
    float tot[key_tile];
    float scale[key_tile];
    index_t decoded_row = -1;
  };
  parallel_items(
      be, m * chunks_per_row,
      [&] {
        scratch s;
        s.qf.resize(static_cast<std::size_t>(heads * d));
        s.kt.resize(static_cast<std::size_t>(d * key_tile));
        return s;
      },
      [&](index_t item, scratch& sc) {
        const index_t t = item / chunks_per_row;
        const index_t c0 = (item % chunks_per_row) * key_chunk;
        const index_t c1 = std::min(n, c0 + key_chunk);
        const index_t lo = std::clamp<index_t>(ranges(t, 0), c0, c1);
        const index_t hi = std::clamp<index_t>(ranges(t, 1), lo, c1);
        float* out = scores.row(t);
        constexpr float neg_inf = -std::numeric_limits<float>::infinity();
        std::fill(out + c0, out + lo, neg_inf);
        std::fill(out + hi, out + c1, neg_inf);
        if (lo == hi) return;
        if (sc.decoded_row != t) {
          for (index_t h = 0; h < heads; ++h) {
            const QT* src = head_row(q, t, h);
            for (index_t i = 0; i < d; ++i) sc.qf[static_cast<std::size_t>(h * d + i)] = decode(src[i], lut);
          }
          sc.decoded_row = t;
        }
        const float* wrow = w.row(t);
        for (index_t p = lo; p < hi; p += key_tile) {
          const index_t count = std::min(key_tile, hi - p);
          keys.load(t, p, count, sc.kt.data(), sc.scale);
          tile_scores(sc.qf.data(), heads, d, wrow, sc.kt.data(), sc.tot);
          for (index_t j = 0; j < count; ++j) out[p + j] = sc.tot[j] * sc.scale[j];
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
    const cpu_detail::indexer::dense_keys<T> keys{k, k_scale, cpu_detail::e4m3_decode_table()};
    cpu_detail::indexer::run_scores(be, q, w, keys, ranges, scores);
  }
};

template <>
struct op_impl<cpu_backend, lightning_indexer_scores_paged_op> {
  static void run(const cpu_backend& be, tensor_view<const fp8_e4m3, 3> q, tensor_view<const float, 2> w,
                  tensor_view<const std::uint8_t, 2> cache, tensor_view<const std::int32_t, 2> block_table,
                  index_t block_size, tensor_view<const std::int32_t, 2> ranges, tensor_view<float, 2> scores) {
    const cpu_detail::indexer::paged_keys keys{cache, block_table, block_size, cpu_detail::e4m3_decode_table()};
    cpu_detail::indexer::run_scores(be, q, w, keys, ranges, scores);
  }
};

template <>
struct op_impl<cpu_backend, lightning_indexer_backward_op> {
  // Two passes, each split over the index its outputs are written by, so that no reduction
  // crosses threads: grad_q and grad_w over query rows (summing keys in ascending order),
  // grad_k over keys (summing rows, then heads, in ascending order).
  static void run(const cpu_backend& be, tensor_view<const float, 3> q, tensor_view<const float, 2> w,
                  tensor_view<const float, 2> k, tensor_view<const float, 1> k_scale,
                  tensor_view<const std::int32_t, 2> ranges, tensor_view<const float, 2> grad_scores,
                  tensor_view<float, 3> grad_q, tensor_view<float, 2> grad_w, tensor_view<float, 2> grad_k) {
    const index_t m = q.extent(0), heads = q.extent(1), d = q.extent(2), n = k.extent(0);
    if (!grad_q.is_absent() || !grad_w.is_absent()) {
      cpu_detail::parallel_for(be, m, 1, [&](index_t t0, index_t t1) {
        std::vector<float> gq(static_cast<std::size_t>(heads * d)), gw(static_cast<std::size_t>(heads));
        for (index_t t = t0; t < t1; ++t) {
          std::fill(gq.begin(), gq.end(), 0.0f);
          std::fill(gw.begin(), gw.end(), 0.0f);
          for (index_t s = ranges(t, 0); s < ranges(t, 1); ++s) {
            const float g = grad_scores(t, s) * k_scale(s);
            if (g == 0.0f) continue;
            const float* kr = k.row(s);
            for (index_t h = 0; h < heads; ++h) {
              const float* qr = cpu_detail::indexer::head_row(q, t, h);
              const float z = lightning_indexer_dot(qr, kr, d);
              if (!lightning_indexer_relu_active(z)) continue;
              gw[static_cast<std::size_t>(h)] += g * z;
              const float c = g * w(t, h);
              float* DSA_RESTRICT acc = gq.data() + h * d;
              for (index_t i = 0; i < d; ++i) acc[i] += c * kr[i];
            }
          }
          if (!grad_q.is_absent()) {
            for (index_t h = 0; h < heads; ++h) std::copy_n(gq.data() + h * d, d, cpu_detail::indexer::head_row(grad_q, t, h));
          }
          if (!grad_w.is_absent()) std::copy_n(gw.data(), heads, grad_w.row(t));
        }
      });
    }
    if (!grad_k.is_absent()) {
      cpu_detail::parallel_for(be, n, 16, [&](index_t s0, index_t s1) {
        std::vector<float> gk(static_cast<std::size_t>(d));
        for (index_t s = s0; s < s1; ++s) {
          std::fill(gk.begin(), gk.end(), 0.0f);
          const float* kr = k.row(s);
          for (index_t t = 0; t < m; ++t) {
            if (s < ranges(t, 0) || s >= ranges(t, 1)) continue;
            const float g = grad_scores(t, s) * k_scale(s);
            if (g == 0.0f) continue;
            for (index_t h = 0; h < heads; ++h) {
              const float* qr = cpu_detail::indexer::head_row(q, t, h);
              const float z = lightning_indexer_dot(qr, kr, d);
              if (!lightning_indexer_relu_active(z)) continue;
              const float c = g * w(t, h);
              for (index_t i = 0; i < d; ++i) gk[static_cast<std::size_t>(i)] += c * qr[i];
            }
          }
          std::copy_n(gk.data(), d, grad_k.row(s));
        }
      });
    }
  }
};

DSA_NAMESPACE_END
