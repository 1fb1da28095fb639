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

/// Thrown when a host-side precondition fails: bad shapes, dtypes, ranges or file contents.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
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
