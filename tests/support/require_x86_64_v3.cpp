// Linked into the tests built for x86-64-v3 (tests/CMakeLists.txt) and compiled without those
// flags: on a CPU without AVX2, FMA, BMI2 or F16C the executable exits with 77, which ctest
// reports as skipped, before any other static initializer can run one (constructor priority 101
// runs ahead of every default-priority initializer).
#include <cstdio>
#include <cstdlib>

namespace {

__attribute__((constructor(101))) void require_x86_64_v3() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("x86-64-v3")) {
    std::fputs("skipped: this CPU lacks x86-64-v3 (AVX2, FMA, BMI2, F16C, ...)\n", stderr);
    std::_Exit(77);
  }
}

}  // namespace
