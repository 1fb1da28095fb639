// The arithmetic of the dense linear layers, shared by the CPU and CUDA backends.
//
// FP8 linear (DeepSeek `linear` = act_quant + fp8_gemm), y [t, out] = x [t, in] . w^T:
//   x is quantized per 1 x 128 group (act_quant, dsa/numerics/fp8_quant.hpp): codes qx, scales sx;
//   w is e4m3 codes qw with one fp32 multiplier sw per 128 x 128 block;
//   for every 128-wide k-block b, in ascending order:
//     d_b   = fl32(sum_k qx[i, k] * qw[n, k])      the block dot, computed EXACTLY and rounded once
//     s_b   = fl32(sx[i, b] * sw[n / 128, b])
//     acc   = fl32(acc + fl32(d_b * s_b))            (acc starts at +0)
//   y[i, n] = acc rounded once to the output type.
//
// Why the block dot can be exact: an e4m3 value is an integer multiple of 2^-9 below 2^9, so a
// product of two is a multiple of 2^-18 below 2^18, and a sum of 128 of them is a multiple of
// 2^-18 below 2^25: 43 significant bits, which double holds exactly in any summation order.
// The result is therefore independent of blocking, vector width, FMA contraction, thread count
// and batch size, and equals the correctly rounded block dot. The reference's tensor-core dot
// (fp32 accumulation of limited precision, promoted every 128) approximates this value.
//
// The fp32 block dot (cpu_backend::fp8_block_dot = fp8_dot::fp32) replaces d_b by
//     d_b = fl32(...fl32(fl32(+0 + p_0) + p_1) ... + p_127),   p_k = qx[i, k] * qw[n, k]
// (ascending k, every sum rounded; each product has at most 8 significant bits, so it is exact in
// fp32 and an FMA gives the same bits as a multiply and an add). The order is part of the
// definition, so every kernel (any vector width, GEMV or GEMM, any thread count or batch size)
// and the scalar code below give the same bits. Error against the exact d_b: at most
// 127 * 2^-24 * sum_k |p_k| (each of the 127 additions rounds once).
#pragma once

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/fp32_ops.hpp"

DSA_NAMESPACE_BEGIN

/// The k-block (and activation group) length of fp8_linear, and the weight-scale block edge.
inline constexpr index_t fp8_linear_block = 128;

/// One FP8 weight as the grouped decode GEMV reads it from a table (one launch serves the experts
/// of an MoE layer, dsa/model/cuda/moe.cuh): the e4m3 codes [out, in] and the block scales
/// [ceil(out / 128), in / 128] with their row strides (elements).
struct fp8_weight_ref {
  const fp8_e4m3* q = nullptr;
  index_t q_row_stride = 0;
  const float* scale = nullptr;
  index_t scale_row_stride = 0;
};

/// The exact dot product of two runs of e4m3 codes (n <= 128 keeps it exact), rounded once to
/// fp32. A NaN code (S.1111.111) makes the result NaN.
DSA_HOST_DEVICE inline float fp8_block_dot(const fp8_e4m3* a, const fp8_e4m3* b, index_t n) {
  double s = 0.0;
  for (index_t k = 0; k < n; ++k) {
    s += static_cast<double>(a[k].to_float()) * static_cast<double>(b[k].to_float());
  }
  return static_cast<float>(s);
}

/// The fp32 block dot of the fp8_dot::fp32 mode: sum of the exact products in ascending k, each
/// partial sum rounded to fp32, starting from +0 (n <= 128). A NaN code makes the result NaN.
DSA_HOST_DEVICE inline float fp8_block_dot_fp32(const fp8_e4m3* a, const fp8_e4m3* b, index_t n) {
  float s = 0.0f;
  for (index_t k = 0; k < n; ++k) s = s + detail::mul_rn(a[k].to_float(), b[k].to_float());
  return s;
}

/// The combined scale of one k-block: fl32(activation scale * weight block scale).
DSA_HOST_DEVICE DSA_FORCEINLINE float fp8_linear_block_scale(float a_scale, float w_scale) {
  return detail::mul_rn(a_scale, w_scale);
}

/// One k-block's contribution: fl32(acc + fl32(dot * scale)), the product rounded on its own as
/// in the reference's promotion step (never an FMA, so both backends round alike).
DSA_HOST_DEVICE DSA_FORCEINLINE float fp8_linear_accumulate(float acc, float dot, float scale) {
  return acc + detail::mul_rn(dot, scale);
}

/// The lane layout of the CUDA decode GEMV (fp8_gemv_kernel, kernels/linear_kernel.cuh): a warp
/// computes one output column, a pass at a time over fp8_gemv_pass_blocks k-blocks (1024 codes).
/// Each lane loads 16 consecutive weight codes twice per pass: load `half` (0 or 1) of lane
/// `lane` starts at code fp8_gemv_code_offset(lane, half) of the pass and lies in k-block
/// fp8_gemv_block(lane, half), so lanes 8g .. 8g + 7 hold block g (half 0) and block 4 + g
/// (half 1), and an 8-lane butterfly gives each of them its block's exact dot. Shared between the
/// kernel and its host replay (tests/numerics/test_dense_cuda_replay.cpp).
inline constexpr int fp8_gemv_pass_blocks = 8;
DSA_HOST_DEVICE constexpr int fp8_gemv_block(int lane, int half) { return 4 * half + lane / 8; }
DSA_HOST_DEVICE constexpr int fp8_gemv_code_offset(int lane, int half) { return 512 * half + 16 * lane; }
/// The lane whose butterfly result is block b's dot (b < fp8_gemv_pass_blocks), and its load.
DSA_HOST_DEVICE constexpr int fp8_gemv_block_lane(int b) { return 8 * (b % 4); }
DSA_HOST_DEVICE constexpr int fp8_gemv_block_half(int b) { return b / 4; }
/// Where code k of a pass (0 <= k < 1024) sits in the kernel's shared activation row: one float
/// skipped after every 16, so that the 32 lanes reading code 16 * lane + e hit 32 different banks.
DSA_HOST_DEVICE constexpr int fp8_gemv_smem_index(int k) { return k + k / 16; }
inline constexpr int fp8_gemv_smem_row = fp8_gemv_smem_index(fp8_gemv_pass_blocks * 128);  // 1088 floats

DSA_NAMESPACE_END
