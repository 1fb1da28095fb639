// The host helpers both transformers share (the CPU layers and dsa/model/cuda/): the grouping of
// MoE assignments by expert (group_by_expert) and the row slices of a checkpoint weight
// (linear_weight::rows), including their errors.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dsa/core/error.hpp"
#include "dsa/model/layers/moe.hpp"
#include "dsa/model/weights.hpp"

namespace {

using dsa::index_t;

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const dsa::error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("group_by_expert: consecutive rows per expert, ascending tokens, a row map that inverts token_of") {
  // 4 tokens x 2 experts out of 5; expert 3 gets no token.
  const std::vector<std::int32_t> ids{2, 0, 0, 4, 2, 1, 4, 0};
  const auto g = dsa::model::group_by_expert(ids, 4, 2, 5);
  CHECK(g.count == std::vector<index_t>{3, 1, 2, 0, 2});
  CHECK(g.offset == std::vector<index_t>{0, 3, 4, 6, 6, 8});
  // expert 0: tokens 0, 1, 3; expert 1: token 2; expert 2: tokens 0, 2; expert 4: tokens 1, 3.
  CHECK(g.token_of == std::vector<std::int32_t>{0, 1, 3, 2, 0, 2, 1, 3});
  CHECK(g.rows == std::vector<std::int32_t>{4, 0, 1, 6, 5, 3, 7, 2});
  for (index_t i = 0; i < 4; ++i) {
    for (index_t j = 0; j < 2; ++j) {
      const std::int32_t r = g.rows[static_cast<std::size_t>(i * 2 + j)];
      CHECK(g.token_of[static_cast<std::size_t>(r)] == i);
      const std::int32_t e = ids[static_cast<std::size_t>(i * 2 + j)];
      CHECK(r >= g.offset[static_cast<std::size_t>(e)]);
      CHECK(r < g.offset[static_cast<std::size_t>(e) + 1]);
    }
  }
}

TEST_CASE("group_by_expert rejects expert ids outside [0, n_experts)") {
  CHECK(error_of([] { (void)dsa::model::group_by_expert({0, 5}, 1, 2, 5); }) ==
        "dsa::model::moe_forward: expert_ids[1] = 5; expected an expert id in [0, 5)");
  CHECK(error_of([] { (void)dsa::model::group_by_expert({-1, 0}, 2, 1, 5); }) ==
        "dsa::model::moe_forward: expert_ids[0] = -1; expected an expert id in [0, 5)");
}

TEST_CASE("linear_weight::rows slices FP8 codes with their scale blocks, and bf16 rows") {
  // FP8 [300, 256]: scales [3, 2]; rows [128, 300) -> codes from row 128, scales from block 1 (2 blocks, the last ragged).
  std::vector<dsa::fp8_e4m3> q(300 * 256);
  std::vector<float> s(3 * 2);
  dsa::model::linear_weight w;
  w.name = "w.weight";
  w.q = dsa::make_view(static_cast<const dsa::fp8_e4m3*>(q.data()), {300, 256});
  w.scale = dsa::make_view(static_cast<const float*>(s.data()), {3, 2});
  const auto r = w.rows(128, 172);
  CHECK(r.fp8());
  CHECK(r.name == "w.weight");
  CHECK(r.q.data_handle() == q.data() + 128 * 256);
  CHECK(r.q.extent(0) == 172);
  CHECK(r.scale.data_handle() == s.data() + 2);
  CHECK(r.scale.extent(0) == 2);
  CHECK(error_of([&] { (void)w.rows(64, 10); }) ==
        "dsa::model::linear_weight::rows: begin = 64; expected a multiple of 128 (an FP8 scale block boundary) for "
        "w.weight");
  CHECK(error_of([&] { (void)w.rows(256, 64); }) ==
        "dsa::model::linear_weight::rows: [begin, begin + count) = [256, 320); expected a range within the 300 output "
        "rows of w.weight");

  std::vector<dsa::bf16> b(10 * 4);
  dsa::model::linear_weight wb;
  wb.name = "b.weight";
  wb.w = dsa::make_view(static_cast<const dsa::bf16*>(b.data()), {10, 4});
  const auto rb = wb.rows(3, 5);  // any begin for bf16 weights
  CHECK(!rb.fp8());
  CHECK(rb.w.data_handle() == b.data() + 12);
  CHECK(rb.w.extent(0) == 5);
  CHECK(rb.w.extent(1) == 4);
}
