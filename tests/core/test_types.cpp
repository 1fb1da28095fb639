// The storage types of dsa/core/types.hpp against independent formulas and brute-force oracles.
//
// The oracles here work in double on decoded values (nearest representable value by scanning
// every code, ties to the even code), not on bit patterns, so they share no logic with the
// integer-arithmetic conversions they check.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "dsa/core/types.hpp"

namespace {

float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::uint32_t float_to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- E4M3FN: S.EEEE.MMM, bias 7, no infinities, NaN = S.1111.111 --------------------------

double e4m3_formula(unsigned code) {
  const int sign = (code >> 7) & 1, exp = (code >> 3) & 0xF, man = code & 7;
  double mag;
  if (exp == 15 && man == 7) return std::numeric_limits<double>::quiet_NaN();
  if (exp == 0) {
    mag = std::ldexp(static_cast<double>(man), -9);  // man/8 * 2^(1-7)
  } else {
    mag = std::ldexp(1.0 + man / 8.0, exp - 7);
  }
  return sign ? -mag : mag;
}

// Nearest of the 127 non-negative finite codes to |x|, ties to the even code, then the sign.
// Above 448 everything saturates to 448 (docs/design.md "Number formats": round, then saturate).
std::uint8_t e4m3_oracle(float x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7F;
  const double a = std::fabs(static_cast<double>(x));
  unsigned best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (unsigned c = 0; c <= 0x7E; ++c) {
    const double d = std::fabs(e4m3_formula(c) - a);
    if (d < best_d || (d == best_d && (c & 1u) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return static_cast<std::uint8_t>(sign | best);
}

// ---- E5M2: S.EEEEE.MM, bias 15, IEEE-like ------------------------------------------------

double e5m2_formula(unsigned code) {
  const int sign = (code >> 7) & 1, exp = (code >> 2) & 0x1F, man = code & 3;
  double mag;
  if (exp == 31) {
    if (man != 0) return std::numeric_limits<double>::quiet_NaN();
    mag = std::numeric_limits<double>::infinity();
  } else if (exp == 0) {
    mag = std::ldexp(static_cast<double>(man), -16);  // man/4 * 2^(1-15)
  } else {
    mag = std::ldexp(1.0 + man / 4.0, exp - 15);
  }
  return sign ? -mag : mag;
}

// Round to nearest even among the finite codes; at or past the overflow threshold
// 57344 + 4096 (max + half an ulp, whose tie goes to the even code: infinity) -> inf or max.
std::uint8_t e5m2_oracle(float x, bool saturate) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 61440.0) return sign | (saturate ? 0x7B : 0x7C);
  unsigned best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (unsigned c = 0; c <= 0x7B; ++c) {
    const double d = std::fabs(e5m2_formula(c) - a);
    if (d < best_d || (d == best_d && (c & 1u) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return static_cast<std::uint8_t>(sign | best);
}

// bf16 by value: the two neighbours (truncation and the next one up), nearest, ties to even.
std::uint16_t bf16_oracle(float x) {
  const std::uint32_t u = float_to_bits(x);
  const std::uint16_t lo = static_cast<std::uint16_t>(u >> 16);
  const std::uint16_t hi = static_cast<std::uint16_t>(lo + 1);
  const double v = x;
  const double vlo = bits_to_float(static_cast<std::uint32_t>(lo) << 16);
  // hi may be the infinity pattern; treat it as 2^128 (where an unbounded exponent would be).
  const double vhi = (hi & 0x7FFF) == 0x7F80 ? std::copysign(std::ldexp(1.0, 128), v)
                                              : static_cast<double>(bits_to_float(static_cast<std::uint32_t>(hi) << 16));
  const double dlo = std::fabs(v - vlo), dhi = std::fabs(v - vhi);
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1u) ? hi : lo;
}

// Inputs for the brute-force comparisons: random bit patterns, uniform values over the
// format's range, log-uniform magnitudes, and the floats around every representable value
// and every midpoint.
std::vector<float> probe_floats(double (*decode)(unsigned), unsigned max_code, double min_pow2, double max_pow2,
                                std::uint64_t seed) {
  std::vector<float> v;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 20000; ++i) {
    const float f = bits_to_float(bits(rng));
    if (!std::isnan(f)) v.push_back(f);
  }
  std::uniform_real_distribution<float> lin(static_cast<float>(-std::ldexp(1.0, static_cast<int>(max_pow2))),
                                            static_cast<float>(std::ldexp(1.0, static_cast<int>(max_pow2))));
  std::uniform_real_distribution<double> expo(min_pow2, max_pow2);
  for (int i = 0; i < 20000; ++i) {
    v.push_back(lin(rng));
    const float m = static_cast<float>(std::exp2(expo(rng)));
    v.push_back((i & 1) ? -m : m);
  }
  for (unsigned c = 0; c <= max_code; ++c) {
    const float here = static_cast<float>(decode(c));
    const float next = c < max_code ? static_cast<float>(decode(c + 1)) : here * 2.0f;
    const float mid = static_cast<float>((static_cast<double>(here) + next) / 2.0);
    for (float f : {here, mid}) {
      for (float g : {f, std::nextafter(f, kInf), std::nextafter(f, -kInf)}) {
        v.push_back(g);
        v.push_back(-g);
      }
    }
  }
  for (float f : {0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::denorm_min(), 1e-30f, 1e30f}) {
    v.push_back(f);
    v.push_back(-f);
  }
  return v;
}

}  // namespace

// ============================================================================================
TEST_CASE("fp8_e4m3: every code decodes as S.EEEE.MMM with bias 7") {
  for (unsigned c = 0; c < 256; ++c) {
    CAPTURE(c);
    const float got = dsa::fp8_e4m3::from_bits(static_cast<std::uint8_t>(c)).to_float();
    const double want = e4m3_formula(c);
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
    } else {
      CHECK(static_cast<double>(got) == want);
      CHECK(std::signbit(got) == ((c & 0x80u) != 0));
    }
  }
  CHECK(std::isnan(dsa::fp8_e4m3::from_bits(0x7F).to_float()));
  CHECK(std::isnan(dsa::fp8_e4m3::from_bits(0xFF).to_float()));
  CHECK(dsa::fp8_e4m3::from_bits(0x7E).to_float() == 448.0f);
  CHECK(dsa::fp8_e4m3::from_bits(0xFE).to_float() == -448.0f);
  CHECK(dsa::fp8_e4m3::from_bits(0x01).to_float() == std::ldexp(1.0f, -9));
  CHECK(dsa::fp8_e4m3::from_bits(0x08).to_float() == std::ldexp(1.0f, -6));  // min normal
  CHECK(dsa::fp8_e4m3::from_bits(0x78).to_float() == 256.0f);                 // S.1111.000 is a number
  CHECK(dsa::fp8_e4m3::max_finite == 448.0f);
  CHECK(static_cast<float>(dsa::fp8_e4m3::from_bits(0x38)) == 1.0f);
}

TEST_CASE("fp8_e4m3: encode(decode(c)) == c for every non-NaN code") {
  for (unsigned c = 0; c < 256; ++c) {
    if ((c & 0x7Fu) == 0x7Fu) continue;
    CAPTURE(c);
    CHECK(dsa::fp8_e4m3::from_float_bits(dsa::fp8_e4m3::from_bits(static_cast<std::uint8_t>(c)).to_float()) == c);
  }
}

TEST_CASE("fp8_e4m3: midpoints round to the even code, their neighbours to the nearest") {
  for (unsigned c = 0; c < 0x7E; ++c) {
    CAPTURE(c);
    const double lo = e4m3_formula(c), hi = e4m3_formula(c + 1);
    const float mid = static_cast<float>((lo + hi) / 2.0);
    REQUIRE(static_cast<double>(mid) == (lo + hi) / 2.0);  // midpoints are exact in fp32
    const unsigned even = (c & 1u) ? c + 1 : c;
    CHECK(dsa::fp8_e4m3::from_float_bits(mid) == even);
    CHECK(dsa::fp8_e4m3::from_float_bits(-mid) == (0x80u | even));
    CHECK(dsa::fp8_e4m3::from_float_bits(std::nextafter(mid, kInf)) == c + 1);
    CHECK(dsa::fp8_e4m3::from_float_bits(std::nextafter(mid, -kInf)) == c);
    CHECK(dsa::fp8_e4m3::from_float_bits(-std::nextafter(mid, kInf)) == (0x80u | (c + 1)));
  }
  // A few by hand: 1 + 1/16 is the midpoint of 1 (0x38, even) and 1.125 (0x39).
  CHECK(dsa::fp8_e4m3::from_float_bits(1.0625f) == 0x38);
  CHECK(dsa::fp8_e4m3::from_float_bits(1.1875f) == 0x3A);  // midpoint of 1.125 and 1.25 -> 1.25
  CHECK(dsa::fp8_e4m3::from_float_bits(std::ldexp(1.0f, -10)) == 0x00);         // half the min subnormal
  CHECK(dsa::fp8_e4m3::from_float_bits(std::ldexp(3.0f, -10)) == 0x02);         // 1.5 units -> 2 (even)
  CHECK(dsa::fp8_e4m3::from_float_bits(std::ldexp(1.875f, -6) + std::ldexp(1.0f, -10)) == 0x10);  // across an exponent
}

TEST_CASE("fp8_e4m3: saturation, NaN, signed zero and fp32 subnormals") {
  CHECK(dsa::fp8_e4m3::from_float_bits(448.0f) == 0x7E);
  CHECK(dsa::fp8_e4m3::from_float_bits(449.0f) == 0x7E);
  CHECK(dsa::fp8_e4m3::from_float_bits(464.0f) == 0x7E);  // would round to 480: saturates
  CHECK(dsa::fp8_e4m3::from_float_bits(480.0f) == 0x7E);
  CHECK(dsa::fp8_e4m3::from_float_bits(1e9f) == 0x7E);
  CHECK(dsa::fp8_e4m3::from_float_bits(std::numeric_limits<float>::max()) == 0x7E);
  CHECK(dsa::fp8_e4m3::from_float_bits(kInf) == 0x7E);
  CHECK(dsa::fp8_e4m3::from_float_bits(-kInf) == 0xFE);
  CHECK(dsa::fp8_e4m3::from_float_bits(-1e9f) == 0xFE);
  CHECK((dsa::fp8_e4m3::from_float_bits(kNaN) & 0x7F) == 0x7F);
  CHECK((dsa::fp8_e4m3::from_float_bits(-kNaN) & 0x7F) == 0x7F);
  CHECK((dsa::fp8_e4m3::from_float_bits(bits_to_float(0x7F800001u)) & 0x7F) == 0x7F);  // signalling NaN
  CHECK(std::isnan(dsa::fp8_e4m3(kNaN).to_float()));
  CHECK(dsa::fp8_e4m3::from_float_bits(0.0f) == 0x00);
  CHECK(dsa::fp8_e4m3::from_float_bits(-0.0f) == 0x80);
  CHECK(std::signbit(dsa::fp8_e4m3(-0.0f).to_float()));
  CHECK(dsa::fp8_e4m3::from_float_bits(std::numeric_limits<float>::denorm_min()) == 0x00);
  CHECK(dsa::fp8_e4m3::from_float_bits(-std::numeric_limits<float>::denorm_min()) == 0x80);
  CHECK(dsa::fp8_e4m3::from_float_bits(std::numeric_limits<float>::min()) == 0x00);
  CHECK(dsa::fp8_e4m3::from_float_bits(bits_to_float(0x007FFFFFu)) == 0x00);  // largest fp32 subnormal
}

TEST_CASE("fp8_e4m3: encoding equals the brute-force nearest-value oracle") {
  const auto inputs = probe_floats(e4m3_formula, 0x7E, -12.0, 10.0, 1234);
  int mismatches = 0;
  for (float x : inputs) {
    const std::uint8_t got = dsa::fp8_e4m3::from_float_bits(x);
    const std::uint8_t want = e4m3_oracle(x);
    if (got != want) {
      if (++mismatches <= 10) FAIL_CHECK("x = " << x << " (bits " << float_to_bits(x) << "): got " << int(got) << ", want " << int(want));
    }
  }
  CHECK(mismatches == 0);
  CHECK(inputs.size() > 60000);
}

// ============================================================================================
TEST_CASE("fp8_e5m2: every code decodes as S.EEEEE.MM with bias 15, infinities and NaNs") {
  for (unsigned c = 0; c < 256; ++c) {
    CAPTURE(c);
    const float got = dsa::fp8_e5m2::from_bits(static_cast<std::uint8_t>(c)).to_float();
    const double want = e5m2_formula(c);
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
    } else {
      CHECK(static_cast<double>(got) == want);
      CHECK(std::signbit(got) == ((c & 0x80u) != 0));
    }
  }
  CHECK(dsa::fp8_e5m2::from_bits(0x7C).to_float() == kInf);
  CHECK(dsa::fp8_e5m2::from_bits(0xFC).to_float() == -kInf);
  CHECK(dsa::fp8_e5m2::from_bits(0x7B).to_float() == 57344.0f);
  CHECK(dsa::fp8_e5m2::max_finite == 57344.0f);
  CHECK(dsa::fp8_e5m2::from_bits(0x01).to_float() == std::ldexp(1.0f, -16));
  for (unsigned c : {0x7Du, 0x7Eu, 0x7Fu, 0xFDu, 0xFEu, 0xFFu}) CHECK(std::isnan(dsa::fp8_e5m2::from_bits(static_cast<std::uint8_t>(c)).to_float()));
}

TEST_CASE("fp8_e5m2: round trips, ties to even, overflow to infinity or saturation, NaN") {
  for (unsigned c = 0; c < 256; ++c) {
    if ((c & 0x7Fu) > 0x7Cu) continue;  // NaNs
    CAPTURE(c);
    const float v = dsa::fp8_e5m2::from_bits(static_cast<std::uint8_t>(c)).to_float();
    CHECK(dsa::fp8_e5m2::from_float_bits(v) == c);
    if ((c & 0x7Fu) != 0x7Cu) CHECK(dsa::fp8_e5m2::from_float_bits_saturate(v) == c);
  }
  for (unsigned c = 0; c < 0x7B; ++c) {
    CAPTURE(c);
    const float mid = static_cast<float>((e5m2_formula(c) + e5m2_formula(c + 1)) / 2.0);
    const unsigned even = (c & 1u) ? c + 1 : c;
    CHECK(dsa::fp8_e5m2::from_float_bits(mid) == even);
    CHECK(dsa::fp8_e5m2::from_float_bits(-mid) == (0x80u | even));
    CHECK(dsa::fp8_e5m2::from_float_bits(std::nextafter(mid, kInf)) == c + 1);
    CHECK(dsa::fp8_e5m2::from_float_bits(std::nextafter(mid, -kInf)) == c);
  }
  // Overflow: 61440 is the midpoint of 57344 (0x7B, odd) and where 65536 would be: ties to
  // even, which is the infinity code.
  CHECK(dsa::fp8_e5m2::from_float_bits(std::nextafter(61440.0f, 0.0f)) == 0x7B);
  CHECK(dsa::fp8_e5m2::from_float_bits(61440.0f) == 0x7C);
  CHECK(dsa::fp8_e5m2::from_float_bits(1e9f) == 0x7C);
  CHECK(dsa::fp8_e5m2::from_float_bits(-1e9f) == 0xFC);
  CHECK(dsa::fp8_e5m2::from_float_bits(kInf) == 0x7C);
  CHECK(dsa::fp8_e5m2::from_float_bits(-kInf) == 0xFC);
  CHECK(dsa::fp8_e5m2::from_float_bits_saturate(61440.0f) == 0x7B);
  CHECK(dsa::fp8_e5m2::from_float_bits_saturate(1e9f) == 0x7B);
  CHECK(dsa::fp8_e5m2::from_float_bits_saturate(-1e9f) == 0xFB);
  CHECK(dsa::fp8_e5m2::from_float_bits_saturate(kInf) == 0x7B);
  CHECK(dsa::fp8_e5m2::from_float_bits_saturate(-kInf) == 0xFB);
  for (float n : {kNaN, -kNaN, bits_to_float(0x7F800001u)}) {
    CHECK((dsa::fp8_e5m2::from_float_bits(n) & 0x7F) > 0x7C);
    CHECK((dsa::fp8_e5m2::from_float_bits_saturate(n) & 0x7F) > 0x7C);
    CHECK(std::isnan(dsa::fp8_e5m2(n).to_float()));
  }
  CHECK(dsa::fp8_e5m2::from_float_bits(-0.0f) == 0x80);
  CHECK(dsa::fp8_e5m2::from_float_bits(std::numeric_limits<float>::denorm_min()) == 0x00);
  CHECK(dsa::fp8_e5m2::from_float_bits(std::ldexp(1.0f, -17)) == 0x00);  // half the min subnormal: even
  CHECK(dsa::fp8_e5m2::from_float_bits(std::nextafter(std::ldexp(1.0f, -17), 1.0f)) == 0x01);
}

TEST_CASE("fp8_e5m2: encoding equals the brute-force nearest-value oracle") {
  const auto inputs = probe_floats(e5m2_formula, 0x7B, -19.0, 17.0, 4321);
  int mismatches = 0;
  for (float x : inputs) {
    if (std::isinf(x)) continue;  // checked above; the oracle's threshold test covers them anyway
    for (bool sat : {false, true}) {
      const std::uint8_t got = sat ? dsa::fp8_e5m2::from_float_bits_saturate(x) : dsa::fp8_e5m2::from_float_bits(x);
      const std::uint8_t want = e5m2_oracle(x, sat);
      if (got != want && ++mismatches <= 10) {
        FAIL_CHECK("x = " << x << " saturate " << sat << ": got " << int(got) << ", want " << int(want));
      }
    }
  }
  CHECK(mismatches == 0);
}

// ============================================================================================
TEST_CASE("bf16: all 65536 bf16 -> float -> bf16 round trips; NaNs stay NaN and become quiet") {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const dsa::bf16 h = dsa::bf16::from_bits(static_cast<std::uint16_t>(b));
    const float f = h.to_float();
    REQUIRE(float_to_bits(f) == b << 16);
    const std::uint16_t back = dsa::bf16::from_float_bits(f);
    if (std::isnan(f)) {
      REQUIRE(back == (b | 0x0040u));  // payload and sign kept, quiet bit set
    } else {
      REQUIRE(back == b);
    }
  }
}

TEST_CASE("bf16: round to nearest even, ties between every pair of neighbours, overflow to infinity") {
  // Every finite bf16 b: b.8000 is the midpoint to b+1; ties go to the even one.
  for (std::uint32_t b = 0; b < 65536; ++b) {
    if ((b & 0x7F80u) == 0x7F80u) continue;  // inf/NaN
    const std::uint32_t mid = (b << 16) | 0x8000u;
    const std::uint16_t even = static_cast<std::uint16_t>((b & 1u) ? b + 1 : b);
    REQUIRE(dsa::bf16::from_float_bits(bits_to_float(mid)) == even);
    REQUIRE(dsa::bf16::from_float_bits(bits_to_float(mid - 1)) == b);
    REQUIRE(dsa::bf16::from_float_bits(bits_to_float(mid + 1)) == static_cast<std::uint16_t>(b + 1));
  }
  CHECK(dsa::bf16::from_float_bits(std::numeric_limits<float>::max()) == 0x7F80);  // rounds up to inf
  CHECK(dsa::bf16::from_float_bits(-std::numeric_limits<float>::max()) == 0xFF80);
  CHECK(dsa::bf16::from_float_bits(bits_to_float(0x7F7F7FFFu)) == 0x7F7F);  // below the midpoint: max finite
  CHECK(dsa::bf16::from_float_bits(bits_to_float(0x7F7F8000u)) == 0x7F80);  // tie, 0x7F7F odd: inf
  CHECK(dsa::bf16::from_float_bits(kInf) == 0x7F80);
  CHECK(dsa::bf16::from_float_bits(-kInf) == 0xFF80);
  CHECK(dsa::bf16::from_float_bits(-0.0f) == 0x8000);
  const std::uint16_t snan = dsa::bf16::from_float_bits(bits_to_float(0x7F800001u));  // payload only in the low half
  CHECK((snan & 0x7F80u) == 0x7F80u);
  CHECK((snan & 0x7Fu) != 0u);
  CHECK((snan & 0x40u) != 0u);
  CHECK(dsa::bf16(1.0f) == dsa::bf16::from_bits(0x3F80));
  CHECK(static_cast<float>(dsa::bf16(3.140625f)) == 3.140625f);
}

TEST_CASE("bf16: encoding equals the by-value oracle on random and edge floats") {
  std::mt19937_64 rng(99);
  std::uniform_int_distribution<std::uint32_t> bits;
  int mismatches = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = bits_to_float(bits(rng));
    if (std::isnan(x) || std::isinf(x)) continue;
    if (dsa::bf16::from_float_bits(x) != bf16_oracle(x) && ++mismatches <= 10) FAIL_CHECK("x bits " << float_to_bits(x));
  }
  CHECK(mismatches == 0);
}

// ============================================================================================
TEST_CASE("ue8m0: powers of two, values just above them, and the special codes") {
  for (int e = -126; e <= 127; ++e) {
    CAPTURE(e);
    const float p = std::ldexp(1.0f, e);
    const dsa::ue8m0 s = dsa::ue8m0::ceil_pow2(p);
    CHECK(s.bits == e + 127);
    CHECK(s.to_float() == p);
    CHECK(dsa::ue8m0::from_pow2(p).bits == e + 127);
    const dsa::ue8m0 up = dsa::ue8m0::ceil_pow2(std::nextafter(p, kInf));
    if (e < 127) {
      CHECK(up.bits == e + 128);
      CHECK(up.to_float() == 2.0f * p);
    } else {
      CHECK(up.bits == 254);  // saturates at 2^127
    }
    if (e < 127) CHECK(dsa::ue8m0::ceil_pow2(std::nextafter(2.0f * p, 0.0f)).bits == e + 128);
  }
  // ceil_pow2 is the smallest power of two >= v.
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> expo(-120.0, 120.0);
  for (int i = 0; i < 10000; ++i) {
    const float v = static_cast<float>(std::exp2(expo(rng)));
    const float s = dsa::ue8m0::ceil_pow2(v).to_float();
    REQUIRE(s >= v);
    REQUIRE(s / 2.0f < v);
  }
  CHECK(dsa::ue8m0{}.bits == 127);
  CHECK(dsa::ue8m0{}.to_float() == 1.0f);
  CHECK(dsa::ue8m0::from_bits(0).to_float() == std::ldexp(1.0f, -127));  // an fp32 subnormal
  CHECK(std::isnan(dsa::ue8m0::from_bits(0xFF).to_float()));
  CHECK(dsa::ue8m0::from_bits(254).to_float() == std::ldexp(1.0f, 127));
}

TEST_CASE("ue8m0: from_pow2(to_float(c)) == c for every code") {
  for (unsigned c = 0; c < 256; ++c) {
    CAPTURE(c);
    const dsa::ue8m0 s = dsa::ue8m0::from_bits(static_cast<std::uint8_t>(c));
    CHECK(dsa::ue8m0::from_pow2(s.to_float()) == s);
    if (c >= 1 && c <= 254) CHECK(static_cast<float>(s) == std::ldexp(1.0f, static_cast<int>(c) - 127));
  }
}

TEST_CASE("to_float / from_float / dtype_name") {
  CHECK(dsa::to_float(2.5f) == 2.5f);
  CHECK(dsa::to_float(dsa::bf16(2.5f)) == 2.5f);
  CHECK(dsa::to_float(dsa::fp8_e4m3(2.5f)) == 2.5f);
  CHECK(dsa::to_float(dsa::fp8_e5m2(2.5f)) == 2.5f);
  CHECK(dsa::from_float<float>(0.1f) == 0.1f);
  CHECK(dsa::from_float<dsa::fp8_e4m3>(1000.0f).bits == 0x7E);
  CHECK(dsa::from_float<dsa::bf16>(1.0f).bits == 0x3F80);
  CHECK(std::string(dsa::dtype_name<float>()) == "F32");
  CHECK(std::string(dsa::dtype_name<dsa::bf16>()) == "BF16");
  CHECK(std::string(dsa::dtype_name<dsa::fp8_e4m3>()) == "F8_E4M3");
  CHECK(std::string(dsa::dtype_name<dsa::fp8_e5m2>()) == "F8_E5M2");
  CHECK(std::string(dsa::dtype_name<dsa::ue8m0>()) == "UE8M0");
  CHECK(std::string(dsa::dtype_name<std::int32_t>()) == "I32");
  CHECK(std::string(dsa::dtype_name<std::int64_t>()) == "I64");
  CHECK(std::string(dsa::dtype_name<std::uint8_t>()) == "U8");
  static_assert(std::is_trivially_copyable_v<dsa::bf16> && std::is_trivially_copyable_v<dsa::fp8_e4m3> &&
                std::is_trivially_copyable_v<dsa::fp8_e5m2> && std::is_trivially_copyable_v<dsa::ue8m0>);
}
