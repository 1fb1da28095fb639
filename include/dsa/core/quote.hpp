// How dsa prints text it did not write itself: names and values read from files, command-line
// arguments, strings a caller passed in. Such text may carry terminal escape sequences, forged
// log lines or megabytes of junk, so everything dsa echoes goes through one of two functions:
//
//   escape_for_terminal(text)  every byte that could drive a terminal or a log written as an
//                              inert escape; printable text, UTF-8 included, unchanged. Applied
//                              to every dsa::error message on construction.
//   quoted(text)               the same, in single quotes, at most quote_max_bytes of the text
//                              and then how long it really was. Every file- or user-supplied
//                              string in a message goes through it.
//
// Escaped: C0 controls and DEL (0x00-0x1F, 0x7F) as \xNN; bytes that are not part of a valid
// UTF-8 sequence as \xNN (a lone 0x9B is CSI to a terminal in an 8-bit locale); the C1 controls
// U+0080-U+009F (CSI, OSC, ... in a UTF-8 terminal) and the bidirectional overrides and isolates
// U+202A-U+202E, U+2066-U+2069 (text that reads differently from what it is) as \uNNNN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "dsa/core/config.hpp"

DSA_NAMESPACE_BEGIN

/// Bytes of a user- or file-supplied string quoted() shows before it cuts the text.
inline constexpr std::size_t quote_max_bytes = 256;

/// Bytes of a whole dsa::error message past which it is cut (with a note of its real length).
inline constexpr std::size_t error_message_max_bytes = 16384;

namespace detail {

/// Length of the valid UTF-8 sequence starting at text[i] (1..4), or 0 if it is not one
/// (stray continuation byte, overlong form, surrogate, > U+10FFFF, truncated); `cp` gets its
/// code point.
inline std::size_t utf8_sequence(std::string_view text, std::size_t i, std::uint32_t& cp) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  std::size_t len = 0;
  std::uint32_t min = 0;
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, min = 0x80, cp = b0 & 0x1Fu;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, min = 0x800, cp = b0 & 0x0Fu;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, min = 0x10000, cp = b0 & 0x07u;
  } else {
    return 0;
  }
  if (text.size() - i < len) return 0;
  for (std::size_t j = 1; j < len; ++j) {
    const auto b = static_cast<unsigned char>(text[i + j]);
    if ((b & 0xC0u) != 0x80u) return 0;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

/// Code points that change how text is displayed rather than what it says.
constexpr bool is_display_control(std::uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

inline void append_escape(std::string& out, char kind, std::uint32_t value, int digits) {
  constexpr char hex[] = "0123456789abcdef";
  out += '\\';
  out += kind;
  for (int d = digits - 1; d >= 0; --d) out += hex[(value >> (4 * d)) & 0xFu];
}

}  // namespace detail

/// True when `text` is entirely valid UTF-8 (what JSON, hence a safetensors header, can hold).
inline bool is_valid_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    std::uint32_t cp = 0;
    const std::size_t len = detail::utf8_sequence(text, i, cp);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

/// `text` with every byte or code point that could drive a terminal or forge a log line written
/// as an inert escape (see the top of this file); everything else unchanged.
inline std::string escape_for_terminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    std::uint32_t cp = 0;
    const std::size_t len = detail::utf8_sequence(text, i, cp);
    if (len == 0) {
      detail::append_escape(out, 'x', static_cast<unsigned char>(text[i]), 2);
      ++i;
    } else if (len == 1 && (cp < 0x20 || cp == 0x7F)) {
      detail::append_escape(out, 'x', cp, 2);
      ++i;
    } else if (detail::is_display_control(cp)) {
      detail::append_escape(out, 'u', cp, 4);
      i += len;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

/// `text` in single quotes, escaped as escape_for_terminal; when it is longer than `max_bytes`
/// bytes, only its first max_bytes (cut at a character boundary) followed by
/// "... (N bytes in all)". The one way to echo a string dsa did not write.
inline std::string quoted(std::string_view text, std::size_t max_bytes = quote_max_bytes) {
  std::string_view shown = text;
  if (text.size() > max_bytes) {
    std::size_t cut = max_bytes;
    // Back up over continuation bytes so a multi-byte character is not split into \x escapes.
    while (cut > 0 && cut + 4 > max_bytes && (static_cast<unsigned char>(text[cut]) & 0xC0u) == 0x80u) --cut;
    shown = text.substr(0, cut);
  }
  std::string out = "'";
  out += escape_for_terminal(shown);
  out += '\'';
  if (shown.size() < text.size()) out += "... (" + std::to_string(text.size()) + " bytes in all)";
  return out;
}

DSA_NAMESPACE_END
