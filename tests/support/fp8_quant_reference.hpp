// Test oracles for the FP8 quantizers, written from docs/design.md "FP8 quantizers" without the library's
// numerics: e4m3 values from the format's definition, encoding by exhaustive nearest-code search
// (ties to the even code), power-of-two scales through frexp, IEEE fp32 division emulated in
// double (double rounding is innocuous for one division of floats: 53 >= 2 * 24 + 2).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace dsa_test {

/// Value of an E4M3FN code (NaN for S.1111.111).
inline double e4m3_value(std::uint8_t code) {
  const int e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return (code & 0x80) ? -v : v;
}

/// Round-to-nearest-even, saturating E4M3FN encoding of x.
inline std::uint8_t e4m3_encode_reference(double x) {
  if (std::isnan(x)) return 0x7F;
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(x);
  if (a >= 448.0) return static_cast<std::uint8_t>(sign | 0x7E);
  // The positive codes' values, from e4m3_value once: the search below runs for every element
  // the tests quantize (ldexp calls there made the AVX-512 ASan build's tests take 50 s).
  static const std::array<double, 0x7F> values = [] {
    std::array<double, 0x7F> v{};
    for (int c = 0; c < 0x7F; ++c) v[static_cast<std::size_t>(c)] = e4m3_value(static_cast<std::uint8_t>(c));
    return v;
  }();
  int best = 0;
  double db = a;  // |a - value(0)|
  for (int c = 1; c <= 0x7E; ++c) {
    const double dc = std::fabs(a - values[static_cast<std::size_t>(c)]);
    if (dc < db || (dc == db && (c & 1) == 0)) {
      best = c;
      db = dc;
    }
  }
  return static_cast<std::uint8_t>(sign | best);
}

/// fl32(a / b).
inline float div_fp32(float a, float b) { return static_cast<float>(static_cast<double>(a) / static_cast<double>(b)); }

/// The smallest power of two >= v (v > 0, finite).
inline float ceil_pow2_reference(float v) {
  int e = 0;
  const double m = std::frexp(static_cast<double>(v), &e);  // v = m 2^e, m in [0.5, 1)
  return static_cast<float>(m == 0.5 ? static_cast<double>(v) : std::ldexp(1.0, e));
}

/// DeepSeek act_quant of one group of finite values: codes and scale.
inline float act_quant_group_reference(const float* x, std::size_t len, bool ue8m0, std::uint8_t* q) {
  float amax = 0.0f;
  for (std::size_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(x[i]));
  amax = std::max(amax, 1e-4f);
  const float v = amax * (1.0f / 448.0f);
  const float s = ue8m0 ? ceil_pow2_reference(v) : v;
  for (std::size_t i = 0; i < len; ++i) {
    const float r = std::min(448.0f, std::max(-448.0f, div_fp32(x[i], s)));
    q[i] = e4m3_encode_reference(r);
  }
  return s;
}

/// weight_quant of a finite matrix [rows, cols] with 128 x 128 blocks: codes [rows, cols] and
/// scales [ceil(rows/128), ceil(cols/128)].
inline void weight_quant_reference(const std::vector<float>& w, std::int64_t rows, std::int64_t cols,
                                   std::vector<std::uint8_t>& q, std::vector<float>& s) {
  const std::int64_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
  q.assign(static_cast<std::size_t>(rows * cols), 0);
  s.assign(static_cast<std::size_t>(br * bc), 0.0f);
  for (std::int64_t i = 0; i < br; ++i) {
    for (std::int64_t j = 0; j < bc; ++j) {
      float amax = 0.0f;
      for (std::int64_t r = i * 128; r < std::min(rows, i * 128 + 128); ++r)
        for (std::int64_t c = j * 128; c < std::min(cols, j * 128 + 128); ++c)
          amax = std::max(amax, std::fabs(w[static_cast<std::size_t>(r * cols + c)]));
      const float sc = div_fp32(std::max(amax, 1e-8f), 448.0f);
      s[static_cast<std::size_t>(i * bc + j)] = sc;
      for (std::int64_t r = i * 128; r < std::min(rows, i * 128 + 128); ++r)
        for (std::int64_t c = j * 128; c < std::min(cols, j * 128 + 128); ++c)
          q[static_cast<std::size_t>(r * cols + c)] = e4m3_encode_reference(div_fp32(w[static_cast<std::size_t>(r * cols + c)], sc));
    }
  }
}

}  // namespace dsa_test
