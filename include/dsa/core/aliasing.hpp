// Aliasing checks the op front-ends share: output rows that overlap each other, and outputs that
// overlap an input without being exactly it (in-place use). Addresses are compared as integers
// and never dereferenced, so the checks also work for device views.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"

DSA_NAMESPACE_BEGIN
namespace detail {

// [lowest, highest] byte address a non-empty view touches, as integers (comparing pointers into
// different objects with < is unspecified). Addresses only: never dereferenced, so this works
// for device views too.
template <class View>
std::pair<std::uintptr_t, std::uintptr_t> byte_span(const View& v) {
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

/// True when two non-empty views' address ranges intersect (a conservative overlap test).
template <class A, class B>
bool may_overlap(const A& a, const B& b) {
  if (a.empty() || b.empty()) return false;
  const auto sa = byte_span(a);
  const auto sb = byte_span(b);
  return sa.first <= sb.second && sb.first <= sa.second;
}

/// True when both views address exactly the same elements in the same order (in-place use).
template <class A, class B>
bool same_elements(const A& a, const B& b) {
  if constexpr (sizeof(typename A::value_type) != sizeof(typename B::value_type)) {
    return false;
  } else {
    if (static_cast<const void*>(a.data_handle()) != static_cast<const void*>(b.data_handle())) return false;
    for (std::size_t r = 0; r < A::rank(); ++r) {
      if (a.extent(r) != b.extent(r)) return false;
      if (a.extent(r) > 1 && a.stride(r) != b.stride(r)) return false;
    }
    return true;
  }
}

/// Throws if output `out` overlaps input `in`; when `in_place_ok`, exact aliasing is allowed.
template <class Out, class In>
void check_no_overlap(std::string_view op, std::string_view out_name, const Out& out, std::string_view in_name,
                      const In& in, bool in_place_ok) {
  if (in_place_ok && same_elements(out, in)) return;
  if (may_overlap(out, in)) {
    const std::string what = in_place_ok ? "either exactly " + std::string(in_name) + " (in place) or memory disjoint from it"
                                         : "memory disjoint from " + std::string(in_name);
    fail(op, out_name, "a view overlapping " + std::string(in_name), what);
  }
}

/// Throws unless the unit-stride rows of an output view (all dimensions but the last) are
/// pairwise disjoint: the outer dimensions, ordered by |stride|, must nest without overlap.
template <class View>
void check_disjoint_rows(std::string_view op, std::string_view name, const View& v) {
  constexpr std::size_t R = View::rank();
  const index_t row = v.extent(R - 1);
  if (v.empty() || row == 0) return;
  // Outer dimensions that actually repeat, by increasing |stride| (insertion sort: R is tiny).
  std::size_t dims[R];
  std::size_t n = 0;
  for (std::size_t r = 0; r + 1 < R; ++r) {
    if (v.extent(r) <= 1) continue;
    std::size_t i = n++;
    const index_t s = v.stride(r) < 0 ? -v.stride(r) : v.stride(r);
    while (i > 0 && (v.stride(dims[i - 1]) < 0 ? -v.stride(dims[i - 1]) : v.stride(dims[i - 1])) > s) {
      dims[i] = dims[i - 1];
      --i;
    }
    dims[i] = r;
  }
  index_t reach = row;  // elements spanned by one block of the dimensions handled so far
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t r = dims[i];
    const index_t s = v.stride(r) < 0 ? -v.stride(r) : v.stride(r);
    if (s < reach) {
      fail(op, std::string(name) + ".stride(" + std::to_string(r) + ")", v.stride(r),
           "|stride| >= " + std::to_string(reach) + " (output rows must not overlap)");
    }
    reach = (v.extent(r) - 1) * s + reach;
  }
}

}  // namespace detail
DSA_NAMESPACE_END
