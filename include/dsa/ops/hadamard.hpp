// dsa::hadamard_transform: y = (x * H_n) * scale over the rows of x.
//
// H_n is the Sylvester Hadamard matrix in natural order for n = 2^m, and H_c (x) H_{2^m} in the
// convention of fast-hadamard-transform for n = c * 2^m, c in {12, 20, 28, 40} (see
// dsa/numerics/hadamard.hpp). Arithmetic in fp32; the result is multiplied by `scale` in fp32 and
// rounded once to T. The indexer's rotate_activation is n = 128, scale = 128^-0.5, bf16.
#pragma once

#include <cmath>
#include <string_view>
#include <type_traits>

#include "dsa/core/aliasing.hpp"
#include "dsa/core/backend.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/op_instances.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/hadamard.hpp"

DSA_NAMESPACE_BEGIN

struct hadamard_transform_op {};

/// y = (x * H_n) * scale for every row, n = x.extent(1); x and y may be the same view (in place).
/// T is float or bf16. Throws dsa::error for a non-finite scale, an unsupported n (see
/// is_hadamard_size), mismatched shapes, non-unit inner strides, output rows that overlap each
/// other, or x and y that overlap without being the same view.
template <backend B, class T>
void hadamard_transform(const B& be, in_view<B, T, 2> x, out_view<B, T, 2> y, float scale) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, bf16>,
                "dsa::hadamard_transform: T must be float or dsa::bf16");
  constexpr std::string_view op = "hadamard_transform";
  // A NaN or infinite scale would turn every output into NaN/inf without a word (a scale of 0 or a
  // negative one is a well-defined transform and stays allowed). Checked before the shapes, so
  // even an empty batch refuses it, as every other op refuses a non-finite scale or eps.
  check(std::isfinite(scale), op, "scale", scale, "a finite number");
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
  detail::check_disjoint_rows(op, "y", y);
  detail::check_no_overlap(op, "y", y, "x", x, true);
  if (x.empty()) return;
  dispatch<hadamard_transform_op>(be, tensor_view<const T, 2, typename B::memory_space>(x), y, scale);
}

DSA_NAMESPACE_END

// The type combinations dsa's own programs compile once per backend (dsa/core/op_instances.hpp).
#define DSA_HADAMARD_INSTANCES(X, B) \
  X(void hadamard_transform<B, float>(const B&, in_view<B, float, 2>, out_view<B, float, 2>, float)) \
  X(void hadamard_transform<B, bf16>(const B&, in_view<B, bf16, 2>, out_view<B, bf16, 2>, float))
