// CPU backend of dsa::fp8_linear and dsa::linear.
//
// fp8_linear. The activation rows are quantized with act_quant's numerics (the vectorised
// group functions of cpu/fp8_quant.hpp) and their codes decoded to T = double (fp8_dot::exact)
// or float (fp8_dot::fp32). The weights are processed per panel of NR output features (NR
// divides 128, so a panel never straddles a weight-scale block) and per 128-wide k-block:
//  - the block's codes of the panel's rows are decoded into an L1 tile of bf16 pairs (every
//    e4m3 value is exact in bf16): AVX-512 loads 16 rows x 64 codes, transposes them as a
//    16 x 16 matrix of 4-code dwords, and decodes each dword column with 16-bit integer
//    operations into two vectors: lane j = (code k, code k + 2) and (k + 1, k + 3) of row j.
//    (Writing the values as fp32 instead took one 64-byte store per 16 codes, and stores were
//    the bottleneck: 1.4 cycles each on this CPU);
//  - decode (t <= 4 rows): a micro-kernel widens the pairs to T in registers and accumulates
//    t rows x NR outputs over NB blocks at once (each block's sum is an independent chain);
//    prefill (t > 4): the tile is widened once into a T tile [128][NR] and a register-blocked
//    micro-kernel (MR rows x NR outputs, x broadcast) runs over it for every MR rows;
//  - every output lane sums its block's products in ascending k from +0: exactly the
//    fp8_dot::fp32 definition of dsa/numerics/linear.hpp for T = float, and an exact sum (any
//    order is) for T = double, rounded once to fp32; then acc = fl32(acc + fl32(d * s)) in
//    ascending block order.
// Both paths compute every output with the same arithmetic in the same order, so results are
// independent of t (batch invariance), of the thread count (panels are split over threads;
// each output is computed by one thread) and of the ISA (GCC vector extensions: AVX-512, AVX2,
// SSE/NEON widths, or the scalar decode). Scratch (tiles, decoded activations) lives in
// thread-local buffers that grow to the largest call and are reused.
//
// linear. t <= 4 rows (decode: lm_head, the absorbed MLA projections, the MoE gate): a GEMV
// straight from the weight (bf16 widened in registers, nothing converted in memory), four
// outputs per step, each summed over k in vector lanes and reduced in a fixed tree. More rows:
// inputs converted exactly to fp32 per panel of outputs (scratch of about 512 KiB per thread)
// and multiplied with Eigen's fp32 GEMM per fixed panel. Panel and chunk sizes depend only on
// the shapes, never on the thread count: bit-identical for every thread count.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/cpu/packed_fp8_weight.hpp"
#include "dsa/cpu/parallel.hpp"
#include "dsa/cpu/prefetch.hpp"
#include "dsa/numerics/fp8_quant.hpp"
#include "dsa/numerics/linear.hpp"
#include "dsa/ops/fp8_quant.hpp"
#include "dsa/ops/linear.hpp"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define DSA_LINEAR_AVX512 1
#else
#define DSA_LINEAR_AVX512 0
#endif
#if !DSA_LINEAR_AVX512 && defined(__AVX2__)
#define DSA_LINEAR_AVX2 1
#else
#define DSA_LINEAR_AVX2 0
#endif
#if defined(__AVX__)
#include <immintrin.h>
#endif

DSA_NAMESPACE_BEGIN
namespace cpu_detail {
namespace linear_impl {

constexpr index_t block = fp8_linear_block;
/// k-quads (4 codes) per block: the unit of the bf16 pair tile.
constexpr index_t quads = block / 4;

template <class T>
using aligned_vector = std::vector<T, Eigen::aligned_allocator<T>>;

template <class T>
using row_major = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// ---- vectors ------------------------------------------------------------------------------------

// The widest vectors of the target: GCC vector extensions lower them to zmm, ymm or xmm
// registers (or to scalars), so one micro-kernel serves every ISA.
#if DSA_LINEAR_AVX512
inline constexpr int vec_bytes = 64;
#elif defined(__AVX__)
inline constexpr int vec_bytes = 32;
#else
inline constexpr int vec_bytes = 16;
#endif
typedef float vfloat __attribute__((vector_size(vec_bytes)));
typedef double vdouble __attribute__((vector_size(vec_bytes)));
typedef float vfloat_half __attribute__((vector_size(vec_bytes / 2)));
typedef std::uint32_t vuint __attribute__((vector_size(vec_bytes)));
typedef std::uint16_t vhalf __attribute__((vector_size(vec_bytes / 2)));

template <class T>
struct vec_of;
template <>
struct vec_of<float> {
  using type = vfloat;
};
template <>
struct vec_of<double> {
  using type = vdouble;
};
template <class T>
inline constexpr index_t lanes = vec_bytes / static_cast<index_t>(sizeof(T));

/// Rows per decoder group: one vector of fp32 lanes (the pair tile's row unit).
inline constexpr index_t group_rows = lanes<float>;
static_assert(group_rows == packed_fp8_group_rows, "cpu/packed_fp8_weight.hpp and cpu/linear.hpp disagree on the vector width");

// Panel widths (outputs per tile: a divisor of 128 and a multiple of group_rows), rows per
// micro-kernel call (prefill) and k-blocks per step (decode), chosen so that the accumulators
// fit the register file (32 zmm with AVX-512, 16 ymm/xmm otherwise) with enough independent
// chains to hide the FMA latency. Decode streams gemv_nr rows at a time in runs of
// NB * 128 bytes (16 rows and 4 blocks measured best from DRAM: docs/decisions.md).
template <class T>
struct fp8_shape;
#if DSA_LINEAR_AVX512
template <>
struct fp8_shape<float> {
  static constexpr index_t gemm_nr = 64, gemm_mr = 6, gemv_nr = 16;
};
template <>
struct fp8_shape<double> {
  static constexpr index_t gemm_nr = 32, gemm_mr = 6, gemv_nr = 16;
};
#elif DSA_LINEAR_AVX2
template <>
struct fp8_shape<float> {
  static constexpr index_t gemm_nr = 16, gemm_mr = 6, gemv_nr = 16;
};
template <>
struct fp8_shape<double> {
  static constexpr index_t gemm_nr = 16, gemm_mr = 3, gemv_nr = 8;
};
#else
template <>
struct fp8_shape<float> {
  static constexpr index_t gemm_nr = 16, gemm_mr = 3, gemv_nr = 8;
};
template <>
struct fp8_shape<double> {
  static constexpr index_t gemm_nr = 8, gemm_mr = 3, gemv_nr = 8;
};
#endif
/// k-blocks per decode step for t rows: every block is an independent accumulation chain; the
/// accumulators (NB x t x NR / lanes) must stay in registers.
inline constexpr int gemv_max_nb = 4;
template <class T>
constexpr int gemv_nb(index_t t) {
  const index_t regs = vec_bytes == 64 ? 16 : 8;
  const index_t per_block = t * fp8_shape<T>::gemv_nr / lanes<T>;
  const index_t nb = regs / std::max<index_t>(per_block, 1);
  return static_cast<int>(std::clamp<index_t>(nb, 1, gemv_max_nb));
}

// ---- scratch ------------------------------------------------------------------------------------

/// A thread-local, 64-byte aligned buffer of at least n elements (Tag separates the buffers a
/// thread uses at once). It grows to the largest request and is kept for the next call.
template <class T, int Tag>
T* scratch(std::size_t n) {
  struct deleter {
    void operator()(T* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<T, deleter> buf;
  thread_local std::size_t cap = 0;
  if (n > cap) {
    const std::size_t bytes = (std::max<std::size_t>(n, 1) * sizeof(T) + 63) / 64 * 64;
    T* p = static_cast<T*>(std::aligned_alloc(64, bytes));
    if (p == nullptr) throw std::bad_alloc();
    buf.reset(p);
    cap = bytes / sizeof(T);
  }
  return buf.get();
}

// ---- e4m3 decoding ------------------------------------------------------------------------------

inline const std::uint8_t* code_bytes(const fp8_e4m3* p) { return reinterpret_cast<const std::uint8_t*>(p); }

/// The tile holds the weights' e4m3 values times 2^8 and the decoded activations hold theirs
/// times 2^-8: the products are the same (exact) numbers, and the SIMD decoders save an integer
/// add by producing 2^8 times the value (decode_pairs). Both scalings are exact: e4m3 values
/// lie in [2^-9, 448], far from the limits of bf16, float and double.
inline constexpr float weight_tile_scale = 0x1p8f;
inline constexpr float activation_scale = 0x1p-8f;

/// The value of every e4m3 code times activation_scale, as T (exact; NaN codes keep their sign).
template <class T>
const T* e4m3_activation_values() {
  static const auto table = [] {
    std::array<T, 256> t{};
    const float* f = fp8_quant_e4m3_values();
    for (std::size_t c = 0; c < 256; ++c) t[c] = static_cast<T>(f[c] * activation_scale);
    return t;
  }();
  return table.data();
}

/// The bf16 bits of every e4m3 code's value times weight_tile_scale (exact).
inline const std::uint16_t* e4m3_tile_bf16() {
  static const auto table = [] {
    std::array<std::uint16_t, 256> t{};
    const float* f = fp8_quant_e4m3_values();
    for (std::size_t c = 0; c < 256; ++c) t[c] = static_cast<std::uint16_t>(detail::float_bits(f[c] * weight_tile_scale) >> 16);
    return t;
  }();
  return table.data();
}

/// e4m3_tile_bf16 indexed by the packed form's bytes (cpu/packed_fp8_weight.hpp).
inline const std::uint16_t* packed_tile_bf16() {
  static const auto table = [] {
    std::array<std::uint16_t, 256> t{};
    for (std::size_t p = 0; p < 256; ++p) t[p] = e4m3_tile_bf16()[unpacked_e4m3_code(static_cast<std::uint8_t>(p))];
    return t;
  }();
  return table.data();
}

/// The bf16 bits of 2^8 times the value of the exponent-0 code of mantissa m (sign 0), in the
/// checkpoint's encoding or (Packed) the packed one: what the slow decode looks up.
template <bool Packed>
constexpr std::array<std::uint16_t, 8> subnormal_tile_bf16() {
  std::array<std::uint16_t, 8> t{};
  for (unsigned m = 0; m < 8; ++m) {
    const unsigned code = Packed ? unpacked_e4m3_code(static_cast<std::uint8_t>(m)) : m;
    t[m] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(static_cast<float>(code) * 0.5f) >> 16);
  }
  return t;
}

/// 128 zero codes: the rows of a ragged last panel read these (and never advance past them).
inline const std::uint8_t* zero_codes() {
  alignas(64) static const std::uint8_t z[block] = {};
  return z;
}

// The pair tile of one block and one group of G = group_rows rows: 32 quads q, each two vectors
// of G dwords, A (lane j: code 4q of row j in the low half, code 4q + 2 in the high half) and B
// (codes 4q + 1 and 4q + 3), bf16 bits of the values times 2^8. pair_tile_dwords per group.
inline constexpr index_t pair_tile_dwords = quads * 2 * group_rows;

#if DSA_LINEAR_AVX512
// The codes in the high byte of each 16-bit lane (the low byte ignored) as bf16 values times
// 2^8, with integer operations only: an arithmetic shift puts the 7 code bits at bf16 bits
// 10..4 with copies of the sign above them, and one bitwise select keeps the sign (bit 15) and
// those 7 bits and sets bit 14: exponent field 128 + e, mantissa m, which is 2^8 times the
// value of every normal code. Special (a group holding a code this misses: exponent 0 or NaN)
// then replaces exponent-0 codes by their value times 2^8 (a table lookup, exact: 2^8 * m * 2^-9
// for the checkpoint's codes; Packed: the packed form's table; the sign put back for all lanes at
// once) and turns NaN codes, which the select made 2^16 * 1.875 (bits 0x47F0 and the sign), into
// a quiet NaN (adding 0x3800: 0x7FF0), signs kept. No subnormal is formed, so neither DAZ nor
// denormal-operand assists (over 100 cycles each on x86) play a part.
template <bool Special, bool Packed = false>
DSA_FORCEINLINE __m512i decode_high_bytes(__m512i u) {
  const __m512i a = _mm512_srai_epi16(u, 4);
  // Bitwise c ? a : b with b = bit 14, c = the sign and code bits (truth table 0xE4).
  __m512i bits = _mm512_ternarylogic_epi32(a, _mm512_set1_epi16(0x4000), _mm512_set1_epi16(static_cast<short>(0x87F0)), 0xE4);
  if constexpr (Special) {
    // Word m of the table: subnormal_tile_bf16 (bf16(m / 2) for the checkpoint's codes); only
    // m < 8 is looked up (the index's bits 3 and 4 are exponent bits, zero in the lanes replaced).
    alignas(64) static constexpr auto table = [] {
      std::array<std::uint16_t, 32> w{};
      const auto t = subnormal_tile_bf16<Packed>();
      for (std::size_t m = 0; m < t.size(); ++m) w[m] = t[m];
      return w;
    }();
    const __m512i sub_values = _mm512_load_si512(table.data());
    const __mmask32 sub = _mm512_testn_epi16_mask(a, _mm512_set1_epi16(0x0780));
    bits = _mm512_mask_permutexvar_epi16(bits, sub, _mm512_srli_epi16(a, 4), sub_values);
    // bits | (a & sign): the sign again where the table wrote, a no-op elsewhere (truth table 0xF8).
    bits = _mm512_ternarylogic_epi32(bits, a, _mm512_set1_epi16(static_cast<short>(0x8000)), 0xF8);
    const __m512i nan_bits = _mm512_set1_epi16(0x07F0);
    const __mmask32 nan = _mm512_cmpeq_epi16_mask(_mm512_and_si512(a, nan_bits), nan_bits);
    bits = _mm512_mask_add_epi16(bits, nan, bits, _mm512_set1_epi16(0x3800));
  }
  return bits;
}

// One quad (dword j: codes 4q..4q+3 of row j) into the pair vectors A (low bytes: codes 4q,
// 4q + 2) and B (high bytes: 4q + 1, 4q + 3) at pt and pt + 16.
template <bool Special, bool Packed = false>
DSA_FORCEINLINE void decode_quad16(__m512i quad, std::uint32_t* pt) {
  _mm512_store_si512(pt, decode_high_bytes<Special, Packed>(_mm512_slli_epi16(quad, 8)));
  _mm512_store_si512(pt + 16, decode_high_bytes<Special, Packed>(quad));
}

// 16 rows x 64 codes (r[j]: row j) into quads [0, 16) of a group's pair tile: transposed as a
// 16 x 16 matrix of 4-code dwords (unpacks, then 128-bit lane shuffles); dword column c holds
// codes 4c..4c+3 of every row, and its high bytes (codes 4c + 1, 4c + 3) and low bytes (4c,
// 4c + 2) decode into B and A.
template <bool Special>
DSA_FORCEINLINE void decode_group16(const __m512i* r, std::uint32_t* pt) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4q + c]: in 128-bit lane L, rows 4q..4q+3 of dword 4L + c.
  __m512i u[16];
  for (int q = 0; q < 4; ++q) {
    u[4 * q + 0] = _mm512_unpacklo_epi64(t[4 * q + 0], t[4 * q + 2]);
    u[4 * q + 1] = _mm512_unpackhi_epi64(t[4 * q + 0], t[4 * q + 2]);
    u[4 * q + 2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
    u[4 * q + 3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
  }
  auto column = [&](__m512i col, index_t c) { decode_quad16<Special>(col, pt + (2 * c) * 16); };
  for (int c = 0; c < 4; ++c) {
    const __m512i s0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88);
    const __m512i s1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xDD);
    const __m512i s2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88);
    const __m512i s3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xDD);
    column(_mm512_shuffle_i32x4(s0, s2, 0x88), c);
    column(_mm512_shuffle_i32x4(s1, s3, 0x88), 4 + c);
    column(_mm512_shuffle_i32x4(s0, s2, 0xDD), 8 + c);
    column(_mm512_shuffle_i32x4(s1, s3, 0xDD), 12 + c);
  }
}
#endif

#if DSA_LINEAR_AVX2
// decode_high_bytes for 16 lanes (AVX2 has no bitwise select and no word permute: and/or, and a
// byte shuffle for the subnormal table).
template <bool Special, bool Packed = false>
DSA_FORCEINLINE __m256i decode_high_bytes8(__m256i u) {
  const __m256i a = _mm256_srai_epi16(u, 4);
  __m256i bits = _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi16(static_cast<short>(0x87F0))), _mm256_set1_epi16(0x4000));
  if constexpr (Special) {
    const __m256i sign = _mm256_and_si256(a, _mm256_set1_epi16(static_cast<short>(0x8000)));
    // Bytes 0..7: low bytes of subnormal_tile_bf16, bytes 8..15: high bytes (in both 128-bit lanes).
    alignas(32) static constexpr auto bytes = [] {
      std::array<std::uint8_t, 32> b{};
      const auto t = subnormal_tile_bf16<Packed>();
      for (std::size_t lane = 0; lane < 32; lane += 16) {
        for (std::size_t m = 0; m < 8; ++m) {
          b[lane + m] = static_cast<std::uint8_t>(t[m] & 0xFFu);
          b[lane + 8 + m] = static_cast<std::uint8_t>(t[m] >> 8);
        }
      }
      return b;
    }();
    const __m256i table = _mm256_load_si256(reinterpret_cast<const __m256i*>(bytes.data()));
    const __m256i m = _mm256_and_si256(_mm256_srli_epi16(a, 4), _mm256_set1_epi16(7));
    const __m256i idx = _mm256_add_epi16(_mm256_or_si256(m, _mm256_slli_epi16(m, 8)), _mm256_set1_epi16(0x0800));
    const __m256i sv = _mm256_shuffle_epi8(table, idx);
    const __m256i sub = _mm256_cmpeq_epi16(_mm256_and_si256(a, _mm256_set1_epi16(0x0780)), _mm256_setzero_si256());
    bits = _mm256_blendv_epi8(bits, _mm256_or_si256(sv, sign), sub);
    const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(a, _mm256_set1_epi16(0x07F0)), _mm256_set1_epi16(0x07F0));
    bits = _mm256_blendv_epi8(bits, _mm256_or_si256(sign, _mm256_set1_epi16(0x7FC0)), nan);
  }
  return bits;
}

// decode_quad16 for 8 rows.
template <bool Special, bool Packed = false>
DSA_FORCEINLINE void decode_quad8(__m256i quad, std::uint32_t* pt) {
  _mm256_store_si256(reinterpret_cast<__m256i*>(pt), decode_high_bytes8<Special, Packed>(_mm256_slli_epi16(quad, 8)));
  _mm256_store_si256(reinterpret_cast<__m256i*>(pt + 8), decode_high_bytes8<Special, Packed>(quad));
}

// 8 rows x 32 codes into quads [0, 8) of a group's pair tile, as decode_group16.
template <bool Special>
DSA_FORCEINLINE void decode_group8(const __m256i* r, std::uint32_t* pt) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int q = 0; q < 2; ++q) {
    u[4 * q + 0] = _mm256_unpacklo_epi64(t[4 * q + 0], t[4 * q + 2]);
    u[4 * q + 1] = _mm256_unpackhi_epi64(t[4 * q + 0], t[4 * q + 2]);
    u[4 * q + 2] = _mm256_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
    u[4 * q + 3] = _mm256_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
  }
  auto column = [&](__m256i col, index_t c) { decode_quad8<Special>(col, pt + (2 * c) * 8); };
  for (int c = 0; c < 4; ++c) {
    column(_mm256_permute2x128_si256(u[c], u[4 + c], 0x20), c);
    column(_mm256_permute2x128_si256(u[c], u[4 + c], 0x31), 4 + c);
  }
}
#endif

/// How far ahead of the codes it decodes decode_pair_tile asks for the next ones (into L2): two
/// blocks, the next decode step of the GEMV. The hardware prefetcher alone left the decode 20%
/// slower from DRAM (measured: 7.5-8.0 against 9.0-9.5 GB/s on one thread, 14-15 against 18-19
/// on two); into L1, or further ahead, measured slower. A prefetch never faults: past the end of
/// a row it only names another address (formed as an integer).
inline constexpr std::uintptr_t pair_tile_prefetch = 2 * block;

/// The pair tile of one block for NR rows: pt[g * pair_tile_dwords + ...] for the groups
/// g = 0 .. NR / group_rows - 1, rows[j] the block's 128 codes of row j. A group of rows x codes
/// holding no subnormal, zero or NaN code (almost all of them in real weights) takes the short
/// decode; the test for one is 2c + 2 <= 16 in byte arithmetic (c + c drops the sign: mag 0..7
/// give 2..16, mag 127 wraps to 0).
template <index_t NR>
DSA_FORCEINLINE void decode_pair_tile(const std::uint8_t* const* rows, std::uint32_t* DSA_RESTRICT pt) {
  static_assert(NR % group_rows == 0);
#if DSA_LINEAR_AVX512
  const __m512i two = _mm512_set1_epi8(2);
  for (index_t g = 0; g < NR / 16; ++g) {
    for (index_t h = 0; h < 2; ++h) {
      __m512i r[16];
      __m512i lowest = _mm512_set1_epi8(static_cast<char>(0xFF));
      for (int j = 0; j < 16; ++j) {
        r[j] = _mm512_loadu_si512(static_cast<const void*>(rows[g * 16 + j] + h * 64));
        _mm_prefetch(static_cast<const char*>(prefetch_address(rows[g * 16 + j], h * 64 + pair_tile_prefetch)), _MM_HINT_T1);
        lowest = _mm512_min_epu8(lowest, _mm512_add_epi8(_mm512_add_epi8(r[j], r[j]), two));
      }
      std::uint32_t* dst = pt + g * pair_tile_dwords + h * 16 * 2 * 16;
      if (_mm512_cmple_epu8_mask(lowest, _mm512_set1_epi8(16)) == 0) {
        decode_group16<false>(r, dst);
      } else {
        decode_group16<true>(r, dst);
      }
    }
  }
#elif DSA_LINEAR_AVX2
  const __m256i two = _mm256_set1_epi8(2);
  const __m256i sixteen = _mm256_set1_epi8(16);
  for (index_t g = 0; g < NR / 8; ++g) {
    for (index_t h = 0; h < 4; ++h) {
      __m256i r[8];
      __m256i lowest = _mm256_set1_epi8(static_cast<char>(0xFF));
      for (int j = 0; j < 8; ++j) {
        r[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[g * 8 + j] + h * 32));
        if (h % 2 == 0) {
          _mm_prefetch(static_cast<const char*>(prefetch_address(rows[g * 8 + j], h * 32 + pair_tile_prefetch)), _MM_HINT_T1);
        }
        lowest = _mm256_min_epu8(lowest, _mm256_add_epi8(_mm256_add_epi8(r[j], r[j]), two));
      }
      std::uint32_t* dst = pt + g * pair_tile_dwords + h * 8 * 2 * 8;
      // lowest <= 16 in some byte <=> min(lowest, 16) == lowest there.
      if (_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_min_epu8(lowest, sixteen), lowest)) == 0) {
        decode_group8<false>(r, dst);
      } else {
        decode_group8<true>(r, dst);
      }
    }
  }
#else
  const std::uint16_t* bf = e4m3_tile_bf16();
  constexpr index_t G = group_rows;
  for (index_t g = 0; g < NR / G; ++g) {
    std::uint32_t* dst = pt + g * pair_tile_dwords;
    for (index_t j = 0; j < G; ++j) {
      const std::uint8_t* c = rows[g * G + j];
      for (index_t q = 0; q < quads; ++q) {
        dst[(2 * q) * G + j] = bf[c[4 * q]] | (static_cast<std::uint32_t>(bf[c[4 * q + 2]]) << 16);
        dst[(2 * q + 1) * G + j] = bf[c[4 * q + 1]] | (static_cast<std::uint32_t>(bf[c[4 * q + 3]]) << 16);
      }
    }
  }
#endif
}

/// How far ahead in the packed stream the decoders ask for the codes (into L2): two runs of one
/// group, 16 KB with AVX-512 (8, 16 and 32 KB measured within the noise of each other).
inline constexpr std::uintptr_t packed_tile_prefetch = 2 * packed_fp8_weight::block_run * block * group_rows;

/// The pair tile of one block for NR rows from a packed weight (cpu/packed_fp8_weight.hpp):
/// groups g0 .. g0 + NR / group_rows - 1, block kb. The quads are loaded as they are (no
/// transposition) and only the quad ranges the packing marked take the slow decode.
template <index_t NR>
DSA_FORCEINLINE void decode_packed_tile(const packed_fp8_weight& w, index_t g0, index_t kb,
                                        std::uint32_t* DSA_RESTRICT pt) {
  static_assert(NR % group_rows == 0);
  for (index_t g = 0; g < NR / group_rows; ++g) {
    const std::uint8_t* src = w.block_codes(g0 + g, kb);
    const index_t stride = w.quad_stride(kb);
    const unsigned special = w.special(g0 + g, kb);
    std::uint32_t* dst = pt + g * pair_tile_dwords;
#if DSA_LINEAR_AVX512
    for (index_t h = 0; h < 2; ++h) {
      const std::uint8_t* s = src + h * 16 * stride;
      std::uint32_t* d = dst + h * 16 * 2 * 16;
      for (int c = 0; c < 16; ++c) {
        _mm_prefetch(static_cast<const char*>(prefetch_address(s + c * stride, packed_tile_prefetch)), _MM_HINT_T1);
      }
      if (((special >> (2 * h)) & 3u) == 0) {
        for (int c = 0; c < 16; ++c) decode_quad16<false, true>(_mm512_loadu_si512(static_cast<const void*>(s + c * stride)), d + 2 * c * 16);
      } else {
        for (int c = 0; c < 16; ++c) decode_quad16<true, true>(_mm512_loadu_si512(static_cast<const void*>(s + c * stride)), d + 2 * c * 16);
      }
    }
#elif DSA_LINEAR_AVX2
    for (index_t h = 0; h < 4; ++h) {
      const std::uint8_t* s = src + h * 8 * stride;
      std::uint32_t* d = dst + h * 8 * 2 * 8;
      for (int c = 0; c < 8; ++c) {
        _mm_prefetch(static_cast<const char*>(prefetch_address(s + c * stride, packed_tile_prefetch)), _MM_HINT_T1);
      }
      if (((special >> h) & 1u) == 0) {
        for (int c = 0; c < 8; ++c) decode_quad8<false, true>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + c * stride)), d + 2 * c * 8);
      } else {
        for (int c = 0; c < 8; ++c) decode_quad8<true, true>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + c * stride)), d + 2 * c * 8);
      }
    }
#else
    (void)special;
    const std::uint16_t* bf = packed_tile_bf16();
    constexpr index_t G = group_rows;
    for (index_t q = 0; q < quads; ++q) {
      for (index_t j = 0; j < G; ++j) {
        const std::uint8_t* c = src + q * stride + j * 4;
        dst[(2 * q) * G + j] = bf[c[0]] | (static_cast<std::uint32_t>(bf[c[2]]) << 16);
        dst[(2 * q + 1) * G + j] = bf[c[1]] | (static_cast<std::uint32_t>(bf[c[3]]) << 16);
      }
    }
#endif
  }
}

/// The pair tiles of blocks kb0 .. kb0 + nb - 1 (all in one run of the packed layout) for NR
/// rows into pt + b * tile_stride: decode_packed_tile for each block, in the order the run stores
/// its lines (quad by quad, the run's blocks side by side), so the codes stream sequentially.
template <index_t NR, bool Prefetch = true>
DSA_FORCEINLINE void decode_packed_run(const packed_fp8_weight& w, index_t g0, index_t kb0, int nb,
                                       std::uint32_t* DSA_RESTRICT pt, index_t tile_stride) {
#if DSA_LINEAR_AVX512
  for (index_t g = 0; g < NR / group_rows; ++g) {
    const std::uint8_t* src = w.block_codes(g0 + g, kb0);
    const index_t stride = w.quad_stride(kb0);
    unsigned special[packed_fp8_weight::block_run];
    for (int b = 0; b < nb; ++b) special[b] = w.special(g0 + g, kb0 + b);
    for (index_t q = 0; q < quads; ++q) {
      for (int b = 0; b < nb; ++b) {
        const std::uint8_t* s = src + q * stride + b * 64;
        if constexpr (Prefetch) _mm_prefetch(static_cast<const char*>(prefetch_address(s, packed_tile_prefetch)), _MM_HINT_T1);
        const __m512i quad = _mm512_loadu_si512(static_cast<const void*>(s));
        std::uint32_t* d = pt + b * tile_stride + g * pair_tile_dwords + 2 * q * 16;
        if (((special[b] >> (q / 8)) & 1u) == 0) {
          decode_quad16<false, true>(quad, d);
        } else {
          decode_quad16<true, true>(quad, d);
        }
      }
    }
  }
#else
  for (int b = 0; b < nb; ++b) decode_packed_tile<NR>(w, g0, kb0 + b, pt + b * tile_stride);
#endif
}

#if DSA_LINEAR_AVX512
/// acc[i] += the products of quad q of a packed block (16 rows x codes 4q..4q+3, at s) with x
/// row i (xr[i][0..3]: codes 4q..4q+3 of the block), in ascending k, for MR rows. The two
/// 512-bit ports do all of this loop's work and shifts can only use port 0 of them, so the moves
/// that need no arithmetic use port 5's byte shuffles instead: the low bytes reach the high byte
/// of their word by a byte shift of the 128-bit lanes (measured 2-3% faster at t = 2..4), and the
/// low bf16 of each pair reaches the high half of its fp32 lane by a byte shuffle rather than a
/// dword shift (2.6% at t = 4 in L2, docs/performance.md "Ninth pass").
template <bool Special, int MR>
DSA_FORCEINLINE void packed_quad_fp32(const std::uint8_t* s, const float* const* xr, __m512* acc) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  _mm_prefetch(static_cast<const char*>(prefetch_address(s, packed_tile_prefetch)), _MM_HINT_T1);
  const __m512i quad = _mm512_loadu_si512(static_cast<const void*>(s));
  const __m512i a = decode_high_bytes<Special, true>(_mm512_bslli_epi128(quad, 1));  // codes 4q, 4q + 2
  const __m512i c = decode_high_bytes<Special, true>(quad);                          // codes 4q + 1, 4q + 3
  // Each dword's low word moved to its high word, the low word zeroed (control bytes 0x80).
  const __m512i low_to_high = _mm512_set4_epi32(0x0D0C8080, 0x09088080, 0x05048080, 0x01008080);
  const __m512 w0 = _mm512_castsi512_ps(_mm512_shuffle_epi8(a, low_to_high));
  const __m512 w1 = _mm512_castsi512_ps(_mm512_shuffle_epi8(c, low_to_high));
  const __m512 w2 = _mm512_castsi512_ps(_mm512_and_si512(a, high));
  const __m512 w3 = _mm512_castsi512_ps(_mm512_and_si512(c, high));
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    const float* xi = xr[i];
    __m512 r = acc[i];
    r = _mm512_fmadd_ps(_mm512_set1_ps(xi[0]), w0, r);
    r = _mm512_fmadd_ps(_mm512_set1_ps(xi[1]), w1, r);
    r = _mm512_fmadd_ps(_mm512_set1_ps(xi[2]), w2, r);
    r = _mm512_fmadd_ps(_mm512_set1_ps(xi[3]), w3, r);
    acc[i] = r;
  }
}

/// Quad q of blocks [B, NB) of a run (block b's at s + b * 64; row i's activations of block b at
/// xr[i] + b * 128) into acc[b], block b taking the slow-code decode when bit b of SlowBlocks is set.
template <unsigned SlowBlocks, int MR, int NB, int B = 0>
DSA_FORCEINLINE void packed_quad_blocks_fp32(const std::uint8_t* s, const float* const* xr, __m512 (*acc)[MR]) {
  const float* xb[MR];
  for (int i = 0; i < MR; ++i) xb[i] = xr[i] + B * block;
  packed_quad_fp32<((SlowBlocks >> B) & 1u) != 0, MR>(s + B * 64, xb, acc[B]);
  if constexpr (B + 1 < NB) packed_quad_blocks_fp32<SlowBlocks, MR, NB, B + 1>(s, xr, acc);
}

/// Quads [q0, q1) of a run's NB blocks (quad q of block b at src + q * stride + b * 64; x rows
/// ldx apart) into acc (packed_quad_blocks_fp32). Each row's activations are read through a
/// pointer of its own: Clang otherwise folds the rows into one induction variable and addresses x
/// as base + index, which splits each broadcast FMA into two uops on Intel cores (measured with
/// clang 14 at t = 4: 22.5 against 14.9 cycles per 64 codes); the empty asm keeps the pointers
/// apart there (GCC keeps them apart itself, and schedules the loop worse with the asm).
template <unsigned SlowBlocks, int MR, int NB>
DSA_FORCEINLINE void packed_quads_fp32(index_t q0, index_t q1, const std::uint8_t* src, index_t stride,
                                       const float* DSA_RESTRICT x, index_t ldx, __m512 (*acc)[MR]) {
  const float* xr[MR];
  for (int i = 0; i < MR; ++i) xr[i] = x + i * ldx + 4 * q0;
#pragma GCC unroll 2
  for (index_t q = q0; q < q1; ++q) {
    packed_quad_blocks_fp32<SlowBlocks, MR, NB>(src + q * stride, xr, acc);
    for (int i = 0; i < MR; ++i) {
      xr[i] += 4;
#if defined(__clang__)
      asm("" : "+r"(xr[i]));
#endif
    }
  }
}

/// quads per slow-code flag bit (cpu/packed_fp8_weight.hpp).
inline constexpr index_t packed_flag_quads = quads / 4;

/// A run with no slow code: one straight loop over its 32 quads, the accumulators in registers.
template <int MR, int NB>
[[gnu::noinline]] void packed_run_fp32(const std::uint8_t* src, index_t stride, const float* DSA_RESTRICT x, index_t ldx,
                                       float* DSA_RESTRICT d) {
  __m512 acc[NB][MR];
  for (int b = 0; b < NB; ++b) {
    for (int i = 0; i < MR; ++i) acc[b][i] = _mm512_setzero_ps();
  }
  packed_quads_fp32<0, MR, NB>(0, quads, src, stride, x, ldx, acc);
  for (int b = 0; b < NB; ++b) {
    for (int i = 0; i < MR; ++i) _mm512_store_ps(d + (b * MR + i) * 16, acc[b][i]);
  }
}

/// One flag range r (quads [8r, 8r + 8)) of a run that holds slow codes, the accumulators
/// passed in memory: a call per range keeps every loop straight and its registers its own.
template <unsigned SlowBlocks, int MR, int NB>
[[gnu::noinline]] void packed_range_fp32(index_t r, const std::uint8_t* src, index_t stride, const float* DSA_RESTRICT x,
                                         index_t ldx, __m512 (*acc_in_out)[MR]) {
  __m512 acc[NB][MR];
  for (int b = 0; b < NB; ++b) {
    for (int i = 0; i < MR; ++i) acc[b][i] = acc_in_out[b][i];
  }
  packed_quads_fp32<SlowBlocks, MR, NB>(r * packed_flag_quads, (r + 1) * packed_flag_quads, src, stride, x, ldx, acc);
  for (int b = 0; b < NB; ++b) {
    for (int i = 0; i < MR; ++i) acc_in_out[b][i] = acc[b][i];
  }
}

/// Decode with MR <= 4 rows in the fp32 mode from a packed weight: d[(b * MR + i) * 16 + j] =
/// the fp32 block dot of row i with group g, block kb0 + b, for the NB blocks of one run. Each
/// quad is decoded and widened in registers once for all rows (the pair tile is never stored):
/// the same values in the same order as decode_packed_run followed by gemv_micro<float, MR, 16,
/// NB>. With MR >= 2 the two 512-bit ports, which every decode operation and FMA needs, are the
/// bound (2 shifts, 4 bitwise operations, 3 byte moves and 4 MR FMAs per quad), so nothing else
/// may sit in the loop: a run without slow codes (about two thirds of a checkpoint-like weight's
/// runs: zero and the small subnormals are a few in 10^5 codes) takes one straight loop; any
/// other run goes range by range, each range a call specialised by which blocks hold slow codes
/// (more than one block: all take the slow decode). Branching on the flags inside one loop
/// instead, or inlining the ranges, made GCC keep the accumulators in memory or pick worse code
/// for the common case: measured 12-20% slower at t = 2..4 on checkpoint-like codes
/// (docs/performance.md, "Eighth pass").
template <int MR, int NB>
DSA_FORCEINLINE void packed_gemv_fp32(const packed_fp8_weight& w, index_t g, index_t kb0, const float* DSA_RESTRICT x,
                                      index_t ldx, float* DSA_RESTRICT d) {
  const std::uint8_t* src = w.block_codes(g, kb0);  // the run: quad q of block b at src + q * stride + b * 64
  const index_t stride = w.quad_stride(kb0);
  unsigned special[NB], any = 0;
  for (int b = 0; b < NB; ++b) {
    special[b] = w.special(g, kb0 + b);
    any |= special[b];
  }
  if (any == 0) {
    packed_run_fp32<MR, NB>(src, stride, x, ldx, d);
    return;
  }
  alignas(64) __m512 acc[NB][MR];
  for (int b = 0; b < NB; ++b) {
    for (int i = 0; i < MR; ++i) acc[b][i] = _mm512_setzero_ps();
  }
  if constexpr (MR == 1) {
    // One row leaves the ports room: the flags tested in the loop cost less than the calls.
    for (index_t r = 0; r < 4; ++r) {
      for (index_t q = r * packed_flag_quads; q < (r + 1) * packed_flag_quads; ++q) {
        for (int b = 0; b < NB; ++b) {
          const std::uint8_t* s = src + q * stride + b * 64;
          const float* xb[1] = {x + b * block + 4 * q};
          if (((special[b] >> r) & 1u) == 0) {
            packed_quad_fp32<false, MR>(s, xb, acc[b]);
          } else {
            packed_quad_fp32<true, MR>(s, xb, acc[b]);
          }
        }
      }
    }
    for (int b = 0; b < NB; ++b) _mm512_store_ps(d + b * 16, acc[b][0]);
    return;
  }
  constexpr unsigned all = (1u << NB) - 1;
  for (index_t r = 0; r < 4; ++r) {
    unsigned slow = 0;
    for (int b = 0; b < NB; ++b) slow |= ((special[b] >> r) & 1u) << b;
    switch (slow) {
      case 0: packed_range_fp32<0, MR, NB>(r, src, stride, x, ldx, acc); break;
      case 1: packed_range_fp32<1, MR, NB>(r, src, stride, x, ldx, acc); break;
      case 2: packed_range_fp32<2 & all, MR, NB>(r, src, stride, x, ldx, acc); break;
      case 4: packed_range_fp32<4 & all, MR, NB>(r, src, stride, x, ldx, acc); break;
      case 8: packed_range_fp32<8 & all, MR, NB>(r, src, stride, x, ldx, acc); break;
      default: packed_range_fp32<all, MR, NB>(r, src, stride, x, ldx, acc); break;
    }
  }
  for (int b = 0; b < NB; ++b) {
    for (int i = 0; i < MR; ++i) _mm512_store_ps(d + (b * MR + i) * 16, acc[b][i]);
  }
}
#endif

/// The fp32 values of a pair vector: (low halves, high halves), i.e. codes (4q, 4q + 2) of A or
/// (4q + 1, 4q + 3) of B for every row of the group.
DSA_FORCEINLINE void widen_pairs(const std::uint32_t* p, vfloat& lo, vfloat& hi) {
  vuint v;
  std::memcpy(&v, p, sizeof v);
  lo = reinterpret_cast<vfloat>(v << 16);
  hi = reinterpret_cast<vfloat>(v & 0xFFFF0000u);
}

/// The T values of a pair vector's half (vfloat) as `lanes<float> / lanes<T>` T vectors.
template <class T>
DSA_FORCEINLINE void to_lanes(vfloat f, typename vec_of<T>::type* out) {
  if constexpr (std::is_same_v<T, float>) {
    out[0] = f;
  } else {
#if DSA_LINEAR_AVX512
    const __m512 v = f;
    out[0] = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    out[1] = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
#elif defined(__AVX__)
    const __m256 v = f;
    out[0] = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    out[1] = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
#else
    const vfloat_half lo = __builtin_shufflevector(f, f, 0, 1);
    const vfloat_half hi = __builtin_shufflevector(f, f, 2, 3);
    out[0] = __builtin_convertvector(lo, vdouble);
    out[1] = __builtin_convertvector(hi, vdouble);
#endif
  }
}

// ---- micro-kernels and the promotion ------------------------------------------------------------

/// Decode: d[(b * MR + i) * NR + j] = fl32(sum over k-block b of x[i][b * 128 + k] *
/// w[j][b * 128 + k]) for NB blocks, MR rows and NR outputs, from NB pair tiles (pt + b *
/// tile_stride). Every output lane sums its block in ascending k from +0 (the fp8_dot::fp32
/// order for T = float; exact for T = double); the NB x MR x NR / lanes sums are independent
/// chains. The products are exact in T, so FMA contraction cannot change a bit.
template <class T, int MR, index_t NR, int NB>
DSA_FORCEINLINE void gemv_micro(const T* DSA_RESTRICT x, index_t ldx, const std::uint32_t* DSA_RESTRICT pt,
                                index_t tile_stride, float* DSA_RESTRICT d, const std::uint8_t* ahead = nullptr) {
  using V = typename vec_of<T>::type;
  constexpr index_t G = group_rows;
  constexpr index_t NG = NR / G;
  constexpr index_t W = G / lanes<T>;  // T vectors per group
  V acc[NB][MR][NG * W];
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
      for (index_t v = 0; v < NG * W; ++v) acc[b][i][v] = V{};
    }
  }
  for (index_t q = 0; q < quads; ++q) {
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) {
      if (ahead != nullptr) __builtin_prefetch(ahead + (q * NB + b) * 64, 0, 2);
#pragma GCC unroll 4
      for (index_t g = 0; g < NG; ++g) {
        const std::uint32_t* p = pt + b * tile_stride + g * pair_tile_dwords + (2 * q) * G;
        vfloat f0, f1, f2, f3;  // codes 4q, 4q + 1, 4q + 2, 4q + 3
        widen_pairs(p, f0, f2);
        widen_pairs(p + G, f1, f3);
        V w0[W], w1[W], w2[W], w3[W];
        to_lanes<T>(f0, w0);
        to_lanes<T>(f1, w1);
        to_lanes<T>(f2, w2);
        to_lanes<T>(f3, w3);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          const T* xi = x + i * ldx + b * block + 4 * q;
#pragma GCC unroll 2
          for (index_t v = 0; v < W; ++v) {
            V a = acc[b][i][g * W + v];
            a += xi[0] * w0[v];
            a += xi[1] * w1[v];
            a += xi[2] * w2[v];
            a += xi[3] * w3[v];
            acc[b][i][g * W + v] = a;
          }
        }
      }
    }
  }
  constexpr index_t L = lanes<T>;
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
      for (index_t v = 0; v < NG * W; ++v) {
#pragma GCC unroll 16
        for (index_t l = 0; l < L; ++l) d[(b * MR + i) * NR + v * L + l] = static_cast<float>(acc[b][i][v][l]);
      }
    }
  }
}

/// gemv_micro for M rows and nb blocks: in one call when nb is the decode step's gemv_nb(M), else
/// (a panel's last, shorter step) one block at a time. Every block is an independent chain, so
/// both give the same bits, and only two block counts per row count are compiled (the decode
/// micro-kernels, fully unrolled, are most of fp8_linear's compile time).
template <class T, index_t NR, int M>
DSA_FORCEINLINE void gemv_micro_steps(int nb, const T* x, index_t ldx, const std::uint32_t* pt, index_t tile_stride,
                                      float* d, const std::uint8_t* ahead) {
  constexpr int NB = gemv_nb<T>(M);
  if (nb == NB) {
    gemv_micro<T, M, NR, NB>(x, ldx, pt, tile_stride, d, ahead);
    return;
  }
  for (int b = 0; b < nb; ++b) {
    gemv_micro<T, M, NR, 1>(x + b * block, ldx, pt + b * tile_stride, tile_stride, d + b * M * NR);
  }
}

/// gemv_micro_steps for t <= 4 rows, out of line: fp8_gemv is instantiated once per weight form
/// (view and packed), and both call this one copy (one call per step of a panel, next to the
/// t * nb * 128 * NR products it runs). d[(b * t + i) * NR + j]: block b, row i.
template <class T, index_t NR>
[[gnu::noinline]] void gemv_micro_call(int t, int nb, const T* x, index_t ldx, const std::uint32_t* pt,
                                       index_t tile_stride, float* d, const std::uint8_t* ahead) {
  switch (t) {
    case 1: gemv_micro_steps<T, NR, 1>(nb, x, ldx, pt, tile_stride, d, ahead); break;
    case 2: gemv_micro_steps<T, NR, 2>(nb, x, ldx, pt, tile_stride, d, ahead); break;
    case 3: gemv_micro_steps<T, NR, 3>(nb, x, ldx, pt, tile_stride, d, ahead); break;
    default: gemv_micro_steps<T, NR, 4>(nb, x, ldx, pt, tile_stride, d, ahead); break;
  }
}

/// Prefill: the pair tile of one block widened into tile[k][NR] of T (once per block, shared by
/// every row of the chunk).
template <class T, index_t NR>
DSA_FORCEINLINE void widen_tile(const std::uint32_t* DSA_RESTRICT pt, T* DSA_RESTRICT tile) {
  using V = typename vec_of<T>::type;
  constexpr index_t G = group_rows;
  constexpr index_t W = G / lanes<T>;
  for (index_t g = 0; g < NR / G; ++g) {
    for (index_t q = 0; q < quads; ++q) {
      const std::uint32_t* p = pt + g * pair_tile_dwords + (2 * q) * G;
      vfloat f[4];
      widen_pairs(p, f[0], f[2]);
      widen_pairs(p + G, f[1], f[3]);
      for (index_t c = 0; c < 4; ++c) {
        V w[W];
        to_lanes<T>(f[c], w);
        for (index_t v = 0; v < W; ++v) {
          std::memcpy(tile + (4 * q + c) * NR + g * G + v * lanes<T>, &w[v], sizeof(V));
        }
      }
    }
  }
}

/// Prefill: d[i][j] = fl32(sum over the block of x[i][k] * tile[k][j]) for MR rows and NR
/// outputs (x broadcast, NR / lanes vectors per row), each lane in ascending k from +0.
template <class T, int MR, index_t NR>
DSA_FORCEINLINE void gemm_micro(const T* DSA_RESTRICT x, index_t ldx, const T* DSA_RESTRICT tile,
                                float* DSA_RESTRICT d) {
  using V = typename vec_of<T>::type;
  constexpr index_t L = lanes<T>;
  constexpr index_t NV = NR / L;
  V acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (index_t v = 0; v < NV; ++v) acc[i][v] = V{};
  }
#pragma GCC unroll 2
  for (index_t k = 0; k < block; ++k) {
    V w[NV];
#pragma GCC unroll 8
    for (index_t v = 0; v < NV; ++v) w[v] = *reinterpret_cast<const V*>(tile + k * NR + v * L);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const T xi = x[i * ldx + k];
#pragma GCC unroll 8
      for (index_t v = 0; v < NV; ++v) acc[i][v] += xi * w[v];
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (index_t v = 0; v < NV; ++v) {
#pragma GCC unroll 16
      for (index_t l = 0; l < L; ++l) d[i * NR + v * L + l] = static_cast<float>(acc[i][v][l]);
    }
  }
}

template <class T, index_t NR, int M>
DSA_FORCEINLINE void gemm_micro_dispatch(int mr, const T* x, index_t ldx, const T* tile, float* d) {
  if constexpr (M >= 1) {
    if (mr < M) {
      gemm_micro_dispatch<T, NR, M - 1>(mr, x, ldx, tile, d);
    } else {
      gemm_micro<T, M, NR>(x, ldx, tile, d);
    }
  }
}

/// p[j] = fp8_linear_accumulate(p[j], d[j], s) for j in [0, n): the product rounded on its own,
/// never fused with the addition.
template <index_t n>
DSA_FORCEINLINE void promote(float* DSA_RESTRICT p, const float* DSA_RESTRICT d, float s) {
#if DSA_LINEAR_AVX512
  static_assert(n % 16 == 0);
  const __m512 sv = _mm512_set1_ps(s);
  for (index_t j = 0; j < n; j += 16) {
    const __m512 prod = _mm512_mul_round_ps(_mm512_load_ps(d + j), sv, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_store_ps(p + j, _mm512_add_ps(_mm512_load_ps(p + j), prod));
  }
#elif DSA_LINEAR_AVX2 && defined(__FMA__)
  static_assert(n % 8 == 0);
  const __m256 sv = _mm256_set1_ps(s);
  const __m256 nz = _mm256_set1_ps(-0.0f);
  for (index_t j = 0; j < n; j += 8) {
    const __m256 prod = _mm256_fmadd_ps(_mm256_load_ps(d + j), sv, nz);
    _mm256_store_ps(p + j, _mm256_add_ps(_mm256_load_ps(p + j), prod));
  }
#else
  for (index_t j = 0; j < n; ++j) p[j] = fp8_linear_accumulate(p[j], d[j], s);
#endif
}

// ---- activations --------------------------------------------------------------------------------

/// Quantizes rows [r0, r0 + rows) of x with act_quant (its CPU implementation, 1 x 128 groups):
/// the group scales into scales[rows][in / 128] and the codes' values times activation_scale
/// into vals as T, rows of `in` values, or packed = [in / 128][rows][128] (the GEMM's layout: a
/// block of every row of the chunk is contiguous).
template <class T, class X>
void quantize_rows(const cpu_backend& be, const tensor_view<const X, 2>& x, index_t r0, index_t rows,
                   scale_format fmt, T* vals, float* scales, bool packed = false) {
  const index_t in = x.extent(1);
  const index_t nkb = in / block;
  fp8_e4m3* codes = scratch<fp8_e4m3, 7>(static_cast<std::size_t>(rows * in));
  const tensor_view<const X, 2> xr(x.row(r0), {rows, in}, {x.stride(0), 1});
  op_impl<cpu_backend, act_quant_op>::run(be, xr, tensor_view<fp8_e4m3, 2>(codes, {rows, in}),
                                          tensor_view<float, 2>(scales, {rows, nkb}), act_quant_config{fmt, block});
  auto body = [&](index_t b, index_t e) {
    const T* values = e4m3_activation_values<T>();
    for (index_t i = b; i < e; ++i) {
      for (index_t kb = 0; kb < nkb; ++kb) {
        const std::uint8_t* c = code_bytes(codes + i * in + kb * block);
        T* dst = packed ? vals + (kb * rows + i) * block : vals + i * in + kb * block;
        for (index_t k = 0; k < block; ++k) dst[k] = values[c[k]];
      }
    }
  };
  if (rows * in >= (index_t{1} << 16)) {
    parallel_for(be, rows, 4, body);
  } else {
    body(0, rows);
  }
}

// ---- fp8_linear drivers -------------------------------------------------------------------------

/// Weights of at least this many bytes are split over threads by the GEMV; smaller ones run on
/// the calling thread (waking a worker costs more than it saves).
inline constexpr index_t gemv_parallel_bytes = index_t{1} << 16;

/// The rows of panel p (NR outputs from n0): pointers to their codes, or to zero_codes (which
/// never advance: step 0) past the last output.
template <index_t NR>
struct panel_rows {
  const std::uint8_t* base[NR];
  index_t step[NR];
  const std::uint8_t* at[NR];
  void init(const tensor_view<const fp8_e4m3, 2>& w, index_t n0) {
    const index_t nn = std::min(NR, w.extent(0) - n0);
    for (index_t j = 0; j < NR; ++j) {
      base[j] = j < nn ? code_bytes(w.row(n0 + j)) : zero_codes();
      step[j] = j < nn ? block : 0;
    }
  }
  const std::uint8_t* const* block_rows(index_t kb) {
    for (index_t j = 0; j < NR; ++j) at[j] = base[j] + kb * step[j];
    return at;
  }
};

/// Where a driver's pair tiles come from: the checkpoint's row-major codes (transposed and
/// scanned for slow codes on the fly) or a packed weight (loaded as they are). panel(n0) selects
/// the NR outputs from n0, tile(kb, pt) decodes their block kb.
template <index_t NR>
struct row_major_tiles {
  const tensor_view<const fp8_e4m3, 2>& w;
  panel_rows<NR> rows{};
  void panel(index_t n0) { rows.init(w, n0); }
  void tile(index_t kb, std::uint32_t* pt) { decode_pair_tile<NR>(rows.block_rows(kb), pt); }
  void tiles(index_t kb0, int nb, std::uint32_t* pt, index_t tile_stride) {
    for (int b = 0; b < nb; ++b) tile(kb0 + b, pt + b * tile_stride);
  }
  const std::uint8_t* ahead(index_t, int) const { return nullptr; }
  template <class T>
  bool gemv_regs(index_t, int, index_t, const T*, index_t, float*) {
    return false;
  }
};
template <index_t NR>
struct packed_tiles {
  const packed_fp8_weight& w;
  index_t g0 = 0;
  void panel(index_t n0) { g0 = n0 / group_rows; }
  void tile(index_t kb, std::uint32_t* pt) { decode_packed_tile<NR>(w, g0, kb, pt); }
  /// Whether blocks [kb0, kb0 + nb) are exactly one run of the packed layout.
  bool whole_run(index_t kb0, int nb) const {
    return kb0 % packed_fp8_weight::block_run == 0 && w.quad_stride(kb0) == nb * 4 * group_rows;
  }
  /// The tiles of blocks [kb0, kb0 + nb) at pt + b * tile_stride (the decode GEMV's steps lie
  /// within one run: nb divides the run length).
  void tiles(index_t kb0, int nb, std::uint32_t* pt, index_t tile_stride) {
    constexpr index_t R = packed_fp8_weight::block_run;
    if (kb0 / R == (kb0 + nb - 1) / R) {
      if (ahead(kb0, nb) != nullptr) {
        decode_packed_run<NR, false>(w, g0, kb0, nb, pt, tile_stride);  // the micro-kernel prefetches
      } else {
        decode_packed_run<NR>(w, g0, kb0, nb, pt, tile_stride);
      }
    } else {
      for (int b = 0; b < nb; ++b) tile(kb0 + b, pt + b * tile_stride);
    }
  }
  /// Where the micro-kernel prefetches, one line per quad and block, spreading over its work the
  /// prefetches decode_packed_run would issue in one burst (a burst of 128 misses waits on the
  /// core's fill buffers: measured, exact t = 1 from DRAM 41% -> 55% of the read probe, fp32
  /// t = 4 50% -> 59%; with the two-block steps of the exact t = 3, 4 it measured slower). For
  /// whole runs of one group (the step is then one 8 KB stream); else null, and the decode
  /// prefetches.
  const std::uint8_t* ahead(index_t kb0, int nb) const {
    if constexpr (NR == group_rows) {
      if (nb == packed_fp8_weight::block_run && whole_run(kb0, nb)) return w.block_codes(g0, kb0) + packed_tile_prefetch;
    }
    (void)kb0, (void)nb;
    return nullptr;
  }
  /// The fp32 block dots of t <= 4 rows (x: rows ldx apart) for blocks [kb0, kb0 + nb) into d
  /// (gemv_micro's layout) without a pair tile, when this build, mode and step allow (else false,
  /// and the caller takes the tile path).
  template <class T>
  bool gemv_regs(index_t kb0, int nb, index_t t, const T* x, index_t ldx, float* d) {
#if DSA_LINEAR_AVX512
    if constexpr (std::is_same_v<T, float> && NR == 16 && gemv_max_nb == 4) {
      if (!whole_run(kb0, nb)) return false;  // the kernel reads the step's blocks as one run
      // Full runs for every t; a shorter last run (in not a multiple of 512) with one row only,
      // the tile path takes it for more (fewer instantiations, a few blocks per row).
      if (nb == 4) {
        switch (t) {
          case 1: packed_gemv_fp32<1, 4>(w, g0, kb0, x, ldx, d); return true;
          case 2: packed_gemv_fp32<2, 4>(w, g0, kb0, x, ldx, d); return true;
          case 3: packed_gemv_fp32<3, 4>(w, g0, kb0, x, ldx, d); return true;
          case 4: packed_gemv_fp32<4, 4>(w, g0, kb0, x, ldx, d); return true;
          default: return false;
        }
      }
      if (t == 1) {
        switch (nb) {
          case 3: packed_gemv_fp32<1, 3>(w, g0, kb0, x, ldx, d); return true;
          case 2: packed_gemv_fp32<1, 2>(w, g0, kb0, x, ldx, d); return true;
          case 1: packed_gemv_fp32<1, 1>(w, g0, kb0, x, ldx, d); return true;
          default: return false;
        }
      }
      return false;
    }
#endif
    (void)kb0, (void)nb, (void)t, (void)x, (void)ldx, (void)d;
    return false;
  }
};
template <index_t NR>
row_major_tiles<NR> tiles_of(const tensor_view<const fp8_e4m3, 2>& w) {
  return {w};
}
template <index_t NR>
packed_tiles<NR> tiles_of(const packed_fp8_weight& w) {
  return {w};
}
inline index_t out_features(const tensor_view<const fp8_e4m3, 2>& w) { return w.extent(0); }
inline index_t out_features(const packed_fp8_weight& w) { return w.out_features(); }
inline index_t in_features(const tensor_view<const fp8_e4m3, 2>& w) { return w.extent(1); }
inline index_t in_features(const packed_fp8_weight& w) { return w.in_features(); }

/// One k-block of a prefill panel for every row of the chunk: MR rows at a time through the
/// micro-kernel, each product promoted into acc[rows][NR] in block order. Out of line and shared
/// by both weight forms' fp8_gemm, as gemv_micro_call (one call per panel and block).
template <class T, index_t NR, int MR>
[[gnu::noinline]] void gemm_block_rows(index_t rows, const T* xb, const T* tile, float* d, float* acc,
                                       const float* xs, index_t nkb, index_t kb, float wscale) {
  for (index_t i0 = 0; i0 < rows; i0 += MR) {
    const int mr = static_cast<int>(std::min<index_t>(MR, rows - i0));
    gemm_micro_dispatch<T, NR, MR>(mr, xb + i0 * block, block, tile, d);
    for (int i = 0; i < mr; ++i) {
      promote<NR>(acc + (i0 + i) * NR, d + i * NR, fp8_linear_block_scale(xs[(i0 + i) * nkb + kb], wscale));
    }
  }
}

/// Where the fp8 kernels write y, its element type (bf16 or float) a runtime tag: they store
/// each output once, after its whole k loop, so the branch costs nothing there, while a type
/// parameter doubled every micro-kernel instantiated (and the build time of every translation
/// unit that calls fp8_linear). Rows are y.stride(0) apart, columns contiguous (the front-end's
/// contract).
struct fp8_out_rows {
  void* data;
  index_t ld;
  bool is_bf16;

  template <class O>
  explicit fp8_out_rows(const tensor_view<O, 2>& y)
      : data(y.data_handle()), ld(y.stride(0)), is_bf16(std::is_same_v<O, bf16>) {
    static_assert(std::is_same_v<O, bf16> || std::is_same_v<O, float>);
  }

  /// y(y0 + i, n0 + j) = acc[i * nr + j] rounded once, for i < rows and j < nn.
  void store_panel(index_t y0, index_t rows, index_t n0, index_t nn, const float* acc, index_t nr) const {
    for (index_t i = 0; i < rows; ++i) {
      const float* ar = acc + i * nr;
      if (is_bf16) {
        bf16* yr = static_cast<bf16*>(data) + (y0 + i) * ld + n0;
        for (index_t j = 0; j < nn; ++j) yr[j] = from_float<bf16>(ar[j]);
      } else {
        float* yr = static_cast<float*>(data) + (y0 + i) * ld + n0;
        for (index_t j = 0; j < nn; ++j) yr[j] = ar[j];
      }
    }
  }
};

/// Decode (t <= 4 rows): panels of NR outputs split over threads; each panel walks the k-blocks
/// nb at a time: nb pair tiles, one micro-kernel call for all rows, then every block's
/// promotion in ascending order.
template <class T, index_t NR, class Codes>
void fp8_gemv(const cpu_backend& be, const T* xv, const float* xs, index_t t, const Codes& w,
              const tensor_view<const float, 2>& ws, const fp8_out_rows& y) {
  const index_t in = in_features(w);
  const index_t out = out_features(w);
  const index_t nkb = in / block;
  const index_t panels = (out + NR - 1) / NR;
  const int nb_max = gemv_nb<T>(t);
  constexpr index_t tile_stride = (NR / group_rows) * pair_tile_dwords;
  auto body = [&](index_t p0, index_t p1) {
    std::uint32_t* pt = scratch<std::uint32_t, 1>(static_cast<std::size_t>(gemv_max_nb * tile_stride));
    float* d = scratch<float, 2>(static_cast<std::size_t>(gemv_max_nb * 4 * NR));
    alignas(64) float acc[4 * NR];
    auto tiles = tiles_of<NR>(w);
    for (index_t p = p0; p < p1; ++p) {
      const index_t n0 = p * NR;
      tiles.panel(n0);
      std::fill(acc, acc + t * NR, 0.0f);
      const float* wsr = ws.row(n0 / block);
      for (index_t kb0 = 0; kb0 < nkb; kb0 += nb_max) {
        const int nb = static_cast<int>(std::min<index_t>(nb_max, nkb - kb0));
        if (!tiles.gemv_regs(kb0, nb, t, xv + kb0 * block, in, d)) {
          tiles.tiles(kb0, nb, pt, tile_stride);
          gemv_micro_call<T, NR>(static_cast<int>(t), nb, xv + kb0 * block, in, pt, tile_stride, d, tiles.ahead(kb0, nb));
        }
        for (int b = 0; b < nb; ++b) {
          const float wscale = wsr[kb0 + b];
          for (index_t i = 0; i < t; ++i) {
            promote<NR>(acc + i * NR, d + (b * t + i) * NR, fp8_linear_block_scale(xs[i * nkb + kb0 + b], wscale));
          }
        }
      }
      y.store_panel(0, t, n0, std::min(NR, out - n0), acc, NR);
    }
  };
  if (out * in >= gemv_parallel_bytes) {
    parallel_for(be, panels, 1, body);
  } else {
    body(0, panels);
  }
}

/// Prefill: rows [0, rows) of a chunk (decoded activations xv [rows][in], scales xs) into
/// y.row(y0 + i). Panels of NR outputs split over threads; per panel and block: the pair tile,
/// widened once into a T tile, then MR rows at a time through the micro-kernel and the
/// promotion.
template <class T, index_t NR, int MR, class Codes>
void fp8_gemm(const cpu_backend& be, const T* xv, const float* xs, index_t rows, const Codes& w,
              const tensor_view<const float, 2>& ws, const fp8_out_rows& y, index_t y0) {
  const index_t in = in_features(w);
  const index_t out = out_features(w);
  const index_t nkb = in / block;
  const index_t panels = (out + NR - 1) / NR;
  parallel_for(be, panels, 1, [&](index_t p0, index_t p1) {
    std::uint32_t* pt = scratch<std::uint32_t, 1>(static_cast<std::size_t>((NR / group_rows) * pair_tile_dwords));
    T* tile = scratch<T, 3>(static_cast<std::size_t>(block * NR));
    float* d = scratch<float, 2>(static_cast<std::size_t>(MR * NR));
    float* acc = scratch<float, 4>(static_cast<std::size_t>(rows * NR));
    auto tiles = tiles_of<NR>(w);
    for (index_t p = p0; p < p1; ++p) {
      const index_t n0 = p * NR;
      tiles.panel(n0);
      std::fill(acc, acc + rows * NR, 0.0f);
      const float* wsr = ws.row(n0 / block);
      for (index_t kb = 0; kb < nkb; ++kb) {
        tiles.tile(kb, pt);
        widen_tile<T, NR>(pt, tile);
        gemm_block_rows<T, NR, MR>(rows, xv + kb * rows * block, tile, d, acc, xs, nkb, kb, wsr[kb]);
      }
      y.store_panel(y0, rows, n0, std::min(NR, out - n0), acc, NR);
    }
  });
}

template <class T, class X, class Codes>
void fp8_linear_run(const cpu_backend& be, const tensor_view<const X, 2>& x, const Codes& w,
                    const tensor_view<const float, 2>& ws, const fp8_out_rows& y, scale_format fmt) {
  using shape = fp8_shape<T>;
  const index_t t = x.extent(0);
  const index_t in = x.extent(1);
  const index_t nkb = in / block;
  if (t <= 4) {
    // Decode: the activations are a few KB (decoded on the calling thread's scratch, read by
    // every worker); the weights stream once.
    T* xv = scratch<T, 5>(static_cast<std::size_t>(t * in));
    float* xs = scratch<float, 6>(static_cast<std::size_t>(t * nkb));
    quantize_rows(be, x, 0, t, fmt, xv, xs);
    fp8_gemv<T, shape::gemv_nr>(be, xv, xs, t, w, ws, y);
    return;
  }
  // Prefill: rows in chunks of about 8 MiB of decoded activations (each chunk decodes the
  // weights once more), MR rows per micro-kernel call.
  // The chunks are balanced (t = 256 is two chunks of 128, not 252 + 4: each chunk decodes the
  // whole weight).
  constexpr index_t mr = shape::gemm_mr;
  const index_t by_size = (index_t{8} << 20) / (in * static_cast<index_t>(sizeof(T)));
  const index_t chunk_max = std::clamp<index_t>(by_size / mr * mr, 4 * mr, 256 / mr * mr);
  const index_t chunks = (t + chunk_max - 1) / chunk_max;
  const index_t chunk = ((t + chunks - 1) / chunks + mr - 1) / mr * mr;
  const index_t rows_max = std::min(chunk, t);
  T* xv = scratch<T, 5>(static_cast<std::size_t>(rows_max * in));
  float* xs = scratch<float, 6>(static_cast<std::size_t>(rows_max * nkb));
  for (index_t r0 = 0; r0 < t; r0 += chunk) {
    const index_t rows = std::min(chunk, t - r0);
    quantize_rows(be, x, r0, rows, fmt, xv, xs, true);
    fp8_gemm<T, shape::gemm_nr, static_cast<int>(mr)>(be, xv, xs, rows, w, ws, y, r0);
  }
}

template <class O>
void fill_zero(const cpu_backend& be, const tensor_view<O, 2>& y) {
  parallel_for(be, y.extent(0), 64, [&](index_t b, index_t e) {
    for (index_t i = b; i < e; ++i) {
      O* yr = y.row(i);
      for (index_t j = 0; j < y.extent(1); ++j) yr[j] = from_float<O>(0.0f);
    }
  });
}

/// fp8_linear of either weight form in the backend's block-dot mode (in == 0: zeros).
template <class X, class Codes, class O>
void fp8_linear_dispatch(const cpu_backend& be, const tensor_view<const X, 2>& x, const Codes& w,
                         const tensor_view<const float, 2>& ws, const tensor_view<O, 2>& y, scale_format fmt) {
  if (x.extent(1) == 0) {
    fill_zero(be, y);
  } else if (be.fp8_block_dot == fp8_dot::fp32) {
    fp8_linear_run<float>(be, x, w, ws, fp8_out_rows(y), fmt);
  } else {
    fp8_linear_run<double>(be, x, w, ws, fp8_out_rows(y), fmt);
  }
}

// ---- linear -------------------------------------------------------------------------------------

DSA_FORCEINLINE vfloat load_vec(const float* p) {
  vfloat v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
DSA_FORCEINLINE vfloat load_vec(const bf16* p) {
  vhalf h;
  std::memcpy(&h, p, sizeof h);
  return reinterpret_cast<vfloat>(__builtin_convertvector(h, vuint) << 16);
}

/// The lanes of v summed in a fixed tree (halves, then quarters, ...).
DSA_FORCEINLINE float reduce_lanes(vfloat v) {
  constexpr index_t L = lanes<float>;
  float t[L];
  std::memcpy(t, &v, sizeof v);
  for (index_t width = L / 2; width >= 1; width /= 2) {
    for (index_t l = 0; l < width; ++l) t[l] += t[l + width];
  }
  return t[0];
}

/// How far ahead in each weight row linear_gemv_rows asks for the next line (into L1). The four
/// rows it streams at once are four sequential streams that the hardware prefetcher alone kept at
/// 74-78% of the read-only probe (bf16 lm_head, from DRAM); 1 KB ahead measured 85-90% on one and
/// two threads (512 B-2 KB within the noise of each other; 4 KB no better than none).
inline constexpr std::uintptr_t gemv_row_prefetch = 1024;

/// GEMV of TR <= 4 rows: four outputs at a time, each summed over k in vector lanes from the
/// weight row itself (bf16 widened in registers), the lanes reduced in a fixed tree and the
/// k tail added in order.
template <int TR, class W, class O>
void linear_gemv_rows(const cpu_backend& be, const float* xf, index_t in, const tensor_view<const W, 2>& w,
                      const tensor_view<O, 2>& y) {
  constexpr index_t L = lanes<float>;
  constexpr index_t G = 4;
  const index_t out = w.extent(0);
  const index_t inv = in / L * L;
  const index_t groups = (out + G - 1) / G;
  auto body = [&](index_t g0, index_t g1) {
    for (index_t g = g0; g < g1; ++g) {
      const index_t n0 = g * G;
      const index_t nn = std::min(G, out - n0);
      const W* wr[G];
      for (index_t j = 0; j < G; ++j) wr[j] = w.row(n0 + std::min(j, nn - 1));
      vfloat acc[TR][G];
#pragma GCC unroll 4
      for (int i = 0; i < TR; ++i) {
#pragma GCC unroll 4
        for (index_t j = 0; j < G; ++j) acc[i][j] = vfloat{};
      }
      for (index_t k = 0; k < inv; k += L) {
        vfloat wv[G];
#pragma GCC unroll 4
        for (index_t j = 0; j < G; ++j) {
          if (k % (64 / static_cast<index_t>(sizeof(W))) == 0) {
            __builtin_prefetch(prefetch_address(wr[j] + k, gemv_row_prefetch), 0, 3);
          }
          wv[j] = load_vec(wr[j] + k);
        }
#pragma GCC unroll 4
        for (int i = 0; i < TR; ++i) {
          const vfloat xk = load_vec(xf + i * in + k);
#pragma GCC unroll 4
          for (index_t j = 0; j < G; ++j) acc[i][j] += xk * wv[j];
        }
      }
      for (int i = 0; i < TR; ++i) {
        for (index_t j = 0; j < nn; ++j) {
          float s = reduce_lanes(acc[i][j]);
          for (index_t k = inv; k < in; ++k) s += xf[i * in + k] * to_float(wr[j][k]);
          y(i, n0 + j) = from_float<O>(s);
        }
      }
    }
  };
  if (out * in * static_cast<index_t>(sizeof(W)) >= gemv_parallel_bytes) {
    parallel_for(be, groups, 8, body);
  } else {
    body(0, groups);
  }
}

template <class X, class W, class O>
void linear_gemv(const cpu_backend& be, const tensor_view<const X, 2>& x, const tensor_view<const W, 2>& w,
                 const tensor_view<O, 2>& y) {
  const index_t t = x.extent(0);
  const index_t in = x.extent(1);
  float* xf = scratch<float, 6>(static_cast<std::size_t>(t * in));
  for (index_t i = 0; i < t; ++i) {
    const X* xr = x.row(i);
    for (index_t k = 0; k < in; ++k) xf[i * in + k] = to_float(xr[k]);
  }
  switch (t) {
    case 1: linear_gemv_rows<1>(be, xf, in, w, y); break;
    case 2: linear_gemv_rows<2>(be, xf, in, w, y); break;
    case 3: linear_gemv_rows<3>(be, xf, in, w, y); break;
    default: linear_gemv_rows<4>(be, xf, in, w, y); break;
  }
}

// A rank-2 host view as a row-major Eigen map (unit inner stride, checked by the front-end).
template <class T>
auto map_rows(const T* data, index_t rows, index_t cols, index_t ld) {
  return Eigen::Map<const row_major<T>, 0, Eigen::OuterStride<>>(data, rows, cols, Eigen::OuterStride<>(ld));
}

// Output panel width of linear: a panel of fp32 weights stays within about 512 KiB.
inline index_t linear_panel(index_t in) {
  const index_t p = (index_t{1} << 17) / std::max<index_t>(in, 1);
  return std::clamp<index_t>(p / 8 * 8, 8, 256);
}

template <class X, class W, class O>
void linear(const cpu_backend& be, const tensor_view<const X, 2>& x, const tensor_view<const W, 2>& w,
            const tensor_view<O, 2>& y) {
  const index_t t = x.extent(0);
  const index_t in = x.extent(1);
  const index_t out = w.extent(0);
  if (in == 0) {
    fill_zero(be, y);
    return;
  }
  if (t <= 4) {
    linear_gemv(be, x, w, y);
    return;
  }
  const index_t panel = linear_panel(in);
  const index_t panels = (out + panel - 1) / panel;
  const index_t chunk = 256;
  // fp32 operands with forward, non-overlapping rows are used in place; anything else (bf16,
  // or unusual strides Eigen maps do not take) goes through fp32 scratch.
  const bool direct_x = std::is_same_v<X, float> && (t <= 1 || x.stride(0) >= in);
  const bool direct_w = std::is_same_v<W, float> && (out <= 1 || w.stride(0) >= in);
  const bool direct_y = std::is_same_v<O, float> && (t <= 1 || y.stride(0) >= out);
  aligned_vector<float> xf;
  if (!direct_x) xf.resize(static_cast<std::size_t>(std::min(chunk, t) * in));
  for (index_t r0 = 0; r0 < t; r0 += chunk) {
    const index_t rows = std::min(chunk, t - r0);
    const float* xp = xf.data();
    index_t xld = in;
    if constexpr (std::is_same_v<X, float>) {
      if (direct_x) {
        xp = x.row(r0);
        xld = x.stride(0);
      }
    }
    if (!direct_x) {
      parallel_for(be, rows, 16, [&](index_t b, index_t e) {
        for (index_t i = b; i < e; ++i) {
          const X* xr = x.row(r0 + i);
          float* dst = xf.data() + i * in;
          for (index_t k = 0; k < in; ++k) dst[k] = to_float(xr[k]);
        }
      });
    }
    const auto xm = map_rows(xp, rows, in, xld);
    parallel_for(be, panels, 1, [&](index_t p0, index_t p1) {
      aligned_vector<float> wf;
      aligned_vector<float> yf;
      if (!direct_w) wf.resize(static_cast<std::size_t>(panel * in));
      if (!direct_y) yf.resize(static_cast<std::size_t>(rows * panel));
      for (index_t p = p0; p < p1; ++p) {
        const index_t n0 = p * panel;
        const index_t nn = std::min(panel, out - n0);
        const float* wp = wf.data();
        index_t wld = in;
        if constexpr (std::is_same_v<W, float>) {
          if (direct_w) {
            wp = w.row(n0);
            wld = w.stride(0);
          }
        }
        if (!direct_w) {
          for (index_t j = 0; j < nn; ++j) {
            const W* wr = w.row(n0 + j);
            float* dst = wf.data() + j * in;
            for (index_t k = 0; k < in; ++k) dst[k] = to_float(wr[k]);
          }
        }
        const auto wm = map_rows(wp, nn, in, wld);
        bool done = false;
        if constexpr (std::is_same_v<O, float>) {
          if (direct_y) {
            Eigen::Map<row_major<float>, 0, Eigen::OuterStride<>> ym(y.row(r0) + n0, rows, nn,
                                                                    Eigen::OuterStride<>(y.stride(0)));
            ym.noalias() = xm * wm.transpose();
            done = true;
          }
        }
        if (!done) {
          Eigen::Map<row_major<float>> ym(yf.data(), rows, nn);
          ym.noalias() = xm * wm.transpose();
          for (index_t i = 0; i < rows; ++i) {
            O* yr = y.row(r0 + i) + n0;
            const float* src = yf.data() + i * nn;
            for (index_t j = 0; j < nn; ++j) yr[j] = from_float<O>(src[j]);
          }
        }
      }
    });
  }
}

}  // namespace linear_impl
}  // namespace cpu_detail

template <>
struct op_impl<cpu_backend, fp8_linear_op> {
  template <class X, class O>
  static void run(const cpu_backend& be, tensor_view<const X, 2> x, tensor_view<const fp8_e4m3, 2> w,
                  tensor_view<const float, 2> w_scale, tensor_view<O, 2> y, scale_format act_format) {
    cpu_detail::linear_impl::fp8_linear_dispatch(be, x, w, w_scale, y, act_format);
  }
};

/// y [t, out] = x [t, in] . dequant(w)^T as dsa::fp8_linear, with w packed by pack_fp8_weight
/// (cpu/packed_fp8_weight.hpp): the same bits as fp8_linear with the weight it was packed from,
/// in both block-dot modes, without transposing the codes on every call (the decode GEMV's
/// largest cost). Argument checks and errors as fp8_linear's.
template <class XT, class O>
void fp8_linear(const cpu_backend& be, host_view<XT, 2> x, const packed_fp8_weight& w, host_view<const float, 2> w_scale,
                host_view<O, 2> y, scale_format act_format = scale_format::ue8m0) {
  static_assert(dense_detail::is_bf16_or_float<XT>, "dsa::fp8_linear: x must hold dsa::bf16 or float");
  static_assert(std::is_same_v<O, bf16> || std::is_same_v<O, float>, "dsa::fp8_linear: y must hold dsa::bf16 or float");
  using X = std::remove_const_t<XT>;
  constexpr std::string_view op = "fp8_linear";
  const host_view<const X, 2> xc(x.data_handle(), x.extents(), x.strides());
  if (w.group_rows() != packed_fp8_group_rows) {
    fail(op, "w.group_rows()", w.group_rows(), "the rows per group of this build's vectors (packed by code built for other ones)");
  }
  dense_detail::check_fp8_linear_operands(op, xc, w.out_features(), w_scale, y, act_format);
  if (w.in_features() != xc.extent(1)) fail(op, "w.in_features()", w.in_features(), "x.extent(1), the input features");
  if (y.empty()) return;
  cpu_detail::linear_impl::fp8_linear_dispatch(be, xc, w, w_scale, y, act_format);
}

template <>
struct op_impl<cpu_backend, linear_op> {
  template <class X, class W, class O>
  static void run(const cpu_backend& be, tensor_view<const X, 2> x, tensor_view<const W, 2> w, tensor_view<O, 2> y) {
    cpu_detail::linear_impl::linear(be, x, w, y);
  }
};

DSA_NAMESPACE_END

// The packed-weight fp8_linear's instances for dsa's own programs (dsa/core/op_instances.hpp;
// CPU only, so B is unused).
#define DSA_CPU_PACKED_FP8_LINEAR_INSTANCES(X, B) \
  X(void fp8_linear<float, float>(const cpu_backend&, host_view<float, 2>, const packed_fp8_weight&, host_view<const float, 2>, host_view<float, 2>, scale_format)) \
  X(void fp8_linear<float, bf16>(const cpu_backend&, host_view<float, 2>, const packed_fp8_weight&, host_view<const float, 2>, host_view<bf16, 2>, scale_format)) \
  X(void fp8_linear<const float, float>(const cpu_backend&, host_view<const float, 2>, const packed_fp8_weight&, host_view<const float, 2>, host_view<float, 2>, scale_format)) \
  X(void fp8_linear<const float, bf16>(const cpu_backend&, host_view<const float, 2>, const packed_fp8_weight&, host_view<const float, 2>, host_view<bf16, 2>, scale_format)) \
  X(void fp8_linear<bf16, float>(const cpu_backend&, host_view<bf16, 2>, const packed_fp8_weight&, host_view<const float, 2>, host_view<float, 2>, scale_format)) \
  X(void fp8_linear<bf16, bf16>(const cpu_backend&, host_view<bf16, 2>, const packed_fp8_weight&, host_view<const float, 2>, host_view<bf16, 2>, scale_format)) \
  X(void fp8_linear<const bf16, float>(const cpu_backend&, host_view<const bf16, 2>, const packed_fp8_weight&, host_view<const float, 2>, host_view<float, 2>, scale_format)) \
  X(void fp8_linear<const bf16, bf16>(const cpu_backend&, host_view<const bf16, 2>, const packed_fp8_weight&, host_view<const float, 2>, host_view<bf16, 2>, scale_format))
DSA_DECLARE_CPU_OP_INSTANCES(DSA_CPU_PACKED_FP8_LINEAR_INSTANCES)
DSA_DECLARE_CPU_OP_INSTANCES(DSA_LINEAR_INSTANCES)
