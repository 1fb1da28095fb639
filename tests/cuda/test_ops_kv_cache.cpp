// The KV-cache row codecs on the CUDA backend: FP8 MLA rows (656 bytes) and indexer key rows (132
// bytes) byte-identical to the CPU backend, with and without slot maps, strided tokens, special
// values; device-side slots outside the cache skip their token instead of writing out of bounds.
// Needs a GPU; skips cleanly without one (front-end checks: test_ops_frontend.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "cuda/cuda_test.hpp"
#include "cuda/op_test.hpp"
#include "dsa/cpu/kv_cache.hpp"
#include "dsa/cuda/ops.hpp"
#include "dsa/ops/kv_cache.hpp"
#include "support/random.hpp"

namespace {

using dsa::bf16;
using dsa::fp8_e4m3;
using dsa::index_t;

std::vector<bf16> kv_values(index_t tokens, index_t stride, std::uint64_t seed) {
  std::vector<float> v = dsa_test::normal(static_cast<std::size_t>(tokens * stride), seed, 3.0f);
  const std::vector<float> e = dsa_test::uniform(v.size(), seed + 1, -20.0f, 10.0f);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::ldexp(v[i], static_cast<int>(e[i]));
  // A NaN in one group, an infinity in another, an all-zero group.
  if (v.size() > 2 * 576) {
    v[3] = std::numeric_limits<float>::quiet_NaN();
    v[576 + 200] = -std::numeric_limits<float>::infinity();
    for (std::size_t i = 2 * 576 + 256; i < 2 * 576 + 384 && i < v.size(); ++i) v[i] = 0.0f;
  }
  return dsa_test::convert<bf16>(v);
}

// Packs `tokens` tokens into a cache of `rows` rows (pre-filled with a pattern) through `slots`
// (empty: identity) on both backends, and unpacks the whole cache on both.
void check_kv_fp8(index_t tokens, index_t kv_stride, index_t rows, const std::vector<std::int32_t>& slots,
                  std::uint64_t seed) {
  CAPTURE(tokens);
  CAPTURE(rows);
  CAPTURE(slots.size());
  const std::vector<bf16> kv = kv_values(tokens, kv_stride, seed);
  std::vector<std::uint8_t> cache(static_cast<std::size_t>(rows * 656));
  for (std::size_t i = 0; i < cache.size(); ++i) cache[i] = static_cast<std::uint8_t>(i * 7 + 3);
  const std::vector<std::uint8_t> initial = cache;
  const dsa::host_view<const bf16, 2> hkv(kv.data(), {tokens, 576}, {kv_stride, 1});
  const dsa::host_view<const std::int32_t, 1> hslots =
      slots.empty() ? dsa::host_view<const std::int32_t, 1>{} : dsa::make_view(slots.data(), {tokens});
  dsa::kv_cache_fp8_pack(dsa::cpu, hkv, dsa::make_view(cache.data(), {rows, 656}), hslots);
  std::vector<bf16> back(static_cast<std::size_t>(rows * 576));
  dsa::kv_cache_fp8_unpack(dsa::cpu, dsa::make_view(std::as_const(cache).data(), {rows, 656}),
                           dsa::make_view(back.data(), {rows, 576}));

  dsa_test::test_stream stream;
  auto dkv = dsa_test::upload(kv, stream.get());
  auto dcache = dsa_test::upload(initial, stream.get());
  auto dslots = dsa_test::upload(slots, stream.get());
  const dsa::device_view<const std::int32_t, 1> vslots =
      slots.empty() ? dsa::device_view<const std::int32_t, 1>{} : std::as_const(dslots).view({tokens});
  dsa::kv_cache_fp8_pack(stream.backend(), dsa::device_view<const bf16, 2>(dkv.data(), {tokens, 576}, {kv_stride, 1}),
                         dcache.view({rows, 656}), vslots);
  dsa::device_buffer<bf16> dback(rows * 576, stream.get());
  dsa::kv_cache_fp8_unpack(stream.backend(), dcache.view({rows, 656}), dback.view({rows, 576}));
  dsa_test::check_bits_equal("cache", dsa_test::download(dcache, stream.get()), cache);
  dsa_test::check_bits_equal("kv", dsa_test::download(dback, stream.get()), back);
}

void check_indexer_cache(index_t tokens, index_t rows, const std::vector<std::int32_t>& slots, std::uint64_t seed) {
  CAPTURE(tokens);
  CAPTURE(rows);
  const std::vector<fp8_e4m3> k = dsa_test::convert<fp8_e4m3>(dsa_test::normal(static_cast<std::size_t>(tokens * 128), seed, 50.0f));
  std::vector<float> scale = dsa_test::uniform(static_cast<std::size_t>(tokens), seed + 1, 0.0f, 1.0f);
  if (!scale.empty()) scale[0] = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::uint8_t> cache(static_cast<std::size_t>(rows * 132), 0xA5);
  const std::vector<std::uint8_t> initial = cache;
  const dsa::host_view<const std::int32_t, 1> hslots =
      slots.empty() ? dsa::host_view<const std::int32_t, 1>{} : dsa::make_view(slots.data(), {tokens});
  dsa::indexer_cache_pack(dsa::cpu, dsa::make_view(k.data(), {tokens, 128}), dsa::make_view(scale.data(), {tokens}),
                          dsa::make_view(cache.data(), {rows, 132}), hslots);
  std::vector<fp8_e4m3> k_back(static_cast<std::size_t>(rows * 128));
  std::vector<float> s_back(static_cast<std::size_t>(rows));
  dsa::indexer_cache_unpack(dsa::cpu, dsa::make_view(std::as_const(cache).data(), {rows, 132}),
                            dsa::make_view(k_back.data(), {rows, 128}), dsa::make_view(s_back.data(), {rows}));

  dsa_test::test_stream stream;
  auto dk = dsa_test::upload(k, stream.get());
  auto ds = dsa_test::upload(scale, stream.get());
  auto dcache = dsa_test::upload(initial, stream.get());
  auto dslots = dsa_test::upload(slots, stream.get());
  const dsa::device_view<const std::int32_t, 1> vslots =
      slots.empty() ? dsa::device_view<const std::int32_t, 1>{} : std::as_const(dslots).view({tokens});
  dsa::indexer_cache_pack(stream.backend(), dk.view({tokens, 128}), ds.view({tokens}), dcache.view({rows, 132}),
                          vslots);
  dsa::device_buffer<fp8_e4m3> dk_back(rows * 128, stream.get());
  dsa::device_buffer<float> ds_back(rows, stream.get());
  dsa::indexer_cache_unpack(stream.backend(), dcache.view({rows, 132}), dk_back.view({rows, 128}),
                            ds_back.view({rows}));
  dsa_test::check_bits_equal("cache", dsa_test::download(dcache, stream.get()), cache);
  dsa_test::check_bits_equal("k", dsa_test::download(dk_back, stream.get()), k_back);
  dsa_test::check_bits_equal("k_scale", dsa_test::download(ds_back, stream.get()), s_back);
}

}  // namespace

TEST_CASE("cuda kv_cache_fp8_pack / unpack: byte-identical to the CPU") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  check_kv_fp8(1, 576, 1, {}, 1);
  check_kv_fp8(37, 576, 40, {}, 2);
  check_kv_fp8(5, 600, 8, {}, 3);                              // strided tokens
  check_kv_fp8(6, 576, 10, {9, -1, 0, 4, -1, 7}, 4);           // scattered, with skips
  check_kv_fp8(2048, 576, 2048, {}, 5);                        // many blocks
}

TEST_CASE("cuda indexer_cache_pack / unpack: byte-identical to the CPU") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  check_indexer_cache(1, 1, {}, 10);
  check_indexer_cache(300, 300, {}, 11);
  check_indexer_cache(5, 9, {8, 0, -1, 3, 4}, 12);
}

TEST_CASE("cuda cache packs: device-side slots outside the cache skip their token") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  // The front-end cannot read device slots: 5, -7 and INT32_MAX must not write outside 4 rows.
  const index_t tokens = 4, rows = 4;
  const std::vector<std::int32_t> slots = {5, 1, -7, std::numeric_limits<std::int32_t>::max()};
  const std::vector<bf16> kv = kv_values(tokens, 576, 20);
  dsa_test::test_stream stream;
  auto dkv = dsa_test::upload(kv, stream.get());
  // One guard row either side of the cache: untouched afterwards.
  std::vector<std::uint8_t> padded(static_cast<std::size_t>((rows + 2) * 656), 0x5A);
  auto dpadded = dsa_test::upload(padded, stream.get());
  auto dslots = dsa_test::upload(slots, stream.get());
  const dsa::device_view<std::uint8_t, 2> cache(dpadded.data() + 656, {rows, 656});
  dsa::kv_cache_fp8_pack(stream.backend(), dkv.view({tokens, 576}), cache, dslots.view({tokens}));
  const std::vector<std::uint8_t> after = dsa_test::download(dpadded, stream.get());
  std::vector<std::uint8_t> expected = padded;
  dsa::kv_fp8_row_encode(kv.data() + 576, expected.data() + 2 * 656);  // token 1 -> row 1
  dsa_test::check_bits_equal("cache and guard rows", after, expected);
}
