// dsa/core/checked_math.hpp: overflow-checked integer arithmetic for host-side sizes.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>

#include "dsa/core/checked_math.hpp"
#include "dsa/core/error.hpp"

using i64 = std::int64_t;
constexpr i64 max64 = std::numeric_limits<i64>::max();
constexpr i64 min64 = std::numeric_limits<i64>::min();

static_assert(dsa::ceil_div(i64{0}, i64{128}) == 0);
static_assert(dsa::ceil_div(i64{1}, i64{128}) == 1);
static_assert(dsa::ceil_div(i64{128}, i64{128}) == 1);
static_assert(dsa::ceil_div(i64{129}, i64{128}) == 2);
// Exact at the top of the range, where (a + b - 1) / b overflows.
static_assert(dsa::ceil_div(max64, i64{128}) == (i64{1} << 56));
static_assert(dsa::ceil_div(max64, i64{1}) == max64);
static_assert(dsa::ceil_div(max64, max64) == 1);
static_assert(dsa::ceil_div(max64 - 1, max64) == 1);

TEST_CASE("mul_overflows / add_overflows report exactly the results that do not fit") {
  i64 r = 0;
  CHECK_FALSE(dsa::mul_overflows(i64{1} << 31, (i64{1} << 32) - 1, &r));
  CHECK(r == (i64{1} << 31) * ((i64{1} << 32) - 1));
  CHECK(dsa::mul_overflows(i64{1} << 57, i64{128}, &r));
  CHECK(dsa::mul_overflows(min64, i64{-1}, &r));
  CHECK_FALSE(dsa::mul_overflows(max64, i64{-1}, &r));
  CHECK(r == -max64);
  CHECK_FALSE(dsa::add_overflows(max64 - 1, i64{1}, &r));
  CHECK(r == max64);
  CHECK(dsa::add_overflows(max64, i64{1}, &r));
  CHECK(dsa::add_overflows(min64, i64{-1}, &r));
  std::uint64_t u = 0;
  CHECK(dsa::mul_overflows(std::uint64_t{1} << 32, std::uint64_t{1} << 32, &u));
}

TEST_CASE("checked_mul / checked_add / checked_round_up throw dsa::error in the canonical format") {
  CHECK(dsa::checked_mul(i64{6}, i64{7}, "op", "n", 6, "a product that fits") == 42);
  CHECK_THROWS_WITH_AS(dsa::checked_mul(i64{1} << 40, i64{1} << 30, "my_op", "(s, h)", "(2^40, 2^30)",
                                        "a size that fits in int64"),
                       "dsa::my_op: (s, h) = (2^40, 2^30); expected a size that fits in int64", dsa::error);
  CHECK(dsa::checked_add(i64{40}, i64{2}, "op", "n", 40, "a sum that fits") == 42);
  CHECK_THROWS_WITH_AS(dsa::checked_add(max64, i64{1}, "my_op", "m", max64, "a sum that fits in int64"),
                       "dsa::my_op: m = 9223372036854775807; expected a sum that fits in int64", dsa::error);
  CHECK(dsa::checked_round_up(i64{17}, i64{16}, "op", "n", 17, "fits") == 32);
  CHECK(dsa::checked_round_up(i64{0}, i64{16}, "op", "n", 0, "fits") == 0);
  CHECK(dsa::checked_round_up(max64 - 15, i64{16}, "op", "n", 0, "fits") == max64 - 15);
  CHECK_THROWS_WITH_AS(dsa::checked_round_up(max64 - 14, i64{16}, "op", "n", 1, "fits"),
                       "dsa::op: n = 1; expected fits", dsa::error);
}
