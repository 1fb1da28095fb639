// cpu/arch/streaming_stores.hpp: when kernels write around the caches (the bits are tested with the
// kernels that stream, e.g. tests/ops/test_hadamard.cpp).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <limits>

#include "dsa/core/backend.hpp"
#include "dsa/cpu/arch/streaming_stores.hpp"

using dsa::cpu_detail::parse_cache_size;

TEST_CASE("cache sizes parse the way Linux writes them in sysfs") {
  CHECK(parse_cache_size("32768K") == std::size_t{32} << 20);
  CHECK(parse_cache_size("32768K\n") == std::size_t{32} << 20);
  CHECK(parse_cache_size("1M") == std::size_t{1} << 20);
  CHECK(parse_cache_size("2G") == std::size_t{2} << 30);
  CHECK(parse_cache_size("512") == 512);
  CHECK(parse_cache_size("") == 0);
  CHECK(parse_cache_size("K") == 0);
  CHECK(parse_cache_size("12X") == 0);
  CHECK(parse_cache_size("-1K") == 0);
  CHECK(parse_cache_size("99999999999999K") == 0);  // too many digits to be a cache
}

TEST_CASE("the default threshold is the last-level cache, and the backend can move it") {
  const std::size_t llc = dsa::cpu_detail::last_level_cache_bytes();
  CHECK(llc >= std::size_t{64} << 10);  // no x86 or Arm server has a smaller last level
  CHECK(llc == dsa::cpu_detail::last_level_cache_bytes());

  const dsa::cpu_backend automatic{};
  CHECK_FALSE(dsa::cpu_detail::streaming_stores(automatic, llc - 1));
  CHECK(dsa::cpu_detail::streaming_stores(automatic, llc));

  const dsa::cpu_backend at_one_mb{1, std::size_t{1} << 20};
  CHECK_FALSE(dsa::cpu_detail::streaming_stores(at_one_mb, (std::size_t{1} << 20) - 1));
  CHECK(dsa::cpu_detail::streaming_stores(at_one_mb, std::size_t{1} << 20));

  const dsa::cpu_backend never{1, std::numeric_limits<std::size_t>::max()};
  CHECK_FALSE(dsa::cpu_detail::streaming_stores(never, std::numeric_limits<std::size_t>::max() - 1));
}

TEST_CASE("only 64-byte boundaries start a run of streaming stores") {
  alignas(64) unsigned char line[128] = {};
  CHECK(dsa::cpu_detail::streaming_aligned(line));
  CHECK(dsa::cpu_detail::streaming_aligned(line + 64));
  for (int offset : {1, 2, 16, 32, 63}) CHECK_FALSE(dsa::cpu_detail::streaming_aligned(line + offset));
}
