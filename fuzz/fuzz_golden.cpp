// Fuzz target: the golden-file reader of dsa_validate (tools/validate/primitive_cases.hpp) on
// arbitrary safetensors contents: every known group the file names is run through the ops.
// Any input must either run (the comparison may pass or fail) or be refused with dsa::error
// (input_error derives from it).
#include <cstddef>
#include <cstdint>
#include <string>

#include "dsa/core/backend.hpp"
#include "dsa/core/error.hpp"
#include "fuzz_common.hpp"
#include "validate/primitive_cases.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static dsa_fuzz::memfd_file file("dsa_fuzz_golden");
  const std::string& path = file.write(data, size);
  try {
    const auto f = dsa::safetensors_file::open(path);
    (void)dsa_validate::unknown_groups(f);
    for (const std::string& g : dsa_validate::detect_groups(f)) {
      try {
        const auto r = dsa_validate::run_group(dsa::cpu_backend{1}, f, g);
        for (const auto& c : r.comparisons) (void)c.pass;
      } catch (const dsa::error& e) {
        dsa_fuzz::check_printable(e.what());
      }
    }
  } catch (const dsa::error& e) {
    dsa_fuzz::check_printable(e.what());
  }
  return 0;
}
