// CPU backend of dsa::linear and, through cpu/fp8_linear.hpp, of dsa::fp8_linear (both ops of
// ops/linear.hpp, and the packed-weight fp8_linear overload).
//
// linear: t <= 4 rows (decode: lm_head, the absorbed MLA projections, the MoE gate): a GEMV
// straight from the weight (bf16 widened in registers, nothing converted in memory), four
// outputs per step, each summed over k in vector lanes and reduced in a fixed tree. More rows:
// inputs converted exactly to fp32 per panel of outputs (scratch of about 512 KiB per thread)
// and multiplied with Eigen's fp32 GEMM per fixed panel. Panel and chunk sizes depend only on
// the shapes, never on the thread count: bit-identical for every thread count.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/cpu/arch/prefetch.hpp"
#include "dsa/cpu/arch/vec.hpp"
#include "dsa/cpu/fp8_linear.hpp"
#include "dsa/ops/linear.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {
namespace linear_impl {

template <class T>
using aligned_vector = std::vector<T, Eigen::aligned_allocator<T>>;

template <class T>
using row_major = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The SIMD vocabulary (arch/vec.hpp) the GEMV is written in.
using simd::load_vec;
using simd::reduce_lanes;

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
struct op_impl<cpu_backend, linear_op> {
  template <class X, class W, class O>
  static void run(const cpu_backend& be, tensor_view<const X, 2> x, tensor_view<const W, 2> w, tensor_view<O, 2> y) {
    cpu_detail::linear_impl::linear(be, x, w, y);
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CPU_OP_INSTANCES(DSA_LINEAR_INSTANCES)
