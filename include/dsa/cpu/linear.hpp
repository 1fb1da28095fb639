// CPU backend of dsa::fp8_linear and dsa::linear.
//
// fp8_linear. The activation rows are quantized with act_quant's numerics; then, because the
// 128-wide block dots are exact in double (dsa/numerics/linear.hpp), any evaluation order gives
// the same bits, and two paths share the work:
//  - few rows (decode, t <= 4): a GEMV streaming the weights once. Each weight block is decoded
//    once (bit manipulation and exact fp32 operations that vectorise, no table lookups, no
//    subnormal floats, so DAZ/FTZ set by a host program cannot change it) and dotted with every
//    row: e4m3 x e4m3 products are exact in fp32 and are summed in double lanes. On x86 the
//    decode, not memory bandwidth, limits it (~0.3 ns per weight and thread with AVX-512);
//  - many rows: per 128-output panel and k-block, the decoded tiles go through an Eigen double
//    GEMM, followed by the fp32 promotion epilogue.
// Work is split over output features (GEMV) or 128-output panels (GEMM); each output is computed
// by one thread.
//
// linear. Inputs are converted exactly to fp32 (bf16 panels into scratch; fp32 operands are
// mapped in place) and multiplied with Eigen's fp32 GEMM/GEMV per fixed panel of outputs. Panel
// and row-chunk sizes depend only on the shapes, never on the thread count, so each panel's
// product is the same Eigen call whichever thread runs it: bit-identical for every thread count.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/parallel.hpp"
#include "dsa/numerics/fp8_quant.hpp"
#include "dsa/numerics/linear.hpp"
#include "dsa/ops/linear.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {
namespace linear_impl {

constexpr index_t block = fp8_linear_block;

template <class T>
using aligned_vector = std::vector<T, Eigen::aligned_allocator<T>>;

template <class T>
using row_major = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Decodes 128 e4m3 codes to their fp32 values with integer and exact fp32 operations: the
// exponent/mantissa fields move into fp32 position with the exponent rebiased (+120), which is
// the value of every normal code; a subnormal code (exponent field 0, value m 2^-9) then reads
// 2^-7 + m 2^-10, and adding (that - 2^-6) = m 2^-10 - 2^-7 gives m 2^-9 exactly. No subnormal
// fp32 is ever formed, so DAZ/FTZ modes set by a host program cannot change the result, and the
// selections are bit masks so that the loop vectorises.
DSA_FORCEINLINE void decode_e4m3_block(const std::uint8_t* DSA_RESTRICT codes, float* DSA_RESTRICT out) {
  for (index_t k = 0; k < block; ++k) {
    const std::uint32_t c = codes[k];
    const std::uint32_t mag = c & 0x7Fu;
    const float f = detail::bits_float((mag << 20) + (120u << 23));
    const std::uint32_t is_sub = 0u - static_cast<std::uint32_t>(mag < 8u);
    const std::uint32_t is_nan = 0u - static_cast<std::uint32_t>(mag == 0x7Fu);
    const float v = f + detail::bits_float(detail::float_bits(f - 0x1p-6f) & is_sub);
    const std::uint32_t bits = (detail::float_bits(v) & ~is_nan) | (0x7FC00000u & is_nan);
    out[k] = detail::bits_float(bits | ((c & 0x80u) << 24));
  }
}

// The exact dot of 128 e4m3 values held as floats (products exact in fp32, sums exact in
// double whatever the lane order), rounded once to fp32.
DSA_FORCEINLINE float exact_block_dot(const float* DSA_RESTRICT a, const float* DSA_RESTRICT b) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (index_t k = 0; k < block; k += 8) {
    for (index_t l = 0; l < 8; ++l) s[l] += static_cast<double>(a[k + l] * b[k + l]);
  }
  // Lanes l and l + 4 sit in the two halves of a vector: this order needs no scalar shuffles.
  return static_cast<float>(((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7])));
}

inline const std::uint8_t* code_bytes(const fp8_e4m3* p) { return reinterpret_cast<const std::uint8_t*>(p); }

// Quantizes rows [r0, r0 + rows) of x: the code values (unscaled) into vals[rows][in] as V
// (float or double) and the group scales into scales[rows][in / 128].
template <class V, class X>
void quantize_rows(const cpu_backend& be, const tensor_view<const X, 2>& x, index_t r0, index_t rows,
                   scale_format fmt, V* vals, float* scales) {
  const index_t in = x.extent(1);
  const index_t nkb = in / block;
  parallel_for(be, rows, 8, [&](index_t b, index_t e) {
    alignas(64) fp8_e4m3 q[block];
    alignas(64) float f[block];
    for (index_t i = b; i < e; ++i) {
      const X* xr = x.row(r0 + i);
      for (index_t kb = 0; kb < nkb; ++kb) {
        scales[i * nkb + kb] = act_quant_group(xr + kb * block, block, q, fmt);
        decode_e4m3_block(code_bytes(q), f);
        V* dst = vals + i * in + kb * block;
        for (index_t k = 0; k < block; ++k) dst[k] = static_cast<V>(f[k]);
      }
    }
  });
}

// Few rows: every weight block is decoded once and dotted with all rows.
template <class X, class O>
void fp8_gemv(const cpu_backend& be, const tensor_view<const X, 2>& x, const tensor_view<const fp8_e4m3, 2>& w,
              const tensor_view<const float, 2>& ws, const tensor_view<O, 2>& y, scale_format fmt) {
  constexpr index_t max_rows = 4;
  const index_t t = x.extent(0);
  const index_t in = x.extent(1);
  const index_t out = w.extent(0);
  const index_t nkb = in / block;
  aligned_vector<float> xv(static_cast<std::size_t>(t * in));
  std::vector<float> xs(static_cast<std::size_t>(t * nkb));
  quantize_rows(be, x, 0, t, fmt, xv.data(), xs.data());
  parallel_for(be, out, 16, [&](index_t n0, index_t n1) {
    alignas(64) float wf[block];
    for (index_t n = n0; n < n1; ++n) {
      const std::uint8_t* wr = code_bytes(w.row(n));
      const float* wsr = ws.row(n / block);
      float acc[max_rows] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (index_t kb = 0; kb < nkb; ++kb) {
        decode_e4m3_block(wr + kb * block, wf);
        const float wscale = wsr[kb];
        for (index_t i = 0; i < t; ++i) {
          const float d = exact_block_dot(xv.data() + i * in + kb * block, wf);
          acc[i] = fp8_linear_accumulate(acc[i], d, fp8_linear_block_scale(xs[i * nkb + kb], wscale));
        }
      }
      for (index_t i = 0; i < t; ++i) y(i, n) = from_float<O>(acc[i]);
    }
  });
}

// Many rows: rows in chunks (bounding the decoded-activation scratch), 128-output panels over
// threads, one Eigen double GEMM per (panel, k-block) and the fp32 promotion epilogue.
template <class X, class O>
void fp8_gemm(const cpu_backend& be, const tensor_view<const X, 2>& x, const tensor_view<const fp8_e4m3, 2>& w,
              const tensor_view<const float, 2>& ws, const tensor_view<O, 2>& y, scale_format fmt) {
  const index_t t = x.extent(0);
  const index_t in = x.extent(1);
  const index_t out = w.extent(0);
  const index_t nkb = in / block;
  const index_t panels = (out + block - 1) / block;
  // About 4 MiB of decoded activations per chunk, and enough rows to amortise decoding w.
  const index_t chunk = std::clamp<index_t>((index_t{1} << 19) / in, 32, 256);
  aligned_vector<double> xv(static_cast<std::size_t>(std::min(chunk, t) * in));
  std::vector<float> xs(static_cast<std::size_t>(std::min(chunk, t) * nkb));
  for (index_t r0 = 0; r0 < t; r0 += chunk) {
    const index_t rows = std::min(chunk, t - r0);
    quantize_rows(be, x, r0, rows, fmt, xv.data(), xs.data());
    parallel_for(be, panels, 1, [&](index_t p0, index_t p1) {
      aligned_vector<double> wd(static_cast<std::size_t>(block * block));
      aligned_vector<double> dot(static_cast<std::size_t>(rows * block));
      aligned_vector<float> acc(static_cast<std::size_t>(rows * block));
      alignas(64) float wf[block];
      for (index_t p = p0; p < p1; ++p) {
        const index_t n0 = p * block;
        const index_t nn = std::min(block, out - n0);
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (index_t kb = 0; kb < nkb; ++kb) {
          for (index_t j = 0; j < nn; ++j) {
            decode_e4m3_block(code_bytes(w.row(n0 + j)) + kb * block, wf);
            double* dst = wd.data() + j * block;
            for (index_t k = 0; k < block; ++k) dst[k] = static_cast<double>(wf[k]);
          }
          Eigen::Map<const row_major<double>, 0, Eigen::OuterStride<>> xb(xv.data() + kb * block, rows, block,
                                                                          Eigen::OuterStride<>(in));
          Eigen::Map<const row_major<double>> wb(wd.data(), nn, block);
          Eigen::Map<row_major<double>> db(dot.data(), rows, nn);
          db.noalias() = xb * wb.transpose();
          const float wscale = ws(p, kb);
          for (index_t i = 0; i < rows; ++i) {
            const float s = fp8_linear_block_scale(xs[i * nkb + kb], wscale);
            const double* dr = dot.data() + i * nn;
            float* ar = acc.data() + i * block;
            for (index_t j = 0; j < nn; ++j) ar[j] = fp8_linear_accumulate(ar[j], static_cast<float>(dr[j]), s);
          }
        }
        for (index_t i = 0; i < rows; ++i) {
          O* yr = y.row(r0 + i) + n0;
          const float* ar = acc.data() + i * block;
          for (index_t j = 0; j < nn; ++j) yr[j] = from_float<O>(ar[j]);
        }
      }
    });
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
    namespace impl = cpu_detail::linear_impl;
    if (x.extent(1) == 0) {
      impl::fill_zero(be, y);
    } else if (x.extent(0) <= 4) {
      impl::fp8_gemv(be, x, w, w_scale, y, act_format);
    } else {
      impl::fp8_gemm(be, x, w, w_scale, y, act_format);
    }
  }
};

template <>
struct op_impl<cpu_backend, linear_op> {
  template <class X, class W, class O>
  static void run(const cpu_backend& be, tensor_view<const X, 2> x, tensor_view<const W, 2> w, tensor_view<O, 2> y) {
    cpu_detail::linear_impl::linear(be, x, w, y);
  }
};

DSA_NAMESPACE_END
