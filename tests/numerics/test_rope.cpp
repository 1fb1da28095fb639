// dsa/numerics/rope.hpp: YaRN frequencies, the mscale factor, cos/sin and the pair rotation,
// checked against hand-computed values for the golden tiny model's configuration
// (factor 40, original 4096, beta_fast 32, beta_slow 1, max 8192) and double references.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>

#include "dsa/numerics/rope.hpp"
#include "support/dense_reference.hpp"

namespace {

dsa::rope_config tiny_config() {
  dsa::rope_config c;
  c.dim = 64;
  c.base = 10000.0f;
  c.factor = 40.0f;
  c.original_max_position = 4096;
  c.max_position = 8192;
  c.beta_fast = 32.0f;
  c.beta_slow = 1.0f;
  return c;
}

bool close_rel(double a, double b, double rel) { return std::fabs(a - b) <= rel * std::fabs(b); }

}  // namespace

TEST_CASE("YaRN is on exactly when max_position exceeds the original context") {
  dsa::rope_config c = tiny_config();
  CHECK(dsa::rope_yarn_enabled(c));
  c.max_position = 4096;
  CHECK_FALSE(dsa::rope_yarn_enabled(c));
  // Off: the plain frequencies, and mscale 1.
  CHECK(dsa::rope_inv_freq(c, 16) == dsa::rope_base_inv_freq(c, 16));
  CHECK(dsa::rope_yarn_mscale(c) == 1.0);
}

TEST_CASE("YaRN correction range and frequencies of the tiny model, by hand") {
  const dsa::rope_config c = tiny_config();
  // c(32) = 64 ln(4096 / 64 pi) / (2 ln 1e4) = 10.472..., c(1) = 22.513...
  CHECK(dsa::rope_yarn_correction_dim(c, 32.0) == doctest::Approx(10.472240810318025).epsilon(1e-12));
  CHECK(dsa::rope_yarn_correction_dim(c, 1.0) == doctest::Approx(22.513440636877274).epsilon(1e-12));
  const dsa::rope_yarn_range r = dsa::rope_yarn_correction_range(c);
  CHECK(r.low == 10.0);
  CHECK(r.high == 23.0);
  // Below the ramp the original frequency, above it f / 40, exactly; in between the blend.
  CHECK(dsa::rope_inv_freq(c, 0) == 1.0f);
  for (std::int64_t j = 0; j <= 10; ++j) CHECK(dsa::rope_inv_freq(c, j) == dsa::rope_base_inv_freq(c, j));
  for (std::int64_t j = 23; j < 32; ++j) {
    CHECK(dsa::rope_inv_freq(c, j) == dsa::detail::div_rn(dsa::rope_base_inv_freq(c, j), 40.0f));
  }
  // Hand values: f_16 = 1e4^-0.5 = 0.01, ramp 6/13: 0.01 (6/520 + 7/13) = 0.0055.
  CHECK(close_rel(dsa::rope_inv_freq(c, 16), 0.0055, 3e-7));
  CHECK(close_rel(dsa::rope_inv_freq(c, 10), 0.05623413251903491, 3e-7));
  CHECK(close_rel(dsa::rope_inv_freq(c, 11), 0.03900692656714386, 3e-7));
  CHECK(close_rel(dsa::rope_inv_freq(c, 22), 0.0001778279410038922, 3e-7));
  CHECK(close_rel(dsa::rope_inv_freq(c, 23), 3.33380358040831e-05, 3e-7));
  CHECK(close_rel(dsa::rope_inv_freq(c, 31), 3.3338035804083097e-06, 3e-7));
  // Every frequency against the all-double formula (the fp32 rounding points cost a few ulps).
  for (std::int64_t j = 0; j < 32; ++j) {
    CAPTURE(j);
    const double ref = dsa_test::yarn_inv_freq_reference(10000.0, 64, 40.0, 4096.0, 32.0, 1.0, true, j);
    CHECK(close_rel(dsa::rope_inv_freq(c, j), ref, 4e-7));
  }
  // Frequencies decrease monotonically.
  for (std::int64_t j = 1; j < 32; ++j) CHECK(dsa::rope_inv_freq(c, j) < dsa::rope_inv_freq(c, j - 1));
}

TEST_CASE("the ramp guard and clamping of the correction range") {
  dsa::rope_config c = tiny_config();
  // beta_fast == beta_slow: floor and ceil of one value; equal only for an integral c(r).
  c.beta_fast = c.beta_slow = 4.0f;
  const dsa::rope_yarn_range r = dsa::rope_yarn_correction_range(c);
  CHECK(r.high > r.low);
  // A short original context pushes low below 0 (clamped) and a long one high above dim - 1.
  c = tiny_config();
  c.original_max_position = 8;
  c.max_position = 16;
  CHECK(dsa::rope_yarn_correction_range(c).low == 0.0);
  c = tiny_config();
  c.original_max_position = std::int64_t{1} << 40;
  c.max_position = std::int64_t{1} << 41;
  CHECK(dsa::rope_yarn_correction_range(c).high == 63.0);
}

TEST_CASE("mscale and the MLA softmax scale") {
  const dsa::rope_config c = tiny_config();
  CHECK(dsa::rope_yarn_mscale(c) == doctest::Approx(0.1 * std::log(40.0) + 1.0).epsilon(1e-15));
  CHECK(dsa::rope_yarn_mscale(c) == doctest::Approx(1.3688879454113936).epsilon(1e-15));
  // qk_head_dim 128 (tiny: 64 + 64) and 192 (V3.2: 128 + 64).
  CHECK(dsa::rope_yarn_softmax_scale(128, c) == static_cast<float>(0.16562687709876717));
  CHECK(dsa::rope_yarn_softmax_scale(192, c) == static_cast<float>(0.1352337788608801));
  dsa::rope_config off = c;
  off.max_position = 4096;
  CHECK(dsa::rope_yarn_softmax_scale(192, off) == static_cast<float>(1.0 / std::sqrt(192.0)));
}

TEST_CASE("cos/sin are the double values rounded to fp32; rotation rounds once") {
  const float f = 0.0055f;
  for (std::int32_t pos : {0, 1, 7, 4095, 8191, -3, 100000}) {
    const dsa::rope_cos_sin cs = dsa::rope_cos_sin_at(pos, f);
    const float angle = static_cast<float>(pos) * f;
    CHECK(cs.cos == static_cast<float>(std::cos(static_cast<double>(angle))));
    CHECK(cs.sin == static_cast<float>(std::sin(static_cast<double>(angle))));
  }
  const dsa::rope_cos_sin id = dsa::rope_cos_sin_at(0, 0.3f);
  CHECK(id.cos == 1.0f);
  CHECK(id.sin == 0.0f);
  float re = 1.5f, im = -2.25f;
  dsa::rope_rotate(re, im, id);
  CHECK(re == 1.5f);
  CHECK(im == -2.25f);
  // A quarter turn: (a, b) -> (-b, a) up to the rounding of cos(pi/2) in fp32.
  const dsa::rope_cos_sin q{0.0f, 1.0f};
  re = 1.5f;
  im = -2.25f;
  dsa::rope_rotate(re, im, q);
  CHECK(re == 2.25f);
  CHECK(im == 1.5f);
  // General case: the exact complex product rounded once.
  const dsa::rope_cos_sin g{0.6f, 0.8f};
  re = 3.0f;
  im = 1.0f / 3.0f;
  const double a = 3.0, b = static_cast<double>(1.0f / 3.0f);
  dsa::rope_rotate(re, im, g);
  CHECK(re == static_cast<float>(a * static_cast<double>(0.6f) - b * static_cast<double>(0.8f)));
  CHECK(im == static_cast<float>(a * static_cast<double>(0.8f) + b * static_cast<double>(0.6f)));
}
