// Which instructions a translation unit may use: the one place where the CPU code asks the
// compiler about its target. Every CPU kernel chooses its SIMD path with these macros, never with
// the compiler's own (__AVX512F__, __AVX2__, ...), so that one build option reaches every kernel
// the same way and a reader finds every ISA condition here.
//
// Each DSA_CPU_HAS_<X> is 1 or 0, to be tested with #if. They follow the x86-64 psABI levels the
// build presets use (baseline, -march=x86-64-v3, -march=x86-64-v4 -mavx512bf16, -march=native):
//   DSA_CPU_HAS_SSE2        SSE2 (every x86-64): _mm_sfence, the streaming stores.
//   DSA_CPU_HAS_AVX         256-bit float vectors: the width of the GCC vector types (arch/vec.hpp)
//                           and of the register blocking chosen for them.
//   DSA_CPU_HAS_AVX2        256-bit integer operations: the AVX2 e4m3 decoders of fp8_linear.
//   DSA_CPU_HAS_FMA         FMA3, the VEX fused multiply-adds (_mm256_fmadd_ps).
//   DSA_CPU_HAS_F16C        half-precision conversions (part of x86-64-v3; no kernel needs it).
//   DSA_CPU_HAS_BMI2        PDEP/PEXT (top-k's candidate compaction).
//   DSA_CPU_HAS_AVX512      AVX-512 F and BW together: 512-bit registers with byte and word
//                           operations. Every AVX-512 core since Skylake-SP has both (x86-64-v4
//                           adds CD, DQ and VL, which no kernel needs); a target with F but not BW
//                           (Knights Landing) takes the AVX2 paths.
//   DSA_CPU_HAS_AVX512BF16  AVX512-BF16 (VCVTNE2PS2BF16) on top of DSA_CPU_HAS_AVX512, and DQ,
//                           whose VFPCLASSPS the bf16 narrowing needs next to it
//                           (arch/avx512_io.hpp).
//   DSA_CPU_HAS_NEON        Advanced SIMD on aarch64 (the GCC vector types use it; no intrinsics).
//   DSA_CPU_HAS_SCALAR_FMA  std::fma on float is one instruction, and g++ may contract a * b + c
//                           into one: FMA3, or what the compiler reports as a fast fmaf
//                           (__FP_FAST_FMAF: FMA4, AVX-512F's EVEX forms), or aarch64.
// DSA_CPU_X86 and DSA_CPU_AARCH64 name the architecture.
//
// Results do not depend on these (every path computes the same bits, docs/decisions.md); only
// the speed does. The macros are evaluated per translation unit, so a program whose units are
// compiled for different targets must keep the CPU kernels of each in its own binary (the
// AVX-512 test variants compile their own ops: tests/CMakeLists.txt).
//
// Also included by numerics/fp32_ops.hpp (the host side of mul_rn), so it must compile with
// nvcc: preprocessor tests and constexpr functions only.
#pragma once

#include <string_view>

#include "dsa/core/config.hpp"

#if defined(__x86_64__) || defined(__i386__)
#define DSA_CPU_X86 1
#else
#define DSA_CPU_X86 0
#endif
#if defined(__aarch64__)
#define DSA_CPU_AARCH64 1
#else
#define DSA_CPU_AARCH64 0
#endif

#if defined(__SSE2__)
#define DSA_CPU_HAS_SSE2 1
#else
#define DSA_CPU_HAS_SSE2 0
#endif
#if defined(__AVX__)
#define DSA_CPU_HAS_AVX 1
#else
#define DSA_CPU_HAS_AVX 0
#endif
#if defined(__AVX2__)
#define DSA_CPU_HAS_AVX2 1
#else
#define DSA_CPU_HAS_AVX2 0
#endif
#if defined(__FMA__)
#define DSA_CPU_HAS_FMA 1
#else
#define DSA_CPU_HAS_FMA 0
#endif
#if defined(__F16C__)
#define DSA_CPU_HAS_F16C 1
#else
#define DSA_CPU_HAS_F16C 0
#endif
#if defined(__BMI2__)
#define DSA_CPU_HAS_BMI2 1
#else
#define DSA_CPU_HAS_BMI2 0
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define DSA_CPU_HAS_AVX512 1
#else
#define DSA_CPU_HAS_AVX512 0
#endif
#if DSA_CPU_HAS_AVX512 && defined(__AVX512BF16__) && defined(__AVX512DQ__)
#define DSA_CPU_HAS_AVX512BF16 1
#else
#define DSA_CPU_HAS_AVX512BF16 0
#endif
#if defined(__ARM_NEON)
#define DSA_CPU_HAS_NEON 1
#else
#define DSA_CPU_HAS_NEON 0
#endif
#if defined(__FMA__) || defined(__FP_FAST_FMAF) || defined(__aarch64__)
#define DSA_CPU_HAS_SCALAR_FMA 1
#else
#define DSA_CPU_HAS_SCALAR_FMA 0
#endif

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

/// The instruction-set levels the CPU kernels are built for: the x86-64 psABI levels (v3 as the
/// kernels use it: AVX2, FMA, F16C and BMI2; v4: DSA_CPU_HAS_AVX512 on top of v3), aarch64 with
/// NEON, or none of these (portable C++ and GCC vectors of the target's width).
enum class isa_level { portable, x86_64, x86_64_v2, x86_64_v3, x86_64_v4, x86_64_v4_bf16, aarch64_neon };

/// The level this translation unit was compiled for. Static: each unit answers for itself, so
/// units built for different levels can be linked into one program (a tool printing it reports
/// the flags its own file was compiled with).
static constexpr isa_level compiled_isa_level() noexcept {
#if DSA_CPU_X86
#if defined(__SSE4_2__) && defined(__POPCNT__)
  constexpr bool v2 = DSA_CPU_HAS_SSE2;
#else
  constexpr bool v2 = false;
#endif
  constexpr bool v3 = v2 && DSA_CPU_HAS_AVX2 && DSA_CPU_HAS_FMA && DSA_CPU_HAS_F16C && DSA_CPU_HAS_BMI2;
  constexpr bool v4 = v3 && DSA_CPU_HAS_AVX512;
  if (v4 && DSA_CPU_HAS_AVX512BF16) return isa_level::x86_64_v4_bf16;
  if (v4) return isa_level::x86_64_v4;
  if (v3) return isa_level::x86_64_v3;
  if (v2) return isa_level::x86_64_v2;
  return isa_level::x86_64;
#elif DSA_CPU_AARCH64 && DSA_CPU_HAS_NEON
  return isa_level::aarch64_neon;
#else
  return isa_level::portable;
#endif
}

/// A level's name, as -march spells it where it has one.
constexpr std::string_view isa_level_name(isa_level level) noexcept {
  switch (level) {
    case isa_level::x86_64: return "x86-64";
    case isa_level::x86_64_v2: return "x86-64-v2";
    case isa_level::x86_64_v3: return "x86-64-v3";
    case isa_level::x86_64_v4: return "x86-64-v4";
    case isa_level::x86_64_v4_bf16: return "x86-64-v4+avx512bf16";
    case isa_level::aarch64_neon: return "aarch64+neon";
    case isa_level::portable: break;
  }
  return "portable";
}

/// The level of the CPU op instances this program calls (dsa/core/op_instances.hpp): defined
/// beside them (instances/cpu_isa.cpp), in dsa_cpu_ops and in each per-level libdsa_cpu.so that
/// dsa's shipped programs load (cmake/dsaCpuDispatch.cmake), so it answers for the library the
/// loader chose. Only for programs that link one of those; header-only users have
/// compiled_isa_level().
isa_level instances_isa_level() noexcept;

/// The DSA_CPU_HAS_ macros that are 1 in this translation unit, lower case, space-separated
/// ("sse2 avx avx2 fma f16c bmi2 avx512 avx512bf16 scalar-fma"): what a level does not say, such
/// as -mavx2 without -mfma. Static, as compiled_isa_level.
static constexpr std::string_view compiled_isa_features() noexcept {
  constexpr std::string_view list = ""
#if DSA_CPU_HAS_SSE2
                                     " sse2"
#endif
#if DSA_CPU_HAS_AVX
                                     " avx"
#endif
#if DSA_CPU_HAS_AVX2
                                     " avx2"
#endif
#if DSA_CPU_HAS_FMA
                                     " fma"
#endif
#if DSA_CPU_HAS_F16C
                                     " f16c"
#endif
#if DSA_CPU_HAS_BMI2
                                     " bmi2"
#endif
#if DSA_CPU_HAS_AVX512
                                     " avx512"
#endif
#if DSA_CPU_HAS_AVX512BF16
                                     " avx512bf16"
#endif
#if DSA_CPU_HAS_NEON
                                     " neon"
#endif
#if DSA_CPU_HAS_SCALAR_FMA
                                     " scalar-fma"
#endif
      ;
  return list.empty() ? list : list.substr(1);
}

}  // namespace cpu_detail
DSA_NAMESPACE_END
