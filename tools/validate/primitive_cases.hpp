// The primitive golden cases of dsa_validate: one function per case group of a golden-format
// safetensors file (docs/validation.md), each running the group's inputs through the public dsa
// ops and comparing with the group's expected outputs under the group's tolerance criterion
// (the criteria of ../shared/golden/README.md, implemented exactly).
//
// Used by tools/dsa_validate.cpp and by tests/tools/test_primitive_cases.cpp (the golden test of
// every primitive). Host-memory backends only: a device backend needs staging copies that this
// header does not do.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/cpu/hadamard.hpp"
#include "dsa/cpu/indexer_kl_loss.hpp"
#include "dsa/cpu/lightning_indexer.hpp"
#include "dsa/cpu/sparse_mla_attention.hpp"
#include "dsa/cpu/topk.hpp"
#include "dsa/model/safetensors.hpp"
#include "dsa/ops/fp8_quant.hpp"
#include "dsa/ops/hadamard.hpp"
#include "dsa/ops/indexer_kl_loss.hpp"
#include "dsa/ops/lightning_indexer.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"
#include "dsa/ops/topk.hpp"

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

/// Copies tensor `name` of `group` out of the file; throws input_error if it is missing or not
/// a T tensor of rank R.
template <class T, std::size_t R>
host_tensor<T, R> load(const dsa::safetensors_file& f, std::string_view group, const std::string& name) {
  constexpr dsa::dtype want = dsa::dtype_of<T>();
  const std::string where = "dsa_validate: " + f.path().string() + ": group '" + std::string(group) + "': ";
  const dsa::tensor_info* t = f.find(name);
  if (t == nullptr) {
    throw input_error(where + "tensor '" + name + "' is missing; expected " + std::string(dsa::dtype_name(want)) +
                      " of " + rank_name(R) + " (docs/validation.md lists each group's tensors)");
  }
  if (t->type != want || t->rank() != R) {
    throw input_error(where + "tensor '" + name + "' = " + t->description() + "; expected " +
                      std::string(dsa::dtype_name(want)) + " of " + rank_name(R));
  }
  host_tensor<T, R> h;
  for (std::size_t r = 0; r < R; ++r) h.shape[r] = t->shape[r];
  h.data.resize(static_cast<std::size_t>(t->numel()));
  const auto bytes = f.bytes(*t);
  if (!bytes.empty()) std::memcpy(h.data.data(), bytes.data(), bytes.size());
  return h;
}

/// The expected tensor `name`, which must have exactly `shape` (derived from the inputs).
template <class T, std::size_t R>
host_tensor<T, R> load_expected(const dsa::safetensors_file& f, std::string_view group, const std::string& name,
                                const std::array<index_t, R>& shape) {
  host_tensor<T, R> h = load<T, R>(f, group, name);
  if (h.shape != shape) {
    throw input_error("dsa_validate: " + f.path().string() + ": group '" + std::string(group) + "': tensor '" + name +
                      "' shape = " + dsa::format_shape(h.shape) + "; expected " + dsa::format_shape(shape) +
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

// ---- the groups -----------------------------------------------------------------------------

template <class B>
concept host_backend = dsa::backend<B> && std::same_as<typename B::memory_space, dsa::host_space>;

/// hadamard: x BF16 [rows, n] -> y BF16 = bf16((x · H_n) · n^-0.5), fp32 butterflies (the indexer's
/// rotate_activation for n = 128). Criterion: bit-exact on >= 99.5% of the elements, the others
/// within 1 bf16 ulp.
template <host_backend B>
case_result run_hadamard(const B& be, const dsa::safetensors_file& f) {
  constexpr std::string_view g = "hadamard";
  const auto x = load<dsa::bf16, 2>(f, g, "hadamard.x");
  const auto expected = load_expected<dsa::bf16, 2>(f, g, "hadamard.y", x.shape);
  auto y = host_tensor<dsa::bf16, 2>::zeros(x.shape);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(x.extent(1))));
  dsa::hadamard_transform(be, x.view(), y.view(), scale);
  case_result r{std::string(g), compare_bf16_near_exact("hadamard.y", y.span(), expected.span()), {}};
  r.outputs.push_back(make_output("hadamard.y", y));
  return r;
}

/// hadamard_f32: x F32 [rows, n] -> y F32 = x · H_n, unnormalised. Criterion: per row,
/// max |error| <= 1e-5 x the L2 norm of the input row.
template <host_backend B>
case_result run_hadamard_f32(const B& be, const dsa::safetensors_file& f) {
  constexpr std::string_view g = "hadamard_f32";
  const auto x = load<float, 2>(f, g, "hadamard_f32.x");
  const auto expected = load_expected<float, 2>(f, g, "hadamard_f32.y", x.shape);
  auto y = host_tensor<float, 2>::zeros(x.shape);
  dsa::hadamard_transform(be, x.view(), y.view(), 1.0f);
  std::vector<double> norm(static_cast<std::size_t>(x.extent(0)));
  for (index_t i = 0; i < x.extent(0); ++i) {
    double s = 0.0;
    for (index_t j = 0; j < x.extent(1); ++j) {
      const double v = x.data[static_cast<std::size_t>(i * x.extent(1) + j)];
      s += v * v;
    }
    norm[static_cast<std::size_t>(i)] = std::sqrt(s);
  }
  case_result r{std::string(g), {}, {}};
  r.comparisons.push_back(compare_row_relative("hadamard_f32.y", "max abs err / L2 norm of x row", y.span(),
                                               expected.span(), x.extent(0), x.extent(1), norm, 1e-5));
  r.comparisons.push_back(compare_nonfinite("hadamard_f32.y", y.span(), expected.span()));
  r.outputs.push_back(make_output("hadamard_f32.y", y));
  return r;
}

/// act_quant: x BF16 [rows, cols] -> for each scale format present in the file (ue8m0, fp32):
/// <fmt>.q F8_E4M3 [rows, cols], <fmt>.s F32 [rows, cols / 128]. Criterion: bit-exact.
template <host_backend B>
case_result run_act_quant(const B& be, const dsa::safetensors_file& f) {
  constexpr std::string_view g = "act_quant";
  const auto x = load<dsa::bf16, 2>(f, g, "act_quant.x");
  case_result r{std::string(g), {}, {}};
  const std::pair<std::string, dsa::scale_format> formats[] = {{"ue8m0", dsa::scale_format::ue8m0},
                                                               {"fp32", dsa::scale_format::fp32}};
  for (const auto& [fmt, format] : formats) {
    const std::string qn = "act_quant." + fmt + ".q", sn = "act_quant." + fmt + ".s";
    if (!f.contains(qn) && !f.contains(sn)) continue;
    constexpr index_t group = 128;
    if (x.extent(1) % group != 0) {
      throw input_error("dsa_validate: " + f.path().string() + ": group 'act_quant': tensor 'act_quant.x' shape = " +
                        dsa::format_shape(x.shape) + "; expected a multiple of 128 columns (1 x 128 groups)");
    }
    const auto eq = load_expected<dsa::fp8_e4m3, 2>(f, g, qn, x.shape);
    const auto es = load_expected<float, 2>(f, g, sn, {x.extent(0), x.extent(1) / group});
    auto q = host_tensor<dsa::fp8_e4m3, 2>::zeros(eq.shape);
    auto s = host_tensor<float, 2>::zeros(es.shape);
    dsa::act_quant_config cfg;
    cfg.group_size = group;
    cfg.format = format;
    dsa::act_quant(be, x.view(), q.view(), s.view(), cfg);
    r.comparisons.push_back(compare_bits(qn, q.span(), eq.span()));
    r.comparisons.push_back(compare_bits(sn, s.span(), es.span()));
    r.outputs.push_back(make_output(qn, q));
    r.outputs.push_back(make_output(sn, s));
  }
  if (r.comparisons.empty()) {
    throw input_error("dsa_validate: " + f.path().string() +
                      ": group 'act_quant': no expected outputs; expected act_quant.ue8m0.{q,s} and/or "
                      "act_quant.fp32.{q,s}");
  }
  return r;
}

/// weight_quant: w F32 [rows, cols] -> q F8_E4M3 [rows, cols], s F32 [ceil(rows/128),
/// ceil(cols/128)]. Criterion: bit-exact.
template <host_backend B>
case_result run_weight_quant(const B& be, const dsa::safetensors_file& f) {
  constexpr std::string_view g = "weight_quant";
  const auto w = load<float, 2>(f, g, "weight_quant.w");
  const auto eq = load_expected<dsa::fp8_e4m3, 2>(f, g, "weight_quant.q", w.shape);
  const auto es =
      load_expected<float, 2>(f, g, "weight_quant.s", {(w.extent(0) + 127) / 128, (w.extent(1) + 127) / 128});
  auto q = host_tensor<dsa::fp8_e4m3, 2>::zeros(eq.shape);
  auto s = host_tensor<float, 2>::zeros(es.shape);
  dsa::weight_quant(be, w.view(), q.view(), s.view());
  case_result r{std::string(g), {}, {}};
  r.comparisons.push_back(compare_bits("weight_quant.q", q.span(), eq.span()));
  r.comparisons.push_back(compare_bits("weight_quant.s", s.span(), es.span()));
  r.outputs.push_back(make_output("weight_quant.q", q));
  r.outputs.push_back(make_output("weight_quant.s", s));
  return r;
}

/// indexer: q F8_E4M3 [m, H, d], w F32 [m, H], k F8_E4M3 [n, d], k_scale F32 [n] -> score F32
/// [m, n] over every key (optional indexer.ranges I32 [m, 2] restricts rows). Criterion: per row,
/// max |error| <= 1e-5 x max |expected score| of the row; infinities exact.
template <host_backend B>
case_result run_indexer(const B& be, const dsa::safetensors_file& f) {
  constexpr std::string_view g = "indexer";
  const auto q = load<dsa::fp8_e4m3, 3>(f, g, "indexer.q");
  const auto w = load<float, 2>(f, g, "indexer.w");
  const auto k = load<dsa::fp8_e4m3, 2>(f, g, "indexer.k");
  const auto k_scale = load<float, 1>(f, g, "indexer.k_scale");
  const index_t m = q.extent(0), n = k.extent(0);
  host_tensor<std::int32_t, 2> ranges;
  if (f.contains("indexer.ranges")) {
    ranges = load<std::int32_t, 2>(f, g, "indexer.ranges");
  } else {
    ranges = host_tensor<std::int32_t, 2>::zeros({m, 2});
    for (index_t t = 0; t < m; ++t) ranges.data[static_cast<std::size_t>(2 * t + 1)] = static_cast<std::int32_t>(n);
  }
  const auto expected = load_expected<float, 2>(f, g, "indexer.score", {m, n});
  auto score = host_tensor<float, 2>::zeros({m, n});
  dsa::lightning_indexer_scores(be, q.view(), w.view(), k.view(), k_scale.view(), ranges.view(), score.view());
  std::vector<double> row_max(static_cast<std::size_t>(m), 0.0);
  for (index_t t = 0; t < m; ++t) {
    for (index_t s = 0; s < n; ++s) {
      const float e = expected.data[static_cast<std::size_t>(t * n + s)];
      if (std::isfinite(e))
        row_max[static_cast<std::size_t>(t)] = std::max<double>(row_max[static_cast<std::size_t>(t)], std::abs(e));
    }
  }
  case_result r{std::string(g), {}, {}};
  r.comparisons.push_back(compare_row_relative("indexer.score", "max abs err / max abs row score", score.span(),
                                               expected.span(), m, n, row_max, 1e-5));
  r.comparisons.push_back(compare_nonfinite("indexer.score", score.span(), expected.span()));
  r.outputs.push_back(make_output("indexer.score", score));
  return r;
}

/// topk: score F32 [m, n], ends I32 [m], k I32 [1] -> indices I32 [m, k]: the k best of
/// [0, ends[t]), ascending, -1 padded. Criterion: exact.
template <host_backend B>
case_result run_topk(const B& be, const dsa::safetensors_file& f) {
  constexpr std::string_view g = "topk";
  const auto score = load<float, 2>(f, g, "topk.score");
  const auto ends = load<std::int32_t, 1>(f, g, "topk.ends");
  const auto kt = load<std::int32_t, 1>(f, g, "topk.k");
  const index_t m = score.extent(0);
  if (kt.extent(0) != 1) {
    throw input_error("dsa_validate: " + f.path().string() +
                      ": group 'topk': tensor 'topk.k' shape = " + dsa::format_shape(kt.shape) + "; expected [1]");
  }
  if (ends.extent(0) != m) {
    throw input_error("dsa_validate: " + f.path().string() + ": group 'topk': tensor 'topk.ends' shape = " +
                      dsa::format_shape(ends.shape) + "; expected [" + std::to_string(m) + "] (one end per score row)");
  }
  const index_t k = kt.data[0];
  auto ranges = host_tensor<std::int32_t, 2>::zeros({m, 2});
  for (index_t t = 0; t < m; ++t)
    ranges.data[static_cast<std::size_t>(2 * t + 1)] = ends.data[static_cast<std::size_t>(t)];
  const auto expected = load_expected<std::int32_t, 2>(f, g, "topk.indices", {m, std::max<index_t>(k, 0)});
  auto indices = host_tensor<std::int32_t, 2>::zeros(expected.shape);
  dsa::topk_indices(be, score.view(), ranges.view(), k, indices.view());
  case_result r{std::string(g), {}, {}};
  r.comparisons.push_back(compare_bits("topk.indices", indices.span(), expected.span()));
  r.outputs.push_back(make_output("topk.indices", indices));
  return r;
}

/// sparse_mla: q BF16 [s, h, d_qk], kv BF16 [n, d_qk], indices I32 [s, k] (-1 = unused), scale
/// F32 [1] -> out F32 [s, h, d_v] (d_v from out's shape), lse F32 [s, h]. Criterion: abs 2e-3 on
/// out, 1e-4 on lse, infinities exact.
template <host_backend B>
case_result run_sparse_mla(const B& be, const dsa::safetensors_file& f) {
  constexpr std::string_view g = "sparse_mla";
  const auto q = load<dsa::bf16, 3>(f, g, "sparse_mla.q");
  const auto kv = load<dsa::bf16, 2>(f, g, "sparse_mla.kv");
  const auto indices = load<std::int32_t, 2>(f, g, "sparse_mla.indices");
  const auto scale = load<float, 1>(f, g, "sparse_mla.scale");
  if (scale.extent(0) != 1) {
    throw input_error("dsa_validate: " + f.path().string() +
                      ": group 'sparse_mla': tensor 'sparse_mla.scale' shape = " + dsa::format_shape(scale.shape) +
                      "; expected [1]");
  }
  const index_t s = q.extent(0), h = q.extent(1);
  const dsa::tensor_info* out_info = f.find("sparse_mla.out");
  const index_t d_v = out_info != nullptr && out_info->rank() == 3 ? out_info->shape[2] : 512;
  const auto e_out = load_expected<float, 3>(f, g, "sparse_mla.out", {s, h, d_v});
  const auto e_lse = load_expected<float, 2>(f, g, "sparse_mla.lse", {s, h});
  auto out = host_tensor<float, 3>::zeros(e_out.shape);
  auto lse = host_tensor<float, 2>::zeros(e_lse.shape);
  dsa::sparse_mla_config cfg;
  cfg.softmax_scale = scale.data[0];
  cfg.d_v = d_v;
  dsa::sparse_mla_attention(be, q.view(), kv.view(), indices.view(), out.view(), lse.view(), cfg);
  case_result r{std::string(g), {}, {}};
  r.comparisons.push_back(compare_abs("sparse_mla.out", out.span(), e_out.span(), 2e-3));
  r.comparisons.push_back(compare_nonfinite("sparse_mla.out", out.span(), e_out.span()));
  r.comparisons.push_back(compare_abs("sparse_mla.lse", lse.span(), e_lse.span(), 1e-4));
  r.comparisons.push_back(compare_nonfinite("sparse_mla.lse", lse.span(), e_lse.span()));
  r.outputs.push_back(make_output("sparse_mla.out", out));
  r.outputs.push_back(make_output("sparse_mla.lse", lse));
  return r;
}

namespace detail {

inline void check_kl_shapes(const dsa::safetensors_file& f, std::string_view g, const host_tensor<float, 3>& attn,
                            const host_tensor<float, 2>& index) {
  if (index.extent(0) != attn.extent(0) || index.extent(1) != attn.extent(2)) {
    throw input_error("dsa_validate: " + f.path().string() + ": group '" + std::string(g) + "': tensor '" +
                      std::string(g) + ".index' shape = " + dsa::format_shape(index.shape) + "; expected [" +
                      std::to_string(attn.extent(0)) + ", " + std::to_string(attn.extent(2)) + "] (attn is [m, h, n])");
  }
}

template <class Run>
case_result run_kl(const dsa::safetensors_file& f, std::string_view g, const host_tensor<float, 3>& attn, Run&& run) {
  const std::string p(g);
  const auto e_loss = load_expected<float, 1>(f, g, p + ".loss", {1});
  const auto e_grad = load_expected<float, 2>(f, g, p + ".grad_index", {attn.extent(0), attn.extent(2)});
  auto loss = host_tensor<float, 1>::zeros({1});
  auto grad = host_tensor<float, 2>::zeros(e_grad.shape);
  run(loss, grad);
  case_result r{p, {}, {}};
  r.comparisons.push_back(compare_scalar_relative(p + ".loss", loss.data[0], e_loss.data[0], 1e-4));
  r.comparisons.push_back(compare_abs(p + ".grad_index", grad.span(), e_grad.span(), 1e-5));
  r.comparisons.push_back(compare_nonfinite(p + ".grad_index", grad.span(), e_grad.span()));
  r.outputs.push_back(make_output(p + ".loss", loss));
  r.outputs.push_back(make_output(p + ".grad_index", grad));
  return r;
}

}  // namespace detail

/// kl_dense: attn F32 [m, h, n] (causal main-attention probabilities), index F32 [m, n] ->
/// loss F32 [1] (eq. 3), grad_index F32 [m, n]. Row t sees keys [0, n - m + t + 1) (the last m
/// positions are the queries). Criterion: rel 1e-4 on loss, abs 1e-5 on grad.
template <host_backend B>
case_result run_kl_dense(const B& be, const dsa::safetensors_file& f) {
  constexpr std::string_view g = "kl_dense";
  const auto attn = load<float, 3>(f, g, "kl_dense.attn");
  const auto index = load<float, 2>(f, g, "kl_dense.index");
  detail::check_kl_shapes(f, g, attn, index);
  const index_t m = attn.extent(0), n = attn.extent(2);
  if (m > n) {
    throw input_error("dsa_validate: " + f.path().string() + ": group 'kl_dense': tensor 'kl_dense.attn' shape = " +
                      dsa::format_shape(attn.shape) + "; expected m <= n (causal queries are the last m keys)");
  }
  auto ranges = host_tensor<std::int32_t, 2>::zeros({m, 2});
  for (index_t t = 0; t < m; ++t)
    ranges.data[static_cast<std::size_t>(2 * t + 1)] = static_cast<std::int32_t>(n - m + t + 1);
  return detail::run_kl(f, g, attn, [&](host_tensor<float, 1>& loss, host_tensor<float, 2>& grad) {
    dsa::indexer_kl_loss_dense(be, attn.view(), index.view(), ranges.view(), loss.view(), grad.view());
  });
}

/// kl_sparse: attn, index as kl_dense, topk I32 [m, k] (-1 padded) -> loss F32 [1] (eq. 4),
/// grad_index F32 [m, n] (zero outside the selection). Criterion: as kl_dense.
template <host_backend B>
case_result run_kl_sparse(const B& be, const dsa::safetensors_file& f) {
  constexpr std::string_view g = "kl_sparse";
  const auto attn = load<float, 3>(f, g, "kl_sparse.attn");
  const auto index = load<float, 2>(f, g, "kl_sparse.index");
  const auto topk = load<std::int32_t, 2>(f, g, "kl_sparse.topk");
  detail::check_kl_shapes(f, g, attn, index);
  return detail::run_kl(f, g, attn, [&](host_tensor<float, 1>& loss, host_tensor<float, 2>& grad) {
    dsa::indexer_kl_loss_sparse(be, attn.view(), index.view(), topk.view(), loss.view(), grad.view());
  });
}

/// Runs group `g` (one of known_groups). dsa::error from an op front-end (a shape the op rejects)
/// comes back as input_error naming the group.
template <host_backend B>
case_result run_group(const B& be, const dsa::safetensors_file& f, std::string_view g) {
  try {
    if (g == "hadamard") return run_hadamard(be, f);
    if (g == "hadamard_f32") return run_hadamard_f32(be, f);
    if (g == "act_quant") return run_act_quant(be, f);
    if (g == "weight_quant") return run_weight_quant(be, f);
    if (g == "indexer") return run_indexer(be, f);
    if (g == "topk") return run_topk(be, f);
    if (g == "sparse_mla") return run_sparse_mla(be, f);
    if (g == "kl_dense") return run_kl_dense(be, f);
    if (g == "kl_sparse") return run_kl_sparse(be, f);
  } catch (const input_error&) {
    throw;
  } catch (const dsa::error& e) {
    throw input_error("dsa_validate: " + f.path().string() + ": group '" + std::string(g) + "': " + e.what());
  }
  throw input_error("dsa_validate: unknown group '" + std::string(g) + "'");
}

}  // namespace dsa_validate
