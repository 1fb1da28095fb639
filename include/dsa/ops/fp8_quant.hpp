// FP8 (E4M3) quantization and dequantization of activations (1 x group blocks) and weights
// (128 x 128 blocks). The arithmetic is in dsa/numerics/fp8_quant.hpp.
#pragma once

#include <string>
#include <string_view>
#include <type_traits>

#include "dsa/core/aliasing.hpp"
#include "dsa/core/backend.hpp"
#include "dsa/core/checked_math.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/op_instances.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/fp8_quant.hpp"

DSA_NAMESPACE_BEGIN

struct act_quant_op {};
struct act_dequant_op {};
struct weight_quant_op {};
struct weight_dequant_op {};

/// act_quant's options: the scale format and the group length along the last dimension.
struct act_quant_config {
  scale_format format = scale_format::ue8m0;
  index_t group_size = 128;
};

namespace detail {

template <class T>
inline constexpr bool is_quant_source_type = std::is_same_v<T, float> || std::is_same_v<T, bf16>;

inline void check_group_size(std::string_view op, std::string_view name, index_t group_size, index_t cols) {
  if (group_size <= 0) fail(op, name, group_size, "a positive group length");
  if (cols % group_size != 0) {
    fail(op, "x.extent(1)", cols, "a multiple of the group size " + std::to_string(group_size));
  }
}

template <class V>
void check_matrix(std::string_view op, std::string_view name, const V& v) {
  check_valid(op, name, v);
  check_inner_contiguous(op, name, v);
}

}  // namespace detail

/// Quantizes x [rows, cols] to e4m3 codes q [rows, cols] with one fp32 scale per 1 x group_size
/// group, s [rows, cols / group_size]: x ~ q * s. T is float or bf16. cols must be a multiple of
/// cfg.group_size.
///
/// The element type is deduced from x (a view of T or of const T); nothing else names it.
template <backend B, class XT>
void act_quant(const B& be, tensor_view<XT, 2, typename B::memory_space> x, out_view<B, fp8_e4m3, 2> q,
               out_view<B, float, 2> s, act_quant_config cfg = {}) {
  using T = std::remove_const_t<XT>;
  static_assert(detail::is_quant_source_type<T>, "dsa::act_quant: T must be float or dsa::bf16");
  constexpr std::string_view op = "act_quant";
  detail::check_matrix(op, "x", x);
  detail::check_matrix(op, "q", q);
  detail::check_matrix(op, "s", s);
  if (cfg.format != scale_format::ue8m0 && cfg.format != scale_format::fp32) {
    fail(op, "cfg.format", static_cast<int>(cfg.format), "scale_format::ue8m0 or scale_format::fp32");
  }
  detail::check_group_size(op, "cfg.group_size", cfg.group_size, x.extent(1));
  check_extent(op, "q", q, 0, x.extent(0), "x.extent(0)");
  check_extent(op, "q", q, 1, x.extent(1), "x.extent(1)");
  check_extent(op, "s", s, 0, x.extent(0), "x.extent(0)");
  check_extent(op, "s", s, 1, x.extent(1) / cfg.group_size, "x.extent(1) / cfg.group_size");
  if (x.empty()) return;
  detail::check_disjoint_rows(op, "q", q);
  detail::check_no_overlap(op, "q", q, "x", x, false);
  detail::check_disjoint_rows(op, "s", s);
  detail::check_no_overlap(op, "s", s, "x", x, false);
  detail::check_no_overlap(op, "s", s, "q", q, false);
  dispatch<act_quant_op>(be, tensor_view<const T, 2, typename B::memory_space>(x), q, s, cfg);
}

/// y = q * s with one scale per 1 x group_size group: q [rows, cols], s [rows, cols / group_size],
/// y [rows, cols] of float or bf16 (the fp32 product rounded once).
template <backend B, class T>
void act_dequant(const B& be, in_view<B, fp8_e4m3, 2> q, in_view<B, float, 2> s, out_view<B, T, 2> y,
                 index_t group_size = 128) {
  static_assert(detail::is_quant_source_type<T>, "dsa::act_dequant: T must be float or dsa::bf16");
  constexpr std::string_view op = "act_dequant";
  detail::check_matrix(op, "q", q);
  detail::check_matrix(op, "s", s);
  detail::check_matrix(op, "y", y);
  if (group_size <= 0) fail(op, "group_size", group_size, "a positive group length");
  if (q.extent(1) % group_size != 0) {
    fail(op, "q.extent(1)", q.extent(1), "a multiple of the group size " + std::to_string(group_size));
  }
  check_extent(op, "s", s, 0, q.extent(0), "q.extent(0)");
  check_extent(op, "s", s, 1, q.extent(1) / group_size, "q.extent(1) / group_size");
  check_extent(op, "y", y, 0, q.extent(0), "q.extent(0)");
  check_extent(op, "y", y, 1, q.extent(1), "q.extent(1)");
  if (q.empty()) return;
  detail::check_disjoint_rows(op, "y", y);
  detail::check_no_overlap(op, "y", y, "q", q, false);
  detail::check_no_overlap(op, "y", y, "s", s, false);
  dispatch<act_dequant_op>(be, q, s, y, group_size);
}

/// Quantizes w [rows, cols] to e4m3 codes q [rows, cols] with one fp32 scale per 128 x 128 block
/// (ragged at the right and bottom edges), s [ceil(rows / 128), ceil(cols / 128)]:
/// s = max(amax, 1e-8) / 448, q = e4m3(w / s); s is the checkpoint's weight_scale_inv.
/// The element type is deduced from w (a view of T or of const T).
template <backend B, class WT>
void weight_quant(const B& be, tensor_view<WT, 2, typename B::memory_space> w, out_view<B, fp8_e4m3, 2> q,
                  out_view<B, float, 2> s) {
  using T = std::remove_const_t<WT>;
  static_assert(detail::is_quant_source_type<T>, "dsa::weight_quant: T must be float or dsa::bf16");
  constexpr std::string_view op = "weight_quant";
  detail::check_matrix(op, "w", w);
  detail::check_matrix(op, "q", q);
  detail::check_matrix(op, "s", s);
  check_extent(op, "q", q, 0, w.extent(0), "w.extent(0)");
  check_extent(op, "q", q, 1, w.extent(1), "w.extent(1)");
  check_extent(op, "s", s, 0, ceil_div(w.extent(0), weight_quant_block), "ceil(w.extent(0) / 128)");
  check_extent(op, "s", s, 1, ceil_div(w.extent(1), weight_quant_block), "ceil(w.extent(1) / 128)");
  if (w.empty()) return;
  detail::check_disjoint_rows(op, "q", q);
  detail::check_no_overlap(op, "q", q, "w", w, false);
  detail::check_disjoint_rows(op, "s", s);
  detail::check_no_overlap(op, "s", s, "w", w, false);
  detail::check_no_overlap(op, "s", s, "q", q, false);
  dispatch<weight_quant_op>(be, tensor_view<const T, 2, typename B::memory_space>(w), q, s);
}

/// w = q * s with one scale per 128 x 128 block: q [rows, cols], s [ceil(rows / 128),
/// ceil(cols / 128)], w [rows, cols] of float or bf16 (the fp32 product rounded once).
template <backend B, class T>
void weight_dequant(const B& be, in_view<B, fp8_e4m3, 2> q, in_view<B, float, 2> s, out_view<B, T, 2> w) {
  static_assert(detail::is_quant_source_type<T>, "dsa::weight_dequant: T must be float or dsa::bf16");
  constexpr std::string_view op = "weight_dequant";
  detail::check_matrix(op, "q", q);
  detail::check_matrix(op, "s", s);
  detail::check_matrix(op, "w", w);
  check_extent(op, "s", s, 0, ceil_div(q.extent(0), weight_quant_block), "ceil(q.extent(0) / 128)");
  check_extent(op, "s", s, 1, ceil_div(q.extent(1), weight_quant_block), "ceil(q.extent(1) / 128)");
  check_extent(op, "w", w, 0, q.extent(0), "q.extent(0)");
  check_extent(op, "w", w, 1, q.extent(1), "q.extent(1)");
  if (q.empty()) return;
  detail::check_disjoint_rows(op, "w", w);
  detail::check_no_overlap(op, "w", w, "q", q, false);
  detail::check_no_overlap(op, "w", w, "s", s, false);
  dispatch<weight_dequant_op>(be, q, s, w);
}

DSA_NAMESPACE_END

// The type combinations dsa's own programs compile once per backend (dsa/core/op_instances.hpp).
#define DSA_FP8_QUANT_INSTANCES(X, B) \
  X(void act_quant<B, float>(const B&, tensor_view<float, 2, B::memory_space>, out_view<B, fp8_e4m3, 2>, out_view<B, float, 2>, act_quant_config)) \
  X(void act_quant<B, const float>(const B&, tensor_view<const float, 2, B::memory_space>, out_view<B, fp8_e4m3, 2>, out_view<B, float, 2>, act_quant_config)) \
  X(void act_quant<B, bf16>(const B&, tensor_view<bf16, 2, B::memory_space>, out_view<B, fp8_e4m3, 2>, out_view<B, float, 2>, act_quant_config)) \
  X(void act_quant<B, const bf16>(const B&, tensor_view<const bf16, 2, B::memory_space>, out_view<B, fp8_e4m3, 2>, out_view<B, float, 2>, act_quant_config)) \
  X(void act_dequant<B, float>(const B&, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, float, 2>, index_t)) \
  X(void act_dequant<B, bf16>(const B&, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, bf16, 2>, index_t)) \
  X(void weight_quant<B, float>(const B&, tensor_view<float, 2, B::memory_space>, out_view<B, fp8_e4m3, 2>, out_view<B, float, 2>)) \
  X(void weight_quant<B, const float>(const B&, tensor_view<const float, 2, B::memory_space>, out_view<B, fp8_e4m3, 2>, out_view<B, float, 2>)) \
  X(void weight_quant<B, bf16>(const B&, tensor_view<bf16, 2, B::memory_space>, out_view<B, fp8_e4m3, 2>, out_view<B, float, 2>)) \
  X(void weight_quant<B, const bf16>(const B&, tensor_view<const bf16, 2, B::memory_space>, out_view<B, fp8_e4m3, 2>, out_view<B, float, 2>)) \
  X(void weight_dequant<B, float>(const B&, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, float, 2>)) \
  X(void weight_dequant<B, bf16>(const B&, in_view<B, fp8_e4m3, 2>, in_view<B, float, 2>, out_view<B, bf16, 2>))
