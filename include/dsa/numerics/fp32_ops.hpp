// IEEE fp32 operations whose rounding does not depend on the compiler's contraction flags.
//
// g++ contracts a * b + c into an FMA when the target has one and -ffp-contract=fast is in
// effect (the default outside strict ISO mode), and nvcc contracts by default; the same source
// then rounds differently with and without -march=native, and on the two backends. Where the
// dense ops' arithmetic follows a reference that rounds the product first (torch's eager
// kernels), the product goes through mul_rn. On the host the product of two floats is exact in
// double (24 + 24 significant bits), so rounding it to float is exactly the IEEE fp32 product;
// but g++ folds that back into a float multiply (it is exact to do so) and then contracts it
// with the next addition when the target has FMA (-march=native), so there the product is
// fma(a, b, -0), one rounding of a * b (x + -0 = x, signed zeros included), which no compiler
// fuses with another operation and which still vectorises. Without hardware FMA, fma would be a
// library call, and there is nothing to contract with anyway.
#pragma once

#include <cmath>

#include "dsa/core/config.hpp"
// DSA_CPU_HAS_SCALAR_FMA: 1 where the host target has fused multiply-add instructions (so
// std::fma is one instruction and g++ may contract `a * b + c`), else 0. Host-side only: the
// device pass takes the intrinsics below.
#include "dsa/cpu/arch/isa.hpp"

DSA_NAMESPACE_BEGIN
namespace detail {

/// fl32(a * b), never fused with a neighbouring addition.
DSA_HOST_DEVICE DSA_FORCEINLINE float mul_rn(float a, float b) {
#if DSA_DEVICE_COMPILE
  return __fmul_rn(a, b);
#elif DSA_CPU_HAS_SCALAR_FMA
  return std::fma(a, b, -0.0f);
#else
  return static_cast<float>(static_cast<double>(a) * static_cast<double>(b));
#endif
}

/// a * b + c, rounded once where the target has FMA (always on the device), else the product
/// rounded first: the same bits at every optimisation level, where a plain `c + a * b` is fused
/// by g++ only from -O2 (its contraction pass) and so rounds differently in -O1 builds.
DSA_HOST_DEVICE DSA_FORCEINLINE float fma_if_fast(float a, float b, float c) {
#if DSA_DEVICE_COMPILE
  return __fmaf_rn(a, b, c);
#elif DSA_CPU_HAS_SCALAR_FMA
  return std::fma(a, b, c);
#else
  return c + mul_rn(a, b);
#endif
}

// expf / logf that name the same function in host and device code (std::exp(float) is not a
// device function everywhere).
DSA_HOST_DEVICE DSA_FORCEINLINE float exp_f32(float x) {
#if DSA_DEVICE_COMPILE
  return ::expf(x);  // the accurate expf, not __expf: a routing decision can hinge on one ulp
#else
  return std::exp(x);
#endif
}

DSA_HOST_DEVICE DSA_FORCEINLINE float log_f32(float x) {
#if DSA_DEVICE_COMPILE
  return ::logf(x);
#else
  return std::log(x);
#endif
}

/// IEEE fp32 square root (correctly rounded also under nvcc -use_fast_math).
DSA_HOST_DEVICE DSA_FORCEINLINE float sqrt_rn(float a) {
#if DSA_DEVICE_COMPILE
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

/// max(a, b) that propagates NaN: NaN if either operand is NaN (the first one, then), else the
/// larger, `a` on ties (so -0 vs +0 keeps `a`). IEEE maxNum, std::max and fmaxf all drop a NaN
/// operand, which in a softmax's running maximum turns a NaN logit into "no attention"; every
/// max that feeds a softmax (attention, the KL losses) goes through this instead, on both
/// backends, so the result does not depend on the reduction order.
DSA_HOST_DEVICE DSA_FORCEINLINE float max_propagate_nan(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  return b > a ? b : a;
}

}  // namespace detail
DSA_NAMESPACE_END
