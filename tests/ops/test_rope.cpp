// dsa::rope_apply: front-end checks and CPU results (pair norms, identity at position 0, the two
// layouts, strided slices, a double-precision reference, thread counts).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dsa/cpu/rope.hpp"
#include "dsa/ops/rope.hpp"
#include "support/dense_reference.hpp"
#include "support/random.hpp"

namespace {

using dsa::bf16;
using dsa::index_t;

dsa::rope_config tiny_config() {
  dsa::rope_config c;
  c.dim = 64;
  c.factor = 40.0f;
  c.original_max_position = 4096;
  c.max_position = 8192;
  return c;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

std::vector<bf16> apply(std::vector<bf16> x, index_t t, index_t h, const std::vector<std::int32_t>& pos,
                        const dsa::rope_config& c, dsa::rope_layout layout, dsa::cpu_backend be = dsa::cpu) {
  dsa::rope_apply(be, dsa::make_view(x.data(), {t, h, c.dim}), dsa::make_view(pos.data(), {t}), c, layout);
  return x;
}

}  // namespace

TEST_CASE("rope_apply: position 0 is the identity, pair norms are preserved") {
  const dsa::rope_config c = tiny_config();
  const index_t t = 6, h = 3;
  const std::vector<bf16> x = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(t * h * c.dim), 1, 2.0f));
  const std::vector<std::int32_t> zeros(t, 0);
  for (auto layout : {dsa::rope_layout::interleaved, dsa::rope_layout::half}) {
    CHECK(same_bits(apply(x, t, h, zeros, c, layout), x));
    const std::vector<std::int32_t> pos = {1, 2, 100, 4097, 6000, 8191};
    const std::vector<bf16> y = apply(x, t, h, pos, c, layout);
    CHECK_FALSE(same_bits(y, x));
    const index_t half = c.dim / 2;
    std::size_t bad = 0;
    for (index_t r = 0; r < t * h; ++r) {
      for (index_t j = 0; j < half; ++j) {
        const index_t a = layout == dsa::rope_layout::interleaved ? 2 * j : j;
        const index_t b = layout == dsa::rope_layout::interleaved ? 2 * j + 1 : j + half;
        const double n0 = std::hypot(x[r * c.dim + a].to_float(), x[r * c.dim + b].to_float());
        const double n1 = std::hypot(y[r * c.dim + a].to_float(), y[r * c.dim + b].to_float());
        if (std::fabs(n1 - n0) > 0x1p-8 * n0 + 1e-30) ++bad;  // two bf16 roundings
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("rope_apply: the half layout is the interleaved rotation of the de-interleaved pairs") {
  const dsa::rope_config c = tiny_config();
  const index_t t = 5, h = 2, half = c.dim / 2;
  const std::vector<bf16> x = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(t * h * c.dim), 2));
  const std::vector<std::int32_t> pos = {3, 17, 250, 5000, 8000};
  // Permute (j, j + half) -> (2j, 2j + 1), rotate interleaved, permute back.
  std::vector<bf16> xp(x.size());
  for (index_t r = 0; r < t * h; ++r) {
    for (index_t j = 0; j < half; ++j) {
      xp[r * c.dim + 2 * j] = x[r * c.dim + j];
      xp[r * c.dim + 2 * j + 1] = x[r * c.dim + j + half];
    }
  }
  const std::vector<bf16> yp = apply(xp, t, h, pos, c, dsa::rope_layout::interleaved);
  std::vector<bf16> back(x.size());
  for (index_t r = 0; r < t * h; ++r) {
    for (index_t j = 0; j < half; ++j) {
      back[r * c.dim + j] = yp[r * c.dim + 2 * j];
      back[r * c.dim + j + half] = yp[r * c.dim + 2 * j + 1];
    }
  }
  const std::vector<bf16> yh = apply(x, t, h, pos, c, dsa::rope_layout::half);
  CHECK(same_bits(yh, back));
  // And the two layouts really differ on the same data (the indexer RoPE bug of 2025-11-17).
  CHECK_FALSE(same_bits(yh, apply(x, t, h, pos, c, dsa::rope_layout::interleaved)));
}

TEST_CASE("rope_apply matches a double-precision rotation by the spec's fp32 angles") {
  for (bool yarn : {true, false}) {
    dsa::rope_config c = tiny_config();
    if (!yarn) c.max_position = 4096;
    const index_t t = 40, h = 4, half = c.dim / 2;
    const std::vector<bf16> x = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(t * h * c.dim), 3, 4.0f));
    std::vector<std::int32_t> pos(t);
    for (index_t i = 0; i < t; ++i) pos[i] = static_cast<std::int32_t>((i * 211 + 5) % c.max_position);
    const std::vector<bf16> y = apply(x, t, h, pos, c, dsa::rope_layout::interleaved);
    std::size_t exact = 0, far = 0, total = 0;
    for (index_t i = 0; i < t; ++i) {
      for (index_t j = 0; j < half; ++j) {
        const double ref_f = dsa_test::yarn_inv_freq_reference(10000.0, 64, 40.0, 4096.0, 32.0, 1.0, yarn, j);
        CHECK(std::fabs(dsa::rope_inv_freq(c, j) - ref_f) <= 4e-7 * ref_f);
        const double angle = static_cast<double>(static_cast<float>(pos[i]) * dsa::rope_inv_freq(c, j));
        for (index_t k = 0; k < h; ++k) {
          const index_t o = (i * h + k) * c.dim + 2 * j;
          const double a = x[o].to_float(), b = x[o + 1].to_float();
          const double re = a * std::cos(angle) - b * std::sin(angle);
          const double im = a * std::sin(angle) + b * std::cos(angle);
          for (auto [got, ref] : {std::pair{y[o], re}, std::pair{y[o + 1], im}}) {
            ++total;
            if (got.bits == bf16(static_cast<float>(ref)).bits) ++exact;
            // One bf16 rounding of a value whose fp32 cos/sin carry 2^-24 relative error.
            if (std::fabs(got.to_float() - ref) > 0x1p-8 * std::fabs(ref) + 0x1p-22 * std::hypot(a, b)) ++far;
          }
        }
      }
    }
    CHECK(far == 0);
    CHECK(exact >= total * 99 / 100);
  }
}

TEST_CASE("rope_apply on the rope slice of a wider tensor, and across thread counts") {
  const dsa::rope_config c = tiny_config();
  const index_t t = 9, h = 5, nope = 128, width = nope + c.dim;
  const std::vector<bf16> full = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(t * h * width), 4));
  std::vector<std::int32_t> pos(t);
  for (index_t i = 0; i < t; ++i) pos[i] = static_cast<std::int32_t>(4090 + i);
  std::vector<bf16> packed(static_cast<std::size_t>(t * h * c.dim));
  for (index_t r = 0; r < t * h; ++r) std::memcpy(&packed[r * c.dim], &full[r * width + nope], c.dim * sizeof(bf16));
  const std::vector<bf16> expect = apply(packed, t, h, pos, c, dsa::rope_layout::interleaved, dsa::cpu_backend{1});
  for (int threads : {1, 2, 3}) {
    std::vector<bf16> y = full;
    dsa::rope_apply(dsa::cpu_backend{threads},
                    dsa::host_view<bf16, 3>(y.data() + nope, {t, h, c.dim}, {h * width, width, 1}),
                    dsa::make_view(pos.data(), {t}), c, dsa::rope_layout::interleaved);
    bool ok = true;
    for (index_t r = 0; r < t * h; ++r) {
      ok = ok && std::memcmp(&y[r * width], &full[r * width], nope * sizeof(bf16)) == 0;  // nope untouched
      ok = ok && std::memcmp(&y[r * width + nope], &expect[r * c.dim], c.dim * sizeof(bf16)) == 0;
    }
    CHECK(ok);
  }
}

TEST_CASE("rope_apply rejects bad arguments with a clear message") {
  dsa::rope_config c = tiny_config();
  std::vector<bf16> x(4 * 2 * 64);
  std::vector<std::int32_t> pos(4);
  const auto xv = dsa::make_view(x.data(), {4, 2, 64});
  const auto pv = dsa::make_view(pos.data(), {4});
  const auto il = dsa::rope_layout::interleaved;
  CHECK_NOTHROW(dsa::rope_apply(dsa::cpu, xv, pv, c, il));
  dsa::rope_config odd = c;
  odd.dim = 63;
  CHECK_THROWS_WITH_AS(dsa::rope_apply(dsa::cpu, dsa::make_view(x.data(), {4, 2, 63}), pv, odd, il),
                       doctest::Contains("dsa::rope_apply: cfg.dim = 63; expected a positive even number"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::rope_apply(dsa::cpu, dsa::make_view(x.data(), {4, 2, 32}), pv, c, il),
                       doctest::Contains("dsa::rope_apply: x.extent(2) = 32; expected 64"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::rope_apply(dsa::cpu, xv, dsa::make_view(pos.data(), {3}), c, il),
                       doctest::Contains("dsa::rope_apply: positions.extent(0) = 3; expected 4"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::rope_apply(dsa::cpu, xv, pv, c, static_cast<dsa::rope_layout>(5)),
                       doctest::Contains("dsa::rope_apply: layout = 5"), dsa::error);
  dsa::rope_config bad = c;
  bad.base = 1.0f;
  CHECK_THROWS_WITH_AS(dsa::rope_apply(dsa::cpu, xv, pv, bad, il), doctest::Contains("dsa::rope_apply: cfg.base = 1"),
                       dsa::error);
  bad = c;
  bad.factor = 0.0f;
  CHECK_THROWS_WITH_AS(dsa::rope_apply(dsa::cpu, xv, pv, bad, il), doctest::Contains("dsa::rope_apply: cfg.factor = 0"),
                       dsa::error);
  bad = c;
  bad.beta_slow = -1.0f;
  CHECK_THROWS_WITH_AS(dsa::rope_apply(dsa::cpu, xv, pv, bad, il), doctest::Contains("dsa::rope_apply: cfg.beta_slow = -1"),
                       dsa::error);
  bad = c;
  bad.original_max_position = -5;
  CHECK_THROWS_WITH_AS(dsa::rope_apply(dsa::cpu, xv, pv, bad, il),
                       doctest::Contains("dsa::rope_apply: cfg.original_max_position = -5"), dsa::error);
  // YaRN off: its parameters are not used and not checked.
  bad = c;
  bad.max_position = 4096;
  bad.factor = -3.0f;
  CHECK_NOTHROW(dsa::rope_apply(dsa::cpu, xv, pv, bad, il));
  CHECK_THROWS_WITH_AS(dsa::rope_apply(dsa::cpu, dsa::host_view<bf16, 3>(x.data(), {4, 2, 64}, {128, 32, 1}), pv, c, il),
                       doctest::Contains("dsa::rope_apply: x.stride(1) = 32; expected |stride| >= 64"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::rope_apply(dsa::cpu, dsa::host_view<bf16, 3>(x.data(), {4, 2, 64}, {100, 64, 1}), pv, c, il),
                       doctest::Contains("dsa::rope_apply: x.stride(0) = 100; expected |stride| >= 128"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::rope_apply(dsa::cpu, dsa::host_view<bf16, 3>(x.data(), {4, 1, 32}, {64, 64, 2}), pv, odd, il),
                       doctest::Contains("cfg.dim = 63"), dsa::error);
  dsa::rope_config small = c;
  small.dim = 32;
  CHECK_THROWS_WITH_AS(dsa::rope_apply(dsa::cpu, dsa::host_view<bf16, 3>(x.data(), {4, 2, 32}, {64, 32, 2}), pv, small, il),
                       doctest::Contains("dsa::rope_apply: x.stride(2) = 2"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::rope_apply(dsa::cpu, xv, dsa::host_view<const std::int32_t, 1>(nullptr, {4}), c, il),
                       doctest::Contains("dsa::rope_apply: positions.data = null"), dsa::error);
  // Transposed [heads, t] storage of a [t, heads, dim] view is fine (rows still disjoint).
  CHECK_NOTHROW(dsa::rope_apply(dsa::cpu, dsa::host_view<bf16, 3>(x.data(), {4, 2, 64}, {64, 256, 1}), pv, c, il));
}

TEST_CASE("rope_apply rejects positions outside [0, max_position) (issue 14)") {
  // The rotary embedding exists for the model's context only (the reference's freqs_cis has
  // max_seq_len rows); a position past it or negative is a caller's bug, named with its entry.
  dsa::rope_config c = tiny_config();  // max_position 8192
  std::vector<bf16> x = dsa_test::convert<bf16>(dsa_test::normal(4 * 2 * 64, 5, 1.0f));
  const auto xv = dsa::make_view(x.data(), {4, 2, 64});
  const auto il = dsa::rope_layout::interleaved;
  std::vector<std::int32_t> pos = {0, 1, 8190, 8191};
  CHECK_NOTHROW(dsa::rope_apply(dsa::cpu, xv, dsa::make_view(static_cast<const std::int32_t*>(pos.data()), {4}), c, il));
  pos[2] = 8192;
  CHECK_THROWS_WITH_AS(
      dsa::rope_apply(dsa::cpu, xv, dsa::make_view(static_cast<const std::int32_t*>(pos.data()), {4}), c, il),
      "dsa::rope_apply: positions(2) = 8192; expected a position in [0, cfg.max_position = 8192)", dsa::error);
  pos[2] = 5;
  pos[3] = -1;
  CHECK_THROWS_WITH_AS(
      dsa::rope_apply(dsa::cpu, xv, dsa::make_view(static_cast<const std::int32_t*>(pos.data()), {4}), c,
                      dsa::rope_layout::half),
      "dsa::rope_apply: positions(3) = -1; expected a position in [0, cfg.max_position = 8192)", dsa::error);
  c.max_position = 4096;  // YaRN off: the same bound
  pos[2] = 4096;
  CHECK_THROWS_WITH_AS(
      dsa::rope_apply(dsa::cpu, xv, dsa::make_view(static_cast<const std::int32_t*>(pos.data()), {4}), c, il),
      doctest::Contains("positions(2) = 4096; expected a position in [0, cfg.max_position = 4096)"), dsa::error);
  // A rejected call writes nothing: positions are checked before any element is rotated.
  const std::vector<bf16> before = x;
  const std::vector<std::int32_t> bad = {3, 2, 1, -7};
  CHECK_THROWS_AS(dsa::rope_apply(dsa::cpu, xv, dsa::make_view(bad.data(), {4}), c, il), dsa::error);
  CHECK(same_bits(x, before));
}
