// The host helpers both transformers share (the CPU layers and dsa/model/cuda/): the grouping of
// MoE assignments by expert (group_by_expert), the CUDA decode grouping's per-thread functions
// (dsa/numerics/moe_grouping.hpp, run here in the kernel's phases) against it, and the row slices
// of a checkpoint weight (linear_weight::rows), including their errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "dsa/core/error.hpp"
#include "dsa/model/layers/moe.hpp"
#include "dsa/model/weights.hpp"
#include "dsa/numerics/moe_grouping.hpp"

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

// What moe_group_kernel (dsa/model/cuda/moe.cuh) computes, phase by phase with the same
// functions: the counts (any thread order), one thread's offsets and active list, then every slot
// placed, here in a shuffled order (threads place theirs in no particular order).
struct device_grouping {
  std::vector<std::int32_t> count, offset, active, rows, token_of;
};

device_grouping group_as_the_kernel(const std::vector<std::int32_t>& ids, index_t k, index_t n_experts,
                                    std::uint64_t seed) {
  const auto slots = static_cast<index_t>(ids.size());
  device_grouping g;
  g.count.resize(static_cast<std::size_t>(n_experts));
  for (index_t e = 0; e < n_experts; ++e) g.count[static_cast<std::size_t>(e)] = dsa::moe_expert_count(ids.data(), slots, e);
  g.offset.assign(static_cast<std::size_t>(n_experts) + 1, -7);
  g.active.assign(static_cast<std::size_t>(std::max<index_t>(1, std::min(n_experts, slots))), -7);
  g.active.resize(static_cast<std::size_t>(dsa::moe_expert_offsets(g.count.data(), n_experts, g.offset.data(), g.active.data())));
  g.rows.assign(static_cast<std::size_t>(slots), 0x5A5A5A5A);
  g.token_of.assign(static_cast<std::size_t>(slots), -1);
  std::vector<index_t> order(static_cast<std::size_t>(slots));
  std::iota(order.begin(), order.end(), index_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  for (const index_t i : order) {
    dsa::moe_place_slot(ids.data(), i, k, n_experts, g.offset.data(), g.rows.data(), g.token_of.data());
  }
  return g;
}

// t tokens' k expert ids out of n: distinct and ascending per token (what moe_route gives) or,
// with `repeats`, any.
std::vector<std::int32_t> random_routing(index_t t, index_t k, index_t n_experts, bool repeats, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> ids, all(static_cast<std::size_t>(n_experts));
  std::iota(all.begin(), all.end(), 0);
  for (index_t i = 0; i < t; ++i) {
    std::shuffle(all.begin(), all.end(), rng);
    for (index_t j = 0; j < k; ++j) {
      ids.push_back(repeats ? static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(n_experts))
                            : all[static_cast<std::size_t>(j)]);
    }
    if (!repeats) std::sort(ids.end() - k, ids.end());
  }
  return ids;
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

TEST_CASE("the CUDA decode grouping's functions, in the kernel's phases, give group_by_expert's layout") {
  struct shape {
    index_t t, k, n_experts;
    bool repeats;
  };
  // Decode steps of DeepSeek-V3.2 (8 of 256) up to moe_grouped_max_tokens tokens, and odd shapes:
  // one expert, more slots than experts, repeated ids, many experts.
  const shape shapes[] = {{1, 8, 256, false}, {8, 8, 256, false}, {3, 2, 5, true}, {8, 3, 1, true},
                          {5, 4, 2000, false}, {1, 1, 1, false},  {7, 6, 9, true}, {8, 8, 64, true}};
  std::uint64_t seed = 11;
  for (const auto& s : shapes) {
    CAPTURE(s.t);
    CAPTURE(s.k);
    CAPTURE(s.n_experts);
    const auto ids = random_routing(s.t, s.k, s.n_experts, s.repeats, ++seed);
    const auto host = dsa::model::group_by_expert(ids, s.t, s.k, s.n_experts);
    const auto dev = group_as_the_kernel(ids, s.k, s.n_experts, ++seed);
    CHECK(std::vector<index_t>(dev.count.begin(), dev.count.end()) == host.count);
    CHECK(std::vector<index_t>(dev.offset.begin(), dev.offset.end()) == host.offset);
    CHECK(dev.rows == host.rows);
    CHECK(dev.token_of == host.token_of);
    std::vector<std::int32_t> with_slots;
    for (index_t e = 0; e < s.n_experts; ++e) {
      if (host.count[static_cast<std::size_t>(e)] > 0) with_slots.push_back(static_cast<std::int32_t>(e));
    }
    CHECK(dev.active == with_slots);
  }
}

TEST_CASE("the CUDA decode grouping neither counts nor places an id that names no expert") {
  // The host grouping refuses such ids; a kernel cannot, and must not write out of bounds.
  const std::vector<std::int32_t> ids{2, -1, 0, 9, 2, 1, 4, 0};
  const auto dev = group_as_the_kernel(ids, 2, 5, 3);
  CHECK(dev.count == std::vector<std::int32_t>{2, 1, 2, 0, 1});
  CHECK(dev.offset == std::vector<std::int32_t>{0, 2, 3, 5, 5, 6});
  CHECK(dev.active == std::vector<std::int32_t>{0, 1, 2, 4});
  CHECK(dev.rows == std::vector<std::int32_t>{3, -1, 0, -1, 4, 2, 5, 1});
  // Rows 0-5 are taken (tokens of the valid slots, ascending per expert); rows 6 and 7 by none.
  CHECK(dev.token_of == std::vector<std::int32_t>{1, 3, 2, 0, 2, 3, -1, -1});
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
