// The shipped programs' CPU kernels chosen at load time (cmake/dsaCpuDispatch.cmake): dsa_run runs
// the libdsa_cpu.so of the best x86-64 level this CPU has, says which, and every level the CPU
// can run gives the golden tokens. GLIBC_TUNABLES=glibc.cpu.hwcaps=-<feature> hides a feature from
// the loader's choice, which is how one machine runs the lower levels' libraries.
#include <doctest/doctest.h>

#if !defined(DSA_RUN_EXE)

TEST_CASE("ISA dispatch (skipped: built without DSA_BUILD_TOOLS)") {
  MESSAGE("dsa_run is not built in this configuration; its ISA dispatch test is skipped");
}

#else

#include <cstdlib>
#include <string>
#include <vector>

#include "support/checkpoint_edit.hpp"
#include "support/child_process.hpp"

namespace {

// The golden prompt and DeepSeek's reference tokens (tools/CMakeLists.txt, dsa_run_tiny_golden).
const char* const golden_prompt =
    "511 466 496 272 227 33 397 303 317 232 256 309 298 275 396 114 421 193 335 275 206 278 118 324 450 222 466 "
    "222 258 184 224 266 309 41 14 59 120 334 373 84 312 440 43 146 409 256 35 315 194 316 9 282 15 394 386 146 "
    "278 172 217 90 315 201 430 239 232 140 390 389 498 480 257 314 365 422 483 368 185 349 120 385";
const char* const golden_ids = "generated ids: 328 166 246 89 428 79\n";

#if defined(DSA_CPU_DISPATCH_BUILD)
// The x86-64 levels the loader knows, in the order dsa_cpu_dispatch builds them.
enum class level { x86_64, v3, v4 };

const char* name(level l) {
  switch (l) {
    case level::v4: return "x86-64-v4";
    case level::v3: return "x86-64-v3";
    case level::x86_64: break;
  }
  return "x86-64";
}

// What this CPU supports, asked independently of glibc (the compiler's cpuid tables).
level cpu_level() {
  __builtin_cpu_init();
#if defined(__clang__)
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2") &&
                  __builtin_cpu_supports("f16c") && __builtin_cpu_supports("movbe");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
#else
  const bool v3 = __builtin_cpu_supports("x86-64-v3");
  const bool v4 = __builtin_cpu_supports("x86-64-v4");
#endif
  return v4 ? level::v4 : v3 ? level::v3 : level::x86_64;
}
#endif

// dsa_run on the golden prompt with GLIBC_TUNABLES=glibc.cpu.hwcaps=<mask> (none if empty).
dsa_test::tool_result run_golden(const dsa_test::temp_dir& dir, const std::string& mask) {
  if (mask.empty()) {
    unsetenv("GLIBC_TUNABLES");
  } else {
    setenv("GLIBC_TUNABLES", ("glibc.cpu.hwcaps=" + mask).c_str(), 1);
  }
  auto r = dsa_test::run_tool(DSA_RUN_EXE,
                              {"--model", DSA_TEST_DATA_DIR "/tiny-dsv32", "--prompt-ids", golden_prompt,
                               "--max-new-tokens", "6", "--threads", "2", "--quiet"},
                              dir.path);
  unsetenv("GLIBC_TUNABLES");
  return r;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

#if defined(DSA_CPU_DISPATCH_BUILD)
TEST_CASE("dsa_run loads the CPU kernels of the best level the CPU has; each level gives the golden tokens") {
  dsa_test::temp_dir dir("dsa_test_isa_dispatch");
  const level best = cpu_level();
  struct masked {
    const char* mask;
    level at_most;
  };
  // -AVX512F leaves at most x86-64-v3; -AVX2 at most x86-64 (no x86-64-v2 library is built).
  for (const masked m : {masked{"", level::v4}, masked{"-AVX512F", level::v3}, masked{"-AVX2", level::x86_64}}) {
    CAPTURE(m.mask);
    const auto r = run_golden(dir, m.mask);
    CAPTURE(r.output);
    REQUIRE(r.exit_code == 0);
    const level expected = best < m.at_most ? best : m.at_most;
    CHECK(contains(r.output, std::string("; cpu kernels: ") + name(expected) + ";"));
    CHECK(contains(r.output, golden_ids));
  }
}
#else
TEST_CASE("dsa_run says which CPU kernels it runs (static instances: DSA_CPU_DISPATCH is off)") {
  dsa_test::temp_dir dir("dsa_test_isa_dispatch");
  const auto r = run_golden(dir, "");
  CAPTURE(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(contains(r.output, "; cpu kernels: "));
  CHECK(contains(r.output, golden_ids));
}
#endif

#endif
