// Host-side interface of the CUDA test launchers (launchers.cu).
//
// docs/design.md ("Build and test") keeps doctest, Eigen and Google Benchmark out of .cu files: nvcc compiles only the
// kernels and these small host functions, and the doctest tests (.cpp, g++) call them and compare
// with the host. Only standard host types cross this boundary, and for the kernel hooks at the end
// the backend and device views, which are plain C++ too.
//
// The same launchers are compiled twice, with nvcc's default flags and with --use_fast_math (as
// many inference engines build), to show that the shared numerics give the same bits either way.
// Every launcher needs a CUDA device and throws dsa::cuda_error when the runtime fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/numerics/fp8_quant.hpp"

namespace dsa_test {

/// Per input float: the codes the device produced and the floats it decoded them back to.
struct device_conversions {
  std::vector<std::uint8_t> e4m3;      // fp8_e4m3(x).bits
  std::vector<float> e4m3_back;        // fp8_e4m3(x).to_float()
  std::vector<std::uint8_t> e5m2;      // fp8_e5m2(x).bits (overflow to infinity)
  std::vector<std::uint8_t> e5m2_sat;  // fp8_e5m2::from_float_bits_saturate(x)
  std::vector<float> e5m2_back;        // fp8_e5m2(x).to_float()
  std::vector<std::uint16_t> bf16;     // bf16(x).bits
  std::vector<float> bf16_back;        // bf16(x).to_float()
};

/// Per input code, decoded on the device through each path of dsa/cuda/arch/fp8.cuh.
struct device_fp8_decodes {
  std::vector<float> e4m3_scalar;  // fp8_e4m3::to_float, one code at a time
  std::vector<float> e4m3_x16;     // e4m3x16_to_float (the hardware cvt on sm_89+)
  std::vector<float> e4m3_x4_sw;   // e4m3x4_to_float4_sw
  std::vector<float> e5m2_x4;      // e5m2x4_to_float4
};

/// Per input float v: ue8m0::ceil_pow2(v), its value, and ue8m0::from_pow2(v).
struct device_ue8m0 {
  std::vector<std::uint8_t> ceil_pow2;
  std::vector<float> ceil_pow2_value;
  std::vector<std::uint8_t> from_pow2;
};

/// Per lane of a warp-sized input: what dsa/cuda/arch/warp.cuh left in that lane.
struct device_warp_reductions {
  std::vector<float> sum32, max32, min32;  // over the whole warp
  std::vector<float> sum8, max8;           // over groups of 8 lanes
  std::vector<std::int32_t> isum32;        // integer sum over the warp of static_cast<int32_t>(x)
};

/// One build of the launchers.
struct cuda_launchers {
  const char* name;
  device_conversions (*convert)(std::span<const float> x);
  /// codes.size() must be a multiple of 16 (one 128-bit load per thread).
  device_fp8_decodes (*decode_fp8)(std::span<const std::uint8_t> codes);
  /// float_to_e4m3x16; x.size() must be a multiple of 16.
  std::vector<std::uint8_t> (*encode_e4m3x16)(std::span<const float> x);
  device_ue8m0 (*ue8m0)(std::span<const float> v);
  /// x.size() must be a multiple of 32 (one warp per 32 values).
  device_warp_reductions (*warp_reduce)(std::span<const float> x);
};

/// Compiled with nvcc's default flags.
const cuda_launchers& cuda_launchers_default();
/// Compiled with --use_fast_math (flush-to-zero, approximate division and transcendentals).
const cuda_launchers& cuda_launchers_fast_math();

// ---- kernels below the ops' front-ends (default flags only) -------------------------------------
// The public ops are called directly from the tests (dsa/cuda/ops.hpp); these reach the dense
// kernels on arguments the caller has checked (dsa::cuda_detail::run_fp8_linear, run_linear_simt)
// with at most max_rows blocks along y, so that a small shape makes each block loop over several
// row tiles. Asynchronous on be.stream, like the ops.

void fp8_linear_grid_rows(const dsa::cuda_backend& be, dsa::device_view<const dsa::bf16, 2> x,
                          dsa::device_view<const dsa::fp8_e4m3, 2> w, dsa::device_view<const float, 2> w_scale,
                          dsa::device_view<dsa::bf16, 2> y, dsa::scale_format act_format, dsa::index_t max_rows);
/// fp8_linear's tensor-core path forced onto its bf16 fallback (dequantized operands, cuBLAS's
/// bf16 GEMM: dsa::cuda_detail::run_fp8_linear_fast), whatever the GPU; needs be.blas and a
/// workspace of fp8_linear_workspace_size bytes.
void fp8_linear_bf16_fallback(const dsa::cuda_backend& be, dsa::device_view<const dsa::bf16, 2> x,
                              dsa::device_view<const dsa::fp8_e4m3, 2> w, dsa::device_view<const float, 2> w_scale,
                              dsa::device_view<dsa::bf16, 2> y, dsa::scale_format act_format,
                              dsa::device_view<std::byte, 1> workspace);
void linear_simt_grid_rows(const dsa::cuda_backend& be, dsa::device_view<const dsa::bf16, 2> x,
                           dsa::device_view<const float, 2> w, dsa::device_view<float, 2> y, dsa::index_t max_rows);

}  // namespace dsa_test
