// Strict command-line value parsing shared by dsa_run and dsa_make_tiny_model: a value must be
// consumed whole ("12x" and "1e3" are not integers), numbers must be in range, and every
// problem is a usage_error naming the flag and the offending text (quoted: dsa::quoted escapes
// and bounds it, so a --prompt-file's bytes cannot drive the terminal).
#pragma once

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "dsa/core/quote.hpp"

namespace dsa_tools {

struct usage_error {
  std::string message;
};

[[noreturn]] inline void usage_fail(std::string_view flag, std::string_view text, std::string_view expected) {
  throw usage_error{std::string(flag) + " = " + dsa::quoted(text) + "; expected " + std::string(expected)};
}

/// A decimal integer in [lo, hi].
inline std::int64_t parse_int(std::string_view flag, std::string_view text, std::int64_t lo, std::int64_t hi) {
  std::int64_t v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || r.ec != std::errc{} || r.ptr != text.data() + text.size() || v < lo || v > hi) {
    usage_fail(flag, text, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

/// A non-negative decimal integer up to 2^64 - 1 (seeds).
inline std::uint64_t parse_u64(std::string_view flag, std::string_view text) {
  std::uint64_t v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || r.ec != std::errc{} || r.ptr != text.data() + text.size()) {
    usage_fail(flag, text, "an integer in [0, 2^64 - 1]");
  }
  return v;
}

/// A finite decimal number (strtod syntax, consumed whole).
inline double parse_double(std::string_view flag, std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v)) {
    usage_fail(flag, text, "a finite number");
  }
  return v;
}

/// Integers separated by commas and/or whitespace (spaces, tabs, line ends): "1 2 3", "1,2,3".
inline std::vector<std::int64_t> parse_int_list(std::string_view flag, std::string_view text, std::int64_t lo,
                                                std::int64_t hi) {
  const auto is_sep = [](char c) { return c == ' ' || c == ',' || c == '\t' || c == '\n' || c == '\r'; };
  std::vector<std::int64_t> v;
  std::size_t i = 0;
  while (i < text.size()) {
    if (is_sep(text[i])) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < text.size() && !is_sep(text[j])) ++j;
    v.push_back(parse_int(flag, text.substr(i, j - i), lo, hi));
    i = j;
  }
  return v;
}

}  // namespace dsa_tools
