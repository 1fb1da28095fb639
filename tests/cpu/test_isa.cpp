// cpu/arch/isa.hpp: every DSA_CPU_HAS_ macro is the compiler's own test it stands for (the CPU
// kernels test nothing else, so this pins which code each target compiles), the level a
// translation unit reports follows from them, and the vector width and packed-weight groups
// agree with it. Built portable, and for x86-64-v4 + AVX512-BF16 (dsa_test_cpu_isa_avx512).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <string_view>

#include "dsa/cpu/arch/isa.hpp"
#include "dsa/cpu/arch/vec.hpp"
#include "dsa/cpu/packed_fp8_weight.hpp"

namespace {

using dsa::cpu_detail::compiled_isa_features;
using dsa::cpu_detail::compiled_isa_level;
using dsa::cpu_detail::isa_level;
using dsa::cpu_detail::isa_level_name;

#if defined(__AVX512F__) && defined(__AVX512BW__)
constexpr int compiler_avx512 = 1;
#else
constexpr int compiler_avx512 = 0;
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__) && defined(__AVX512DQ__)
constexpr int compiler_avx512bf16 = 1;
#else
constexpr int compiler_avx512bf16 = 0;
#endif
#if defined(__AVX2__)
constexpr int compiler_avx2 = 1;
#else
constexpr int compiler_avx2 = 0;
#endif
#if defined(__AVX__)
constexpr int compiler_avx = 1;
#else
constexpr int compiler_avx = 0;
#endif
#if defined(__FMA__)
constexpr int compiler_fma = 1;
#else
constexpr int compiler_fma = 0;
#endif
#if defined(__F16C__)
constexpr int compiler_f16c = 1;
#else
constexpr int compiler_f16c = 0;
#endif
#if defined(__BMI2__)
constexpr int compiler_bmi2 = 1;
#else
constexpr int compiler_bmi2 = 0;
#endif
#if defined(__SSE2__)
constexpr int compiler_sse2 = 1;
#else
constexpr int compiler_sse2 = 0;
#endif
#if defined(__FMA__) || defined(__FP_FAST_FMAF) || defined(__aarch64__)
constexpr int compiler_scalar_fma = 1;
#else
constexpr int compiler_scalar_fma = 0;
#endif

// Whether name is one of the space-separated words of compiled_isa_features().
bool has_feature(std::string_view name) {
  std::string_view rest = compiled_isa_features();
  while (!rest.empty()) {
    const std::size_t end = std::min(rest.find(' '), rest.size());
    if (rest.substr(0, end) == name) return true;
    rest.remove_prefix(std::min(end + 1, rest.size()));
  }
  return false;
}

}  // namespace

TEST_CASE("each DSA_CPU_HAS_ macro is the compiler's test it stands for") {
  CHECK(DSA_CPU_HAS_AVX512 == compiler_avx512);
  CHECK(DSA_CPU_HAS_AVX512BF16 == compiler_avx512bf16);
  CHECK(DSA_CPU_HAS_AVX2 == compiler_avx2);
  CHECK(DSA_CPU_HAS_AVX == compiler_avx);
  CHECK(DSA_CPU_HAS_FMA == compiler_fma);
  CHECK(DSA_CPU_HAS_F16C == compiler_f16c);
  CHECK(DSA_CPU_HAS_BMI2 == compiler_bmi2);
  CHECK(DSA_CPU_HAS_SSE2 == compiler_sse2);
  CHECK(DSA_CPU_HAS_SCALAR_FMA == compiler_scalar_fma);
  // ...and the feature list names exactly those that are 1.
  CHECK(has_feature("avx512") == (DSA_CPU_HAS_AVX512 == 1));
  CHECK(has_feature("avx512bf16") == (DSA_CPU_HAS_AVX512BF16 == 1));
  CHECK(has_feature("avx2") == (DSA_CPU_HAS_AVX2 == 1));
  CHECK(has_feature("avx") == (DSA_CPU_HAS_AVX == 1));
  CHECK(has_feature("fma") == (DSA_CPU_HAS_FMA == 1));
  CHECK(has_feature("bmi2") == (DSA_CPU_HAS_BMI2 == 1));
  CHECK(has_feature("sse2") == (DSA_CPU_HAS_SSE2 == 1));
  CHECK(has_feature("scalar-fma") == (DSA_CPU_HAS_SCALAR_FMA == 1));
  const std::string_view list = compiled_isa_features();
  CHECK((list.empty() || (list.front() != ' ' && list.back() != ' ')));
}

TEST_CASE("the compiled level follows from the macros") {
  constexpr isa_level level = compiled_isa_level();
#if DSA_CPU_X86
  const bool v3 = DSA_CPU_HAS_AVX2 && DSA_CPU_HAS_FMA && DSA_CPU_HAS_F16C && DSA_CPU_HAS_BMI2;
  if (level == isa_level::x86_64_v4_bf16) CHECK(DSA_CPU_HAS_AVX512BF16 == 1);
  if (level == isa_level::x86_64_v4 || level == isa_level::x86_64_v4_bf16) CHECK((v3 && DSA_CPU_HAS_AVX512));
  if (level == isa_level::x86_64_v3) CHECK((v3 && !DSA_CPU_HAS_AVX512));
  if (level == isa_level::x86_64_v2 || level == isa_level::x86_64) CHECK(!v3);
  CHECK(level != isa_level::portable);
  CHECK(level != isa_level::aarch64_neon);
#if defined(__AVX512BF16__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && defined(__AVX2__) && \
    defined(__FMA__) && defined(__F16C__) && defined(__BMI2__)
  // The AVX-512 test variants (-march=x86-64-v4 -mavx512bf16) and -march=native on this host.
  CHECK(level == isa_level::x86_64_v4_bf16);
  CHECK(isa_level_name(level) == "x86-64-v4+avx512bf16");
#endif
#if !defined(__AVX__)
  // The portable build of x86-64.
  CHECK((level == isa_level::x86_64 || level == isa_level::x86_64_v2));
#endif
#elif DSA_CPU_AARCH64
  CHECK(level == isa_level::aarch64_neon);
#else
  CHECK(level == isa_level::portable);
#endif
}

TEST_CASE("every level has a name of its own") {
  const isa_level all[] = {isa_level::portable,  isa_level::x86_64,         isa_level::x86_64_v2,   isa_level::x86_64_v3,
                           isa_level::x86_64_v4, isa_level::x86_64_v4_bf16, isa_level::aarch64_neon};
  for (isa_level a : all) {
    CHECK(!isa_level_name(a).empty());
    for (isa_level b : all) {
      if (a != b) CHECK(isa_level_name(a) != isa_level_name(b));
    }
  }
  CHECK(isa_level_name(isa_level::x86_64_v3) == "x86-64-v3");
}

TEST_CASE("the vector width and the packed weight's groups follow the level") {
  CHECK(dsa::cpu_detail::simd::vec_bytes == (DSA_CPU_HAS_AVX512 ? 64 : DSA_CPU_HAS_AVX ? 32 : 16));
  CHECK(dsa::packed_fp8_group_rows == dsa::cpu_detail::simd::lanes<float>);
  // The attention and indexer tiles' 16-lane units are whole numbers of these vectors.
  CHECK(dsa::cpu_detail::simd::vectors_per_tile == (DSA_CPU_HAS_AVX512 ? 1 : DSA_CPU_HAS_AVX ? 2 : 4));
}
