// CPU backend of the FP8 quantizers: the shared numerics, split over independent rows (or
// 128-row block rows for weights), so results are bit-identical for every thread count.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/parallel.hpp"
#include "dsa/numerics/fp8_quant.hpp"
#include "dsa/ops/fp8_quant.hpp"

DSA_NAMESPACE_BEGIN

namespace cpu_detail {

// Rows per task so that a task touches about 64K elements.
inline index_t fp8_quant_grain(index_t cols) { return std::max<index_t>(1, (index_t{1} << 16) / std::max<index_t>(cols, 1)); }

// fp8_e4m3(v).bits for the already clamped quotient v (|v| <= 448 or NaN), without branches so
// that the quantize loops vectorise. Bit-identical to the conversion of core/types.hpp
// (tested): normal codes round the 20 dropped mantissa bits to nearest even on the integer
// pattern; below 2^-6, adding 2^14 makes the FPU round |v| to a multiple of 2^-9 (the e4m3
// subnormal step) under the default round-to-nearest-even mode, and the low bits of the sum
// count those steps. A NaN gives 0x7F, as quantize_e4m3 does.
DSA_FORCEINLINE std::uint8_t fp8_quant_encode_clamped(float v) {
  const std::uint32_t u = detail::float_bits(v);
  const std::uint32_t sign = (u >> 24) & 0x80u;
  const std::uint32_t a = u & 0x7FFFFFFFu;
  const std::uint32_t normal = ((a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20) - ((127u - 7u) << 3);
  const std::uint32_t subnormal = detail::float_bits(detail::bits_float(a) + 16384.0f) - 0x46800000u;
  std::uint32_t code = a >= 0x3C800000u ? normal : subnormal;
  code = code > 0x7Eu ? 0x7Eu : code;
  return static_cast<std::uint8_t>(a > 0x7F800000u ? 0x7Fu : (sign | code));
}

// quantize_e4m3(x, s) for a whole group: the quotient and clamp of numerics/fp8_quant.hpp, then
// the branch-free encode. A power-of-two s with a normal reciprocal (every ue8m0 scale) divides
// by multiplying with 1 / s: both round the same exact value x * 2^-k, so the bits agree.
template <class T>
void fp8_quant_group(const T* x, index_t len, float s, fp8_e4m3* q) {
  const std::uint32_t sb = detail::float_bits(s);
  const std::uint32_t exp = (sb >> 23) & 0xFFu;
  if ((sb & 0x807FFFFFu) == 0u && exp >= 1u && exp <= 253u) {
    const float inv = detail::bits_float((254u - exp) << 23);
    for (index_t i = 0; i < len; ++i) {
      float v = to_float(x[i]) * inv;
      v = v < -e4m3_max ? -e4m3_max : v;
      v = v > e4m3_max ? e4m3_max : v;
      q[i].bits = fp8_quant_encode_clamped(v);
    }
  } else {
    for (index_t i = 0; i < len; ++i) {
      float v = detail::div_rn(to_float(x[i]), s);
      v = v < -e4m3_max ? -e4m3_max : v;
      v = v > e4m3_max ? e4m3_max : v;
      q[i].bits = fp8_quant_encode_clamped(v);
    }
  }
}

// Every e4m3 code's value: dequantization is a lookup and one multiply.
inline const float* fp8_quant_e4m3_values() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<std::size_t>(c)] = fp8_e4m3::from_bits(static_cast<std::uint8_t>(c)).to_float();
    return t;
  }();
  return table.data();
}

}  // namespace cpu_detail

template <>
struct op_impl<cpu_backend, act_quant_op> {
  template <class T>
  static void run(const cpu_backend& be, tensor_view<const T, 2> x, tensor_view<fp8_e4m3, 2> q,
                  tensor_view<float, 2> s, act_quant_config cfg) {
    const index_t cols = x.extent(1);
    const index_t g = cfg.group_size;
    cpu_detail::parallel_for(be, x.extent(0), cpu_detail::fp8_quant_grain(cols), [&](index_t begin, index_t end) {
      for (index_t r = begin; r < end; ++r) {
        const T* xr = x.row(r);
        fp8_e4m3* qr = q.row(r);
        float* sr = s.row(r);
        for (index_t k = 0; k * g < cols; ++k) {
          sr[k] = act_quant_scale(abs_max(xr + k * g, g), cfg.format);
          cpu_detail::fp8_quant_group(xr + k * g, g, sr[k], qr + k * g);
        }
      }
    });
  }
};

template <>
struct op_impl<cpu_backend, act_dequant_op> {
  template <class T>
  static void run(const cpu_backend& be, tensor_view<const fp8_e4m3, 2> q, tensor_view<const float, 2> s,
                  tensor_view<T, 2> y, index_t group_size) {
    const index_t cols = q.extent(1);
    const float* values = cpu_detail::fp8_quant_e4m3_values();
    cpu_detail::parallel_for(be, q.extent(0), cpu_detail::fp8_quant_grain(cols), [&](index_t begin, index_t end) {
      for (index_t r = begin; r < end; ++r) {
        const fp8_e4m3* qr = q.row(r);
        const float* sr = s.row(r);
        T* yr = y.row(r);
        for (index_t k = 0; k * group_size < cols; ++k) {
          const float sk = sr[k];
          for (index_t j = k * group_size; j < (k + 1) * group_size; ++j) yr[j] = from_float<T>(values[qr[j].bits] * sk);
        }
      }
    });
  }
};

template <>
struct op_impl<cpu_backend, weight_quant_op> {
  template <class T>
  static void run(const cpu_backend& be, tensor_view<const T, 2> w, tensor_view<fp8_e4m3, 2> q,
                  tensor_view<float, 2> s) {
    constexpr index_t blk = weight_quant_block;
    const index_t rows = w.extent(0), cols = w.extent(1);
    const index_t block_cols = s.extent(1);
    cpu_detail::parallel_for(be, s.extent(0), 1, [&](index_t begin, index_t end) {
      std::vector<std::uint32_t> amax(static_cast<std::size_t>(block_cols));
      for (index_t br = begin; br < end; ++br) {
        const index_t r0 = br * blk, r1 = std::min(rows, r0 + blk);
        // Row by row through the block row: the bit-pattern max of |w| (NaN-propagating).
        std::fill(amax.begin(), amax.end(), 0u);
        for (index_t r = r0; r < r1; ++r) {
          const T* wr = w.row(r);
          for (index_t bc = 0; bc < block_cols; ++bc) {
            const index_t c0 = bc * blk, c1 = std::min(cols, c0 + blk);
            std::uint32_t m = amax[static_cast<std::size_t>(bc)];
            for (index_t c = c0; c < c1; ++c) {
              const std::uint32_t a = abs_bits(wr[c]);
              m = a > m ? a : m;
            }
            amax[static_cast<std::size_t>(bc)] = m;
          }
        }
        float* sr = s.row(br);
        for (index_t bc = 0; bc < block_cols; ++bc) {
          sr[bc] = weight_quant_scale(detail::bits_float(amax[static_cast<std::size_t>(bc)]));
        }
        for (index_t r = r0; r < r1; ++r) {
          const T* wr = w.row(r);
          fp8_e4m3* qr = q.row(r);
          for (index_t bc = 0; bc < block_cols; ++bc) {
            const index_t c0 = bc * blk;
            cpu_detail::fp8_quant_group(wr + c0, std::min(blk, cols - c0), sr[bc], qr + c0);
          }
        }
      }
    });
  }
};

template <>
struct op_impl<cpu_backend, weight_dequant_op> {
  template <class T>
  static void run(const cpu_backend& be, tensor_view<const fp8_e4m3, 2> q, tensor_view<const float, 2> s,
                  tensor_view<T, 2> w) {
    constexpr index_t blk = weight_quant_block;
    const index_t cols = q.extent(1);
    const float* values = cpu_detail::fp8_quant_e4m3_values();
    cpu_detail::parallel_for(be, q.extent(0), cpu_detail::fp8_quant_grain(cols), [&](index_t begin, index_t end) {
      for (index_t r = begin; r < end; ++r) {
        const fp8_e4m3* qr = q.row(r);
        const float* sr = s.row(r / blk);
        T* wr = w.row(r);
        for (index_t c = 0; c < cols; ++c) wr[c] = from_float<T>(values[qr[c].bits] * sr[c / blk]);
      }
    });
  }
};

DSA_NAMESPACE_END
