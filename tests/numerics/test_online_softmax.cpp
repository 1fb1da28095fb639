// The online-softmax state update and merge (numerics/online_softmax.hpp), the FP8 MLA cache row
// decode (numerics/sparse_mla_attention.hpp) and the KL-loss element functions
// (numerics/indexer_kl_loss.hpp), against double-precision formulas.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "dsa/numerics/indexer_kl_loss.hpp"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/numerics/online_softmax.hpp"
#include "dsa/numerics/sparse_mla_attention.hpp"
#include "support/random.hpp"

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();

// Online softmax of logits x[b, e) with values v (width d), element by element.
struct partial {
  dsa::online_softmax_state st;
  std::vector<float> acc;
};

partial fold(const std::vector<float>& x, const std::vector<float>& v, std::size_t d, std::size_t b, std::size_t e) {
  partial p;
  p.acc.assign(d, 0.0f);
  for (std::size_t j = b; j < e; ++j) {
    const float alpha = dsa::online_softmax_update(p.st, x[j]);
    const float w = dsa::online_softmax_weight(p.st, x[j]);
    for (std::size_t c = 0; c < d; ++c) p.acc[c] = p.acc[c] * alpha + w * v[j * d + c];
  }
  return p;
}

}  // namespace

TEST_CASE("online softmax: element-wise folding and split-k merges match the two-pass softmax") {
  const std::size_t n = 301, d = 7;
  auto x = dsa_test::normal(n, 1, 4.0f);
  const auto v = dsa_test::normal(n * d, 2);
  x[100] = 30.0f;  // a late, dominant maximum forces rescaling of earlier terms

  double m = -1e300;
  for (const float xi : x) m = std::max(m, double(xi));
  double l = 0.0;
  std::vector<double> ref(d, 0.0);
  for (std::size_t j = 0; j < n; ++j) {
    const double w = std::exp(x[j] - m);
    l += w;
    for (std::size_t c = 0; c < d; ++c) ref[c] += w * v[j * d + c];
  }
  const double lse = m + std::log(l);

  const partial all = fold(x, v, d, 0, n);
  CHECK(dsa::online_softmax_lse(all.st) == doctest::Approx(lse).epsilon(1e-6));
  for (std::size_t c = 0; c < d; ++c) {
    CHECK(dsa::online_softmax_normalize(all.st, all.acc[c]) == doctest::Approx(ref[c] / l).epsilon(1e-5).scale(1e-5));
  }

  for (const std::size_t split : {std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{101}, std::size_t{250}, n}) {
    CAPTURE(split);
    partial a = fold(x, v, d, 0, split);
    const partial b = fold(x, v, d, split, n);
    dsa::online_softmax_merge_into(a.st, a.acc.data(), b.st, b.acc.data(), static_cast<dsa::index_t>(d));
    CHECK(dsa::online_softmax_lse(a.st) == doctest::Approx(lse).epsilon(1e-6));
    for (std::size_t c = 0; c < d; ++c) {
      CHECK(dsa::online_softmax_normalize(a.st, a.acc[c]) == doctest::Approx(ref[c] / l).epsilon(1e-5).scale(1e-5));
    }
  }
}

TEST_CASE("online softmax: the empty state is the identity of merge and finalises to 0 and +inf") {
  const dsa::online_softmax_state empty;
  CHECK(dsa::online_softmax_lse(empty) == inf);
  CHECK(dsa::online_softmax_normalize(empty, 0.0f) == 0.0f);
  CHECK(dsa::online_softmax_probability(empty, 3.0f) == 0.0f);

  dsa::online_softmax_state s;
  dsa::online_softmax_update(s, 1.5f);
  dsa::online_softmax_update(s, -0.5f);
  const auto f = dsa::online_softmax_merge(s, empty);
  CHECK(f.scale_a == 1.0f);
  CHECK(f.scale_b == 0.0f);
  CHECK(f.merged.max == s.max);
  CHECK(f.merged.sum == s.sum);
  const auto g = dsa::online_softmax_merge(empty, s);
  CHECK(g.scale_a == 0.0f);
  CHECK(g.scale_b == 1.0f);
  CHECK(g.merged.sum == s.sum);
  const auto e = dsa::online_softmax_merge(empty, empty);
  CHECK(e.merged.max == -inf);
  CHECK(e.merged.sum == 0.0f);
  CHECK(e.scale_a == 0.0f);
}

TEST_CASE("online softmax: -inf logits get weight 0 and never produce NaN") {
  dsa::online_softmax_state s;
  CHECK(dsa::online_softmax_update(s, -inf) == 1.0f);
  CHECK(s.max == -inf);
  CHECK(s.sum == 0.0f);
  CHECK(dsa::online_softmax_rescale(s, -inf) == 1.0f);
  CHECK(dsa::online_softmax_weight(s, -inf) == 0.0f);
  dsa::online_softmax_update(s, 2.0f);
  CHECK(s.max == 2.0f);
  CHECK(s.sum == 1.0f);
  dsa::online_softmax_update(s, -inf);
  CHECK(s.sum == 1.0f);
  CHECK(dsa::online_softmax_lse(s) == 2.0f);
  // A larger maximum rescales the sum: exp(2 - 4) + 1.
  const float alpha = dsa::online_softmax_rescale(s, 4.0f);
  CHECK(alpha == doctest::Approx(std::exp(-2.0)));
  CHECK(s.sum == doctest::Approx(std::exp(-2.0)));
}

TEST_CASE("online softmax: a NaN logit poisons the state in any position and through merges") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(dsa::detail::max_propagate_nan(nan, 1.0f)));
  CHECK(std::isnan(dsa::detail::max_propagate_nan(1.0f, nan)));
  CHECK(std::isnan(dsa::detail::max_propagate_nan(-inf, nan)));
  CHECK(dsa::detail::max_propagate_nan(1.0f, 2.0f) == 2.0f);
  CHECK(dsa::detail::max_propagate_nan(-inf, -inf) == -inf);
  for (std::size_t at = 0; at < 5; ++at) {  // first, middle, last; before and after the maximum
    CAPTURE(at);
    std::vector<float> x = {0.5f, 3.0f, -1.0f, -inf, 2.0f};
    const std::vector<float> v = {1, 2, 3, 4, 5};
    x[at] = nan;
    const partial p = fold(x, v, 1, 0, x.size());
    CHECK(std::isnan(p.st.max));
    CHECK(std::isnan(dsa::online_softmax_lse(p.st)));
    CHECK(std::isnan(dsa::online_softmax_normalize(p.st, p.acc[0])));
    CHECK(std::isnan(dsa::online_softmax_probability(p.st, 0.5f)));
    CHECK(std::isnan(dsa::online_softmax_probability_from_lse(0.5f, dsa::online_softmax_lse(p.st))));
    // Split into halves and merged, either side NaN, either order, also against an empty side.
    for (std::size_t cut = 0; cut <= x.size(); ++cut) {
      partial a = fold(x, v, 1, 0, cut), b = fold(x, v, 1, cut, x.size());
      dsa::online_softmax_merge_into(a.st, a.acc.data(), b.st, b.acc.data(), 1);
      CHECK(std::isnan(dsa::online_softmax_lse(a.st)));
      CHECK(std::isnan(dsa::online_softmax_normalize(a.st, a.acc[0])));
      partial c = fold(x, v, 1, cut, x.size()), d = fold(x, v, 1, 0, cut);
      dsa::online_softmax_merge_into(c.st, c.acc.data(), d.st, d.acc.data(), 1);
      CHECK(std::isnan(dsa::online_softmax_lse(c.st)));
    }
  }
  // A NaN value (not logit) reaches the accumulator through its weight, even a zero weight.
  const partial q = fold({0.0f, -inf}, {1.0f, nan}, 1, 0, 2);
  CHECK(std::isfinite(dsa::online_softmax_lse(q.st)));
  CHECK(std::isnan(dsa::online_softmax_normalize(q.st, q.acc[0])));
  // The empty state is still "no attention", not NaN.
  const dsa::online_softmax_state empty;
  CHECK(dsa::online_softmax_lse(empty) == inf);
  CHECK(dsa::online_softmax_normalize(empty, 0.0f) == 0.0f);
}

TEST_CASE("FP8 MLA cache row: layout and decode") {
  std::vector<std::uint8_t> row(656, 0);
  const float scales[4] = {0.125f, 1.0f, 0x1p-20f, 4096.0f};
  std::memcpy(row.data() + 512, scales, sizeof scales);
  row[0] = 0x38;    // 1.0
  row[1] = 0xB8;    // -1.0
  row[127] = 0x7E;  // 448
  row[128] = 0x01;  // 2^-9, the smallest subnormal
  row[300] = 0x7F;  // NaN
  row[511] = 0x40;  // 2.0
  const std::uint16_t r0 = dsa::bf16(-3.25f).bits, r63 = dsa::bf16(1e-3f).bits;
  std::memcpy(row.data() + 528, &r0, 2);
  std::memcpy(row.data() + 528 + 126, &r63, 2);
  std::vector<float> out(576, -1.0f);
  dsa::sparse_mla_fp8_row_to_f32(row.data(), out.data());
  CHECK(out[0] == 0.125f);
  CHECK(out[1] == -0.125f);
  CHECK(out[2] == 0.0f);
  CHECK(out[127] == 56.0f);
  CHECK(out[128] == 0x1p-9f);
  CHECK(std::isnan(out[300]));
  CHECK(out[511] == 8192.0f);
  CHECK(out[512] == -3.25f);
  CHECK(out[575] == dsa::bf16::from_bits(r63).to_float());
  CHECK(out[513] == 0.0f);
  // Equal to the bf16 unpack of kv_cache_fp8_unpack wherever the value is not NaN.
  std::vector<dsa::bf16> unpacked(576);
  dsa::kv_fp8_row_decode(row.data(), unpacked.data());
  for (std::size_t i = 0; i < 576; ++i) {
    if (i != 300) CHECK(unpacked[i].to_float() == out[i]);
  }
  CHECK(dsa::sparse_mla_index_valid(0, 1));
  CHECK_FALSE(dsa::sparse_mla_index_valid(1, 1));
  CHECK_FALSE(dsa::sparse_mla_index_valid(-1, 1));
  CHECK_FALSE(dsa::sparse_mla_index_valid(std::numeric_limits<std::int32_t>::min(), 1));
}

TEST_CASE("KL-loss element functions") {
  const auto st = dsa::kl_make_softmax_stats(2.0f, 4.0f);
  CHECK(dsa::kl_softmax_q(st, 2.0f) == 0.25f);
  CHECK(dsa::kl_log_q(st, 1.0f) == doctest::Approx(-1.0 - std::log(4.0)));
  CHECK(dsa::kl_log_q(st, -inf) == -inf);
  CHECK(dsa::kl_softmax_q(st, -inf) == 0.0f);
  CHECK(dsa::kl_term(0.0f, -inf) == 0.0f);
  CHECK(dsa::kl_term(0.5f, -inf) == inf);
  CHECK(dsa::kl_term(0.5f, std::log(0.5f)) == 0.0f);
  CHECK(dsa::kl_term(0.25f, std::log(0.5f)) == doctest::Approx(0.25 * std::log(0.5)));
  CHECK(dsa::kl_normalize_p(1.0f, 0.0f) == 0.0f);
  CHECK(dsa::kl_normalize_p(1.0f, 4.0f) == 0.25f);
  CHECK(dsa::kl_grad(0.25f, 0.5f, true) == -0.25f);
  CHECK(dsa::kl_grad(0.25f, 0.0f, false) == 0.0f);
  // A row whose scores are all -inf: q = 0, log q = -inf.
  const auto none = dsa::kl_make_softmax_stats(-inf, 0.0f);
  CHECK(dsa::kl_softmax_weight(-inf, -inf) == 0.0f);
  CHECK(dsa::kl_softmax_q(none, -inf) == 0.0f);
  CHECK(dsa::kl_log_q(none, -inf) == -inf);
  // NaN propagates: a NaN score max, a NaN softmax sum, a NaN row total, a NaN p.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(dsa::kl_score_max(1.0f, nan)));
  CHECK(std::isnan(dsa::kl_score_max(nan, 1.0f)));
  CHECK(std::isnan(dsa::kl_softmax_weight(nan, 1.0f)));
  const auto bad = dsa::kl_make_softmax_stats(1.0f, nan);
  CHECK(std::isnan(bad.log_sum));
  CHECK(std::isnan(dsa::kl_softmax_q(bad, 1.0f)));
  CHECK(std::isnan(dsa::kl_log_q(bad, 1.0f)));
  CHECK(dsa::kl_row_has_mass(nan));
  CHECK_FALSE(dsa::kl_row_has_mass(0.0f));
  CHECK(std::isnan(dsa::kl_normalize_p(1.0f, nan)));
  CHECK(std::isnan(dsa::kl_term(nan, -1.0f)));
  CHECK(std::isnan(dsa::kl_grad(0.25f, nan, dsa::kl_row_has_mass(nan))));
}
