// The lightning indexer's shared arithmetic (dsa/numerics/lightning_indexer.hpp) as the CUDA
// kernels use it: the guarded page-table lookup, the head term, and the kernels' dot product
// (sequential fmaf over the columns, padded with +0 * +0 to a multiple of the 32-column staging
// round), replayed on the host against the CPU backend's lightning_indexer_dot.
// Mirrors: lightning_indexer_kernel.cuh dot_tile (kernel_dot below) and the
// paged scores kernel's lightning_indexer_paged_slot lookup.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dsa/core/types.hpp"
#include "dsa/numerics/lightning_indexer.hpp"
#include "dsa/numerics/paging.hpp"

namespace {

using dsa::index_t;

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The CUDA kernels' dot: chunks of 32 columns, columns past d staged as +0 on both sides, one
// fused multiply-add per column in ascending order.
float kernel_dot(const dsa::fp8_e4m3* q, const dsa::fp8_e4m3* k, index_t d) {
  float acc = 0.0f;
  const index_t padded = (d + 31) / 32 * 32;
  for (index_t i = 0; i < padded; ++i) {
    const float a = i < d ? q[i].to_float() : 0.0f;
    const float b = i < d ? k[i].to_float() : 0.0f;
    acc = std::fma(a, b, acc);
  }
  return acc;
}

}  // namespace

TEST_CASE("lightning_indexer_paged_slot follows valid entries like paged_cache_slot") {
  const std::vector<std::int32_t> table = {3, 0, 7, 2};
  for (const index_t bs : {index_t{1}, index_t{3}, index_t{64}}) {
    const index_t slots = 8 * bs;
    for (index_t p = 0; p < 4 * bs; ++p) {
      CAPTURE(p);
      CHECK(dsa::lightning_indexer_paged_slot(table.data(), 4, bs, p, slots) ==
            dsa::paged_cache_slot(table.data(), bs, p));
    }
  }
}

TEST_CASE("lightning_indexer_paged_slot gives -1 for every entry it must not follow") {
  const std::int32_t big = std::numeric_limits<std::int32_t>::max();
  const std::vector<std::int32_t> table = {-1, 5, 4, big, std::numeric_limits<std::int32_t>::min()};
  const index_t bs = 4, slots = 20;  // blocks 0 .. 4 exist
  for (index_t p = 0; p < 4; ++p) CHECK(dsa::lightning_indexer_paged_slot(table.data(), 5, bs, p, slots) == -1);
  for (index_t p = 4; p < 8; ++p) CHECK(dsa::lightning_indexer_paged_slot(table.data(), 5, bs, p, slots) == -1);  // block 5
  for (index_t p = 8; p < 12; ++p) {
    CHECK(dsa::lightning_indexer_paged_slot(table.data(), 5, bs, p, slots) == 16 + p - 8);  // the last block
  }
  for (index_t p = 12; p < 20; ++p) CHECK(dsa::lightning_indexer_paged_slot(table.data(), 5, bs, p, slots) == -1);
  // Past the table's row, and no cache at all.
  CHECK(dsa::lightning_indexer_paged_slot(table.data(), 5, bs, 20, slots) == -1);
  CHECK(dsa::lightning_indexer_paged_slot(table.data() + 1, 1, bs, 0, 0) == -1);
  // A huge block size with the largest entry: no overflow, just -1.
  const index_t huge = index_t{1} << 40;
  CHECK(dsa::lightning_indexer_paged_slot(table.data() + 3, 1, huge, 5, index_t{1} << 62) == -1);
  CHECK(dsa::lightning_indexer_paged_slot(table.data() + 3, 1, huge, 5, std::numeric_limits<index_t>::max()) == -1);
  CHECK(dsa::lightning_indexer_paged_slot(table.data() + 1, 1, huge, 5, std::numeric_limits<index_t>::max()) ==
        5 * huge + 5);
}

TEST_CASE("lightning_indexer_head_term is the rounded w * ReLU(dot), NaN kept") {
  CHECK(same_bits(dsa::lightning_indexer_head_term(0.5f, 3.0f), 1.5f));
  CHECK(same_bits(dsa::lightning_indexer_head_term(0.5f, -3.0f), 0.0f));
  CHECK(same_bits(dsa::lightning_indexer_head_term(-0.5f, -3.0f), -0.0f));
  CHECK(std::isnan(dsa::lightning_indexer_head_term(0.5f, std::nanf(""))));
  // Rounded once: (1 + 2^-23) * (1 + 2^-23) = 1 + 2^-22 + 2^-46 rounds to 1 + 2^-22.
  const float a = 1.0f + std::ldexp(1.0f, -23);
  CHECK(same_bits(dsa::lightning_indexer_head_term(a, a), 1.0f + std::ldexp(1.0f, -22)));
}

TEST_CASE("the kernels' padded fused dot equals lightning_indexer_dot bit for bit on e4m3 rows") {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> code(0, 255);
  for (const index_t d : {index_t{1}, index_t{16}, index_t{40}, index_t{128}, index_t{136}}) {
    CAPTURE(d);
    std::vector<dsa::fp8_e4m3> q(static_cast<std::size_t>(d)), k(static_cast<std::size_t>(d));
    int nan_rows = 0;
    for (int trial = 0; trial < 2000; ++trial) {
      for (auto& x : q) x = dsa::fp8_e4m3::from_bits(static_cast<std::uint8_t>(code(rng)));
      for (auto& x : k) x = dsa::fp8_e4m3::from_bits(static_cast<std::uint8_t>(code(rng)));
      if (trial % 2 == 0) {
        // Mostly without NaN codes (magnitude 0x7F), so that most sums are finite.
        for (auto& x : q) x.bits = (x.bits & 0x7F) == 0x7F ? static_cast<std::uint8_t>(x.bits ^ 1) : x.bits;
        for (auto& x : k) x.bits = (x.bits & 0x7F) == 0x7F ? static_cast<std::uint8_t>(x.bits ^ 1) : x.bits;
      }
      const float cpu = dsa::lightning_indexer_dot(q.data(), k.data(), d);
      const float dev = kernel_dot(q.data(), k.data(), d);
      if (std::isnan(cpu)) {
        ++nan_rows;
        CHECK(std::isnan(dev));
      } else {
        INFO("trial " << trial << ": " << cpu << " vs " << dev);
        CHECK(same_bits(cpu, dev));
      }
    }
    CHECK(nan_rows > 0);
  }
}
