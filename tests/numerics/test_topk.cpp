// The order-preserving radix key of top-k (dsa/numerics/topk.hpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dsa/numerics/topk.hpp"

namespace {
float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
}  // namespace

TEST_CASE("topk_radix_key preserves the order of every non-NaN float, -inf included") {
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::vector<float> xs = {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::max(),
                           -std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(),
                           -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                           -std::numeric_limits<float>::min(), 0.0f, -0.0f, 1.0f, -1.0f,
                           -std::numeric_limits<float>::infinity()};
  while (xs.size() < 20000) {
    const float x = from_bits(bits(rng));
    if (!std::isnan(x)) xs.push_back(x);
  }
  for (std::size_t i = 0; i + 1 < xs.size(); ++i) {
    const float a = xs[i], b = xs[i + 1];
    const std::uint32_t ka = dsa::topk_radix_key(a), kb = dsa::topk_radix_key(b);
    INFO(a << " vs " << b);
    CHECK((a < b) == (ka < kb));
    CHECK((a == b) == (ka == kb));
    CHECK(ka != dsa::topk_no_key);
    CHECK(ka < dsa::topk_nan_key);
  }
  CHECK(dsa::topk_radix_key(-std::numeric_limits<float>::infinity()) == 0x007FFFFFu);
  CHECK(dsa::topk_radix_key(-std::numeric_limits<float>::max()) == 0x00800000u);
  CHECK(dsa::topk_radix_key(std::numeric_limits<float>::infinity()) == 0xFF800000u);
}

TEST_CASE("topk_radix_key: -0.0 ties with +0.0; every NaN ranks above +inf, as torch.topk ranks it") {
  CHECK(dsa::topk_radix_key(-0.0f) == dsa::topk_radix_key(0.0f));
  for (std::uint32_t u : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0xFFFFFFFFu}) {
    CHECK(dsa::topk_radix_key(from_bits(u)) == dsa::topk_nan_key);
    CHECK(dsa::topk_radix_key(from_bits(u)) > dsa::topk_radix_key(std::numeric_limits<float>::infinity()));
  }
}

TEST_CASE("topk_radix_digit and topk_radix_find_bucket") {
  CHECK(dsa::topk_radix_digit(0xA1B2C3D4u, 0) == 0xA1u);
  CHECK(dsa::topk_radix_digit(0xA1B2C3D4u, 3) == 0xD4u);
  std::uint32_t hist[256] = {};
  hist[255] = 2, hist[200] = 3, hist[7] = 10, hist[0] = 4;
  std::uint32_t r = 1;
  CHECK(dsa::topk_radix_find_bucket(hist, r) == 255u);
  CHECK(r == 1u);
  r = 4;
  CHECK(dsa::topk_radix_find_bucket(hist, r) == 200u);
  CHECK(r == 2u);
  r = 15;
  CHECK(dsa::topk_radix_find_bucket(hist, r) == 7u);
  CHECK(r == 10u);
  r = 16;
  CHECK(dsa::topk_radix_find_bucket(hist, r) == 0u);
  CHECK(r == 1u);
}
