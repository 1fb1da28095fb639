// KV-cache row formats: kv_cache_fp8_pack/unpack (656-byte MLA rows) and indexer_cache_pack/
// unpack (132-byte key rows), the in-place row accessors, and their argument checks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/cpu/kv_cache.hpp"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/ops/fp8_quant.hpp"
#include "dsa/ops/kv_cache.hpp"
#include "support/random.hpp"

namespace {

using dsa::bf16;
using dsa::fp8_e4m3;
using dsa::index_t;

// n tokens of 576 bf16 values, each 128-group of the latent at its own magnitude.
std::vector<bf16> random_kv(index_t n, std::uint64_t seed) {
  auto x = dsa_test::normal(static_cast<std::size_t>(n * 576), seed);
  const auto e = dsa_test::uniform(static_cast<std::size_t>(n * 5), seed + 1, -12.0f, 12.0f);
  for (index_t t = 0; t < n; ++t)
    for (index_t j = 0; j < 576; ++j)
      x[static_cast<std::size_t>(t * 576 + j)] = std::ldexp(x[static_cast<std::size_t>(t * 576 + j)], static_cast<int>(e[static_cast<std::size_t>(t * 5 + j / 128)]));
  return dsa_test::convert<bf16>(x);
}

std::uint32_t le32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 | static_cast<std::uint32_t>(p[2]) << 16 |
         static_cast<std::uint32_t>(p[3]) << 24;
}

std::uint32_t fbits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

TEST_CASE("FP8 MLA rows: pack -> unpack equals act_quant (ue8m0, 128) + dequant; RoPE bits kept") {
  const index_t n = 150;
  const auto kv = random_kv(n, 1);
  std::vector<std::uint8_t> cache(static_cast<std::size_t>(n * 656), 0xCD);
  dsa::kv_cache_fp8_pack(dsa::cpu, dsa::make_view(kv.data(), {n, 576}), dsa::make_view(cache.data(), {n, 656}));
  std::vector<bf16> back(kv.size());
  dsa::kv_cache_fp8_unpack(dsa::cpu, dsa::make_view(cache.data(), {n, 656}), dsa::make_view(back.data(), {n, 576}));

  // The same latent through the public quantizers.
  std::vector<fp8_e4m3> q(static_cast<std::size_t>(n * 512));
  std::vector<float> s(static_cast<std::size_t>(n * 4));
  std::vector<bf16> deq(q.size());
  const dsa::tensor_view<const bf16, 2> latent(kv.data(), {n, 512}, {576, 1});
  dsa::act_quant(dsa::cpu, latent, dsa::make_view(q.data(), {n, 512}), dsa::make_view(s.data(), {n, 4}),
                 {dsa::scale_format::ue8m0, 128});
  dsa::act_dequant(dsa::cpu, dsa::make_view(q.data(), {n, 512}), dsa::make_view(s.data(), {n, 4}),
                   dsa::make_view(deq.data(), {n, 512}));

  for (index_t t = 0; t < n; ++t) {
    const std::uint8_t* row = cache.data() + t * 656;
    for (index_t j = 0; j < 512; ++j) {
      const auto k = static_cast<std::size_t>(t * 512 + j);
      // Byte layout: codes at [0, 512).
      REQUIRE(row[j] == q[k].bits);
      REQUIRE(back[static_cast<std::size_t>(t * 576 + j)].bits == deq[k].bits);
      // Exact: e4m3 times a power of two fits bf16.
      REQUIRE(back[static_cast<std::size_t>(t * 576 + j)].to_float() == q[k].to_float() * s[static_cast<std::size_t>(t * 4 + j / 128)]);
      REQUIRE(dsa::kv_fp8_row_code(row, j).bits == q[k].bits);
      REQUIRE(dsa::kv_fp8_row_latent(row, j) == q[k].to_float() * s[static_cast<std::size_t>(t * 4 + j / 128)]);
    }
    for (index_t g = 0; g < 4; ++g) {
      // Scales at [512, 528), little-endian fp32.
      const float sg = s[static_cast<std::size_t>(t * 4 + g)];
      REQUIRE(le32(row + 512 + 4 * g) == fbits(sg));
      REQUIRE(dsa::kv_fp8_row_scale(row, g) == sg);
      REQUIRE(std::exp2(std::round(std::log2(sg))) == sg);  // a power of two
    }
    for (index_t j = 0; j < 64; ++j) {
      // RoPE at [528, 656), little-endian bf16, bit for bit.
      const std::uint16_t b = kv[static_cast<std::size_t>(t * 576 + 512 + j)].bits;
      REQUIRE(row[528 + 2 * j] == (b & 0xFF));
      REQUIRE(row[529 + 2 * j] == (b >> 8));
      REQUIRE(dsa::kv_fp8_row_rope(row, j).bits == b);
      REQUIRE(back[static_cast<std::size_t>(t * 576 + 512 + j)].bits == b);
    }
  }
}

TEST_CASE("FP8 MLA row: a hand-built token lands at the documented offsets") {
  std::vector<bf16> kv(576, bf16(0.0f));
  kv[0] = bf16(448.0f);  // group 0: amax 448 -> scale 1, code 0x7E
  kv[1] = bf16(-1.0f);   // code 0xB8
  kv[128] = bf16(3.0f);  // group 1: 3/448 -> scale 2^-7, 3 / 2^-7 = 384 -> code 0x7C
  // group 2 stays zero: scale 2^-22 (the 1e-4 floor), codes 0
  kv[384] = bf16(-0.5f);  // group 3: scale 2^-9, -0.5 / 2^-9 = -256 -> code 0xF8
  kv[512] = bf16::from_bits(0x1234);
  kv[575] = bf16::from_bits(0xFFC1);  // a NaN RoPE value is copied untouched
  std::vector<std::uint8_t> row(656);
  dsa::kv_cache_fp8_pack(dsa::cpu, dsa::make_view(kv.data(), {1, 576}), dsa::make_view(row.data(), {1, 656}));
  CHECK(row[0] == 0x7E);
  CHECK(row[1] == 0xB8);
  CHECK(row[2] == 0x00);
  CHECK(row[128] == 0x7C);
  CHECK(row[256] == 0x00);
  CHECK(row[384] == 0xF8);
  CHECK(le32(row.data() + 512) == 0x3F800000u);                    // 1.0
  CHECK(le32(row.data() + 516) == (127u - 7u) << 23);              // 2^-7
  CHECK(le32(row.data() + 520) == (127u - 22u) << 23);             // 2^-22
  CHECK(le32(row.data() + 524) == (127u - 9u) << 23);              // 2^-9
  CHECK(row[528] == 0x34);
  CHECK(row[529] == 0x12);
  CHECK(row[654] == 0xC1);
  CHECK(row[655] == 0xFF);
}

TEST_CASE("slots scatter tokens, -1 skips, other rows stay untouched") {
  const index_t n = 4, rows = 10;
  const auto kv = random_kv(n, 2);
  std::vector<std::uint8_t> dense(static_cast<std::size_t>(n * 656));
  dsa::kv_cache_fp8_pack(dsa::cpu, dsa::make_view(kv.data(), {n, 576}), dsa::make_view(dense.data(), {n, 656}));

  std::vector<std::uint8_t> cache(static_cast<std::size_t>(rows * 656), 0xAB);
  const std::vector<std::int32_t> slots = {7, -1, 0, 3};
  dsa::kv_cache_fp8_pack(dsa::cpu_backend{2}, dsa::make_view(kv.data(), {n, 576}), dsa::make_view(cache.data(), {rows, 656}),
                         dsa::make_view(slots.data(), {n}));
  for (index_t r = 0; r < rows; ++r) {
    const index_t src = r == 7 ? 0 : r == 0 ? 2 : r == 3 ? 3 : -1;
    for (index_t b = 0; b < 656; ++b) {
      const auto got = cache[static_cast<std::size_t>(r * 656 + b)];
      REQUIRE(got == (src < 0 ? 0xAB : dense[static_cast<std::size_t>(src * 656 + b)]));
    }
  }

  // The same scatter for the indexer cache.
  std::vector<fp8_e4m3> k(static_cast<std::size_t>(n * 128));
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = fp8_e4m3::from_bits(static_cast<std::uint8_t>(i * 13 + 1));
  const std::vector<float> ks = {0.5f, 2.0f, 3.25f, std::numeric_limits<float>::quiet_NaN()};
  std::vector<std::uint8_t> icache(static_cast<std::size_t>(rows * 132), 0xAB);
  dsa::indexer_cache_pack(dsa::cpu, dsa::make_view(k.data(), {n, 128}), dsa::make_view(ks.data(), {n}),
                          dsa::make_view(icache.data(), {rows, 132}), dsa::make_view(slots.data(), {n}));
  for (index_t r = 0; r < rows; ++r) {
    const index_t src = r == 7 ? 0 : r == 0 ? 2 : r == 3 ? 3 : -1;
    const std::uint8_t* row = icache.data() + r * 132;
    if (src < 0) {
      for (index_t b = 0; b < 132; ++b) REQUIRE(row[b] == 0xAB);
      continue;
    }
    for (index_t j = 0; j < 128; ++j) REQUIRE(row[j] == k[static_cast<std::size_t>(src * 128 + j)].bits);
    REQUIRE(le32(row + 128) == fbits(ks[static_cast<std::size_t>(src)]));
    REQUIRE(fbits(dsa::indexer_cache_row_scale(row)) == fbits(ks[static_cast<std::size_t>(src)]));
    REQUIRE(dsa::indexer_cache_row_code(row, 5).bits == k[static_cast<std::size_t>(src * 128 + 5)].bits);
  }
}

TEST_CASE("indexer rows round-trip bit for bit") {
  const index_t n = 300;
  std::vector<fp8_e4m3> k(static_cast<std::size_t>(n * 128));
  const auto u = dsa_test::uniform(k.size(), 3, 0.0f, 256.0f);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = fp8_e4m3::from_bits(static_cast<std::uint8_t>(u[i]));
  std::vector<float> ks = dsa_test::uniform(static_cast<std::size_t>(n), 4, 1e-6f, 1e3f);
  ks[17] = -0.0f;
  ks[18] = std::numeric_limits<float>::infinity();
  std::vector<std::uint8_t> cache(static_cast<std::size_t>(n * 132));
  dsa::indexer_cache_pack(dsa::cpu, dsa::make_view(k.data(), {n, 128}), dsa::make_view(ks.data(), {n}),
                          dsa::make_view(cache.data(), {n, 132}));
  std::vector<fp8_e4m3> k2(k.size());
  std::vector<float> ks2(ks.size());
  dsa::indexer_cache_unpack(dsa::cpu_backend{3}, dsa::make_view(cache.data(), {n, 132}), dsa::make_view(k2.data(), {n, 128}),
                            dsa::make_view(ks2.data(), {n}));
  for (std::size_t i = 0; i < k.size(); ++i) REQUIRE(k2[i].bits == k[i].bits);
  for (std::size_t i = 0; i < ks.size(); ++i) REQUIRE(fbits(ks2[i]) == fbits(ks[i]));
}

TEST_CASE("packing is bit-identical for every thread count, and strided caches work") {
  const index_t n = 333;
  const auto kv = random_kv(n, 5);
  std::vector<std::uint8_t> c1(static_cast<std::size_t>(n * 656)), c2(c1.size());
  dsa::kv_cache_fp8_pack(dsa::cpu_backend{1}, dsa::make_view(kv.data(), {n, 576}), dsa::make_view(c1.data(), {n, 656}));
  dsa::kv_cache_fp8_pack(dsa::cpu_backend{2}, dsa::make_view(kv.data(), {n, 576}), dsa::make_view(c2.data(), {n, 656}));
  CHECK(c1 == c2);

  // A cache whose rows are padded to 704 bytes (e.g. one page with a header per row).
  std::vector<std::uint8_t> padded(static_cast<std::size_t>(n * 704), 0x11);
  const dsa::tensor_view<std::uint8_t, 2> pv(padded.data(), {n, 656}, {704, 1});
  dsa::kv_cache_fp8_pack(dsa::cpu, dsa::make_view(kv.data(), {n, 576}), pv);
  for (index_t t = 0; t < n; ++t) {
    REQUIRE(std::memcmp(padded.data() + t * 704, c1.data() + t * 656, 656) == 0);
    REQUIRE(padded[static_cast<std::size_t>(t * 704 + 700)] == 0x11);
  }
  std::vector<bf16> back(kv.size()), back2(kv.size());
  dsa::kv_cache_fp8_unpack(dsa::cpu, pv, dsa::make_view(back.data(), {n, 576}));
  dsa::kv_cache_fp8_unpack(dsa::cpu_backend{1}, dsa::make_view(c1.data(), {n, 656}), dsa::make_view(back2.data(), {n, 576}));
  for (std::size_t i = 0; i < back.size(); ++i) REQUIRE(back[i].bits == back2[i].bits);
}

TEST_CASE("bad arguments are rejected with a clear dsa::error") {
  std::vector<bf16> kv(4 * 576);
  std::vector<std::uint8_t> cache(10 * 656);
  auto kvv = dsa::make_view(kv.data(), {4, 576});
  auto cv = dsa::make_view(cache.data(), {10, 656});
  auto pack = [&](std::vector<std::int32_t> s) {
    dsa::kv_cache_fp8_pack(dsa::cpu, kvv, cv, dsa::make_view(s.data(), {static_cast<index_t>(s.size())}));
  };
  CHECK_NOTHROW(pack({9, 8, -1, 0}));
  CHECK_THROWS_WITH_AS(pack({9, 10, -1, 0}),
                       doctest::Contains("dsa::kv_cache_fp8_pack: slots(1) = 10; expected -1 (skip) or a cache row in [0, 10)"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(pack({-2, 1, 2, 3}), doctest::Contains("dsa::kv_cache_fp8_pack: slots(0) = -2"), dsa::error);
  CHECK_THROWS_WITH_AS(pack({3, 1, 2, 3}),
                       doctest::Contains("dsa::kv_cache_fp8_pack: slots(3) = 3; expected distinct slots (token 0 writes the same row)"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(pack({1, 2, 3}), doctest::Contains("dsa::kv_cache_fp8_pack: slots.extent(0) = 3; expected 4"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(dsa::kv_cache_fp8_pack(dsa::cpu, kvv, dsa::make_view(cache.data(), {3, 656})),
                       doctest::Contains("dsa::kv_cache_fp8_pack: cache.extent(0) = 3; expected >= 4"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::kv_cache_fp8_pack(dsa::cpu, dsa::make_view(kv.data(), {4, 575}), cv),
                       doctest::Contains("dsa::kv_cache_fp8_pack: kv.extent(1) = 575; expected 576"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::kv_cache_fp8_pack(dsa::cpu, kvv, dsa::make_view(cache.data(), {10, 655})),
                       doctest::Contains("dsa::kv_cache_fp8_pack: cache.extent(1) = 655; expected 656"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::kv_cache_fp8_pack(dsa::cpu, kvv, dsa::tensor_view<std::uint8_t, 2>(cache.data(), {10, 656}, {100, 1})),
                       doctest::Contains("dsa::kv_cache_fp8_pack: cache.stride(0) = 100"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::kv_cache_fp8_pack(dsa::cpu, dsa::tensor_view<bf16, 2>(kv.data(), {2, 576}, {1152, 2}), cv),
                       doctest::Contains("dsa::kv_cache_fp8_pack: kv.stride(1) = 2; expected 1"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::kv_cache_fp8_pack(dsa::cpu, dsa::tensor_view<bf16, 2>(nullptr, {4, 576}, {576, 1}), cv),
                       doctest::Contains("dsa::kv_cache_fp8_pack: kv.data = null"), dsa::error);

  CHECK_THROWS_WITH_AS(dsa::kv_cache_fp8_unpack(dsa::cpu, cv, kvv),
                       doctest::Contains("dsa::kv_cache_fp8_unpack: kv.extent(0) = 4; expected 10"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::kv_cache_fp8_unpack(dsa::cpu, dsa::make_view(cache.data(), {4, 600}), kvv),
                       doctest::Contains("dsa::kv_cache_fp8_unpack: cache.extent(1) = 600; expected 656"), dsa::error);

  std::vector<fp8_e4m3> k(4 * 128);
  std::vector<float> ks(4);
  std::vector<std::uint8_t> ic(10 * 132);
  auto kv2 = dsa::make_view(k.data(), {4, 128});
  CHECK_THROWS_WITH_AS(dsa::indexer_cache_pack(dsa::cpu, kv2, dsa::make_view(ks.data(), {3}), dsa::make_view(ic.data(), {10, 132})),
                       doctest::Contains("dsa::indexer_cache_pack: k_scale.extent(0) = 3; expected 4"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::indexer_cache_pack(dsa::cpu, dsa::make_view(k.data(), {2, 256}), dsa::make_view(ks.data(), {2}),
                                               dsa::make_view(ic.data(), {10, 132})),
                       doctest::Contains("dsa::indexer_cache_pack: k.extent(1) = 256; expected 128"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::indexer_cache_pack(dsa::cpu, kv2, dsa::make_view(ks.data(), {4}), dsa::make_view(ic.data(), {10, 131})),
                       doctest::Contains("dsa::indexer_cache_pack: cache.extent(1) = 131; expected 132"), dsa::error);
  const std::vector<std::int32_t> bad = {0, 1, 2, 12};
  CHECK_THROWS_WITH_AS(dsa::indexer_cache_pack(dsa::cpu, kv2, dsa::make_view(ks.data(), {4}), dsa::make_view(ic.data(), {10, 132}),
                                               dsa::make_view(bad.data(), {4})),
                       doctest::Contains("dsa::indexer_cache_pack: slots(3) = 12; expected -1 (skip) or a cache row in [0, 10)"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(dsa::indexer_cache_unpack(dsa::cpu, dsa::make_view(ic.data(), {4, 132}), kv2, dsa::make_view(ks.data(), {3})),
                       doctest::Contains("dsa::indexer_cache_unpack: k_scale.extent(0) = 3; expected 4"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::indexer_cache_unpack(dsa::cpu, dsa::make_view(ic.data(), {4, 132}), kv2,
                                                 dsa::tensor_view<float, 1>(ks.data(), {4}, {0})),
                       doctest::Contains("dsa::indexer_cache_unpack: k_scale.stride(0) = 0; expected 1"), dsa::error);
  // Nothing was written by the rejected calls.
  for (auto b : ic) REQUIRE(b == 0);
}
