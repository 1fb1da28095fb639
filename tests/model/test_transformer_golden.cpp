// The golden replay of the tiny DeepSeek-V3.2 model (tests/data/tiny-dsv32, produced by DeepSeek's
// own reference code): the acceptance criteria of ../shared/golden/README.md.
#include <doctest/doctest.h>

#include <filesystem>
#include <iostream>
#include <numeric>

#include "dsa/core/backend.hpp"
#include "validate/model_cases.hpp"

namespace {
const std::filesystem::path tiny_dir = std::filesystem::path(DSA_TEST_DATA_DIR) / "tiny-dsv32";
}

TEST_CASE("tiny-dsv32 golden replay meets the README criteria") {
  const auto r = dsa_validate::run_model_case(dsa::cpu_backend{2}, tiny_dir);
  for (const auto& line : r.diagnostics) MESSAGE(line);
  REQUIRE(r.cosines.size() == 9);
  for (std::size_t s = 0; s < r.cosines.size(); ++s) {
    CAPTURE(s);
    CHECK(r.cosines[s] >= dsa_validate::model_min_cosine);
  }
  const int agree = std::accumulate(r.argmax_match.begin(), r.argmax_match.end(), 0);
  CHECK(agree >= static_cast<int>(r.argmax_match.size()) - 1);
  REQUIRE(r.topk_agreement.size() == 3);
  for (std::size_t l = 0; l < r.topk_agreement.size(); ++l) {
    CAPTURE(l);
    CHECK(r.topk_agreement[l] >= dsa_validate::model_min_topk_agreement);
  }
  CHECK(r.result.pass());
}
