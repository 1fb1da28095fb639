// dsa_validate's golden-file reader on hostile files: shapes that cost no bytes in the file (an
// extent of 0 elsewhere) must not size the tensors it allocates (regressions found by
// fuzz/fuzz_golden.cpp; docs/robustness.md).
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <limits>
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

TEST_CASE("weight_quant of a [0, INT64_MAX] weight expects a [0, 2^56] scale, not a negative extent") {
  // Issue 14: the expected scale shape was (cols + 127) / 128, which overflowed to a negative
  // extent for an empty weight of INT64_MAX columns (such a file costs no bytes).
  const auto path = temp_file("weight_quant.safetensors");
  constexpr dsa::index_t max = std::numeric_limits<dsa::index_t>::max();
  std::vector<dsa::safetensors_entry> e = {
      {"weight_quant.w", dsa::dtype::f32, {0, max}, {}},
      {"weight_quant.q", dsa::dtype::f8_e4m3, {0, max}, {}},
      {"weight_quant.s", dsa::dtype::f32, {0, 1}, {}},
  };
  dsa::write_safetensors(path, e);
  {
    const auto f = dsa::safetensors_file::open(path);
    CHECK_THROWS_WITH_AS(dsa_validate::run_group(dsa::cpu_backend{1}, f, "weight_quant"),
                         doctest::Contains("tensor 'weight_quant.s' shape = [0, 1]; expected [0, 72057594037927936]"),
                         dsa_validate::input_error);
  }
  e[2].shape = {0, dsa::index_t{1} << 56};
  dsa::write_safetensors(path, e);
  {
    const auto f = dsa::safetensors_file::open(path);
    // Well-formed now, and it runs; but its expected tensors are empty, so it compares nothing,
    // which is a failure (issue 33, class 8), not a pass.
    const dsa_validate::case_result r = dsa_validate::run_group(dsa::cpu_backend{1}, f, "weight_quant");
    CHECK_FALSE(r.pass());
    CHECK(r.comparisons.back().metric == dsa_validate::empty_metric);
  }
  std::filesystem::remove(path);
}

TEST_CASE("a file shape whose element count is zero but whose other extents overflow is an input_error") {
  // [2^40, 0, 2^40] costs no bytes; its view would have a product of non-zero extents beyond
  // int64, which dsa::tensor_view refuses at construction.
  const auto path = temp_file("indexer_overflow.safetensors");
  constexpr dsa::index_t big = dsa::index_t{1} << 40;
  std::vector<dsa::safetensors_entry> e = {
      {"indexer.q", dsa::dtype::f8_e4m3, {0, big, big}, {}},
      {"indexer.w", dsa::dtype::f32, {0, big}, {}},
      {"indexer.k", dsa::dtype::f8_e4m3, {0, big}, {}},
      {"indexer.k_scale", dsa::dtype::f32, {0}, {}},
      {"indexer.score", dsa::dtype::f32, {0, 0}, {}},
  };
  dsa::write_safetensors(path, e);
  const auto f = dsa::safetensors_file::open(path);
  CHECK_THROWS_WITH_AS(dsa_validate::run_group(dsa::cpu_backend{1}, f, "indexer"),
                       doctest::Contains("group 'indexer': dsa::tensor_view: extents = [0, 1099511627776, "
                                         "1099511627776]; expected an element count"),
                       dsa_validate::input_error);
  std::filesystem::remove(path);
}

TEST_CASE("a kl_sparse case with 10^12 zero-width query rows runs in memory proportional to its data") {
  // Issue 14: the CPU backend kept one double per query row, so a 448-byte file with [m, h, 0]
  // tensors made dsa_validate allocate 8 bytes x m (7.8 GB for m = 10^9; std::bad_alloc beyond).
  // Every key set is empty: the loss is 0 (compared, and it agrees) and there is no gradient to
  // compare, which fails the group (an empty expected tensor compares nothing: issue 33, class 8).
  const auto path = temp_file("kl_sparse.safetensors");
  constexpr dsa::index_t m = 1'000'000'000'000;
  const float zero = 0.0f;
  std::vector<dsa::safetensors_entry> e = {
      {"kl_sparse.attn", dsa::dtype::f32, {m, 2, 0}, {}},
      {"kl_sparse.index", dsa::dtype::f32, {m, 0}, {}},
      {"kl_sparse.topk", dsa::dtype::i32, {m, 0}, {}},
      {"kl_sparse.loss", dsa::dtype::f32, {1}, std::as_bytes(std::span(&zero, 1))},
      {"kl_sparse.grad_index", dsa::dtype::f32, {m, 0}, {}},
  };
  dsa::write_safetensors(path, e);
  const auto f = dsa::safetensors_file::open(path);
  const dsa_validate::case_result r = dsa_validate::run_group(dsa::cpu_backend{1}, f, "kl_sparse");
  CHECK(r.comparisons.front().tensor == "kl_sparse.loss");
  CHECK(r.comparisons.front().pass);
  CHECK_FALSE(r.pass());
  CHECK(r.comparisons.back().tensor == "kl_sparse.grad_index");
  CHECK(r.comparisons.back().metric == dsa_validate::empty_metric);
  std::filesystem::remove(path);
}
