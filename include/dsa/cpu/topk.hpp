// CPU backend of top-k selection and row gathering.
//
// Radix select per row, O(n), on the order-preserving keys of numerics/topk.hpp (every score of
// the range is selectable; NaN ranks above every number):
//   1. histogram pass over the row: each score's key (computed 16 at a time with AVX-512, 8 with
//      AVX2) and the histogram of its top 11 bits; the bucket b0 holding the k-th largest key
//      follows;
//   2. collect pass over the row: every (position, key) with a key in bucket b0 or above goes,
//      in index order, to a candidate list (vector compress-stores; with AVX2 a lane permute
//      from a table of masks) — about k..2k entries on real score rows, so nothing later touches
//      the row again;
//   3. two passes over the candidates (the next 11 bits, then the last 10) narrow bucket b0 down
//      to the exact threshold key T and the number r of elements equal to T still to take;
//   4. emission over the candidates, in index order: every key > T and the first r keys == T.
//      The output is ascending and ties go to the smaller index without any sorting.
// Many rows are split over threads row by row. Fewer rows than threads (decode: one row) split
// each row's passes 1 and 2 over column chunks instead: per-chunk histograms are summed, and
// each chunk's candidates go to their own segment of the list at an offset known from the
// histograms, so the candidate list, hence the output, is the same for every thread count.
#pragma once

#include <algorithm>
#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cpu/arch/isa.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/numerics/paging.hpp"
#include "dsa/numerics/topk.hpp"
#include "dsa/ops/topk.hpp"

#if DSA_CPU_HAS_AVX512 || DSA_CPU_HAS_AVX2
#include <immintrin.h>
#endif

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

// The CPU's digits: 11 + 11 + 10 bits of the 32-bit key (the CUDA backend's 8-bit digits are
// in numerics/topk.hpp; any digit split finds the same threshold).
inline constexpr int topk_cpu_bits0 = 11;
inline constexpr std::uint32_t topk_cpu_buckets0 = 1u << topk_cpu_bits0;
inline constexpr int topk_cpu_shift0 = 32 - topk_cpu_bits0;  // 21
inline constexpr int topk_cpu_shift1 = 10;                    // the second digit is bits [10, 21)
inline constexpr std::uint32_t topk_cpu_buckets1 = 1u << (topk_cpu_shift0 - topk_cpu_shift1);
inline constexpr std::uint32_t topk_cpu_buckets2 = 1u << topk_cpu_shift1;
// Slack after each chunk's candidate segment: the vector path stores 16 lanes at a time.
inline constexpr index_t topk_segment_pad = 16;
// Rows shorter than this are never split over threads (the split's fixed costs would dominate).
inline constexpr index_t topk_split_min = 16 * 1024;

/// Like topk_radix_find_bucket, for `buckets` buckets: the bucket holding the remaining-th
/// largest counted element; lowers `remaining` by the counts of all larger buckets.
inline std::uint32_t topk_find_bucket(const std::uint32_t* histogram, std::uint32_t buckets, std::uint32_t& remaining) {
  for (std::uint32_t b = buckets - 1; b > 0; --b) {
    const std::uint32_t c = histogram[b];
    if (c >= remaining) return b;
    remaining -= c;
  }
  return 0u;
}

#if DSA_CPU_HAS_AVX512
// topk_radix_key of 16 scores: bit-identical to the scalar function (tested over special values
// and random bit patterns).
DSA_FORCEINLINE __m512i topk_keys16(const float* x) {
  const __m512i u0 = _mm512_loadu_si512(static_cast<const void*>(x));
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_andnot_si512(sign_bit, u0), _mm512_set1_epi32(0x7F800000));
  // -0.0 -> +0.0, then negative floats are inverted and positive ones get the sign bit.
  const __m512i u = _mm512_mask_mov_epi32(u0, _mm512_cmpeq_epi32_mask(u0, sign_bit), _mm512_setzero_si512());
  const __m512i key = _mm512_xor_si512(u, _mm512_or_si512(_mm512_srai_epi32(u, 31), sign_bit));
  return _mm512_mask_mov_epi32(key, nan, _mm512_set1_epi32(static_cast<int>(topk_nan_key)));
}
#elif DSA_CPU_HAS_AVX2
// topk_keys16 on 8 scores (x86-64-v3), blends for the masks: bit-identical to the scalar
// function. |u|'s pattern has its sign bit clear, so the signed compare orders it as unsigned.
DSA_FORCEINLINE __m256i topk_keys8(const float* x) {
  const __m256i u0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i sign_bit = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_andnot_si256(sign_bit, u0), _mm256_set1_epi32(0x7F800000));
  const __m256i u = _mm256_andnot_si256(_mm256_cmpeq_epi32(u0, sign_bit), u0);  // -0.0 -> +0.0
  const __m256i key = _mm256_xor_si256(u, _mm256_or_si256(_mm256_srai_epi32(u, 31), sign_bit));
  return _mm256_blendv_epi8(key, _mm256_set1_epi32(static_cast<int>(topk_nan_key)), nan);
}

// AVX2 has no compress: for each 8-bit lane mask, the lanes it keeps in order (then zeros), as
// bytes for _mm256_cvtepu8_epi32 and a lane permute.
inline constexpr auto topk_compress8_table = [] {
  std::array<std::uint8_t, 256 * 8> t{};
  for (unsigned m = 0; m < 256; ++m) {
    unsigned w = 0;
    for (unsigned lane = 0; lane < 8; ++lane) {
      if ((m >> lane) & 1u) t[m * 8 + w++] = static_cast<std::uint8_t>(lane);
    }
  }
  return t;
}();

// The lanes of v selected by the 8-bit mask m, moved to the front.
DSA_FORCEINLINE __m256i topk_compress8(__m256i v, int m) {
  const __m256i lanes =
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(topk_compress8_table.data() + 8 * m)));
  return _mm256_permutevar8x32_epi32(v, lanes);
}

// The 8-bit mask of the lanes of a mask vector (all ones or zeros per lane).
DSA_FORCEINLINE int topk_lane_mask8(__m256i m) { return _mm256_movemask_ps(_mm256_castsi256_ps(m)); }
#endif

#if DSA_CPU_HAS_AVX512 || DSA_CPU_HAS_AVX2
// d[0, 256) = the top digits of the keys of x[0, 256), a vector of keys at a time.
DSA_FORCEINLINE void topk_digits256(const float* x, std::uint32_t* d) {
#if DSA_CPU_HAS_AVX512
  for (int v = 0; v < 256; v += 16) {
    _mm512_store_si512(static_cast<void*>(d + v), _mm512_srli_epi32(topk_keys16(x + v), topk_cpu_shift0));
  }
#else
  for (int v = 0; v < 256; v += 8) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(d + v), _mm256_srli_epi32(topk_keys8(x + v), topk_cpu_shift0));
  }
#endif
}
#endif

/// Pass 1 over x[0, len): hist[0, topk_cpu_buckets0) = histogram of the keys' top digit (hist
/// is overwritten).
inline void topk_histogram(const float* x, index_t len, std::uint32_t* hist) {
  // Four interleaved sub-histograms keep runs of equal digits (scores share sign and exponent)
  // from serialising on one counter's store-to-load forwarding.
  alignas(64) std::uint32_t sub[4][topk_cpu_buckets0];
  std::memset(sub, 0, sizeof sub);
  index_t j = 0;
#if DSA_CPU_HAS_AVX512 || DSA_CPU_HAS_AVX2
  // Digits of 256 scores at a time go through a small buffer: the scalar increments then load
  // them from L1 instead of forwarding from the vector stores just issued.
  alignas(64) std::uint32_t d[256];
  for (; j + 256 <= len; j += 256) {
    topk_digits256(x + j, d);
    for (int u = 0; u < 256; u += 4) {
      ++sub[0][d[u]];
      ++sub[1][d[u + 1]];
      ++sub[2][d[u + 2]];
      ++sub[3][d[u + 3]];
    }
  }
#else
  for (; j + 4 <= len; j += 4) {
    for (int u = 0; u < 4; ++u) ++sub[u][topk_radix_key(x[j + u]) >> topk_cpu_shift0];
  }
#endif
  for (; j < len; ++j) ++sub[0][topk_radix_key(x[j]) >> topk_cpu_shift0];
  for (std::uint32_t b = 0; b < topk_cpu_buckets0; ++b) hist[b] = sub[0][b] + sub[1][b] + sub[2][b] + sub[3][b];
}

/// Pass 2 over x[0, len): appends (base + j, key) for every key >= lo, in index order, to
/// pos[] and key[]; returns the count. Both arrays need topk_segment_pad entries of slack.
inline index_t topk_collect(const float* x, index_t len, std::uint32_t lo, std::uint32_t base, std::uint32_t* pos,
                            std::uint32_t* keys) {
  index_t w = 0;
  index_t j = 0;
#if DSA_CPU_HAS_AVX512
  const __m512i lo_v = _mm512_set1_epi32(static_cast<int>(lo));
  __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(base)),
                                 _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __m512i step = _mm512_set1_epi32(16);
  for (; j + 16 <= len; j += 16) {
    const __m512i key = topk_keys16(x + j);
    const __mmask16 m = _mm512_cmpge_epu32_mask(key, lo_v);
    if (m != 0) {
      // Register compress + full store (compress-to-memory is microcoded on some cores); the
      // lanes past the count land in the segment's slack and are overwritten or ignored.
      _mm512_storeu_si512(static_cast<void*>(pos + w), _mm512_maskz_compress_epi32(m, idx));
      _mm512_storeu_si512(static_cast<void*>(keys + w), _mm512_maskz_compress_epi32(m, key));
      w += __builtin_popcount(m);
    }
    idx = _mm512_add_epi32(idx, step);
  }
#elif DSA_CPU_HAS_AVX2
  // key >= lo as unsigned: both biased by 2^31 for the signed compare.
  const __m256i bias = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i lo_v = _mm256_set1_epi32(static_cast<int>(lo ^ 0x80000000u));
  __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(base)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  for (; j + 8 <= len; j += 8) {
    const __m256i key = topk_keys8(x + j);
    const int m = ~topk_lane_mask8(_mm256_cmpgt_epi32(lo_v, _mm256_xor_si256(key, bias))) & 0xFF;
    if (m != 0) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pos + w), topk_compress8(idx, m));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(keys + w), topk_compress8(key, m));
      w += __builtin_popcount(static_cast<unsigned>(m));
    }
    idx = _mm256_add_epi32(idx, _mm256_set1_epi32(8));
  }
#endif
  for (; j < len; ++j) {
    const std::uint32_t key = topk_radix_key(x[j]);
    pos[w] = base + static_cast<std::uint32_t>(j);
    keys[w] = key;
    w += key >= lo ? 1 : 0;  // branch-free: the store past the count lands in the slack
  }
  return w;
}

/// Appends to dst the keys of src[0, len) whose bits above `shift` equal `prefix`; returns the
/// count. dst needs topk_segment_pad entries of slack.
inline index_t topk_select_prefix(const std::uint32_t* src, index_t len, int shift, std::uint32_t prefix,
                                  std::uint32_t* dst) {
  index_t w = 0;
  index_t i = 0;
#if DSA_CPU_HAS_AVX512
  const __m512i want = _mm512_set1_epi32(static_cast<int>(prefix));
  const __m128i sh = _mm_cvtsi32_si128(shift);
  for (; i + 16 <= len; i += 16) {
    const __m512i key = _mm512_loadu_si512(static_cast<const void*>(src + i));
    const __mmask16 m = _mm512_cmpeq_epi32_mask(_mm512_srl_epi32(key, sh), want);
    _mm512_storeu_si512(static_cast<void*>(dst + w), _mm512_maskz_compress_epi32(m, key));
    w += __builtin_popcount(m);
  }
#elif DSA_CPU_HAS_AVX2
  const __m256i want = _mm256_set1_epi32(static_cast<int>(prefix));
  const __m128i sh = _mm_cvtsi32_si128(shift);
  for (; i + 8 <= len; i += 8) {
    const __m256i key = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const int m = topk_lane_mask8(_mm256_cmpeq_epi32(_mm256_srl_epi32(key, sh), want));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + w), topk_compress8(key, m));
    w += __builtin_popcount(static_cast<unsigned>(m));
  }
#endif
  for (; i < len; ++i) {
    dst[w] = src[i];
    w += (src[i] >> shift) == prefix ? 1 : 0;
  }
  return w;
}

/// The emission over one candidate segment: appends start + pos[i] for every key[i] > T and for
/// the keys == T while `ties_left` lasts (decremented), in order, at out[written]; returns the
/// new `written`. The caller guarantees that no more than k - written are taken.
inline index_t topk_emit(const std::uint32_t* pos, const std::uint32_t* keys, index_t len, std::uint32_t threshold,
                         std::uint32_t& ties_left, index_t start, std::int32_t* out, index_t written) {
  index_t i = 0;
#if DSA_CPU_HAS_AVX512 && DSA_CPU_HAS_BMI2
  const __m512i t = _mm512_set1_epi32(static_cast<int>(threshold));
  const __m512i base = _mm512_set1_epi32(static_cast<int>(start));
  for (; i < len; i += 16) {
    const index_t left = len - i;
    const auto valid = static_cast<__mmask16>(left >= 16 ? 0xFFFFu : (1u << left) - 1u);
    const __m512i key = _mm512_maskz_loadu_epi32(valid, static_cast<const void*>(keys + i));
    const __m512i p = _mm512_maskz_loadu_epi32(valid, static_cast<const void*>(pos + i));
    const __mmask16 gt = _mm512_mask_cmpgt_epu32_mask(valid, key, t);
    __mmask16 eq = _mm512_mask_cmpeq_epi32_mask(valid, key, t);
    const auto n_eq = static_cast<std::uint32_t>(__builtin_popcount(eq));
    if (n_eq > ties_left) eq = static_cast<__mmask16>(_pdep_u32((1u << ties_left) - 1u, eq));  // the first ties_left ties
    ties_left -= n_eq > ties_left ? ties_left : n_eq;
    const auto take = static_cast<__mmask16>(gt | eq);
    const int n = __builtin_popcount(take);
    _mm512_mask_storeu_epi32(static_cast<void*>(out + written), static_cast<__mmask16>((1u << n) - 1u),
                             _mm512_maskz_compress_epi32(take, _mm512_add_epi32(p, base)));
    written += n;
  }
#else
  for (; i < len; ++i) {
    const std::uint32_t key = keys[i];
    const bool tie = key == threshold && ties_left > 0;
    if (key > threshold || tie) out[written++] = static_cast<std::int32_t>(start + static_cast<index_t>(pos[i]));
    ties_left -= tie ? 1u : 0u;
  }
#endif
  return written;
}

struct topk_scratch {
  std::vector<std::uint32_t> hist;  // [chunks][topk_cpu_buckets0]
  std::vector<index_t> offset;      // per chunk: candidate segment start
  std::vector<index_t> count;       // per chunk: candidates in the segment
  std::vector<std::uint32_t> pos;   // candidate positions (relative to the row start)
  std::vector<std::uint32_t> keys;  // candidate keys
  std::vector<std::uint32_t> narrow;  // keys of the candidates in the threshold's bucket so far
};

/// Writes the k best positions of x[start, end) (absolute column indices, ascending) to
/// out[0, k), -1 padded. With `split` set, passes 1 and 2 run over column chunks on be's
/// threads; otherwise everything runs on the calling thread.
inline void topk_row(const cpu_backend& be, bool split, const float* x, index_t start, index_t end, index_t k,
                     std::int32_t* out, topk_scratch& sc) {
  const index_t len = end - start;  // every score of the range is selectable (numerics/topk.hpp)
  const float* row = x + start;
  if (len <= 0) {
    std::fill(out, out + k, std::int32_t{-1});
    return;
  }
  index_t chunks = 1;
  if (split && len >= topk_split_min) chunks = std::min<index_t>(thread_count(be), len / (topk_split_min / 2));
  chunks = std::max<index_t>(chunks, 1);
  auto chunk_begin = [&](index_t c) { return len * c / chunks; };
  auto for_chunks = [&](auto&& body) {
    if (chunks == 1) {
      body(index_t{0});
    } else {
      parallel_for(be, chunks, 1, [&](index_t c0, index_t c1) {
        for (index_t c = c0; c < c1; ++c) body(c);
      });
    }
  };
  const auto n_chunks = static_cast<std::size_t>(chunks);
  sc.hist.resize(n_chunks * topk_cpu_buckets0);
  sc.offset.resize(n_chunks);
  sc.count.resize(n_chunks);

  // 1. Histograms of the top digit, per chunk, then summed.
  for_chunks([&](index_t c) {
    const index_t b = chunk_begin(c);
    topk_histogram(row + b, chunk_begin(c + 1) - b, sc.hist.data() + static_cast<std::size_t>(c) * topk_cpu_buckets0);
  });
  std::uint32_t hist[topk_cpu_buckets0];
  std::memcpy(hist, sc.hist.data(), sizeof hist);
  for (std::size_t c = 1; c < n_chunks; ++c) {
    const std::uint32_t* h = sc.hist.data() + c * topk_cpu_buckets0;
    for (std::uint32_t b = 0; b < topk_cpu_buckets0; ++b) hist[b] += h[b];
  }
  // The candidates: every key if there are at most k of them (threshold topk_no_key, below
  // every key, nothing tied), else every key in the k-th largest key's bucket b0 or above.
  std::uint32_t remaining = 0;
  std::uint32_t b0 = 0;
  std::uint32_t lo = topk_no_key;
  if (len > k) {
    remaining = static_cast<std::uint32_t>(k);
    b0 = topk_find_bucket(hist, topk_cpu_buckets0, remaining);
    lo = b0 << topk_cpu_shift0;
  }
  index_t total = 0;
  for (std::size_t c = 0; c < n_chunks; ++c) {
    index_t cnt = 0;
    if (len > k) {
      const std::uint32_t* h = sc.hist.data() + c * topk_cpu_buckets0;
      for (std::uint32_t b = b0; b < topk_cpu_buckets0; ++b) cnt += h[b];
    } else {
      cnt = chunk_begin(static_cast<index_t>(c) + 1) - chunk_begin(static_cast<index_t>(c));
    }
    sc.offset[c] = total;
    sc.count[c] = cnt;
    total += cnt + topk_segment_pad;
  }
  if (sc.pos.size() < static_cast<std::size_t>(total)) {
    sc.pos.resize(static_cast<std::size_t>(total));
    sc.keys.resize(static_cast<std::size_t>(total));
  }

  // 2. Candidates, per chunk into its own segment.
  for_chunks([&](index_t c) {
    const index_t b = chunk_begin(c);
    const auto o = static_cast<std::size_t>(sc.offset[static_cast<std::size_t>(c)]);
    [[maybe_unused]] const index_t got = topk_collect(row + b, chunk_begin(c + 1) - b, lo, static_cast<std::uint32_t>(b),
                                                      sc.pos.data() + o, sc.keys.data() + o);
    assert(got == sc.count[static_cast<std::size_t>(c)]);
  });

  // 3. The exact threshold T from the candidates in bucket b0: their keys are compacted (the
  // test is a coin flip per candidate, so a branch would mispredict), the next digit's
  // histogram picks b1; those in (b0, b1) again, and the last digit's histogram picks T.
  std::uint32_t threshold = topk_no_key;
  if (len > k) {
    sc.narrow.resize(static_cast<std::size_t>(total));
    std::uint32_t* nk = sc.narrow.data();
    index_t n1 = 0;
    for (std::size_t c = 0; c < n_chunks; ++c) {
      n1 += topk_select_prefix(sc.keys.data() + sc.offset[c], sc.count[c], topk_cpu_shift0, b0, nk + n1);
    }
    std::uint32_t h1[topk_cpu_buckets1] = {};
    for (index_t i = 0; i < n1; ++i) ++h1[(nk[i] >> topk_cpu_shift1) & (topk_cpu_buckets1 - 1)];
    const std::uint32_t b1 = topk_find_bucket(h1, topk_cpu_buckets1, remaining);
    const std::uint32_t prefix = (b0 << (topk_cpu_shift0 - topk_cpu_shift1)) | b1;
    const index_t n2 = topk_select_prefix(nk, n1, topk_cpu_shift1, prefix, nk);  // in place: w <= i
    std::uint32_t h2[topk_cpu_buckets2] = {};
    for (index_t i = 0; i < n2; ++i) ++h2[nk[i] & (topk_cpu_buckets2 - 1)];
    const std::uint32_t b2 = topk_find_bucket(h2, topk_cpu_buckets2, remaining);
    threshold = (prefix << topk_cpu_shift1) | b2;
  }

  // 4. Every key > T and the first `remaining` keys == T, in index order: exactly k when
  // len > k, every candidate otherwise (T = topk_no_key, below every key).
  index_t written = 0;
  std::uint32_t ties_left = remaining;
  for (std::size_t c = 0; c < n_chunks; ++c) {
    written = topk_emit(sc.pos.data() + sc.offset[c], sc.keys.data() + sc.offset[c], sc.count[c], threshold, ties_left,
                        start, out, written);
  }
  std::fill(out + written, out + k, std::int32_t{-1});
}

template <class Map>
void topk_rows(const cpu_backend& be, tensor_view<const float, 2> scores, tensor_view<const std::int32_t, 2> ranges,
               index_t k, tensor_view<std::int32_t, 2> out, Map&& map) {
  const index_t m = scores.extent(0);
  if (m < thread_count(be)) {
    // Fewer rows than threads (decode): each row's passes over the scores go over the threads.
    topk_scratch sc;
    for (index_t t = 0; t < m; ++t) {
      std::int32_t* o = out.row(t);
      topk_row(be, true, scores.row(t), ranges(t, 0), ranges(t, 1), k, o, sc);
      map(t, o);
    }
    return;
  }
  parallel_for(be, m, 1, [&](index_t t0, index_t t1) {
    topk_scratch sc;
    for (index_t t = t0; t < t1; ++t) {
      std::int32_t* o = out.row(t);
      topk_row(be, false, scores.row(t), ranges(t, 0), ranges(t, 1), k, o, sc);
      map(t, o);
    }
  });
}

}  // namespace cpu_detail

template <>
struct op_impl<cpu_backend, topk_indices_op> {
  static void run(const cpu_backend& be, tensor_view<const float, 2> scores, tensor_view<const std::int32_t, 2> ranges,
                  index_t k, tensor_view<std::int32_t, 2> indices) {
    cpu_detail::topk_rows(be, scores, ranges, k, indices, [](index_t, std::int32_t*) {});
  }
  // The workspace overload: the CPU splits long rows over its threads with host scratch of its
  // own (see the top of this header) and ignores the workspace.
  static void run(const cpu_backend& be, tensor_view<const float, 2> scores, tensor_view<const std::int32_t, 2> ranges,
                  index_t k, tensor_view<std::int32_t, 2> indices, tensor_view<std::byte, 1> /*workspace*/) {
    run(be, scores, ranges, k, indices);
  }
};

template <>
struct op_impl<cpu_backend, topk_indices_paged_op> {
  static void run(const cpu_backend& be, tensor_view<const float, 2> scores, tensor_view<const std::int32_t, 2> ranges,
                  index_t k, tensor_view<const std::int32_t, 2> block_table, index_t block_size,
                  tensor_view<std::int32_t, 2> slots) {
    cpu_detail::topk_rows(be, scores, ranges, k, slots, [&](index_t t, std::int32_t* o) {
      // Nothing selected: the row's table may be empty (a null view), so do not touch it.
      if (o[0] < 0) return;
      const std::int32_t* table = block_table.row(t);
      for (index_t j = 0; j < k && o[j] >= 0; ++j) {
        o[j] = static_cast<std::int32_t>(paged_cache_slot(table, block_size, o[j]));
      }
    });
  }
};

template <>
struct op_impl<cpu_backend, gather_rows_op> {
  template <class T>
  static void run(const cpu_backend& be, tensor_view<const T, 2> src, tensor_view<const std::int32_t, 2> indices,
                  tensor_view<T, 3> dst) {
    const index_t n = src.extent(0), k = indices.extent(1), d = src.extent(1);
    const index_t bytes_per_row = d * static_cast<index_t>(sizeof(T));
    cpu_detail::parallel_for(be, indices.extent(0), 1, [&](index_t t0, index_t t1) {
      for (index_t t = t0; t < t1; ++t) {
        for (index_t j = 0; j < k; ++j) {
          T* out = dst.data_handle() + t * dst.stride(0) + j * dst.stride(1);
          const index_t i = indices(t, j);
          // The front-end has rejected every other out-of-range index; the check here keeps
          // this loop from ever reading outside src regardless.
          if (i >= 0 && i < n) {
            if (bytes_per_row > 0) std::memcpy(out, src.row(i), static_cast<std::size_t>(bytes_per_row));
          } else {
            std::fill(out, out + d, T{});
          }
        }
      }
    });
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CPU_OP_INSTANCES(DSA_TOPK_INSTANCES)
