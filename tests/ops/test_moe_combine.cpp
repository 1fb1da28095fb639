// dsa::moe_combine: front-end checks and CPU results against a double-precision oracle and an
// fp32 oracle of the normative order (numerics/moe_combine.hpp: slot order, each product
// rounded to fp32, shared expert last, one bf16 rounding).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dsa/cpu/moe_combine.hpp"
#include "dsa/ops/moe_combine.hpp"
#include "support/random.hpp"
#include "support/sparse_mha_reference.hpp"

namespace {

using dsa::bf16;
using dsa::index_t;

// A routed batch: t tokens, k experts each, the expert outputs grouped by expert (as the
// forward pass runs them), so rows[] is a permutation with some -1 slots.
struct problem {
  index_t t, k, d, r = 0;
  std::vector<bf16> expert_out, shared;
  std::vector<std::int32_t> rows;
  std::vector<float> w;

  problem(index_t t_, index_t k_, index_t d_, std::uint64_t seed) : t(t_), k(k_), d(d_) {
    std::mt19937_64 rng(seed);
    rows.assign(static_cast<std::size_t>(t * k), -1);
    // Assign rows in a shuffled order so that un-permuting matters.
    std::vector<std::size_t> slots;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (rng() % 5 != 0) slots.push_back(i);  // ~20% of the slots have no expert
    }
    std::shuffle(slots.begin(), slots.end(), rng);
    for (std::size_t i = 0; i < slots.size(); ++i) rows[slots[i]] = static_cast<std::int32_t>(i);
    r = static_cast<index_t>(slots.size());
    expert_out = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(r * d), seed + 1));
    shared = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(t * d), seed + 2));
    w = dsa_test::uniform(static_cast<std::size_t>(t * k), seed + 3, 0.0f, 2.5f);
  }

  auto e_view() const { return dsa::make_view(expert_out.data(), {r, d}); }
  auto rows_view() const { return dsa::make_view(rows.data(), {t, k}); }
  auto w_view() const { return dsa::make_view(w.data(), {t, k}); }
  auto shared_view() const { return dsa::make_view(shared.data(), {t, d}); }

  // The normative fp32 evaluation, written out.
  std::vector<bf16> fp32_oracle(bool with_shared) const {
    std::vector<bf16> y(static_cast<std::size_t>(t * d));
    for (index_t i = 0; i < t; ++i) {
      for (index_t c = 0; c < d; ++c) {
        float acc = 0.0f;
        for (index_t j = 0; j < k; ++j) {
          const std::int32_t row = rows[static_cast<std::size_t>(i * k + j)];
          if (row < 0) continue;
          // The product of an fp32 and a bf16 is exact in double: rounding it to float is fl32(w·e).
          const float prod = static_cast<float>(double(w[static_cast<std::size_t>(i * k + j)]) *
                                                double(expert_out[static_cast<std::size_t>(row * d + c)].to_float()));
          acc = acc + prod;
        }
        if (with_shared) acc = acc + shared[static_cast<std::size_t>(i * d + c)].to_float();
        y[static_cast<std::size_t>(i * d + c)] = bf16(acc);
      }
    }
    return y;
  }

  // The exact sum in double (before the final bf16 rounding).
  std::vector<double> double_oracle(bool with_shared) const {
    std::vector<double> y(static_cast<std::size_t>(t * d), 0.0);
    for (index_t i = 0; i < t; ++i) {
      for (index_t c = 0; c < d; ++c) {
        double acc = 0.0;
        for (index_t j = 0; j < k; ++j) {
          const std::int32_t row = rows[static_cast<std::size_t>(i * k + j)];
          if (row >= 0) acc += double(w[static_cast<std::size_t>(i * k + j)]) * expert_out[static_cast<std::size_t>(row * d + c)].to_float();
        }
        if (with_shared) acc += shared[static_cast<std::size_t>(i * d + c)].to_float();
        y[static_cast<std::size_t>(i * d + c)] = acc;
      }
    }
    return y;
  }
};

std::vector<bf16> run(const problem& p, bool with_shared, dsa::cpu_backend be = dsa::cpu_backend{2}) {
  std::vector<bf16> y(static_cast<std::size_t>(p.t * p.d), bf16::from_bits(0x7FC1));
  dsa::moe_combine(be, p.e_view(), p.rows_view(), p.w_view(),
                   with_shared ? p.shared_view() : dsa::host_view<const bf16, 2>{}, dsa::make_view(y.data(), {p.t, p.d}));
  return y;
}

bool same_bits(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(bf16)) == 0;
}

}  // namespace

TEST_CASE("moe_combine equals the normative fp32 order and the double sum within rounding") {
  const problem p(37, 4, 96, 41);
  for (bool with_shared : {true, false}) {
    CAPTURE(with_shared);
    const std::vector<bf16> y = run(p, with_shared);
    CHECK(same_bits(y, p.fp32_oracle(with_shared)));
    // Against the exact sum: one bf16 rounding plus at most (k + 1) fp32 roundings of partial sums.
    const std::vector<double> exact = p.double_oracle(with_shared);
    int bad = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      double bound = 0.0;  // sum of |terms|: the fp32 accumulation error is below 2^-23 of it per step
      const index_t tok = static_cast<index_t>(i) / p.d, c = static_cast<index_t>(i) % p.d;
      for (index_t j = 0; j < p.k; ++j) {
        const std::int32_t row = p.rows[static_cast<std::size_t>(tok * p.k + j)];
        if (row >= 0) bound += std::fabs(double(p.w[static_cast<std::size_t>(tok * p.k + j)]) * p.expert_out[static_cast<std::size_t>(row * p.d + c)].to_float());
      }
      if (with_shared) bound += std::fabs(p.shared[i].to_float());
      const double tol = dsa_test::bf16_half_ulp(exact[i]) * 1.0001 + double(p.k + 1) * std::ldexp(bound, -23);
      if (!(std::fabs(y[i].to_float() - exact[i]) <= tol)) ++bad;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("moe_combine sums in slot order, rounds each product, adds the shared expert last") {
  // Slot order: 1 + 2^-8 is a bf16 tie (rounds to 1.0, even). Adding 3 · 2^-25 one at a time
  // after it changes nothing in fp32; summed first (another order) it would tip the tie up.
  std::vector<bf16> e = {bf16(1.0f)};
  std::vector<std::int32_t> rows = {0, 0, 0, 0};
  std::vector<float> w = {1.0f + 0x1p-8f, 0x1p-25f, 0x1p-25f, 0x1p-25f};
  std::vector<bf16> y(1);
  dsa::moe_combine(dsa::cpu, dsa::make_view(e.data(), {1, 1}), dsa::make_view(rows.data(), {1, 4}),
                   dsa::make_view(w.data(), {1, 4}), dsa::host_view<const bf16, 2>{}, dsa::make_view(y.data(), {1, 1}));
  CHECK(y[0].to_float() == 1.0f);
  // The reversed slot order tips it (so the test above can fail).
  std::vector<float> w_rev = {0x1p-25f, 0x1p-25f, 0x1p-25f, 1.0f + 0x1p-8f};
  dsa::moe_combine(dsa::cpu, dsa::make_view(e.data(), {1, 1}), dsa::make_view(rows.data(), {1, 4}),
                   dsa::make_view(w_rev.data(), {1, 4}), dsa::host_view<const bf16, 2>{}, dsa::make_view(y.data(), {1, 1}));
  CHECK(y[0].to_float() == 1.0f + 0x1p-7f);

  // Products are rounded to fp32 before the addition (no FMA): fl32(w1·e1) cancels slot 0
  // exactly, a fused multiply-add would leave 2^-30.
  std::vector<bf16> e2 = {bf16(1.0f), bf16(1.0f + 0x1p-7f)};
  std::vector<std::int32_t> rows2 = {0, 1};
  std::vector<float> w2 = {-(1.0f + 0x1p-7f + 0x1p-23f), 1.0f + 0x1p-23f};
  dsa::moe_combine(dsa::cpu, dsa::make_view(e2.data(), {2, 1}), dsa::make_view(rows2.data(), {1, 2}),
                   dsa::make_view(w2.data(), {1, 2}), dsa::host_view<const bf16, 2>{}, dsa::make_view(y.data(), {1, 1}));
  CHECK(y[0].bits == 0);

  // The shared expert is added to the fp32 routed sum (1 + 2^-8, a bf16 tie), not to its bf16
  // rounding (1.0): 2^-20 on top of the tie rounds up.
  std::vector<bf16> sh = {bf16(0x1p-20f)};
  dsa::moe_combine(dsa::cpu, dsa::make_view(e.data(), {1, 1}), dsa::make_view(rows.data(), {1, 4}),
                   dsa::make_view(w.data(), {1, 4}), dsa::make_view(sh.data(), {1, 1}), dsa::make_view(y.data(), {1, 1}));
  CHECK(y[0].to_float() == 1.0f + 0x1p-7f);  // 1 + 2^-8 + 2^-20 rounds up; bf16(1) + 2^-20 would not
}

TEST_CASE("moe_combine -1 slots, no experts at all, k = 0, no tokens") {
  SUBCASE("a token with every slot -1 gets the shared expert (or zeros)") {
    problem p(3, 4, 8, 43);
    std::fill(p.rows.begin() + 4, p.rows.begin() + 8, -1);
    const auto y = run(p, true);
    for (index_t c = 0; c < p.d; ++c) CHECK(y[static_cast<std::size_t>(p.d + c)].bits == p.shared[static_cast<std::size_t>(p.d + c)].bits);
    const auto y0 = run(p, false);
    for (index_t c = 0; c < p.d; ++c) CHECK(y0[static_cast<std::size_t>(p.d + c)].bits == 0);
  }
  SUBCASE("k = 0, no expert rows") {
    std::vector<bf16> sh = dsa_test::convert<bf16>(dsa_test::normal(12, 44)), y(12);
    dsa::moe_combine(dsa::cpu, dsa::host_view<const bf16, 2>(nullptr, {0, 6}),
                     dsa::host_view<const std::int32_t, 2>(nullptr, {2, 0}), dsa::host_view<const float, 2>(nullptr, {2, 0}),
                     dsa::make_view(sh.data(), {2, 6}), dsa::make_view(y.data(), {2, 6}));
    CHECK(same_bits(y, sh));
  }
  SUBCASE("no tokens") {
    problem p(0, 4, 8, 45);
    dsa::moe_combine(dsa::cpu, p.e_view(), p.rows_view(), p.w_view(), p.shared_view(),
                     dsa::host_view<bf16, 2>(nullptr, {0, 8}));
  }
}

TEST_CASE("moe_combine in place over the shared expert, strided rows") {
  const problem p(9, 3, 40, 47);
  const auto want = run(p, true);
  std::vector<bf16> inplace = p.shared;
  dsa::moe_combine(dsa::cpu, p.e_view(), p.rows_view(), p.w_view(), dsa::make_view(static_cast<const bf16*>(inplace.data()), {p.t, p.d}),
                   dsa::make_view(inplace.data(), {p.t, p.d}));
  CHECK(same_bits(inplace, want));
  // y with padded rows.
  std::vector<bf16> padded(static_cast<std::size_t>(p.t * (p.d + 8)));
  const dsa::host_view<bf16, 2> yv(padded.data(), {p.t, p.d}, {p.d + 8, 1});
  dsa::moe_combine(dsa::cpu, p.e_view(), p.rows_view(), p.w_view(), p.shared_view(), yv);
  for (index_t i = 0; i < p.t; ++i) {
    for (index_t c = 0; c < p.d; ++c) CHECK(yv(i, c).bits == want[static_cast<std::size_t>(i * p.d + c)].bits);
  }
}

TEST_CASE("moe_combine is bit-identical for every thread count") {
  const problem p(300, 8, 64, 49);
  const auto one = run(p, true, dsa::cpu_backend{1});
  for (int threads : {2, 3, 7}) {
    CAPTURE(threads);
    CHECK(same_bits(one, run(p, true, dsa::cpu_backend{threads})));
  }
}

TEST_CASE("moe_combine rejects bad arguments") {
  problem p(3, 2, 8, 51);
  std::vector<bf16> y(static_cast<std::size_t>(p.t * p.d) + 16);
  const auto e = p.e_view();
  const auto rows = p.rows_view();
  const auto w = p.w_view();
  const auto sh = p.shared_view();
  const auto yv = dsa::make_view(y.data(), {p.t, p.d});
  dsa::moe_combine(dsa::cpu, e, rows, w, sh, yv);

  CHECK_THROWS_WITH_AS(dsa::moe_combine(dsa::cpu, e, dsa::make_view(p.rows.data(), {p.t - 1, p.k}),
                                        dsa::make_view(p.w.data(), {p.t - 1, p.k}), sh, yv),
                       doctest::Contains("dsa::moe_combine: rows.extent(0) = 2; expected 3"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::moe_combine(dsa::cpu, e, rows, dsa::make_view(p.w.data(), {p.t - 1, p.k}), sh, yv),
                       doctest::Contains("dsa::moe_combine: weights.extent(0) = 2; expected 3"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::moe_combine(dsa::cpu, e, rows, dsa::make_view(p.w.data(), {p.t, p.k - 1}), sh, yv),
                       doctest::Contains("dsa::moe_combine: weights.extent(1) = 1; expected 2"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::moe_combine(dsa::cpu, dsa::make_view(p.expert_out.data(), {1, p.d + 1}), rows, w, sh,
                                        dsa::make_view(y.data(), {p.t, p.d})),
                       doctest::Contains("dsa::moe_combine: expert_out.extent(1) = 9; expected 8"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::moe_combine(dsa::cpu, e, rows, w, dsa::make_view(p.shared.data(), {p.t, p.d - 1}), yv),
                       doctest::Contains("dsa::moe_combine: shared.extent(1) = 7; expected 8"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::moe_combine(dsa::cpu, e, rows, w, dsa::make_view(p.shared.data(), {p.t - 1, p.d}), yv),
                       doctest::Contains("dsa::moe_combine: shared.extent(0) = 2; expected 3"), dsa::error);

  // Row indices: -1 is "no expert", anything else must be a row of expert_out.
  for (std::int32_t bad : {-2, static_cast<std::int32_t>(p.r), INT32_MAX, INT32_MIN}) {
    CAPTURE(bad);
    std::vector<std::int32_t> r = p.rows;
    r[3] = bad;
    std::fill(y.begin(), y.end(), bf16(7.0f));
    const std::string message = "dsa::moe_combine: rows(1, 1) = " + std::to_string(bad) +
                                "; expected -1 (no expert) or a row of expert_out in [0, " + std::to_string(p.r) + ")";
    CHECK_THROWS_WITH_AS(dsa::moe_combine(dsa::cpu, e, dsa::make_view(r.data(), {p.t, p.k}), w, sh, yv),
                         doctest::Contains(message.c_str()), dsa::error);
    for (const bf16 x : y) CHECK(x.to_float() == 7.0f);  // nothing written
  }

  // Strides, null data, overlaps.
  CHECK_THROWS_WITH_AS(dsa::moe_combine(dsa::cpu, dsa::host_view<const bf16, 2>(p.expert_out.data(), {p.r, p.d / 2}, {p.d, 2}),
                                        rows, w, dsa::host_view<const bf16, 2>{}, dsa::make_view(y.data(), {p.t, p.d / 2})),
                       doctest::Contains("dsa::moe_combine: expert_out.stride(1) = 2; expected 1"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::moe_combine(dsa::cpu, e, dsa::host_view<const std::int32_t, 2>(nullptr, {p.t, p.k}), w, sh, yv),
                       doctest::Contains("dsa::moe_combine: rows.data = null"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::moe_combine(dsa::cpu, e, rows, dsa::host_view<const float, 2>(nullptr, {p.t, p.k}), sh, yv),
                       doctest::Contains("dsa::moe_combine: weights.data = null"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::moe_combine(dsa::cpu, e, rows, w, sh, dsa::host_view<bf16, 2>(y.data(), {p.t, p.d}, {0, 1})),
                       doctest::Contains("dsa::moe_combine: y.stride(0) = 0; expected |stride| >= 8"), dsa::error);
  std::vector<bf16> sh2 = p.shared;
  CHECK_THROWS_WITH_AS(
      dsa::moe_combine(dsa::cpu, dsa::make_view(static_cast<const bf16*>(sh2.data()), {p.t, p.d}), rows, w,
                       dsa::host_view<const bf16, 2>{}, dsa::make_view(sh2.data(), {p.t, p.d})),
      doctest::Contains("dsa::moe_combine: y = a view overlapping expert_out; expected memory disjoint from expert_out"),
      dsa::error);
  std::vector<bf16> big(static_cast<std::size_t>(p.t * p.d) + 8);
  const auto shared_part = dsa::make_view(static_cast<const bf16*>(big.data()), {p.t, p.d});
  CHECK_THROWS_WITH_AS(dsa::moe_combine(dsa::cpu, e, rows, w, shared_part, dsa::make_view(big.data() + 4, {p.t, p.d})),
                       doctest::Contains("dsa::moe_combine: y = a view overlapping shared; expected either exactly shared "
                                         "(in place) or memory disjoint from it"),
                       dsa::error);
}
