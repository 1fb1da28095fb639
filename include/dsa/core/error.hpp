// dsa::error and the precondition helpers every op front-end uses.
//
// Message format (tests assert on it, users grep for it):
//   "dsa::<op>: <argument> = <value>; expected <what was expected>"
#pragma once

#include <charconv>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "dsa/core/config.hpp"
#include "dsa/core/quote.hpp"

DSA_NAMESPACE_BEGIN

namespace detail {

/// A dsa::error's message as stored: escaped for a terminal (dsa/core/quote.hpp) and at most
/// error_message_max_bytes long, so no file content can drive a terminal or flood a log.
inline std::string printable_error_message(std::string_view what) {
  if (what.size() <= error_message_max_bytes) return escape_for_terminal(what);
  return escape_for_terminal(what.substr(0, error_message_max_bytes)) + "... (message cut; " +
         std::to_string(what.size()) + " bytes in all)";
}

}  // namespace detail

/// Thrown when a host-side precondition fails: bad shapes, dtypes, ranges or file contents. The
/// message is printable as it stands: escaped and bounded on construction
/// (detail::printable_error_message); strings that came from outside are quoted() where they are
/// put in.
class error : public std::runtime_error {
 public:
  explicit error(std::string_view what) : std::runtime_error(detail::printable_error_message(what)) {}
  explicit error(const std::string& what) : error(std::string_view(what)) {}
  explicit error(const char* what) : error(std::string_view(what)) {}
};

namespace detail {

/// `v` as message text, independent of any C++ locale: numbers through std::to_chars (floats as
/// printf's %g, as an ostream would in the classic locale), strings as they are. A stream would
/// take the process's global locale (digit grouping, another decimal point), and an extension
/// module carrying its own static libstdc++ (a wheel built by a toolchain that links it so) crashes
/// formatting through a stream once the process's libstdc++ owns the locale objects.
template <class V>
std::string format_value(const V& v) {
  if constexpr (std::is_same_v<V, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_enum_v<V>) {
    return format_value(static_cast<std::underlying_type_t<V>>(v));
  } else if constexpr (std::is_integral_v<V>) {
    char buf[24];
    // One-byte integers are numbers here, not characters.
    const auto r = sizeof(V) == 1 ? std::to_chars(buf, buf + sizeof buf, static_cast<int>(v))
                                  : std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
  } else if constexpr (std::is_floating_point_v<V>) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 6);
    return std::string(buf, r.ptr);
  } else if constexpr (std::is_convertible_v<const V&, std::string_view>) {
    return std::string(std::string_view(v));
  } else {
    std::ostringstream os;
    os.imbue(std::locale::classic());
    os << v;
    return os.str();
  }
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
