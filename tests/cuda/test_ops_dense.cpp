// The dense family on the CUDA backend against the CPU backend (docs/architecture.md, "Op
// families"): rms_norm, add_rms_norm, layer_norm, rope_apply, swiglu, linear (cuBLAS and the SIMT
// kernel) and fp8_linear, over V3.2's shapes (7168 hidden, 1536 / 512 ranks, 128 heads) and edge
// cases (strided and broadcast views, in place, ragged tiles, NaN and inf). Tolerances, per op:
//   bit-identical           norms, fp8_linear (the CPU's summation order / an exact block dot);
//   calc_diff < 1e-5        fp8_linear's tensor-core path (cuBLASLt's block-scaled FP8, its bf16
//                           fallback) against the exact kernel, DeepGEMM's measure;
//   bit-identical but for   rope, swiglu: device double cos/sin/exp/log
//   rare transcendentals    differ from glibc's by an ulp, which changes the fp32 rounding with
//                           probability ~2^-28 per value: at most one bf16 ulp on at most 1e-4
//                           of the elements;
//   error bound             linear: fp32 accumulation in cuBLAS's order, against a double
//                           reference: |y - ref| <= (in + 2) 2^-23 sum|x w| + one output ulp.
// NaN results compare as NaN (the hardware's NaN bit patterns differ between x86 and the GPU).
// Needs a GPU for the parity cases; the front-end cases run (and pass) without one.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <type_traits>
#include <vector>

#include "cuda/cuda_test.hpp"
#include "cuda/launchers.hpp"
#include "cuda/op_test.hpp"
#include "dsa/cpu/activation.hpp"
#include "dsa/cpu/linear.hpp"
#include "dsa/cpu/norm.hpp"
#include "dsa/cpu/rope.hpp"
#include "dsa/cuda/blas.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/fp8_linear_plan.hpp"
#include "dsa/cuda/ops.hpp"
#include "dsa/ops/activation.hpp"
#include "dsa/ops/linear.hpp"
#include "dsa/ops/norm.hpp"
#include "dsa/ops/rope.hpp"
#include "support/random.hpp"

namespace {

using dsa::bf16;
using dsa::fp8_e4m3;
using dsa::index_t;
constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();
constexpr float inf_f = std::numeric_limits<float>::infinity();

using dsa_test::normal_as;

// ---- norms ---------------------------------------------------------------------------------------

enum class norm_kind { rms, add_rms, layer };

// x [t, d] with row stride `ld` (>= d), specials in a few rows; y separate or in place.
template <class X>
void check_norm(norm_kind kind, index_t t, index_t d, index_t ld, bool in_place, bool specials, std::uint64_t seed) {
  CAPTURE(static_cast<int>(kind));
  CAPTURE(t);
  CAPTURE(d);
  CAPTURE(ld);
  CAPTURE(in_place);
  auto xs = dsa_test::normal(static_cast<std::size_t>(t * ld), seed, 3.0f);
  for (std::size_t i = 0; i < xs.size(); i += 7) xs[i] += 40.0f;  // a non-zero mean for layer_norm
  if (specials && t >= 3) {
    xs[static_cast<std::size_t>(ld)] = inf_f;
    xs[static_cast<std::size_t>(2 * ld + d / 2)] = nan_f;
    for (index_t k = 0; k < d; ++k) xs[static_cast<std::size_t>(k)] = 0.0f;  // an all-zero row
  }
  if (specials && t >= 4 && d >= 8) {
    // Lane sums that cancel (lane 0: 2^60, lane 1: -2^60, lane 4: 1): exact only in the CPU's
    // pairwise lane order ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)), so the layer_norm mean tells a
    // kernel that combines the 8 lanes in any other order.
    float* row = xs.data() + 3 * ld;
    for (index_t k = 0; k < d; ++k) row[k] = 0.0f;
    row[0] = 0x1p60f;
    row[1] = -0x1p60f;
    row[4] = 1.0f;
  }
  std::vector<X> x = dsa_test::convert<X>(xs);
  std::vector<bf16> res = normal_as<bf16>(static_cast<std::size_t>(t * ld), seed + 1, 2.0f);
  const auto w = dsa_test::uniform(static_cast<std::size_t>(d), seed + 2, 0.5f, 1.5f);
  const auto b = dsa_test::uniform(static_cast<std::size_t>(d), seed + 3, -0.5f, 0.5f);
  const float eps = 1e-6f;

  // CPU, on copies.
  std::vector<X> hx = x;
  std::vector<bf16> hres = res;
  std::vector<bf16> hy(static_cast<std::size_t>(t * ld));
  const dsa::host_view<X, 2> hxv(hx.data(), {t, d}, {ld, 1});
  const dsa::host_view<bf16, 2> hresv(hres.data(), {t, d}, {ld, 1});
  dsa::host_view<bf16, 2> hyv(hy.data(), {t, d}, {ld, 1});
  if constexpr (std::is_same_v<X, bf16>) {
    if (in_place) hyv = hxv;
  }
  const auto hw = dsa::make_view(w.data(), {d});
  const auto hb = dsa::make_view(b.data(), {d});

  dsa_test::test_stream stream;
  auto dx = dsa_test::upload(x, stream.get());
  auto dres = dsa_test::upload(res, stream.get());
  auto dw = dsa_test::upload(w, stream.get());
  auto db = dsa_test::upload(b, stream.get());
  // The host's zeros, padding included: the padding must come back untouched (and the whole
  // buffer is defined, so copying it back reads no uninitialized memory).
  auto dy = dsa_test::upload(hy, stream.get());
  const dsa::device_view<X, 2> dxv(dx.data(), {t, d}, {ld, 1});
  const dsa::device_view<bf16, 2> dresv(dres.data(), {t, d}, {ld, 1});
  dsa::device_view<bf16, 2> dyv(dy.data(), {t, d}, {ld, 1});
  if constexpr (std::is_same_v<X, bf16>) {
    if (in_place) dyv = dxv;
  }
  const auto be = stream.backend();
  if (kind == norm_kind::rms) {
    dsa::rms_norm(dsa::cpu, hxv, hw, hyv, eps);
    dsa::rms_norm(be, dxv, dw.view({d}), dyv, eps);
  } else if (kind == norm_kind::layer) {
    dsa::layer_norm(dsa::cpu, hxv, hw, hb, hyv, eps);
    dsa::layer_norm(be, dxv, dw.view({d}), db.view({d}), dyv, eps);
  } else if constexpr (std::is_same_v<X, bf16>) {
    dsa::add_rms_norm(dsa::cpu, hxv, hresv, hw, hyv, eps);
    dsa::add_rms_norm(be, dxv, dresv, dw.view({d}), dyv, eps);
  }
  if (in_place && std::is_same_v<X, bf16>) {
    dsa_test::check_bits_equal("y (in place)", dsa_test::download(dx, stream.get()), hx);
  } else {
    dsa_test::check_bits_equal("y", dsa_test::download(dy, stream.get()), hy);
    dsa_test::check_bits_equal("x (unchanged)", dsa_test::download(dx, stream.get()), x);
  }
  if (kind == norm_kind::add_rms) dsa_test::check_bits_equal("residual", dsa_test::download(dres, stream.get()), hres);
}

// ---- rope ----------------------------------------------------------------------------------------

dsa::rope_config v32_rope() {
  dsa::rope_config c;
  c.dim = 64;
  c.base = 10000.0f;
  c.factor = 40.0f;
  c.original_max_position = 4096;
  c.max_position = 163840;
  c.beta_fast = 32.0f;
  c.beta_slow = 1.0f;
  return c;
}

// x [t, heads, dim] as the slice at `offset` of rows of `width` per head.
void check_rope(index_t t, index_t heads, index_t width, index_t offset, const dsa::rope_config& cfg,
                dsa::rope_layout layout, std::uint64_t seed) {
  CAPTURE(t);
  CAPTURE(heads);
  CAPTURE(cfg.dim);
  CAPTURE(static_cast<int>(layout));
  const std::size_t n = static_cast<std::size_t>(t * heads * width);
  std::vector<bf16> x = normal_as<bf16>(n, seed, 2.0f);
  std::vector<std::int32_t> pos(static_cast<std::size_t>(t));
  std::mt19937_64 rng(seed);
  // Positions in [0, max_position), which the CPU front-end checks: the edges of YaRN's original
  // context and of max_position itself, then random ones.
  const index_t special[] = {0, 1, 4095, 4096, 163839, cfg.max_position - 1};
  for (index_t i = 0; i < t; ++i) {
    pos[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(
        (i < static_cast<index_t>(std::size(special)) ? special[i] : static_cast<index_t>(rng() % 200000)) %
        cfg.max_position);
  }
  std::vector<bf16> hx = x;
  const dsa::host_view<bf16, 3> hv(hx.data() + offset, {t, heads, cfg.dim}, {heads * width, width, 1});
  dsa::rope_apply(dsa::cpu, hv, dsa::make_view(static_cast<const std::int32_t*>(pos.data()), {t}), cfg, layout);
  dsa_test::test_stream stream;
  auto dx = dsa_test::upload(x, stream.get());
  auto dp = dsa_test::upload(pos, stream.get());
  const dsa::device_view<bf16, 3> dv(dx.data() + offset, {t, heads, cfg.dim}, {heads * width, width, 1});
  dsa::rope_apply(stream.backend(), dv, dp.view({t}), cfg, layout);
  dsa_test::check_nearly_same("x", dsa_test::download(dx, stream.get()), hx, 1);
}

// ---- linear --------------------------------------------------------------------------------------

// y = x . w^T with leading dimensions ldx >= in (0: broadcast one row), ldw, ldy, against a double
// reference and the error bound of the header; and bit-identical on a second run. `path` picks
// the backend's linear path (simt: the backend gets no handle). max_rows > 0 calls the SIMT kernel
// with at most that many blocks along y (its row-tile loop).
template <class X, class W, class O>
void check_linear(const dsa::cublas_handle& blas, dsa::cuda_linear_path path, index_t t, index_t in, index_t out,
                  index_t ldx, index_t ldw, index_t ldy, std::uint64_t seed, index_t max_rows = 0) {
  const bool simt_path = path == dsa::cuda_linear_path::simt;
  CAPTURE(simt_path);
  CAPTURE(t);
  CAPTURE(in);
  CAPTURE(out);
  CAPTURE(ldx);
  CAPTURE(ldw);
  CAPTURE(ldy);
  const bool x_bf16 = std::is_same_v<X, bf16>;
  CAPTURE(x_bf16);
  const bool w_bf16 = std::is_same_v<W, bf16>;
  CAPTURE(w_bf16);
  const bool o_bf16 = std::is_same_v<O, bf16>;
  CAPTURE(o_bf16);
  const index_t xrows = ldx == 0 ? 1 : t;
  const index_t xld = ldx == 0 ? in : ldx;
  const std::vector<X> x = normal_as<X>(static_cast<std::size_t>(std::max<index_t>(xrows * xld, 1)), seed);
  const std::vector<W> w = normal_as<W>(static_cast<std::size_t>(std::max<index_t>(out * ldw, 1)), seed + 1, 0.05f);
  dsa_test::test_stream stream;
  const dsa::cuda_backend be{stream.get(), simt_path ? nullptr : blas.get(), path};
  auto dx = dsa_test::upload(x, stream.get());
  auto dw = dsa_test::upload(w, stream.get());
  // y starts as a sentinel, padding included: the padding between rows must come back untouched
  // (and the whole buffer is defined, so copying it back reads no uninitialized memory).
  const O sentinel = static_cast<O>(-3.0f);
  const std::vector<O> y0(static_cast<std::size_t>(std::max<index_t>(t * ldy, 1)), sentinel);
  auto dy = dsa_test::upload(y0, stream.get());
  const dsa::device_view<const X, 2> dxv(dx.data(), {t, in}, {ldx, 1});
  const dsa::device_view<const W, 2> dwv(dw.data(), {out, in}, {ldw, 1});
  const dsa::device_view<O, 2> dyv(dy.data(), {t, out}, {ldy, 1});
  const auto call = [&] {
    if constexpr (std::is_same_v<X, bf16> && std::is_same_v<W, float> && std::is_same_v<O, float>) {
      if (max_rows > 0) return dsa_test::linear_simt_grid_rows(be, dxv, dwv, dyv, max_rows);
    }
    REQUIRE(max_rows == 0);
    dsa::linear(be, dxv, dwv, dyv);
  };
  call();
  const auto y = dsa_test::download(dy, stream.get());
  call();
  dsa_test::check_bits_equal("y (second run)", dsa_test::download(dy, stream.get()), y);
  std::size_t bad = 0, padding_changed = 0;
  for (index_t i = 0; i < t; ++i) {
    for (index_t j = out; j < ldy; ++j) {
      padding_changed += dsa::to_float(y[static_cast<std::size_t>(i * ldy + j)]) != dsa::to_float(sentinel);
    }
    for (index_t j = 0; j < out; ++j) {
      double ref = 0.0, mag = 0.0;
      for (index_t k = 0; k < in; ++k) {
        const double p = static_cast<double>(dsa::to_float(x[static_cast<std::size_t>(i * ldx + k)])) *
                         static_cast<double>(dsa::to_float(w[static_cast<std::size_t>(j * ldw + k)]));
        ref += p;
        mag += std::fabs(p);
      }
      const double got = dsa::to_float(y[static_cast<std::size_t>(i * ldy + j)]);
      const double out_ulp = std::is_same_v<O, bf16> ? 0x1p-8 : 0x1p-23;
      const double bound = static_cast<double>(in + 2) * 0x1p-23 * mag + out_ulp * std::fabs(ref) + 1e-30;
      if (!(std::fabs(got - ref) <= bound) && ++bad <= 5) {
        MESSAGE("y(" << i << ", " << j << ") = " << got << ", reference " << ref << ", bound " << bound);
      }
    }
  }
  CHECK(bad == 0);
  CHECK(padding_changed == 0);
}

// ---- fp8_linear ----------------------------------------------------------------------------------

// max_rows > 0: the kernel with at most that many blocks along y (its row-tile loop).
template <class X, class O>
void check_fp8_linear(index_t t, index_t in, index_t out, index_t ldx, index_t ldw, dsa::scale_format fmt,
                      bool specials, std::uint64_t seed, index_t max_rows = 0) {
  CAPTURE(t);
  CAPTURE(in);
  CAPTURE(out);
  CAPTURE(ldx);
  CAPTURE(ldw);
  CAPTURE(static_cast<int>(fmt));
  const bool x_bf16 = std::is_same_v<X, bf16>;
  CAPTURE(x_bf16);
  const bool o_bf16 = std::is_same_v<O, bf16>;
  CAPTURE(o_bf16);
  auto xs = dsa_test::normal(static_cast<std::size_t>(t * ldx), seed, 2.0f);
  std::mt19937_64 rng(seed);
  // Groups of very different magnitudes exercise the scales.
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = std::ldexp(xs[i], static_cast<int>((i / 128) % 7) - 3);
  std::vector<fp8_e4m3> w(static_cast<std::size_t>(out * ldw));
  for (auto& c : w) {
    std::uint8_t b = static_cast<std::uint8_t>(rng());
    if ((b & 0x7F) == 0x7F) b = 0x3C;  // NaN codes only where a case puts them
    c = fp8_e4m3::from_bits(b);
  }
  const index_t nbo = (out + 127) / 128, nbk = in / 128;
  std::vector<float> ws(static_cast<std::size_t>(nbo * nbk));
  for (auto& s : ws) s = std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f, static_cast<int>(rng() % 9) - 12);
  if (specials) {
    xs[5] = nan_f;                                          // a NaN group in row 0
    if (t > 1) xs[static_cast<std::size_t>(ldx + 3)] = inf_f;  // an inf group in row 1
    w[static_cast<std::size_t>(ldw * (out - 1) + 7)] = fp8_e4m3::from_bits(0x7F);  // a NaN weight
    if (t > 2) {
      for (index_t k = 0; k < in; ++k) xs[static_cast<std::size_t>(2 * ldx + k)] = 0.0f;  // an all-zero row
    }
  }
  const std::vector<X> x = dsa_test::convert<X>(xs);
  std::vector<O> hy(static_cast<std::size_t>(t * out));
  dsa::fp8_linear(dsa::cpu, dsa::host_view<const X, 2>(x.data(), {t, in}, {ldx, 1}),
                  dsa::host_view<const fp8_e4m3, 2>(w.data(), {out, in}, {ldw, 1}),
                  dsa::make_view(static_cast<const float*>(ws.data()), {nbo, nbk}), dsa::make_view(hy.data(), {t, out}),
                  fmt);
  dsa_test::test_stream stream;
  auto dx = dsa_test::upload(x, stream.get());
  auto dw = dsa_test::upload(w, stream.get());
  auto dws = dsa_test::upload(ws, stream.get());
  dsa::device_buffer<O> dy(t * out, stream.get());
  const dsa::device_view<const X, 2> dxv(dx.data(), {t, in}, {ldx, 1});
  const dsa::device_view<const fp8_e4m3, 2> dwv(dw.data(), {out, in}, {ldw, 1});
  [&] {
    if constexpr (std::is_same_v<X, bf16> && std::is_same_v<O, bf16>) {
      if (max_rows > 0) {
        return dsa_test::fp8_linear_grid_rows(stream.backend(), dxv, dwv, dws.view({nbo, nbk}), dy.view({t, out}),
                                              fmt, max_rows);
      }
    }
    REQUIRE(max_rows == 0);
    dsa::fp8_linear(stream.backend(), dxv, dwv, dws.view({nbo, nbk}), dy.view({t, out}), fmt);
  }();
  dsa_test::check_bits_equal("y", dsa_test::download(dy, stream.get()), hy);
}

// ---- fp8_linear's tensor-core path ---------------------------------------------------------------

/// DeepGEMM's calc_diff (deep_gemm/testing): 1 - 2 sum(x y) / sum(x^2 + y^2), in double.
template <class O>
double calc_diff(const std::vector<O>& a, const std::vector<O>& b, index_t t, index_t out, index_t ld) {
  double xy = 0, sq = 0;
  for (index_t r = 0; r < t; ++r) {
    for (index_t c = 0; c < out; ++c) {
      const double x = dsa::to_float(a[static_cast<std::size_t>(r * ld + c)]);
      const double y = dsa::to_float(b[static_cast<std::size_t>(r * ld + c)]);
      xy += x * y;
      sq += x * x + y * y;
    }
  }
  return sq == 0 ? 0.0 : 1.0 - 2.0 * xy / sq;
}

/// The tolerance of the issue (DeepGEMM's test bound); to be tightened once measured.
constexpr double fp8_fast_calc_diff = 1e-5;

enum class fp8_route { plan, forced_bf16_fallback };

struct fp8_fast_shape {
  index_t t, in, out;
  index_t ldx, ldw, ldy;
  index_t w_offset;  // bytes into the weight's buffer: 1 leaves it unaligned (no cuBLASLt)
};

/// The device plan of a call (for the failure message and the decode checks).
dsa::fp8_linear_plan device_plan(const fp8_fast_shape& s, index_t y_bytes, bool w_scale_contiguous) {
  int device = 0, major = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&device));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  dsa::fp8_linear_problem p;
  p.t = s.t;
  p.in = s.in;
  p.out = s.out;
  p.w_row_stride = s.ldw;
  p.w_scale_row_stride = w_scale_contiguous ? s.in / 128 : s.in / 128 + 1;
  p.y_row_stride = s.ldy;
  p.y_element_bytes = y_bytes;
  p.w_aligned16 = s.w_offset % 16 == 0;
  const auto decode = s.t <= dsa::fp8_linear_gemv_max_rows ? dsa::fp8_linear_decode_kernel(device, s.t, s.in, s.out)
                                                            : dsa::fp8_decode_kernel::tensor_cores;
  return dsa::plan_fp8_linear(p, true, major, decode);
}

/// fp8_linear with a workspace and cuda_kernel_path::fast against the exact kernel (itself
/// bit-identical to the CPU: the case above): within calc_diff, finite where the inputs are, y's
/// padding untouched, the second call bit-identical to the first; the GEMV's decode rows exactly
/// the exact bits. `strided_scales` gives w_scale rows one float of padding (cuBLASLt then reads a
/// repacked copy).
template <class X, class O>
void check_fp8_linear_fast(const fp8_fast_shape& s, dsa::scale_format fmt, std::uint64_t seed, fp8_route route,
                           bool strided_scales = false) {
  const bool x_bf16 = std::is_same_v<X, bf16>, o_bf16 = std::is_same_v<O, bf16>;
  CAPTURE(s.t);
  CAPTURE(s.in);
  CAPTURE(s.out);
  CAPTURE(s.ldx);
  CAPTURE(s.ldw);
  CAPTURE(s.ldy);
  CAPTURE(s.w_offset);
  CAPTURE(x_bf16);
  CAPTURE(o_bf16);
  CAPTURE(strided_scales);
  CAPTURE(static_cast<int>(fmt));
  CAPTURE(static_cast<int>(route));
  const dsa::fp8_linear_plan plan = device_plan(s, static_cast<index_t>(sizeof(O)), !strided_scales);
  const std::string path = route == fp8_route::plan ? dsa::to_string(plan.path) : "bf16_gemm (forced)";
  CAPTURE(path);
  const std::string reason = plan.reason;
  CAPTURE(reason);
  auto xs = dsa_test::normal(static_cast<std::size_t>(s.t * s.ldx), seed, 2.0f);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = std::ldexp(xs[i], static_cast<int>((i / 128) % 7) - 3);
  std::mt19937_64 rng(seed);
  std::vector<fp8_e4m3> w(static_cast<std::size_t>(s.out * s.ldw + s.w_offset));
  for (auto& c : w) {
    std::uint8_t b = static_cast<std::uint8_t>(rng());
    if ((b & 0x7F) == 0x7F) b = 0x3C;  // finite codes: calc_diff compares numbers
    c = fp8_e4m3::from_bits(b);
  }
  const index_t nbo = (s.out + 127) / 128, nbk = s.in / 128, lds = strided_scales ? nbk + 1 : nbk;
  std::vector<float> ws(static_cast<std::size_t>(nbo * lds));
  for (auto& v : ws) v = std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f, static_cast<int>(rng() % 9) - 12);
  const std::vector<X> x = dsa_test::convert<X>(xs);
  // y's padding columns hold a marker that neither path may touch.
  const O marker = dsa::from_float<O>(-12345.0f);
  const std::vector<O> y0(static_cast<std::size_t>(s.t * s.ldy), marker);

  dsa_test::test_stream stream;
  dsa::cublas_handle blas;
  dsa::cublaslt_handle blaslt;
  auto dx = dsa_test::upload(x, stream.get());
  auto dw = dsa_test::upload(w, stream.get());
  auto dws = dsa_test::upload(ws, stream.get());
  auto y_exact = dsa_test::upload(y0, stream.get());
  auto y_fast = dsa_test::upload(y0, stream.get());
  auto y_again = dsa_test::upload(y0, stream.get());
  const dsa::device_view<const X, 2> dxv(dx.data(), {s.t, s.in}, {s.ldx, 1});
  const dsa::device_view<const fp8_e4m3, 2> dwv(dw.data() + s.w_offset, {s.out, s.in}, {s.ldw, 1});
  const dsa::device_view<const float, 2> dsv(dws.data(), {nbo, nbk}, {lds, 1});
  const auto yv = [&](dsa::device_buffer<O>& b) { return dsa::device_view<O, 2>(b.data(), {s.t, s.out}, {s.ldy, 1}); };
  const dsa::cuda_backend exact{stream.get(), nullptr, dsa_test::linear_path_for_tests(), dsa::cuda_kernel_path::exact};
  dsa::fp8_linear(exact, dxv, dwv, dsv, yv(y_exact), fmt);
  const dsa::cuda_backend fast{stream.get(), blas.get(), dsa_test::linear_path_for_tests(), dsa::cuda_kernel_path::fast,
                               blaslt.get()};
  const index_t bytes = dsa::fp8_linear_workspace_size(s.t, s.in, s.out);
  dsa::device_buffer<std::byte> workspace(bytes, stream.get());
  for (auto* y : {&y_fast, &y_again}) {
    if (route == fp8_route::plan) {
      dsa::fp8_linear(fast, dxv, dwv, dsv, yv(*y), fmt, workspace.view({bytes}));
    } else if constexpr (std::is_same_v<X, bf16> && std::is_same_v<O, bf16>) {
      dsa_test::fp8_linear_bf16_fallback(fast, dxv, dwv, dsv, yv(*y), fmt, workspace.view({bytes}));
    } else {
      FAIL("the forced fallback launcher takes bf16 in and out");
    }
  }
  const auto e = dsa_test::download(y_exact, stream.get());
  const auto f = dsa_test::download(y_fast, stream.get());
  dsa_test::check_bits_equal("second fast call", dsa_test::download(y_again, stream.get()), f);
  std::size_t nonfinite = 0, padding = 0;
  for (index_t r = 0; r < s.t; ++r) {
    for (index_t c = 0; c < s.ldy; ++c) {
      const O v = f[static_cast<std::size_t>(r * s.ldy + c)];
      if (c < s.out) {
        nonfinite += std::isfinite(dsa::to_float(v)) ? 0 : 1;
      } else {
        padding += dsa_test::same_bits_or_both_nan(v, marker) ? 0 : 1;
      }
    }
  }
  CHECK(nonfinite == 0);
  CHECK(padding == 0);
  if (route == fp8_route::plan && plan.path == dsa::fp8_linear_path::exact_gemv) {
    dsa_test::check_bits_equal("decode GEMV", f, e);
    return;
  }
  const double diff = calc_diff(f, e, s.t, s.out, s.ldy);
  CAPTURE(diff);
  CHECK(diff < fp8_fast_calc_diff);
}

}  // namespace

// ---- front-end and error reporting: no GPU needed -----------------------------------------------

TEST_CASE("cuda dense ops: front-end checks with device views (no GPU needed)") {
  const dsa::cuda_backend be{};
  auto x = dsa_test::fake_device_view<bf16, 2>({4, 7168});
  auto w = dsa_test::fake_device_view<float, 1>({7000});
  auto y = dsa_test::fake_device_view<bf16, 2>({4, 7168});
  CHECK_THROWS_WITH_AS(dsa::rms_norm(be, x, w, y, 1e-6f),
                       doctest::Contains("dsa::rms_norm: weight.extent(0) = 7000; expected 7168"), dsa::error);
  auto w2 = dsa_test::fake_device_view<float, 1>({7168});
  CHECK_THROWS_WITH_AS(dsa::layer_norm(be, x, w2, w2, y, 0.0f),
                       doctest::Contains("dsa::layer_norm: eps = 0; expected a positive finite number"), dsa::error);
  auto res = dsa_test::fake_device_view<bf16, 2>({3, 7168});
  CHECK_THROWS_WITH_AS(dsa::add_rms_norm(be, x, res, w2, y, 1e-6f),
                       doctest::Contains("dsa::add_rms_norm: residual.extent(0) = 3; expected 4"), dsa::error);

  auto r = dsa_test::fake_device_view<bf16, 3>({4, 128, 64});
  auto pos = dsa_test::fake_device_view<std::int32_t, 1>({4});
  dsa::rope_config cfg;
  cfg.dim = 63;
  CHECK_THROWS_WITH_AS(dsa::rope_apply(be, r, pos, cfg, dsa::rope_layout::interleaved),
                       doctest::Contains("dsa::rope_apply: cfg.dim = 63; expected a positive even number"), dsa::error);

  auto g = dsa_test::fake_device_view<bf16, 2>({4, 2048});
  auto u = dsa_test::fake_device_view<bf16, 2>({4, 2047});
  CHECK_THROWS_WITH_AS(dsa::swiglu(be, g, u, g), doctest::Contains("dsa::swiglu: up.extent(1) = 2047; expected 2048"),
                       dsa::error);

  auto fx = dsa_test::fake_device_view<bf16, 2>({4, 100});
  auto fw = dsa_test::fake_device_view<fp8_e4m3, 2>({256, 100});
  auto fs = dsa_test::fake_device_view<float, 2>({2, 1});
  auto fy = dsa_test::fake_device_view<bf16, 2>({4, 256});
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(be, fx, fw, fs, fy, dsa::scale_format::ue8m0),
                       doctest::Contains("dsa::fp8_linear: x.extent(1) = 100; expected a multiple of 128"), dsa::error);

  // The workspace overload: size, alignment and overlap before any CUDA call.
  auto gx = dsa_test::fake_device_view<bf16, 2>({16, 256});
  auto gw = dsa_test::fake_device_view<fp8_e4m3, 2>({256, 256});
  auto gs = dsa_test::fake_device_view<float, 2>({2, 2});
  auto gy = dsa_test::fake_device_view<bf16, 2>({16, 256});
  const index_t need = dsa::fp8_linear_workspace_size(16, 256, 256);
  auto small = dsa_test::fake_device_view<std::byte, 1>({need - 1});
  const std::string too_small = "dsa::fp8_linear: workspace.extent(0) = " + std::to_string(need - 1) +
                                "; expected at least fp8_linear_workspace_size(t, in, out)";
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(be, gx, gw, gs, gy, dsa::scale_format::ue8m0, small),
                       doctest::Contains(too_small.c_str()), dsa::error);
  auto big = dsa_test::fake_device_view<std::byte, 1>({need + 16});
  const dsa::device_view<std::byte, 1> odd(big.data_handle() + 1, {need});
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(be, gx, gw, gs, gy, dsa::scale_format::ue8m0, odd),
                       doctest::Contains("16-byte aligned"), dsa::error);
  const dsa::device_view<std::byte, 1> over_y(reinterpret_cast<std::byte*>(gy.data_handle()), {need});
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(be, gx, gw, gs, gy, dsa::scale_format::ue8m0, over_y),
                       doctest::Contains("dsa::fp8_linear: workspace = a view overlapping y"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(be, gx, gw, gs, gy, dsa::scale_format::ue8m0, dsa::device_view<std::byte, 1>{}),
                       doctest::Contains("dsa::fp8_linear: workspace"), dsa::error);
}

TEST_CASE("cuda linear: a backend without a cuBLAS handle throws before any CUDA call (no GPU needed)") {
  const dsa::cuda_backend be{};  // blas = nullptr
  CHECK(be.blas == nullptr);
  auto x = dsa_test::fake_device_view<bf16, 2>({4, 7168});
  auto w = dsa_test::fake_device_view<bf16, 2>({1536, 7168});
  auto y = dsa_test::fake_device_view<bf16, 2>({4, 1536});
  CHECK_THROWS_WITH_AS(dsa::linear(be, x, w, y),
                       "dsa::linear: backend.blas = null; expected a cuBLAS handle (dsa::cublas_handle) for the CUDA "
                       "backend",
                       dsa::error);
  // Every type combination checks it, the SIMT ones included.
  auto xf = dsa_test::fake_device_view<float, 2>({4, 7168});
  auto yf = dsa_test::fake_device_view<float, 2>({4, 1536});
  CHECK_THROWS_AS(dsa::linear(be, xf, w, yf), dsa::error);
  // Shape errors come first, from the front-end.
  auto y_bad = dsa_test::fake_device_view<bf16, 2>({4, 1535});
  CHECK_THROWS_WITH_AS(dsa::linear(be, x, w, y_bad),
                       doctest::Contains("dsa::linear: y.extent(1) = 1535; expected 1536"), dsa::error);
  // An empty product returns before dispatch: no handle needed.
  auto x0 = dsa_test::fake_device_view<bf16, 2>({0, 7168});
  auto y0 = dsa_test::fake_device_view<bf16, 2>({0, 1536});
  CHECK_NOTHROW(dsa::linear(be, x0, w, y0));
  // A linear path that is neither cuBLAS nor SIMT is named, not taken for one of them.
  const dsa::cuda_backend odd{nullptr, nullptr, static_cast<dsa::cuda_linear_path>(7)};
  CHECK_THROWS_WITH_AS(dsa::linear(odd, x, w, y),
                       "dsa::linear: backend.linear = 7; expected cuda_linear_path::cublas (0) or "
                       "cuda_linear_path::simt (1)",
                       dsa::error);
}

TEST_CASE("cuda DSA_CUBLAS_CHECK: message, status and single evaluation (no GPU needed)") {
  int calls = 0;
  auto failing = [&] {
    ++calls;
    return CUBLAS_STATUS_NOT_SUPPORTED;
  };
  try {
    DSA_CUBLAS_CHECK(failing());
    FAIL("DSA_CUBLAS_CHECK did not throw");
  } catch (const dsa::cublas_error& e) {
    CHECK(e.status() == CUBLAS_STATUS_NOT_SUPPORTED);
    const std::string m = e.what();
    CHECK(m.rfind("dsa::cuda: failing() = CUBLAS_STATUS_NOT_SUPPORTED; expected CUBLAS_STATUS_SUCCESS (at ", 0) == 0);
    CHECK(m.find("test_ops_dense.cpp:") != std::string::npos);
  }
  CHECK(calls == 1);
  CHECK_NOTHROW(DSA_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS));
  const dsa::error& base = dsa::cublas_error(CUBLAS_STATUS_ALLOC_FAILED, "x");
  CHECK(std::string(base.what()) == "x");
  CHECK(std::string(dsa::detail::cublas_status_name(CUBLAS_STATUS_EXECUTION_FAILED)) == "CUBLAS_STATUS_EXECUTION_FAILED");
}

// ---- parity on the device -------------------------------------------------------------------------

TEST_CASE("cuda cublas_handle: create, move, destroy") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  dsa::cublas_handle a;
  CHECK(a.get() != nullptr);
  const cublasHandle_t raw = a.get();
  dsa::cublas_handle b(std::move(a));
  CHECK(a.get() == nullptr);  // NOLINT(bugprone-use-after-move): the documented moved-from state
  CHECK(b.get() == raw);
  dsa::cublas_handle c;
  c = std::move(b);
  CHECK(c.get() == raw);
}

TEST_CASE("cuda rms_norm / add_rms_norm / layer_norm: bit-identical to the CPU") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  std::uint64_t seed = 100;
  struct shape {
    index_t t, d, ld;
  };
  const shape shapes[] = {{1, 7168, 7168}, {33, 7168, 7168}, {5, 1536, 1600}, {7, 512, 512},  {3, 1, 1},
                          {9, 13, 20},     {4, 100, 100},    {300, 64, 64},   {2, 128, 4096}};
  for (const auto& s : shapes) {
    for (const norm_kind kind : {norm_kind::rms, norm_kind::add_rms, norm_kind::layer}) {
      for (const bool in_place : {false, true}) {
        check_norm<bf16>(kind, s.t, s.d, s.ld, in_place, s.t >= 3, ++seed);
      }
      if (kind != norm_kind::add_rms) check_norm<float>(kind, s.t, s.d, s.ld, false, s.t >= 3, ++seed);
    }
  }
}

TEST_CASE("cuda rope_apply: the CPU's bits but for rare transcendental roundings") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  const dsa::rope_config yarn = v32_rope();
  dsa::rope_config plain;  // no YaRN
  plain.dim = 64;
  // V3.2 MLA q_pe: the rope slice (offset 128) of [t, 128, 192], interleaved; k_pe [t, 1, 64].
  check_rope(17, 128, 192, 128, yarn, dsa::rope_layout::interleaved, 1);
  check_rope(40, 1, 64, 0, yarn, dsa::rope_layout::interleaved, 2);
  // V3.2 indexer: rope first in [t, 64, 128], the half layout.
  check_rope(23, 64, 128, 0, yarn, dsa::rope_layout::half, 3);
  check_rope(23, 64, 128, 0, plain, dsa::rope_layout::half, 4);
  check_rope(9, 3, 64, 0, plain, dsa::rope_layout::interleaved, 5);
  // More pairs than one shared-memory chunk (256).
  dsa::rope_config wide = plain;
  wide.dim = 1100;
  check_rope(5, 2, 1100, 0, wide, dsa::rope_layout::half, 6);
  check_rope(5, 2, 1100, 0, wide, dsa::rope_layout::interleaved, 7);
}

TEST_CASE("cuda swiglu: the CPU's bits but for rare transcendental roundings") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  for (const auto& [t, n, in_place] : {std::tuple{index_t{5}, index_t{2048}, false}, std::tuple{index_t{1}, index_t{18432}, true},
                                      std::tuple{index_t{64}, index_t{1000}, false}, std::tuple{index_t{3}, index_t{1}, true}}) {
    CAPTURE(t);
    CAPTURE(n);
    auto gf = dsa_test::normal(static_cast<std::size_t>(t * n), 11 + static_cast<std::uint64_t>(n), 6.0f);
    const float specials[] = {nan_f, inf_f, -inf_f, -200.0f, 200.0f, 0.0f, -0.0f, 89.0f, -89.0f};
    for (std::size_t i = 0; i < std::size(specials) && i < gf.size(); ++i) gf[i * 3 % gf.size()] = specials[i];
    const std::vector<bf16> gate = dsa_test::convert<bf16>(gf);
    const std::vector<bf16> up = normal_as<bf16>(static_cast<std::size_t>(t * n), 12, 2.0f);
    std::vector<bf16> hy(gate.size());
    dsa::swiglu(dsa::cpu, dsa::make_view(gate.data(), {t, n}), dsa::make_view(up.data(), {t, n}),
                dsa::make_view(hy.data(), {t, n}));
    dsa_test::test_stream stream;
    auto dg = dsa_test::upload(gate, stream.get());
    auto du = dsa_test::upload(up, stream.get());
    dsa::device_buffer<bf16> dy(t * n, stream.get());
    if (in_place) {
      dsa::swiglu(stream.backend(), dg.view({t, n}), du.view({t, n}), dg.view({t, n}));
      dsa_test::check_nearly_same("y (in place)", dsa_test::download(dg, stream.get()), hy, 1);
    } else {
      dsa::swiglu(stream.backend(), dg.view({t, n}), du.view({t, n}), dy.view({t, n}));
      dsa_test::check_nearly_same("y", dsa_test::download(dy, stream.get()), hy, 1);
    }
  }
}

TEST_CASE("cuda linear: cuBLAS and SIMT paths within the fp32 accumulation bound, every type combination") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  dsa::cublas_handle blas;
  std::uint64_t seed = 300;
  struct shape {
    index_t t, in, out, ldx, ldw, ldy;
  };
  // Under the sanitizers shorter rows and fewer output columns (still two or more tiles, a partial
  // one; the length of the k loop makes no new path).
  const index_t in1 = dsa_test::full_or_sanitizer<index_t>(7168, 512);
  const index_t out1 = dsa_test::full_or_sanitizer<index_t>(1536, 96);
  const index_t out2 = dsa_test::full_or_sanitizer<index_t>(576, 96);
  const index_t out3 = dsa_test::full_or_sanitizer<index_t>(300, 70);
  const index_t in2 = dsa_test::full_or_sanitizer<index_t>(1536, 512);
  const shape shapes[] = {
      {1, in1, out1, in1, in1, out1},       // V3.2 wq_a, decode
      {4, in2, out2, in2 + 64, in2, out2 + 24},  // strided x and y
      {37, 512, out3, 512, 520, out3},      // ragged tiles, strided w
      {3, 100, 7, 0, 100, 7},               // a broadcast x row (stride 0): the SIMT kernel
      {5, 0, 9, 0, 0, 9},                   // in = 0: y = 0
  };
  // The default path (cuBLAS where it has the types, the SIMT kernel elsewhere), and
  // cuda_linear_path::simt (every combination on the SIMT kernel, no handle). Under initcheck only
  // the latter: the tool does not see cuBLAS's sm_90 stores. Under racecheck too: it checks shared
  // memory inside kernels, and cuBLAS's are not dsa's (their reports are not counted; the run of
  // both paths took 190 s alone on an H100). memcheck and synccheck run both.
  std::vector<dsa::cuda_linear_path> paths{dsa::cuda_linear_path::simt};
  if (!dsa_test::under_initcheck() && !dsa_test::under_racecheck()) {
    paths.insert(paths.begin(), dsa::cuda_linear_path::cublas);
  }
  for (const dsa::cuda_linear_path p : paths) {
    for (const auto& s : shapes) {
      check_linear<bf16, bf16, bf16>(blas, p, s.t, s.in, s.out, s.ldx, s.ldw, s.ldy, ++seed);
      check_linear<bf16, bf16, float>(blas, p, s.t, s.in, s.out, s.ldx, s.ldw, s.ldy, ++seed);
      check_linear<float, float, float>(blas, p, s.t, s.in, s.out, s.ldx, s.ldw, s.ldy, ++seed);
      check_linear<float, float, bf16>(blas, p, s.t, s.in, s.out, s.ldx, s.ldw, s.ldy, ++seed);
      check_linear<bf16, float, float>(blas, p, s.t, s.in, s.out, s.ldx, s.ldw, s.ldy, ++seed);
      check_linear<bf16, float, bf16>(blas, p, s.t, s.in, s.out, s.ldx, s.ldw, s.ldy, ++seed);
      check_linear<float, bf16, float>(blas, p, s.t, s.in, s.out, s.ldx, s.ldw, s.ldy, ++seed);
      check_linear<float, bf16, bf16>(blas, p, s.t, s.in, s.out, s.ldx, s.ldw, s.ldy, ++seed);
    }
  }
}

TEST_CASE("cuda fp8_linear: bit-identical to the CPU") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  using dsa::scale_format;
  std::uint64_t seed = 500;
  struct shape {
    index_t t, in, out, ldx, ldw;
  };
  // Under the sanitizers shorter rows, fewer output columns and rows (still several tiles, partial
  // ones, two or more k blocks).
  const bool small = dsa_test::under_sanitizer();
  const index_t in_v32 = small ? 384 : 7168;
  const shape shapes[] = {
      {1, in_v32, small ? 300 : 1536, in_v32, in_v32},  // V3.2 wq_a, decode GEMV
      {4, small ? 256 : 1536, small ? 260 : 3072, small ? 256 : 1536, small ? 256 : 1536},  // wq_b-like
      {8, 512, 300, 640, 517},                    // decode GEMV, ragged columns, unaligned weight rows
      {3, 1152, 13, 1152, 1152},                  // GEMV: a pass of one block after a full one; idle warps
      {9, in_v32, small ? 70 : 576, in_v32, in_v32},  // the first many-row tile: wkv_a
      {small ? 40 : 70, 1024, small ? 70 : 200, 1056, 1024},  // ragged rows and columns, strided x
      {33, 128, 1, 128, 128},                     // one output feature
  };
  for (const auto& s : shapes) {
    for (const scale_format fmt : {scale_format::ue8m0, scale_format::fp32}) {
      const bool specials = (seed % 2) == 0;
      check_fp8_linear<bf16, bf16>(s.t, s.in, s.out, s.ldx, s.ldw, fmt, specials, ++seed);
      check_fp8_linear<float, float>(s.t, s.in, s.out, s.ldx, s.ldw, fmt, !specials, ++seed);
    }
    check_fp8_linear<bf16, float>(s.t, s.in, s.out, s.ldx, s.ldw, scale_format::ue8m0, true, ++seed);
    check_fp8_linear<float, bf16>(s.t, s.in, s.out, s.ldx, s.ldw, scale_format::ue8m0, false, ++seed);
  }
}

TEST_CASE("cuda fp8_linear, fast path: cuBLASLt's block-scaled FP8 (or the bf16 fallback) within calc_diff of the exact kernel") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  using dsa::scale_format;
  std::uint64_t seed = 700;
  const bool small = dsa_test::under_sanitizer();
  const index_t big_t = small ? 64 : 4096;
  const index_t in_v32 = small ? 512 : 7168;
  const fp8_fast_shape shapes[] = {
      {big_t, in_v32, small ? 256 : 2048, in_v32, in_v32, small ? 256 : 2048, 0},  // V3.2 expert gate/up, prefill
      {small ? 40 : 1024, small ? 512 : 1536, small ? 384 : 3072, small ? 512 : 1536, small ? 512 : 1536,
       small ? 384 : 3072, 0},                                                     // wq_b-like
      {13, in_v32, 576, in_v32, in_v32, 576, 0},                                   // wkv_a, rows not a multiple of 4
      {9, 1152, 256, 1152, 1152, 256, 0},                                          // 9 k-blocks: scales repacked
      {70, 1024, 200, 1056, 1024, 200, 0},                                         // out not a multiple of 16: fallback
      {70, 1024, 256, 1056, 1024 + 16, 256 + 8, 0},                                // strided x, w and y
      {33, 512, 128, 512, 512, 128, 1},                                            // an unaligned weight: fallback
  };
  for (const auto& s : shapes) {
    for (const scale_format fmt : {scale_format::ue8m0, scale_format::fp32}) {
      check_fp8_linear_fast<bf16, bf16>(s, fmt, ++seed, fp8_route::plan);
      check_fp8_linear_fast<bf16, bf16>(s, fmt, ++seed, fp8_route::forced_bf16_fallback);
    }
    check_fp8_linear_fast<float, float>(s, scale_format::ue8m0, ++seed, fp8_route::plan);
    check_fp8_linear_fast<bf16, float>(s, scale_format::ue8m0, ++seed, fp8_route::plan);
  }
  check_fp8_linear_fast<bf16, bf16>({256, 1024, 256, 1024, 1024, 256, 0}, scale_format::ue8m0, ++seed, fp8_route::plan,
                                    true);  // w_scale rows padded: cuBLASLt reads a repacked copy
}

TEST_CASE("cuda fp8_linear, fast path: decode rows, the GEMV's exact bits or the tensor cores, as chosen per shape") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  int device = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&device));
  std::uint64_t seed = 800;
  const index_t in = dsa_test::under_sanitizer() ? 512 : 7168, out = dsa_test::under_sanitizer() ? 256 : 2048;
  for (index_t t = 1; t <= 8; ++t) {
    // The heuristic's choice for this shape, then the other one recorded in its place.
    check_fp8_linear_fast<bf16, bf16>({t, in, out, in, in, out, 0}, dsa::scale_format::ue8m0, ++seed, fp8_route::plan);
    const auto other = dsa::fp8_linear_decode_kernel(device, t, in, out) == dsa::fp8_decode_kernel::gemv
                           ? dsa::fp8_decode_kernel::tensor_cores
                           : dsa::fp8_decode_kernel::gemv;
    dsa::record_fp8_linear_decode_kernel(device, t, in, out, other);
    check_fp8_linear_fast<bf16, bf16>({t, in, out, in, in, out, 0}, dsa::scale_format::ue8m0, ++seed, fp8_route::plan);
    check_fp8_linear_fast<bf16, bf16>({t, in, out, in, in, out, 0}, dsa::scale_format::ue8m0, ++seed,
                                      fp8_route::forced_bf16_fallback);
  }
}

TEST_CASE("cuda fp8_linear, fast path: cuda_kernel_path::exact with a workspace is the exact kernel; missing handles are named") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  const index_t t = 64, in = 512, out = 256, nbo = 2, nbk = 4;
  dsa_test::test_stream stream;
  const auto xs = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(t * in), 3, 1.0f));
  std::vector<fp8_e4m3> w(static_cast<std::size_t>(out * in), fp8_e4m3::from_bits(0x38));
  const std::vector<float> ws(static_cast<std::size_t>(nbo * nbk), 0.5f);
  auto dx = dsa_test::upload(xs, stream.get());
  auto dw = dsa_test::upload(w, stream.get());
  auto dws = dsa_test::upload(ws, stream.get());
  dsa::device_buffer<bf16> a(t * out, stream.get()), b(t * out, stream.get());
  const index_t bytes = dsa::fp8_linear_workspace_size(t, in, out);
  dsa::device_buffer<std::byte> workspace(bytes, stream.get());
  const dsa::cuda_backend exact{stream.get(), nullptr, dsa::cuda_linear_path::simt, dsa::cuda_kernel_path::exact};
  dsa::fp8_linear(exact, dx.view({t, in}), dw.view({out, in}), dws.view({nbo, nbk}), a.view({t, out}),
                  dsa::scale_format::ue8m0);
  dsa::fp8_linear(exact, dx.view({t, in}), dw.view({out, in}), dws.view({nbo, nbk}), b.view({t, out}),
                  dsa::scale_format::ue8m0, workspace.view({bytes}));
  dsa_test::check_bits_equal("y", dsa_test::download(b, stream.get()), dsa_test::download(a, stream.get()));
  // Fast without handles: the plan's handle is named (cuBLASLt on Hopper, cuBLAS elsewhere).
  const dsa::cuda_backend bare{stream.get(), nullptr, dsa::cuda_linear_path::cublas, dsa::cuda_kernel_path::fast};
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(bare, dx.view({t, in}), dw.view({out, in}), dws.view({nbo, nbk}),
                                       b.view({t, out}), dsa::scale_format::ue8m0, workspace.view({bytes})),
                       doctest::Contains("dsa::fp8_linear: backend.blas"), dsa::error);
}

// Row tiles are blockIdx.y, which the launchers clamp to 65535 and the kernels loop over: these
// shapes have more tiles than that (fp8_linear's 32-row tile; the SIMT linear's 64-row tile). The
// same loops with the grid capped at 2 blocks along y run small shapes, several tiles per block;
// under the sanitizers only those (the 65536-tile shapes would take racecheck an hour).
TEST_CASE("cuda linear and fp8_linear: more than 65535 row tiles (grid y clamped, tiles looped)") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  dsa::cublas_handle blas;
  check_fp8_linear<bf16, bf16>(7 * 32 + 5, 256, 70, 256, 256, dsa::scale_format::ue8m0, true, 902, 2);
  check_linear<bf16, float, float>(blas, dsa::cuda_linear_path::cublas, 5 * 64 + 3, 40, 70, 40, 40, 70, 903, 2);
  if (dsa_test::under_sanitizer()) return;
  const index_t fp8_rows = 65535 * 32 + 40;  // 2,097,160 rows of 128
  check_fp8_linear<bf16, bf16>(fp8_rows, 128, 1, 128, 128, dsa::scale_format::ue8m0, false, 900);
  const index_t simt_rows = 65535 * 64 + 3;  // 4,194,243 rows of 4; mixed types: the SIMT kernel
  check_linear<bf16, float, float>(blas, dsa::cuda_linear_path::cublas, simt_rows, 4, 3, 4, 4, 3, 901);
}
