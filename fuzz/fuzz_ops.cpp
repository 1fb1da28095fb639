// Fuzz target: the op front-ends and their CPU implementations.
//
// Each input picks one public op and builds every argument from the fuzzer's bytes: extents
// (mostly the ones the op expects, sometimes any other), strides (row-major, padded, broadcast,
// non-unit inner, absent), k, ranges, indices, page tables, configurations and values (NaN,
// +-inf, -0, huge, subnormal, raw fp8/bf16 bit patterns). Every view's memory is allocated to
// exactly its footprint, so ASan reports any read or write outside it. The op must either run or
// throw dsa::error; where the result has a checkable invariant (top-k indices, expert ids,
// gathered rows) it is checked.
#include "ops_gen.hpp"

namespace dsa_fuzz_ops {
namespace {

// ---- one function per op -----------------------------------------------------------------------

template <class T>
void fuzz_hadamard(gen& g) {
  static constexpr index_t sizes[] = {0, 1, 2, 3, 4, 8, 12, 16, 20, 24, 28, 40, 48, 64, 80, 100, 128, 256};
  const index_t n = sizes[g.p.ConsumeIntegralInRange<std::size_t>(0, std::size(sizes) - 1)];
  const index_t rows = g.small(4);
  auto x = g.values<T, 2>({rows, n});
  const float scale = g.value();
  if (g.p.ConsumeBool()) {
    dsa::hadamard_transform(g.backend(), x.view, x.view, scale);  // in place
  } else {
    auto y = g.output<T, 2>({rows, n});
    dsa::hadamard_transform(g.backend(), x.view, y.view, scale);
  }
}

template <class T>
void fuzz_act_quant(gen& g) {
  const index_t group = g.p.ConsumeBool() ? 128 : g.p.ConsumeIntegralInRange<index_t>(-1, 8);
  const index_t rows = g.small(4), groups = g.small(2);
  const index_t cols = group > 0 ? group * groups : g.small(8);
  auto x = g.values<T, 2>({rows, cols});
  auto q = g.output<fp8_e4m3, 2>({rows, cols});
  auto s = g.output<float, 2>({rows, groups});
  dsa::act_quant_config cfg;
  cfg.group_size = group;
  cfg.format = static_cast<dsa::scale_format>(g.p.ConsumeIntegralInRange(0, 2));
  dsa::act_quant(g.backend(), x.view, q.view, s.view, cfg);
  if (g.p.ConsumeBool()) {
    auto y = g.output<T, 2>({rows, cols});
    dsa::act_dequant(g.backend(), dsa::host_view<const fp8_e4m3, 2>(q.view), dsa::host_view<const float, 2>(s.view),
                     y.view, group);
  }
}

template <class T>
void fuzz_act_dequant(gen& g) {
  const index_t group = g.p.ConsumeBool() ? 128 : g.p.ConsumeIntegralInRange<index_t>(-1, 8);
  const index_t rows = g.small(4), groups = g.small(2);
  const index_t cols = group > 0 ? group * groups : g.small(8);
  auto q = g.values<fp8_e4m3, 2>({rows, cols});
  auto s = g.values<float, 2>({rows, groups});
  auto y = g.output<T, 2>({rows, cols});
  dsa::act_dequant(g.backend(), q.view, s.view, y.view, group);
}

template <class T>
void fuzz_weight_quant(gen& g) {
  const index_t rows = g.p.ConsumeIntegralInRange<index_t>(0, 260), cols = g.p.ConsumeIntegralInRange<index_t>(0, 140);
  const index_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
  auto w = g.values<T, 2>({rows, cols});
  auto q = g.output<fp8_e4m3, 2>({rows, cols});
  auto s = g.output<float, 2>({br, bc});
  dsa::weight_quant(g.backend(), w.view, q.view, s.view);
  auto w2 = g.output<T, 2>({rows, cols});
  dsa::weight_dequant(g.backend(), dsa::host_view<const fp8_e4m3, 2>(q.view), dsa::host_view<const float, 2>(s.view),
                      w2.view);
}

void fuzz_kv_cache(gen& g) {
  const index_t n = g.small(3), rows = g.small(4);
  auto kv = g.values<bf16, 2>({n, dsa::kv_dim});
  auto cache = g.output<std::uint8_t, 2>({rows, dsa::kv_fp8_row_bytes});
  const bool use_slots = g.p.ConsumeBool();
  auto slots = g.indices<1>({n}, rows);
  dsa::kv_cache_fp8_pack(g.backend(), kv.view, cache.view,
                         use_slots ? dsa::host_view<const std::int32_t, 1>(slots.view) : dsa::host_view<const std::int32_t, 1>{});
  auto raw = g.values<std::uint8_t, 2>({rows, dsa::kv_fp8_row_bytes});
  auto out = g.output<bf16, 2>({rows, dsa::kv_dim});
  dsa::kv_cache_fp8_unpack(g.backend(), g.p.ConsumeBool() ? raw.view : cache.view, out.view);
}

void fuzz_indexer_cache(gen& g) {
  const index_t n = g.small(3), rows = g.small(4);
  auto k = g.values<fp8_e4m3, 2>({n, dsa::indexer_cache_dim});
  auto ks = g.values<float, 1>({n});
  auto cache = g.output<std::uint8_t, 2>({rows, dsa::indexer_cache_row_bytes});
  const bool use_slots = g.p.ConsumeBool();
  auto slots = g.indices<1>({n}, rows);
  dsa::indexer_cache_pack(g.backend(), k.view, ks.view, cache.view,
                          use_slots ? dsa::host_view<const std::int32_t, 1>(slots.view) : dsa::host_view<const std::int32_t, 1>{});
  auto k2 = g.output<fp8_e4m3, 2>({rows, dsa::indexer_cache_dim});
  auto ks2 = g.output<float, 1>({rows});
  dsa::indexer_cache_unpack(g.backend(), cache.view, k2.view, ks2.view);
}

template <class T>
void fuzz_indexer(gen& g) {
  const index_t m = g.small(3), h = g.small(3), d = g.p.ConsumeBool() ? 128 : g.small(8), n = g.small(9);
  auto q = g.values<T, 3>({m, h, d});
  auto w = g.values<float, 2>({m, h});
  auto k = g.values<T, 2>({n, d});
  auto ks = g.values<float, 1>({n});
  auto r = g.ranges(m, n);
  auto sc = g.output<float, 2>({m, n});
  dsa::lightning_indexer_scores(g.backend(), q.view, w.view, k.view, ks.view, r.view, sc.view);
}

void fuzz_indexer_paged(gen& g) {
  const index_t m = g.small(3), h = g.small(3), n = g.small(9), bs = g.p.ConsumeIntegralInRange<index_t>(-1, 4);
  const index_t blocks = bs > 0 ? (n + bs - 1) / bs : g.small(3);
  const index_t slots = g.small(12);
  auto q = g.values<fp8_e4m3, 3>({m, h, dsa::indexer_cache_dim});
  auto w = g.values<float, 2>({m, h});
  auto cache = g.values<std::uint8_t, 2>({slots, dsa::indexer_cache_row_bytes});
  auto table = g.indices<2>({m, blocks}, bs > 0 ? (slots + bs - 1) / bs : 1);
  auto r = g.ranges(m, n);
  auto sc = g.output<float, 2>({m, n});
  dsa::lightning_indexer_scores_paged(g.backend(), q.view, w.view, cache.view, table.view, bs, r.view, sc.view);
}

void fuzz_indexer_backward(gen& g) {
  const index_t m = g.small(3), h = g.small(3), d = g.small(6), n = g.small(6);
  auto q = g.values<float, 3>({m, h, d});
  auto w = g.values<float, 2>({m, h});
  auto k = g.values<float, 2>({n, d});
  auto ks = g.values<float, 1>({n});
  auto r = g.ranges(m, n);
  auto gs = g.values<float, 2>({m, n});
  auto gq = g.output<float, 3>({m, h, d});
  auto gw = g.output<float, 2>({m, h});
  auto gk = g.output<float, 2>({n, d});
  dsa::lightning_indexer_backward(g.backend(), q.view, w.view, k.view, ks.view, r.view, gs.view, gq.view, gw.view,
                                  gk.view);
}

void fuzz_topk(gen& g) {
  const index_t m = g.small(4), n = g.p.ConsumeIntegralInRange<index_t>(0, 40);
  const index_t k = g.p.ConsumeIntegralInRange<index_t>(-1, 48);
  auto sc = g.values<float, 2>({m, n});
  auto r = g.ranges(m, n);
  auto out = g.output<std::int32_t, 2>({m, std::max<index_t>(k, 0)});
  bool ran = false;
  try {
    dsa::topk_indices(g.backend(), sc.view, r.view, k, out.view);
    ran = true;
  } catch (const dsa::error& e) {
    dsa_fuzz::check_printable(e.what());
  }
  if (ran) check_topk_result(sc.view, r.view, out.view);
}

void fuzz_topk_paged(gen& g) {
  const index_t m = g.small(3), n = g.p.ConsumeIntegralInRange<index_t>(0, 20), k = g.p.ConsumeIntegralInRange<index_t>(-1, 24);
  const index_t bs = g.p.ConsumeIntegralInRange<index_t>(-1, 4);
  const index_t blocks = bs > 0 ? (n + bs - 1) / bs : g.small(3);
  auto sc = g.values<float, 2>({m, n});
  auto r = g.ranges(m, n);
  auto table = g.tensor<std::int32_t, 2>({m, blocks}, [&](index_t) {
    return g.p.ConsumeBool() ? g.index(8) : static_cast<std::int32_t>(g.p.ConsumeIntegralInRange(i32_max / 8, i32_max));
  });
  auto out = g.output<std::int32_t, 2>({m, std::max<index_t>(k, 0)});
  dsa::topk_indices_paged(g.backend(), sc.view, r.view, k, table.view, bs, out.view);
}

void fuzz_gather(gen& g) {
  const index_t n = g.small(5), d = g.small(5), m = g.small(3), k = g.small(4);
  auto src = g.values<float, 2>({n, d});
  auto idx = g.indices<2>({m, k}, n);
  auto dst = g.output<float, 3>({m, k, d});
  dsa::gather_rows(g.backend(), src.view, idx.view, dst.view);
}

template <class O>
void fuzz_sparse_mla(gen& g) {
  const index_t s = g.small(2), h = g.small(3), n = g.small(6), k = g.small(5);
  const bool fp8 = g.p.ConsumeBool();
  const index_t d_qk = fp8 ? dsa::kv_dim : g.p.ConsumeIntegralInRange<index_t>(0, 8);
  dsa::sparse_mla_config cfg;
  cfg.softmax_scale = g.p.ConsumeBool() ? 0.125f : g.value();
  cfg.d_v = fp8 ? (g.p.ConsumeBool() ? 512 : g.small(8)) : g.p.ConsumeIntegralInRange<index_t>(0, d_qk + 1);
  auto q = g.values<bf16, 3>({s, h, d_qk});
  auto idx = g.indices<2>({s, k}, n);
  auto out = g.output<O, 3>({s, h, cfg.d_v});
  auto lse = g.output<float, 2>({s, h});
  auto probs = g.output<float, 2>({s, k});
  if (fp8) {
    auto kv = g.values<std::uint8_t, 2>({n, dsa::kv_fp8_row_bytes});
    dsa::sparse_mla_attention(g.backend(), q.view, kv.view, idx.view, out.view, lse.view, cfg, probs.view);
    return;
  }
  auto kv = g.values<bf16, 2>({n, d_qk});
  dsa::sparse_mla_attention(g.backend(), q.view, kv.view, idx.view, out.view, lse.view, cfg, probs.view);
  // Accepted: every extent is the expected one. A row reading a NaN (its query head, or a used kv
  // row's first d_qk values) is NaN.
  const index_t nk = kv.view.extent(0), dq = q.view.extent(2);
  for (index_t t = 0; t < q.view.extent(0); ++t) {
    bool kv_nan = false, any_used = false;
    for (index_t e = 0; e < idx.view.extent(1); ++e) {
      const std::int32_t j = idx.view(t, e);
      if (j < 0 || j >= nk) continue;
      any_used = true;
      for (index_t c = 0; c < dq; ++c) kv_nan = kv_nan || is_nan(kv.view(j, c));
    }
    for (index_t hh = 0; hh < q.view.extent(1); ++hh) {
      bool q_nan = false;
      for (index_t c = 0; c < dq; ++c) q_nan = q_nan || is_nan(q.view(t, hh, c));
      check_attention_row_nan(t, hh, any_used && (kv_nan || q_nan), out.view, lse.view);
    }
  }
}

void fuzz_sparse_mha(gen& g) {
  const index_t s = g.small(2), h = g.small(3), n = g.small(5), k = g.small(4);
  const index_t dn = g.small(4), dr = g.small(3), dv = g.small(4);
  auto q = g.values<bf16, 3>({s, h, dn + dr});
  auto kn = g.values<bf16, 3>({n, h, dn});
  auto kr = g.values<bf16, 2>({n, dr});
  auto v = g.values<bf16, 3>({n, h, dv});
  auto idx = g.indices<2>({s, k}, n);
  auto out = g.output<bf16, 3>({s, h, dv});
  auto lse = g.output<float, 2>({s, h});
  dsa::sparse_mha_config cfg;
  cfg.softmax_scale = g.p.ConsumeBool() ? 0.125f : g.value();
  cfg.rounding = static_cast<dsa::attention_rounding>(g.p.ConsumeIntegralInRange(0, 3));
  dsa::sparse_mha_attention(g.backend(), q.view, kn.view, kr.view, v.view, idx.view, out.view, cfg, lse.view);
  // Accepted: a head reading a NaN in its query or a used key's logit inputs is NaN.
  const index_t nk = kn.view.extent(0);
  for (index_t t = 0; t < q.view.extent(0); ++t) {
    for (index_t hh = 0; hh < q.view.extent(1); ++hh) {
      bool nan_in = false, any_used = false;
      for (index_t c = 0; c < q.view.extent(2); ++c) nan_in = nan_in || is_nan(q.view(t, hh, c));
      for (index_t e = 0; e < idx.view.extent(1); ++e) {
        const std::int32_t j = idx.view(t, e);
        if (j < 0 || j >= nk) continue;
        any_used = true;
        for (index_t c = 0; c < kn.view.extent(2); ++c) nan_in = nan_in || is_nan(kn.view(j, hh, c));
        for (index_t c = 0; c < kr.view.extent(1); ++c) nan_in = nan_in || is_nan(kr.view(j, c));
      }
      check_attention_row_nan(t, hh, any_used && nan_in, out.view, lse.view);
    }
  }
}

void fuzz_kl(gen& g) {
  const index_t m = g.small(4), h = g.small(3), n = g.small(6);
  auto attn = g.values<float, 3>({m, h, n});
  auto index = g.values<float, 2>({m, n});
  auto loss = g.output<float, 1>({1});
  auto grad = g.output<float, 2>({m, n});
  // Accepted: every key of a row's key set carries a NaN gradient when the set reads a NaN
  // attention value or score; a NaN attention value also makes the loss NaN.
  auto check_nan = [&](index_t t, const std::vector<index_t>& keys) {
    bool attn_nan = false, score_nan = false;
    for (const index_t j : keys) {
      for (index_t hh = 0; hh < attn.view.extent(1); ++hh) attn_nan = attn_nan || is_nan(attn.view(t, hh, j));
      score_nan = score_nan || is_nan(index.view(t, j));
    }
    if (attn_nan && own_elements(loss.view)) DSA_FUZZ_ASSERT(is_nan(loss.view(0)));
    if ((attn_nan || score_nan) && own_elements(grad.view)) {
      ++nan_checks;
      for (const index_t j : keys) DSA_FUZZ_ASSERT(is_nan(grad.view(t, j)));
    }
  };
  std::vector<index_t> keys;
  if (g.p.ConsumeBool()) {
    auto r = g.ranges(m, n);
    dsa::indexer_kl_loss_dense(g.backend(), attn.view, index.view, r.view, loss.view, grad.view);
    for (index_t t = 0; t < attn.view.extent(0); ++t) {
      keys.clear();
      for (index_t j = r.view(t, 0); j < r.view(t, 1); ++j) keys.push_back(j);
      check_nan(t, keys);
    }
  } else {
    auto topk = g.indices<2>({m, g.small(5)}, n);
    dsa::indexer_kl_loss_sparse(g.backend(), attn.view, index.view, topk.view, loss.view, grad.view);
    for (index_t t = 0; t < attn.view.extent(0); ++t) {
      keys.clear();
      for (index_t e = 0; e < topk.view.extent(1); ++e) {
        const std::int32_t j = topk.view(t, e);
        if (j >= 0 && j < attn.view.extent(2)) keys.push_back(j);
      }
      check_nan(t, keys);
    }
  }
}

void fuzz_moe(gen& g) {
  const index_t t = g.small(3), e = g.p.ConsumeIntegralInRange<index_t>(0, 16);
  dsa::moe_routing_config cfg;
  cfg.n_group = g.p.ConsumeIntegralInRange<index_t>(-1, 5);
  cfg.topk_group = g.p.ConsumeIntegralInRange<index_t>(-1, 5);
  cfg.top_k = g.p.ConsumeIntegralInRange<index_t>(-1, 9);
  cfg.scoring = static_cast<dsa::moe_scoring>(g.p.ConsumeIntegralInRange(0, 2));
  cfg.norm_topk_prob = g.p.ConsumeBool();
  cfg.routed_scaling_factor = g.p.ConsumeBool() ? 2.5f : g.value();
  auto logits = g.values<float, 2>({t, e});
  auto bias = g.values<float, 1>({e});
  auto ids = g.output<std::int32_t, 2>({t, std::max<index_t>(cfg.top_k, 0)});
  auto w = g.output<float, 2>({t, std::max<index_t>(cfg.top_k, 0)});
  bool ran = false;
  try {
    dsa::moe_route(g.backend(), logits.view, bias.view, ids.view, w.view, cfg);
    ran = true;
  } catch (const dsa::error& e) {
    dsa_fuzz::check_printable(e.what());
  }
  if (!ran) return;
  for (index_t i = 0; i < ids.view.extent(0); ++i) {
    for (index_t j = 0; j < ids.view.extent(1); ++j) {
      const index_t id = ids.view(i, j);
      DSA_FUZZ_ASSERT(id >= 0 && id < logits.view.extent(1));
      if (j > 0) DSA_FUZZ_ASSERT(id > ids.view(i, j - 1));
    }
  }
}

void fuzz_moe_combine(gen& g) {
  const index_t t = g.small(3), d = g.small(5), k = g.small(3), r = g.small(6);
  auto eo = g.values<bf16, 2>({r, d});
  auto rows = g.indices<2>({t, k}, r);
  auto w = g.values<float, 2>({t, k});
  auto shared = g.values<bf16, 2>({t, d});
  auto y = g.output<bf16, 2>({t, d});
  dsa::moe_combine(g.backend(), eo.view, rows.view, w.view, shared.view, y.view);
}

void fuzz_dense(gen& g) {
  const index_t t = g.small(3), d = g.small(6);
  switch (g.p.ConsumeIntegralInRange(0, 4)) {
    case 0: {
      auto a = g.values<bf16, 2>({t, d});
      auto b = g.values<bf16, 2>({t, d});
      auto y = g.output<bf16, 2>({t, d});
      dsa::swiglu(g.backend(), a.view, b.view, g.p.ConsumeBool() ? a.view : y.view);
      break;
    }
    case 1: {
      auto proj = g.values<float, 2>({t, d});
      auto qs = g.values<float, 2>({t, d});
      auto w = g.output<float, 2>({t, d});
      dsa::lightning_indexer_weights(g.backend(), proj.view, qs.view, w.view, g.value(), g.value());
      break;
    }
    case 2: fuzz_fp8_linear(g, t); break;
    case 3: {
      const index_t out = g.small(5);
      auto x = g.values<bf16, 2>({t, d});
      auto w = g.values<float, 2>({out, d});
      auto y = g.output<float, 2>({t, out});
      dsa::linear(g.backend(), x.view, w.view, y.view);
      break;
    }
    default: {
      auto x = g.values<bf16, 2>({t, d});
      auto res = g.values<bf16, 2>({t, d});
      auto wt = g.values<float, 1>({d});
      auto bias = g.values<float, 1>({d});
      auto y = g.output<bf16, 2>({t, d});
      const float eps = g.p.ConsumeBool() ? 1e-6f : g.value();
      switch (g.p.ConsumeIntegralInRange(0, 2)) {
        case 0: dsa::rms_norm(g.backend(), x.view, wt.view, y.view, eps); break;
        case 1: dsa::add_rms_norm(g.backend(), x.view, res.view, wt.view, y.view, eps); break;
        default: dsa::layer_norm(g.backend(), x.view, wt.view, bias.view, y.view, eps); break;
      }
    }
  }
}

void fuzz_rope(gen& g) {
  dsa::rope_config cfg;
  cfg.dim = g.p.ConsumeBool() ? 64 : g.p.ConsumeIntegralInRange<index_t>(-1, 9);
  cfg.base = g.p.ConsumeBool() ? 10000.0f : g.value();
  cfg.factor = g.p.ConsumeBool() ? 40.0f : g.value();
  cfg.original_max_position = g.p.ConsumeBool() ? 4096 : g.p.ConsumeIntegralInRange<index_t>(-1, 8192);
  cfg.max_position = g.p.ConsumeBool() ? 8192 : g.p.ConsumeIntegralInRange<index_t>(-1, 1 << 20);
  cfg.beta_fast = g.p.ConsumeBool() ? 32.0f : g.value();
  cfg.beta_slow = g.p.ConsumeBool() ? 1.0f : g.value();
  const index_t t = g.small(3), h = g.small(3);
  auto x = g.values<bf16, 3>({t, h, cfg.dim});
  auto pos = g.tensor<std::int32_t, 1>({t}, [&](index_t) { return g.element<std::int32_t>(); });
  dsa::rope_apply(g.backend(), x.view, pos.view, cfg,
                  static_cast<dsa::rope_layout>(g.p.ConsumeIntegralInRange(0, 2)));
}

}  // namespace
}  // namespace dsa_fuzz_ops

using namespace dsa_fuzz_ops;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider p(data, size);
  gen g{p};
  try {
    switch (p.ConsumeIntegralInRange(0, 24)) {
      case 0: fuzz_hadamard<float>(g); break;
      case 1: fuzz_hadamard<bf16>(g); break;
      case 2: fuzz_act_quant<float>(g); break;
      case 3: fuzz_act_quant<bf16>(g); break;
      case 4: fuzz_act_dequant<bf16>(g); break;
      case 5: fuzz_weight_quant<float>(g); break;
      case 6: fuzz_weight_quant<bf16>(g); break;
      case 7: fuzz_kv_cache(g); break;
      case 8: fuzz_indexer_cache(g); break;
      case 9: fuzz_indexer<fp8_e4m3>(g); break;
      case 10: fuzz_indexer<float>(g); break;
      case 11: fuzz_indexer_paged(g); break;
      case 12: fuzz_indexer_backward(g); break;
      case 13: fuzz_topk(g); break;
      case 14: fuzz_topk_paged(g); break;
      case 15: fuzz_gather(g); break;
      case 16: fuzz_sparse_mla<float>(g); break;
      case 17: fuzz_sparse_mla<bf16>(g); break;
      case 18: fuzz_sparse_mha(g); break;
      case 19: fuzz_kl(g); break;
      case 20: fuzz_moe(g); break;
      case 21: fuzz_moe_combine(g); break;
      case 22: fuzz_dense(g); break;
      case 23: fuzz_rope(g); break;
      default: fuzz_act_dequant<float>(g); break;
    }
  } catch (const dsa::error& e) {
    dsa_fuzz::check_printable(e.what());
    // A clear refusal is the expected outcome for a bad argument.
  }
  return 0;
}
