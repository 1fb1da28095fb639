// dsa::error and the canonical message "dsa::<op>: <arg> = <value>; expected <what>".
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <locale>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "dsa/core/error.hpp"

static_assert(std::is_base_of_v<std::runtime_error, dsa::error>);

TEST_CASE("dsa::error is a std::runtime_error carrying its message") {
  try {
    throw dsa::error("dsa::x: y = 1; expected 2");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "dsa::x: y = 1; expected 2");
  }
  CHECK_THROWS_AS(dsa::fail("op", "arg", 3, "4"), std::runtime_error);
  CHECK_THROWS_AS(dsa::fail("op", "arg", 3, "4"), dsa::error);
}

TEST_CASE("error_message formats op, argument, value and expectation") {
  CHECK(dsa::error_message("hadamard_transform", "x.extent(1)", 100, "a power of two <= 32768") ==
        "dsa::hadamard_transform: x.extent(1) = 100; expected a power of two <= 32768");
  CHECK(dsa::error_message("op", "cfg.flag", true, "false") == "dsa::op: cfg.flag = true; expected false");
  CHECK(dsa::error_message("op", "cfg.flag", false, "true") == "dsa::op: cfg.flag = false; expected true");
  // One-byte integers print as numbers, not characters.
  CHECK(dsa::error_message("op", "code", std::uint8_t{65}, "< 64") == "dsa::op: code = 65; expected < 64");
  CHECK(dsa::error_message("op", "code", std::int8_t{-3}, ">= 0") == "dsa::op: code = -3; expected >= 0");
  CHECK(dsa::error_message("op", "k", std::int64_t{1} << 40, "<= 2048") == "dsa::op: k = 1099511627776; expected <= 2048");
  CHECK(dsa::error_message("op", "scale", 0.5f, "> 1") == "dsa::op: scale = 0.5; expected > 1");
  CHECK(dsa::error_message("op", "dtype", std::string("BF16"), "F32") == "dsa::op: dtype = BF16; expected F32");
  CHECK(dsa::error_message("op", "ptr", "null", "a non-null pointer") == "dsa::op: ptr = null; expected a non-null pointer");
}

namespace {
/// A locale that groups digits in threes with '.' and writes ',' as the decimal point (German).
struct grouping_punct : std::numpunct<char> {
  char do_thousands_sep() const override { return '.'; }
  char do_decimal_point() const override { return ','; }
  std::string do_grouping() const override { return "\3"; }
};
}  // namespace

TEST_CASE("error messages do not depend on the global C++ locale") {
  const std::locale previous = std::locale::global(std::locale(std::locale::classic(), new grouping_punct));
  CHECK(dsa::error_message("op", "n", std::int64_t{1234567}, "< 1000") == "dsa::op: n = 1234567; expected < 1000");
  CHECK(dsa::error_message("op", "n", std::size_t{4096}, "< 1000") == "dsa::op: n = 4096; expected < 1000");
  CHECK(dsa::error_message("op", "eps", 1.5e-6, "> 0.1") == "dsa::op: eps = 1.5e-06; expected > 0.1");
  CHECK(dsa::error_message("op", "x", 2.5f, "< 1") == "dsa::op: x = 2.5; expected < 1");
  std::locale::global(previous);
  // Floats as printf's %g (six significant digits), infinities and NaN spelled out.
  CHECK(dsa::error_message("op", "x", 1.0f / 3.0f, "") == "dsa::op: x = 0.333333; expected ");
  CHECK(dsa::error_message("op", "x", 123456789.0, "") == "dsa::op: x = 1.23457e+08; expected ");
  CHECK(dsa::error_message("op", "x", -std::numeric_limits<float>::infinity(), "") == "dsa::op: x = -inf; expected ");
  CHECK(dsa::error_message("op", "x", std::numeric_limits<double>::quiet_NaN(), "") == "dsa::op: x = nan; expected ");
  CHECK(dsa::error_message("op", "x", std::string_view("sv"), "") == "dsa::op: x = sv; expected ");
}

TEST_CASE("fail throws, check throws only when the condition is false") {
  CHECK_THROWS_WITH_AS(dsa::fail("topk_indices", "k", 0, ">= 1"), "dsa::topk_indices: k = 0; expected >= 1", dsa::error);
  CHECK_NOTHROW(dsa::check(true, "topk_indices", "k", 0, ">= 1"));
  CHECK_THROWS_WITH_AS(dsa::check(false, "topk_indices", "k", -5, ">= 1"), "dsa::topk_indices: k = -5; expected >= 1",
                       dsa::error);
}

TEST_CASE("error messages escape control characters, so file-supplied strings cannot drive a terminal") {
  // A tensor name from a crafted file: an ANSI colour sequence, a carriage return and a line feed
  // that would forge a second log line, and a NUL.
  const std::string name = std::string("w\x1b[31mred\rover\nforged") + '\0' + "end\x7f";
  CHECK_THROWS_WITH_AS(dsa::fail("op", "name", name, "a plain name"),
                       "dsa::op: name = w\\x1b[31mred\\x0dover\\x0aforged\\x00end\\x7f; expected a plain name",
                       dsa::error);
  const dsa::error e(std::string("tab\there"));
  CHECK(std::string(e.what()) == "tab\\x09here");
  // Printable text, UTF-8 included, passes unchanged.
  CHECK(std::string(dsa::error("Größe = 3; expected 4").what()) == "Größe = 3; expected 4");
}
