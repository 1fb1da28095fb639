// act_quant / act_dequant / weight_quant / weight_dequant: front-end checks and CPU results.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/ops/fp8_quant.hpp"
#include "support/fp8_quant_reference.hpp"
#include "support/random.hpp"

namespace {

using dsa::bf16;
using dsa::fp8_e4m3;
using dsa::index_t;
using dsa::scale_format;

// Rows of groups whose magnitudes span 2^-20 .. 2^20, so scales and e4m3 subnormals vary.
std::vector<float> wide_data(index_t rows, index_t cols, index_t group, std::uint64_t seed) {
  auto x = dsa_test::normal(static_cast<std::size_t>(rows * cols), seed);
  const auto e = dsa_test::uniform(static_cast<std::size_t>(rows * cols / group), seed + 1, -20.0f, 20.0f);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(x[i], static_cast<int>(e[i / static_cast<std::size_t>(group)]));
  return x;
}

std::vector<std::uint8_t> codes(const std::vector<fp8_e4m3>& q) {
  std::vector<std::uint8_t> b(q.size());
  for (std::size_t i = 0; i < q.size(); ++i) b[i] = q[i].bits;
  return b;
}

std::vector<std::uint32_t> float_bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) b[i] = std::bit_cast<std::uint32_t>(v[i]);
  return b;
}

struct quantized {
  std::vector<fp8_e4m3> q;
  std::vector<float> s;
};

template <class T>
quantized run_act_quant(const dsa::cpu_backend& be, const std::vector<T>& x, index_t rows, index_t cols,
                        dsa::act_quant_config cfg) {
  quantized r{std::vector<fp8_e4m3>(x.size()), std::vector<float>(static_cast<std::size_t>(rows * (cols / cfg.group_size)))};
  dsa::act_quant(be, dsa::make_view(x.data(), {rows, cols}), dsa::make_view(r.q.data(), {rows, cols}),
                 dsa::make_view(r.s.data(), {rows, cols / cfg.group_size}), cfg);
  return r;
}

}  // namespace

TEST_CASE("act_quant matches the oracle bit for bit (float and bf16 input, both scale formats)") {
  for (index_t group : {128, 64, 32, 512}) {
    for (scale_format fmt : {scale_format::ue8m0, scale_format::fp32}) {
      CAPTURE(group);
      CAPTURE(static_cast<int>(fmt));
      const index_t rows = 37, cols = 1024;
      const auto xf = wide_data(rows, cols, group, 10 + static_cast<std::uint64_t>(group));
      const auto xb = dsa_test::convert<bf16>(xf);
      const auto xbf = dsa_test::to_floats(xb);
      const dsa::act_quant_config cfg{fmt, group};
      const auto rf = run_act_quant(dsa::cpu, xf, rows, cols, cfg);
      const auto rb = run_act_quant(dsa::cpu, xb, rows, cols, cfg);
      std::vector<std::uint8_t> q(static_cast<std::size_t>(group));
      for (index_t r = 0; r < rows; ++r) {
        for (index_t g = 0; g < cols / group; ++g) {
          const auto off = static_cast<std::size_t>(r * cols + g * group);
          const auto si = static_cast<std::size_t>(r * (cols / group) + g);
          float s = dsa_test::act_quant_group_reference(xf.data() + off, static_cast<std::size_t>(group),
                                                        fmt == scale_format::ue8m0, q.data());
          REQUIRE(std::bit_cast<std::uint32_t>(rf.s[si]) == std::bit_cast<std::uint32_t>(s));
          for (index_t j = 0; j < group; ++j) REQUIRE(rf.q[off + static_cast<std::size_t>(j)].bits == q[static_cast<std::size_t>(j)]);
          s = dsa_test::act_quant_group_reference(xbf.data() + off, static_cast<std::size_t>(group),
                                                  fmt == scale_format::ue8m0, q.data());
          REQUIRE(std::bit_cast<std::uint32_t>(rb.s[si]) == std::bit_cast<std::uint32_t>(s));
          for (index_t j = 0; j < group; ++j) REQUIRE(rb.q[off + static_cast<std::size_t>(j)].bits == q[static_cast<std::size_t>(j)]);
        }
      }
    }
  }
}

TEST_CASE("act_quant -> act_dequant stays within half an e4m3 ulp (plus the subnormal floor)") {
  // |x / s| <= 448 (no saturation beyond rounding), so the error is at most half an e4m3 ulp of
  // x / s: 2^-4 |x / s| where x / s is normal (>= 2^-6), and half the subnormal step 2^-10
  // below; times s. A little slack covers the fp32 division's own rounding.
  for (scale_format fmt : {scale_format::ue8m0, scale_format::fp32}) {
    const index_t rows = 64, cols = 2048;
    const auto x = wide_data(rows, cols, 128, 77);
    const auto r = run_act_quant(dsa::cpu, x, rows, cols, {fmt, 128});
    std::vector<float> y(x.size());
    dsa::act_dequant(dsa::cpu, dsa::make_view(r.q.data(), {rows, cols}), dsa::make_view(r.s.data(), {rows, cols / 128}),
                     dsa::make_view(y.data(), {rows, cols}));
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double s = r.s[i / 128];
      const double bound = std::fabs(x[i]) * (std::ldexp(1.0, -4) + std::ldexp(1.0, -22)) + s * std::ldexp(1.0, -10);
      REQUIRE(std::fabs(static_cast<double>(y[i]) - x[i]) <= bound);
      REQUIRE((r.q[i].bits & 0x7F) <= 0x7E);
    }
    // The scale is as small as the format allows: some element of each group lands in the top
    // binade [256, 448] (fp32: exactly 448), so no range is wasted.
    int checked = 0;
    for (index_t g = 0; g < rows * cols / 128; ++g) {
      int top = 0;
      float amax = 0.0f;
      for (index_t j = 0; j < 128; ++j) {
        top = std::max(top, r.q[static_cast<std::size_t>(g * 128 + j)].bits & 0x7F);
        amax = std::max(amax, std::fabs(x[static_cast<std::size_t>(g * 128 + j)]));
      }
      if (amax <= 1e-4f) continue;  // the floor sets the scale
      ++checked;
      if (fmt == scale_format::fp32) REQUIRE(top == 0x7E);
      else REQUIRE(top >= 0x76);  // >= 224: amax / s lies in (224, 448]
    }
    CHECK(checked > 500);
  }
}

TEST_CASE("already-quantized ue8m0 data round-trips exactly") {
  // Codes with one element per group in (224, 448] make the scale canonical: amax / 448 lies
  // in (s/2, s], so ceil_pow2 gives s back and every x / s is the code itself.
  const index_t rows = 20, cols = 512;
  std::vector<fp8_e4m3> q(static_cast<std::size_t>(rows * cols));
  std::vector<float> s(static_cast<std::size_t>(rows * 4));
  const auto u = dsa_test::uniform(q.size(), 5, 0.0f, 254.0f);
  for (std::size_t i = 0; i < q.size(); ++i) {
    int c = static_cast<int>(u[i]);
    if ((c & 0x7F) == 0x7F) c = 0x7E;  // no NaN codes
    q[i] = fp8_e4m3::from_bits(static_cast<std::uint8_t>(c));
  }
  const auto e = dsa_test::uniform(s.size(), 6, -20.0f, 20.0f);
  for (std::size_t g = 0; g < s.size(); ++g) {
    s[g] = std::ldexp(1.0f, static_cast<int>(std::floor(e[g])));
    q[g * 128 + g % 128] = fp8_e4m3::from_bits(static_cast<std::uint8_t>((g % 2 ? 0x80 : 0x00) | (0x77 + g % 8)));  // 240..448
  }
  q[7] = fp8_e4m3::from_bits(0x80);  // -0 survives
  for (int out_bf16 = 0; out_bf16 < 2; ++out_bf16) {
    quantized back;
    if (out_bf16) {
      std::vector<bf16> y(q.size());
      dsa::act_dequant(dsa::cpu, dsa::make_view(q.data(), {rows, cols}), dsa::make_view(s.data(), {rows, 4}),
                       dsa::make_view(y.data(), {rows, cols}));
      back = run_act_quant(dsa::cpu, y, rows, cols, {});
    } else {
      std::vector<float> y(q.size());
      dsa::act_dequant(dsa::cpu, dsa::make_view(q.data(), {rows, cols}), dsa::make_view(s.data(), {rows, 4}),
                       dsa::make_view(y.data(), {rows, cols}));
      back = run_act_quant(dsa::cpu, y, rows, cols, {});
    }
    CHECK(codes(back.q) == codes(q));
    CHECK(float_bits(back.s) == float_bits(s));
  }
}

TEST_CASE("act_dequant is the fp32 product rounded once to the output type") {
  const index_t rows = 3, cols = 256;
  std::vector<fp8_e4m3> q(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = fp8_e4m3::from_bits(static_cast<std::uint8_t>(i * 37 % 256));
  const std::vector<float> s = {0.3f, 1.0f, 3.0e-3f, 7.0f, 1e-20f, 2.0f};  // [3, 2] with group 128
  std::vector<float> yf(q.size());
  std::vector<bf16> yb(q.size());
  dsa::act_dequant(dsa::cpu, dsa::make_view(q.data(), {rows, cols}), dsa::make_view(s.data(), {rows, 2}),
                   dsa::make_view(yf.data(), {rows, cols}));
  dsa::act_dequant(dsa::cpu, dsa::make_view(q.data(), {rows, cols}), dsa::make_view(s.data(), {rows, 2}),
                   dsa::make_view(yb.data(), {rows, cols}));
  for (std::size_t i = 0; i < q.size(); ++i) {
    const float want = static_cast<float>(dsa_test::e4m3_value(q[i].bits)) * s[i / 128];
    if (std::isnan(want)) {
      CHECK(std::isnan(yf[i]));
      CHECK(std::isnan(yb[i].to_float()));
    } else {
      REQUIRE(std::bit_cast<std::uint32_t>(yf[i]) == std::bit_cast<std::uint32_t>(want));
      REQUIRE(yb[i].bits == bf16(want).bits);
    }
  }
}

TEST_CASE("zero groups use the 1e-4 amax floor; non-finite groups are poisoned, others untouched") {
  const index_t cols = 512;
  std::vector<float> x(cols, 0.0f);
  x[128 + 3] = -0.0f;
  for (index_t j = 256; j < 384; ++j) x[static_cast<std::size_t>(j)] = 0.01f * static_cast<float>(j - 300);
  x[300] = std::numeric_limits<float>::quiet_NaN();
  for (index_t j = 384; j < 512; ++j) x[static_cast<std::size_t>(j)] = 1.0f;
  x[400] = -std::numeric_limits<float>::infinity();

  const auto ue = run_act_quant(dsa::cpu, x, 1, cols, {scale_format::ue8m0, 128});
  const auto fp = run_act_quant(dsa::cpu, x, 1, cols, {scale_format::fp32, 128});
  CHECK(ue.s[0] == std::ldexp(1.0f, -22));
  CHECK(ue.s[1] == std::ldexp(1.0f, -22));
  CHECK(std::bit_cast<std::uint32_t>(fp.s[0]) == std::bit_cast<std::uint32_t>(1e-4f * (1.0f / 448.0f)));
  for (index_t j = 0; j < 256; ++j) {
    CHECK(ue.q[static_cast<std::size_t>(j)].bits == (j == 131 ? 0x80 : 0x00));
    CHECK(fp.q[static_cast<std::size_t>(j)].bits == (j == 131 ? 0x80 : 0x00));
  }
  // The NaN group: canonical NaN scale, every code NaN.
  CHECK(std::bit_cast<std::uint32_t>(ue.s[2]) == 0x7FC00000u);
  CHECK(std::bit_cast<std::uint32_t>(fp.s[2]) == 0x7FC00000u);
  for (index_t j = 256; j < 384; ++j) {
    CHECK(ue.q[static_cast<std::size_t>(j)].bits == 0x7F);
    CHECK(fp.q[static_cast<std::size_t>(j)].bits == 0x7F);
  }
  // The inf group: NaN (ue8m0) or inf (fp32) scale; dequantized, the whole group is NaN.
  CHECK(std::isnan(ue.s[3]));
  CHECK(fp.s[3] == std::numeric_limits<float>::infinity());
  for (const auto* r : {&ue, &fp}) {
    std::vector<float> y(cols);
    dsa::act_dequant(dsa::cpu, dsa::make_view(r->q.data(), {1, cols}), dsa::make_view(r->s.data(), {1, 4}),
                     dsa::make_view(y.data(), {1, cols}));
    for (index_t j = 256; j < 512; ++j) CHECK(std::isnan(y[static_cast<std::size_t>(j)]));
    for (index_t j = 0; j < 256; ++j) CHECK(y[static_cast<std::size_t>(j)] == 0.0f);
  }
}

TEST_CASE("act_quant and weight_quant are bit-identical for every thread count, strided or not") {
  const index_t rows = 301, cols = 896;
  const auto xf = wide_data(rows, cols, 128, 99);
  const auto x = dsa_test::convert<bf16>(xf);
  const auto r1 = run_act_quant(dsa::cpu_backend{1}, x, rows, cols, {});
  const auto r2 = run_act_quant(dsa::cpu_backend{2}, x, rows, cols, {});
  const auto r3 = run_act_quant(dsa::cpu_backend{3}, x, rows, cols, {scale_format::ue8m0, 128});
  CHECK(codes(r1.q) == codes(r2.q));
  CHECK(codes(r1.q) == codes(r3.q));
  CHECK(float_bits(r1.s) == float_bits(r2.s));
  CHECK(float_bits(r1.s) == float_bits(r3.s));

  // Strided input and outputs (rows padded) give the same bits.
  const index_t ld = cols + 64;
  std::vector<bf16> xs(static_cast<std::size_t>(rows * ld), bf16(1e30f));
  for (index_t r = 0; r < rows; ++r)
    std::memcpy(xs.data() + r * ld, x.data() + r * cols, static_cast<std::size_t>(cols) * sizeof(bf16));
  std::vector<fp8_e4m3> qs(static_cast<std::size_t>(rows * ld), fp8_e4m3::from_bits(0x55));
  std::vector<float> ss(static_cast<std::size_t>(rows * 10), -1.0f);
  dsa::act_quant(dsa::cpu_backend{2}, dsa::tensor_view<bf16, 2>(xs.data(), {rows, cols}, {ld, 1}),
                 dsa::tensor_view<fp8_e4m3, 2>(qs.data(), {rows, cols}, {ld, 1}),
                 dsa::tensor_view<float, 2>(ss.data(), {rows, 7}, {10, 1}));
  for (index_t r = 0; r < rows; ++r) {
    for (index_t j = 0; j < cols; ++j) REQUIRE(qs[static_cast<std::size_t>(r * ld + j)] == r1.q[static_cast<std::size_t>(r * cols + j)]);
    for (index_t j = cols; j < ld; ++j) REQUIRE(qs[static_cast<std::size_t>(r * ld + j)].bits == 0x55);
    for (index_t g = 0; g < 7; ++g) REQUIRE(ss[static_cast<std::size_t>(r * 10 + g)] == r1.s[static_cast<std::size_t>(r * 7 + g)]);
  }

  std::vector<fp8_e4m3> wq1(xf.size()), wq2(xf.size());
  std::vector<float> ws1(3 * 7), ws2(3 * 7);
  dsa::weight_quant(dsa::cpu_backend{1}, dsa::make_view(xf.data(), {rows, cols}), dsa::make_view(wq1.data(), {rows, cols}),
                    dsa::make_view(ws1.data(), {3, 7}));
  dsa::weight_quant(dsa::cpu_backend{2}, dsa::make_view(xf.data(), {rows, cols}), dsa::make_view(wq2.data(), {rows, cols}),
                    dsa::make_view(ws2.data(), {3, 7}));
  CHECK(codes(wq1) == codes(wq2));
  CHECK(float_bits(ws1) == float_bits(ws2));
}

TEST_CASE("weight_quant matches the oracle on ragged blocks; weight_dequant is q * s per block") {
  for (auto [rows, cols] : {std::pair<index_t, index_t>{320, 416}, {128, 128}, {1, 1}, {129, 257}, {77, 1000}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    auto w = dsa_test::normal(static_cast<std::size_t>(rows * cols), 123 + static_cast<std::uint64_t>(rows), 0.02f);
    if (rows * cols > 1000) w[999] = 0.0f;
    const index_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
    std::vector<fp8_e4m3> q(w.size());
    std::vector<float> s(static_cast<std::size_t>(br * bc));
    dsa::weight_quant(dsa::cpu, dsa::make_view(w.data(), {rows, cols}), dsa::make_view(q.data(), {rows, cols}),
                      dsa::make_view(s.data(), {br, bc}));
    std::vector<std::uint8_t> qr;
    std::vector<float> sr;
    dsa_test::weight_quant_reference(w, rows, cols, qr, sr);
    CHECK(codes(q) == qr);
    CHECK(float_bits(s) == float_bits(sr));

    // bf16 weights quantize like their float values.
    const auto wb = dsa_test::convert<bf16>(w);
    const auto wbf = dsa_test::to_floats(wb);
    dsa::weight_quant(dsa::cpu, dsa::make_view(wb.data(), {rows, cols}), dsa::make_view(q.data(), {rows, cols}),
                      dsa::make_view(s.data(), {br, bc}));
    dsa_test::weight_quant_reference(wbf, rows, cols, qr, sr);
    CHECK(codes(q) == qr);
    CHECK(float_bits(s) == float_bits(sr));

    std::vector<float> back(w.size());
    std::vector<bf16> backb(w.size());
    dsa::weight_dequant(dsa::cpu, dsa::make_view(q.data(), {rows, cols}), dsa::make_view(s.data(), {br, bc}),
                        dsa::make_view(back.data(), {rows, cols}));
    dsa::weight_dequant(dsa::cpu_backend{2}, dsa::make_view(q.data(), {rows, cols}), dsa::make_view(s.data(), {br, bc}),
                        dsa::make_view(backb.data(), {rows, cols}));
    for (index_t r = 0; r < rows; ++r) {
      for (index_t c = 0; c < cols; ++c) {
        const auto i = static_cast<std::size_t>(r * cols + c);
        const float want = static_cast<float>(dsa_test::e4m3_value(q[i].bits)) * s[static_cast<std::size_t>((r / 128) * bc + c / 128)];
        REQUIRE(back[i] == want);
        REQUIRE(backb[i].bits == bf16(want).bits);
        // Half an e4m3 ulp of w / s, or half the subnormal step.
        const double sc = s[static_cast<std::size_t>((r / 128) * bc + c / 128)];
        REQUIRE(std::fabs(static_cast<double>(back[i]) - wbf[i]) <=
                std::fabs(wbf[i]) * (std::ldexp(1.0, -4) + std::ldexp(1.0, -22)) + sc * std::ldexp(1.0, -10));
      }
    }
  }
}

TEST_CASE("the CPU backend's branch-free e4m3 encode equals the core conversion") {
  auto check = [](std::uint32_t a) {
    for (std::uint32_t sign : {0u, 0x80000000u}) {
      const float v = std::bit_cast<float>(a | sign);
      REQUIRE(dsa::cpu_detail::fp8_quant_encode_clamped(v) == dsa::quantize_e4m3(v, 1.0f).bits);
    }
  };
  // Every exponent and top mantissa bits up to 448, with the low bits at the rounding edges.
  for (std::uint32_t hi = 0; hi <= (0x43E00000u >> 20); ++hi)
    for (std::uint32_t lo : {0x0u, 0x1u, 0x7FFFFu, 0x80000u, 0x80001u, 0xFFFFFu}) check(hi << 20 | lo);
  // Subnormal steps and their ties: k * 2^-10.
  for (int k = 0; k <= 20; ++k) check(std::bit_cast<std::uint32_t>(std::ldexp(static_cast<float>(k), -10)));
  // A dense sweep of [0, 448].
  for (std::uint32_t a = 0; a <= 0x43E00000u; a += 1021u) check(a);
  check(0x7F800000u);  // inf saturates
  CHECK(dsa::cpu_detail::fp8_quant_encode_clamped(-std::numeric_limits<float>::quiet_NaN()) == 0x7F);
}

TEST_CASE("the CPU backend's vector group loops equal the scalar numerics for every bf16 and special floats") {
  // fp8_quant_group / fp8_quant_abs_max / fp8_dequant_range run 16 (or 32) lanes at a time with
  // AVX-512 and fall back to the scalar loop for the tail; both must give quantize_e4m3's,
  // abs_max's and dequantize_e4m3's bits. Lengths that are not multiples of the vector width
  // exercise the tails.
  std::vector<float> all;  // every bf16 pattern
  for (std::uint32_t b = 0; b < 0x10000u; ++b) all.push_back(std::bit_cast<float>(b << 16));
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::vector<float> random_floats;  // every fp32 bit pattern class: subnormals, NaN payloads, ...
  for (int i = 0; i < 200000; ++i) random_floats.push_back(std::bit_cast<float>(bits(rng)));
  for (float v : {0.0f, -0.0f, 448.0f, -448.0f, 464.0f, 1e-30f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    random_floats.push_back(v);
  }
  const std::vector<float> scales = {1.0f, 0x1p-10f, 0x1p-22f, 0x1p20f, 0x1p-126f, 0x1p126f, 3.0f / 448.0f, 1e-4f / 448.0f,
                                     0.37f, 1e-38f, 0x1p-140f,
                                     // The edges of the AVX2 bf16 paths' exponent ranges.
                                     0x1p-116f, 0x1p-117f, 0x1p-118f, 0x1p-120f, 0x1p119f, 0x1p120f, std::numeric_limits<float>::infinity(),
                                     std::numeric_limits<float>::quiet_NaN(), 0.0f};
  auto check_quant = [&](const auto& x, float s, index_t len) {
    using T = typename std::decay_t<decltype(x)>::value_type;
    std::vector<fp8_e4m3> q(static_cast<std::size_t>(len));
    dsa::cpu_detail::fp8_quant_group(x.data(), len, s, q.data());
    for (index_t i = 0; i < len; ++i) {
      const auto want = dsa::quantize_e4m3(dsa::to_float(x[static_cast<std::size_t>(i)]), s).bits;
      if (q[static_cast<std::size_t>(i)].bits != want) {
        FAIL_CHECK("x bits " << std::bit_cast<std::uint32_t>(dsa::to_float(x[static_cast<std::size_t>(i)])) << ", s " << s
                             << ": got " << int(q[static_cast<std::size_t>(i)].bits) << ", want " << int(want));
        return;
      }
    }
    const float got_amax = dsa::cpu_detail::fp8_quant_abs_max(x.data(), len);
    const float want_amax = dsa::abs_max(x.data(), len);
    CHECK(std::bit_cast<std::uint32_t>(got_amax) == std::bit_cast<std::uint32_t>(want_amax));
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, bf16>);
  };
  const auto all_bf16 = dsa_test::convert<bf16>(all);
  for (float s : scales) {
    CAPTURE(s);
    check_quant(all_bf16, s, static_cast<index_t>(all_bf16.size()));
    check_quant(all, s, static_cast<index_t>(all.size()));
    check_quant(random_floats, s, static_cast<index_t>(random_floats.size()));
  }
  // Tails: every length up to 80 on a NaN-free slice, for both input types.
  for (index_t len = 0; len <= 80; ++len) {
    check_quant(std::vector<float>(random_floats.begin(), random_floats.begin() + len), 0x1p-3f, len);
    check_quant(std::vector<bf16>(all_bf16.begin() + 0x3C00, all_bf16.begin() + 0x3C00 + len), 0x1p-3f, len);
  }

  // Dequantization: every code (twice, so 512 values span 32 vectors) times each scale, to float
  // and to bf16.
  std::vector<fp8_e4m3> codes_all;
  for (int rep = 0; rep < 2; ++rep) {
    for (int c = 0; c < 256; ++c) codes_all.push_back(fp8_e4m3::from_bits(static_cast<std::uint8_t>(c)));
  }
  const float* values = dsa::cpu_detail::fp8_quant_e4m3_values();
  for (float s : scales) {
    for (float s_signed : {s, -s}) {
      CAPTURE(s_signed);
      for (index_t len : {index_t{512}, index_t{509}, index_t{17}, index_t{3}}) {
        std::vector<float> yf(static_cast<std::size_t>(len));
        std::vector<bf16> yb(static_cast<std::size_t>(len));
        dsa::cpu_detail::fp8_dequant_range(codes_all.data(), len, s_signed, yf.data(), values);
        dsa::cpu_detail::fp8_dequant_range(codes_all.data(), len, s_signed, yb.data(), values);
        for (index_t i = 0; i < len; ++i) {
          const fp8_e4m3 c = codes_all[static_cast<std::size_t>(i)];
          const float want = dsa::dequantize_e4m3(c, s_signed);
          if (std::isnan(s_signed) && std::isnan(c.to_float())) {
            // NaN * NaN: IEEE leaves the choice of NaN to the implementation (x86 returns the
            // first operand, and the compiler may order them either way); only NaN is promised.
            REQUIRE(std::isnan(yf[static_cast<std::size_t>(i)]));
            REQUIRE(std::isnan(yb[static_cast<std::size_t>(i)].to_float()));
            continue;
          }
          REQUIRE(std::bit_cast<std::uint32_t>(yf[static_cast<std::size_t>(i)]) == std::bit_cast<std::uint32_t>(want));
          REQUIRE(yb[static_cast<std::size_t>(i)].bits == bf16(want).bits);
        }
      }
    }
  }
}

TEST_CASE("act_quant / act_dequant of a large batch equal the same rows quantized a few at a time") {
  // Large batches split over threads and prefetch the next row while quantizing one; neither may
  // change a bit. Rows of 8192 + 128 columns are not multiples of 64 bytes.
  const index_t rows = 2048, cols = 8192 + 128;
  const auto xf = wide_data(rows, cols, 128, 5);
  const auto x = dsa_test::convert<bf16>(xf);
  const auto big = run_act_quant(dsa::cpu_backend{2}, x, rows, cols, dsa::act_quant_config{scale_format::ue8m0, 128});
  // The same rows quantized in small batches (below the threshold) must agree.
  for (index_t r0 : {index_t{0}, index_t{1000}, rows - 3}) {
    const std::vector<bf16> part(x.begin() + r0 * cols, x.begin() + (r0 + 3) * cols);
    const auto small = run_act_quant(dsa::cpu_backend{1}, part, 3, cols, dsa::act_quant_config{scale_format::ue8m0, 128});
    CHECK(std::equal(small.q.begin(), small.q.end(), big.q.begin() + r0 * cols));
    CHECK(std::equal(small.s.begin(), small.s.end(), big.s.begin() + r0 * (cols / 128)));
  }
  std::vector<bf16> y(x.size());
  dsa::act_dequant(dsa::cpu_backend{2}, dsa::make_view(big.q.data(), {rows, cols}),
                   dsa::make_view(big.s.data(), {rows, cols / 128}), dsa::make_view(y.data(), {rows, cols}));
  for (index_t r : {index_t{0}, index_t{777}, rows - 1}) {
    std::vector<bf16> ys(static_cast<std::size_t>(cols));
    dsa::act_dequant(dsa::cpu_backend{1}, dsa::make_view(big.q.data() + r * cols, {1, cols}),
                     dsa::make_view(big.s.data() + r * (cols / 128), {1, cols / 128}), dsa::make_view(ys.data(), {1, cols}));
    CHECK(std::equal(ys.begin(), ys.end(), y.begin() + r * cols));
  }
}

TEST_CASE("bad arguments are rejected with a clear dsa::error") {
  std::vector<float> x(4 * 256, 1.0f);
  std::vector<fp8_e4m3> q(4 * 256);
  std::vector<float> s(64);
  auto xv = dsa::make_view(x.data(), {4, 256});
  auto qv = dsa::make_view(q.data(), {4, 256});
  auto sv = dsa::make_view(s.data(), {4, 2});

  CHECK_NOTHROW(dsa::act_quant(dsa::cpu, xv, qv, sv));
  CHECK_THROWS_WITH_AS(dsa::act_quant(dsa::cpu, dsa::make_view(x.data(), {4, 200}), dsa::make_view(q.data(), {4, 200}), sv),
                       doctest::Contains("dsa::act_quant: x.extent(1) = 200; expected a multiple of the group size 128"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(dsa::act_quant(dsa::cpu, xv, qv, sv, {scale_format::ue8m0, 0}),
                       doctest::Contains("dsa::act_quant: cfg.group_size = 0; expected a positive group length"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::act_quant(dsa::cpu, xv, qv, sv, {scale_format::ue8m0, -128}),
                       doctest::Contains("cfg.group_size = -128"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::act_quant(dsa::cpu, xv, qv, sv, {static_cast<scale_format>(7), 128}),
                       doctest::Contains("dsa::act_quant: cfg.format = 7"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::act_quant(dsa::cpu, xv, qv, dsa::make_view(s.data(), {4, 4})),
                       doctest::Contains("dsa::act_quant: s.extent(1) = 4; expected 2"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::act_quant(dsa::cpu, xv, qv, dsa::make_view(s.data(), {3, 2})),
                       doctest::Contains("dsa::act_quant: s.extent(0) = 3; expected 4"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::act_quant(dsa::cpu, xv, dsa::make_view(q.data(), {4, 128}), sv),
                       doctest::Contains("dsa::act_quant: q.extent(1) = 128; expected 256"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::act_quant(dsa::cpu, xv, dsa::make_view(q.data(), {2, 256}), sv),
                       doctest::Contains("dsa::act_quant: q.extent(0) = 2; expected 4"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::act_quant(dsa::cpu, dsa::tensor_view<float, 2>(x.data(), {4, 128}, {256, 2}),
                                      dsa::make_view(q.data(), {4, 128}), dsa::make_view(s.data(), {4, 1})),
                       doctest::Contains("dsa::act_quant: x.stride(1) = 2; expected 1"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::act_quant(dsa::cpu, xv, dsa::tensor_view<fp8_e4m3, 2>(nullptr, {4, 256}, {256, 1}), sv),
                       doctest::Contains("dsa::act_quant: q.data = null"), dsa::error);

  std::vector<float> y(4 * 256);
  auto yv = dsa::make_view(y.data(), {4, 256});
  CHECK_NOTHROW(dsa::act_dequant(dsa::cpu, qv, sv, yv));
  CHECK_THROWS_WITH_AS(dsa::act_dequant(dsa::cpu, qv, sv, yv, 100),
                       doctest::Contains("dsa::act_dequant: q.extent(1) = 256; expected a multiple of the group size 100"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(dsa::act_dequant(dsa::cpu, qv, sv, yv, 0), doctest::Contains("dsa::act_dequant: group_size = 0"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(dsa::act_dequant(dsa::cpu, qv, sv, yv, 64),
                       doctest::Contains("dsa::act_dequant: s.extent(1) = 2; expected 4"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::act_dequant(dsa::cpu, qv, sv, dsa::make_view(y.data(), {4, 128})),
                       doctest::Contains("dsa::act_dequant: y.extent(1) = 128; expected 256"), dsa::error);

  std::vector<float> ws(4);
  CHECK_NOTHROW(dsa::weight_quant(dsa::cpu, xv, qv, dsa::make_view(ws.data(), {1, 2})));
  CHECK_THROWS_WITH_AS(dsa::weight_quant(dsa::cpu, xv, qv, dsa::make_view(ws.data(), {2, 2})),
                       doctest::Contains("dsa::weight_quant: s.extent(0) = 2; expected 1"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::weight_quant(dsa::cpu, xv, qv, dsa::make_view(ws.data(), {1, 3})),
                       doctest::Contains("dsa::weight_quant: s.extent(1) = 3; expected 2"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::weight_quant(dsa::cpu, xv, dsa::make_view(q.data(), {4, 255}), dsa::make_view(ws.data(), {1, 2})),
                       doctest::Contains("dsa::weight_quant: q.extent(1) = 255; expected 256"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::weight_dequant(dsa::cpu, qv, dsa::make_view(ws.data(), {1, 1}), yv),
                       doctest::Contains("dsa::weight_dequant: s.extent(1) = 1; expected 2"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::weight_dequant(dsa::cpu, qv, dsa::make_view(ws.data(), {1, 2}), dsa::make_view(y.data(), {3, 256})),
                       doctest::Contains("dsa::weight_dequant: w.extent(0) = 3; expected 4"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::weight_dequant(dsa::cpu, qv, dsa::tensor_view<float, 2>(ws.data(), {1, 2}, {2, 2}), yv),
                       doctest::Contains("dsa::weight_dequant: s.stride(1) = 2; expected 1"), dsa::error);
}

TEST_CASE("weight_quant / weight_dequant: ceil(extent / 128) is exact up to INT64_MAX") {
  // Issue 14: ceil_div was (a + 127) / 128, which overflowed for w of shape [0, INT64_MAX].
  constexpr index_t max = std::numeric_limits<index_t>::max();
  constexpr index_t blocks = index_t{1} << 56;  // ceil((2^63 - 1) / 128)
  float w = 0.0f;
  fp8_e4m3 q{};
  float s = 0.0f;
  CHECK_NOTHROW(dsa::weight_quant(dsa::cpu, dsa::make_view(&w, {0, max}), dsa::make_view(&q, {0, max}),
                                  dsa::make_view(&s, {0, blocks})));
  CHECK_NOTHROW(dsa::weight_quant(dsa::cpu, dsa::make_view(&w, {max, 0}), dsa::make_view(&q, {max, 0}),
                                  dsa::make_view(&s, {blocks, 0})));
  CHECK_THROWS_WITH_AS(dsa::weight_quant(dsa::cpu, dsa::make_view(&w, {0, max}), dsa::make_view(&q, {0, max}),
                                         dsa::make_view(&s, {0, 5})),
                       "dsa::weight_quant: s.extent(1) = 5; expected 72057594037927936 (ceil(w.extent(1) / 128))",
                       dsa::error);
  CHECK_NOTHROW(dsa::weight_dequant(dsa::cpu, dsa::make_view(&q, {0, max}), dsa::make_view(&s, {0, blocks}),
                                    dsa::make_view(&w, {0, max})));
  CHECK_THROWS_WITH_AS(dsa::weight_dequant(dsa::cpu, dsa::make_view(&q, {max, 0}), dsa::make_view(&s, {blocks - 1, 0}),
                                           dsa::make_view(&w, {max, 0})),
                       "dsa::weight_dequant: s.extent(0) = 72057594037927935; expected 72057594037927936 "
                       "(ceil(q.extent(0) / 128))",
                       dsa::error);
}
