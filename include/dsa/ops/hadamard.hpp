// dsa::hadamard_transform: y = (x * H_n) * scale over the rows of x.
//
// H_n is the Sylvester Hadamard matrix in natural order for n = 2^m, and H_c (x) H_{2^m} in the
// convention of fast-hadamard-transform for n = c * 2^m, c in {12, 20, 28, 40} (see
// dsa/numerics/hadamard.hpp). Arithmetic in fp32; the result is multiplied by `scale` in fp32 and
// rounded once to T. The indexer's rotate_activation is n = 128, scale = 128^-0.5, bf16.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "dsa/core/backend.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/hadamard.hpp"

DSA_NAMESPACE_BEGIN

struct hadamard_transform_op {};

namespace hadamard_detail {

// [lowest, highest] element address a view touches, as integers (comparing pointers into
// different objects with < is unspecified). Only meaningful for a non-empty view.
template <class View>
std::pair<std::uintptr_t, std::uintptr_t> view_address_span(const View& v) {
  using E = typename View::value_type;
  index_t lo = 0, hi = 0;
  for (std::size_t r = 0; r < View::rank(); ++r) {
    const index_t reach = (v.extent(r) - 1) * v.stride(r);
    if (reach < 0) lo += reach;
    else hi += reach;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(v.data_handle());
  const auto size = static_cast<std::uintptr_t>(sizeof(E));
  return {base + static_cast<std::uintptr_t>(lo) * size, base + static_cast<std::uintptr_t>(hi) * size + size - 1};
}

// True when two non-empty views' address spans intersect (a conservative overlap test).
template <class A, class B>
bool view_spans_intersect(const A& a, const B& b) {
  if (a.empty() || b.empty()) return false;
  const auto sa = view_address_span(a);
  const auto sb = view_address_span(b);
  return sa.first <= sb.second && sb.first <= sa.second;
}

}  // namespace hadamard_detail

/// y = (x * H_n) * scale for every row, n = x.extent(1); x and y may be the same view (in place).
/// T is float or bf16. Throws dsa::error for an unsupported n (see is_hadamard_size), mismatched
/// shapes, non-unit inner strides, output rows that overlap each other, or x and y that overlap
/// without being the same view.
template <backend B, class T>
void hadamard_transform(const B& be, in_view<B, T, 2> x, out_view<B, T, 2> y, float scale) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, bf16>,
                "dsa::hadamard_transform: T must be float or dsa::bf16");
  constexpr std::string_view op = "hadamard_transform";
  check_valid(op, "x", x);
  check_valid(op, "y", y);
  check_inner_contiguous(op, "x", x);
  check_inner_contiguous(op, "y", y);
  const index_t n = x.extent(1);
  if (!is_hadamard_size(n)) {
    fail(op, "x.extent(1)", n, "a power of two <= 32768, or 12, 20, 28 or 40 times one");
  }
  check_extent(op, "y", y, 0, x.extent(0), "x.extent(0)");
  check_extent(op, "y", y, 1, n, "x.extent(1)");
  if (y.extent(0) > 1 && (y.stride(0) < n && y.stride(0) > -n)) {
    fail(op, "y.stride(0)", y.stride(0), "|stride| >= " + std::to_string(n) + " (output rows must not overlap)");
  }
  const bool same_view = static_cast<const void*>(x.data_handle()) == static_cast<const void*>(y.data_handle()) &&
                         (x.extent(0) <= 1 || x.stride(0) == y.stride(0));
  if (!same_view && hadamard_detail::view_spans_intersect(x, y)) {
    fail(op, "y", "a view overlapping x", "either exactly x (in place) or memory disjoint from x");
  }
  if (x.empty()) return;
  dispatch<hadamard_transform_op>(be, tensor_view<const T, 2, typename B::memory_space>(x), y, scale);
}

DSA_NAMESPACE_END
