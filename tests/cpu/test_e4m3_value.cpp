// cpu/kernels/e4m3_value.hpp: the CPU kernels' e4m3 decode against fp8_e4m3::to_float for all
// 256 codes (NaN codes: a quiet NaN with the code's sign), scalar and 16-lane forms, also with
// the flush-to-zero and denormals-are-zero modes that -ffast-math programs set.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "dsa/core/types.hpp"
#include "dsa/cpu/kernels/e4m3_value.hpp"

namespace {

// The number of codes whose decode differs from to_float (NaN codes: must be a quiet NaN of the
// code's sign).
template <class Decode>
int mismatches(Decode decode) {
  int bad = 0;
  for (int c = 0; c < 256; ++c) {
    const float want = dsa::fp8_e4m3::from_bits(static_cast<std::uint8_t>(c)).to_float();
    const float got = decode(c);
    std::uint32_t g;
    std::memcpy(&g, &got, sizeof g);
    if (std::isnan(want)) {
      if (g != (0x7FC00000u | ((static_cast<std::uint32_t>(c) & 0x80u) << 24))) ++bad;
    } else if (std::memcmp(&want, &got, sizeof got) != 0) {
      ++bad;
    }
  }
  return bad;
}

void check_every_code() {
  CHECK(mismatches([](int c) { return dsa::cpu_detail::e4m3_value(static_cast<std::uint32_t>(c)); }) == 0);
#if DSA_CPU_HAS_AVX512
  float all[256];
  for (int c0 = 0; c0 < 256; c0 += 16) {
    std::uint8_t codes[16];
    for (int j = 0; j < 16; ++j) codes[j] = static_cast<std::uint8_t>(c0 + j);
    _mm512_storeu_ps(all + c0, dsa::cpu_detail::e4m3_values16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes))));
  }
  CHECK(mismatches([&](int c) { return all[c]; }) == 0);
#elif DSA_CPU_HAS_AVX2
  float all[256];
  for (int c0 = 0; c0 < 256; c0 += 8) {
    std::uint8_t codes[16] = {};
    for (int j = 0; j < 8; ++j) codes[j] = static_cast<std::uint8_t>(c0 + j);
    _mm256_storeu_ps(all + c0, dsa::cpu_detail::e4m3_values8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes))));
  }
  CHECK(mismatches([&](int c) { return all[c]; }) == 0);
#endif
}

}  // namespace

TEST_CASE("e4m3_value gives fp8_e4m3::to_float for every code") { check_every_code(); }

#if defined(__SSE__)
TEST_CASE("e4m3_value is exact under flush-to-zero and denormals-are-zero") {
  // No fp32 subnormal is ever formed, so the e4m3 subnormals (down to 2^-9) still decode exactly.
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040u);
  check_every_code();
  _mm_setcsr(csr);
}
#endif
