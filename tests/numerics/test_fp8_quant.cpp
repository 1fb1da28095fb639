// The FP8 quantizer arithmetic shared by the CPU and CUDA backends (dsa/numerics/fp8_quant.hpp).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "dsa/numerics/fp8_quant.hpp"
#include "support/fp8_quant_reference.hpp"
#include "support/random.hpp"

namespace {

std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }
const float nan_f = std::numeric_limits<float>::quiet_NaN();
const float inf_f = std::numeric_limits<float>::infinity();

}  // namespace

TEST_CASE("act_quant_scale on hand-computed cases") {
  using dsa::scale_format;
  // fl32(1/448) = 0x3B124925 and 448 * that rounds to exactly 1.
  CHECK(bits(1.0f / 448.0f) == 0x3B124925u);
  CHECK(dsa::act_quant_scale(448.0f, scale_format::fp32) == 1.0f);
  CHECK(dsa::act_quant_scale(448.0f, scale_format::ue8m0) == 1.0f);
  CHECK(dsa::act_quant_scale(224.0f, scale_format::ue8m0) == 0.5f);
  CHECK(dsa::act_quant_scale(449.0f, scale_format::ue8m0) == 2.0f);
  // 1000 / 448 = 2.2321...: fp32 keeps the product, ue8m0 rounds it up to 4.
  CHECK(bits(dsa::act_quant_scale(1000.0f, scale_format::fp32)) == bits(1000.0f * (1.0f / 448.0f)));
  CHECK(dsa::act_quant_scale(1000.0f, scale_format::ue8m0) == 4.0f);
  CHECK(dsa::act_quant_scale(3.0f, scale_format::ue8m0) == 0.0078125f);  // 3/448 = 0.0067 -> 2^-7
  // The 1e-4 floor: zero groups get 1e-4/448 = 2.23e-7, i.e. 2^-22 as a power of two.
  CHECK(dsa::act_quant_scale(0.0f, scale_format::ue8m0) == std::ldexp(1.0f, -22));
  CHECK(bits(dsa::act_quant_scale(0.0f, scale_format::fp32)) == bits(1e-4f * (1.0f / 448.0f)));
  CHECK(dsa::act_quant_scale(5e-5f, scale_format::ue8m0) == std::ldexp(1.0f, -22));
  // Non-finite amax poisons the scale.
  CHECK(bits(dsa::act_quant_scale(nan_f, scale_format::fp32)) == 0x7FC00000u);
  CHECK(bits(dsa::act_quant_scale(-nan_f, scale_format::ue8m0)) == 0x7FC00000u);
  CHECK(std::isnan(dsa::act_quant_scale(inf_f, scale_format::ue8m0)));
  CHECK(dsa::act_quant_scale(inf_f, scale_format::fp32) == inf_f);
  // Against the oracle over many magnitudes.
  const auto u = dsa_test::uniform(4000, 1, -30.0f, 30.0f);
  for (float e : u) {
    const float amax = std::exp2(e);
    CAPTURE(amax);
    const float v = std::max(amax, 1e-4f) * (1.0f / 448.0f);
    REQUIRE(bits(dsa::act_quant_scale(amax, scale_format::fp32)) == bits(v));
    REQUIRE(bits(dsa::act_quant_scale(amax, scale_format::ue8m0)) == bits(dsa_test::ceil_pow2_reference(v)));
  }
}

TEST_CASE("weight_quant_scale is max(amax, 1e-8) / 448 with an IEEE division") {
  CHECK(dsa::weight_quant_scale(448.0f) == 1.0f);
  CHECK(dsa::weight_quant_scale(0.0f) == 1e-8f / 448.0f);
  CHECK(dsa::weight_quant_scale(1e-9f) == 1e-8f / 448.0f);
  CHECK(bits(dsa::weight_quant_scale(nan_f)) == 0x7FC00000u);
  CHECK(dsa::weight_quant_scale(inf_f) == inf_f);
  for (float e : dsa_test::uniform(2000, 2, -40.0f, 40.0f)) {
    const float amax = std::exp2(e);
    REQUIRE(bits(dsa::weight_quant_scale(amax)) == bits(dsa_test::div_fp32(std::max(amax, 1e-8f), 448.0f)));
  }
}

TEST_CASE("quantize_e4m3 rounds x / s to nearest even and saturates") {
  CHECK(dsa::quantize_e4m3(448.0f, 1.0f).bits == 0x7E);
  CHECK(dsa::quantize_e4m3(470.0f, 1.0f).bits == 0x7E);   // would round to 480 unsaturated
  CHECK(dsa::quantize_e4m3(1e30f, 1.0f).bits == 0x7E);
  CHECK(dsa::quantize_e4m3(-1e30f, 1.0f).bits == 0xFE);
  CHECK(dsa::quantize_e4m3(inf_f, 2.0f).bits == 0x7E);
  CHECK(dsa::quantize_e4m3(-inf_f, 2.0f).bits == 0xFE);
  CHECK(dsa::quantize_e4m3(1.0f, 0.5f).bits == 0x40);      // 2.0
  CHECK(dsa::quantize_e4m3(1.0625f, 1.0f).bits == 0x38);   // tie between 1 and 1.125 -> even (1)
  CHECK(dsa::quantize_e4m3(1.1875f, 1.0f).bits == 0x3A);   // tie between 1.125 and 1.25 -> even (1.25)
  CHECK(dsa::quantize_e4m3(std::ldexp(1.0f, -10), 1.0f).bits == 0x00);  // half the min subnormal -> even (0)
  CHECK(dsa::quantize_e4m3(std::ldexp(3.0f, -10), 1.0f).bits == 0x02);  // 1.5 subnormal units -> 2
  CHECK(dsa::quantize_e4m3(-0.0f, 1.0f).bits == 0x80);
  // NaN, whatever its sign or payload, and NaN scales give the one NaN code 0x7F.
  CHECK(dsa::quantize_e4m3(-nan_f, 1.0f).bits == 0x7F);
  CHECK(dsa::quantize_e4m3(-3.0f, nan_f).bits == 0x7F);
  CHECK(dsa::quantize_e4m3(inf_f, inf_f).bits == 0x7F);
  // Against the oracle.
  const auto x = dsa_test::normal(20000, 3, 100.0f);
  const auto e = dsa_test::uniform(20000, 4, -12.0f, 12.0f);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float s = std::exp2(std::round(e[i])) * (i % 2 ? 1.0f : 1.37f);
    REQUIRE(dsa::quantize_e4m3(x[i], s).bits == dsa_test::e4m3_encode_reference(dsa_test::div_fp32(x[i], s)));
  }
}

TEST_CASE("abs_max propagates NaN and infinity in any position") {
  std::vector<float> v = {1.0f, -3.0f, 2.0f, 0.5f};
  CHECK(dsa::abs_max(v.data(), 4) == 3.0f);
  CHECK(dsa::abs_max(v.data(), 0) == 0.0f);
  for (std::size_t pos = 0; pos < v.size(); ++pos) {
    auto w = v;
    w[pos] = -nan_f;
    CHECK(std::isnan(dsa::abs_max(w.data(), 4)));
    w[pos] = -inf_f;
    CHECK(dsa::abs_max(w.data(), 4) == inf_f);
  }
  std::vector<dsa::bf16> b = {dsa::bf16(-7.5f), dsa::bf16(2.0f), dsa::bf16::from_bits(0xFFC1)};
  CHECK(dsa::abs_max(b.data(), 2) == 7.5f);
  CHECK(std::isnan(dsa::abs_max(b.data(), 3)));
}

TEST_CASE("dequantize_e4m3 is code value times scale") {
  for (int c = 0; c < 256; ++c) {
    const auto q = dsa::fp8_e4m3::from_bits(static_cast<std::uint8_t>(c));
    const double want = dsa_test::e4m3_value(static_cast<std::uint8_t>(c)) * 0.25;
    if (std::isnan(want)) {
      CHECK(std::isnan(dsa::dequantize_e4m3(q, 0.25f)));
    } else {
      CHECK(dsa::dequantize_e4m3(q, 0.25f) == want);
    }
  }
}
