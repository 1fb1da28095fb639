// dsa::quoted and dsa::escape_for_terminal: how dsa echoes text it did not write.
#include <doctest/doctest.h>

#include <string>

#include "dsa/core/error.hpp"
#include "dsa/core/quote.hpp"

TEST_CASE("escape_for_terminal: C0 controls, DEL and invalid UTF-8 bytes as \\xNN") {
  CHECK(dsa::escape_for_terminal(std::string("a\x1b[2Jb\r\n") + '\0' + "\x07\x7f") ==
        "a\\x1b[2Jb\\x0d\\x0a\\x00\\x07\\x7f");
  // A lone CSI byte (0x9B), a stray continuation byte, an overlong '/' (C0 AF), a surrogate
  // (ED A0 80), a code point past U+10FFFF (F4 90 80 80) and a truncated sequence.
  CHECK(dsa::escape_for_terminal("\x9b" "31m") == "\\x9b31m");
  CHECK(dsa::escape_for_terminal("\x80") == "\\x80");
  CHECK(dsa::escape_for_terminal("\xc0\xaf") == "\\xc0\\xaf");
  CHECK(dsa::escape_for_terminal("\xed\xa0\x80") == "\\xed\\xa0\\x80");
  CHECK(dsa::escape_for_terminal("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");
  CHECK(dsa::escape_for_terminal("ok\xe2\x82") == "ok\\xe2\\x82");
}

TEST_CASE("escape_for_terminal: C1 controls and bidirectional overrides as \\uNNNN, other UTF-8 unchanged") {
  CHECK(dsa::escape_for_terminal("\xc2\x9b" "2J") == "\\u009b2J");   // U+009B CSI
  CHECK(dsa::escape_for_terminal("\xc2\x9d" "0;t") == "\\u009d0;t");  // U+009D OSC
  CHECK(dsa::escape_for_terminal("\xc2\x80\xc2\x9f") == "\\u0080\\u009f");
  CHECK(dsa::escape_for_terminal("x\xe2\x80\xaey") == "x\\u202ey");  // U+202E RIGHT-TO-LEFT OVERRIDE
  CHECK(dsa::escape_for_terminal("\xe2\x81\xa6") == "\\u2066");
  // Printable non-ASCII passes: Latin-1 letters (U+00A0 and up), CJK, emoji.
  CHECK(dsa::escape_for_terminal("Größe \xc2\xa0 \xe6\xbc\xa2 \xf0\x9f\x98\x80") == "Größe \xc2\xa0 \xe6\xbc\xa2 \xf0\x9f\x98\x80");
}

TEST_CASE("quoted: single quotes, escaped, cut after quote_max_bytes with the real length") {
  CHECK(dsa::quoted("w1") == "'w1'");
  CHECK(dsa::quoted("") == "''");
  CHECK(dsa::quoted("a\nb") == "'a\\x0ab'");
  const std::string huge(15u << 20, 'x');
  const std::string q = dsa::quoted(huge);
  CHECK(q.size() < dsa::quote_max_bytes + 64);
  CHECK(q == "'" + std::string(dsa::quote_max_bytes, 'x') + "'... (15728640 bytes in all)");
  CHECK(dsa::quoted("abcdef", 3) == "'abc'... (6 bytes in all)");
  // The cut does not split a multi-byte character into escapes.
  CHECK(dsa::quoted("ab\xc3\xa9z", 3) == "'ab'... (5 bytes in all)");
  CHECK(dsa::quoted("ab\xe6\xbc\xa2z", 4) == "'ab'... (6 bytes in all)");
}

TEST_CASE("every dsa::error message is escaped and bounded") {
  CHECK(std::string(dsa::error("a\xc2\x9b" "b").what()) == "a\\u009bb");
  const std::string huge(1u << 20, 'y');
  const std::string what = dsa::error(huge).what();
  CHECK(what.size() < dsa::error_message_max_bytes + 64);
  CHECK(what.find("(message cut; 1048576 bytes in all)") != std::string::npos);
}
