// dsa::model sampling: greedy ties, the exact nucleus, the sampled distribution (chi-square on a
// small vocabulary), determinism per seed, and every rejection.
#include "dsa/model/sampling.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

using dsa::model::greedy_token;
using dsa::model::sample_token;
using dsa::model::sampler;
using dsa::model::sampling_params;
using dsa::model::sampling_workspace;
using dsa::model::top_p_candidates;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();

std::vector<std::int32_t> nucleus(const std::vector<float>& logits, float temperature, float top_p) {
  sampling_workspace ws;
  const std::size_t kept = top_p_candidates(logits, sampling_params{temperature, top_p}, ws);
  return {ws.order.begin(), ws.order.begin() + static_cast<std::ptrdiff_t>(kept)};
}

// Pearson's chi-square statistic of observed counts against probabilities p (sum 1).
double chi_square(const std::vector<long>& counts, const std::vector<double>& p, long n) {
  double chi2 = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0) continue;
    const double e = p[i] * static_cast<double>(n);
    const double d = static_cast<double>(counts[i]) - e;
    chi2 += d * d / e;
  }
  return chi2;
}

}  // namespace

TEST_CASE("greedy_token: argmax with ties to the smaller id") {
  CHECK(greedy_token(std::vector<float>{0.5f, 2.0f, -1.0f}) == 1);
  CHECK(greedy_token(std::vector<float>{3.0f, 1.0f, 3.0f}) == 0);
  CHECK(greedy_token(std::vector<float>{-inf, 1.0f, 7.0f, 7.0f, 7.0f}) == 2);
  CHECK(greedy_token(std::vector<float>{-inf, -inf, -5.0f}) == 2);
  CHECK(greedy_token(std::vector<float>{-0.0f, 0.0f}) == 0);  // -0 == +0: a tie
  CHECK(greedy_token(std::vector<float>{42.0f}) == 0);
  std::vector<float> big(129280, -1.0f);
  big[129279] = 0.0f;
  big[77] = 0.0f;
  CHECK(greedy_token(big) == 77);
}

TEST_CASE("greedy_token: rejects empty, NaN, +inf and all -inf logits") {
  CHECK_THROWS_WITH_AS(greedy_token(std::vector<float>{}), doctest::Contains("dsa::model::greedy_token: logits.size() = 0"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(greedy_token(std::vector<float>{1.0f, nan_f, 2.0f}),
                       doctest::Contains("dsa::model::greedy_token: logits[1] = nan; expected a finite value"), dsa::error);
  CHECK_THROWS_WITH_AS(greedy_token(std::vector<float>{1.0f, 2.0f, inf}),
                       doctest::Contains("dsa::model::greedy_token: logits[2] = inf"), dsa::error);
  CHECK_THROWS_WITH_AS(greedy_token(std::vector<float>{-inf, -inf}),
                       doctest::Contains("dsa::model::greedy_token: logits = all -inf; expected at least one token"),
                       dsa::error);
}

TEST_CASE("uniform_01: the top 53 bits of the engine output as a fraction") {
  CHECK(dsa::model::uniform_01(0) == 0.0);
  CHECK(dsa::model::uniform_01(~std::uint64_t{0}) == 1.0 - 0x1.0p-53);
  CHECK(dsa::model::uniform_01(std::uint64_t{1} << 63) == 0.5);
  CHECK(dsa::model::uniform_01((std::uint64_t{1} << 11) - 1) == 0.0);  // the low 11 bits are dropped
  CHECK(dsa::model::uniform_01(std::uint64_t{1} << 11) == 0x1.0p-53);
}

TEST_CASE("top-p: the nucleus is the shortest prefix reaching top_p, exactly at the boundary") {
  // Four equal logits: weights 1 each, total 4, so the thresholds are exact in binary.
  const std::vector<float> flat{0.0f, 0.0f, 0.0f, 0.0f};
  CHECK(nucleus(flat, 1.0f, 0.25f) == std::vector<std::int32_t>{0});
  CHECK(nucleus(flat, 1.0f, 0.5f) == std::vector<std::int32_t>{0, 1});  // cum 2 >= 2: no third
  CHECK(nucleus(flat, 1.0f, std::nextafter(0.5f, 1.0f)) == std::vector<std::int32_t>{0, 1, 2});
  CHECK(nucleus(flat, 1.0f, 1.0f) == std::vector<std::int32_t>{0, 1, 2, 3});
  CHECK(nucleus(flat, 1.0f, 1e-30f) == std::vector<std::int32_t>{0});

  // Logits ln(w) with w = 8, 4, 2, 1, 1 (out of id order), temperature 1: weights relative to
  // the maximum are 1, 1/2, 1/4, 1/8, 1/8 up to exp() rounding, total 2.
  const float l2 = std::log(2.0f);
  const std::vector<float> logits{-l2, 0.0f, -3 * l2, -2 * l2, -3 * l2};  // weights x 1/8: 4, 8, 1, 2, 1
  CHECK(nucleus(logits, 1.0f, 0.4f) == std::vector<std::int32_t>{1});
  CHECK(nucleus(logits, 1.0f, 0.6f) == std::vector<std::int32_t>{1, 0});
  CHECK(nucleus(logits, 1.0f, 0.8f) == std::vector<std::int32_t>{1, 0, 3});
  CHECK(nucleus(logits, 1.0f, 0.9f) == std::vector<std::int32_t>{1, 0, 3, 2});  // tie 2 vs 4: smaller id
  CHECK(nucleus(logits, 1.0f, 1.0f) == std::vector<std::int32_t>{1, 0, 3, 2, 4});

  // Temperature reshapes before truncation: at T = 0.25 the top token has ~0.94 of the mass.
  CHECK(nucleus(logits, 0.25f, 0.9f) == std::vector<std::int32_t>{1});
  CHECK(nucleus(logits, 4.0f, 0.9f).size() == 5);

  // Masked tokens are never candidates, even with top_p = 1.
  CHECK(nucleus({-inf, 1.0f, -inf, 0.0f}, 1.0f, 1.0f) == std::vector<std::int32_t>{1, 3});
  // A token whose weight underflows to 0 is not a candidate either.
  CHECK(nucleus({0.0f, -1000.0f}, 1.0f, 1.0f) == std::vector<std::int32_t>{0});
}

TEST_CASE("sample_token: u selects along the nucleus in order of decreasing probability") {
  const std::vector<float> flat{0.0f, 0.0f, 0.0f, 0.0f};
  const sampling_params all{1.0f, 1.0f};
  CHECK(sample_token(flat, all, 0.0) == 0);
  CHECK(sample_token(flat, all, 0.2499) == 0);
  CHECK(sample_token(flat, all, 0.25) == 1);  // cum 1 > 1 is false: the next token
  CHECK(sample_token(flat, all, 0.5) == 2);
  CHECK(sample_token(flat, all, 0.75) == 3);
  CHECK(sample_token(flat, all, 1.0 - 0x1.0p-53) == 3);
  const sampling_params half{1.0f, 0.5f};
  CHECK(sample_token(flat, half, 0.0) == 0);
  CHECK(sample_token(flat, half, 0.5) == 1);
  CHECK(sample_token(flat, half, 1.0 - 0x1.0p-53) == 1);  // never beyond the nucleus
  // Most probable first, whatever the id order.
  CHECK(sample_token(std::vector<float>{0.0f, 5.0f, 1.0f}, all, 0.0) == 1);
  // A tiny temperature is greedy for every u.
  for (double u : {0.0, 0.3, 0.999999}) CHECK(sample_token(std::vector<float>{0.0f, 1.0f, 0.5f}, {1e-3f, 1.0f}, u) == 1);
}

TEST_CASE("sampler: the sampled frequencies match softmax(logits / T) renormalised on the nucleus") {
  const std::vector<float> logits{1.0f, 0.2f, -0.5f, 1.4f, 0.0f, -2.0f};
  struct cfg {
    float t, p;
  };
  for (const cfg c : {cfg{1.0f, 1.0f}, cfg{0.7f, 1.0f}, cfg{1.6f, 0.8f}, cfg{1.0f, 0.6f}}) {
    CAPTURE(c.t);
    CAPTURE(c.p);
    // Expected distribution, computed independently in double.
    std::vector<double> w(logits.size());
    double total = 0.0;
    for (std::size_t i = 0; i < w.size(); ++i) total += (w[i] = std::exp(static_cast<double>(logits[i]) / c.t));
    std::vector<std::size_t> order{3, 0, 1, 4, 2, 5};  // ids by decreasing logit
    std::vector<double> p(w.size(), 0.0);
    double cum = 0.0, kept = 0.0;
    for (std::size_t id : order) {
      if (cum >= c.p * total) break;
      cum += w[id];
      p[id] = w[id];
      kept += w[id];
    }
    for (double& x : p) x /= kept;

    constexpr long n = 200000;
    sampler s({c.t, c.p}, 20240917);
    std::vector<long> counts(logits.size(), 0);
    for (long i = 0; i < n; ++i) ++counts[static_cast<std::size_t>(s(logits))];
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (p[i] == 0.0) CHECK(counts[i] == 0);  // truncated tokens are never drawn
    }
    // At most 5 degrees of freedom: the 0.999999 quantile of chi-square(5) is about 35.9, so a
    // correct sampler fails this with probability 1e-6 (and deterministically, for this seed).
    // A sampler off by 1% on the top token gives chi2 in the hundreds here.
    const double chi2 = chi_square(counts, p, n);
    CAPTURE(chi2);
    CHECK(chi2 < 35.9);
  }
}

TEST_CASE("sampler: one mt19937_64 draw per token, reproducible per seed") {
  const std::vector<float> logits{0.3f, -0.1f, 0.8f, 0.0f, 0.5f, -1.0f, 0.2f, 0.6f};
  const sampling_params params{0.9f, 0.95f};
  auto run = [&](std::uint64_t seed) {
    sampler s(params, seed);
    std::vector<std::int32_t> ids;
    for (int i = 0; i < 64; ++i) ids.push_back(s(logits));
    return ids;
  };
  CHECK(run(7) == run(7));
  CHECK(run(7) != run(8));

  // The draw procedure is the documented one: sample_token with uniform_01 of each engine output.
  std::mt19937_64 engine(7);
  const auto ids = run(7);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    CHECK(ids[i] == sample_token(logits, params, dsa::model::uniform_01(engine())));
  }

  // Regression pin: this exact sequence is what every conforming platform draws for seed 1
  // (mt19937_64's outputs are fixed by the C++ standard).
  sampler s1({1.0f, 1.0f}, 1);
  std::vector<std::int32_t> got;
  for (int i = 0; i < 12; ++i) got.push_back(s1(logits));
  std::mt19937_64 e1(1);
  std::vector<std::int32_t> want;
  for (int i = 0; i < 12; ++i) want.push_back(sample_token(logits, {1.0f, 1.0f}, dsa::model::uniform_01(e1())));
  CHECK(got == want);
  std::mt19937_64 e0;
  e0.discard(9999);
  CHECK(e0() == 9981545732273789042ull);  // the standard's check value of mt19937_64

  // A rejected call does not consume a draw: the stream continues as if it had not happened.
  sampler a(params, 99), b(params, 99);
  CHECK(a(logits) == b(logits));
  CHECK_THROWS_AS(a(std::vector<float>{1.0f, nan_f}), dsa::error);
  for (int i = 0; i < 16; ++i) CHECK(a(logits) == b(logits));
}

TEST_CASE("sampling: rejects bad parameters, logits and draws") {
  const std::vector<float> ok{0.0f, 1.0f};
  CHECK_THROWS_WITH_AS(sampler({0.0f, 1.0f}, 1), doctest::Contains("dsa::model::sampler: temperature = 0; expected a finite value > 0"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(sampler({-1.0f, 1.0f}, 1), doctest::Contains("temperature = -1"), dsa::error);
  CHECK_THROWS_WITH_AS(sampler({inf, 1.0f}, 1), doctest::Contains("temperature = inf"), dsa::error);
  CHECK_THROWS_WITH_AS(sampler({nan_f, 1.0f}, 1), doctest::Contains("temperature = nan"), dsa::error);
  CHECK_THROWS_WITH_AS(sampler({1.0f, 0.0f}, 1), doctest::Contains("dsa::model::sampler: top_p = 0; expected a value in (0, 1]"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(sampler({1.0f, 1.5f}, 1), doctest::Contains("top_p = 1.5"), dsa::error);
  CHECK_THROWS_WITH_AS(sampler({1.0f, nan_f}, 1), doctest::Contains("top_p = nan"), dsa::error);
  CHECK_THROWS_WITH_AS(sample_token(ok, {1.0f, -0.5f}, 0.5), doctest::Contains("dsa::model::sample_token: top_p = -0.5"), dsa::error);
  CHECK_THROWS_WITH_AS(sample_token(ok, {1.0f, 1.0f}, 1.0), doctest::Contains("dsa::model::sample_token: u = 1; expected a uniform draw in [0, 1)"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(sample_token(ok, {1.0f, 1.0f}, -0.1), doctest::Contains("u = -0.1"), dsa::error);

  sampler s({1.0f, 0.9f}, 3);
  CHECK_THROWS_WITH_AS(s(std::vector<float>{}), doctest::Contains("dsa::model::sample_token: logits.size() = 0"), dsa::error);
  CHECK_THROWS_WITH_AS(s(std::vector<float>{0.0f, 0.0f, nan_f}), doctest::Contains("dsa::model::sample_token: logits[2] = nan"), dsa::error);
  CHECK_THROWS_WITH_AS(s(std::vector<float>{inf, 0.0f}), doctest::Contains("logits[0] = inf"), dsa::error);
  CHECK_THROWS_WITH_AS(s(std::vector<float>{-inf}), doctest::Contains("logits = all -inf"), dsa::error);
  // Huge finite logits are fine (the maximum is subtracted before exp).
  CHECK(s(std::vector<float>{3e38f, -3e38f}) == 0);
}
