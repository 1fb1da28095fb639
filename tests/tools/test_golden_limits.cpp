// dsa_validate's golden-file reader on hostile files: shapes that cost no bytes in the file (an
// extent of 0 elsewhere) must not size the tensors it allocates (regressions found by
// fuzz/fuzz_golden.cpp; docs/robustness.md).
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "../../tools/validate/primitive_cases.hpp"
#include "dsa/model/safetensors.hpp"

namespace {

std::filesystem::path temp_file(const char* name) {
  return std::filesystem::temp_directory_path() / (std::string("dsa_test_golden_limits_") + name);
}

}  // namespace

TEST_CASE("an indexer case with 10^12 empty query rows is an input_error, not a 16 TB allocation") {
  const auto path = temp_file("indexer.safetensors");
  constexpr dsa::index_t m = 1'000'000'000'000;
  std::vector<dsa::safetensors_entry> e = {
      {"indexer.q", dsa::dtype::f8_e4m3, {m, 0, 4}, {}},
      {"indexer.w", dsa::dtype::f32, {m, 0}, {}},
      {"indexer.k", dsa::dtype::f8_e4m3, {0, 4}, {}},
      {"indexer.k_scale", dsa::dtype::f32, {0}, {}},
      {"indexer.score", dsa::dtype::f32, {m, 0}, {}},
  };
  dsa::write_safetensors(path, e);
  const auto f = dsa::safetensors_file::open(path);
  CHECK_THROWS_WITH_AS(dsa_validate::run_group(dsa::cpu_backend{1}, f, "indexer"),
                       doctest::Contains("dsa_validate: a tensor of shape [1000000000000, 2] derived from the inputs; "
                                         "expected at most 256 MiB"),
                       dsa_validate::input_error);
  std::filesystem::remove(path);
}
