// The SIMD vocabulary of the CPU kernels: GCC/Clang vector-extension types, which the compiler
// lowers to zmm, ymm or xmm registers (or to scalars), so that one micro-kernel source serves
// every ISA (arch/isa.hpp), and the few helpers that move data in and out of them.
//
//   - vectors of the target's widest registers (vec_bytes: 64 with AVX-512, 32 with AVX, else 16):
//     vfloat, vdouble, vuint, and the half-width vfloat_half and vhalf; lanes<T> per vector.
//     fp8_linear's micro-kernels and the dense linear's GEMV are written in them.
//     The attention and indexer tiles (kernels/) are 16 lanes wide and take VPL / VPT of these
//     per unit: a 64-byte vector type wider than the target's registers made g++ 12 splat
//     scalars and fuse multiply-adds lane by lane.
//
// Vectors are loaded and stored with memcpy (no alignment assumed) and are never passed by value
// between functions that are not inlined: a vector wider than the target's registers has an
// ABI of its own.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/isa.hpp"

#if DSA_CPU_HAS_AVX
#include <immintrin.h>
#endif

DSA_NAMESPACE_BEGIN
namespace cpu_detail::simd {

// ---- the target's widest vectors ----------------------------------------------------------------

#if DSA_CPU_HAS_AVX512
inline constexpr int vec_bytes = 64;
#elif DSA_CPU_HAS_AVX
inline constexpr int vec_bytes = 32;
#else
inline constexpr int vec_bytes = 16;
#endif
typedef float vfloat __attribute__((vector_size(vec_bytes)));
typedef double vdouble __attribute__((vector_size(vec_bytes)));
typedef float vfloat_half __attribute__((vector_size(vec_bytes / 2)));
typedef std::uint32_t vuint __attribute__((vector_size(vec_bytes)));
typedef std::uint16_t vhalf __attribute__((vector_size(vec_bytes / 2)));

template <class T>
struct vec_of;
template <>
struct vec_of<float> {
  using type = vfloat;
};
template <>
struct vec_of<double> {
  using type = vdouble;
};
template <class T>
inline constexpr index_t lanes = vec_bytes / static_cast<index_t>(sizeof(T));

/// The T values of f as `lanes<float> / lanes<T>` T vectors (float: f itself; double: the low
/// half's lanes, then the high half's).
template <class T>
DSA_FORCEINLINE void to_lanes(vfloat f, typename vec_of<T>::type* out) {
  if constexpr (std::is_same_v<T, float>) {
    out[0] = f;
  } else {
#if DSA_CPU_HAS_AVX512
    const __m512 v = f;
    out[0] = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    out[1] = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
#elif DSA_CPU_HAS_AVX
    const __m256 v = f;
    out[0] = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    out[1] = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
#else
    const vfloat_half lo = __builtin_shufflevector(f, f, 0, 1);
    const vfloat_half hi = __builtin_shufflevector(f, f, 2, 3);
    out[0] = __builtin_convertvector(lo, vdouble);
    out[1] = __builtin_convertvector(hi, vdouble);
#endif
  }
}

/// lanes<float> consecutive values from p, widened to fp32 (bf16 exactly: its bits in the upper
/// half).
DSA_FORCEINLINE vfloat load_vec(const float* p) {
  vfloat v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
DSA_FORCEINLINE vfloat load_vec(const bf16* p) {
#if DSA_CPU_HAS_AVX512
  // One vpmovzxwd from memory and a shift: g++ 12 lowers the generic widening below, at this
  // width, to two half-width widenings, an extract and an insert (6 instructions, which made
  // the bf16 linear's 4 x 4 tile issue-bound at a fifth of the FMA peak).
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return reinterpret_cast<vfloat>(_mm512_slli_epi32(w, 16));
#elif DSA_CPU_HAS_AVX2
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return reinterpret_cast<vfloat>(_mm256_slli_epi32(w, 16));
#else
  vhalf h;
  std::memcpy(&h, p, sizeof h);
  return reinterpret_cast<vfloat>(__builtin_convertvector(h, vuint) << 16);
#endif
}

/// v, in a register from here on: keeps the compiler from folding a load that feeds several
/// multiply-adds into each of them (one load per FMA instead of one per vector), which left the
/// load ports, not the FMA ports, the limit of a register tile.
DSA_FORCEINLINE vfloat in_register(vfloat v) {
#if defined(__GNUC__) && (DSA_CPU_HAS_AVX || DSA_CPU_HAS_AVX512)
  asm("" : "+v"(v));
#endif
  return v;
}

/// acc + a · b lane by lane, rounded as detail::fma_if_fast: fused where the target has FMA,
/// whatever the optimisation level (g++ contracts `acc += a * b` only from -O2, and not in every
/// instantiation alike), the product rounded first where it has none.
DSA_FORCEINLINE void fma_lanes(vfloat& acc, const vfloat& a, const vfloat& b) {
#if DSA_CPU_HAS_AVX512
  acc = __builtin_ia32_vfmaddps512_mask(a, b, acc, static_cast<__mmask16>(-1), _MM_FROUND_CUR_DIRECTION);
#elif DSA_CPU_HAS_AVX && DSA_CPU_HAS_FMA
  // The builtin, not the lane loop below: inside the register tiles g++ 12 left that loop as 8
  // scalar vfmadd231ss per call (the bf16 linear's chunked tiles at a tenth of the ymm rate).
  acc = __builtin_ia32_vfmaddps256(a, b, acc);
#elif DSA_CPU_HAS_SCALAR_FMA
  for (index_t l = 0; l < lanes<float>; ++l) acc[l] = __builtin_fmaf(a[l], b[l], acc[l]);
#else
  acc += a * b;  // no FMA instruction: nothing to contract with
#endif
}

/// The attention and indexer tiles' unit (kernels/): 16 fp32 lanes, as vectors_per_tile of the
/// target's vectors (1 with AVX-512, 2 with AVX, 4 otherwise).
inline constexpr index_t tile_lanes = 16;
inline constexpr int vectors_per_tile = static_cast<int>(tile_lanes / lanes<float>);
static_assert(tile_lanes % lanes<float> == 0);

/// The lanes of v summed in a fixed tree (halves, then quarters, ...).
DSA_FORCEINLINE float reduce_lanes(vfloat v) {
  constexpr index_t L = lanes<float>;
  float t[L];
  std::memcpy(t, &v, sizeof v);
  for (index_t width = L / 2; width >= 1; width /= 2) {
    for (index_t l = 0; l < width; ++l) t[l] += t[l + width];
  }
  return t[0];
}

}  // namespace cpu_detail::simd
DSA_NAMESPACE_END
