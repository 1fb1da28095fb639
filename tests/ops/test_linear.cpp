// dsa::fp8_linear and dsa::linear: front-end checks and CPU results against references.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "dsa/cpu/linear.hpp"
#include "dsa/ops/linear.hpp"
#include "support/dense_reference.hpp"
#include "support/random.hpp"

namespace {

using dsa::bf16;
using dsa::fp8_e4m3;
using dsa::index_t;

// Random e4m3 codes over the whole finite range (both signs, subnormals, zeros), never NaN.
std::vector<std::uint8_t> random_codes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> c(n);
  for (auto& v : c) {
    do {
      v = static_cast<std::uint8_t>(rng());
    } while ((v & 0x7F) == 0x7F);
  }
  return c;
}

// Block multipliers of checkpoint-like magnitude (amax / 448 of weights ~ 0.02).
std::vector<float> random_scales(std::size_t n, std::uint64_t seed) {
  return dsa_test::uniform(n, seed, 1e-5f, 2e-4f);
}

template <class T>
std::vector<T> as(const std::vector<float>& v) {
  return dsa_test::convert<T>(v);
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

struct fp8_problem {
  index_t t, in, out;
  std::vector<float> x;  // activations (also the bf16 source)
  std::vector<std::uint8_t> w;
  std::vector<float> ws;
};

fp8_problem make_fp8_problem(index_t t, index_t in, index_t out, std::uint64_t seed) {
  fp8_problem p{t, in, out, {}, {}, {}};
  p.x = dsa_test::normal(static_cast<std::size_t>(t * in), seed, 2.0f);
  // A few outliers so that groups get different scales.
  for (std::size_t i = 0; i < p.x.size(); i += 97) p.x[i] *= 50.0f;
  p.w = random_codes(static_cast<std::size_t>(out * in), seed + 1);
  p.ws = random_scales(static_cast<std::size_t>(((out + 127) / 128) * (in / 128)), seed + 2);
  return p;
}

dsa::cpu_backend fp32_dot(int threads = 0) {
  dsa::cpu_backend be{threads};
  be.fp8_block_dot = dsa::fp8_dot::fp32;
  return be;
}

template <class X, class O>
std::vector<O> run_fp8(const fp8_problem& p, dsa::cpu_backend be = dsa::cpu,
                       dsa::scale_format fmt = dsa::scale_format::ue8m0) {
  const std::vector<X> x = as<X>(p.x);
  std::vector<O> y(static_cast<std::size_t>(p.t * p.out));
  const auto* wc = reinterpret_cast<const fp8_e4m3*>(p.w.data());
  dsa::fp8_linear(be, dsa::make_view(x.data(), {p.t, p.in}), dsa::make_view(wc, {p.out, p.in}),
                  dsa::make_view(p.ws.data(), {(p.out + 127) / 128, p.in / 128}), dsa::make_view(y.data(), {p.t, p.out}),
                  fmt);
  return y;
}

}  // namespace

TEST_CASE("fp8_linear reproduces the exact-block-dot specification bit for bit") {
  struct shape {
    index_t t, in, out;
  };
  // t <= 4 takes the GEMV path (with AVX-512 t <= 32: up to 8 rows per micro-kernel call,
  // fp8_block_dot.hpp's gemv_tile_rows), larger t the GEMM path; ragged output panels on purpose.
  const shape shapes[] = {{1, 128, 1},    {2, 256, 130},  {4, 384, 257},  {5, 256, 128},
                          {6, 640, 65},   {7, 384, 130},  {8, 1152, 257}, {12, 256, 65},
                          {32, 384, 130}, {37, 512, 300}, {70, 128, 129}};
  std::uint64_t seed = 100;
  for (const auto& s : shapes) {
    for (auto fmt : {dsa::scale_format::ue8m0, dsa::scale_format::fp32}) {
      CAPTURE(s.t);
      CAPTURE(s.in);
      CAPTURE(s.out);
      const fp8_problem p = make_fp8_problem(s.t, s.in, s.out, seed += 10);
      const std::vector<bf16> xb = as<bf16>(p.x);
      const auto ref = dsa_test::fp8_linear_reference(xb, s.t, s.in, p.w, s.out, p.ws, fmt);
      const std::vector<float> yf = run_fp8<bf16, float>(p, dsa::cpu, fmt);
      const std::vector<bf16> yb = run_fp8<bf16, bf16>(p, dsa::cpu, fmt);
      CHECK(same_bits(yf, ref.y));
      std::size_t bad_bf16 = 0, bad_bound = 0;
      for (std::size_t i = 0; i < yf.size(); ++i) {
        if (yb[i].bits != bf16(ref.y[i]).bits) ++bad_bf16;
        if (std::fabs(static_cast<double>(yf[i]) - ref.ideal[i]) > ref.bound[i]) ++bad_bound;
      }
      CHECK(bad_bf16 == 0);
      CHECK(bad_bound == 0);
    }
  }
}

TEST_CASE("fp8_linear quantizes float activations the same way as act_quant") {
  const fp8_problem p = make_fp8_problem(6, 256, 70, 7);
  const auto ref = dsa_test::fp8_linear_reference(p.x, p.t, p.in, p.w, p.out, p.ws, dsa::scale_format::ue8m0);
  CHECK(same_bits(run_fp8<float, float>(p), ref.y));
  const fp8_problem q = make_fp8_problem(3, 256, 70, 8);
  const auto ref1 = dsa_test::fp8_linear_reference(q.x, q.t, q.in, q.w, q.out, q.ws, dsa::scale_format::ue8m0);
  CHECK(same_bits(run_fp8<float, float>(q), ref1.y));
}

TEST_CASE("fp8_linear is bit-identical across thread counts and batch sizes") {
  const fp8_problem p = make_fp8_problem(41, 384, 390, 21);
  const std::vector<float> y1 = run_fp8<bf16, float>(p, dsa::cpu_backend{1});
  CHECK(same_bits(y1, run_fp8<bf16, float>(p, dsa::cpu_backend{2})));
  CHECK(same_bits(y1, run_fp8<bf16, float>(p, dsa::cpu_backend{3})));
  // Every row alone (GEMV path) and in small batches gives the rows of the big (GEMM) product.
  for (index_t r : {index_t{0}, index_t{17}, index_t{40}}) {
    fp8_problem one = p;
    one.t = 1;
    one.x.assign(p.x.begin() + r * p.in, p.x.begin() + (r + 1) * p.in);
    const std::vector<float> y = run_fp8<bf16, float>(one, dsa::cpu_backend{2});
    CHECK(std::memcmp(y.data(), y1.data() + r * p.out, p.out * sizeof(float)) == 0);
  }
  fp8_problem four = p;
  four.t = 4;
  four.x.resize(static_cast<std::size_t>(4 * p.in));
  CHECK(std::memcmp(run_fp8<bf16, float>(four).data(), y1.data(), 4 * p.out * sizeof(float)) == 0);
}

TEST_CASE("the default fp8_linear block dot is the exact one") {
  CHECK(dsa::cpu_backend{}.fp8_block_dot == dsa::fp8_dot::exact);
}

TEST_CASE("fp8_linear with fp8_dot::fp32 reproduces the ascending-k fp32 specification bit for bit") {
  struct shape {
    index_t t, in, out;
  };
  // t <= 4: the GEMV (several k-blocks per step, also an odd number of blocks); larger t: the
  // GEMM in one or several row chunks; ragged output panels on purpose.
  const shape shapes[] = {{1, 128, 1},   {1, 640, 100},  {2, 256, 130},  {3, 384, 257},  {4, 896, 33},
                          {5, 256, 128}, {37, 512, 300}, {70, 128, 129}, {13, 1152, 65}};
  std::uint64_t seed = 500;
  for (const auto& s : shapes) {
    for (auto fmt : {dsa::scale_format::ue8m0, dsa::scale_format::fp32}) {
      CAPTURE(s.t);
      CAPTURE(s.in);
      CAPTURE(s.out);
      const fp8_problem p = make_fp8_problem(s.t, s.in, s.out, seed += 10);
      const std::vector<bf16> xb = as<bf16>(p.x);
      const auto ref = dsa_test::fp8_linear_reference(xb, s.t, s.in, p.w, s.out, p.ws, fmt);
      const std::vector<float> yf = run_fp8<bf16, float>(p, fp32_dot(), fmt);
      const std::vector<bf16> yb = run_fp8<bf16, bf16>(p, fp32_dot(), fmt);
      CHECK(same_bits(yf, ref.y_fp32));
      std::size_t bad_bf16 = 0, bad_bound = 0;
      for (std::size_t i = 0; i < yf.size(); ++i) {
        if (yb[i].bits != bf16(ref.y_fp32[i]).bits) ++bad_bf16;
        if (std::fabs(static_cast<double>(yf[i]) - ref.ideal[i]) > ref.bound_fp32[i]) ++bad_bound;
      }
      CHECK(bad_bf16 == 0);
      CHECK(bad_bound == 0);
      // Float activations are quantized like bf16 ones.
      const auto ref_f = dsa_test::fp8_linear_reference(p.x, s.t, s.in, p.w, s.out, p.ws, fmt);
      CHECK(same_bits(run_fp8<float, float>(p, fp32_dot(), fmt), ref_f.y_fp32));
    }
  }
}

TEST_CASE("fp8_linear's two block dots agree within the fp32 mode's error bound") {
  // Checkpoint-like operands (normal weights, not uniform codes), where the two differ only in
  // the last bits of some outputs.
  const index_t t = 9, in = 1024, out = 200;
  fp8_problem p = make_fp8_problem(t, in, out, 77);
  const std::vector<float> wn = dsa_test::normal(p.w.size(), 78, 80.0f);
  for (std::size_t i = 0; i < p.w.size(); ++i) p.w[i] = fp8_e4m3(wn[i]).bits;
  const auto ref = dsa_test::fp8_linear_reference(as<bf16>(p.x), t, in, p.w, out, p.ws, dsa::scale_format::ue8m0);
  const std::vector<float> exact = run_fp8<bf16, float>(p);
  const std::vector<float> fast = run_fp8<bf16, float>(p, fp32_dot());
  CHECK(same_bits(exact, ref.y));
  CHECK(same_bits(fast, ref.y_fp32));
  std::size_t differ = 0, bad = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    if (exact[i] != fast[i]) ++differ;
    if (std::fabs(static_cast<double>(fast[i]) - static_cast<double>(exact[i])) > ref.bound_fp32[i] + ref.bound[i]) ++bad;
  }
  CHECK(bad == 0);
  MESSAGE("outputs that differ between the exact and the fp32 block dot: " << differ << " of " << exact.size());
}

TEST_CASE("fp8_linear with fp8_dot::fp32 is bit-identical across thread counts and batch sizes") {
  const fp8_problem p = make_fp8_problem(41, 384, 390, 121);
  const std::vector<float> y1 = run_fp8<bf16, float>(p, fp32_dot(1));
  CHECK(same_bits(y1, run_fp8<bf16, float>(p, fp32_dot(2))));
  CHECK(same_bits(y1, run_fp8<bf16, float>(p, fp32_dot(3))));
  // Every row alone (the GEMV) and in batches of 2, 3 and 4 gives the rows of the big (GEMM) product.
  for (index_t r : {index_t{0}, index_t{17}, index_t{40}}) {
    fp8_problem one = p;
    one.t = 1;
    one.x.assign(p.x.begin() + r * p.in, p.x.begin() + (r + 1) * p.in);
    const std::vector<float> y = run_fp8<bf16, float>(one, fp32_dot(2));
    CHECK(std::memcmp(y.data(), y1.data() + r * p.out, p.out * sizeof(float)) == 0);
  }
  for (index_t t : {index_t{2}, index_t{3}, index_t{4}, index_t{5}, index_t{8}}) {
    fp8_problem few = p;
    few.t = t;
    few.x.resize(static_cast<std::size_t>(t * p.in));
    CHECK(std::memcmp(run_fp8<bf16, float>(few, fp32_dot()).data(), y1.data(), t * p.out * sizeof(float)) == 0);
  }
}

TEST_CASE("fp8_linear decodes every weight code exactly in both modes, also under DAZ/FTZ") {
  // Each row of the weight holds all 256 codes (NaN included) in a different order, so that every
  // group of the SIMD decoder meets subnormal, zero and NaN codes, and a block of rows holds none.
  const index_t t = 3, in = 512, out = 40;
  fp8_problem p = make_fp8_problem(t, in, out, 901);
  std::mt19937_64 rng(902);
  for (index_t n = 0; n < out; ++n) {
    std::uint8_t* row = p.w.data() + n * in;
    if (n >= 16 && n < 32) {
      // Normal codes only: the decoder's short path.
      for (index_t k = 0; k < in; ++k) {
        do {
          row[k] = static_cast<std::uint8_t>(rng());
        } while ((row[k] & 0x78) == 0 || (row[k] & 0x7F) == 0x7F);
      }
      continue;
    }
    for (index_t k = 0; k < in; ++k) row[k] = static_cast<std::uint8_t>(k);
    std::shuffle(row, row + in, rng);
  }
  p.x.assign(p.x.size(), 1.0f);  // no NaN from the activations: every code of x is the same normal one
  for (std::size_t i = 0; i < p.x.size(); i += 3) p.x[i] = -0.75f;
  const auto ref = dsa_test::fp8_linear_reference(p.x, t, in, p.w, out, p.ws, dsa::scale_format::ue8m0);
  auto check = [&] {
    for (dsa::cpu_backend be : {dsa::cpu_backend{1}, fp32_dot(1)}) {
      for (index_t rows : {index_t{1}, t}) {  // GEMV and, below, GEMM
        fp8_problem q = p;
        q.t = rows;
        q.x.resize(static_cast<std::size_t>(rows * in));
        const std::vector<float> y = run_fp8<float, float>(q, be);
        const std::vector<float>& want = be.fp8_block_dot == dsa::fp8_dot::fp32 ? ref.y_fp32 : ref.y;
        std::size_t bad = 0;
        for (index_t i = 0; i < rows * out; ++i) {
          const float a = y[static_cast<std::size_t>(i)], b = want[static_cast<std::size_t>(i)];
          if (std::isnan(b) ? !std::isnan(a) : std::memcmp(&a, &b, sizeof a) != 0) ++bad;
        }
        CHECK(bad == 0);
      }
      fp8_problem big = p;
      big.t = 6;
      big.x.resize(static_cast<std::size_t>(6 * in), 1.0f);
      const auto ref6 = dsa_test::fp8_linear_reference(big.x, 6, in, p.w, out, p.ws, dsa::scale_format::ue8m0);
      const std::vector<float> y6 = run_fp8<float, float>(big, be);
      const std::vector<float>& want6 = be.fp8_block_dot == dsa::fp8_dot::fp32 ? ref6.y_fp32 : ref6.y;
      std::size_t bad = 0;
      for (std::size_t i = 0; i < y6.size(); ++i) {
        if (std::isnan(want6[i]) ? !std::isnan(y6[i]) : std::memcmp(&y6[i], &want6[i], sizeof(float)) != 0) ++bad;
      }
      CHECK(bad == 0);
    }
  };
  check();
#if defined(__SSE__)
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040u);
  check();
  _mm_setcsr(csr);
#endif
}

TEST_CASE("fp8_linear takes strided rows and writes into a slice") {
  const fp8_problem p = make_fp8_problem(9, 256, 140, 33);
  const std::vector<float> expect = run_fp8<bf16, float>(p);
  const index_t xld = 300, wld = 260, yld = 150;
  std::vector<bf16> xbuf(static_cast<std::size_t>(p.t * xld));
  std::vector<fp8_e4m3> wbuf(static_cast<std::size_t>(p.out * wld));
  std::vector<float> ybuf(static_cast<std::size_t>(p.t * yld), -7.0f);
  for (index_t i = 0; i < p.t; ++i) {
    for (index_t k = 0; k < p.in; ++k) xbuf[i * xld + k] = bf16(p.x[i * p.in + k]);
  }
  for (index_t n = 0; n < p.out; ++n) {
    for (index_t k = 0; k < p.in; ++k) wbuf[n * wld + k] = fp8_e4m3::from_bits(p.w[n * p.in + k]);
  }
  for (auto be : {dsa::cpu_backend{1}, dsa::cpu_backend{2}}) {
    dsa::fp8_linear(be, dsa::host_view<const bf16, 2>(xbuf.data(), {p.t, p.in}, {xld, 1}),
                    dsa::host_view<const fp8_e4m3, 2>(wbuf.data(), {p.out, p.in}, {wld, 1}),
                    dsa::make_view(p.ws.data(), {2, 2}), dsa::host_view<float, 2>(ybuf.data() + 5, {p.t, p.out}, {yld, 1}));
    bool ok = true;
    for (index_t i = 0; i < p.t; ++i) {
      for (index_t j = 0; j < yld; ++j) {
        const float v = ybuf[i * yld + j];
        if (j >= 5 && j < 5 + p.out) ok = ok && v == expect[i * p.out + j - 5];
        else ok = ok && v == -7.0f;
      }
    }
    CHECK(ok);
  }
}

TEST_CASE("fp8_linear propagates NaN codes and handles empty shapes") {
  fp8_problem p = make_fp8_problem(6, 256, 200, 44);
  p.w[3 * 256 + 200] = 0xFF;  // NaN in output feature 3
  p.x[2 * 256 + 9] = std::numeric_limits<float>::quiet_NaN();
  auto first3 = [&](dsa::cpu_backend be) {
    fp8_problem q = p;
    q.t = 3;
    q.x.resize(3 * 256);
    return run_fp8<float, float>(q, be);
  };
  for (const auto& y : {run_fp8<float, float>(p), first3(dsa::cpu), run_fp8<float, float>(p, fp32_dot()), first3(fp32_dot())}) {
    const index_t t = static_cast<index_t>(y.size()) / p.out;
    for (index_t i = 0; i < t; ++i) {
      for (index_t n = 0; n < p.out; ++n) {
        const bool expect_nan = n == 3 || i == 2;
        CHECK(std::isnan(y[i * p.out + n]) == expect_nan);
      }
    }
  }
  // in = 0: every output is +0.
  std::vector<bf16> x0(1), y0(3 * 5, bf16(1.0f));
  std::vector<fp8_e4m3> w0(1);
  std::vector<float> s0(1);
  dsa::fp8_linear(dsa::cpu, dsa::make_view(x0.data(), {3, 0}), dsa::make_view(w0.data(), {5, 0}),
                  dsa::make_view(s0.data(), {1, 0}), dsa::make_view(y0.data(), {3, 5}));
  for (const auto& v : y0) CHECK(v.bits == 0);
  // t = 0 and out = 0: nothing to do, nothing touched.
  dsa::fp8_linear(dsa::cpu, dsa::make_view(x0.data(), {0, 128}), dsa::make_view(w0.data(), {5, 128}),
                  dsa::make_view(s0.data(), {1, 1}), dsa::make_view(y0.data(), {0, 5}));
}

TEST_CASE("fp8_linear rejects bad arguments with a clear message") {
  std::vector<bf16> x(4 * 256);
  std::vector<fp8_e4m3> w(130 * 256);
  std::vector<float> s(2 * 2), y(4 * 130);
  const auto xv = dsa::make_view(x.data(), {4, 256});
  const auto wv = dsa::make_view(w.data(), {130, 256});
  const auto sv = dsa::make_view(s.data(), {2, 2});
  const auto yv = dsa::make_view(y.data(), {4, 130});
  CHECK_NOTHROW(dsa::fp8_linear(dsa::cpu, xv, wv, sv, yv));
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(dsa::cpu, dsa::make_view(x.data(), {4, 200}), dsa::make_view(w.data(), {130, 200}),
                                       sv, yv),
                       doctest::Contains("dsa::fp8_linear: x.extent(1) = 200; expected a multiple of 128"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(dsa::cpu, xv, dsa::make_view(w.data(), {130, 128}), sv, yv),
                       doctest::Contains("dsa::fp8_linear: w.extent(1) = 128; expected 256"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(dsa::cpu, xv, wv, dsa::make_view(s.data(), {1, 2}), yv),
                       doctest::Contains("dsa::fp8_linear: w_scale.extent(0) = 1; expected 2"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(dsa::cpu, xv, wv, dsa::make_view(s.data(), {2, 1}), yv),
                       doctest::Contains("dsa::fp8_linear: w_scale.extent(1) = 1; expected 2"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(dsa::cpu, xv, wv, sv, dsa::make_view(y.data(), {3, 130})),
                       doctest::Contains("dsa::fp8_linear: y.extent(0) = 3; expected 4"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(dsa::cpu, xv, wv, sv, dsa::make_view(y.data(), {4, 129})),
                       doctest::Contains("dsa::fp8_linear: y.extent(1) = 129; expected 130"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(dsa::cpu, dsa::host_view<const bf16, 2>(x.data(), {4, 256}, {256, 2}), wv, sv, yv),
                       doctest::Contains("dsa::fp8_linear: x.stride(1) = 2"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(dsa::cpu, dsa::host_view<const bf16, 2>(nullptr, {4, 256}), wv, sv, yv),
                       doctest::Contains("dsa::fp8_linear: x.data = null"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(dsa::cpu, xv, wv, sv, dsa::host_view<float, 2>(y.data(), {4, 130}, {64, 1})),
                       doctest::Contains("dsa::fp8_linear: y.stride(0) = 64"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(dsa::cpu, xv, wv, sv, yv, static_cast<dsa::scale_format>(7)),
                       doctest::Contains("dsa::fp8_linear: act_format = 7"), dsa::error);
  // y over the activations' memory.
  std::vector<float> xf(4 * 256);
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(dsa::cpu, dsa::make_view(xf.data(), {4, 256}), wv, sv,
                                       dsa::make_view(xf.data() + 8, {4, 130})),
                       doctest::Contains("dsa::fp8_linear: y = a view overlapping x"), dsa::error);
}

TEST_CASE("linear accumulates in fp32 and rounds once, for every supported type combination") {
  const index_t t = 7, in = 300, out = 45;
  const std::vector<float> xs = dsa_test::normal(static_cast<std::size_t>(t * in), 5);
  const std::vector<float> ws = dsa_test::normal(static_cast<std::size_t>(out * in), 6, 0.05f);
  // References from the bf16-rounded values where the op sees bf16.
  const std::vector<float> xr = dsa_test::to_floats(as<bf16>(xs));
  const std::vector<float> wr = dsa_test::to_floats(as<bf16>(ws));
  auto check_close = [&](const std::vector<float>& y, const std::vector<float>& x, const std::vector<float>& w) {
    std::vector<double> ref, mag;
    dsa_test::linear_reference(x, t, in, w, out, ref, mag);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      if (std::fabs(y[i] - ref[i]) > static_cast<double>(in) * 0x1p-24 * mag[i]) ++bad;
    }
    CHECK(bad == 0);
  };
  std::vector<float> yf(static_cast<std::size_t>(t * out));
  std::vector<bf16> yb(yf.size());
  const auto xb = as<bf16>(xs);
  const auto wb = as<bf16>(ws);
  const auto yfv = dsa::make_view(yf.data(), {t, out});
  const auto ybv = dsa::make_view(yb.data(), {t, out});

  dsa::linear(dsa::cpu, dsa::make_view(xs.data(), {t, in}), dsa::make_view(ws.data(), {out, in}), yfv);
  check_close(yf, xs, ws);
  dsa::linear(dsa::cpu, dsa::make_view(xs.data(), {t, in}), dsa::make_view(wb.data(), {out, in}), yfv);
  check_close(yf, xs, wr);
  // A bf16 weight used as fp32 is the same product as its exact fp32 copy.
  std::vector<float> y2(yf.size());
  dsa::linear(dsa::cpu, dsa::make_view(xs.data(), {t, in}), dsa::make_view(wr.data(), {out, in}),
              dsa::make_view(y2.data(), {t, out}));
  CHECK(same_bits(yf, y2));

  dsa::linear(dsa::cpu, dsa::make_view(xb.data(), {t, in}), dsa::make_view(wb.data(), {out, in}), yfv);
  check_close(yf, xr, wr);
  dsa::linear(dsa::cpu, dsa::make_view(xb.data(), {t, in}), dsa::make_view(wb.data(), {out, in}), ybv);
  // bf16 output = the fp32 result rounded once.
  bool once = true;
  for (std::size_t i = 0; i < yf.size(); ++i) once = once && yb[i].bits == bf16(yf[i]).bits;
  CHECK(once);
  dsa::linear(dsa::cpu, dsa::make_view(xb.data(), {t, in}), dsa::make_view(ws.data(), {out, in}), ybv);
  std::vector<double> ref, mag;
  dsa_test::linear_reference(xr, t, in, ws, out, ref, mag);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < yb.size(); ++i) {
    if (std::fabs(yb[i].to_float() - ref[i]) > static_cast<double>(in) * 0x1p-24 * mag[i] + 0x1p-8 * std::fabs(ref[i])) {
      ++bad;
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("linear is bit-identical across thread counts, for GEMV and chunked GEMM shapes") {
  for (index_t t : {index_t{1}, index_t{300}}) {
    const index_t in = 600, out = 700;
    const std::vector<bf16> x = as<bf16>(dsa_test::normal(static_cast<std::size_t>(t * in), 9));
    const std::vector<bf16> w = as<bf16>(dsa_test::normal(static_cast<std::size_t>(out * in), 10, 0.05f));
    std::vector<bf16> y1(static_cast<std::size_t>(t * out)), y2(y1.size()), y3(y1.size());
    dsa::linear(dsa::cpu_backend{1}, dsa::make_view(x.data(), {t, in}), dsa::make_view(w.data(), {out, in}),
                dsa::make_view(y1.data(), {t, out}));
    dsa::linear(dsa::cpu_backend{2}, dsa::make_view(x.data(), {t, in}), dsa::make_view(w.data(), {out, in}),
                dsa::make_view(y2.data(), {t, out}));
    dsa::linear(dsa::cpu_backend{3}, dsa::make_view(x.data(), {t, in}), dsa::make_view(w.data(), {out, in}),
                dsa::make_view(y3.data(), {t, out}));
    CHECK(same_bits(y1, y2));
    CHECK(same_bits(y1, y3));
  }
}

TEST_CASE("linear gives every row the bits of its one-row call, whatever the row count (batch invariance)") {
  // in = 2500: k chunks of the multi-row path (1024, 1024, 452) plus a tail of 4 past the lanes.
  const index_t in = 2500, out = 37;
  const std::vector<bf16> w = as<bf16>(dsa_test::normal(static_cast<std::size_t>(out * in), 12, 0.05f));
  for (index_t t : {index_t{2}, index_t{5}, index_t{6}, index_t{7}, index_t{8}, index_t{33}, index_t{70}}) {
    const std::vector<bf16> x = as<bf16>(dsa_test::normal(static_cast<std::size_t>(t * in), 11 + t));
    std::vector<float> y(static_cast<std::size_t>(t * out)), y1(static_cast<std::size_t>(out));
    dsa::linear(dsa::cpu_backend{2}, dsa::make_view(x.data(), {t, in}), dsa::make_view(w.data(), {out, in}),
                dsa::make_view(y.data(), {t, out}));
    bool same = true;
    for (index_t i = 0; i < t; ++i) {
      dsa::linear(dsa::cpu_backend{1}, dsa::make_view(x.data() + i * in, {1, in}), dsa::make_view(w.data(), {out, in}),
                  dsa::make_view(y1.data(), {1, out}));
      same = same && std::memcmp(y1.data(), y.data() + i * out, y1.size() * sizeof(float)) == 0;
    }
    CAPTURE(t);
    CHECK(same);
  }
}

TEST_CASE("linear takes strided operands; empty inner dimension gives zeros") {
  const index_t t = 5, in = 64, out = 33;
  const std::vector<float> x = dsa_test::normal(static_cast<std::size_t>(t * 80), 12);
  const std::vector<float> w = dsa_test::normal(static_cast<std::size_t>(out * 70), 13);
  std::vector<float> xc(static_cast<std::size_t>(t * in)), wc(static_cast<std::size_t>(out * in));
  for (index_t i = 0; i < t; ++i) std::memcpy(&xc[i * in], &x[i * 80], in * sizeof(float));
  for (index_t n = 0; n < out; ++n) std::memcpy(&wc[n * in], &w[n * 70], in * sizeof(float));
  std::vector<float> ys(static_cast<std::size_t>(t * 40), 3.0f), yc(static_cast<std::size_t>(t * out));
  dsa::linear(dsa::cpu, dsa::host_view<const float, 2>(x.data(), {t, in}, {80, 1}),
              dsa::host_view<const float, 2>(w.data(), {out, in}, {70, 1}), dsa::host_view<float, 2>(ys.data(), {t, out}, {40, 1}));
  dsa::linear(dsa::cpu, dsa::make_view(xc.data(), {t, in}), dsa::make_view(wc.data(), {out, in}),
              dsa::make_view(yc.data(), {t, out}));
  bool ok = true;
  for (index_t i = 0; i < t; ++i) {
    for (index_t j = 0; j < 40; ++j) ok = ok && ys[i * 40 + j] == (j < out ? yc[i * out + j] : 3.0f);
  }
  CHECK(ok);
  std::vector<bf16> y0(6, bf16(2.0f));
  dsa::linear(dsa::cpu, dsa::make_view(x.data(), {2, 0}), dsa::make_view(w.data(), {3, 0}), dsa::make_view(y0.data(), {2, 3}));
  for (const auto& v : y0) CHECK(v.bits == 0);
}

TEST_CASE("linear rejects bad arguments with a clear message") {
  std::vector<float> x(4 * 64), w(10 * 64), y(4 * 10);
  const auto xv = dsa::make_view(x.data(), {4, 64});
  const auto wv = dsa::make_view(w.data(), {10, 64});
  const auto yv = dsa::make_view(y.data(), {4, 10});
  CHECK_NOTHROW(dsa::linear(dsa::cpu, xv, wv, yv));
  CHECK_THROWS_WITH_AS(dsa::linear(dsa::cpu, xv, dsa::make_view(w.data(), {10, 32}), yv),
                       doctest::Contains("dsa::linear: w.extent(1) = 32; expected 64"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::linear(dsa::cpu, xv, wv, dsa::make_view(y.data(), {4, 9})),
                       doctest::Contains("dsa::linear: y.extent(1) = 9; expected 10"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::linear(dsa::cpu, xv, wv, dsa::make_view(y.data(), {5, 10})),
                       doctest::Contains("dsa::linear: y.extent(0) = 5; expected 4"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::linear(dsa::cpu, dsa::host_view<const float, 2>(x.data(), {4, 32}, {64, 2}), wv, yv),
                       doctest::Contains("dsa::linear: x.stride(1) = 2"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::linear(dsa::cpu, xv, dsa::host_view<const float, 2>(nullptr, {10, 64}), yv),
                       doctest::Contains("dsa::linear: w.data = null"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::linear(dsa::cpu, xv, wv, dsa::make_view(x.data() + 4, {4, 10})),
                       doctest::Contains("dsa::linear: y = a view overlapping x"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::linear(dsa::cpu, xv, wv, dsa::make_view(w.data(), {4, 10})),
                       doctest::Contains("dsa::linear: y = a view overlapping w"), dsa::error);
}
