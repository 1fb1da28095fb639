// An FP8 weight rearranged once for the CPU fp8_linear kernels (what llama.cpp calls repacking
// and oneDNN a prepacked weight).
//
// fp8_linear's kernels multiply G output rows at a time (G = packed_fp8_group_rows, the fp32
// lanes of the widest vector: 16 with AVX-512, 8 with AVX, 4 otherwise) and sum every lane in
// ascending k, so each step needs one vector holding the same four codes k..k+3 of G rows. From
// the checkpoint's row-major [out, in] codes that vector is a 16 x 16 transposition of dwords per
// 1024 codes (64 shuffles, all on one port of x86 cores) plus a scan for the codes that need the
// slow decode (subnormal, zero, NaN): three fifths of the decode's time (17 against 43 GB/s of
// codes), which kept the decode GEMV under the memory's rate (docs/performance.md). The packed
// form stores the codes in that order, so the kernels load each vector as it is, and records
// which ranges hold a slow code. Same values, same results: fp8_linear with a packed weight gives
// the bits of fp8_linear with the original, in both block-dot modes (tested).
//
// Codes: each byte is the checkpoint's code except at exponent field 0 (packed_e4m3_code). The
// fast decode applies the normal-number formula to every code, 2^(e-7) (1 + m/8), which is
// wrong for e = 0; but for a subnormal with mantissa m >= 4 (value m 2^-9) it is exact at
// mantissa 2m - 8, so the packing stores those that way and the fast decode covers them. Zero
// and the subnormals with m < 4 take the odd mantissas (2m + 1) and stay slow codes, as NaN.
// With Gaussian-like weights this halves the runs that need the slow decode (measured: 64% ->
// 36% of the 4-block runs of a checkpoint-like weight, docs/records/2026-11-25-v32-scale-cpu-passes.md "Eighth pass").
//
// Layout (G rows per group, nkb = in / 128 blocks, rows padded to a multiple of 64 with the code
// of 1.0, whose outputs are never stored): per group of G rows, the blocks in runs of R = 4
// (the last run shorter when nkb % 4 != 0); per run, the 32 code quads; per quad, the run's
// blocks; per block, the G rows' dwords. The byte of row r = g·G + j and column
// k = 128·(4u + b) + 4·q + c is at g·G·in + 4u·128·G + (q·n + b)·4G + 4j + c with n the run's
// length. The decode GEMV takes R blocks per step, so it reads its codes as one sequential
// stream (with the blocks one after another, a step was four streams 2 KB apart, which the
// prefetchers served at 8-10 GB/s against 12-13 for one stream in a model of the loop). Bit s of
// special(g, kb) is set when quads [8s, 8s + 8) of that group and block hold a slow code (zero,
// a subnormal with m < 4, NaN).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include <Eigen/Core>

#include "dsa/core/backend.hpp"
#include "dsa/core/checked_math.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/isa.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/numerics/linear.hpp"

DSA_NAMESPACE_BEGIN

/// Rows per packed group on this build's widest vectors (see the file comment).
#if DSA_CPU_HAS_AVX512
inline constexpr index_t packed_fp8_group_rows = 16;
#elif DSA_CPU_HAS_AVX
inline constexpr index_t packed_fp8_group_rows = 8;
#else
inline constexpr index_t packed_fp8_group_rows = 4;
#endif

/// The weight's rows are padded to a multiple of this (every panel width of the kernels).
inline constexpr index_t packed_fp8_row_multiple = 64;

class packed_fp8_weight {
 public:
  packed_fp8_weight() = default;

  index_t out_features() const { return out_; }
  index_t in_features() const { return in_; }
  /// The G it was packed for; the kernels check it against their own (a weight packed by code
  /// built for other vectors is rejected, not misread).
  index_t group_rows() const { return g_; }
  bool empty() const { return out_ == 0; }
  /// Bytes held (codes and flags).
  std::size_t bytes() const { return codes_.size() + special_.size(); }

  /// Blocks per run (layout in the file comment).
  static constexpr index_t block_run = 4;
  /// The first quad (4G codes) of group g and block kb; quad q is at q · quad_stride(kb).
  const std::uint8_t* block_codes(index_t g, index_t kb) const {
    const index_t run0 = kb / block_run * block_run;
    return codes_.data() + static_cast<std::size_t>(g * g_ * in_ + run0 * fp8_linear_block * g_ + (kb - run0) * 4 * g_);
  }
  /// Bytes from one quad of block kb to the next.
  index_t quad_stride(index_t kb) const {
    return std::min(block_run, nkb() - kb / block_run * block_run) * 4 * g_;
  }
  /// The slow-code bits of group g and block kb.
  std::uint8_t special(index_t g, index_t kb) const { return special_[static_cast<std::size_t>(g * nkb() + kb)]; }

 private:
  friend packed_fp8_weight pack_fp8_weight(const cpu_backend& be, host_view<const fp8_e4m3, 2> w);
  index_t nkb() const { return in_ / fp8_linear_block; }

  index_t out_ = 0, in_ = 0, g_ = packed_fp8_group_rows;
  std::vector<std::uint8_t, Eigen::aligned_allocator<std::uint8_t>> codes_;
  std::vector<std::uint8_t> special_;
};

namespace cpu_detail {
/// The packed form's byte for e4m3 code c (file comment): c itself unless its exponent field is
/// 0; then mantissa m becomes 2m - 8 (m >= 4: the fast decode's value is exact) or 2m + 1.
constexpr std::uint8_t packed_e4m3_code(std::uint8_t c) {
  // Without branches, so that the packing's loop vectorises whatever the codes: 2m + 1, less 9
  // when m >= 4 (measured: the packing reads 0.88 GB/s of codes on one thread, checkpoint-like
  // or random, against 1.05 for the plain copy it replaced).
  const unsigned m = c & 7u;
  const unsigned exponent0 = (c & 0x80u) | (2 * m + 1 - 9 * (m >> 2));
  return static_cast<std::uint8_t>((c & 0x78u) != 0 ? c : exponent0);
}
/// The e4m3 code of a packed byte (the inverse of packed_e4m3_code).
constexpr std::uint8_t unpacked_e4m3_code(std::uint8_t p) {
  if ((p & 0x78u) != 0) return p;
  const unsigned m = p & 7u;
  return static_cast<std::uint8_t>((p & 0x80u) | (m % 2 == 0 ? m / 2 + 4 : (m - 1) / 2));
}

/// True when one of the 8 e4m3 codes in v packs to a byte the kernels' fast decode does not
/// cover: zero, a subnormal with mantissa < 4, or NaN (0x7F, 0xFF). Bytewise, without a loop: a
/// byte of (v & 0x7C..) or of (v & 0x7F..) ^ 0x7F.. is zero (the exact "has a zero byte" test).
constexpr bool e4m3_any_slow_code(std::uint64_t v) {
  constexpr std::uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
  auto has_zero_byte = [](std::uint64_t x) { return ((x - ones) & ~x & highs) != 0; };
  return has_zero_byte(v & 0x7C7C7C7C7C7C7C7Cull) || has_zero_byte((v & 0x7F7F7F7F7F7F7F7Full) ^ 0x7F7F7F7F7F7F7F7Full);
}
}  // namespace cpu_detail

/// Packs w [out, in] (in a multiple of 128; rows of unit inner stride, any row stride, as
/// fp8_linear takes them) for fp8_linear; threads of `be`. Throws dsa::error naming
/// "pack_fp8_weight" otherwise.
inline packed_fp8_weight pack_fp8_weight(const cpu_backend& be, host_view<const fp8_e4m3, 2> w) {
  constexpr std::string_view op = "pack_fp8_weight";
  check_valid(op, "w", w);
  check_inner_contiguous(op, "w", w);
  const index_t out = w.extent(0), in = w.extent(1);
  if (in % fp8_linear_block != 0) fail(op, "w.extent(1)", in, "a multiple of 128 (the weight block)");
  constexpr index_t G = packed_fp8_group_rows;
  packed_fp8_weight p;
  p.out_ = out;
  p.in_ = in;
  if (out == 0 || in == 0) return p;
  const index_t rows = checked_round_up(out, packed_fp8_row_multiple, op, "w.extent(0)", out, "a size whose padding fits index_t");
  const index_t total = checked_mul(rows, in, op, "w.extent", rows, "a weight whose byte count fits index_t");
  const index_t groups = rows / G, nkb = in / fp8_linear_block;
  p.codes_.resize(static_cast<std::size_t>(total));
  p.special_.assign(static_cast<std::size_t>(groups * nkb), 0);
  static constexpr auto padding = [] {
    std::array<std::uint8_t, fp8_linear_block> a{};
    for (auto& c : a) c = 0x38;  // e4m3 1.0
    return a;
  }();
  cpu_detail::parallel_for(be, groups, 1, [&](index_t g0, index_t g1) {
    for (index_t g = g0; g < g1; ++g) {
      for (index_t kb = 0; kb < nkb; ++kb) {
        std::uint8_t* dst = p.codes_.data() + (p.block_codes(g, kb) - p.codes_.data());
        const index_t quad_stride = p.quad_stride(kb);
        std::uint8_t mask = 0;
        for (index_t j = 0; j < G; ++j) {
          const index_t r = g * G + j;
          const std::uint8_t* src = r < out ? reinterpret_cast<const std::uint8_t*>(w.row(r)) + kb * fp8_linear_block
                                            : padding.data();
          std::array<std::uint8_t, fp8_linear_block> codes;
          for (std::size_t c = 0; c < codes.size(); ++c) codes[c] = cpu_detail::packed_e4m3_code(src[c]);
          for (index_t q = 0; q < fp8_linear_block / 4; ++q) std::memcpy(dst + q * quad_stride + j * 4, codes.data() + 4 * q, 4);
          for (index_t c = 0; c < fp8_linear_block; c += 8) {
            std::uint64_t v;
            std::memcpy(&v, src + c, 8);
            if (cpu_detail::e4m3_any_slow_code(v)) mask = static_cast<std::uint8_t>(mask | (1u << (c / 32)));
          }
        }
        p.special_[static_cast<std::size_t>(g * nkb + kb)] = mask;
      }
    }
  });
  return p;
}

DSA_NAMESPACE_END
