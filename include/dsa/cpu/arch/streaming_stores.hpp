// When a CPU kernel writes its output with non-temporal (streaming) stores.
//
// An ordinary store to a line that is not cached first reads the line from memory (a read for
// ownership), so writing an output that does not fit in the caches costs its size twice in
// memory traffic. A streaming store writes whole lines around the caches and skips that read,
// the same trade glibc's memcpy makes above its non-temporal threshold. Below the last-level
// cache size ordinary stores win: the output stays cached for whatever reads it next.
// dsa::cpu_backend::streaming_store_bytes moves the threshold; kernels that support streaming
// (Hadamard for now) also need 64-byte-aligned output rows, and fence before they return.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/cpu/arch/isa.hpp"

#if __has_include(<unistd.h>)
#include <unistd.h>
#endif
#if DSA_CPU_HAS_SSE2
#include <immintrin.h>
#endif

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

/// A cache size as Linux writes it in /sys/devices/system/cpu/cpu0/cache/index*/size ("32768K",
/// "1M", "512"), in bytes; 0 when it is not one.
inline std::size_t parse_cache_size(const std::string& text) {
  std::size_t value = 0, digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
    value = value * 10 + static_cast<std::size_t>(text[digits] - '0');
    ++digits;
  }
  if (digits == 0 || digits > 9) return 0;  // more is no cache size (and would overflow)
  const std::string unit = text.substr(digits);
  if (unit.empty() || unit == "\n") return value;
  if (unit[0] == 'K') return value << 10;
  if (unit[0] == 'M') return value << 20;
  if (unit[0] == 'G') return value << 30;
  return 0;
}

/// The size of the largest cache level the first CPU reports, in bytes (read once). Linux's
/// /sys first: glibc's sysconf(_SC_LEVEL3_CACHE_SIZE) decodes CPUID itself and can be wrong
/// under a hypervisor (320 MB for the 32 MB L3 of the VM in docs/performance.md); then sysconf;
/// then 32 MB.
inline std::size_t last_level_cache_bytes() {
  static const std::size_t bytes = [] {
    int best_level = 0;
    std::size_t best = 0;
    for (int index = 0; index < 16; ++index) {
      const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
      std::ifstream level_file(dir + "level"), size_file(dir + "size");
      int level = 0;
      std::string size;
      if (!(level_file >> level) || !(size_file >> size)) continue;
      const std::size_t b = parse_cache_size(size);
      if (b != 0 && level >= best_level) best_level = level, best = b;
    }
    if (best != 0) return best;
#if defined(_SC_LEVEL3_CACHE_SIZE)
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0) return static_cast<std::size_t>(l3);
#endif
    return std::size_t{32} << 20;
  }();
  return bytes;
}

/// Whether an op writing `output_bytes` in all should stream them (see the top of this file).
inline bool streaming_stores(const cpu_backend& be, std::size_t output_bytes) {
  const std::size_t threshold = be.streaming_store_bytes != 0 ? be.streaming_store_bytes : last_level_cache_bytes();
  return output_bytes >= threshold;
}

/// Whether `p` may start a run of 64-byte streaming stores.
inline bool streaming_aligned(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 63) == 0; }

/// Orders this thread's streaming stores before its later stores (such as the thread pool's
/// "chunk done"): streaming stores are weakly ordered, so a kernel that used them calls this
/// before it returns.
inline void streaming_fence() {
#if DSA_CPU_HAS_SSE2
  _mm_sfence();
#endif
}

}  // namespace cpu_detail
DSA_NAMESPACE_END
