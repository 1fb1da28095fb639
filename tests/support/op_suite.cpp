// run_op_suite (op_suite.hpp): every public op of dsa on fixed-seed inputs.
#include "support/op_suite.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/activation.hpp"
#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/cpu/hadamard.hpp"
#include "dsa/cpu/indexer_kl_loss.hpp"
#include "dsa/cpu/indexer_weights.hpp"
#include "dsa/cpu/kv_cache.hpp"
#include "dsa/cpu/lightning_indexer.hpp"
#include "dsa/cpu/linear.hpp"
#include "dsa/cpu/moe_combine.hpp"
#include "dsa/cpu/moe_routing.hpp"
#include "dsa/cpu/norm.hpp"
#include "dsa/cpu/rope.hpp"
#include "dsa/cpu/sparse_mha_attention.hpp"
#include "dsa/cpu/sparse_mla_attention.hpp"
#include "dsa/cpu/topk.hpp"
#include "dsa/ops/activation.hpp"
#include "dsa/ops/fp8_quant.hpp"
#include "dsa/ops/hadamard.hpp"
#include "dsa/ops/indexer_kl_loss.hpp"
#include "dsa/ops/indexer_weights.hpp"
#include "dsa/ops/kv_cache.hpp"
#include "dsa/ops/lightning_indexer.hpp"
#include "dsa/ops/linear.hpp"
#include "dsa/ops/moe_combine.hpp"
#include "dsa/ops/moe_routing.hpp"
#include "dsa/ops/norm.hpp"
#include "dsa/ops/rope.hpp"
#include "dsa/ops/sparse_mha_attention.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"
#include "dsa/ops/topk.hpp"
#include "support/random.hpp"

namespace dsa_test {

namespace op_suite_detail {

using dsa::bf16;
using dsa::fp8_e4m3;
using dsa::index_t;
using dsa::make_view;

template <class T>
void record(std::vector<op_output>& out, std::string name, const std::vector<T>& v) {
  op_output o{std::move(name), std::vector<std::byte>(v.size() * sizeof(T))};
  if (!v.empty()) std::memcpy(o.bytes.data(), v.data(), o.bytes.size());
  out.push_back(std::move(o));
}

/// Causal ranges of m query rows that are the last m of n keys: row t sees [0, n - m + t + 1).
inline std::vector<std::int32_t> causal_ranges(index_t m, index_t n) {
  std::vector<std::int32_t> r(static_cast<std::size_t>(2 * m));
  for (index_t t = 0; t < m; ++t) r[static_cast<std::size_t>(2 * t + 1)] = static_cast<std::int32_t>(n - m + t + 1);
  return r;
}

}  // namespace op_suite_detail

std::vector<op_output> run_op_suite(const dsa::cpu_backend& be) {
  using namespace op_suite_detail;
  std::vector<op_output> out;
  constexpr index_t m = 16;   // query rows / tokens
  constexpr index_t n = 64;   // keys
  constexpr index_t h = 4;    // heads
  constexpr index_t k = 8;    // top-k

  // Hadamard, float and bf16.
  {
    auto x = uniform(static_cast<std::size_t>(m * 256), 1);
    std::vector<float> y(x.size());
    dsa::hadamard_transform(be, make_view(x.data(), {m, 256}), make_view(y.data(), {m, 256}), 0.0625f);
    record(out, "hadamard_transform<float>", y);
    auto xb = convert<bf16>(uniform(static_cast<std::size_t>(m * 128), 2));
    dsa::hadamard_transform(be, make_view(xb.data(), {m, 128}), make_view(xb.data(), {m, 128}),
                            1.0f / std::sqrt(128.0f));
    record(out, "hadamard_transform<bf16>", xb);
  }
  // FP8 quantizers.
  {
    auto x = convert<bf16>(normal(static_cast<std::size_t>(m * 256), 3, 2.0f));
    for (auto fmt : {dsa::scale_format::ue8m0, dsa::scale_format::fp32}) {
      std::vector<fp8_e4m3> q(x.size());
      std::vector<float> s(static_cast<std::size_t>(m * 2));
      dsa::act_quant_config cfg;
      cfg.format = fmt;
      dsa::act_quant(be, make_view(static_cast<const bf16*>(x.data()), {m, 256}), make_view(q.data(), {m, 256}),
                     make_view(s.data(), {m, 2}), cfg);
      std::vector<float> y(x.size());
      dsa::act_dequant(be, make_view(static_cast<const fp8_e4m3*>(q.data()), {m, 256}),
                       make_view(static_cast<const float*>(s.data()), {m, 2}), make_view(y.data(), {m, 256}));
      const std::string tag = fmt == dsa::scale_format::ue8m0 ? "<ue8m0>" : "<fp32>";
      record(out, "act_quant.q" + tag, q);
      record(out, "act_quant.s" + tag, s);
      record(out, "act_dequant" + tag, y);
    }
    auto w = normal(200 * 300, 4, 0.05f);
    std::vector<fp8_e4m3> q(w.size());
    std::vector<float> s(2 * 3);
    dsa::weight_quant(be, make_view(static_cast<const float*>(w.data()), {200, 300}), make_view(q.data(), {200, 300}),
                      make_view(s.data(), {2, 3}));
    std::vector<bf16> wd(w.size());
    dsa::weight_dequant(be, make_view(static_cast<const fp8_e4m3*>(q.data()), {200, 300}),
                        make_view(static_cast<const float*>(s.data()), {2, 3}), make_view(wd.data(), {200, 300}));
    record(out, "weight_quant.q", q);
    record(out, "weight_quant.s", s);
    record(out, "weight_dequant", wd);
  }
  // Caches: FP8 kv rows and indexer rows, packed through a permuted slot map, unpacked.
  std::vector<std::uint8_t> kv_cache(static_cast<std::size_t>(n * dsa::kv_fp8_row_bytes));
  std::vector<bf16> kv = convert<bf16>(normal(static_cast<std::size_t>(n * dsa::kv_dim), 5));
  std::vector<fp8_e4m3> ik = convert<fp8_e4m3>(normal(static_cast<std::size_t>(n * 128), 6, 4.0f));
  std::vector<float> ik_scale = uniform(static_cast<std::size_t>(n), 7, 0.01f, 0.1f);
  std::vector<std::uint8_t> icache(static_cast<std::size_t>(n * dsa::indexer_cache_row_bytes));
  std::vector<std::int32_t> slots(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) slots[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 37 + 5) % n);
  {
    const auto sv = make_view(static_cast<const std::int32_t*>(slots.data()), {n});
    dsa::kv_cache_fp8_pack(be, make_view(static_cast<const bf16*>(kv.data()), {n, dsa::kv_dim}),
                           make_view(kv_cache.data(), {n, dsa::kv_fp8_row_bytes}), sv);
    std::vector<bf16> kv2(kv.size());
    dsa::kv_cache_fp8_unpack(be, make_view(static_cast<const std::uint8_t*>(kv_cache.data()), {n, dsa::kv_fp8_row_bytes}),
                             make_view(kv2.data(), {n, dsa::kv_dim}));
    record(out, "kv_cache_fp8_pack", kv_cache);
    record(out, "kv_cache_fp8_unpack", kv2);
    dsa::indexer_cache_pack(be, make_view(static_cast<const fp8_e4m3*>(ik.data()), {n, 128}),
                            make_view(static_cast<const float*>(ik_scale.data()), {n}),
                            make_view(icache.data(), {n, dsa::indexer_cache_row_bytes}), sv);
    std::vector<fp8_e4m3> k2(ik.size());
    std::vector<float> s2(ik_scale.size());
    dsa::indexer_cache_unpack(be,
                              make_view(static_cast<const std::uint8_t*>(icache.data()), {n, dsa::indexer_cache_row_bytes}),
                              make_view(k2.data(), {n, 128}), make_view(s2.data(), {n}));
    record(out, "indexer_cache_pack", icache);
    record(out, "indexer_cache_unpack.k", k2);
    record(out, "indexer_cache_unpack.k_scale", s2);
  }
  // Lightning indexer: fp8, float, paged (through the slot map above), backward.
  const auto ranges = causal_ranges(m, n);
  const auto rv = make_view(static_cast<const std::int32_t*>(ranges.data()), {m, 2});
  std::vector<float> scores(static_cast<std::size_t>(m * n));
  {
    auto q = convert<fp8_e4m3>(normal(static_cast<std::size_t>(m * h * 128), 8, 4.0f));
    auto w = uniform(static_cast<std::size_t>(m * h), 9);
    const auto qv = make_view(static_cast<const fp8_e4m3*>(q.data()), {m, h, 128});
    const auto wv = make_view(static_cast<const float*>(w.data()), {m, h});
    dsa::lightning_indexer_scores(be, qv, wv, make_view(static_cast<const fp8_e4m3*>(ik.data()), {n, 128}),
                                  make_view(static_cast<const float*>(ik_scale.data()), {n}), rv,
                                  make_view(scores.data(), {m, n}));
    record(out, "lightning_indexer_scores<fp8>", scores);
    // Every row reads the 4 blocks of 16 cache slots in a different rotation.
    std::vector<std::int32_t> table(static_cast<std::size_t>(m * 4));
    for (index_t t = 0; t < m; ++t) {
      for (index_t b = 0; b < 4; ++b) table[static_cast<std::size_t>(t * 4 + b)] = static_cast<std::int32_t>((b + t) % 4);
    }
    std::vector<float> paged(scores.size());
    dsa::lightning_indexer_scores_paged(be, qv, wv,
                                        make_view(static_cast<const std::uint8_t*>(icache.data()),
                                                  {n, dsa::indexer_cache_row_bytes}),
                                        make_view(static_cast<const std::int32_t*>(table.data()), {m, 4}), 16, rv,
                                        make_view(paged.data(), {m, n}));
    record(out, "lightning_indexer_scores_paged", paged);

    std::vector<std::int32_t> topk(static_cast<std::size_t>(m * k)), slots_out(topk.size());
    dsa::topk_indices(be, make_view(static_cast<const float*>(scores.data()), {m, n}), rv, k,
                      make_view(topk.data(), {m, k}));
    record(out, "topk_indices", topk);
    dsa::topk_indices_paged(be, make_view(static_cast<const float*>(scores.data()), {m, n}), rv, k,
                            make_view(static_cast<const std::int32_t*>(table.data()), {m, 4}), 16,
                            make_view(slots_out.data(), {m, k}));
    record(out, "topk_indices_paged", slots_out);

    auto src = uniform(static_cast<std::size_t>(n * 32), 10);
    std::vector<float> dst(static_cast<std::size_t>(m * k * 32));
    const auto tv = make_view(static_cast<const std::int32_t*>(topk.data()), {m, k});
    dsa::gather_rows(be, make_view(static_cast<const float*>(src.data()), {n, 32}), tv, make_view(dst.data(), {m, k, 32}));
    record(out, "gather_rows", dst);

    // Sparse MLA attention over the bf16 rows and over the FP8 cache (row slots[i] = token i).
    auto qa = convert<bf16>(normal(static_cast<std::size_t>(m * h * dsa::kv_dim), 11));
    const auto qav = make_view(static_cast<const bf16*>(qa.data()), {m, h, dsa::kv_dim});
    dsa::sparse_mla_config cfg;
    cfg.softmax_scale = 1.0f / std::sqrt(static_cast<float>(dsa::kv_dim));
    cfg.d_v = 512;
    std::vector<float> o(static_cast<std::size_t>(m * h * 512)), lse(static_cast<std::size_t>(m * h)),
        probs(static_cast<std::size_t>(m * k));
    dsa::sparse_mla_attention(be, qav, make_view(static_cast<const bf16*>(kv.data()), {n, dsa::kv_dim}), tv,
                              make_view(o.data(), {m, h, 512}), make_view(lse.data(), {m, h}), cfg,
                              make_view(probs.data(), {m, k}));
    record(out, "sparse_mla_attention<bf16>.out", o);
    record(out, "sparse_mla_attention<bf16>.lse", lse);
    record(out, "sparse_mla_attention<bf16>.probs", probs);
    std::vector<bf16> ob(o.size());
    dsa::sparse_mla_attention(be, qav,
                              make_view(static_cast<const std::uint8_t*>(kv_cache.data()), {n, dsa::kv_fp8_row_bytes}),
                              tv, make_view(ob.data(), {m, h, 512}), make_view(lse.data(), {m, h}), cfg);
    record(out, "sparse_mla_attention<fp8>.out", ob);
    record(out, "sparse_mla_attention<fp8>.lse", lse);

    // Sparse MHA attention: per-head keys and values, shared rope key.
    auto qm = convert<bf16>(normal(static_cast<std::size_t>(m * h * 64), 12));
    auto kn = convert<bf16>(normal(static_cast<std::size_t>(n * h * 48), 13));
    auto kr = convert<bf16>(normal(static_cast<std::size_t>(n * 16), 14));
    auto vv = convert<bf16>(normal(static_cast<std::size_t>(n * h * 32), 15));
    std::vector<bf16> om(static_cast<std::size_t>(m * h * 32));
    std::vector<float> lm(static_cast<std::size_t>(m * h));
    dsa::sparse_mha_config mcfg;
    mcfg.softmax_scale = 0.125f;
    dsa::sparse_mha_attention(be, make_view(static_cast<const bf16*>(qm.data()), {m, h, 64}),
                              make_view(static_cast<const bf16*>(kn.data()), {n, h, 48}),
                              make_view(static_cast<const bf16*>(kr.data()), {n, 16}),
                              make_view(static_cast<const bf16*>(vv.data()), {n, h, 32}), tv,
                              make_view(om.data(), {m, h, 32}), mcfg, make_view(lm.data(), {m, h}));
    record(out, "sparse_mha_attention.out", om);
    record(out, "sparse_mha_attention.lse", lm);

    // Indexer KL losses on the scores above (-inf outside the ranges).
    auto attn = uniform(static_cast<std::size_t>(m * h * n), 16, 0.0f, 1.0f);
    const auto av = make_view(static_cast<const float*>(attn.data()), {m, h, n});
    const auto iv = make_view(static_cast<const float*>(scores.data()), {m, n});
    std::vector<float> loss(1), grad(scores.size());
    dsa::indexer_kl_loss_dense(be, av, iv, rv, make_view(loss.data(), {1}), make_view(grad.data(), {m, n}));
    record(out, "indexer_kl_loss_dense.loss", loss);
    record(out, "indexer_kl_loss_dense.grad", grad);
    dsa::indexer_kl_loss_sparse(be, av, iv, tv, make_view(loss.data(), {1}), make_view(grad.data(), {m, n}));
    record(out, "indexer_kl_loss_sparse.loss", loss);
    record(out, "indexer_kl_loss_sparse.grad", grad);
  }
  {
    auto q = normal(static_cast<std::size_t>(m * h * 32), 17);
    auto w = uniform(static_cast<std::size_t>(m * h), 18);
    auto kf = normal(static_cast<std::size_t>(n * 32), 19);
    auto ks = uniform(static_cast<std::size_t>(n), 20, 0.5f, 1.5f);
    const auto qv = make_view(static_cast<const float*>(q.data()), {m, h, 32});
    const auto wv = make_view(static_cast<const float*>(w.data()), {m, h});
    const auto kv2 = make_view(static_cast<const float*>(kf.data()), {n, 32});
    const auto ksv = make_view(static_cast<const float*>(ks.data()), {n});
    std::vector<float> sc(static_cast<std::size_t>(m * n));
    dsa::lightning_indexer_scores(be, qv, wv, kv2, ksv, rv, make_view(sc.data(), {m, n}));
    record(out, "lightning_indexer_scores<float>", sc);
    auto gs = normal(sc.size(), 21);
    std::vector<float> gq(q.size()), gw(w.size()), gk(kf.size());
    dsa::lightning_indexer_backward(be, qv, wv, kv2, ksv, rv, make_view(static_cast<const float*>(gs.data()), {m, n}),
                                    make_view(gq.data(), {m, h, 32}), make_view(gw.data(), {m, h}),
                                    make_view(gk.data(), {n, 32}));
    record(out, "lightning_indexer_backward.q", gq);
    record(out, "lightning_indexer_backward.w", gw);
    record(out, "lightning_indexer_backward.k", gk);
  }
  // MoE routing and combine.
  {
    constexpr index_t experts = 16, top = 4, d = 32;
    auto logits = normal(static_cast<std::size_t>(m * experts), 22);
    auto bias = normal(static_cast<std::size_t>(experts), 23, 0.05f);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(m * top));
    std::vector<float> weights(ids.size());
    dsa::moe_routing_config cfg;
    cfg.top_k = top;
    cfg.n_group = 4;
    cfg.topk_group = 2;
    cfg.routed_scaling_factor = 2.5f;
    dsa::moe_route(be, make_view(static_cast<const float*>(logits.data()), {m, experts}),
                   make_view(static_cast<const float*>(bias.data()), {experts}), make_view(ids.data(), {m, top}),
                   make_view(weights.data(), {m, top}), cfg);
    record(out, "moe_route.ids", ids);
    record(out, "moe_route.weights", weights);
    auto eo = convert<bf16>(normal(static_cast<std::size_t>(m * top * d), 24));
    auto shared = convert<bf16>(normal(static_cast<std::size_t>(m * d), 25));
    std::vector<std::int32_t> rows(ids.size());
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::int32_t>((i * 7) % rows.size());
    std::vector<bf16> y(static_cast<std::size_t>(m * d));
    dsa::moe_combine(be, make_view(static_cast<const bf16*>(eo.data()), {m * top, d}),
                     make_view(static_cast<const std::int32_t*>(rows.data()), {m, top}),
                     make_view(static_cast<const float*>(weights.data()), {m, top}),
                     make_view(static_cast<const bf16*>(shared.data()), {m, d}), make_view(y.data(), {m, d}));
    record(out, "moe_combine", y);
  }
  // Dense building blocks.
  {
    constexpr index_t d = 64;
    auto a = convert<bf16>(normal(static_cast<std::size_t>(m * d), 26));
    auto b = convert<bf16>(normal(static_cast<std::size_t>(m * d), 27));
    const auto avw = make_view(static_cast<const bf16*>(a.data()), {m, d});
    std::vector<bf16> y(a.size());
    dsa::swiglu(be, avw, make_view(static_cast<const bf16*>(b.data()), {m, d}), make_view(y.data(), {m, d}));
    record(out, "swiglu", y);

    auto proj = normal(static_cast<std::size_t>(m * h), 28);
    auto qs = uniform(static_cast<std::size_t>(m * h), 29, 0.01f, 1.0f);
    std::vector<float> iw(proj.size());
    dsa::lightning_indexer_weights(be, make_view(static_cast<const float*>(proj.data()), {m, h}),
                                   make_view(static_cast<const float*>(qs.data()), {m, h}), make_view(iw.data(), {m, h}),
                                   0.5f, 1.0f / std::sqrt(128.0f));
    record(out, "lightning_indexer_weights", iw);

    auto x = convert<bf16>(normal(static_cast<std::size_t>(m * 256), 30));
    auto wf = normal(96 * 256, 31, 0.06f);
    std::vector<fp8_e4m3> wq(wf.size());
    std::vector<float> ws(2);
    dsa::weight_quant(be, make_view(static_cast<const float*>(wf.data()), {96, 256}), make_view(wq.data(), {96, 256}),
                      make_view(ws.data(), {1, 2}));
    std::vector<bf16> yl(static_cast<std::size_t>(m * 96));
    dsa::fp8_linear(be, make_view(static_cast<const bf16*>(x.data()), {m, 256}),
                    make_view(static_cast<const fp8_e4m3*>(wq.data()), {96, 256}),
                    make_view(static_cast<const float*>(ws.data()), {1, 2}), make_view(yl.data(), {m, 96}));
    record(out, "fp8_linear", yl);
    std::vector<float> yf(static_cast<std::size_t>(m * 96));
    dsa::linear(be, make_view(static_cast<const bf16*>(x.data()), {m, 256}),
                make_view(static_cast<const float*>(wf.data()), {96, 256}), make_view(yf.data(), {m, 96}));
    record(out, "linear", yf);

    auto wn = uniform(static_cast<std::size_t>(d), 32, 0.5f, 1.5f);
    auto bn = uniform(static_cast<std::size_t>(d), 33, -0.1f, 0.1f);
    const auto wnv = make_view(static_cast<const float*>(wn.data()), {d});
    std::vector<bf16> yn(a.size());
    dsa::rms_norm(be, avw, wnv, make_view(yn.data(), {m, d}));
    record(out, "rms_norm", yn);
    dsa::layer_norm(be, avw, wnv, make_view(static_cast<const float*>(bn.data()), {d}), make_view(yn.data(), {m, d}));
    record(out, "layer_norm", yn);
    std::vector<bf16> residual = b;
    dsa::add_rms_norm(be, avw, make_view(residual.data(), {m, d}), wnv, make_view(yn.data(), {m, d}));
    record(out, "add_rms_norm.y", yn);
    record(out, "add_rms_norm.residual", residual);

    dsa::rope_config rc;
    rc.dim = 64;
    rc.max_position = 8192;
    rc.factor = 40.0f;
    std::vector<std::int32_t> pos(static_cast<std::size_t>(m));
    for (index_t i = 0; i < m; ++i) pos[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(100 + 37 * i);
    auto xr = convert<bf16>(normal(static_cast<std::size_t>(m * h * 64), 34));
    auto xr2 = xr;
    const auto pv = make_view(static_cast<const std::int32_t*>(pos.data()), {m});
    dsa::rope_apply(be, make_view(xr.data(), {m, h, index_t{64}}), pv, rc, dsa::rope_layout::interleaved);
    dsa::rope_apply(be, make_view(xr2.data(), {m, h, index_t{64}}), pv, rc, dsa::rope_layout::half);
    record(out, "rope_apply<interleaved>", xr);
    record(out, "rope_apply<half>", xr2);
  }
  return out;
}

}  // namespace dsa_test
