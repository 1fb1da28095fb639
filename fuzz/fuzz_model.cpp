// Fuzz target: a whole checkpoint, loaded and run. The golden tiny model (tests/data/tiny-dsv32)
// edited by a recipe the input encodes (model_recipe.hpp): config.json keys set, replaced or
// removed, tensors filled with a value (huge finite ones included), patched, removed, added or
// renamed. What must hold:
//   - loading either succeeds or throws dsa::error, whose message is printable and bounded
//     (a config contradicting the tensors, unused tensors, non-finite weights: issue 33 class 2);
//   - a loaded model runs a prefill and a decode step; logits that are not finite always come
//     with the sequence's first non-finite site, and the default policy throws nonfinite_error
//     naming that site, never plausible numbers after a NaN (issue 33 class 1).
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/error.hpp"
#include "dsa/model/transformer.hpp"
#include "fuzz_common.hpp"
#include "model_recipe.hpp"

namespace {

bool all_finite(const std::vector<float>& v) {
  for (const float x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

void run_model(const std::filesystem::path& dir) {
  std::optional<dsa::model::transformer<dsa::cpu_backend>> m;
  try {
    m.emplace(dsa::model::transformer<dsa::cpu_backend>::load(dir, dsa::cpu_backend{1}));
  } catch (const dsa::error& e) {
    dsa_fuzz::check_printable(e.what());
    return;
  }
  const std::vector<std::int32_t> prompt = {5, 17, 3, 99, 42, 7};
  auto seq = m->new_sequence(std::min<dsa::index_t>(16, m->config().max_position_embeddings));
  dsa::model::forward_options propagate;
  propagate.on_nonfinite = dsa::model::nonfinite_policy::propagate;
  std::vector<float> logits;
  try {
    logits = m->forward(seq, std::span<const std::int32_t>(prompt.data(), std::min<std::size_t>(prompt.size(), seq.max_tokens() - 1)), propagate);
  } catch (const dsa::error& e) {
    dsa_fuzz::check_printable(e.what());  // e.g. a token id beyond an edited vocab_size
    return;
  }
  if (!all_finite(logits)) DSA_FUZZ_ASSERT(seq.first_nonfinite().has_value());
  const std::int32_t next = 1;
  try {
    const std::vector<float> step = m->forward(seq, std::span<const std::int32_t>(&next, 1));
    DSA_FUZZ_ASSERT(all_finite(step));
  } catch (const dsa::model::nonfinite_error& e) {
    dsa_fuzz::check_printable(e.what());
    DSA_FUZZ_ASSERT(seq.first_nonfinite().has_value() && e.site() == *seq.first_nonfinite());
  } catch (const dsa::error& e) {
    dsa_fuzz::check_printable(e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const dsa_fuzz::model_base base(std::filesystem::path(DSA_SOURCE_DIR) / "tests" / "data" / "tiny-dsv32");
  static const std::filesystem::path dir = [] {
    auto p = std::filesystem::temp_directory_path() / ("dsa_fuzz_model_" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    return p;
  }();
  if (!dsa_fuzz::write_recipe_checkpoint(base, std::span<const std::uint8_t>(data, size), dir)) return 0;
  run_model(dir);
  return 0;
}
