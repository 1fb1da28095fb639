// The pieces of fp8_linear's block dot that its micro-kernels share (cpu/fp8_linear.hpp has the
// overview): the block and quad sizes, the panel shapes of each ISA, the e4m3 value tables, the
// layout of the bf16 pair tile, its widening to fp32, and the promotion of a block's sum into
// the output. The decoders that fill pair tiles are kernels/fp8_pair_tile.hpp, the decode
// micro-kernels kernels/fp8_gemv.hpp, the prefill ones kernels/fp8_gemm.hpp.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/isa.hpp"
#include "dsa/cpu/arch/vec.hpp"
#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/cpu/packed_fp8_weight.hpp"
#include "dsa/numerics/linear.hpp"

#if DSA_CPU_HAS_AVX
#include <immintrin.h>
#endif

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

// The SIMD vocabulary (arch/vec.hpp) the kernels are written in.
using simd::lanes;
using simd::to_lanes;
using simd::vec_bytes;
using simd::vec_of;
using simd::vfloat;
using simd::vhalf;
using simd::vuint;

constexpr index_t block = fp8_linear_block;
/// k-quads (4 codes) per block: the unit of the bf16 pair tile.
constexpr index_t quads = block / 4;

/// Rows per decoder group: one vector of fp32 lanes (the pair tile's row unit).
inline constexpr index_t group_rows = lanes<float>;
static_assert(group_rows == packed_fp8_group_rows, "cpu/packed_fp8_weight.hpp and kernels/fp8_block_dot.hpp disagree on the vector width");

// Panel widths (outputs per tile: a divisor of 128 and a multiple of group_rows), rows per
// micro-kernel call (prefill) and k-blocks per step (decode), chosen so that the accumulators
// fit the register file (32 zmm with AVX-512, 16 ymm/xmm otherwise) with enough independent
// chains to hide the FMA latency. Decode streams gemv_nr rows at a time in runs of
// NB * 128 bytes (16 rows and 4 blocks measured best from DRAM: docs/decisions.md).
template <class T>
struct fp8_shape;
#if DSA_CPU_HAS_AVX512
template <>
struct fp8_shape<float> {
  static constexpr index_t gemm_nr = 64, gemm_mr = 6, gemv_nr = 16;
};
template <>
struct fp8_shape<double> {
  static constexpr index_t gemm_nr = 32, gemm_mr = 6, gemv_nr = 16;
};
#elif DSA_CPU_HAS_AVX2
template <>
struct fp8_shape<float> {
  static constexpr index_t gemm_nr = 16, gemm_mr = 6, gemv_nr = 16;
};
// The exact mode's double tile: 6 rows x 2 ymm of accumulators, 2 tile vectors and a broadcast
// (15 of 16 registers); 3 x 4 spilled (17) and ran at half the rate (34 -> 57 GFLOP/s at 64 rows).
template <>
struct fp8_shape<double> {
  static constexpr index_t gemm_nr = 8, gemm_mr = 6, gemv_nr = 8;
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
/// The most rows the pair-tile GEMV (gemv_micro_call) takes: 8 in the exact mode with AVX-512,
/// whose 8 x 2 double accumulators fill half of the 32 registers (8 rows through the prefill
/// GEMM instead: 6 + 2 rows per block, 23-24% of the FMA peak), else 4.
template <class T>
inline constexpr index_t gemv_tile_rows = (vec_bytes == 64 && std::is_same_v<T, double>) ? 8 : 4;
/// The most rows a decode GEMV call takes, for batched decode steps: with AVX-512 32, in parts of
/// 4 to 8 rows beyond 8 (the fp32 mode's register kernel packed_gemv_fp32: 65-70% of the FMA
/// peak at 16 rows, where the prefill GEMM reached 47-50%; the exact mode's tile GEMV above),
/// else 4.
template <class T>
inline constexpr index_t gemv_max_rows = vec_bytes == 64 ? 32 : 4;
template <class T>
constexpr int gemv_nb(index_t t) {
  const index_t regs = vec_bytes == 64 ? 16 : 8;
  const index_t per_block = t * fp8_shape<T>::gemv_nr / lanes<T>;
  const index_t nb = regs / std::max<index_t>(per_block, 1);
  return static_cast<int>(std::clamp<index_t>(nb, 1, gemv_max_nb));
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

/// The fp32 values of a pair vector: (low halves, high halves), i.e. codes (4q, 4q + 2) of A or
/// (4q + 1, 4q + 3) of B for every row of the group.
DSA_FORCEINLINE void widen_pairs(const std::uint32_t* p, vfloat& lo, vfloat& hi) {
  vuint v;
  std::memcpy(&v, p, sizeof v);
  lo = reinterpret_cast<vfloat>(v << 16);
  hi = reinterpret_cast<vfloat>(v & 0xFFFF0000u);
}

/// p[j] = fp8_linear_accumulate(p[j], d[j], s) for j in [0, n): the product rounded on its own,
/// never fused with the addition.
template <index_t n>
DSA_FORCEINLINE void promote(float* DSA_RESTRICT p, const float* DSA_RESTRICT d, float s) {
#if DSA_CPU_HAS_AVX512
  static_assert(n % 16 == 0);
  const __m512 sv = _mm512_set1_ps(s);
  for (index_t j = 0; j < n; j += 16) {
    const __m512 prod = _mm512_mul_round_ps(_mm512_load_ps(d + j), sv, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_store_ps(p + j, _mm512_add_ps(_mm512_load_ps(p + j), prod));
  }
#elif DSA_CPU_HAS_AVX2 && DSA_CPU_HAS_FMA
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

}  // namespace cpu_detail
DSA_NAMESPACE_END
