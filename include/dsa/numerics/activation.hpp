// The arithmetic of the SwiGLU feed-forward activation (DeepSeek `MLP` / `Expert`:
// w2((silu(w1 x).float() * (w3 x).float()).type_as(x))), shared by the CPU and CUDA backends.
//
//   silu(g) = fl32(g / (1 + exp(-g)))   evaluated in double, rounded once to fp32
//   y       = fl32(silu(g) * u)          then rounded once to the output type (bf16)
//
// Why silu in double: fp32 expf differs between libm versions and CUDA by an ulp, so an fp32
// evaluation cannot be reproduced across backends; the double value rounded to fp32 is the
// correctly rounded silu except with probability ~2^-28 per element (double exp is accurate to
// about an ulp on both), so the backends agree bit for bit in all but such rare cases. Large
// negative g gives exp overflow to inf and silu = -0, as in fp32; NaN propagates.
#pragma once

#include <cmath>

#include "dsa/core/config.hpp"

DSA_NAMESPACE_BEGIN

/// silu(g) = g * sigmoid(g), rounded once to fp32.
DSA_HOST_DEVICE inline float silu(float g) {
  const double x = static_cast<double>(g);
  return static_cast<float>(x / (1.0 + std::exp(-x)));
}

/// One SwiGLU element before rounding to the output type: fl32(silu(gate) * up).
DSA_HOST_DEVICE DSA_FORCEINLINE float swiglu_value(float gate, float up) { return silu(gate) * up; }

DSA_NAMESPACE_END
