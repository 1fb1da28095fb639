// Storage types of the low-precision formats and their bit-exact conversions.
//
// All conversions are DSA_HOST_DEVICE and written with integer arithmetic on the IEEE bit
// patterns, so that the CPU and CUDA backends produce identical bits whatever the compiler's
// floating-point flags: no rint(), no rounding-mode dependence, no fast-math hazards.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "dsa/core/config.hpp"

DSA_NAMESPACE_BEGIN

namespace detail {

DSA_HOST_DEVICE DSA_FORCEINLINE std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

DSA_HOST_DEVICE DSA_FORCEINLINE float bits_float(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// IEEE round-to-nearest-even division, also under nvcc (where '/' may be approximate with
// -use_fast_math). The quantizers' x / s must be this division on both backends.
DSA_HOST_DEVICE DSA_FORCEINLINE float div_rn(float a, float b) {
#if DSA_DEVICE_COMPILE
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// Encodes |x| (as the bits `a` of a finite, non-negative float) into a small float format with
// ExpBits exponent bits, ManBits mantissa bits and the given bias, rounding to nearest even.
// Returns the unsigned code; codes above MaxCode signal overflow to the caller.
template <int ManBits, int Bias>
DSA_HOST_DEVICE DSA_FORCEINLINE std::uint32_t encode_small_float_magnitude(std::uint32_t a) {
  const int e = static_cast<int>(a >> 23) - 127;  // unbiased exponent of the input
  if (e >= 1 - Bias) {
    // Normal in the target format: keep ManBits of mantissa, round the rest to nearest even.
    constexpr int shift = 23 - ManBits;
    std::uint32_t r = a >> shift;
    const std::uint32_t rem = a & ((1u << shift) - 1u);
    constexpr std::uint32_t half = 1u << (shift - 1);
    r += (rem > half || (rem == half && (r & 1u))) ? 1u : 0u;  // carry may bump the exponent
    return r - (static_cast<std::uint32_t>(127 - Bias) << ManBits);
  }
  if ((a >> 23) == 0) return 0;  // fp32 zero or subnormal: far below the target's min subnormal
  // Subnormal in the target format: count units of 2^(1 - Bias - ManBits). A result of
  // 2^ManBits is the smallest normal, whose code is exactly that integer.
  const std::uint32_t sig = (a & 0x7FFFFFu) | 0x800000u;
  const int shift = 24 - Bias - ManBits - e;
  if (shift > 24) return 0;  // below half of the smallest subnormal
  const std::uint32_t q = sig >> shift;
  const std::uint32_t rem = sig & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

// Decodes the magnitude code of a small float format with no special values in `code`.
template <int ManBits, int Bias>
DSA_HOST_DEVICE DSA_FORCEINLINE float decode_small_float_magnitude(std::uint32_t code) {
  const std::uint32_t exp = code >> ManBits;
  const std::uint32_t man = code & ((1u << ManBits) - 1u);
  if (exp == 0) {
    // man * 2^(1 - Bias - ManBits): exact in fp32.
    return static_cast<float>(man) * bits_float(static_cast<std::uint32_t>(127 + 1 - Bias - ManBits) << 23);
  }
  return bits_float(((exp + 127u - Bias) << 23) | (man << (23 - ManBits)));
}

// A small float's value from its magnitude and its code's sign bit (0x80): the sign as a bit,
// not a negation, because the device's neg.f32 returns the canonical NaN for a NaN operand,
// which would drop the sign of the NaN codes (seen on sm_90).
DSA_HOST_DEVICE DSA_FORCEINLINE float with_code_sign(float magnitude, std::uint32_t code) {
  return bits_float(float_bits(magnitude) | ((code & 0x80u) << 24));
}

}  // namespace detail

/// bfloat16: the upper 16 bits of an IEEE fp32. Conversion from float rounds to nearest even;
/// NaN stays NaN (quiet), overflow rounds to infinity as IEEE requires.
struct bf16 {
  std::uint16_t bits = 0;

  bf16() = default;
  DSA_HOST_DEVICE explicit bf16(float x) : bits(from_float_bits(x)) {}
  DSA_HOST_DEVICE static constexpr bf16 from_bits(std::uint16_t b) {
    bf16 r;
    r.bits = b;
    return r;
  }
  DSA_HOST_DEVICE static std::uint16_t from_float_bits(float x) {
    const std::uint32_t u = detail::float_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
    return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  DSA_HOST_DEVICE float to_float() const { return detail::bits_float(static_cast<std::uint32_t>(bits) << 16); }
  DSA_HOST_DEVICE explicit operator float() const { return to_float(); }
  friend DSA_HOST_DEVICE bool operator==(bf16 a, bf16 b) { return a.bits == b.bits; }
};

/// FP8 E4M3FN: bias 7, no infinities, NaN = S.1111.111, max 448, min subnormal 2^-9.
/// Conversion from float rounds to nearest even and saturates to +-448 (infinities included).
struct fp8_e4m3 {
  std::uint8_t bits = 0;
  static constexpr float max_finite = 448.0f;

  fp8_e4m3() = default;
  DSA_HOST_DEVICE explicit fp8_e4m3(float x) : bits(from_float_bits(x)) {}
  DSA_HOST_DEVICE static constexpr fp8_e4m3 from_bits(std::uint8_t b) {
    fp8_e4m3 r;
    r.bits = b;
    return r;
  }
  DSA_HOST_DEVICE static std::uint8_t from_float_bits(float x) {
    const std::uint32_t u = detail::float_bits(x);
    const std::uint32_t sign = (u >> 24) & 0x80u;
    const std::uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return static_cast<std::uint8_t>(sign | 0x7Fu);  // NaN
    if (a >= 0x7F800000u) return static_cast<std::uint8_t>(sign | 0x7Eu);  // +-inf saturates
    std::uint32_t code = detail::encode_small_float_magnitude<3, 7>(a);
    if (code > 0x7Eu) code = 0x7Eu;  // 0x7F would be NaN: saturate to 448
    return static_cast<std::uint8_t>(sign | code);
  }
  DSA_HOST_DEVICE float to_float() const {
    const std::uint32_t code = bits & 0x7Fu;
    const float m = code == 0x7Fu ? detail::bits_float(0x7FC00000u) : detail::decode_small_float_magnitude<3, 7>(code);
    return detail::with_code_sign(m, bits);
  }
  DSA_HOST_DEVICE explicit operator float() const { return to_float(); }
  friend DSA_HOST_DEVICE bool operator==(fp8_e4m3 a, fp8_e4m3 b) { return a.bits == b.bits; }
};

/// FP8 E5M2: bias 15, IEEE-like with infinities and NaNs, max finite 57344.
/// Conversion from float rounds to nearest even; overflow gives infinity as in IEEE (the OCP
/// "non-saturating" mode), `from_float_bits_saturate` clamps to +-57344 instead.
struct fp8_e5m2 {
  std::uint8_t bits = 0;
  static constexpr float max_finite = 57344.0f;

  fp8_e5m2() = default;
  DSA_HOST_DEVICE explicit fp8_e5m2(float x) : bits(from_float_bits(x)) {}
  DSA_HOST_DEVICE static constexpr fp8_e5m2 from_bits(std::uint8_t b) {
    fp8_e5m2 r;
    r.bits = b;
    return r;
  }
  DSA_HOST_DEVICE static std::uint8_t encode(float x, bool saturate) {
    const std::uint32_t u = detail::float_bits(x);
    const std::uint32_t sign = (u >> 24) & 0x80u;
    const std::uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return static_cast<std::uint8_t>(sign | 0x7Eu);  // quiet NaN
    std::uint32_t code = a == 0x7F800000u ? 0x7Cu : detail::encode_small_float_magnitude<2, 15>(a);
    if (code > 0x7Bu) code = saturate ? 0x7Bu : 0x7Cu;
    return static_cast<std::uint8_t>(sign | code);
  }
  DSA_HOST_DEVICE static std::uint8_t from_float_bits(float x) { return encode(x, false); }
  DSA_HOST_DEVICE static std::uint8_t from_float_bits_saturate(float x) { return encode(x, true); }
  DSA_HOST_DEVICE float to_float() const {
    const std::uint32_t code = bits & 0x7Fu;
    float m;
    if (code >= 0x7Cu) {
      m = detail::bits_float(code == 0x7Cu ? 0x7F800000u : 0x7FC00000u);
    } else {
      m = detail::decode_small_float_magnitude<2, 15>(code);
    }
    return detail::with_code_sign(m, bits);
  }
  DSA_HOST_DEVICE explicit operator float() const { return to_float(); }
  friend DSA_HOST_DEVICE bool operator==(fp8_e5m2 a, fp8_e5m2 b) { return a.bits == b.bits; }
};

/// UE8M0: an unsigned power-of-two scale, value 2^(bits - 127); 0xFF is NaN.
/// It is exactly the exponent field of an fp32, so it converts losslessly to and from the
/// power-of-two fp32 scales the quantizers produce.
struct ue8m0 {
  std::uint8_t bits = 127;

  ue8m0() = default;
  DSA_HOST_DEVICE static constexpr ue8m0 from_bits(std::uint8_t b) {
    ue8m0 r;
    r.bits = b;
    return r;
  }
  /// The smallest power of two >= v (v positive, normal): 2^ceil(log2 v), computed on the bits
  /// (exponent, plus one if the mantissa is non-zero). Saturates at 2^127.
  DSA_HOST_DEVICE static ue8m0 ceil_pow2(float v) {
    const std::uint32_t u = detail::float_bits(v) & 0x7FFFFFFFu;
    std::uint32_t e = u >> 23;
    if ((u & 0x7FFFFFu) != 0u && e < 254u) ++e;
    return from_bits(static_cast<std::uint8_t>(e));
  }
  /// Exact for a power-of-two fp32 (as produced by ceil_pow2); other values are truncated to
  /// their exponent.
  DSA_HOST_DEVICE static ue8m0 from_pow2(float s) {
    return from_bits(static_cast<std::uint8_t>((detail::float_bits(s) >> 23) & 0xFFu));
  }
  DSA_HOST_DEVICE float to_float() const {
    if (bits == 0xFFu) return detail::bits_float(0x7FC00000u);
    if (bits == 0u) return detail::bits_float(0x00400000u);  // 2^-127, an fp32 subnormal
    return detail::bits_float(static_cast<std::uint32_t>(bits) << 23);
  }
  DSA_HOST_DEVICE explicit operator float() const { return to_float(); }
  friend DSA_HOST_DEVICE bool operator==(ue8m0 a, ue8m0 b) { return a.bits == b.bits; }
};

static_assert(sizeof(bf16) == 2 && sizeof(fp8_e4m3) == 1 && sizeof(fp8_e5m2) == 1 && sizeof(ue8m0) == 1);

/// Converts any supported storage type (or float) to float.
template <class T>
DSA_HOST_DEVICE DSA_FORCEINLINE float to_float(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<float>(x);
  } else {
    return x.to_float();
  }
}

/// Converts a float to a supported storage type (or float), rounding as the type defines.
template <class T>
DSA_HOST_DEVICE DSA_FORCEINLINE T from_float(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return T(x);
  }
}

/// Runtime names of element types, for error messages and file formats.
template <class T>
constexpr const char* dtype_name() {
  if constexpr (std::is_same_v<T, float>) return "F32";
  else if constexpr (std::is_same_v<T, bf16>) return "BF16";
  else if constexpr (std::is_same_v<T, fp8_e4m3>) return "F8_E4M3";
  else if constexpr (std::is_same_v<T, fp8_e5m2>) return "F8_E5M2";
  else if constexpr (std::is_same_v<T, ue8m0>) return "UE8M0";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "I32";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "I64";
  else if constexpr (std::is_same_v<T, std::uint8_t>) return "U8";
  else return "?";
}

DSA_NAMESPACE_END
