// Linked into the tests built for x86-64-v4 + AVX512-BF16 (tests/CMakeLists.txt) and compiled
// without those flags: on a CPU that lacks any of the instructions they may use, the executable
// exits with 77, which ctest reports as skipped, before any other static initializer can run
// one (constructor priority 101 runs ahead of every default-priority initializer).
#include <cstdio>
#include <cstdlib>

namespace {

__attribute__((constructor(101))) void require_avx512() {
  __builtin_cpu_init();
  const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2") &&
                  __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                  __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bf16");
  if (!ok) {
    std::fputs("skipped: this CPU lacks x86-64-v4 (AVX-512 F/BW/DQ/VL/CD) or AVX512-BF16\n", stderr);
    std::_Exit(77);
  }
}

}  // namespace
