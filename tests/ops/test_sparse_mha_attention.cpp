// dsa::sparse_mha_attention: front-end checks and CPU results against a double-precision oracle
// (tests/support/sparse_mha_reference.hpp) for every attention_rounding mode.
//
// The inputs are multiples of 1/4 in [-2, 2], so every dot product is exact in fp32 as well as
// in double: the oracle then knows the library's logits exactly (including their bf16
// roundings), and the only remaining differences are the fp32 exponentials and sums, which the
// tolerance bounds tightly (half a bf16 ulp of the output plus 1e-5).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dsa/cpu/sparse_mha_attention.hpp"
#include "dsa/ops/sparse_mha_attention.hpp"
#include "support/sparse_mha_reference.hpp"
#include "support/sparse_mha_sequence.hpp"

namespace {

using dsa::bf16;
using dsa::index_t;
using rounding = dsa::attention_rounding;

constexpr float yarn_scale = 0.1656269f;  // V3.2's (nope + rope)^-0.5 · mscale^2; bf16(.) = 0.1660156

dsa_test::mha_rounding oracle_mode(rounding r) {
  switch (r) {
    case rounding::fp32: return dsa_test::mha_rounding::fp32;
    case rounding::bf16: return dsa_test::mha_rounding::bf16;
    default: return dsa_test::mha_rounding::bf16_split;
  }
}

// bf16 values that are multiples of 1/4 in [-2, 2].
std::vector<bf16> quarter_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> d(-8, 8);
  std::vector<bf16> v(n);
  for (auto& x : v) x = bf16(static_cast<float>(d(rng)) * 0.25f);
  return v;
}

std::vector<double> to_double(const std::vector<bf16>& v) {
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = v[i].to_float();
  return r;
}

// One problem. Keys and values live in one [n, h, d_nope + d_v] buffer (the wkv_b output of a
// prefill), so k_nope and v are strided views of it, as the forward pass uses them.
struct problem {
  index_t s, h, d_nope, d_rope, d_v, n, k;
  float scale = yarn_scale;
  std::vector<bf16> q, kv, k_rope;
  std::vector<std::int32_t> idx;

  problem(index_t s_, index_t h_, index_t d_nope_, index_t d_rope_, index_t d_v_, index_t n_, index_t k_,
          std::uint64_t seed)
      : s(s_), h(h_), d_nope(d_nope_), d_rope(d_rope_), d_v(d_v_), n(n_), k(k_) {
    q = quarter_values(static_cast<std::size_t>(s * h * (d_nope + d_rope)), seed);
    kv = quarter_values(static_cast<std::size_t>(n * h * (d_nope + d_v)), seed + 1);
    k_rope = quarter_values(static_cast<std::size_t>(n * d_rope), seed + 2);
    // Random selections with some -1 padding, as top-k gives for short prefixes.
    std::mt19937_64 rng(seed + 3);
    idx.assign(static_cast<std::size_t>(s * k), -1);
    for (index_t t = 0; t < s; ++t) {
      const index_t used = k - static_cast<index_t>(rng() % 3);
      for (index_t e = 0; e < used; ++e) idx[static_cast<std::size_t>(t * k + e)] = static_cast<std::int32_t>(rng() % n);
    }
  }

  index_t d_qk() const { return d_nope + d_rope; }
  dsa::host_view<const bf16, 3> q_view() const { return dsa::make_view(q.data(), {s, h, d_qk()}); }
  dsa::host_view<const bf16, 3> k_nope_view() const {
    return dsa::host_view<const bf16, 3>(kv.data(), {n, h, d_nope}, {h * (d_nope + d_v), d_nope + d_v, 1});
  }
  dsa::host_view<const bf16, 3> v_view() const {
    return dsa::host_view<const bf16, 3>(kv.data() + d_nope, {n, h, d_v}, {h * (d_nope + d_v), d_nope + d_v, 1});
  }
  dsa::host_view<const bf16, 2> k_rope_view() const { return dsa::make_view(k_rope.data(), {n, d_rope}); }
  dsa::host_view<const std::int32_t, 2> idx_view() const { return dsa::make_view(idx.data(), {s, k}); }

  dsa_test::sparse_mha_reference_result reference(rounding r) const {
    std::vector<double> kn(static_cast<std::size_t>(n * h * d_nope)), vv(static_cast<std::size_t>(n * h * d_v));
    for (index_t j = 0; j < n; ++j) {
      for (index_t hh = 0; hh < h; ++hh) {
        for (index_t c = 0; c < d_nope; ++c) kn[static_cast<std::size_t>((j * h + hh) * d_nope + c)] = k_nope_view()(j, hh, c).to_float();
        for (index_t c = 0; c < d_v; ++c) vv[static_cast<std::size_t>((j * h + hh) * d_v + c)] = v_view()(j, hh, c).to_float();
      }
    }
    return dsa_test::sparse_mha_reference(to_double(q), kn, to_double(k_rope), vv, idx, s, h, d_nope, d_rope, n, k, d_v,
                                          scale, oracle_mode(r));
  }
};

struct result {
  std::vector<bf16> out;
  std::vector<float> lse;
};

result run(const problem& p, rounding r, dsa::cpu_backend be = dsa::cpu_backend{2}) {
  result res;
  res.out.assign(static_cast<std::size_t>(p.s * p.h * p.d_v), bf16::from_bits(0x7FC1));  // NaN: must be overwritten
  res.lse.assign(static_cast<std::size_t>(p.s * p.h), std::numeric_limits<float>::quiet_NaN());
  dsa::sparse_mha_attention(be, p.q_view(), p.k_nope_view(), p.k_rope_view(), p.v_view(), p.idx_view(),
                            dsa::make_view(res.out.data(), {p.s, p.h, p.d_v}), dsa::sparse_mha_config{p.scale, r},
                            dsa::make_view(res.lse.data(), {p.s, p.h}));
  return res;
}

// Output elements (and lse values) outside the oracle's tolerance.
struct violations {
  int out = 0, lse = 0;
  double worst_out = 0, worst_lse = 0;  // largest |err| / tol
};

violations compare(const result& got, const dsa_test::sparse_mha_reference_result& ref) {
  violations v;
  for (std::size_t i = 0; i < ref.out.size(); ++i) {
    const double g = got.out[i].to_float(), e = ref.out[i];
    const double tol = dsa_test::bf16_half_ulp(std::max(std::fabs(g), std::fabs(e))) + 1e-5 + ref.slack[i];
    const double err = std::fabs(g - e);
    if (!(err <= tol)) ++v.out;
    v.worst_out = std::max(v.worst_out, err / tol);
  }
  for (std::size_t i = 0; i < ref.lse.size(); ++i) {
    if (std::isinf(ref.lse[i])) {
      if (got.lse[i] != std::numeric_limits<float>::infinity()) ++v.lse;
      continue;
    }
    const double tol = 1e-5 * std::max(1.0, std::fabs(ref.lse[i]));
    const double err = std::fabs(got.lse[i] - ref.lse[i]);
    if (!(err <= tol)) ++v.lse;
    v.worst_lse = std::max(v.worst_lse, err / tol);
  }
  return v;
}

bool same_bits(const result& a, const result& b) {
  return a.out.size() == b.out.size() && a.lse.size() == b.lse.size() &&
         std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(bf16)) == 0 &&
         std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("sparse_mha_attention matches the double oracle in every rounding mode") {
  // The tiny model's attention shape (4 heads, nope 64, rope 64, v 64) with 32 selected keys.
  const problem p(6, 4, 64, 64, 64, 50, 32, 11);
  for (rounding r : {rounding::fp32, rounding::bf16, rounding::bf16_split}) {
    CAPTURE(static_cast<int>(r));
    const result got = run(p, r);
    const violations v = compare(got, p.reference(r));
    CHECK(v.out == 0);
    CHECK(v.lse == 0);
    MESSAGE("mode " << static_cast<int>(r) << ": worst out err/tol " << v.worst_out << ", lse " << v.worst_lse);
  }
}

TEST_CASE("sparse_mha_attention rounding modes are distinguishable (the oracle comparison can fail)") {
  const problem p(6, 4, 64, 64, 64, 50, 32, 12);
  const result fp32 = run(p, rounding::fp32);
  const result bf = run(p, rounding::bf16);
  const result split = run(p, rounding::bf16_split);
  // Each mode's output misses the other modes' oracles: the bf16 scale alone moves every logit
  // by 0.2%, the split rounding of the two partial dots moves some more.
  CHECK(compare(fp32, p.reference(rounding::bf16)).out > 0);
  CHECK(compare(bf, p.reference(rounding::fp32)).out > 0);
  CHECK(compare(bf, p.reference(rounding::bf16_split)).out > 0);
  CHECK(compare(split, p.reference(rounding::bf16)).out > 0);
}

TEST_CASE("sparse_mha_attention without a rope part and with one head") {
  const problem p(3, 1, 32, 0, 16, 20, 8, 13);
  for (rounding r : {rounding::fp32, rounding::bf16, rounding::bf16_split}) {
    CAPTURE(static_cast<int>(r));
    const violations v = compare(run(p, r), p.reference(r));
    CHECK(v.out == 0);
    CHECK(v.lse == 0);
  }
}

TEST_CASE("sparse_mha_attention skips -1, negative and >= n entries and counts duplicates twice") {
  problem p(4, 2, 16, 8, 8, 10, 12, 14);
  // Row 0: valid entries interleaved with every kind of unused entry.
  const std::int32_t row0[12] = {3, -1, 7, 10, -7, 2, INT32_MAX, INT32_MIN, 9, 11, -1, 0};
  // Row 1: the same valid entries compacted, then -1 padding.
  const std::int32_t row1[12] = {3, 7, 2, 9, 0, -1, -1, -1, -1, -1, -1, -1};
  // Row 2: duplicates.  Row 3: nothing valid.
  const std::int32_t row2[12] = {5, 5, 5, 1, 1, -1, -1, -1, -1, -1, -1, -1};
  const std::int32_t row3[12] = {-1, -2, 10, 11, 1000, INT32_MAX, INT32_MIN, -1, -1, -1, -1, -1};
  std::copy(row0, row0 + 12, p.idx.begin());
  std::copy(row1, row1 + 12, p.idx.begin() + 12);
  std::copy(row2, row2 + 12, p.idx.begin() + 24);
  std::copy(row3, row3 + 12, p.idx.begin() + 36);
  // Rows 0 and 1 share their query so that their results must be identical.
  std::copy(p.q.begin(), p.q.begin() + p.h * p.d_qk(), p.q.begin() + p.h * p.d_qk());
  for (rounding r : {rounding::fp32, rounding::bf16, rounding::bf16_split}) {
    CAPTURE(static_cast<int>(r));
    const result got = run(p, r);
    const violations v = compare(got, p.reference(r));
    CHECK(v.out == 0);
    CHECK(v.lse == 0);
    const std::size_t row = static_cast<std::size_t>(p.h * p.d_v);
    CHECK(std::memcmp(got.out.data(), got.out.data() + row, row * sizeof(bf16)) == 0);
    CHECK(std::memcmp(got.lse.data(), got.lse.data() + p.h, static_cast<std::size_t>(p.h) * sizeof(float)) == 0);
    for (std::size_t i = 3 * row; i < 4 * row; ++i) CHECK(got.out[i].bits == 0);
    for (index_t hh = 0; hh < p.h; ++hh) CHECK(got.lse[static_cast<std::size_t>(3 * p.h + hh)] == std::numeric_limits<float>::infinity());
  }
}

TEST_CASE("sparse_mha_attention empty rows, k = 0, n = 0 and no tokens") {
  SUBCASE("all -1") {
    problem p(3, 2, 16, 8, 8, 10, 4, 15);
    std::fill(p.idx.begin(), p.idx.end(), -1);
    const result got = run(p, rounding::bf16);
    for (const bf16 x : got.out) CHECK(x.bits == 0);
    for (const float l : got.lse) CHECK(l == std::numeric_limits<float>::infinity());
  }
  SUBCASE("k = 0") {
    problem p(3, 2, 16, 8, 8, 10, 0, 16);
    const result got = run(p, rounding::fp32);
    for (const bf16 x : got.out) CHECK(x.bits == 0);
    for (const float l : got.lse) CHECK(l == std::numeric_limits<float>::infinity());
  }
  SUBCASE("n = 0: every index is out of range") {
    problem p(2, 2, 16, 8, 8, 1, 4, 17);
    p.n = 0;
    std::fill(p.idx.begin(), p.idx.end(), 0);
    const result got = run(p, rounding::bf16_split);
    for (const bf16 x : got.out) CHECK(x.bits == 0);
    for (const float l : got.lse) CHECK(l == std::numeric_limits<float>::infinity());
  }
  SUBCASE("no tokens, lse absent") {
    problem p(0, 2, 16, 8, 8, 10, 4, 18);
    dsa::sparse_mha_attention(dsa::cpu, p.q_view(), p.k_nope_view(), p.k_rope_view(), p.v_view(), p.idx_view(),
                              dsa::host_view<bf16, 3>(nullptr, {0, 2, 8}), dsa::sparse_mha_config{p.scale, rounding::bf16});
  }
}

TEST_CASE("sparse_mha_attention propagates NaN to exactly the outputs that read it (issue 14)") {
  // Row 0 reads key 3, whose shared rope part holds a NaN: every head's logit is NaN. Row 1 reads
  // key 4, whose value of head 1 has one NaN column: only that output column of head 1 is NaN
  // (p · NaN), lse stays finite. Row 2 has a NaN query head 0. Row 3 reads clean keys while the
  // keys it does not read are NaN-filled. Every other output equals the clean problem's bits.
  const index_t s = 4, h = 3, d_nope = 16, d_rope = 8, d_v = 8, n = 12, k = 6;
  problem p(s, h, d_nope, d_rope, d_v, n, k, 31);
  const std::int32_t rows[4][6] = {{0, 3, 5, -1, 1, 2}, {4, 0, 1, 2, -1, -1}, {0, 1, 2, 5, 6, 7}, {8, 9, 10, 11, -1, 8}};
  for (index_t t = 0; t < s; ++t) std::copy(rows[t], rows[t] + k, p.idx.begin() + t * k);
  const problem clean = p;
  const bf16 nan = bf16::from_bits(0x7FC0);
  p.k_rope[static_cast<std::size_t>(3 * d_rope + 2)] = nan;
  p.kv[static_cast<std::size_t>((4 * h + 1) * (d_nope + d_v) + d_nope + 5)] = nan;  // v[4, head 1, col 5]
  for (index_t c = 0; c < p.d_qk(); ++c) p.q[static_cast<std::size_t>((2 * h + 0) * p.d_qk() + c)] = nan;
  std::fill(p.kv.begin() + 3 * h * (d_nope + d_v), p.kv.begin() + 4 * h * (d_nope + d_v), nan);  // key 3, unread by rows 1..3

  for (rounding r : {rounding::fp32, rounding::bf16, rounding::bf16_split}) {
    CAPTURE(static_cast<int>(r));
    const result got = run(p, r), want = run(clean, r);
    for (index_t t = 0; t < s; ++t) {
      for (index_t hh = 0; hh < h; ++hh) {
        CAPTURE(t);
        CAPTURE(hh);
        const float lse = got.lse[static_cast<std::size_t>(t * h + hh)];
        const bool row_nan = t == 0 || (t == 2 && hh == 0);
        if (row_nan) {
          CHECK(std::isnan(lse));
        } else {
          CHECK(std::memcmp(&lse, &want.lse[static_cast<std::size_t>(t * h + hh)], sizeof(float)) == 0);
        }
        for (index_t c = 0; c < d_v; ++c) {
          const bf16 o = got.out[static_cast<std::size_t>((t * h + hh) * d_v + c)];
          if (row_nan || (t == 1 && hh == 1 && c == 5)) {
            CHECK((o.bits & 0x7FFF) > 0x7F80);
          } else {
            CHECK(o.bits == want.out[static_cast<std::size_t>((t * h + hh) * d_v + c)].bits);
          }
        }
      }
    }
  }
}

TEST_CASE("sparse_mha_attention with lse absent writes the same out") {
  const problem p(4, 4, 32, 16, 32, 40, 16, 19);
  const result with = run(p, rounding::bf16);
  std::vector<bf16> out(with.out.size());
  dsa::sparse_mha_attention(dsa::cpu, p.q_view(), p.k_nope_view(), p.k_rope_view(), p.v_view(), p.idx_view(),
                            dsa::make_view(out.data(), {p.s, p.h, p.d_v}), dsa::sparse_mha_config{p.scale, rounding::bf16});
  CHECK(std::memcmp(out.data(), with.out.data(), out.size() * sizeof(bf16)) == 0);
}

TEST_CASE("sparse_mha_attention MQA broadcast (stride 0 over heads) equals explicit per-head copies") {
  // The absorbed decode: every head attends to the same latent rows, k_nope = v = latent.
  const index_t s = 3, h = 4, d_lat = 48, d_rope = 16, n = 30, k = 12;
  const std::vector<bf16> latent = quarter_values(static_cast<std::size_t>(n * (d_lat + d_rope)), 21);
  const std::vector<bf16> q = quarter_values(static_cast<std::size_t>(s * h * (d_lat + d_rope)), 22);
  std::vector<std::int32_t> idx(static_cast<std::size_t>(s * k));
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::int32_t>((i * 7 + 3) % (n + 4)) - 2;  // some < 0, >= n
  // Broadcast views into the cache rows [n, d_lat + d_rope]: stride(1) = 0.
  const index_t row = d_lat + d_rope;
  const dsa::host_view<const bf16, 3> kb(latent.data(), {n, h, d_lat}, {row, 0, 1});
  const dsa::host_view<const bf16, 2> rope(latent.data() + d_lat, {n, d_rope}, {row, 1});
  // Explicit copies [n, h, d_lat].
  std::vector<bf16> copies(static_cast<std::size_t>(n * h * d_lat));
  for (index_t j = 0; j < n; ++j) {
    for (index_t hh = 0; hh < h; ++hh) {
      std::memcpy(&copies[static_cast<std::size_t>((j * h + hh) * d_lat)], &latent[static_cast<std::size_t>(j * row)],
                  sizeof(bf16) * d_lat);
    }
  }
  const auto kc = dsa::make_view(static_cast<const bf16*>(copies.data()), {n, h, d_lat});
  const auto qv = dsa::make_view(q.data(), {s, h, row});
  const auto iv = dsa::make_view(idx.data(), {s, k});
  for (rounding r : {rounding::fp32, rounding::bf16, rounding::bf16_split}) {
    CAPTURE(static_cast<int>(r));
    result a, b;
    for (result* x : {&a, &b}) {
      x->out.assign(static_cast<std::size_t>(s * h * d_lat), bf16{});
      x->lse.assign(static_cast<std::size_t>(s * h), 0.0f);
    }
    const dsa::sparse_mha_config cfg{yarn_scale, r};
    dsa::sparse_mha_attention(dsa::cpu, qv, kb, rope, kb, iv, dsa::make_view(a.out.data(), {s, h, d_lat}), cfg,
                              dsa::make_view(a.lse.data(), {s, h}));
    dsa::sparse_mha_attention(dsa::cpu, qv, kc, rope, kc, iv, dsa::make_view(b.out.data(), {s, h, d_lat}), cfg,
                              dsa::make_view(b.lse.data(), {s, h}));
    CHECK(same_bits(a, b));
    // And against the oracle (the copies as dense per-head tensors).
    std::vector<double> rope_d(static_cast<std::size_t>(n * d_rope));
    for (index_t j = 0; j < n; ++j) {
      for (index_t c = 0; c < d_rope; ++c) rope_d[static_cast<std::size_t>(j * d_rope + c)] = rope(j, c).to_float();
    }
    const auto ref = dsa_test::sparse_mha_reference(to_double(q), to_double(copies), rope_d, to_double(copies), idx, s, h,
                                                    d_lat, d_rope, n, k, d_lat, yarn_scale, oracle_mode(r));
    const violations v = compare(a, ref);
    CHECK(v.out == 0);
    CHECK(v.lse == 0);
  }
}

TEST_CASE("sparse_mha_attention: both CPU paths give the scalar sequence's bits") {
  // The vectorised kernels (shared keys: broadcast k_nope and v; per-head keys: tokens in
  // vector lanes) against the plain loop of tests/support/sparse_mha_sequence.hpp: general bf16
  // values (dots that round), heads, widths and token counts that are not multiples of the
  // 16-lane vectors, more used entries than one 64-row tile, -1 / INT_MIN / INT_MAX / >= n entries
  // and duplicates, a NaN key read by one row, V = the keys' nope part (the absorbed decode) or a
  // separate cache, one token (heads split over threads) or several, every rounding mode and
  // several thread counts.
  const index_t h = 37, d_lat = 72, d_rope = 24, d_vsep = 40, n = 300, k = 150, row = d_lat + d_rope;
  std::mt19937_64 rng(41);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const auto normal_values = [&](index_t count) {
    std::vector<bf16> v(static_cast<std::size_t>(count));
    for (auto& x : v) x = bf16(nd(rng));
    return v;
  };
  std::vector<bf16> latent = normal_values(n * row);
  const std::vector<bf16> vsep = normal_values(n * d_vsep);
  latent[static_cast<std::size_t>(17 * row + 5)] = bf16::from_bits(0x7FC0);  // key 17 is NaN
  // Per-head copies [n, h, d] of the shared rows.
  const auto copies = [&](const std::vector<bf16>& src, index_t stride, index_t d) {
    std::vector<bf16> c(static_cast<std::size_t>(n * h * d));
    for (index_t j = 0; j < n; ++j)
      for (index_t hh = 0; hh < h; ++hh)
        std::memcpy(&c[static_cast<std::size_t>((j * h + hh) * d)], &src[static_cast<std::size_t>(j * stride)], sizeof(bf16) * d);
    return c;
  };
  const std::vector<bf16> lat_copies = copies(latent, row, d_lat), v_copies = copies(vsep, d_vsep, d_vsep);
  const dsa::host_view<const bf16, 3> kb(latent.data(), {n, h, d_lat}, {row, 0, 1});
  const dsa::host_view<const bf16, 3> vb(vsep.data(), {n, h, d_vsep}, {d_vsep, 0, 1});
  const dsa::host_view<const bf16, 2> rope(latent.data() + d_lat, {n, d_rope}, {row, 1});
  const auto kc = dsa::make_view(static_cast<const bf16*>(lat_copies.data()), {n, h, d_lat});
  const auto vc = dsa::make_view(static_cast<const bf16*>(v_copies.data()), {n, h, d_vsep});

  for (const index_t s : {index_t{1}, index_t{3}, index_t{21}}) {
    const std::vector<bf16> q = normal_values(s * h * row);
    std::vector<std::int32_t> idx(static_cast<std::size_t>(s * k));
    for (auto& x : idx) x = static_cast<std::int32_t>(rng() % (n + 20)) - 10;
    idx[0] = std::numeric_limits<std::int32_t>::min();
    idx[1] = std::numeric_limits<std::int32_t>::max();
    idx[2] = idx[3];
    for (auto& x : idx)
      if (x == 17) x = 18;  // only row 1 reads the NaN key
    if (s > 1) idx[static_cast<std::size_t>(k + 4)] = 17;
    const auto qv = dsa::make_view(q.data(), {s, h, row});
    const auto iv = dsa::make_view(idx.data(), {s, k});
    for (const bool separate_v : {false, true}) {
      const index_t d_v = separate_v ? d_vsep : d_lat;
      for (rounding r : {rounding::fp32, rounding::bf16, rounding::bf16_split}) {
        CAPTURE(s);
        CAPTURE(separate_v);
        CAPTURE(static_cast<int>(r));
        const dsa::sparse_mha_config cfg{yarn_scale, r};
        result want;
        want.out.assign(static_cast<std::size_t>(s * h * d_v), bf16{});
        want.lse.assign(static_cast<std::size_t>(s * h), 0.0f);
        dsa_test::sparse_mha_sequence(qv, kc, rope, separate_v ? vc : kc, iv, dsa::make_view(want.out.data(), {s, h, d_v}),
                                      cfg, dsa::make_view(want.lse.data(), {s, h}));
        for (const bool shared : {true, false}) {
          for (int threads : {1, 2, 3, 8}) {
            CAPTURE(shared);
            CAPTURE(threads);
            result got;
            got.out.assign(want.out.size(), bf16::from_bits(0x7FC1));
            got.lse.assign(want.lse.size(), 0.0f);
            dsa::sparse_mha_attention(dsa::cpu_backend{threads}, qv, shared ? kb : kc, rope,
                                      shared ? (separate_v ? vb : kb) : (separate_v ? vc : kc), iv,
                                      dsa::make_view(got.out.data(), {s, h, d_v}), cfg,
                                      dsa::make_view(got.lse.data(), {s, h}));
            CHECK(same_bits(got, want));
          }
        }
        // The NaN key reaches row 1 (every head) and nothing else.
        for (index_t t = 0; t < s; ++t) CHECK(std::isnan(want.lse[static_cast<std::size_t>(t * h)]) == (t == 1));
      }
    }
  }
}

TEST_CASE("sparse_mha_attention strided views equal contiguous copies") {
  const problem p(5, 3, 32, 16, 24, 40, 16, 23);
  const result strided = run(p, rounding::bf16);
  // Contiguous k_nope, v; q inside a padded buffer; out and lse with padded rows.
  std::vector<bf16> kn(static_cast<std::size_t>(p.n * p.h * p.d_nope)), vv(static_cast<std::size_t>(p.n * p.h * p.d_v));
  for (index_t j = 0; j < p.n; ++j) {
    for (index_t hh = 0; hh < p.h; ++hh) {
      std::memcpy(&kn[static_cast<std::size_t>((j * p.h + hh) * p.d_nope)], &p.k_nope_view()(j, hh, 0), sizeof(bf16) * p.d_nope);
      std::memcpy(&vv[static_cast<std::size_t>((j * p.h + hh) * p.d_v)], &p.v_view()(j, hh, 0), sizeof(bf16) * p.d_v);
    }
  }
  const index_t pad = 5;
  std::vector<bf16> qpad(static_cast<std::size_t>(p.s * p.h * (p.d_qk() + pad)));
  for (index_t t = 0; t < p.s; ++t) {
    for (index_t hh = 0; hh < p.h; ++hh) {
      std::memcpy(&qpad[static_cast<std::size_t>((t * p.h + hh) * (p.d_qk() + pad))], &p.q_view()(t, hh, 0),
                  sizeof(bf16) * p.d_qk());
    }
  }
  std::vector<bf16> out(static_cast<std::size_t>(p.s * p.h * (p.d_v + pad)));
  std::vector<float> lse(static_cast<std::size_t>(p.s * (p.h + pad)));
  const dsa::host_view<const bf16, 3> qv(qpad.data(), {p.s, p.h, p.d_qk()}, {p.h * (p.d_qk() + pad), p.d_qk() + pad, 1});
  const dsa::host_view<bf16, 3> ov(out.data(), {p.s, p.h, p.d_v}, {p.h * (p.d_v + pad), p.d_v + pad, 1});
  const dsa::host_view<float, 2> lv(lse.data(), {p.s, p.h}, {p.h + pad, 1});
  dsa::sparse_mha_attention(dsa::cpu, qv, dsa::make_view(static_cast<const bf16*>(kn.data()), {p.n, p.h, p.d_nope}),
                            p.k_rope_view(), dsa::make_view(static_cast<const bf16*>(vv.data()), {p.n, p.h, p.d_v}),
                            p.idx_view(), ov, dsa::sparse_mha_config{p.scale, rounding::bf16}, lv);
  for (index_t t = 0; t < p.s; ++t) {
    for (index_t hh = 0; hh < p.h; ++hh) {
      CHECK(lv(t, hh) == strided.lse[static_cast<std::size_t>(t * p.h + hh)]);
      for (index_t c = 0; c < p.d_v; ++c) {
        CHECK(ov(t, hh, c).bits == strided.out[static_cast<std::size_t>((t * p.h + hh) * p.d_v + c)].bits);
      }
    }
  }
}

TEST_CASE("sparse_mha_attention is bit-identical for every thread count and batch") {
  const problem p(13, 4, 64, 64, 64, 80, 32, 25);
  for (rounding r : {rounding::fp32, rounding::bf16, rounding::bf16_split}) {
    CAPTURE(static_cast<int>(r));
    const result one = run(p, r, dsa::cpu_backend{1});
    for (int threads : {2, 3, 5, 16}) {
      CAPTURE(threads);
      CHECK(same_bits(one, run(p, r, dsa::cpu_backend{threads})));
    }
    // A token's result does not depend on the other tokens of the batch.
    problem single(1, p.h, p.d_nope, p.d_rope, p.d_v, p.n, p.k, 25);
    single.kv = p.kv;
    single.k_rope = p.k_rope;
    const index_t t = 7;
    single.q.assign(p.q.begin() + t * p.h * p.d_qk(), p.q.begin() + (t + 1) * p.h * p.d_qk());
    single.idx.assign(p.idx.begin() + t * p.k, p.idx.begin() + (t + 1) * p.k);
    const result alone = run(single, r);
    CHECK(std::memcmp(alone.out.data(), one.out.data() + t * p.h * p.d_v, alone.out.size() * sizeof(bf16)) == 0);
    CHECK(std::memcmp(alone.lse.data(), one.lse.data() + t * p.h, alone.lse.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("sparse_mha_attention large logits stay finite") {
  problem p(2, 2, 32, 0, 16, 12, 8, 27);
  for (auto& x : p.q) x = bf16(x.to_float() * 64.0f);  // logits in the hundreds
  const result got = run(p, rounding::fp32);
  for (const bf16 x : got.out) CHECK(std::isfinite(x.to_float()));
  for (const float l : got.lse) CHECK(std::isfinite(l));
  const violations v = compare(got, p.reference(rounding::fp32));
  CHECK(v.out == 0);
}

TEST_CASE("sparse_mha_attention rejects bad arguments") {
  const problem p(2, 3, 16, 8, 8, 10, 4, 31);
  std::vector<bf16> out(static_cast<std::size_t>(p.s * p.h * p.d_v) + 64);
  std::vector<float> lse(static_cast<std::size_t>(p.s * p.h) + 8);
  const auto q = p.q_view();
  const auto kn = p.k_nope_view();
  const auto kr = p.k_rope_view();
  const auto v = p.v_view();
  const auto idx = p.idx_view();
  const auto ov = dsa::make_view(out.data(), {p.s, p.h, p.d_v});
  const auto lv = dsa::make_view(lse.data(), {p.s, p.h});
  const dsa::sparse_mha_config cfg{p.scale, rounding::bf16};
  auto call = [&](auto q_, auto kn_, auto kr_, auto v_, auto idx_, auto ov_, dsa::sparse_mha_config c, auto lv_) {
    dsa::sparse_mha_attention(dsa::cpu, q_, kn_, kr_, v_, idx_, ov_, c, lv_);
  };
  // The valid call works.
  call(q, kn, kr, v, idx, ov, cfg, lv);

  // Shapes.
  CHECK_THROWS_WITH_AS(call(dsa::make_view(p.q.data(), {p.s, p.h, p.d_qk() - 1}), kn, kr, v, idx, ov, cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: q.extent(2) = 23; expected 24"), dsa::error);
  CHECK_THROWS_WITH_AS(call(dsa::make_view(p.q.data(), {p.s, p.h - 1, p.d_qk()}), kn, kr, v, idx, ov, cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: k_nope.extent(1) = 3; expected 2"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, kn, dsa::make_view(p.k_rope.data(), {p.n - 1, p.d_rope}), v, idx, ov, cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: k_rope.extent(0) = 9; expected 10"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, kn, kr, dsa::host_view<const bf16, 3>(v.data_handle(), {p.n - 1, p.h, p.d_v}, v.strides()),
                            idx, ov, cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: v.extent(0) = 9; expected 10"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, kn, kr, dsa::host_view<const bf16, 3>(v.data_handle(), {p.n, p.h - 1, p.d_v}, v.strides()),
                            idx, ov, cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: v.extent(1) = 2; expected 3"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, kn, kr, dsa::host_view<const bf16, 3>(v.data_handle(), {p.n, p.h, 0}, v.strides()), idx,
                            dsa::make_view(out.data(), {p.s, p.h, 0}), cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: v.extent(2) = 0; expected >= 1"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, dsa::host_view<const bf16, 3>(kn.data_handle(), {p.n, p.h, 0}, kn.strides()), kr, v, idx,
                            ov, cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: k_nope.extent(2) = 0; expected >= 1"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, kn, kr, v, dsa::make_view(p.idx.data(), {p.s - 1, p.k}), ov, cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: indices.extent(0) = 1; expected 2"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, kn, kr, v, idx, dsa::make_view(out.data(), {p.s + 1, p.h, p.d_v}), cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: out.extent(0) = 3; expected 2"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, kn, kr, v, idx, dsa::make_view(out.data(), {p.s, p.h + 1, p.d_v}), cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: out.extent(1) = 4; expected 3"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, kn, kr, v, idx, dsa::make_view(out.data(), {p.s, p.h, p.d_v + 1}), cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: out.extent(2) = 9; expected 8"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, kn, kr, v, idx, ov, cfg, dsa::make_view(lse.data(), {p.s, p.h + 1})),
                       doctest::Contains("dsa::sparse_mha_attention: lse.extent(1) = 4; expected 3"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, kn, kr, v, idx, ov, cfg, dsa::make_view(lse.data(), {p.s + 1, p.h})),
                       doctest::Contains("dsa::sparse_mha_attention: lse.extent(0) = 3; expected 2"), dsa::error);

  // Configuration.
  for (float bad : {0.0f, -0.5f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(call(q, kn, kr, v, idx, ov, dsa::sparse_mha_config{bad, rounding::bf16}, lv),
                         doctest::Contains("dsa::sparse_mha_attention: cfg.softmax_scale = "), dsa::error);
  }
  CHECK_THROWS_WITH_AS(call(q, kn, kr, v, idx, ov, dsa::sparse_mha_config{}, lv),
                       doctest::Contains("cfg.softmax_scale = 0; expected a finite value > 0"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, kn, kr, v, idx, ov, dsa::sparse_mha_config{p.scale, static_cast<rounding>(7)}, lv),
                       doctest::Contains("dsa::sparse_mha_attention: cfg.rounding = 7; expected attention_rounding"),
                       dsa::error);

  // Strides and null data.
  CHECK_THROWS_WITH_AS(call(dsa::host_view<const bf16, 3>(p.q.data(), {p.s, p.h, p.d_qk()}, {1, 1, 2}), kn, kr, v, idx, ov,
                            cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: q.stride(2) = 2; expected 1"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, dsa::host_view<const bf16, 3>(kn.data_handle(), {p.n, p.h, p.d_nope}, {64, 16, 2}), kr, v,
                            idx, ov, cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: k_nope.stride(2) = 2; expected 1"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, kn, dsa::host_view<const bf16, 2>(p.k_rope.data(), {p.n, p.d_rope}, {p.d_rope, 3}), v, idx,
                            ov, cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: k_rope.stride(1) = 3; expected 1"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, kn, kr, dsa::host_view<const bf16, 3>(v.data_handle(), {p.n, p.h, p.d_v}, {64, 16, 2}), idx,
                            ov, cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: v.stride(2) = 2; expected 1"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, kn, kr, v, dsa::host_view<const std::int32_t, 2>(p.idx.data(), {p.s, p.k}, {1, 2}), ov, cfg,
                            lv),
                       doctest::Contains("dsa::sparse_mha_attention: indices.stride(1) = 2; expected 1"), dsa::error);
  CHECK_THROWS_WITH_AS(call(dsa::host_view<const bf16, 3>(nullptr, {p.s, p.h, p.d_qk()}), kn, kr, v, idx, ov, cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: q.data = null; expected a non-null pointer"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(call(q, kn, kr, v, dsa::host_view<const std::int32_t, 2>(nullptr, {p.s, p.k}), ov, cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: indices.data = null"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, kn, kr, v, idx, dsa::host_view<bf16, 3>(nullptr, {p.s, p.h, p.d_v}), cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: out.data = null"), dsa::error);

  // Outputs: overlapping rows, overlap with inputs or with each other.
  CHECK_THROWS_WITH_AS(call(q, kn, kr, v, idx, dsa::host_view<bf16, 3>(out.data(), {p.s, p.h, p.d_v}, {p.d_v, 0, 1}), cfg,
                            lv),
                       doctest::Contains("dsa::sparse_mha_attention: out.stride(1) = 0; expected |stride| >= 8"),
                       dsa::error);
  std::vector<bf16> qcopy = p.q;
  CHECK_THROWS_WITH_AS(call(dsa::make_view(static_cast<const bf16*>(qcopy.data()), {p.s, p.h, p.d_qk()}), kn, kr, v, idx,
                            dsa::make_view(qcopy.data(), {p.s, p.h, p.d_v}), cfg, lv),
                       doctest::Contains("dsa::sparse_mha_attention: out = a view overlapping q"), dsa::error);
  CHECK_THROWS_WITH_AS(call(q, kn, kr, v, idx, ov, cfg,
                            dsa::host_view<float, 2>(reinterpret_cast<float*>(out.data()), {p.s, p.h})),
                       doctest::Contains("dsa::sparse_mha_attention: lse = a view overlapping out"), dsa::error);
}
