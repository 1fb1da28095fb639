// dsa::tensor_view and the shape checks every op front-end uses.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"

using dsa::index_t;

static_assert(std::is_trivially_copyable_v<dsa::tensor_view<float, 3>>);
static_assert(std::is_trivially_copyable_v<dsa::tensor_view<const float, 1, dsa::device_space>>);
// Mutable converts to const, never the other way; memory spaces never convert.
static_assert(std::is_convertible_v<dsa::tensor_view<float, 2>, dsa::tensor_view<const float, 2>>);
static_assert(!std::is_convertible_v<dsa::tensor_view<const float, 2>, dsa::tensor_view<float, 2>>);
static_assert(!std::is_convertible_v<dsa::host_view<float, 2>, dsa::device_view<float, 2>>);
static_assert(!std::is_convertible_v<dsa::host_view<float, 2>, dsa::device_view<const float, 2>>);
static_assert(!std::is_convertible_v<dsa::device_view<float, 2>, dsa::host_view<const float, 2>>);
static_assert(!std::is_convertible_v<dsa::tensor_view<float, 2>, dsa::tensor_view<const float, 3>>);
static_assert(!std::is_convertible_v<dsa::tensor_view<float, 2>, dsa::tensor_view<const double, 2>>);
static_assert(dsa::tensor_view<float, 3>::rank() == 3);
static_assert(std::is_same_v<dsa::tensor_view<const float, 2>::value_type, float>);
static_assert(std::is_same_v<dsa::tensor_view<const float, 2>::element_type, const float>);

TEST_CASE("tensor_view: row-major extents and strides") {
  std::vector<float> buf(24);
  const dsa::tensor_view<float, 3> v(buf.data(), {2, 3, 4});
  CHECK(v.data_handle() == buf.data());
  CHECK(v.extent(0) == 2);
  CHECK(v.extent(1) == 3);
  CHECK(v.extent(2) == 4);
  CHECK(v.stride(0) == 12);
  CHECK(v.stride(1) == 4);
  CHECK(v.stride(2) == 1);
  CHECK(v.extents() == std::array<index_t, 3>{2, 3, 4});
  CHECK(v.strides() == std::array<index_t, 3>{12, 4, 1});
  CHECK(v.size() == 24);
  CHECK_FALSE(v.empty());
  CHECK_FALSE(v.is_absent());
  CHECK(v.is_contiguous());
  std::iota(buf.begin(), buf.end(), 0.0f);
  CHECK(v(0, 0, 0) == 0.0f);
  CHECK(v(1, 2, 3) == 23.0f);
  CHECK(v(1, 0, 2) == 14.0f);
  CHECK(v.row(1) == buf.data() + 12);
  v(0, 1, 1) = -1.0f;
  CHECK(buf[5] == -1.0f);
}

TEST_CASE("tensor_view: explicit strides, element access and contiguity") {
  std::vector<float> buf(40);
  std::iota(buf.begin(), buf.end(), 0.0f);
  SUBCASE("padded rows") {
    const dsa::tensor_view<float, 2> v(buf.data(), {3, 5}, {8, 1});
    CHECK(v(2, 4) == 20.0f);
    CHECK(v.row(2)[1] == 17.0f);
    CHECK_FALSE(v.is_contiguous());
    CHECK(v.size() == 15);
  }
  SUBCASE("a transposed view") {
    const dsa::tensor_view<float, 2> v(buf.data(), {4, 3}, {1, 4});  // the transpose of a 3x4 matrix
    CHECK(v(3, 2) == 11.0f);
    CHECK(v(1, 2) == 9.0f);
    CHECK_FALSE(v.is_contiguous());
  }
  SUBCASE("size-1 dimensions ignore their stride") {
    const dsa::tensor_view<float, 3> v(buf.data(), {1, 2, 5}, {999, 5, 1});
    CHECK(v.is_contiguous());
    const dsa::tensor_view<float, 2> col(buf.data(), {4, 1}, {1, 7});
    CHECK(col.is_contiguous());
    CHECK(col(3, 0) == 3.0f);
  }
  SUBCASE("inner stride 2") {
    const dsa::tensor_view<float, 2> v(buf.data(), {2, 5}, {10, 2});
    CHECK(v(1, 4) == 18.0f);
    CHECK_FALSE(v.is_contiguous());
  }
  SUBCASE("a view into the middle of a buffer") {
    const dsa::tensor_view<float, 2> v(buf.data() + 7, {2, 2}, {10, 1});
    CHECK(v(0, 0) == 7.0f);
    CHECK(v(1, 1) == 18.0f);
  }
}

TEST_CASE("tensor_view: const conversion keeps data, extents and strides") {
  std::vector<float> buf(30, 1.0f);
  const dsa::tensor_view<float, 2> m(buf.data(), {3, 7}, {10, 1});
  const dsa::tensor_view<const float, 2> c = m;
  CHECK(c.data_handle() == buf.data());
  CHECK(c.extents() == m.extents());
  CHECK(c.strides() == m.strides());
  CHECK(c(2, 6) == 1.0f);
  // The conversion is what lets a mutable view bind to an op's const input parameter.
  auto takes_const = [](dsa::tensor_view<const float, 2> v) { return v.extent(1); };
  CHECK(takes_const(m) == 7);
}

TEST_CASE("tensor_view: size, empty and the absent view") {
  const dsa::tensor_view<float, 2> absent;
  CHECK(absent.data_handle() == nullptr);
  CHECK(absent.size() == 0);
  CHECK(absent.empty());
  CHECK(absent.is_absent());
  CHECK(absent.extent(0) == 0);
  CHECK(absent.extent(1) == 0);

  float x = 0.0f;
  const dsa::tensor_view<float, 2> empty_rows(&x, {0, 5});
  CHECK(empty_rows.size() == 0);
  CHECK(empty_rows.empty());
  CHECK_FALSE(empty_rows.is_absent());  // has data: an empty view, not an absent one
  CHECK(empty_rows.stride(0) == 5);

  const dsa::tensor_view<float, 2> null_empty(nullptr, {0, 5});
  CHECK(null_empty.is_absent());

  const dsa::tensor_view<float, 1> one(&x, {1});
  CHECK(one.size() == 1);
  CHECK_FALSE(one.empty());
}

TEST_CASE("make_view: row-major views over contiguous memory, in any space") {
  std::vector<std::int32_t> buf(6);
  const auto v = dsa::make_view(buf.data(), {2, 3});
  static_assert(std::is_same_v<decltype(v), const dsa::tensor_view<std::int32_t, 2, dsa::host_space>>);
  CHECK(v.extents() == std::array<index_t, 2>{2, 3});
  CHECK(v.strides() == std::array<index_t, 2>{3, 1});
  const std::vector<float> cbuf(4);
  const auto cv = dsa::make_view(cbuf.data(), {4});
  static_assert(std::is_same_v<decltype(cv), const dsa::tensor_view<const float, 1>>);
  CHECK(cv.stride(0) == 1);
  const auto dv = dsa::make_view<dsa::device_space>(buf.data(), {3, 2});
  static_assert(std::is_same_v<decltype(dv), const dsa::device_view<std::int32_t, 2>>);
  CHECK(dv.stride(0) == 2);
  // Extents beyond 32 bits do not overflow the index arithmetic (no memory is touched).
  const auto big = dsa::make_view(static_cast<float*>(nullptr), {131072, 2048, 128});
  CHECK(big.size() == index_t{131072} * 2048 * 128);
  CHECK(big.stride(0) == index_t{2048} * 128);
}

TEST_CASE("shape_string") {
  float x = 0.0f;
  CHECK(dsa::shape_string(dsa::tensor_view<float, 3>(&x, {2, 3, 4})) == "[2, 3, 4]");
  CHECK(dsa::shape_string(dsa::tensor_view<float, 1>(&x, {7})) == "[7]");
  CHECK(dsa::shape_string(dsa::tensor_view<float, 2>()) == "[0, 0]");
}

TEST_CASE("check_extent / check_valid / check_inner_contiguous: messages name op, argument, value") {
  std::vector<float> buf(64);
  const dsa::tensor_view<float, 2> v(buf.data(), {4, 8});

  CHECK_NOTHROW(dsa::check_extent("my_op", "x", v, 1, 8, "the head dim"));
  CHECK_THROWS_WITH_AS(dsa::check_extent("my_op", "x", v, 1, 16, "the head dim"),
                       "dsa::my_op: x.extent(1) = 8; expected 16 (the head dim)", dsa::error);
  CHECK_THROWS_WITH_AS(dsa::check_extent("my_op", "scores", v, 0, 5, "q.extent(0)"),
                       "dsa::my_op: scores.extent(0) = 4; expected 5 (q.extent(0))", dsa::error);

  CHECK_NOTHROW(dsa::check_valid("my_op", "x", v));
  CHECK_NOTHROW(dsa::check_valid("my_op", "x", dsa::tensor_view<float, 2>()));            // absent is valid
  CHECK_NOTHROW(dsa::check_valid("my_op", "x", dsa::tensor_view<float, 2>(nullptr, {0, 3})));
  CHECK_THROWS_WITH_AS(dsa::check_valid("my_op", "k", dsa::tensor_view<float, 2>(nullptr, {2, 3})),
                       "dsa::my_op: k.data = null; expected a non-null pointer", dsa::error);
  CHECK_THROWS_WITH_AS(dsa::check_valid("my_op", "k", dsa::tensor_view<float, 2>(buf.data(), {-1, 3})),
                       "dsa::my_op: k.shape = [-1, 3]; expected non-negative extents", dsa::error);
  CHECK_THROWS_WITH_AS(dsa::check_valid("my_op", "k", dsa::tensor_view<float, 2>(buf.data(), {-2, -3})),
                       "dsa::my_op: k.shape = [-2, -3]; expected non-negative extents", dsa::error);

  CHECK_NOTHROW(dsa::check_inner_contiguous("my_op", "x", v));
  CHECK_NOTHROW(dsa::check_inner_contiguous("my_op", "x", dsa::tensor_view<float, 2>(buf.data(), {4, 1}, {8, 3})));
  CHECK_NOTHROW(dsa::check_inner_contiguous("my_op", "x", dsa::tensor_view<float, 2>(buf.data(), {4, 8}, {16, 1})));
  CHECK_THROWS_WITH_AS(
      dsa::check_inner_contiguous("my_op", "y", dsa::tensor_view<float, 2>(buf.data(), {4, 4}, {16, 2})),
      "dsa::my_op: y.stride(1) = 2; expected 1 (unit-stride rows)", dsa::error);
  CHECK_THROWS_WITH_AS(
      dsa::check_inner_contiguous("my_op", "y", dsa::tensor_view<float, 3>(buf.data(), {2, 4, 2}, {32, 1, 4})),
      "dsa::my_op: y.stride(2) = 4; expected 1 (unit-stride rows)", dsa::error);
}

TEST_CASE("tensor_view: extents whose element count overflows int64 are rejected at construction") {
  // Issue 14: {2^57, 128} has 2^64 elements; size() wrapped to 0, so an op returned having done
  // nothing and skipped its null-data check.
  constexpr index_t two57 = index_t{1} << 57;
  constexpr index_t max = std::numeric_limits<index_t>::max();
  const char* count = "expected an element count (the product of the extents) that fits in int64";
  CHECK_THROWS_WITH_AS(dsa::make_view(static_cast<float*>(nullptr), {two57, 128}),
                       (std::string("dsa::tensor_view: extents = [144115188075855872, 128]; ") + count).c_str(),
                       dsa::error);
  CHECK_THROWS_WITH_AS((dsa::tensor_view<float, 2>(nullptr, {two57, 128})), doctest::Contains(count), dsa::error);
  CHECK_THROWS_WITH_AS((dsa::tensor_view<float, 2>(nullptr, {two57, 128}, {128, 1})), doctest::Contains(count),
                       dsa::error);
  CHECK_THROWS_WITH_AS(dsa::make_view<dsa::device_space>(static_cast<float*>(nullptr), {2, 2, max}),
                       doctest::Contains(count), dsa::error);
  // A zero extent does not hide two huge ones (an op may multiply any subset of the extents).
  CHECK_THROWS_WITH_AS(dsa::make_view(static_cast<float*>(nullptr), {two57, 0, 128}), doctest::Contains(count),
                       dsa::error);
  // Negative extents count by magnitude (check_valid rejects them by name in the op front-ends).
  CHECK_THROWS_WITH_AS(dsa::make_view(static_cast<float*>(nullptr), {-two57, 128}), doctest::Contains(count),
                       dsa::error);
  CHECK_THROWS_WITH_AS(dsa::make_view(static_cast<float*>(nullptr), {std::numeric_limits<index_t>::min()}),
                       doctest::Contains(count), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::make_view(static_cast<float*>(nullptr), {index_t{1} << 32, index_t{1} << 31}),
                       doctest::Contains(count), dsa::error);

  // Up to int64's maximum is fine, empty or not.
  CHECK(dsa::make_view(static_cast<float*>(nullptr), {max}).size() == max);
  CHECK(dsa::make_view(static_cast<float*>(nullptr), {0, max}).size() == 0);
  CHECK(dsa::make_view(static_cast<float*>(nullptr), {max, 1, 0}).stride(0) == 0);
  CHECK(dsa::make_view(static_cast<float*>(nullptr), {index_t{1} << 31, (index_t{1} << 32) - 1}).size() ==
        (index_t{1} << 31) * ((index_t{1} << 32) - 1));
  CHECK(dsa::make_view(static_cast<float*>(nullptr), {-1, 3}).size() == -3);
  CHECK(dsa::make_view(static_cast<float*>(nullptr), {two57, 63}).size() == two57 * 63);
}

TEST_CASE("tensor_view: strides whose element offsets overflow int64 are rejected at construction") {
  constexpr index_t max = std::numeric_limits<index_t>::max();
  constexpr index_t min = std::numeric_limits<index_t>::min();
  const char* offsets = "expected element offsets (sums of index * stride) that fit in int64 for extents ";
  float x = 0.0f;
  CHECK_THROWS_WITH_AS((dsa::tensor_view<float, 2>(&x, {3, 4}, {max / 2 + 1, 1})),
                       (std::string("dsa::tensor_view: strides = [4611686018427387904, 1]; ") + offsets + "[3, 4]")
                           .c_str(),
                       dsa::error);
  // Each term fits, their sum does not.
  CHECK_THROWS_WITH_AS((dsa::tensor_view<float, 2>(&x, {2, 2}, {max, 1})), doctest::Contains(offsets), dsa::error);
  // Negative strides: the negative terms are summed apart from the positive ones.
  CHECK_THROWS_WITH_AS((dsa::tensor_view<float, 2>(&x, {2, 2}, {min, -1})), doctest::Contains(offsets), dsa::error);
  CHECK_THROWS_WITH_AS((dsa::tensor_view<float, 1>(&x, {3}, {min / 2 - 1})), doctest::Contains(offsets), dsa::error);

  // The largest reachable offsets that fit, and extents without an index (their stride is
  // never used for an element).
  CHECK((dsa::tensor_view<float, 2>(&x, {2, 2}, {max - 1, 1})).stride(0) == max - 1);
  CHECK((dsa::tensor_view<float, 2>(&x, {2, 2}, {min, max})).stride(1) == max);
  CHECK((dsa::tensor_view<float, 2>(&x, {1, 5}, {max, 1})).size() == 5);
  CHECK((dsa::tensor_view<float, 2>(&x, {0, 5}, {max, max / 4})).size() == 0);
  CHECK((dsa::tensor_view<float, 2>(&x, {-2, 5}, {max, 1})).size() == -10);
}
