// The golden format of dsa_validate, whatever the backend: the result types (comparison,
// case_result, output_tensor), the case groups of a file, owned host tensors loaded from it with
// their checks (input_error), and the metrics of the golden criteria (../shared/golden/README.md).
//
// Portable (core + the safetensors reader; no op implementation, no Eigen), so that the cases
// (primitive_cases.hpp, model_cases.hpp) and the CUDA side (validate/cuda_cases.hpp) share one
// definition of each criterion.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dsa/core/error.hpp"
#include "dsa/core/quote.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/model/safetensors.hpp"
#include "validate/executor.hpp"

namespace dsa_validate {

using dsa::index_t;

/// The file does not hold what a group needs (a missing tensor, a wrong dtype, rank or shape).
/// dsa_validate reports it with exit code 2, unlike a failed comparison (exit code 1).
class input_error : public dsa::error {
 public:
  using dsa::error::error;
};

/// One expected tensor compared under one metric.
struct comparison {
  std::string tensor;  ///< name of the expected tensor, e.g. "sparse_mla.out"
  std::string metric;  ///< what max_error measures, e.g. "max abs err"
  double max_error = 0.0;
  double tolerance = 0.0;
  bool pass = false;
};

/// A computed output, named as the expected tensor it is compared with.
struct output_tensor {
  std::string name;
  dsa::dtype type = dsa::dtype::f32;
  std::vector<index_t> shape;
  std::vector<std::byte> bytes;
};

/// The outcome of one case group.
struct case_result {
  std::string name;                     ///< the group, e.g. "hadamard"
  std::vector<comparison> comparisons;  ///< all must pass
  std::vector<output_tensor> outputs;   ///< what the ops computed, for --dump
  bool pass() const {
    return !comparisons.empty() &&
           std::all_of(comparisons.begin(), comparisons.end(), [](const comparison& c) { return c.pass; });
  }
};

/// The known groups, in the order dsa_validate runs and prints them.
inline constexpr std::array<std::string_view, 9> known_groups = {
    "hadamard", "hadamard_f32", "act_quant", "weight_quant", "indexer", "topk", "sparse_mla", "kl_dense", "kl_sparse"};

/// The group of a tensor name: the text before the first '.'.
inline std::string_view group_of(std::string_view tensor) { return tensor.substr(0, tensor.find('.')); }

inline bool is_known_group(std::string_view g) {
  return std::find(known_groups.begin(), known_groups.end(), g) != known_groups.end();
}

/// Known groups that have at least one tensor in the file, in known_groups order.
inline std::vector<std::string> detect_groups(const dsa::safetensors_file& f) {
  std::set<std::string_view> present;
  for (const dsa::tensor_info& t : f.tensors()) present.insert(group_of(t.name));
  std::vector<std::string> v;
  for (std::string_view g : known_groups) {
    if (present.count(g)) v.emplace_back(g);
  }
  return v;
}

/// Tensor-name prefixes of the file that are not known groups (reported, then ignored).
inline std::vector<std::string> unknown_groups(const dsa::safetensors_file& f) {
  std::set<std::string> s;
  for (const dsa::tensor_info& t : f.tensors()) {
    if (!is_known_group(group_of(t.name))) s.emplace(group_of(t.name));
  }
  return {s.begin(), s.end()};
}

// ---- owned tensors --------------------------------------------------------------------------

/// The largest tensor dsa_validate allocates that is not read from the file itself.
inline constexpr std::uint64_t max_derived_bytes = std::uint64_t{256} << 20;

/// An owned, aligned, row-major host tensor. Inputs are copied out of the mapped file, so a file
/// whose data section is not aligned for T still validates.
template <class T, std::size_t R>
struct host_tensor {
  std::vector<T> data;
  std::array<index_t, R> shape{};

  /// Outputs and derived inputs (ranges) are sized from the file's shapes, which an empty tensor
  /// can make arbitrarily large ([10^12, 0] costs no bytes): refuse beyond max_derived_bytes
  /// rather than attempt terabytes.
  static host_tensor zeros(const std::array<index_t, R>& shape) {
    host_tensor t;
    t.shape = shape;
    std::uint64_t n = 1;
    bool overflow = false;
    for (index_t d : shape) overflow |= d < 0 || __builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n);
    if (overflow || n > max_derived_bytes / sizeof(T)) {
      throw input_error("dsa_validate: a tensor of shape " + dsa::format_shape(shape) +
                        " derived from the inputs; expected at most " + std::to_string(max_derived_bytes >> 20) +
                        " MiB (golden cases are small problems)");
    }
    t.data.assign(static_cast<std::size_t>(n), T{});
    return t;
  }
  index_t extent(std::size_t r) const { return shape[r]; }
  dsa::host_view<T, R> view() { return dsa::host_view<T, R>(data.data(), shape); }
  dsa::host_view<const T, R> view() const { return dsa::host_view<const T, R>(data.data(), shape); }
  std::span<const T> span() const { return data; }
};

inline std::string rank_name(std::size_t r) { return "rank " + std::to_string(r); }

/// "dsa_validate: 'FILE': group 'G': ", the start of every input_error about a group's tensors
/// (the path came from the command line, so it is quoted).
inline std::string group_where(const dsa::safetensors_file& f, std::string_view group) {
  return "dsa_validate: " + dsa::quoted(f.path().string()) + ": group " + dsa::quoted(group) + ": ";
}

/// Tensor `name` of `group` in the file, checked to be a T tensor of rank R; throws input_error
/// if it is missing or is not. Reads nothing: the replay reads such tensors a row at a time.
template <class T, std::size_t R>
const dsa::tensor_info& find_tensor(const dsa::safetensors_file& f, std::string_view group, const std::string& name) {
  constexpr dsa::dtype want = dsa::dtype_of<T>();
  const dsa::tensor_info* t = f.find(name);
  if (t == nullptr) {
    throw input_error(group_where(f, group) + "tensor " + dsa::quoted(name) + " is missing; expected " +
                      std::string(dsa::dtype_name(want)) + " of " + rank_name(R) +
                      " (docs/validation.md lists each group's tensors)");
  }
  if (t->type != want || t->rank() != R) {
    throw input_error(group_where(f, group) + "tensor " + dsa::quoted(name) + " = " + t->description() +
                      "; expected " + std::string(dsa::dtype_name(want)) + " of " + rank_name(R));
  }
  return *t;
}

/// Copies tensor `name` of `group` out of the file; throws input_error if it is missing or not
/// a T tensor of rank R.
template <class T, std::size_t R>
host_tensor<T, R> load(const dsa::safetensors_file& f, std::string_view group, const std::string& name) {
  const dsa::tensor_info& t = find_tensor<T, R>(f, group, name);
  host_tensor<T, R> h;
  for (std::size_t r = 0; r < R; ++r) h.shape[r] = t.shape[r];
  h.data.resize(static_cast<std::size_t>(t.numel()));
  const auto bytes = f.bytes(t);
  if (!bytes.empty()) std::memcpy(h.data.data(), bytes.data(), bytes.size());
  return h;
}

/// The expected tensor `name`, which must have exactly `shape` (derived from the inputs) and a
/// shape an array library can hold.
template <class T, std::size_t R>
host_tensor<T, R> load_expected(const dsa::safetensors_file& f, std::string_view group, const std::string& name,
                                const std::array<index_t, R>& shape) {
  const dsa::tensor_info& t = find_tensor<T, R>(f, group, name);
  // A shape with a zero extent costs the file nothing whatever its other extents ([0, 2^62] F32
  // is 0 bytes), but no array library holds one whose other extents multiply to more than
  // 2^63 - 1 bytes: NumPy refuses it even empty, so dsa.validate could not return the computed
  // output of that shape (a ValueError where dsa_validate printed PASS). Malformed, in both.
  std::uint64_t bytes = sizeof(T);
  bool fits = true;
  for (index_t e : t.shape) {
    if (e != 0) fits = fits && !__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(e), &bytes);
  }
  if (!fits || bytes > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    throw input_error(group_where(f, group) + "tensor " + dsa::quoted(name) + " shape = " +
                      dsa::format_shape(t.shape) + "; expected extents whose product (zero extents aside) times " +
                      std::to_string(sizeof(T)) + " bytes is at most 2^63 - 1 bytes (an array's largest)");
  }
  host_tensor<T, R> h = load<T, R>(f, group, name);
  if (h.shape != shape) {
    throw input_error(group_where(f, group) + "tensor " + dsa::quoted(name) + " shape = " +
                      dsa::format_shape(h.shape) + "; expected " + dsa::format_shape(shape) +
                      " (from the group's inputs)");
  }
  return h;
}

template <class T, std::size_t R>
output_tensor make_output(std::string name, const host_tensor<T, R>& t) {
  output_tensor o;
  o.name = std::move(name);
  o.type = dsa::dtype_of<T>();
  o.shape.assign(t.shape.begin(), t.shape.end());
  const auto b = std::as_bytes(t.span());
  o.bytes.assign(b.begin(), b.end());
  return o;
}

// ---- metrics --------------------------------------------------------------------------------

/// Distance in units in the last place between two bf16 values: 0 for equal bits (and for +0 vs
/// -0), infinity when exactly one is NaN, 0 when both are.
inline double bf16_ulp_distance(dsa::bf16 a, dsa::bf16 b) {
  const bool na = (a.bits & 0x7FFFu) > 0x7F80u;
  const bool nb = (b.bits & 0x7FFFu) > 0x7F80u;
  if (na || nb) return na && nb ? 0.0 : std::numeric_limits<double>::infinity();
  // Map sign-magnitude to a monotonic integer line, on which adjacent bf16 values differ by 1.
  auto line = [](std::uint16_t u) -> std::int32_t {
    const std::int32_t mag = u & 0x7FFF;
    return (u & 0x8000u) ? -mag : mag;
  };
  return std::abs(static_cast<double>(line(a.bits) - line(b.bits)));
}

/// Elements whose bits differ ("bit-exact": tolerance 0).
template <class T>
comparison compare_bits(std::string tensor, std::span<const T> got, std::span<const T> expected) {
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    mismatches += std::memcmp(&got[i], &expected[i], sizeof(T)) != 0 ? 1u : 0u;
  }
  return {std::move(tensor), "mismatches", static_cast<double>(mismatches), 0.0, mismatches == 0};
}

/// hadamard: bit-exact on at least 99.5% of the elements, the others within 1 bf16 ulp.
inline std::vector<comparison> compare_bf16_near_exact(const std::string& tensor, std::span<const dsa::bf16> got,
                                                       std::span<const dsa::bf16> expected,
                                                       double max_inexact_fraction = 0.005, double max_ulp = 1.0) {
  double worst = 0.0;
  std::size_t inexact = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = bf16_ulp_distance(got[i], expected[i]);
    worst = std::max(worst, d);
    inexact += d != 0.0 ? 1u : 0u;
  }
  const double fraction = got.empty() ? 0.0 : static_cast<double>(inexact) / static_cast<double>(got.size());
  return {{tensor, "max bf16 ulp", worst, max_ulp, worst <= max_ulp},
          {tensor, "inexact fraction", fraction, max_inexact_fraction, fraction <= max_inexact_fraction}};
}

/// Non-finite expected values must be matched exactly (same infinity, or NaN for NaN); a
/// non-finite computed value where a finite one is expected is a mismatch too.
inline comparison compare_nonfinite(std::string tensor, std::span<const float> got, std::span<const float> expected) {
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float g = got[i], e = expected[i];
    if (std::isfinite(e) && std::isfinite(g)) continue;
    const bool same = (std::isnan(e) && std::isnan(g)) || g == e;
    mismatches += same ? 0u : 1u;
  }
  return {std::move(tensor), "non-finite mismatches", static_cast<double>(mismatches), 0.0, mismatches == 0};
}

/// max |got - expected| over the elements where both are finite (compare_nonfinite covers the
/// rest).
inline comparison compare_abs(std::string tensor, std::span<const float> got, std::span<const float> expected,
                              double tolerance) {
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(expected[i])) continue;
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - static_cast<double>(expected[i])));
  }
  return {std::move(tensor), "max abs err", worst, tolerance, worst <= tolerance};
}

/// max over rows of max_j |got - expected| / scale_row, scale_row from `row_scale`; a row of
/// scale 0 must match exactly. Elements where either side is non-finite are skipped (see
/// compare_nonfinite).
inline comparison compare_row_relative(std::string tensor, std::string metric, std::span<const float> got,
                                       std::span<const float> expected, index_t rows, index_t cols,
                                       const std::vector<double>& row_scale, double tolerance) {
  double worst = 0.0;
  for (index_t r = 0; r < rows; ++r) {
    double err = 0.0;
    for (index_t c = 0; c < cols; ++c) {
      const auto i = static_cast<std::size_t>(r * cols + c);
      if (!std::isfinite(got[i]) || !std::isfinite(expected[i])) continue;
      err = std::max(err, std::abs(static_cast<double>(got[i]) - static_cast<double>(expected[i])));
    }
    const double s = row_scale[static_cast<std::size_t>(r)];
    const double rel = s > 0.0 ? err / s : (err > 0.0 ? std::numeric_limits<double>::infinity() : 0.0);
    worst = std::max(worst, rel);
  }
  return {std::move(tensor), std::move(metric), worst, tolerance, worst <= tolerance};
}

/// The metric of compare_nothing, which describe() in dsa_validate prints as such.
inline constexpr std::string_view empty_metric = "elements compared";

/// The comparison of an expected tensor with no elements: it compares nothing, so it fails
/// (max_error is the number of elements compared, 0; tolerance the least allowed, 1). Without it,
/// a golden file of empty tensors would pass every metric vacuously.
inline comparison compare_nothing(std::string tensor) {
  return {std::move(tensor), std::string(empty_metric), 0.0, 1.0, false};
}

/// |got - expected| / |expected| of a scalar (absolute when expected is 0); non-finite values
/// must match exactly.
inline comparison compare_scalar_relative(std::string tensor, float got, float expected, double tolerance) {
  double err;
  if (!std::isfinite(got) || !std::isfinite(expected)) {
    err =
        (got == expected || (std::isnan(got) && std::isnan(expected))) ? 0.0 : std::numeric_limits<double>::infinity();
  } else {
    const double d = std::abs(static_cast<double>(got) - static_cast<double>(expected));
    err = expected != 0.0f ? d / std::abs(static_cast<double>(expected)) : d;
  }
  return {std::move(tensor), "rel err", err, tolerance, err <= tolerance};
}

}  // namespace dsa_validate
