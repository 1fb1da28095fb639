// RMSNorm (with the fused residual add of DeepSeek's RMSNorm(x, residual)) and LayerNorm over
// the rows of a matrix: fp32 math, fp32 weights, bf16 output. Numerics in dsa/numerics/norm.hpp.
#pragma once

#include <string_view>
#include <type_traits>

#include "dsa/core/backend.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/op_instances.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/norm.hpp"
#include "dsa/ops/dense_checks.hpp"

DSA_NAMESPACE_BEGIN

struct rms_norm_op {};
struct add_rms_norm_op {};
struct layer_norm_op {};

namespace detail {

// The checks rms_norm and layer_norm share: x [t, d] with d >= 1, a [d] fp32 vector per
// parameter, y [t, d] bf16 that is either exactly x (in place) or disjoint from every input.
template <class XV, class YV>
void check_norm_rows(std::string_view op, const XV& x, const YV& y, float eps) {
  check_operand(op, "x", x);
  check_operand(op, "y", y);
  check_eps(op, eps);
  if (x.extent(1) < 1) fail(op, "x.extent(1)", x.extent(1), "at least 1 (the normalized features)");
  check_extent(op, "y", y, 0, x.extent(0), "x.extent(0), the rows");
  check_extent(op, "y", y, 1, x.extent(1), "x.extent(1), the features");
  detail::check_disjoint_rows(op, "y", y);
  detail::check_no_overlap(op, "y", y, "x", x, true);
}

template <class V>
void check_norm_param(std::string_view op, std::string_view name, const V& p, index_t d) {
  check_operand(op, name, p);
  check_extent(op, name, p, 0, d, "x.extent(1), the features");
}

}  // namespace detail

/// y = bf16(w * x / sqrt(mean(x^2) + eps)) over every row of x [t, d] (bf16 or float), weight
/// [d] fp32. y may be exactly x's memory (in place, bf16 x) or must be disjoint from the inputs.
/// eps must be positive and finite (DeepSeek: 1e-6).
template <backend B, class XT>
void rms_norm(const B& be, tensor_view<XT, 2, typename B::memory_space> x, in_view<B, float, 1> weight,
              out_view<B, bf16, 2> y, float eps = norm_default_eps) {
  static_assert(detail::is_bf16_or_float<XT>, "dsa::rms_norm: x must hold dsa::bf16 or float");
  using X = std::remove_const_t<XT>;
  using space = typename B::memory_space;
  constexpr std::string_view op = "rms_norm";
  const tensor_view<const X, 2, space> xc(x.data_handle(), x.extents(), x.strides());
  detail::check_norm_rows(op, xc, y, eps);
  detail::check_norm_param(op, "weight", weight, xc.extent(1));
  detail::check_no_overlap(op, "y", y, "weight", weight, false);
  if (y.empty()) return;
  dispatch<rms_norm_op>(be, xc, tensor_view<const float, 1, space>(weight), y, eps);
}

/// The residual block boundary of DeepSeek-V3.2: h = fl32(x + residual) per element, then
/// residual = bf16(h) (in place: the bf16 residual stream) and y = bf16(rms_norm(h)) computed
/// from the fp32 h. x, residual and y are [t, d] bf16, weight [d] fp32. y may be exactly x's
/// memory; residual must be disjoint from x and y.
template <backend B>
void add_rms_norm(const B& be, in_view<B, bf16, 2> x, out_view<B, bf16, 2> residual, in_view<B, float, 1> weight,
                  out_view<B, bf16, 2> y, float eps = norm_default_eps) {
  using space = typename B::memory_space;
  constexpr std::string_view op = "add_rms_norm";
  detail::check_norm_rows(op, x, y, eps);
  detail::check_operand(op, "residual", residual);
  check_extent(op, "residual", residual, 0, x.extent(0), "x.extent(0), the rows");
  check_extent(op, "residual", residual, 1, x.extent(1), "x.extent(1), the features");
  detail::check_disjoint_rows(op, "residual", residual);
  detail::check_norm_param(op, "weight", weight, x.extent(1));
  detail::check_no_overlap(op, "residual", residual, "x", x, false);
  detail::check_no_overlap(op, "residual", residual, "y", y, false);
  detail::check_no_overlap(op, "residual", residual, "weight", weight, false);
  detail::check_no_overlap(op, "y", y, "weight", weight, false);
  if (y.empty()) return;
  dispatch<add_rms_norm_op>(be, x, residual, tensor_view<const float, 1, space>(weight), y, eps);
}

/// y = bf16((x - mean) / sqrt(var + eps) * weight + bias) over every row of x [t, d] (bf16 or
/// float; biased variance as F.layer_norm), weight and bias [d] fp32. y may be exactly x's
/// memory (bf16 x) or must be disjoint from the inputs. eps must be positive and finite.
template <backend B, class XT>
void layer_norm(const B& be, tensor_view<XT, 2, typename B::memory_space> x, in_view<B, float, 1> weight,
                in_view<B, float, 1> bias, out_view<B, bf16, 2> y, float eps = norm_default_eps) {
  static_assert(detail::is_bf16_or_float<XT>, "dsa::layer_norm: x must hold dsa::bf16 or float");
  using X = std::remove_const_t<XT>;
  using space = typename B::memory_space;
  constexpr std::string_view op = "layer_norm";
  const tensor_view<const X, 2, space> xc(x.data_handle(), x.extents(), x.strides());
  detail::check_norm_rows(op, xc, y, eps);
  detail::check_norm_param(op, "weight", weight, xc.extent(1));
  detail::check_norm_param(op, "bias", bias, xc.extent(1));
  detail::check_no_overlap(op, "y", y, "weight", weight, false);
  detail::check_no_overlap(op, "y", y, "bias", bias, false);
  if (y.empty()) return;
  dispatch<layer_norm_op>(be, xc, tensor_view<const float, 1, space>(weight), tensor_view<const float, 1, space>(bias),
                          y, eps);
}

DSA_NAMESPACE_END

// The type combinations dsa's own programs compile once per backend (dsa/core/op_instances.hpp).
#define DSA_NORM_INSTANCES(X, B) \
  X(void rms_norm<B, float>(const B&, tensor_view<float, 2, B::memory_space>, in_view<B, float, 1>, out_view<B, bf16, 2>, float)) \
  X(void rms_norm<B, const float>(const B&, tensor_view<const float, 2, B::memory_space>, in_view<B, float, 1>, out_view<B, bf16, 2>, float)) \
  X(void rms_norm<B, bf16>(const B&, tensor_view<bf16, 2, B::memory_space>, in_view<B, float, 1>, out_view<B, bf16, 2>, float)) \
  X(void rms_norm<B, const bf16>(const B&, tensor_view<const bf16, 2, B::memory_space>, in_view<B, float, 1>, out_view<B, bf16, 2>, float)) \
  X(void add_rms_norm<B>(const B&, in_view<B, bf16, 2>, out_view<B, bf16, 2>, in_view<B, float, 1>, out_view<B, bf16, 2>, float)) \
  X(void layer_norm<B, float>(const B&, tensor_view<float, 2, B::memory_space>, in_view<B, float, 1>, in_view<B, float, 1>, out_view<B, bf16, 2>, float)) \
  X(void layer_norm<B, const float>(const B&, tensor_view<const float, 2, B::memory_space>, in_view<B, float, 1>, in_view<B, float, 1>, out_view<B, bf16, 2>, float)) \
  X(void layer_norm<B, bf16>(const B&, tensor_view<bf16, 2, B::memory_space>, in_view<B, float, 1>, in_view<B, float, 1>, out_view<B, bf16, 2>, float)) \
  X(void layer_norm<B, const bf16>(const B&, tensor_view<const bf16, 2, B::memory_space>, in_view<B, float, 1>, in_view<B, float, 1>, out_view<B, bf16, 2>, float))
