// Dense linear layers y = x . w^T (no bias), the projections of the DeepSeek-V3.2 forward pass.
//
//  - fp8_linear: DeepSeek's `linear` for FP8 weights (act_quant of x in 1 x 128 groups, then
//    fp8_gemm with per-128 k-block promotion). Numerics in dsa/numerics/linear.hpp.
//  - linear: the unquantized products (bf16 x bf16 -> bf16 as F.linear on bf16; fp32 for the
//    MoE gate, the indexer's weights_proj and lm_head). Inputs are converted exactly to fp32,
//    products are accumulated in fp32 and the result is rounded once to the output type.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

#include "dsa/core/backend.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/op_instances.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/fp8_linear_plan.hpp"  // fp8_linear_workspace_size: the CUDA layout, plain C++
#include "dsa/numerics/fp8_quant.hpp"
#include "dsa/numerics/linear.hpp"
#include "dsa/ops/dense_checks.hpp"
#include "dsa/ops/workspace.hpp"

DSA_NAMESPACE_BEGIN

struct fp8_linear_op {};
struct linear_op {};

namespace detail {
/// fp8_linear's checks of everything but the weight's codes (held as a view, or packed on the
/// CPU: cpu/packed_fp8_weight.hpp); out = the weight's output features.
template <class XV, class SV, class YV>
void check_fp8_linear_operands(std::string_view op, const XV& x, index_t out, const SV& w_scale, const YV& y,
                               scale_format act_format) {
  check_operand(op, "x", x);
  check_operand(op, "w_scale", w_scale);
  check_operand(op, "y", y);
  if (act_format != scale_format::ue8m0 && act_format != scale_format::fp32) {
    fail(op, "act_format", static_cast<int>(act_format), "scale_format::ue8m0 or scale_format::fp32");
  }
  const index_t t = x.extent(0);
  const index_t in = x.extent(1);
  if (in % fp8_linear_block != 0) {
    fail(op, "x.extent(1)", in, "a multiple of 128 (the activation quantization group and weight block)");
  }
  const index_t nb_out = (out + fp8_linear_block - 1) / fp8_linear_block;
  check_extent(op, "w_scale", w_scale, 0, nb_out, "ceil(w.extent(0) / 128)");
  check_extent(op, "w_scale", w_scale, 1, in / fp8_linear_block, "x.extent(1) / 128");
  check_extent(op, "y", y, 0, t, "x.extent(0), the tokens");
  check_extent(op, "y", y, 1, out, "w.extent(0), the output features");
  detail::check_disjoint_rows(op, "y", y);
  detail::check_no_overlap(op, "y", y, "x", x, false);
  detail::check_no_overlap(op, "y", y, "w_scale", w_scale, false);
}
}  // namespace detail

/// y [t, out] = x [t, in] . dequant(w)^T with DeepSeek's FP8 rounding points:
///   x (bf16 or float) is quantized per 1 x 128 group with `act_format` scales (ue8m0 = V3.2's
///   scale_fmt), w [out, in] holds e4m3 codes with fp32 block multipliers
///   w_scale [ceil(out / 128), in / 128] (the checkpoint's weight_scale_inv); per 128-wide
///   k-block the exact dot of the codes is rounded to fp32, multiplied by fl32(a_scale * w_scale)
///   and accumulated in fp32; y (bf16 or float) is rounded once. in must be a multiple of 128.
///   On the CPU backend, `be.fp8_block_dot = fp8_dot::fp32` replaces the exact block dot by the
///   fp32 sum of the (exact) products in ascending k (dsa/numerics/linear.hpp): faster, a few
///   ulps from the exact value; the CUDA backend computes the exact dot.
/// Results do not depend on the thread count, on t (batch invariance) or on how the backend
/// blocks the product, in either mode. y must not overlap any input.
template <backend B, class XT, class O>
void fp8_linear(const B& be, tensor_view<XT, 2, typename B::memory_space> x, in_view<B, fp8_e4m3, 2> w,
                in_view<B, float, 2> w_scale, out_view<B, O, 2> y, scale_format act_format = scale_format::ue8m0) {
  static_assert(detail::is_bf16_or_float<XT>, "dsa::fp8_linear: x must hold dsa::bf16 or float");
  static_assert(std::is_same_v<O, bf16> || std::is_same_v<O, float>, "dsa::fp8_linear: y must hold dsa::bf16 or float");
  using X = std::remove_const_t<XT>;
  using space = typename B::memory_space;
  constexpr std::string_view op = "fp8_linear";
  const tensor_view<const X, 2, space> xc(x.data_handle(), x.extents(), x.strides());
  detail::check_operand(op, "w", w);
  detail::check_fp8_linear_operands(op, xc, w.extent(0), w_scale, y, act_format);
  check_extent(op, "w", w, 1, xc.extent(1), "x.extent(1), the input features");
  detail::check_no_overlap(op, "y", y, "w", w, false);
  if (y.empty()) return;
  dispatch<fp8_linear_op>(be, xc, tensor_view<const fp8_e4m3, 2, space>(w), tensor_view<const float, 2, space>(w_scale),
                          y, act_format);
}

/// fp8_linear with scratch memory for the tensor cores: `workspace` holds at least
/// fp8_linear_workspace_size(t, in, out) bytes (dsa/cuda/fp8_linear_plan.hpp; none for an empty
/// product, where an absent view is accepted), 16-byte aligned, contiguous and disjoint from every
/// other argument. On the CUDA backend with cuda_kernel_path::fast the product runs
/// on the tensor cores: cuBLASLt's block-scaled FP8 GEMM on Hopper (be.blaslt), cuBLAS's bf16 GEMM
/// over dequantized operands elsewhere (be.blas), the exact decode GEMV for decode rows where it is
/// faster (docs/cuda.md, "fp8_linear on the GPU"); those results are not the exact ones, they are
/// within DeepGEMM's calc_diff of them and deterministic for one GPU model and cuBLAS version.
/// With cuda_kernel_path::exact, and on the CPU backend (which checks the workspace and ignores
/// it), the results are those of the overload without a workspace, bit for bit.
template <backend B, class XT, class O>
void fp8_linear(const B& be, tensor_view<XT, 2, typename B::memory_space> x, in_view<B, fp8_e4m3, 2> w,
                in_view<B, float, 2> w_scale, out_view<B, O, 2> y, scale_format act_format,
                out_view<B, std::byte, 1> workspace) {
  static_assert(detail::is_bf16_or_float<XT>, "dsa::fp8_linear: x must hold dsa::bf16 or float");
  static_assert(std::is_same_v<O, bf16> || std::is_same_v<O, float>, "dsa::fp8_linear: y must hold dsa::bf16 or float");
  using X = std::remove_const_t<XT>;
  using space = typename B::memory_space;
  constexpr const char* op = "fp8_linear";
  const tensor_view<const X, 2, space> xc(x.data_handle(), x.extents(), x.strides());
  detail::check_operand(op, "w", w);
  detail::check_fp8_linear_operands(op, xc, w.extent(0), w_scale, y, act_format);
  check_extent(op, "w", w, 1, xc.extent(1), "x.extent(1), the input features");
  detail::check_no_overlap(op, "y", y, "w", w, false);
  const index_t need = fp8_linear_workspace_size(xc.extent(0), xc.extent(1), w.extent(0));
  if (detail::check_workspace(op, workspace, need, "fp8_linear_workspace_size(t, in, out)")) {
    detail::check_no_overlap(op, "workspace", workspace, "x", xc, false);
    detail::check_no_overlap(op, "workspace", workspace, "w", w, false);
    detail::check_no_overlap(op, "workspace", workspace, "w_scale", w_scale, false);
    detail::check_no_overlap(op, "workspace", workspace, "y", y, false);
  }
  if (y.empty()) return;
  dispatch<fp8_linear_op>(be, xc, tensor_view<const fp8_e4m3, 2, space>(w), tensor_view<const float, 2, space>(w_scale),
                          y, act_format, workspace);
}

/// y [t, out] = x [t, in] . w^T with w [out, in]: the inputs (bf16 or float each) are converted
/// exactly to fp32, the products accumulated in fp32 and y (bf16 or float) rounded once. This
/// covers F.linear on bf16 (bf16 x bf16 -> bf16) and the fp32 projections (x and w in fp32, or a
/// bf16 checkpoint weight used as fp32 without a converted copy: identical results).
/// Deterministic for every thread count; the fp32 summation order is the backend's (it is not
/// specified, and results are not batch-invariant). y must not overlap x or w.
template <backend B, class XT, class WT, class O>
void linear(const B& be, tensor_view<XT, 2, typename B::memory_space> x, tensor_view<WT, 2, typename B::memory_space> w,
            out_view<B, O, 2> y) {
  static_assert(detail::is_bf16_or_float<XT>, "dsa::linear: x must hold dsa::bf16 or float");
  static_assert(detail::is_bf16_or_float<WT>, "dsa::linear: w must hold dsa::bf16 or float");
  static_assert(std::is_same_v<O, bf16> || std::is_same_v<O, float>, "dsa::linear: y must hold dsa::bf16 or float");
  using X = std::remove_const_t<XT>;
  using W = std::remove_const_t<WT>;
  using space = typename B::memory_space;
  constexpr std::string_view op = "linear";
  const tensor_view<const X, 2, space> xc(x.data_handle(), x.extents(), x.strides());
  const tensor_view<const W, 2, space> wc(w.data_handle(), w.extents(), w.strides());
  detail::check_operand(op, "x", xc);
  detail::check_operand(op, "w", wc);
  detail::check_operand(op, "y", y);
  check_extent(op, "w", wc, 1, xc.extent(1), "x.extent(1), the input features");
  check_extent(op, "y", y, 0, xc.extent(0), "x.extent(0), the tokens");
  check_extent(op, "y", y, 1, wc.extent(0), "w.extent(0), the output features");
  detail::check_disjoint_rows(op, "y", y);
  detail::check_no_overlap(op, "y", y, "x", xc, false);
  detail::check_no_overlap(op, "y", y, "w", wc, false);
  if (y.empty()) return;
  dispatch<linear_op>(be, xc, wc, y);
}

DSA_NAMESPACE_END

// The type combinations dsa's own programs compile once per backend (dsa/core/op_instances.hpp).
#define DSA_LINEAR_INSTANCES(X, B) \
  X(void fp8_linear<B, float, float>(const B&, tensor_view<float, 2, B::memory_space>, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, float, 2>, scale_format)) \
  X(void fp8_linear<B, float, bf16>(const B&, tensor_view<float, 2, B::memory_space>, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, bf16, 2>, scale_format)) \
  X(void fp8_linear<B, const float, float>(const B&, tensor_view<const float, 2, B::memory_space>, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, float, 2>, scale_format)) \
  X(void fp8_linear<B, const float, bf16>(const B&, tensor_view<const float, 2, B::memory_space>, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, bf16, 2>, scale_format)) \
  X(void fp8_linear<B, bf16, float>(const B&, tensor_view<bf16, 2, B::memory_space>, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, float, 2>, scale_format)) \
  X(void fp8_linear<B, bf16, bf16>(const B&, tensor_view<bf16, 2, B::memory_space>, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, bf16, 2>, scale_format)) \
  X(void fp8_linear<B, const bf16, float>(const B&, tensor_view<const bf16, 2, B::memory_space>, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, float, 2>, scale_format)) \
  X(void fp8_linear<B, const bf16, bf16>(const B&, tensor_view<const bf16, 2, B::memory_space>, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, bf16, 2>, scale_format)) \
  X(void fp8_linear<B, float, float>(const B&, tensor_view<float, 2, B::memory_space>, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, float, 2>, scale_format, out_view<B, std::byte, 1>)) \
  X(void fp8_linear<B, float, bf16>(const B&, tensor_view<float, 2, B::memory_space>, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, bf16, 2>, scale_format, out_view<B, std::byte, 1>)) \
  X(void fp8_linear<B, const float, float>(const B&, tensor_view<const float, 2, B::memory_space>, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, float, 2>, scale_format, out_view<B, std::byte, 1>)) \
  X(void fp8_linear<B, const float, bf16>(const B&, tensor_view<const float, 2, B::memory_space>, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, bf16, 2>, scale_format, out_view<B, std::byte, 1>)) \
  X(void fp8_linear<B, bf16, float>(const B&, tensor_view<bf16, 2, B::memory_space>, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, float, 2>, scale_format, out_view<B, std::byte, 1>)) \
  X(void fp8_linear<B, bf16, bf16>(const B&, tensor_view<bf16, 2, B::memory_space>, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, bf16, 2>, scale_format, out_view<B, std::byte, 1>)) \
  X(void fp8_linear<B, const bf16, float>(const B&, tensor_view<const bf16, 2, B::memory_space>, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, float, 2>, scale_format, out_view<B, std::byte, 1>)) \
  X(void fp8_linear<B, const bf16, bf16>(const B&, tensor_view<const bf16, 2, B::memory_space>, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, bf16, 2>, scale_format, out_view<B, std::byte, 1>)) \
  X(void linear<B, float, float, float>(const B&, tensor_view<float, 2, B::memory_space>, tensor_view<float, 2, B::memory_space>, out_view<B, float, 2>)) \
  X(void linear<B, float, float, bf16>(const B&, tensor_view<float, 2, B::memory_space>, tensor_view<float, 2, B::memory_space>, out_view<B, bf16, 2>)) \
  X(void linear<B, float, const float, float>(const B&, tensor_view<float, 2, B::memory_space>, tensor_view<const float, 2, B::memory_space>, out_view<B, float, 2>)) \
  X(void linear<B, float, const float, bf16>(const B&, tensor_view<float, 2, B::memory_space>, tensor_view<const float, 2, B::memory_space>, out_view<B, bf16, 2>)) \
  X(void linear<B, float, bf16, float>(const B&, tensor_view<float, 2, B::memory_space>, tensor_view<bf16, 2, B::memory_space>, out_view<B, float, 2>)) \
  X(void linear<B, float, bf16, bf16>(const B&, tensor_view<float, 2, B::memory_space>, tensor_view<bf16, 2, B::memory_space>, out_view<B, bf16, 2>)) \
  X(void linear<B, float, const bf16, float>(const B&, tensor_view<float, 2, B::memory_space>, tensor_view<const bf16, 2, B::memory_space>, out_view<B, float, 2>)) \
  X(void linear<B, float, const bf16, bf16>(const B&, tensor_view<float, 2, B::memory_space>, tensor_view<const bf16, 2, B::memory_space>, out_view<B, bf16, 2>)) \
  X(void linear<B, const float, float, float>(const B&, tensor_view<const float, 2, B::memory_space>, tensor_view<float, 2, B::memory_space>, out_view<B, float, 2>)) \
  X(void linear<B, const float, float, bf16>(const B&, tensor_view<const float, 2, B::memory_space>, tensor_view<float, 2, B::memory_space>, out_view<B, bf16, 2>)) \
  X(void linear<B, const float, const float, float>(const B&, tensor_view<const float, 2, B::memory_space>, tensor_view<const float, 2, B::memory_space>, out_view<B, float, 2>)) \
  X(void linear<B, const float, const float, bf16>(const B&, tensor_view<const float, 2, B::memory_space>, tensor_view<const float, 2, B::memory_space>, out_view<B, bf16, 2>)) \
  X(void linear<B, const float, bf16, float>(const B&, tensor_view<const float, 2, B::memory_space>, tensor_view<bf16, 2, B::memory_space>, out_view<B, float, 2>)) \
  X(void linear<B, const float, bf16, bf16>(const B&, tensor_view<const float, 2, B::memory_space>, tensor_view<bf16, 2, B::memory_space>, out_view<B, bf16, 2>)) \
  X(void linear<B, const float, const bf16, float>(const B&, tensor_view<const float, 2, B::memory_space>, tensor_view<const bf16, 2, B::memory_space>, out_view<B, float, 2>)) \
  X(void linear<B, const float, const bf16, bf16>(const B&, tensor_view<const float, 2, B::memory_space>, tensor_view<const bf16, 2, B::memory_space>, out_view<B, bf16, 2>)) \
  X(void linear<B, bf16, float, float>(const B&, tensor_view<bf16, 2, B::memory_space>, tensor_view<float, 2, B::memory_space>, out_view<B, float, 2>)) \
  X(void linear<B, bf16, float, bf16>(const B&, tensor_view<bf16, 2, B::memory_space>, tensor_view<float, 2, B::memory_space>, out_view<B, bf16, 2>)) \
  X(void linear<B, bf16, const float, float>(const B&, tensor_view<bf16, 2, B::memory_space>, tensor_view<const float, 2, B::memory_space>, out_view<B, float, 2>)) \
  X(void linear<B, bf16, const float, bf16>(const B&, tensor_view<bf16, 2, B::memory_space>, tensor_view<const float, 2, B::memory_space>, out_view<B, bf16, 2>)) \
  X(void linear<B, bf16, bf16, float>(const B&, tensor_view<bf16, 2, B::memory_space>, tensor_view<bf16, 2, B::memory_space>, out_view<B, float, 2>)) \
  X(void linear<B, bf16, bf16, bf16>(const B&, tensor_view<bf16, 2, B::memory_space>, tensor_view<bf16, 2, B::memory_space>, out_view<B, bf16, 2>)) \
  X(void linear<B, bf16, const bf16, float>(const B&, tensor_view<bf16, 2, B::memory_space>, tensor_view<const bf16, 2, B::memory_space>, out_view<B, float, 2>)) \
  X(void linear<B, bf16, const bf16, bf16>(const B&, tensor_view<bf16, 2, B::memory_space>, tensor_view<const bf16, 2, B::memory_space>, out_view<B, bf16, 2>)) \
  X(void linear<B, const bf16, float, float>(const B&, tensor_view<const bf16, 2, B::memory_space>, tensor_view<float, 2, B::memory_space>, out_view<B, float, 2>)) \
  X(void linear<B, const bf16, float, bf16>(const B&, tensor_view<const bf16, 2, B::memory_space>, tensor_view<float, 2, B::memory_space>, out_view<B, bf16, 2>)) \
  X(void linear<B, const bf16, const float, float>(const B&, tensor_view<const bf16, 2, B::memory_space>, tensor_view<const float, 2, B::memory_space>, out_view<B, float, 2>)) \
  X(void linear<B, const bf16, const float, bf16>(const B&, tensor_view<const bf16, 2, B::memory_space>, tensor_view<const float, 2, B::memory_space>, out_view<B, bf16, 2>)) \
  X(void linear<B, const bf16, bf16, float>(const B&, tensor_view<const bf16, 2, B::memory_space>, tensor_view<bf16, 2, B::memory_space>, out_view<B, float, 2>)) \
  X(void linear<B, const bf16, bf16, bf16>(const B&, tensor_view<const bf16, 2, B::memory_space>, tensor_view<bf16, 2, B::memory_space>, out_view<B, bf16, 2>)) \
  X(void linear<B, const bf16, const bf16, float>(const B&, tensor_view<const bf16, 2, B::memory_space>, tensor_view<const bf16, 2, B::memory_space>, out_view<B, float, 2>)) \
  X(void linear<B, const bf16, const bf16, bf16>(const B&, tensor_view<const bf16, 2, B::memory_space>, tensor_view<const bf16, 2, B::memory_space>, out_view<B, bf16, 2>))
