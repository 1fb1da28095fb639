// dsa::error and the precondition helpers every op front-end uses.
//
// Message format (tests assert on it, users grep for it):
//   "dsa::<op>: <argument> = <value>; expected <what was expected>"
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "dsa/core/config.hpp"

DSA_NAMESPACE_BEGIN

namespace detail {

/// `text` with every control character (0x00-0x1F, 0x7F) written as \xNN: error messages quote
/// strings from files (tensor names, keys, shard names), and a crafted one must not drive the
/// terminal (escape sequences) or forge lines of a log (CR, LF) when the message is printed.
inline std::string escape_control_characters(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) {
      constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 0xF];
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace detail

/// Thrown when a host-side precondition fails: bad shapes, dtypes, ranges or file contents. The
/// message is printable as it stands: control characters are escaped (\xNN) on construction.
class error : public std::runtime_error {
 public:
  explicit error(std::string_view what) : std::runtime_error(detail::escape_control_characters(what)) {}
  explicit error(const std::string& what) : error(std::string_view(what)) {}
  explicit error(const char* what) : error(std::string_view(what)) {}
};

namespace detail {

template <class V>
std::string format_value(const V& v) {
  std::ostringstream os;
  if constexpr (std::is_same_v<V, bool>) {
    os << (v ? "true" : "false");
  } else if constexpr (std::is_integral_v<V> && sizeof(V) == 1) {
    os << static_cast<int>(v);
  } else {
    os << v;
  }
  return os.str();
}

}  // namespace detail

/// Builds the canonical message; exposed so that every thrower formats alike.
template <class V>
std::string error_message(std::string_view op, std::string_view argument, const V& value, std::string_view expected) {
  std::string m = "dsa::";
  m += op;
  m += ": ";
  m += argument;
  m += " = ";
  m += detail::format_value(value);
  m += "; expected ";
  m += expected;
  return m;
}

/// Throws dsa::error naming the op, the argument, its value and what was expected.
template <class V>
[[noreturn]] void fail(std::string_view op, std::string_view argument, const V& value, std::string_view expected) {
  throw error(error_message(op, argument, value, expected));
}

/// Throws unless `ok`; arguments as for fail().
template <class V>
void check(bool ok, std::string_view op, std::string_view argument, const V& value, std::string_view expected) {
  if (!ok) fail(op, argument, value, expected);
}

DSA_NAMESPACE_END
