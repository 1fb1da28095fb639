// The primitive golden cases of dsa_validate: one function per case group of a golden-format
// safetensors file (docs/validation.md), each running the group's inputs through the public dsa
// ops and comparing with the group's expected outputs under the group's tolerance criterion
// (the criteria of ../shared/golden/README.md, implemented exactly).
//
// Used by tools/dsa_validate.cpp and by tests/tools/test_primitive_cases.cpp (the golden test of
// every primitive).
//
// The backend is reached through an *executor* (see `executor` below): the case functions load
// the inputs and allocate the outputs in host memory, call one executor member per op and compare
// the host outputs. host_executor calls the op directly on a host backend; the CUDA executor
// (validate/cuda_cases.hpp) copies the inputs to the device, calls the same public op with
// dsa::cuda_backend and copies the outputs back. So the loading, the derived inputs (ranges) and
// the criteria (validate/golden_format.hpp) exist once, whatever the backend.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/checked_math.hpp"
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
#include "validate/executor.hpp"
#include "validate/golden_format.hpp"

namespace dsa_validate {

using dsa::index_t;

// ---- executors ------------------------------------------------------------------------------

template <class B>
concept host_backend = dsa::backend<B> && std::same_as<typename B::memory_space, dsa::host_space>;

/// What a case group runs its ops on. An executor has one const member per op (and dtype) the
/// groups use, each taking contiguous row-major host views and the op's configuration, with the
/// op's semantics exactly (dsa::<op>(backend, ...)); `backend_name()` names the backend for the
/// report. The members are spelled out rather than forwarded by a template so that every
/// executor has the same, checked signatures (and the CUDA one calls only the type combinations
/// its backend's compiled instances hold, dsa/cuda/ops.hpp). Outputs are host tensors the case allocated; an executor must write every element
/// the op writes and nothing else.
template <class E>
concept executor = requires(const E& e) {
  { e.backend_name() } -> std::convertible_to<std::string_view>;
};

/// The executor of a host-memory backend: every member is the op itself.
template <host_backend B>
struct host_executor {
  B be;

  std::string_view backend_name() const { return B::name; }

  void hadamard_transform(dsa::host_view<const dsa::bf16, 2> x, dsa::host_view<dsa::bf16, 2> y, float scale) const {
    dsa::hadamard_transform(be, x, y, scale);
  }
  void hadamard_transform(dsa::host_view<const float, 2> x, dsa::host_view<float, 2> y, float scale) const {
    dsa::hadamard_transform(be, x, y, scale);
  }
  void act_quant(dsa::host_view<const dsa::bf16, 2> x, dsa::host_view<dsa::fp8_e4m3, 2> q,
                 dsa::host_view<float, 2> s, const dsa::act_quant_config& cfg) const {
    dsa::act_quant(be, x, q, s, cfg);
  }
  void weight_quant(dsa::host_view<const float, 2> w, dsa::host_view<dsa::fp8_e4m3, 2> q,
                    dsa::host_view<float, 2> s) const {
    dsa::weight_quant(be, w, q, s);
  }
  void lightning_indexer_scores(dsa::host_view<const dsa::fp8_e4m3, 3> q, dsa::host_view<const float, 2> w,
                                dsa::host_view<const dsa::fp8_e4m3, 2> k, dsa::host_view<const float, 1> k_scale,
                                dsa::host_view<const std::int32_t, 2> ranges, dsa::host_view<float, 2> scores) const {
    dsa::lightning_indexer_scores(be, q, w, k, k_scale, ranges, scores);
  }
  void topk_indices(dsa::host_view<const float, 2> scores, dsa::host_view<const std::int32_t, 2> ranges, index_t k,
                    dsa::host_view<std::int32_t, 2> indices) const {
    dsa::topk_indices(be, scores, ranges, k, indices);
  }
  /// The split-k count this backend would pick for sparse_mla_attention (config.num_splits): 1,
  /// since the CPU backend computes every token in one pass whatever the count.
  index_t sparse_mla_num_splits(index_t /*s*/, index_t /*h*/, index_t /*k*/) const { return 1; }
  void sparse_mla_attention(dsa::host_view<const dsa::bf16, 3> q, dsa::host_view<const dsa::bf16, 2> kv,
                            dsa::host_view<const std::int32_t, 2> indices, dsa::host_view<float, 3> out,
                            dsa::host_view<float, 2> lse, const dsa::sparse_mla_config& cfg) const {
    dsa::sparse_mla_attention(be, q, kv, indices, out, lse, cfg);
  }
  void indexer_kl_loss_dense(dsa::host_view<const float, 3> attn, dsa::host_view<const float, 2> index_scores,
                             dsa::host_view<const std::int32_t, 2> ranges, dsa::host_view<float, 1> loss,
                             dsa::host_view<float, 2> grad_index) const {
    dsa::indexer_kl_loss_dense(be, attn, index_scores, ranges, loss, grad_index);
  }
  void indexer_kl_loss_sparse(dsa::host_view<const float, 3> attn, dsa::host_view<const float, 2> index_scores,
                              dsa::host_view<const std::int32_t, 2> topk, dsa::host_view<float, 1> loss,
                              dsa::host_view<float, 2> grad_index) const {
    dsa::indexer_kl_loss_sparse(be, attn, index_scores, topk, loss, grad_index);
  }
};

static_assert(executor<host_executor<dsa::cpu_backend>>);

// ---- the groups -----------------------------------------------------------------------------

/// hadamard: x BF16 [rows, n] -> y BF16 = bf16((x · H_n) · n^-0.5), fp32 butterflies (the indexer's
/// rotate_activation for n = 128). Criterion: bit-exact on >= 99.5% of the elements, the others
/// within 1 bf16 ulp.
template <executor E>
case_result run_hadamard(const E& ex, const dsa::safetensors_file& f) {
  constexpr std::string_view g = "hadamard";
  const auto x = load<dsa::bf16, 2>(f, g, "hadamard.x");
  const auto expected = load_expected<dsa::bf16, 2>(f, g, "hadamard.y", x.shape);
  auto y = host_tensor<dsa::bf16, 2>::zeros(x.shape);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(x.extent(1))));
  ex.hadamard_transform(x.view(), y.view(), scale);
  case_result r{std::string(g), compare_bf16_near_exact("hadamard.y", y.span(), expected.span()), {}};
  r.outputs.push_back(make_output("hadamard.y", y));
  return r;
}

/// hadamard_f32: x F32 [rows, n] -> y F32 = x · H_n, unnormalised. Criterion: per row,
/// max |error| <= 1e-5 x the L2 norm of the input row.
template <executor E>
case_result run_hadamard_f32(const E& ex, const dsa::safetensors_file& f) {
  constexpr std::string_view g = "hadamard_f32";
  const auto x = load<float, 2>(f, g, "hadamard_f32.x");
  const auto expected = load_expected<float, 2>(f, g, "hadamard_f32.y", x.shape);
  auto y = host_tensor<float, 2>::zeros(x.shape);
  ex.hadamard_transform(x.view(), y.view(), 1.0f);
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
template <executor E>
case_result run_act_quant(const E& ex, const dsa::safetensors_file& f) {
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
      throw input_error(group_where(f, g) + "tensor 'act_quant.x' shape = " + dsa::format_shape(x.shape) +
                        "; expected a multiple of 128 columns (1 x 128 groups)");
    }
    const auto eq = load_expected<dsa::fp8_e4m3, 2>(f, g, qn, x.shape);
    const auto es = load_expected<float, 2>(f, g, sn, {x.extent(0), x.extent(1) / group});
    auto q = host_tensor<dsa::fp8_e4m3, 2>::zeros(eq.shape);
    auto s = host_tensor<float, 2>::zeros(es.shape);
    dsa::act_quant_config cfg;
    cfg.group_size = group;
    cfg.format = format;
    ex.act_quant(x.view(), q.view(), s.view(), cfg);
    r.comparisons.push_back(compare_bits(qn, q.span(), eq.span()));
    r.comparisons.push_back(compare_bits(sn, s.span(), es.span()));
    r.outputs.push_back(make_output(qn, q));
    r.outputs.push_back(make_output(sn, s));
  }
  if (r.comparisons.empty()) {
    throw input_error(group_where(f, g) +
                      "no expected outputs; expected act_quant.ue8m0.{q,s} and/or act_quant.fp32.{q,s}");
  }
  return r;
}

/// weight_quant: w F32 [rows, cols] -> q F8_E4M3 [rows, cols], s F32 [ceil(rows/128),
/// ceil(cols/128)]. Criterion: bit-exact.
template <executor E>
case_result run_weight_quant(const E& ex, const dsa::safetensors_file& f) {
  constexpr std::string_view g = "weight_quant";
  const auto w = load<float, 2>(f, g, "weight_quant.w");
  const auto eq = load_expected<dsa::fp8_e4m3, 2>(f, g, "weight_quant.q", w.shape);
  // Extents from the file are in [0, INT64_MAX] ([INT64_MAX, 0] costs no bytes): an exact
  // ceil(e / 128), where (e + 127) / 128 would overflow to a negative extent.
  const std::array<index_t, 2> s_shape = {dsa::ceil_div(w.extent(0), index_t{128}),
                                           dsa::ceil_div(w.extent(1), index_t{128})};
  const auto es = load_expected<float, 2>(f, g, "weight_quant.s", s_shape);
  auto q = host_tensor<dsa::fp8_e4m3, 2>::zeros(eq.shape);
  auto s = host_tensor<float, 2>::zeros(es.shape);
  ex.weight_quant(w.view(), q.view(), s.view());
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
template <executor E>
case_result run_indexer(const E& ex, const dsa::safetensors_file& f) {
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
  ex.lightning_indexer_scores(q.view(), w.view(), k.view(), k_scale.view(), ranges.view(), score.view());
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
template <executor E>
case_result run_topk(const E& ex, const dsa::safetensors_file& f) {
  constexpr std::string_view g = "topk";
  const auto score = load<float, 2>(f, g, "topk.score");
  const auto ends = load<std::int32_t, 1>(f, g, "topk.ends");
  const auto kt = load<std::int32_t, 1>(f, g, "topk.k");
  const index_t m = score.extent(0);
  if (kt.extent(0) != 1) {
    throw input_error(group_where(f, g) + "tensor 'topk.k' shape = " + dsa::format_shape(kt.shape) + "; expected [1]");
  }
  if (ends.extent(0) != m) {
    throw input_error(group_where(f, g) + "tensor 'topk.ends' shape = " +
                      dsa::format_shape(ends.shape) + "; expected [" + std::to_string(m) + "] (one end per score row)");
  }
  const index_t k = kt.data[0];
  auto ranges = host_tensor<std::int32_t, 2>::zeros({m, 2});
  for (index_t t = 0; t < m; ++t)
    ranges.data[static_cast<std::size_t>(2 * t + 1)] = ends.data[static_cast<std::size_t>(t)];
  const auto expected = load_expected<std::int32_t, 2>(f, g, "topk.indices", {m, std::max<index_t>(k, 0)});
  auto indices = host_tensor<std::int32_t, 2>::zeros(expected.shape);
  ex.topk_indices(score.view(), ranges.view(), k, indices.view());
  case_result r{std::string(g), {}, {}};
  r.comparisons.push_back(compare_bits("topk.indices", indices.span(), expected.span()));
  r.outputs.push_back(make_output("topk.indices", indices));
  return r;
}

/// sparse_mla: q BF16 [s, h, d_qk], kv BF16 [n, d_qk], indices I32 [s, k] (-1 = unused), scale
/// F32 [1] -> out F32 [s, h, d_v] (d_v from out's shape), lse F32 [s, h]. Criterion: abs 2e-3 on
/// out, 1e-4 on lse, infinities exact; for one pass over each token's keys and, where the
/// executor would split them (ex.sparse_mla_num_splits > 1), for the split-k path too.
template <executor E>
case_result run_sparse_mla(const E& ex, const dsa::safetensors_file& f) {
  constexpr std::string_view g = "sparse_mla";
  const auto q = load<dsa::bf16, 3>(f, g, "sparse_mla.q");
  const auto kv = load<dsa::bf16, 2>(f, g, "sparse_mla.kv");
  const auto indices = load<std::int32_t, 2>(f, g, "sparse_mla.indices");
  const auto scale = load<float, 1>(f, g, "sparse_mla.scale");
  if (scale.extent(0) != 1) {
    throw input_error(group_where(f, g) + "tensor 'sparse_mla.scale' shape = " + dsa::format_shape(scale.shape) +
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
  cfg.num_splits = 1;
  ex.sparse_mla_attention(q.view(), kv.view(), indices.view(), out.view(), lse.view(), cfg);
  case_result r{std::string(g), {}, {}};
  auto compare = [&](const std::string& suffix, const host_tensor<float, 3>& o, const host_tensor<float, 2>& l) {
    r.comparisons.push_back(compare_abs("sparse_mla.out" + suffix, o.span(), e_out.span(), 2e-3));
    r.comparisons.push_back(compare_nonfinite("sparse_mla.out" + suffix, o.span(), e_out.span()));
    r.comparisons.push_back(compare_abs("sparse_mla.lse" + suffix, l.span(), e_lse.span(), 1e-4));
    r.comparisons.push_back(compare_nonfinite("sparse_mla.lse" + suffix, l.span(), e_lse.span()));
  };
  compare("", out, lse);
  // A backend that splits the keys of a token (the CUDA backend's split-k, for few tokens) runs
  // that path too, under the same criteria: it is the one an engine gets for these shapes. The
  // dump keeps the one-pass outputs.
  const index_t splits = ex.sparse_mla_num_splits(s, h, indices.extent(1));
  if (splits > 1) {
    auto out_split = host_tensor<float, 3>::zeros(e_out.shape);
    auto lse_split = host_tensor<float, 2>::zeros(e_lse.shape);
    cfg.num_splits = splits;
    ex.sparse_mla_attention(q.view(), kv.view(), indices.view(), out_split.view(), lse_split.view(), cfg);
    compare(" (" + std::to_string(splits) + " splits)", out_split, lse_split);
  }
  r.outputs.push_back(make_output("sparse_mla.out", out));
  r.outputs.push_back(make_output("sparse_mla.lse", lse));
  return r;
}

namespace detail {

inline void check_kl_shapes(const dsa::safetensors_file& f, std::string_view g, const host_tensor<float, 3>& attn,
                            const host_tensor<float, 2>& index) {
  if (index.extent(0) != attn.extent(0) || index.extent(1) != attn.extent(2)) {
    throw input_error(group_where(f, g) + "tensor " + dsa::quoted(std::string(g) + ".index") +
                      " shape = " + dsa::format_shape(index.shape) + "; expected [" + std::to_string(attn.extent(0)) +
                      ", " + std::to_string(attn.extent(2)) + "] (attn is [m, h, n])");
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
template <executor E>
case_result run_kl_dense(const E& ex, const dsa::safetensors_file& f) {
  constexpr std::string_view g = "kl_dense";
  const auto attn = load<float, 3>(f, g, "kl_dense.attn");
  const auto index = load<float, 2>(f, g, "kl_dense.index");
  detail::check_kl_shapes(f, g, attn, index);
  const index_t m = attn.extent(0), n = attn.extent(2);
  if (m > n) {
    throw input_error(group_where(f, g) + "tensor 'kl_dense.attn' shape = " +
                      dsa::format_shape(attn.shape) + "; expected m <= n (causal queries are the last m keys)");
  }
  auto ranges = host_tensor<std::int32_t, 2>::zeros({m, 2});
  for (index_t t = 0; t < m; ++t)
    ranges.data[static_cast<std::size_t>(2 * t + 1)] = static_cast<std::int32_t>(n - m + t + 1);
  return detail::run_kl(f, g, attn, [&](host_tensor<float, 1>& loss, host_tensor<float, 2>& grad) {
    ex.indexer_kl_loss_dense(attn.view(), index.view(), ranges.view(), loss.view(), grad.view());
  });
}

/// kl_sparse: attn, index as kl_dense, topk I32 [m, k] (-1 padded) -> loss F32 [1] (eq. 4),
/// grad_index F32 [m, n] (zero outside the selection). Criterion: as kl_dense.
template <executor E>
case_result run_kl_sparse(const E& ex, const dsa::safetensors_file& f) {
  constexpr std::string_view g = "kl_sparse";
  const auto attn = load<float, 3>(f, g, "kl_sparse.attn");
  const auto index = load<float, 2>(f, g, "kl_sparse.index");
  const auto topk = load<std::int32_t, 2>(f, g, "kl_sparse.topk");
  detail::check_kl_shapes(f, g, attn, index);
  return detail::run_kl(f, g, attn, [&](host_tensor<float, 1>& loss, host_tensor<float, 2>& grad) {
    ex.indexer_kl_loss_sparse(attn.view(), index.view(), topk.view(), loss.view(), grad.view());
  });
}

/// Runs group `g` (one of known_groups) on executor `ex`. dsa::error from an op front-end (a shape
/// the op rejects) comes back as input_error naming the group; backend_error passes through.
///
/// Every expected tensor must hold at least one element: one with none compares nothing (each
/// metric over it is vacuously 0), so it gets a failed comparison of its own (compare_nothing)
/// and the group FAILs, never passes with nothing compared.
template <executor E>
case_result run_group(const E& ex, const dsa::safetensors_file& f, std::string_view g) {
  case_result r;
  try {
    if (g == "hadamard") {
      r = run_hadamard(ex, f);
    } else if (g == "hadamard_f32") {
      r = run_hadamard_f32(ex, f);
    } else if (g == "act_quant") {
      r = run_act_quant(ex, f);
    } else if (g == "weight_quant") {
      r = run_weight_quant(ex, f);
    } else if (g == "indexer") {
      r = run_indexer(ex, f);
    } else if (g == "topk") {
      r = run_topk(ex, f);
    } else if (g == "sparse_mla") {
      r = run_sparse_mla(ex, f);
    } else if (g == "kl_dense") {
      r = run_kl_dense(ex, f);
    } else if (g == "kl_sparse") {
      r = run_kl_sparse(ex, f);
    } else {
      throw input_error("dsa_validate: unknown group " + dsa::quoted(g));
    }
  } catch (const input_error&) {
    throw;
  } catch (const dsa::error& e) {
    throw input_error(group_where(f, g) + e.what());
  }
  // Each computed output has the shape of the expected tensor it is compared with (every group
  // checks that), so an empty output is an empty expected tensor. Its compare_nothing goes right
  // after the tensor's other comparisons, so that the report names the tensor once.
  std::set<std::string> empty;
  for (const output_tensor& o : r.outputs) {
    if (o.bytes.empty()) empty.insert(o.name);
  }
  if (!empty.empty()) {
    std::vector<comparison> cs;
    for (std::size_t i = 0; i < r.comparisons.size(); ++i) {
      const std::string& t = r.comparisons[i].tensor;
      cs.push_back(r.comparisons[i]);
      const bool last_of_tensor = i + 1 == r.comparisons.size() || r.comparisons[i + 1].tensor != t;
      if (last_of_tensor && empty.erase(t) > 0) cs.push_back(compare_nothing(t));
    }
    for (const std::string& t : empty) cs.push_back(compare_nothing(t));  // (every output is compared)
    r.comparisons = std::move(cs);
  }
  return r;
}

/// Runs group `g` on host backend `be` (host_executor: the ops called directly).
template <host_backend B>
case_result run_group(const B& be, const dsa::safetensors_file& f, std::string_view g) {
  return run_group(host_executor<B>{be}, f, g);
}

}  // namespace dsa_validate
