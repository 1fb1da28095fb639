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
// for any thread count.
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

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/e4m3_value.hpp"
#include "dsa/cpu/parallel.hpp"
#include "dsa/numerics/fp32_ops.hpp"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/numerics/lightning_indexer.hpp"
#include "dsa/numerics/paging.hpp"
#include "dsa/ops/lightning_indexer.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

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

// acc = acc + a · kv lane by lane, rounded as detail::fma_if_fast (fused where the target has
// FMA, whatever the optimisation level). By reference: without AVX-512 a 64-byte vector passed
// by value has an ABI of its own.
DSA_FORCEINLINE void fma_lanes(tile_vec& acc, float a, const tile_vec& kv) {
#if defined(__AVX512F__)
  // The builtin on GCC's own vector type: through the intrinsics' may-alias __m512, GCC kept
  // the accumulator arrays in memory (a store per multiply-add, the backward 40% slower).
  const tile_vec av = {a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a};
  acc = __builtin_ia32_vfmaddps512_mask(av, kv, acc, static_cast<__mmask16>(-1), _MM_FROUND_CUR_DIRECTION);
#elif DSA_HOST_HAS_FMA
  for (index_t s = 0; s < key_tile; ++s) acc[s] = detail::fma_if_fast(a, kv[s], acc[s]);
#else
  acc += a * kv;
#endif
}

// z[hb * key_tile + s] = qf[hb] · kt[:, s] for the HB heads (qf is [HB, d] row-major, kt the
// transposed key tile [d, key_tile]): each lane sums over i in ascending order from +0.
template <index_t HB>
DSA_FORCEINLINE void head_block_dots(const float* DSA_RESTRICT qf, index_t d, const float* DSA_RESTRICT kt,
                                     float* DSA_RESTRICT z) {
  tile_vec acc[HB];
  for (index_t hb = 0; hb < HB; ++hb) acc[hb] = tile_vec{};
  for (index_t i = 0; i < d; ++i) {
    tile_vec kv;  // loaded with memcpy: no alignment assumed, no vector-typed ABI
    std::memcpy(&kv, kt + i * key_tile, sizeof kv);
    for (index_t hb = 0; hb < HB; ++hb) fma_lanes(acc[hb], qf[hb * d + i], kv);
  }
  std::memcpy(z, acc, sizeof acc);
}
#else
template <index_t HB>
DSA_FORCEINLINE void head_block_dots(const float* DSA_RESTRICT qf, index_t d, const float* DSA_RESTRICT kt,
                                     float* DSA_RESTRICT z) {
  float acc[HB][key_tile];
  for (index_t hb = 0; hb < HB; ++hb) {
    for (index_t s = 0; s < key_tile; ++s) acc[hb][s] = 0.0f;
  }
  for (index_t i = 0; i < d; ++i) {
    const float* DSA_RESTRICT kr = kt + i * key_tile;
    for (index_t hb = 0; hb < HB; ++hb) {
      const float qv = qf[hb * d + i];
      for (index_t s = 0; s < key_tile; ++s) acc[hb][s] = detail::fma_if_fast(qv, kr[s], acc[hb][s]);
    }
  }
  std::memcpy(z, acc, sizeof acc);
}
#endif

// tot[s] += sum over the HB heads of w[h] · ReLU(qf[h] · kt[:, s]), heads in ascending order.
template <index_t HB>
DSA_FORCEINLINE void head_block_scores(const float* DSA_RESTRICT qf, index_t d, const float* DSA_RESTRICT kt,
                                       const float* DSA_RESTRICT w, float* DSA_RESTRICT tot) {
  float dots[HB * key_tile];
  head_block_dots<HB>(qf, d, kt, dots);
  for (index_t hb = 0; hb < HB; ++hb) {
    for (index_t s = 0; s < key_tile; ++s) tot[s] += detail::mul_rn(w[hb], lightning_indexer_relu(dots[hb * key_tile + s]));
  }
}

// tot[s] = sum_h w[h] · ReLU(qf[h] · kt[:, s]) for the key_tile keys of the tile, heads in
// ascending order.
inline void tile_scores(const float* qf, index_t heads, index_t d, const float* w, const float* kt, float* tot) {
  for (index_t s = 0; s < key_tile; ++s) tot[s] = 0.0f;
  index_t h = 0;
  for (; h + head_block <= heads; h += head_block) head_block_scores<head_block>(qf + h * d, d, kt, w + h, tot);
  for (; h < heads; ++h) head_block_scores<1>(qf + h * d, d, kt, w + h, tot);
}

// z[h * key_tile + s] = qf[h] · kt[:, s] for every head (qf [heads, d] row-major). Out of line:
// inlined into the backward's loops, GCC stored the accumulators on every step.
[[gnu::noinline]] inline void tile_dots(const float* qf, index_t heads, index_t d, const float* kt, float* z) {
  index_t h = 0;
  for (; h + head_block <= heads; h += head_block) head_block_dots<head_block>(qf + h * d, d, kt, z + h * key_tile);
  for (; h < heads; ++h) head_block_dots<1>(qf + h * d, d, kt, z + h * key_tile);
}

// Pointer to v(t, h, 0), also when the last extent is 0 (no element is formed; a view without
// elements may be null, and offsetting null is undefined, so it stays null).
template <class T>
DSA_FORCEINLINE T* head_row(const tensor_view<T, 3>& v, index_t t, index_t h) {
  return v.data_handle() == nullptr ? v.data_handle() : v.data_handle() + t * v.stride(0) + h * v.stride(1);
}

// One row of d values to fp32.
DSA_FORCEINLINE void decode_row(const fp8_e4m3* DSA_RESTRICT src, index_t d, float* DSA_RESTRICT dst) {
  for (index_t i = 0; i < d; ++i) dst[i] = e4m3_value(src[i].bits);
}
DSA_FORCEINLINE void decode_row(const std::uint8_t* DSA_RESTRICT src, index_t d, float* DSA_RESTRICT dst) {
  for (index_t i = 0; i < d; ++i) dst[i] = e4m3_value(src[i]);
}
DSA_FORCEINLINE void decode_row(const float* DSA_RESTRICT src, index_t d, float* DSA_RESTRICT dst) {
  for (index_t i = 0; i < d; ++i) dst[i] = src[i];
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
// GCC 12 reports its own _mm512_undefined_ps() inside the shuffle intrinsics as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// kt[i * key_tile + j] = rows[j * d + i]: the key_tile decoded rows transposed into the tile.
inline void transpose_tile(const float* DSA_RESTRICT rows, index_t d, float* DSA_RESTRICT kt) {
  index_t i0 = 0;
#if defined(__AVX512F__)
  static_assert(key_tile == 16);
  // 16 x 16 blocks in registers: 2-, 4-, 8- and 16-lane interleaves.
  for (; i0 + 16 <= d; i0 += 16) {
    __m512 r[16], t[16];
    for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_ps(rows + j * d + i0);
    for (int j = 0; j < 16; j += 2) {
      t[j] = _mm512_unpacklo_ps(r[j], r[j + 1]);
      t[j + 1] = _mm512_unpackhi_ps(r[j], r[j + 1]);
    }
    for (int j = 0; j < 16; j += 4) {
      r[j] = _mm512_shuffle_ps(t[j], t[j + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[j + 1] = _mm512_shuffle_ps(t[j], t[j + 2], _MM_SHUFFLE(3, 2, 3, 2));
      r[j + 2] = _mm512_shuffle_ps(t[j + 1], t[j + 3], _MM_SHUFFLE(1, 0, 1, 0));
      r[j + 3] = _mm512_shuffle_ps(t[j + 1], t[j + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int j = 0; j < 16; j += 8) {
      for (int u = 0; u < 4; ++u) {
        t[j + u] = _mm512_shuffle_f32x4(r[j + u], r[j + u + 4], 0x88);
        t[j + u + 4] = _mm512_shuffle_f32x4(r[j + u], r[j + u + 4], 0xDD);
      }
    }
    for (int u = 0; u < 8; ++u) {
      r[u] = _mm512_shuffle_f32x4(t[u], t[u + 8], 0x88);
      r[u + 8] = _mm512_shuffle_f32x4(t[u], t[u + 8], 0xDD);
    }
    for (int i = 0; i < 16; ++i) _mm512_storeu_ps(kt + (i0 + i) * key_tile, r[i]);
  }
#endif
  for (index_t i = i0; i < d; ++i) {
    for (index_t j = 0; j < key_tile; ++j) kt[i * key_tile + j] = rows[j * d + i];
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#if defined(__AVX512BW__)
// kt[(i0 + c) * key_tile + j] = value of code i0 + c of row j, for c < 16 and the 16 rows: the
// 16 x 16 bytes transposed in registers (byte and word unpacks within 128-bit lanes, then one
// dword permute across them) before they are widened, which costs about a third of decoding the
// rows to fp32 first and transposing 16 x 16 floats.
DSA_FORCEINLINE void decode_codes16_transposed(const std::uint8_t* const* rows, index_t i0, float* DSA_RESTRICT kt) {
  static_assert(key_tile == 16);
  __m512i z[4];  // z[a], 128-bit lane q: the 16 codes of row 4q + a
  for (int a = 0; a < 4; ++a) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[a] + i0)));
    for (int q = 1; q < 4; ++q) {
      const __m128i r = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[4 * q + a] + i0));
      switch (q) {
        case 1: v = _mm512_inserti32x4(v, r, 1); break;
        case 2: v = _mm512_inserti32x4(v, r, 2); break;
        default: v = _mm512_inserti32x4(v, r, 3); break;
      }
    }
    z[a] = v;
  }
  // Per lane q: t0/t1 interleave rows 4q, 4q + 1 (codes 0-7 / 8-15), t2/t3 rows 4q + 2, 4q + 3;
  // u[g] dword c then holds code 4g + c of rows 4q .. 4q + 3.
  const __m512i t0 = _mm512_unpacklo_epi8(z[0], z[1]), t1 = _mm512_unpackhi_epi8(z[0], z[1]);
  const __m512i t2 = _mm512_unpacklo_epi8(z[2], z[3]), t3 = _mm512_unpackhi_epi8(z[2], z[3]);
  const __m512i u[4] = {_mm512_unpacklo_epi16(t0, t2), _mm512_unpackhi_epi16(t0, t2), _mm512_unpacklo_epi16(t1, t3),
                        _mm512_unpackhi_epi16(t1, t3)};
  // Dword 4c + q of the result = dword 4q + c of u[g]: lane c is code 4g + c of rows 0 .. 15.
  const __m512i across = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (int g = 0; g < 4; ++g) {
    const __m512i w = _mm512_permutexvar_epi32(across, u[g]);
    float* dst = kt + (i0 + 4 * g) * key_tile;
    _mm512_storeu_ps(dst, e4m3_values16(_mm512_castsi512_si128(w)));
    _mm512_storeu_ps(dst + key_tile, e4m3_values16(_mm512_extracti32x4_epi32(w, 1)));
    _mm512_storeu_ps(dst + 2 * key_tile, e4m3_values16(_mm512_extracti32x4_epi32(w, 2)));
    _mm512_storeu_ps(dst + 3 * key_tile, e4m3_values16(_mm512_extracti32x4_epi32(w, 3)));
  }
}
#endif

// kt [d, key_tile]: the values of the code rows src[0 .. key_tile) (d codes each), transposed;
// `rows` [key_tile, d] is scratch for the generic path (decode, then transpose_tile).
inline void decode_code_tile(const std::uint8_t* const* src, index_t d, float* DSA_RESTRICT rows, float* DSA_RESTRICT kt) {
#if defined(__AVX512BW__)
  if (d % 16 == 0) {
    for (index_t i0 = 0; i0 < d; i0 += 16) decode_codes16_transposed(src, i0, kt);
    return;
  }
#endif
  for (index_t j = 0; j < key_tile; ++j) decode_row(src[j], d, rows + j * d);
  transpose_tile(rows, d, kt);
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

#if defined(__GNUC__)
// dst[i0, i0 + U key_tile) += c[a] · src[a][same] for a = 0 .. count - 1, in that order, the
// chunk held in U vectors across the terms. Out of line, as tile_dots: inlined into the
// backward's loops, GCC stored the accumulators on every term.
template <int U>
[[gnu::noinline]] inline void accumulate_chunk(float* DSA_RESTRICT dst, const float* const* src, const float* c,
                                               index_t count, index_t i0) {
  tile_vec acc[U];
  std::memcpy(acc, dst + i0, sizeof acc);
  for (index_t a = 0; a < count; ++a) {
    const float* DSA_RESTRICT x = src[a] + i0;
    const float ca = c[a];
    for (int u = 0; u < U; ++u) {
      tile_vec v;  // one vector at a time: an array of them went through the stack
      std::memcpy(&v, x + u * key_tile, sizeof v);
      fma_lanes(acc[u], ca, v);
    }
  }
  std::memcpy(dst + i0, acc, sizeof acc);
}
#endif

// dst[i] += c[a] · src[a][i] for a = 0 .. count - 1 in that order, for i in [0, d).
inline void accumulate_rows(float* DSA_RESTRICT dst, index_t d, const float* const* src, const float* c, index_t count) {
  if (count == 0) return;
  index_t i0 = 0;
#if defined(__GNUC__)
  for (; i0 + 8 * key_tile <= d; i0 += 8 * key_tile) accumulate_chunk<8>(dst, src, c, count, i0);
  for (; i0 + key_tile <= d; i0 += key_tile) accumulate_chunk<1>(dst, src, c, count, i0);
#endif
  for (; i0 < d; ++i0) {
    float acc = dst[i0];
    for (index_t a = 0; a < count; ++a) acc = detail::fma_if_fast(c[a], src[a][i0], acc);
    dst[i0] = acc;
  }
}

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
