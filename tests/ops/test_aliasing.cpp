// Outputs that overlap an input, or whose rows overlap each other, are rejected with a
// dsa::error before any work starts: otherwise threads race on the shared memory and the
// result is silent garbage. One case per op that writes through a view.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/cpu/indexer_kl_loss.hpp"
#include "dsa/cpu/kv_cache.hpp"
#include "dsa/cpu/lightning_indexer.hpp"
#include "dsa/cpu/moe_routing.hpp"
#include "dsa/cpu/sparse_mla_attention.hpp"
#include "dsa/ops/fp8_quant.hpp"
#include "dsa/ops/indexer_kl_loss.hpp"
#include "dsa/ops/kv_cache.hpp"
#include "dsa/ops/lightning_indexer.hpp"
#include "dsa/ops/moe_routing.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"

using dsa::index_t;

namespace {
template <class T, std::size_t R>
dsa::host_view<T, R> strided(T* p, std::array<index_t, R> e, std::array<index_t, R> s) {
  return dsa::host_view<T, R>(p, e, s);
}
}  // namespace

TEST_CASE("aliasing: FP8 quantizers reject scales written over their input or overlapping rows") {
  std::vector<float> x(4 * 128, 1.0f);
  std::vector<dsa::fp8_e4m3> q(4 * 128);
  std::vector<float> s(4);
  auto xv = dsa::make_view(x.data(), {4, 128});
  auto qv = dsa::make_view(q.data(), {4, 128});
  // s aliases the first elements of x.
  CHECK_THROWS_WITH_AS(dsa::act_quant(dsa::cpu, xv, qv, dsa::make_view(x.data(), {4, 1})),
                       doctest::Contains("dsa::act_quant: s = a view overlapping x"), dsa::error);
  // q rows with stride 0 overlap each other.
  CHECK_THROWS_WITH_AS(dsa::act_quant(dsa::cpu, xv, strided<dsa::fp8_e4m3, 2>(q.data(), {4, 128}, {0, 1}),
                                      dsa::make_view(s.data(), {4, 1})),
                       doctest::Contains("dsa::act_quant: q.stride(0) = 0"), dsa::error);
  // y is written over the codes it dequantizes.
  std::vector<float> buf(4 * 128);
  auto codes = dsa::make_view(reinterpret_cast<dsa::fp8_e4m3*>(buf.data()), {4, 128});
  CHECK_THROWS_WITH_AS(dsa::act_dequant(dsa::cpu, dsa::host_view<const dsa::fp8_e4m3, 2>(codes), dsa::make_view(s.data(), {4, 1}),
                                        dsa::make_view(buf.data(), {4, 128})),
                       doctest::Contains("dsa::act_dequant: y = a view overlapping q"), dsa::error);
}

TEST_CASE("aliasing: cache packing rejects a cache overlapping its input") {
  std::vector<std::uint8_t> bytes(4 * dsa::kv_fp8_row_bytes);
  auto kv = dsa::make_view(reinterpret_cast<dsa::bf16*>(bytes.data()), {2, 576});
  auto cache = dsa::make_view(bytes.data(), {2, dsa::kv_fp8_row_bytes});
  CHECK_THROWS_WITH_AS(dsa::kv_cache_fp8_pack(dsa::cpu, kv, cache),
                       doctest::Contains("dsa::kv_cache_fp8_pack: cache = a view overlapping kv"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::kv_cache_fp8_unpack(dsa::cpu, dsa::host_view<const std::uint8_t, 2>(cache), kv),
                       doctest::Contains("dsa::kv_cache_fp8_unpack: kv = a view overlapping cache"), dsa::error);
}

TEST_CASE("aliasing: indexer scores may not overlap the keys, and backward gradients not each other") {
  const index_t m = 2, h = 2, d = 4, n = 8;
  std::vector<float> q(m * h * d, 0.5f), w(m * h, 1.0f), k(n * d, 0.25f), ks(n, 1.0f), g(m * n, 1.0f);
  std::vector<std::int32_t> ranges = {0, n, 0, n};
  auto rv = dsa::make_view(ranges.data(), {m, 2});
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(dsa::cpu, dsa::make_view(q.data(), {m, h, d}), dsa::make_view(w.data(), {m, h}),
                                                     dsa::make_view(k.data(), {n, d}), dsa::make_view(ks.data(), {n}), rv,
                                                     dsa::make_view(k.data(), {m, n})),
                       doctest::Contains("dsa::lightning_indexer_scores: scores = a view overlapping k"), dsa::error);
  std::vector<float> gq(m * h * d);
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_backward(dsa::cpu, dsa::make_view(q.data(), {m, h, d}), dsa::make_view(w.data(), {m, h}),
                                                       dsa::make_view(k.data(), {n, d}), dsa::make_view(ks.data(), {n}), rv,
                                                       dsa::make_view(g.data(), {m, n}), dsa::make_view(gq.data(), {m, h, d}),
                                                       dsa::make_view(gq.data(), {m, h}), dsa::host_view<float, 2>{}),
                       doctest::Contains("dsa::lightning_indexer_backward: grad_w = a view overlapping grad_q"), dsa::error);
}

TEST_CASE("aliasing: KL loss, MoE routing and sparse attention outputs") {
  const index_t m = 3, n = 3;
  std::vector<float> attn(m * 1 * n, 1.0f / 3), idx(m * n, 0.0f), grad(m * n), loss(1);
  std::vector<std::int32_t> ranges = {0, 3, 0, 3, 0, 3};
  CHECK_THROWS_WITH_AS(dsa::indexer_kl_loss_dense(dsa::cpu, dsa::make_view(attn.data(), {m, 1, n}), dsa::make_view(idx.data(), {m, n}),
                                                  dsa::make_view(ranges.data(), {m, 2}), dsa::make_view(grad.data(), {1}),
                                                  dsa::make_view(grad.data(), {m, n})),
                       doctest::Contains("dsa::indexer_kl_loss_dense: loss = a view overlapping grad_index"), dsa::error);

  std::vector<float> logits(2 * 8, 0.1f), wts(2 * 2);
  std::vector<std::int32_t> ids(2 * 2);
  dsa::moe_routing_config cfg;
  cfg.top_k = 2;
  CHECK_THROWS_WITH_AS(dsa::moe_route(dsa::cpu, dsa::make_view(logits.data(), {2, 8}), dsa::host_view<const float, 1>{},
                                      dsa::make_view(ids.data(), {2, 2}), dsa::make_view(logits.data(), {2, 2}), cfg),
                       doctest::Contains("dsa::moe_route: weights = a view overlapping logits"), dsa::error);

  const index_t s = 1, heads = 2, dq = 8, dv = 4, keys = 4, k = 2;
  std::vector<dsa::bf16> qb(s * heads * dq, dsa::bf16(0.5f)), kv(keys * dq, dsa::bf16(0.25f));
  std::vector<std::int32_t> sel = {0, 1};
  std::vector<float> out(s * heads * dv), lse(s * heads);
  dsa::sparse_mla_config acfg{0.5f, dv};
  CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(dsa::cpu, dsa::make_view(qb.data(), {s, heads, dq}), dsa::make_view(kv.data(), {keys, dq}),
                                                 dsa::make_view(sel.data(), {s, k}), dsa::make_view(out.data(), {s, heads, dv}),
                                                 dsa::make_view(out.data(), {s, heads}), acfg),
                       doctest::Contains("dsa::sparse_mla_attention: lse = a view overlapping out"), dsa::error);
}
