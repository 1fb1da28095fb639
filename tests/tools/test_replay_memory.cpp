// The golden model replay's memory against its input (issue 33, class 4): the replay streams the
// batch rows in groups of model_replay_group_rows (one batched forward per step), so without kept
// outputs it holds about as much for 32 rows as for one group, and with them (--dump, Python's
// validate_model) as much plus the outputs themselves; the kept outputs are
// sized against a limit before the first row runs. Measured with a counting global operator new
// (this executable only): what is live at the replay's peak, beyond what was live before it.
#include <doctest/doctest.h>
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/model/safetensors.hpp"
#include "validate/model_cases.hpp"

// ---- counting allocator -------------------------------------------------------------------------

namespace {

std::atomic<std::int64_t> live_bytes{0};
std::atomic<std::int64_t> peak_bytes{0};

void* counted_alloc(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) return nullptr;
  const auto now = live_bytes.fetch_add(static_cast<std::int64_t>(malloc_usable_size(p))) +
                   static_cast<std::int64_t>(malloc_usable_size(p));
  std::int64_t peak = peak_bytes.load();
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  live_bytes.fetch_sub(static_cast<std::int64_t>(malloc_usable_size(p)));
  std::free(p);
}

}  // namespace

void* operator new(std::size_t n) {
  if (void* p = counted_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = counted_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }

namespace {

/// Bytes allocated through operator new at the peak of `f()`, beyond what was live before it.
template <class F>
std::int64_t peak_growth(F&& f) {
  const std::int64_t before = live_bytes.load();
  peak_bytes.store(before);
  f();
  return peak_bytes.load() - before;
}

namespace fs = std::filesystem;

const fs::path tiny_dir = fs::path(DSA_TEST_DATA_DIR) / "tiny-dsv32";

// A golden directory of the tiny model whose expected file has `batch` rows of a `len`-token
// prompt and `steps` generated tokens: every tensor the replay requires, in its shapes, but the
// block outputs empty ([0, 0, 0]: not compared, so they cost the file nothing, as in a hostile
// file) and the logits and top-k zeros (the checks fail; the memory is what is measured).
struct crafted_dir {
  fs::path dir;
  crafted_dir(const std::string& name, dsa::index_t batch, dsa::index_t len, dsa::index_t steps) {
    dir = fs::temp_directory_path() / ("dsa_test_replay_memory_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy_file(tiny_dir / "config.json", dir / "config.json");
    fs::copy_file(tiny_dir / "model.safetensors", dir / "model.safetensors");
    std::vector<std::int64_t> prompt(static_cast<std::size_t>(batch * len)),
        gen(static_cast<std::size_t>(batch * steps));
    for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<std::int64_t>((i * 37 + 11) % 512);
    for (std::size_t i = 0; i < gen.size(); ++i) gen[i] = static_cast<std::int64_t>((i * 53 + 7) % 512);
    const std::vector<float> logits(static_cast<std::size_t>(batch * 512), 0.0f);
    const dsa::index_t k0 = std::min<dsa::index_t>(32, len);  // index_topk of the tiny model
    const std::vector<std::int64_t> topk(static_cast<std::size_t>(batch * len * k0), 0);
    std::vector<dsa::safetensors_entry> e = {
        {"prompt", dsa::dtype::i64, {batch, len}, std::as_bytes(std::span(prompt))},
        {"generated", dsa::dtype::i64, {batch, steps}, std::as_bytes(std::span(gen))},
    };
    for (dsa::index_t s = 0; s <= steps; ++s) {
      e.push_back(
          {"step" + std::to_string(s) + ".logits", dsa::dtype::f32, {batch, 512}, std::as_bytes(std::span(logits))});
    }
    for (int l = 0; l < 3; ++l) {
      const std::string name = "step0.layer" + std::to_string(l);
      e.push_back({name + ".topk", dsa::dtype::i64, {batch, len, k0}, std::as_bytes(std::span(topk))});
      e.push_back({name + ".ffn_out", dsa::dtype::bf16, {0, 0, 0}, {}});
      e.push_back({name + ".residual", dsa::dtype::bf16, {0, 0, 0}, {}});
    }
    dsa::write_safetensors(dir / "expected.safetensors", e);
  }
  ~crafted_dir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  crafted_dir(const crafted_dir&) = delete;
  crafted_dir& operator=(const crafted_dir&) = delete;
};

std::int64_t output_bytes(const dsa_validate::model_case_result& r) {
  std::int64_t n = 0;
  for (const auto& o : r.result.outputs) n += static_cast<std::int64_t>(o.bytes.size());
  return n;
}

}  // namespace

TEST_CASE("the model replay's memory does not grow with the batch, beyond the outputs it keeps") {
  // Issue 33: every row's buffers were kept until all rows were done (and then copied once more
  // to stack them), so a 1.6 MB expected file of 400 prompts grew past 0.9 GB. The replay now
  // holds one group of rows at a time (model_replay_group_rows, replayed together); the tiny
  // model itself (its weights, the forward pass's buffers) is the same for any batch. Two groups
  // are the reference rather than one row because the replay holds a whole group's caches, and
  // the model builds its decode weights in the first group's first decode step and keeps them, so
  // only a second group's peak includes them. What does grow with the rows is the report (a few
  // comparisons and lines per row, as the file's own per-row logits do), about 2.3 KB per row here.
  constexpr dsa::index_t group = dsa_validate::model_detail::model_replay_group_rows;
  constexpr dsa::index_t two_groups = 2 * group, rows = 6 * group, len = 64, steps = 2;
  const crafted_dir one("group", two_groups, len, steps), many("many", rows, len, steps);
  const dsa::cpu_backend be{2};
  const dsa::index_t chunk = dsa::model::forward_options{}.max_chunk;

  // Warm up once, so that lazily built state of the process (thread pool, ...) is not counted in
  // the first measurement only.
  (void)dsa_validate::run_model_case(be, one.dir, chunk, false);

  SUBCASE("checks only (dsa_validate without --dump): 6 groups of rows within 1.2 x two") {
    std::size_t comparisons = 0;
    const std::int64_t m1 = peak_growth([&] { (void)dsa_validate::run_model_case(be, one.dir, chunk, false); });
    const std::int64_t m4 = peak_growth([&] {
      const auto r = dsa_validate::run_model_case(be, many.dir, chunk, false);
      comparisons = r.result.comparisons.size();
      CHECK(r.result.outputs.empty());
    });
    MESSAGE("peak growth: batch " << two_groups << " " << m1 << " bytes, batch " << rows << " " << m4 << " bytes");
    CHECK(comparisons == static_cast<std::size_t>(rows * (steps + 1 + 1 + 3)));  // every row checked
    CHECK(m4 <= m1 + m1 / 5);
  }
  SUBCASE("with the outputs kept (--dump): 6 groups within 1.2 x two plus the outputs") {
    std::int64_t dump = 0, dump1 = 0;
    const std::int64_t m1 =
        peak_growth([&] { dump1 = output_bytes(dsa_validate::run_model_case(be, one.dir, chunk, true)); });
    const std::int64_t m4 =
        peak_growth([&] { dump = output_bytes(dsa_validate::run_model_case(be, many.dir, chunk, true)); });
    MESSAGE("peak growth: batch " << two_groups << " " << m1 << " bytes, batch " << rows << " " << m4
                                  << " bytes, kept outputs " << dump << " bytes");
    CHECK(dump == 3 * dump1);  // the same layout, stacked
    CHECK(m4 <= m1 + m1 / 5 + dump);
  }
}

TEST_CASE("the kept outputs are sized against the replay's limit before the first row runs") {
  constexpr dsa::index_t rows = 16, len = 64, steps = 2;
  const crafted_dir many("limit", rows, len, steps);
  const dsa::cpu_backend be{2};
  const dsa::index_t chunk = dsa::model::forward_options{}.max_chunk;
  // The outputs of 16 rows: 3 logits [16, 512] F32, per layer [16, 64, 32] I64 and 2 x [16, 64,
  // 256] BF16, per decode step and layer [16, 1, min(index_topk 32, 64 + s)] I64; plus 256 bytes
  // for each of the 3 + 9 + 6 tensors.
  const std::uint64_t want =
      rows * (3 * 512 * 4 + 3 * (64 * 32 * 8 + 2 * 64 * 256 * 2) + 3 * (32 * 8 + 32 * 8)) + 18 * 256;
  const std::int64_t budget = static_cast<std::int64_t>(want) / 4;  // a quarter of the outputs
  const std::int64_t growth = peak_growth([&] {
    CHECK_THROWS_WITH_AS(
        (void)dsa_validate::run_model_case(be, many.dir, chunk, true, want - 1),
        doctest::Contains(("expected.safetensors': computed tensors kept for the dump = " + std::to_string(want) +
                           " bytes (18 tensors: batch 16, prompt 64, 2 "
                           "generated, 3 layers); expected at most " +
                           std::to_string(want - 1) + " bytes")
                              .c_str()),
        dsa_validate::input_error);
  });
  CHECK(growth < budget);  // refused before the outputs (or any row) were allocated
  const auto r = dsa_validate::run_model_case(be, many.dir, chunk, true, want);  // exactly at the limit: runs
  CHECK(output_bytes(r) + 18 * 256 == static_cast<std::int64_t>(want));
}

TEST_CASE("an expected file without the compared top-k is refused before the replay, whatever its batch") {
  // The file: 400 prompts of 256 tokens and step0.logits, 1.6 MB, nothing else. The old
  // replay ran all 400 rows (minutes, 0.4 GB here) before it noticed step0.layer0.topk missing.
  const fs::path dir = fs::temp_directory_path() / ("dsa_test_replay_memory_" + std::to_string(::getpid()) + "_issue");
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(tiny_dir / "config.json", dir / "config.json");
  fs::copy_file(tiny_dir / "model.safetensors", dir / "model.safetensors");
  const std::vector<std::int64_t> prompt(400 * 256, 5);
  const std::vector<float> logits(400 * 512, 0.0f);
  dsa::write_safetensors(dir / "expected.safetensors",
                         std::vector<dsa::safetensors_entry>{
                             {"prompt", dsa::dtype::i64, {400, 256}, std::as_bytes(std::span(prompt))},
                             {"generated", dsa::dtype::i64, {400, 0}, {}},
                             {"step0.logits", dsa::dtype::f32, {400, 512}, std::as_bytes(std::span(logits))},
                         });
  const std::int64_t growth = peak_growth([&] {
    CHECK_THROWS_WITH_AS(
        (void)dsa_validate::run_model_case(dsa::cpu_backend{2}, dir),
        doctest::Contains("group 'model': tensor 'step0.layer0.topk' is missing; expected I64 of rank 3"),
        dsa_validate::input_error);
  });
  // The model and the file's prompt (0.8 MB, copied) are all it held: not one row of outputs.
  CHECK(growth < std::int64_t{32} << 20);
  fs::remove_all(dir);
}
