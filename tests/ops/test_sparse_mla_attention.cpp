// dsa::sparse_mla_attention: front-end checks and CPU results against a double-precision oracle.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dsa/cpu/sparse_mla_attention.hpp"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"
#include "support/attention_reference.hpp"
#include "support/random.hpp"

namespace {

using dsa::bf16;
using dsa::index_t;

// A problem with bf16 inputs; the float copies hold the exact bf16 values for the oracle.
struct problem {
  index_t s, h, d, n, k, d_v;
  float scale;
  std::vector<bf16> q, kv;
  std::vector<float> qf, kvf;
  std::vector<std::int32_t> idx;

  problem(index_t s_, index_t h_, index_t d_, index_t n_, index_t k_, index_t d_v_, std::uint64_t seed)
      : s(s_), h(h_), d(d_), n(n_), k(k_), d_v(d_v_), scale(static_cast<float>(1.0 / std::sqrt(double(d_)))) {
    q = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(s * h * d), seed));
    kv = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(n * d), seed + 1));
    qf = dsa_test::to_floats(q);
    kvf = dsa_test::to_floats(kv);
    idx.assign(static_cast<std::size_t>(s * k), -1);
  }

  auto q_view() const { return dsa::make_view(q.data(), {s, h, d}); }
  auto kv_view() const { return dsa::make_view(kv.data(), {n, d}); }
  auto idx_view() const { return dsa::make_view(idx.data(), {s, k}); }
  dsa::sparse_mla_config cfg() const { return {scale, d_v}; }

  dsa_test::attention_reference_result reference() const {
    return dsa_test::sparse_attention_reference(qf, kvf, idx, s, h, d, n, k, d_v, scale);
  }
};

struct result {
  std::vector<float> out, lse, probs;
};

template <class Kv = std::vector<bf16>>
result run(const problem& p, dsa::cpu_backend be = dsa::cpu, bool with_probs = true) {
  result r;
  r.out.assign(static_cast<std::size_t>(p.s * p.h * p.d_v), std::numeric_limits<float>::quiet_NaN());
  r.lse.assign(static_cast<std::size_t>(p.s * p.h), std::numeric_limits<float>::quiet_NaN());
  r.probs.assign(static_cast<std::size_t>(p.s * p.k), std::numeric_limits<float>::quiet_NaN());
  dsa::tensor_view<float, 2> probs;
  if (with_probs) probs = dsa::make_view(r.probs.data(), {p.s, p.k});
  dsa::sparse_mla_attention(be, p.q_view(), p.kv_view(), p.idx_view(), dsa::make_view(r.out.data(), {p.s, p.h, p.d_v}),
                            dsa::make_view(r.lse.data(), {p.s, p.h}), p.cfg(), probs);
  return r;
}

void check_against_reference(const problem& p, const result& r, double tol = 2e-5) {
  const auto ref = p.reference();
  double max_out = 0.0, max_lse = 0.0, max_probs = 0.0;
  for (std::size_t i = 0; i < ref.out.size(); ++i) max_out = std::max(max_out, std::fabs(r.out[i] - ref.out[i]));
  for (std::size_t i = 0; i < ref.lse.size(); ++i) {
    if (std::isinf(ref.lse[i])) {
      CHECK(r.lse[i] == std::numeric_limits<float>::infinity());
    } else {
      max_lse = std::max(max_lse, std::fabs(r.lse[i] - ref.lse[i]));
    }
  }
  for (std::size_t i = 0; i < ref.probs.size(); ++i) {
    max_probs = std::max(max_probs, std::fabs(r.probs[i] - ref.probs[i]));
  }
  CHECK(max_out <= tol);
  CHECK(max_lse <= tol);
  CHECK(max_probs <= tol * static_cast<double>(p.h));
}

std::uint32_t dsa_test_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Encodes the FP8 cache row of 576 values with power-of-two group scales chosen per group.
std::vector<std::uint8_t> random_fp8_cache(index_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 100.0f);
  std::uniform_int_distribution<int> exp_dist(-9, -5);
  std::vector<std::uint8_t> cache(static_cast<std::size_t>(n * dsa::kv_fp8_row_bytes));
  for (index_t j = 0; j < n; ++j) {
    std::uint8_t* row = cache.data() + j * dsa::kv_fp8_row_bytes;
    for (index_t i = 0; i < 512; ++i) row[i] = dsa::fp8_e4m3(dist(rng)).bits;
    for (index_t g = 0; g < 4; ++g) {
      const float s = std::ldexp(1.0f, exp_dist(rng));
      std::memcpy(row + 512 + 4 * g, &s, 4);
    }
    for (index_t r = 0; r < 64; ++r) {
      const std::uint16_t b = bf16(dist(rng) / 128.0f).bits;
      std::memcpy(row + 528 + 2 * r, &b, 2);
    }
  }
  return cache;
}

}  // namespace

TEST_CASE("sparse_mla_attention with every key selected equals dense softmax attention") {
  // h = 20: a full head block and a ragged one; n = 150: two full key tiles and a ragged one.
  problem p(3, 20, 96, 150, 150, 64, 11);
  for (index_t t = 0; t < p.s; ++t) {
    for (index_t e = 0; e < p.k; ++e) p.idx[static_cast<std::size_t>(t * p.k + e)] = static_cast<std::int32_t>(e);
  }
  const result r = run(p);
  check_against_reference(p, r);

  // The oracle here is the plain dense one over all n rows.
  for (index_t t = 0; t < p.s; ++t) {
    for (index_t hh = 0; hh < p.h; ++hh) {
      std::vector<double> out(static_cast<std::size_t>(p.d_v));
      const double lse = dsa_test::dense_attention_row(p.qf.data() + (t * p.h + hh) * p.d, p.kvf.data(), p.n, p.d,
                                                       p.d_v, p.scale, out.data());
      CHECK(r.lse[static_cast<std::size_t>(t * p.h + hh)] == doctest::Approx(lse).epsilon(1e-6));
      for (index_t c = 0; c < p.d_v; ++c) {
        CHECK(std::fabs(r.out[static_cast<std::size_t>((t * p.h + hh) * p.d_v + c)] - out[static_cast<std::size_t>(c)]) <
              2e-5);
      }
    }
  }
}

TEST_CASE("sparse_mla_attention skips -1, negative and >= n entries and counts duplicates twice") {
  problem p(6, 17, 72, 90, 100, 72, 21);  // d_v = d_qk is allowed
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> pick(-3, static_cast<int>(p.n) + 5);
  for (auto& v : p.idx) v = pick(rng);
  // Row 1: all unused (-1, other negatives, >= n, INT32 extremes).
  for (index_t e = 0; e < p.k; ++e) {
    const std::int32_t bad[] = {-1, -7, static_cast<std::int32_t>(p.n), std::numeric_limits<std::int32_t>::max(),
                                std::numeric_limits<std::int32_t>::min()};
    p.idx[static_cast<std::size_t>(p.k + e)] = bad[e % 5];
  }
  // Row 2: a single key, listed three times among padding.
  for (index_t e = 0; e < p.k; ++e) p.idx[static_cast<std::size_t>(2 * p.k + e)] = (e % 10 == 3) && e < 30 ? 42 : -1;
  // Row 3: distinct keys followed by -1 padding, as top-k produces.
  for (index_t e = 0; e < p.k; ++e) p.idx[static_cast<std::size_t>(3 * p.k + e)] = e < 70 ? static_cast<int>(e) : -1;

  const result r = run(p);
  check_against_reference(p, r);

  // The empty row: out 0, lse +inf, probs 0.
  for (index_t hh = 0; hh < p.h; ++hh) {
    CHECK(r.lse[static_cast<std::size_t>(p.h + hh)] == std::numeric_limits<float>::infinity());
    for (index_t c = 0; c < p.d_v; ++c) CHECK(r.out[static_cast<std::size_t>((p.h + hh) * p.d_v + c)] == 0.0f);
  }
  for (index_t e = 0; e < p.k; ++e) CHECK(r.probs[static_cast<std::size_t>(p.k + e)] == 0.0f);

  // A single key listed three times: out = that row's values, each entry gets P = 1/3 per head.
  for (index_t hh = 0; hh < p.h; ++hh) {
    for (index_t c = 0; c < p.d_v; ++c) {
      CHECK(r.out[static_cast<std::size_t>((2 * p.h + hh) * p.d_v + c)] ==
            doctest::Approx(p.kvf[static_cast<std::size_t>(42 * p.d + c)]).epsilon(1e-6));
    }
  }
  CHECK(r.probs[static_cast<std::size_t>(2 * p.k + 3)] == doctest::Approx(p.h / 3.0).epsilon(1e-6));
  CHECK(r.probs[static_cast<std::size_t>(2 * p.k + 4)] == 0.0f);
}

TEST_CASE("sparse_mla_attention propagates NaN to exactly the rows and heads that read it (issue 14)") {
  // n = 200 keys, k = 100 entries (two CPU tiles of 64), 20 heads. Row 0 reads a kv row holding
  // one NaN in its latent part (entry 80, in the second tile, after a finite maximum); row 1
  // reads only clean rows, while kv rows it never reads are NaN-filled (FlashMLA's tests fill
  // unused rows so); row 2 has a NaN in query head 3; row 3 has only -1 padding.
  problem p(4, 20, 72, 200, 100, 64, 77);
  const bf16 nan_bf16 = bf16::from_bits(0x7FC0);
  for (index_t e = 0; e < p.k; ++e) {
    p.idx[static_cast<std::size_t>(0 * p.k + e)] = static_cast<std::int32_t>(e);        // reads row 80
    p.idx[static_cast<std::size_t>(1 * p.k + e)] = static_cast<std::int32_t>(100 + e);  // clean rows
    p.idx[static_cast<std::size_t>(2 * p.k + e)] = static_cast<std::int32_t>(100 + e);
    p.idx[static_cast<std::size_t>(3 * p.k + e)] = -1;
  }
  problem clean = p;
  p.kv[static_cast<std::size_t>(80 * p.d + 5)] = nan_bf16;
  for (const index_t j : {index_t{90}, index_t{99}}) {  // unread by rows 1..3
    for (index_t c = 0; c < p.d; ++c) p.kv[static_cast<std::size_t>(j * p.d + c)] = nan_bf16;
  }
  for (index_t c = 0; c < p.d; ++c) p.q[static_cast<std::size_t>((2 * p.h + 3) * p.d + c)] = nan_bf16;
  p.kvf = dsa_test::to_floats(p.kv);
  p.qf = dsa_test::to_floats(p.q);
  clean.q = p.q;
  clean.qf = p.qf;
  for (index_t c = 0; c < p.d; ++c) clean.q[static_cast<std::size_t>((2 * p.h + 3) * p.d + c)] = bf16(0.5f);

  for (const int threads : {1, 2}) {
    CAPTURE(threads);
    const result r = run(p, dsa::cpu_backend{threads});
    const result c = run(clean, dsa::cpu_backend{threads});
    auto out_at = [&](const result& x, index_t t, index_t hh, index_t col) {
      return x.out[static_cast<std::size_t>((t * p.h + hh) * p.d_v + col)];
    };
    auto lse_at = [&](const result& x, index_t t, index_t hh) { return x.lse[static_cast<std::size_t>(t * p.h + hh)]; };
    for (index_t hh = 0; hh < p.h; ++hh) {
      CAPTURE(hh);
      // Row 0: every head read the NaN key, so every output and lse is NaN.
      CHECK(std::isnan(lse_at(r, 0, hh)));
      for (index_t col = 0; col < p.d_v; ++col) CHECK(std::isnan(out_at(r, 0, hh, col)));
      // Row 1: the NaN rows it does not read leave it exactly as with clean rows.
      CHECK(dsa_test_bits(lse_at(r, 1, hh)) == dsa_test_bits(lse_at(c, 1, hh)));
      for (index_t col = 0; col < p.d_v; ++col) CHECK(dsa_test_bits(out_at(r, 1, hh, col)) == dsa_test_bits(out_at(c, 1, hh, col)));
      // Row 2: only head 3 is NaN.
      if (hh == 3) {
        CHECK(std::isnan(lse_at(r, 2, hh)));
        for (index_t col = 0; col < p.d_v; ++col) CHECK(std::isnan(out_at(r, 2, hh, col)));
      } else {
        CHECK(dsa_test_bits(lse_at(r, 2, hh)) == dsa_test_bits(lse_at(c, 2, hh)));
        for (index_t col = 0; col < p.d_v; ++col) CHECK(dsa_test_bits(out_at(r, 2, hh, col)) == dsa_test_bits(out_at(c, 2, hh, col)));
      }
      // Row 3: no key at all stays "no attention" (out 0, lse +inf), not NaN.
      CHECK(lse_at(r, 3, hh) == std::numeric_limits<float>::infinity());
      for (index_t col = 0; col < p.d_v; ++col) CHECK(out_at(r, 3, hh, col) == 0.0f);
    }
    // probs sum over heads: NaN on every used entry of rows 0 and 2, clean bits on row 1, 0 on row 3.
    for (index_t e = 0; e < p.k; ++e) {
      CHECK(std::isnan(r.probs[static_cast<std::size_t>(0 * p.k + e)]));
      CHECK(dsa_test_bits(r.probs[static_cast<std::size_t>(1 * p.k + e)]) == dsa_test_bits(c.probs[static_cast<std::size_t>(1 * p.k + e)]));
      CHECK(std::isnan(r.probs[static_cast<std::size_t>(2 * p.k + e)]));
      CHECK(r.probs[static_cast<std::size_t>(3 * p.k + e)] == 0.0f);
    }
  }

  SUBCASE("an FP8 NaN code or a NaN group scale in a cache row") {
    const index_t n = 130;
    for (const bool in_scale : {false, true}) {
      CAPTURE(in_scale);
      std::vector<std::uint8_t> cache = random_fp8_cache(n, 94);
      for (index_t j = 0; j < n; ++j) {  // no NaN codes by chance
        for (index_t i = 0; i < 512; ++i) {
          std::uint8_t& b = cache[static_cast<std::size_t>(j * dsa::kv_fp8_row_bytes + i)];
          if ((b & 0x7F) == 0x7F) b = 0x10;
        }
      }
      std::vector<std::uint8_t> bad = cache;
      if (in_scale) {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::memcpy(bad.data() + 7 * dsa::kv_fp8_row_bytes + 512 + 4, &nan, 4);
      } else {
        bad[static_cast<std::size_t>(7 * dsa::kv_fp8_row_bytes + 300)] = 0x7F;
      }
      problem q(2, 24, 576, n, 16, 512, 95);
      for (index_t e = 0; e < q.k; ++e) {
        q.idx[static_cast<std::size_t>(e)] = static_cast<std::int32_t>(e);            // reads row 7
        q.idx[static_cast<std::size_t>(q.k + e)] = static_cast<std::int32_t>(20 + e);  // does not
      }
      auto attend = [&](const std::vector<std::uint8_t>& rows) {
        result x;
        x.out.assign(static_cast<std::size_t>(q.s * q.h * 512), 0.0f);
        x.lse.assign(static_cast<std::size_t>(q.s * q.h), 0.0f);
        dsa::sparse_mla_attention(dsa::cpu, q.q_view(), dsa::make_view(rows.data(), {n, index_t{656}}), q.idx_view(),
                                  dsa::make_view(x.out.data(), {q.s, q.h, index_t{512}}), dsa::make_view(x.lse.data(), {q.s, q.h}),
                                  q.cfg());
        return x;
      };
      const result r = attend(bad), c = attend(cache);
      for (index_t hh = 0; hh < q.h; ++hh) {
        CHECK(std::isnan(r.lse[static_cast<std::size_t>(hh)]));
        CHECK(std::isnan(r.out[static_cast<std::size_t>(hh * 512 + 100)]));
        CHECK(dsa_test_bits(r.lse[static_cast<std::size_t>(q.h + hh)]) == dsa_test_bits(c.lse[static_cast<std::size_t>(q.h + hh)]));
      }
      CHECK(std::equal(r.out.begin() + q.h * 512, r.out.end(), c.out.begin() + q.h * 512,
                       [](float a, float b) { return dsa_test_bits(a) == dsa_test_bits(b); }));
    }
  }
}

TEST_CASE("sparse_mla_attention probs sum to h per row with keys") {
  problem p(5, 33, 64, 300, 257, 32, 31);
  std::mt19937_64 rng(6);
  std::uniform_int_distribution<int> pick(-1, static_cast<int>(p.n) - 1);
  for (auto& v : p.idx) v = pick(rng);
  const result r = run(p);
  for (index_t t = 0; t < p.s; ++t) {
    double sum = 0.0;
    for (index_t e = 0; e < p.k; ++e) {
      const float v = r.probs[static_cast<std::size_t>(t * p.k + e)];
      CHECK(v >= 0.0f);
      if (p.idx[static_cast<std::size_t>(t * p.k + e)] < 0) CHECK(v == 0.0f);
      sum += v;
    }
    CHECK(sum == doctest::Approx(static_cast<double>(p.h)).epsilon(1e-5));
  }
  check_against_reference(p, r);
}

TEST_CASE("sparse_mla_attention at the V3.2 shape (d_qk 576, d_v 512) matches the oracle") {
  problem p(2, 32, 576, 400, 256, 512, 41);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> pick(0, static_cast<int>(p.n) - 1);
  for (auto& v : p.idx) v = pick(rng);
  for (index_t e = 200; e < p.k; ++e) p.idx[static_cast<std::size_t>(p.k + e)] = -1;
  check_against_reference(p, run(p));
}

TEST_CASE("sparse_mla_attention logits scale and large logits stay stable") {
  // Large logits (scale 1 on d = 64 unit-normal vectors) exercise the running-max rescaling.
  problem p(2, 4, 64, 200, 200, 64, 51);
  p.scale = 1.0f;
  for (index_t t = 0; t < p.s; ++t) {
    for (index_t e = 0; e < p.k; ++e) p.idx[static_cast<std::size_t>(t * p.k + e)] = static_cast<std::int32_t>(p.k - 1 - e);
  }
  const result r = run(p);
  for (const float v : r.out) CHECK(std::isfinite(v));
  check_against_reference(p, r, 1e-4);
}

TEST_CASE("sparse_mla_attention O = bf16 is the rounding of O = float") {
  problem p(3, 18, 96, 120, 80, 64, 61);
  std::mt19937_64 rng(8);
  std::uniform_int_distribution<int> pick(-1, static_cast<int>(p.n) - 1);
  for (auto& v : p.idx) v = pick(rng);
  const result r = run(p);
  std::vector<bf16> out(r.out.size());
  std::vector<float> lse(r.lse.size());
  dsa::sparse_mla_attention(dsa::cpu, p.q_view(), p.kv_view(), p.idx_view(), dsa::make_view(out.data(), {p.s, p.h, p.d_v}),
                            dsa::make_view(lse.data(), {p.s, p.h}), p.cfg());
  for (std::size_t i = 0; i < out.size(); ++i) CHECK(out[i].bits == bf16(r.out[i]).bits);
  CHECK(same_bits(lse, r.lse));
}

TEST_CASE("sparse_mla_attention is bit-identical for every thread count") {
  for (const index_t s : {index_t{1}, index_t{5}}) {
    CAPTURE(s);
    problem p(s, 40, 128, 300, 200, 96, 71);
    std::mt19937_64 rng(9);
    std::uniform_int_distribution<int> pick(-1, static_cast<int>(p.n) - 1);
    for (auto& v : p.idx) v = pick(rng);
    const result ref = run(p, dsa::cpu_backend{1});
    for (const int threads : {2, 3, 7, 16}) {
      CAPTURE(threads);
      const result r = run(p, dsa::cpu_backend{threads});
      CHECK(same_bits(r.out, ref.out));
      CHECK(same_bits(r.lse, ref.lse));
      CHECK(same_bits(r.probs, ref.probs));
    }
    // Without probs the outputs are the same bits too.
    const result np = run(p, dsa::cpu_backend{3}, false);
    CHECK(same_bits(np.out, ref.out));
    CHECK(same_bits(np.lse, ref.lse));
  }
}

TEST_CASE("sparse_mla_attention honours outer strides of every view") {
  problem p(3, 5, 64, 70, 40, 48, 81);
  std::mt19937_64 rng(10);
  std::uniform_int_distribution<int> pick(-1, static_cast<int>(p.n) - 1);
  for (auto& v : p.idx) v = pick(rng);
  const result ref = run(p);

  // Padded copies: q rows of 80 (heads of 64 + 16 junk), kv rows of 70, indices rows of 50.
  std::vector<bf16> q(static_cast<std::size_t>(p.s * p.h * 80), bf16(1e30f));
  for (index_t t = 0; t < p.s; ++t)
    for (index_t hh = 0; hh < p.h; ++hh)
      for (index_t c = 0; c < p.d; ++c) q[static_cast<std::size_t>((t * p.h + hh) * 80 + c)] = p.q[static_cast<std::size_t>((t * p.h + hh) * p.d + c)];
  std::vector<bf16> kv(static_cast<std::size_t>(p.n * 70), bf16(1e30f));
  for (index_t j = 0; j < p.n; ++j)
    for (index_t c = 0; c < p.d; ++c) kv[static_cast<std::size_t>(j * 70 + c)] = p.kv[static_cast<std::size_t>(j * p.d + c)];
  std::vector<std::int32_t> idx(static_cast<std::size_t>(p.s * 50), 0);
  for (index_t t = 0; t < p.s; ++t)
    for (index_t e = 0; e < p.k; ++e) idx[static_cast<std::size_t>(t * 50 + e)] = p.idx[static_cast<std::size_t>(t * p.k + e)];
  std::vector<float> out(static_cast<std::size_t>(p.s * p.h * 50), -7.0f);
  std::vector<float> lse(static_cast<std::size_t>(p.s * 9), -7.0f);
  std::vector<float> probs(static_cast<std::size_t>(p.s * 41), -7.0f);

  dsa::tensor_view<const bf16, 3> qv(q.data(), {p.s, p.h, p.d}, {p.h * 80, 80, 1});
  dsa::tensor_view<const bf16, 2> kvv(kv.data(), {p.n, p.d}, {70, 1});
  dsa::tensor_view<const std::int32_t, 2> iv(idx.data(), {p.s, p.k}, {50, 1});
  dsa::tensor_view<float, 3> ov(out.data(), {p.s, p.h, p.d_v}, {p.h * 50, 50, 1});
  dsa::tensor_view<float, 2> lv(lse.data(), {p.s, p.h}, {9, 1});
  dsa::tensor_view<float, 2> pv(probs.data(), {p.s, p.k}, {41, 1});
  dsa::sparse_mla_attention(dsa::cpu, qv, kvv, iv, ov, lv, p.cfg(), pv);
  for (index_t t = 0; t < p.s; ++t) {
    for (index_t hh = 0; hh < p.h; ++hh) {
      CHECK(lv(t, hh) == ref.lse[static_cast<std::size_t>(t * p.h + hh)]);
      for (index_t c = 0; c < p.d_v; ++c) CHECK(ov(t, hh, c) == ref.out[static_cast<std::size_t>((t * p.h + hh) * p.d_v + c)]);
      for (index_t c = p.d_v; c < 50; ++c) CHECK(out[static_cast<std::size_t>((t * p.h + hh) * 50 + c)] == -7.0f);
    }
    for (index_t e = 0; e < p.k; ++e) CHECK(pv(t, e) == ref.probs[static_cast<std::size_t>(t * p.k + e)]);
    CHECK(probs[static_cast<std::size_t>(t * 41 + 40)] == -7.0f);
  }
}

namespace {

// The FP8 path on cache rows must give the bits of the bf16 path on the unpacked rows.
void check_fp8_equals_unpacked_bf16(const std::vector<std::uint8_t>& cache, index_t n, std::uint64_t seed) {
  const index_t s = 3, h = 24, k = 150;
  std::vector<bf16> kv(static_cast<std::size_t>(n * 576));
  for (index_t j = 0; j < n; ++j) dsa::kv_fp8_row_decode(cache.data() + j * 656, kv.data() + j * 576);

  problem p(s, h, 576, n, k, 512, seed);
  p.kv = kv;
  p.kvf = dsa_test::to_floats(kv);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pick(-2, static_cast<int>(n) + 2);
  for (auto& v : p.idx) v = pick(rng);
  const result ref = run(p);

  for (const int threads : {1, 2}) {
    std::vector<float> out(ref.out.size()), lse(ref.lse.size()), probs(ref.probs.size());
    dsa::sparse_mla_attention(dsa::cpu_backend{threads}, p.q_view(), dsa::make_view(cache.data(), {n, index_t{656}}),
                              p.idx_view(), dsa::make_view(out.data(), {s, h, index_t{512}}),
                              dsa::make_view(lse.data(), {s, h}), p.cfg(), dsa::make_view(probs.data(), {s, k}));
    CHECK(same_bits(out, ref.out));
    CHECK(same_bits(lse, ref.lse));
    CHECK(same_bits(probs, ref.probs));
  }
  check_against_reference(p, ref);
}

}  // namespace

TEST_CASE("sparse_mla_attention over FP8 cache rows equals the bf16 path on the unpacked rows") {
  SUBCASE("rows packed from bf16 tokens as the model caches them") {
    const index_t n = 180;
    const auto tokens = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(n * 576), 90, 2.0f));
    std::vector<std::uint8_t> cache(static_cast<std::size_t>(n * 656));
    for (index_t j = 0; j < n; ++j) dsa::kv_fp8_row_encode(tokens.data() + j * 576, cache.data() + j * 656);
    check_fp8_equals_unpacked_bf16(cache, n, 91);
  }
  SUBCASE("random codes and scales") {
    const index_t n = 130;
    check_fp8_equals_unpacked_bf16(random_fp8_cache(n, 92), n, 93);
  }
}

TEST_CASE("sparse_mla_attention with no tokens, no heads or no entries") {
  problem p(0, 4, 64, 10, 8, 64, 1);
  CHECK_NOTHROW(run(p));
  problem p2(2, 3, 64, 0, 5, 32, 2);  // an empty cache: every entry is unused
  for (auto& v : p2.idx) v = 0;
  const result r = run(p2);
  for (const float v : r.lse) CHECK(v == std::numeric_limits<float>::infinity());
  for (const float v : r.out) CHECK(v == 0.0f);
  for (const float v : r.probs) CHECK(v == 0.0f);
  problem p3(2, 3, 64, 10, 0, 32, 3);  // k = 0
  const result r3 = run(p3);
  for (const float v : r3.lse) CHECK(v == std::numeric_limits<float>::infinity());
}

TEST_CASE("sparse_mla_attention rejects bad arguments") {
  problem p(2, 4, 64, 10, 8, 32, 1);
  std::vector<float> out(static_cast<std::size_t>(2 * 4 * 64)), lse(8), probs(16);
  auto ov = dsa::make_view(out.data(), {2, 4, 32});
  auto lv = dsa::make_view(lse.data(), {2, 4});
  const auto q = p.q_view();
  const auto kv = p.kv_view();
  const auto idx = p.idx_view();
  const auto cfg = p.cfg();
  using Catch = dsa::error;
  CHECK_NOTHROW(dsa::sparse_mla_attention(dsa::cpu, q, kv, idx, ov, lv, cfg));

  CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(dsa::cpu, q, dsa::make_view(p.kv.data(), {10, 32}), idx, ov, lv, cfg),
                       doctest::Contains("dsa::sparse_mla_attention: kv.extent(1) = 32; expected 64"), Catch);
  CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(dsa::cpu, q, kv, dsa::make_view(p.idx.data(), {1, 8}), ov, lv, cfg),
                       doctest::Contains("dsa::sparse_mla_attention: indices.extent(0) = 1; expected 2"), Catch);
  CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(dsa::cpu, q, kv, idx, dsa::make_view(out.data(), {2, 4, 16}), lv, cfg),
                       doctest::Contains("dsa::sparse_mla_attention: out.extent(2) = 16; expected 32"), Catch);
  CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(dsa::cpu, q, kv, idx, dsa::make_view(out.data(), {2, 3, 32}), lv, cfg),
                       doctest::Contains("dsa::sparse_mla_attention: out.extent(1) = 3; expected 4"), Catch);
  CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(dsa::cpu, q, kv, idx, ov, dsa::make_view(lse.data(), {2, 3}), cfg),
                       doctest::Contains("dsa::sparse_mla_attention: lse.extent(1) = 3; expected 4"), Catch);
  CHECK_THROWS_WITH_AS(
      dsa::sparse_mla_attention(dsa::cpu, q, kv, idx, ov, lv, cfg, dsa::make_view(probs.data(), {2, 7})),
      doctest::Contains("dsa::sparse_mla_attention: probs.extent(1) = 7; expected 8"), Catch);
  CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(dsa::cpu, q, kv, idx, ov, lv, dsa::sparse_mla_config{p.scale, 65}),
                       doctest::Contains("dsa::sparse_mla_attention: config.d_v = 65; expected a value in [1, d_qk] = [1, 64]"),
                       Catch);
  CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(dsa::cpu, q, kv, idx, ov, lv, dsa::sparse_mla_config{p.scale, 0}),
                       doctest::Contains("config.d_v = 0"), Catch);
  for (const float bad : {0.0f, -0.125f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(dsa::cpu, q, kv, idx, ov, lv, dsa::sparse_mla_config{bad, 32}),
                         doctest::Contains("dsa::sparse_mla_attention: config.softmax_scale = "), Catch);
  }
  CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(dsa::cpu, q, kv, idx, ov, lv, dsa::sparse_mla_config{}),
                       doctest::Contains("expected a finite value > 0"), Catch);
  // Non-unit inner stride and null data.
  dsa::tensor_view<const bf16, 2> kv_strided(p.kv.data(), {5, 64}, {128, 2});
  CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(dsa::cpu, q, kv_strided, idx, ov, lv, cfg),
                       doctest::Contains("dsa::sparse_mla_attention: kv.stride(1) = 2; expected 1"), Catch);
  dsa::tensor_view<const bf16, 2> kv_null(nullptr, {10, 64});
  CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(dsa::cpu, q, kv_null, idx, ov, lv, cfg),
                       doctest::Contains("dsa::sparse_mla_attention: kv.data = null"), Catch);
  dsa::tensor_view<float, 2> lse_null(nullptr, {2, 4});
  CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(dsa::cpu, q, kv, idx, ov, lse_null, cfg),
                       doctest::Contains("dsa::sparse_mla_attention: lse.data = null"), Catch);

  // The FP8 cache: 656-byte rows, d_qk 576, d_v 512.
  std::vector<std::uint8_t> cache(static_cast<std::size_t>(10 * 656));
  std::vector<bf16> q576(static_cast<std::size_t>(2 * 4 * 576));
  std::vector<float> out512(static_cast<std::size_t>(2 * 4 * 512));
  const auto q5 = dsa::make_view(q576.data(), {2, 4, 576});
  const auto o5 = dsa::make_view(out512.data(), {2, 4, 512});
  const dsa::sparse_mla_config c5{0.04f, 512};
  CHECK_NOTHROW(dsa::sparse_mla_attention(dsa::cpu, q5, dsa::make_view(cache.data(), {10, 656}), idx, o5, lv, c5));
  CHECK_THROWS_WITH_AS(
      dsa::sparse_mla_attention(dsa::cpu, q5, dsa::make_view(cache.data(), {10, 655}), idx, o5, lv, c5),
      doctest::Contains("dsa::sparse_mla_attention: kv_fp8.extent(1) = 655; expected 656"), Catch);
  CHECK_THROWS_WITH_AS(
      dsa::sparse_mla_attention(dsa::cpu, q, dsa::make_view(cache.data(), {10, 656}), idx, ov, lv, cfg),
      doctest::Contains("dsa::sparse_mla_attention: q.extent(2) = 64; expected 576"), Catch);
  CHECK_THROWS_WITH_AS(
      dsa::sparse_mla_attention(dsa::cpu, q5, dsa::make_view(cache.data(), {10, 656}), idx,
                                dsa::make_view(out512.data(), {2, 4, 256}), lv, dsa::sparse_mla_config{0.04f, 256}),
      doctest::Contains("dsa::sparse_mla_attention: config.d_v = 256; expected 512"), Catch);
}

TEST_CASE("sparse_mla_attention_workspace_size: a size beyond int64 is a dsa::error, not garbage") {
  // Issue 14: (2^40, 2^20, 512, 64) wrapped around.
  CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention_workspace_size(index_t{1} << 40, index_t{1} << 20, 512, 64),
                       "dsa::sparse_mla_attention_workspace_size: (s, h, d_v, num_splits) = (1099511627776, 1048576, "
                       "512, 64); expected a workspace size (8 * num_splits * s * h, rounded up to 16, + 4 * "
                       "num_splits * s * h * d_v bytes) that fits in int64",
                       dsa::error);
  constexpr index_t max = std::numeric_limits<index_t>::max();
  // Each step of the formula: num_splits * s, then * h, the pairs' bytes, the accumulators.
  CHECK_THROWS_AS(dsa::sparse_mla_attention_workspace_size(max, 1, 1, 2), dsa::error);
  CHECK_THROWS_AS(dsa::sparse_mla_attention_workspace_size(max / 2, 3, 1, 2), dsa::error);
  CHECK_THROWS_AS(dsa::sparse_mla_attention_workspace_size(index_t{1} << 59, 1, 1, 2), dsa::error);
  CHECK_THROWS_AS(dsa::sparse_mla_attention_workspace_size(index_t{1} << 40, 1, index_t{1} << 22, 2), dsa::error);
  CHECK_THROWS_AS(dsa::sparse_mla_attention_workspace_size(1, 1, max, 2), dsa::error);
  // The largest sizes that fit are exact; one split needs nothing whatever the shape.
  CHECK(dsa::sparse_mla_attention_workspace_size(max, max, max, 1) == 0);
  CHECK(dsa::sparse_mla_attention_workspace_size(index_t{1} << 20, 128, 512, 64) ==
        64 * (index_t{1} << 20) * 128 * 8 + 64 * (index_t{1} << 20) * 128 * 512 * 4);
  // 2 splits, h = d_v = 1: 16 * s + 8 * s bytes, which fits up to s = floor(max / 24).
  CHECK(dsa::sparse_mla_attention_workspace_size(max / 24, 1, 1, 2) == max / 24 * 24);
  CHECK_THROWS_AS(dsa::sparse_mla_attention_workspace_size(max / 24 + 1, 1, 1, 2), dsa::error);
  // The op front-end sizes the workspace with the same checks, naming its own arguments.
  CHECK_THROWS_WITH_AS(dsa::detail::sparse_mla_workspace_bytes(
                           "sparse_mla_attention", "(q.extent(0), q.extent(1), config.d_v, config.num_splits)",
                           index_t{1} << 30, index_t{1} << 20, index_t{1} << 10, 64),
                       doctest::Contains("dsa::sparse_mla_attention: (q.extent(0), q.extent(1), config.d_v, "
                                         "config.num_splits) = (1073741824, 1048576, 1024, 64); expected a workspace "
                                         "size"),
                       dsa::error);
}

TEST_CASE("sparse_mla_attention_num_splits: no overflow at extreme arguments") {
  constexpr index_t max = std::numeric_limits<index_t>::max();
  constexpr index_t min = std::numeric_limits<index_t>::min();
  CHECK(dsa::sparse_mla_attention_num_splits(max, max, max, 132) == 1);        // s * ceil(h / 16) overflows
  CHECK(dsa::sparse_mla_attention_num_splits(1, max, 2048, 132) == 1);         // ceil(h / 16) is huge
  CHECK(dsa::sparse_mla_attention_num_splits(1, 16, max, max) == dsa::sparse_mla_max_splits);  // 2 * sm_count
  CHECK(dsa::sparse_mla_attention_num_splits(1, 16, max, 132) == dsa::sparse_mla_max_splits);  // ceil(k / 128)
  CHECK(dsa::sparse_mla_attention_num_splits(min, min, max, 132) == 1);
  CHECK(dsa::sparse_mla_attention_num_splits(1, 16, 2048, min) == 2);  // as sm_count = 0
}
