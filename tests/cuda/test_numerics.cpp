// The shared numerics and dsa/cuda/arch helpers run on the device give the host's bits exactly:
// fp8 (e4m3, e5m2) and bf16 conversions over every bf16 pattern, every fp8 code, every rounding
// tie and a million random floats; ue8m0 scales; warp reductions. Each case runs the launchers
// built with nvcc's default flags and with --use_fast_math. Needs a GPU; skips cleanly without one.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cuda/cuda_test.hpp"
#include "cuda/launchers.hpp"
#include "dsa/core/types.hpp"

namespace {

std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }
float from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }

const dsa_test::cuda_launchers* const builds[] = {&dsa_test::cuda_launchers_default(),
                                                  &dsa_test::cuda_launchers_fast_math()};

// Floats adjacent to every rounding boundary of a format: each representable value v, the
// midpoints between neighbours (the round-to-nearest-even ties) and the floats one ulp either
// side of those, with both signs.
template <class Fp8>
void add_boundaries(std::vector<float>& out) {
  std::vector<float> values;
  for (std::uint32_t c = 0; c < 0x80u; ++c) {
    const float v = Fp8::from_bits(static_cast<std::uint8_t>(c)).to_float();
    if (std::isfinite(v)) values.push_back(v);
  }
  std::sort(values.begin(), values.end());
  values.push_back(2 * values.back());  // the boundary above the largest finite value
  for (std::size_t i = 0; i + 1 < values.size(); ++i) {
    const float lo = values[i], hi = values[i + 1];
    const float mid = lo + (hi - lo) / 2;  // exact: the formats' gaps are powers of two
    for (float x : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, hi), hi}) {
      out.push_back(x);
      out.push_back(-x);
    }
  }
}

// Every bf16 bit pattern (so every exponent, every NaN class, both zeros and infinities), every
// fp8 boundary, and random floats: raw random bit patterns plus values spread over the fp8 range.
std::vector<float> conversion_inputs() {
  std::vector<float> x;
  for (std::uint32_t b = 0; b < 0x10000u; ++b) x.push_back(from_bits(b << 16));
  add_boundaries<dsa::fp8_e4m3>(x);
  add_boundaries<dsa::fp8_e5m2>(x);
  for (std::uint32_t u : {0x7F800001u, 0xFFFFFFFFu, 0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu}) x.push_back(from_bits(u));
  std::mt19937_64 rng(0x5EED0001u);
  for (int i = 0; i < (1 << 20); ++i) x.push_back(from_bits(static_cast<std::uint32_t>(rng())));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 18);
  for (int i = 0; i < (1 << 18); ++i) x.push_back(std::ldexp(normal(rng), exponent(rng)));
  while (x.size() % 32 != 0) x.push_back(0.0f);
  return x;
}

// Counts mismatches and reports the first few, so that a failure says which inputs differ. Strict
// bits, NaNs included: the conversions are integer operations on both sides (a NaN code's sign
// is set as a bit, never by a negation the device would canonicalise).
template <class A, class B, class Show>
void expect_identical(const std::string& what, const std::vector<A>& device, const std::vector<B>& host, Show show) {
  REQUIRE(device.size() == host.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < host.size(); ++i) {
    if (device[i] != host[i]) {
      if (++bad <= 5) MESSAGE((what + " differs at " + std::to_string(i) + ": " + show(i)));
    }
  }
  INFO(what);
  CHECK(bad == 0);
}

std::vector<std::uint32_t> float_bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = bits(v[i]);
  return r;
}

std::string hex(std::uint32_t u) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", u);
  return buf;
}

}  // namespace

TEST_CASE("fp8 and bf16 conversions on the device are bit-identical to the host") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  const auto x = conversion_inputs();
  std::vector<std::uint8_t> e4m3(x.size()), e5m2(x.size()), e5m2_sat(x.size());
  std::vector<std::uint16_t> bf(x.size());
  std::vector<std::uint32_t> e4m3_back(x.size()), e5m2_back(x.size()), bf_back(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const dsa::fp8_e4m3 a(x[i]);
    const dsa::fp8_e5m2 b(x[i]);
    const dsa::bf16 c(x[i]);
    e4m3[i] = a.bits;
    e5m2[i] = b.bits;
    e5m2_sat[i] = dsa::fp8_e5m2::from_float_bits_saturate(x[i]);
    bf[i] = c.bits;
    e4m3_back[i] = bits(a.to_float());
    e5m2_back[i] = bits(b.to_float());
    bf_back[i] = bits(c.to_float());
  }
  for (const auto* build : builds) {
    CAPTURE(build->name);
    const auto d = build->convert(x);
    auto show = [&](std::size_t i) { return "x = " + hex(bits(x[i])); };
    expect_identical("e4m3", d.e4m3, e4m3, show);
    expect_identical("e4m3 decoded", float_bits(d.e4m3_back), e4m3_back, show);
    expect_identical("e5m2", d.e5m2, e5m2, show);
    expect_identical("e5m2 saturating", d.e5m2_sat, e5m2_sat, show);
    expect_identical("e5m2 decoded", float_bits(d.e5m2_back), e5m2_back, show);
    expect_identical("bf16", d.bf16, bf, show);
    expect_identical("bf16 decoded", float_bits(d.bf16_back), bf_back, show);
  }
}

TEST_CASE("vectorised fp8 decode and encode on the device match the scalar host numerics") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  // Every code in every byte position of the 128-bit load: 16 rotations of 0..255.
  std::vector<std::uint8_t> codes;
  for (int shift = 0; shift < 16; ++shift) {
    for (int c = 0; c < 256; ++c) codes.push_back(static_cast<std::uint8_t>((c + shift) & 0xFF));
  }
  std::vector<std::uint32_t> e4m3(codes.size()), e5m2(codes.size());
  for (std::size_t i = 0; i < codes.size(); ++i) {
    e4m3[i] = bits(dsa::fp8_e4m3::from_bits(codes[i]).to_float());
    e5m2[i] = bits(dsa::fp8_e5m2::from_bits(codes[i]).to_float());
  }
  const auto x = conversion_inputs();
  std::vector<std::uint8_t> encoded(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) encoded[i] = dsa::fp8_e4m3(x[i]).bits;

  for (const auto* build : builds) {
    CAPTURE(build->name);
    const auto d = build->decode_fp8(codes);
    auto show = [&](std::size_t i) { return "code = " + std::to_string(codes[i]); };
    expect_identical("e4m3 scalar", float_bits(d.e4m3_scalar), e4m3, show);
    expect_identical("e4m3 x16", float_bits(d.e4m3_x16), e4m3, show);
    expect_identical("e4m3 x4 software", float_bits(d.e4m3_x4_sw), e4m3, show);
    expect_identical("e5m2 x4", float_bits(d.e5m2_x4), e5m2, show);
    expect_identical("e4m3 x16 encode", build->encode_e4m3x16(x), encoded,
                     [&](std::size_t i) { return "x = " + hex(bits(x[i])); });
  }
}

TEST_CASE("ue8m0 scales on the device match the host") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  // Every bf16 pattern (all exponents; powers of two exactly), then random fp32 patterns, whose
  // low mantissa bits decide the ceiling.
  std::vector<float> v;
  for (std::uint32_t b = 0; b < 0x10000u; ++b) v.push_back(from_bits(b << 16));
  std::mt19937_64 rng(0x5EED0002u);
  for (int i = 0; i < (1 << 18); ++i) v.push_back(from_bits(static_cast<std::uint32_t>(rng())));
  std::vector<std::uint8_t> ceil_bits(v.size()), from_pow2(v.size());
  std::vector<std::uint32_t> ceil_value(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto s = dsa::ue8m0::ceil_pow2(v[i]);
    ceil_bits[i] = s.bits;
    ceil_value[i] = bits(s.to_float());
    from_pow2[i] = dsa::ue8m0::from_pow2(v[i]).bits;
  }
  for (const auto* build : builds) {
    CAPTURE(build->name);
    const auto d = build->ue8m0(v);
    auto show = [&](std::size_t i) { return "v = " + hex(bits(v[i])); };
    expect_identical("ceil_pow2", d.ceil_pow2, ceil_bits, show);
    expect_identical("ceil_pow2 value", float_bits(d.ceil_pow2_value), ceil_value, show);
    expect_identical("from_pow2", d.from_pow2, from_pow2, show);
  }
}

TEST_CASE("warp reductions give every lane the butterfly's result") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  constexpr int warps = 64;
  std::mt19937_64 rng(0x5EED0003u);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  std::vector<float> x(32 * warps);
  for (auto& v : x) v = normal(rng);
  x[5] = std::numeric_limits<float>::quiet_NaN();  // fmaxf/fminf ignore a NaN lane
  x[40] = -std::numeric_limits<float>::infinity();

  // The host replays the xor butterfly: after the step with offset o, lane i holds
  // op(v[i], v[i ^ o]) — the operand order the device uses.
  auto butterfly = [&](auto v, int width, auto op) {
    for (int o = width / 2; o > 0; o /= 2) {
      auto next = v;
      for (std::size_t i = 0; i < v.size(); ++i) next[i] = op(v[i], v[i ^ static_cast<std::size_t>(o)]);
      v = next;
    }
    return v;
  };
  auto sum = [](auto a, auto b) { return a + b; };
  auto fmax = [](float a, float b) { return std::fmax(a, b); };
  auto fmin = [](float a, float b) { return std::fmin(a, b); };
  // The sums run over the same values without the NaN and the infinity, which would swamp them.
  std::vector<float> xs = x;
  xs[5] = 1.0f;
  xs[40] = -2.0f;
  std::vector<std::int32_t> xsi(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) xsi[i] = static_cast<std::int32_t>(xs[i]);

  for (const auto* build : builds) {
    CAPTURE(build->name);
    const auto d = build->warp_reduce(x);
    const auto ds = build->warp_reduce(xs);
    auto show = [&](std::size_t i) { return "lane " + std::to_string(i % 32) + " of warp " + std::to_string(i / 32); };
    expect_identical("sum32", float_bits(ds.sum32), float_bits(butterfly(xs, 32, sum)), show);
    expect_identical("sum8", float_bits(ds.sum8), float_bits(butterfly(xs, 8, sum)), show);
    expect_identical("max32", float_bits(d.max32), float_bits(butterfly(x, 32, fmax)), show);
    expect_identical("min32", float_bits(d.min32), float_bits(butterfly(x, 32, fmin)), show);
    expect_identical("max8", float_bits(d.max8), float_bits(butterfly(x, 8, fmax)), show);
    expect_identical("isum32", ds.isum32, butterfly(xsi, 32, sum), show);
    // Every lane of a warp holds the same bits.
    for (int w = 0; w < warps; ++w) {
      for (int l = 1; l < 32; ++l) REQUIRE(bits(ds.sum32[32 * w + l]) == bits(ds.sum32[32 * w]));
    }
  }
}
