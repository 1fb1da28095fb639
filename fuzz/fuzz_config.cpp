// Fuzz target: dsa::model::config::load on arbitrary config.json contents.
//
// Any input must either load, giving a config that passes validate() and survives a round trip
// (from_json(to_json(c)) == c), or be refused with dsa::error whose message is bounded: every text
// from the file in it is dsa::quoted (at most 256 bytes each), whatever the file holds (issue 33).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "dsa/core/error.hpp"
#include "dsa/model/config.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static dsa_fuzz::memfd_file file("dsa_fuzz_config");
  const std::string& path = file.write(data, size);
  dsa::model::config c;
  try {
    c = dsa::model::config::load(path);
  } catch (const dsa::error& e) {
    dsa_fuzz::check_printable(e.what());
    // The path is /proc/self/fd/N; the rest is dsa's text and a few quoted values.
    DSA_FUZZ_ASSERT(std::strlen(e.what()) <= 2048);
    return 0;
  }
  // A loaded config is valid, and what it writes it reads back unchanged.
  c.validate("fuzz");
  const auto again = dsa::model::config::from_json(c.to_json(), "round trip");
  DSA_FUZZ_ASSERT(again == c);
  (void)c.to_string();
  (void)c.softmax_scale();
  return 0;
}
