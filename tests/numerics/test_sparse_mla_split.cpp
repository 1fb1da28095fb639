// Split-k sparse MLA attention on the host: the split ranges and workspace layout of
// numerics/sparse_mla_attention.hpp, the split heuristic and workspace size of the front-end, and
// a host replay of the CUDA kernels (kernels/sparse_mla_attention_kernel.cuh: tiles of 32
// entries, lane-strided logit sums and their butterfly, the online softmax per tile, the P·V
// fused multiply-adds, the ascending online_softmax_merge of the splits, probs from the final
// lse) compared with the CPU backend within the tolerance of support/sparse_mla_tolerance.hpp,
// for 1 to 64 splits. This is how the kernels' index logic and the stated tolerance are checked
// without a GPU; the device tests (tests/cuda/test_ops_sparse_mla_attention.cpp) then compare
// the kernels themselves with the CPU backend against the same bound.
// Mirrors: sparse_mla_attention_kernel.cuh load_tile_rows / load_rows /
// tile_logits, sparse_mla_attention_kernel's per-tile online softmax and P·V, the combine
// kernel's ascending online_softmax_merge, and sparse_mla_probs_kernel's
// online_softmax_probability_from_lse.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "dsa/core/error.hpp"
#include "dsa/numerics/online_softmax.hpp"
#include "dsa/numerics/sparse_mla_attention.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"
#include "support/sparse_mla_tolerance.hpp"

namespace {

using dsa::index_t;
using dsa_test::sparse_mla_indices;

// The CUDA kernels' shapes (cuda_kernels::sparse_mla_tile / sparse_mla_heads).
constexpr index_t kTile = 32;
constexpr index_t kHeads = 16;

// arch/warp.cuh's xor butterflies over 32 lanes; every lane ends with lane 0's bits.
float butterfly_sum(std::vector<float> v) {
  for (int off = 16; off > 0; off /= 2) {
    std::vector<float> next(32);
    for (int l = 0; l < 32; ++l) next[static_cast<std::size_t>(l)] = v[static_cast<std::size_t>(l)] + v[static_cast<std::size_t>(l ^ off)];
    v = next;
  }
  return v[0];
}
float butterfly_max(std::vector<float> v) {
  for (int off = 16; off > 0; off /= 2) {
    std::vector<float> next(32);
    for (int l = 0; l < 32; ++l) next[static_cast<std::size_t>(l)] = std::fmax(v[static_cast<std::size_t>(l)], v[static_cast<std::size_t>(l ^ off)]);
    v = next;
  }
  return v[0];
}

// tile_logits for one head and one key: lane l sums i = l, l + 32, ... with
// fused multiply-adds, then the butterfly.
float replay_logit(const float* q, const float* k, index_t d) {
  std::vector<float> lanes(32, 0.0f);
  for (index_t i = 0; i < d; ++i) lanes[static_cast<std::size_t>(i % 32)] = std::fma(k[i], q[i], lanes[static_cast<std::size_t>(i % 32)]);
  return butterfly_sum(lanes);
}

struct replay_partial {
  dsa::online_softmax_state st;
  std::vector<float> acc;
};

// sparse_mla_attention_kernel for one (token, head, split).
replay_partial replay_split(const dsa_test::sparse_mla_problem& pb, index_t t, index_t hh, index_t num_splits,
                            index_t split) {
  replay_partial r;
  r.acc.assign(static_cast<std::size_t>(pb.d_v), 0.0f);
  const dsa::sparse_mla_split_range range = dsa::sparse_mla_split(pb.k, num_splits, split, kTile);
  const float* q = pb.q.data() + (t * pb.h + hh) * pb.d_qk;
  for (index_t e0 = range.begin; e0 < range.end; e0 += kTile) {
    std::vector<index_t> rows(kTile, -1);
    bool any = false;
    for (index_t j = 0; j < kTile; ++j) {
      const index_t e = e0 + j;
      if (e >= range.end) continue;
      const std::int32_t idx = pb.indices[static_cast<std::size_t>(t * pb.k + e)];
      if (dsa::sparse_mla_index_valid(idx, pb.n)) {
        rows[static_cast<std::size_t>(j)] = idx;
        any = true;
      }
    }
    if (!any) continue;
    std::vector<float> x(kTile);
    for (index_t j = 0; j < kTile; ++j) {
      const index_t row = rows[static_cast<std::size_t>(j)];
      x[static_cast<std::size_t>(j)] = row < 0 ? -std::numeric_limits<float>::infinity()
                                               : replay_logit(q, pb.kv.data() + row * pb.d_qk, pb.d_qk) * pb.scale;
    }
    const float alpha = dsa::online_softmax_rescale(r.st, butterfly_max(x));
    std::vector<float> w(kTile);
    for (index_t j = 0; j < kTile; ++j) w[static_cast<std::size_t>(j)] = dsa::online_softmax_weight(r.st, x[static_cast<std::size_t>(j)]);
    r.st.sum += butterfly_sum(w);
    for (index_t c = 0; c < pb.d_v; ++c) {
      float a = r.acc[static_cast<std::size_t>(c)] * alpha;
      for (index_t j = 0; j < kTile; ++j) {
        const index_t row = rows[static_cast<std::size_t>(j)];
        const float v = row < 0 ? 0.0f : pb.kv[static_cast<std::size_t>(row * pb.d_qk + c)];  // zero-filled rows
        a = std::fma(w[static_cast<std::size_t>(j)], v, a);
      }
      r.acc[static_cast<std::size_t>(c)] = a;
    }
  }
  return r;
}

// The whole op: attention (+ combine when split) and probs from the final lse.
dsa_test::sparse_mla_result replay(const dsa_test::sparse_mla_problem& pb, index_t num_splits, bool want_probs) {
  dsa_test::sparse_mla_result res;
  res.out.assign(static_cast<std::size_t>(pb.s * pb.h * pb.d_v), 0.0f);
  res.lse.assign(static_cast<std::size_t>(pb.s * pb.h), 0.0f);
  for (index_t t = 0; t < pb.s; ++t) {
    for (index_t hh = 0; hh < pb.h; ++hh) {
      dsa::online_softmax_state st;
      std::vector<float> acc(static_cast<std::size_t>(pb.d_v), 0.0f);
      if (num_splits == 1) {
        replay_partial p = replay_split(pb, t, hh, 1, 0);
        st = p.st;
        acc = p.acc;
      } else {
        // sparse_mla_combine_kernel: ascending splits from the empty state.
        for (index_t sp = 0; sp < num_splits; ++sp) {
          const replay_partial p = replay_split(pb, t, hh, num_splits, sp);
          const dsa::online_softmax_merge_factors f = dsa::online_softmax_merge(st, p.st);
          for (index_t c = 0; c < pb.d_v; ++c) {
            acc[static_cast<std::size_t>(c)] = acc[static_cast<std::size_t>(c)] * f.scale_a + p.acc[static_cast<std::size_t>(c)] * f.scale_b;
          }
          st = f.merged;
        }
      }
      for (index_t c = 0; c < pb.d_v; ++c) {
        res.out[static_cast<std::size_t>((t * pb.h + hh) * pb.d_v + c)] = dsa::online_softmax_normalize(st, acc[static_cast<std::size_t>(c)]);
      }
      res.lse[static_cast<std::size_t>(t * pb.h + hh)] = dsa::online_softmax_lse(st);
    }
  }
  if (want_probs) {
    // sparse_mla_probs_kernel: blocks of 16 heads, exp(x - lse).
    res.probs.assign(static_cast<std::size_t>(pb.s * pb.k), 0.0f);
    for (index_t t = 0; t < pb.s; ++t) {
      for (index_t e = 0; e < pb.k; ++e) {
        const std::int32_t idx = pb.indices[static_cast<std::size_t>(t * pb.k + e)];
        float total = 0.0f;
        for (index_t g0 = 0; g0 < pb.h; g0 += kHeads) {
          float part = 0.0f;
          for (index_t hh = g0; hh < std::min(pb.h, g0 + kHeads); ++hh) {
            const float x = dsa::sparse_mla_index_valid(idx, pb.n)
                                ? replay_logit(pb.q.data() + (t * pb.h + hh) * pb.d_qk, pb.kv.data() + idx * pb.d_qk, pb.d_qk) * pb.scale
                                : -std::numeric_limits<float>::infinity();
            part += dsa::online_softmax_probability_from_lse(x, res.lse[static_cast<std::size_t>(t * pb.h + hh)]);
          }
          total += part;
        }
        res.probs[static_cast<std::size_t>(t * pb.k + e)] = total;
      }
    }
  }
  return res;
}

void check_replay(index_t s, index_t h, index_t d_qk, index_t d_v, index_t k, index_t n, bool fp8,
                  sparse_mla_indices kind, std::initializer_list<index_t> splits, bool want_probs, std::uint64_t seed) {
  const dsa_test::sparse_mla_inputs in = dsa_test::make_sparse_mla_inputs(s, h, d_qk, d_v, k, n, fp8, kind, seed);
  const dsa_test::sparse_mla_result ref = dsa_test::cpu_sparse_mla<float>(in, fp8, want_probs);
  const dsa_test::sparse_mla_result one = replay(in.pb, 1, want_probs);
  for (const index_t ns : splits) {
    CAPTURE(s);
    CAPTURE(h);
    CAPTURE(d_qk);
    CAPTURE(d_v);
    CAPTURE(k);
    CAPTURE(n);
    CAPTURE(fp8);
    CAPTURE(ns);
    const dsa_test::sparse_mla_result r = ns == 1 ? one : replay(in.pb, ns, want_probs);
    dsa_test::check_sparse_mla_close("replay vs cpu", in.pb, r, ref, false);
    // Different split counts agree with each other within the same bound.
    if (ns != 1) dsa_test::check_sparse_mla_close("replay vs one-split replay", in.pb, r, one, false);
  }
}

}  // namespace

TEST_CASE("sparse_mla_split: ranges are disjoint, ascending, tile-aligned and cover [0, k)") {
  for (const index_t k : {0, 1, 31, 32, 33, 100, 2047, 2048, 2049, 70000}) {
    for (index_t ns = 1; ns <= dsa::sparse_mla_max_splits; ++ns) {
      CAPTURE(k);
      CAPTURE(ns);
      index_t next = 0;
      for (index_t sp = 0; sp < ns; ++sp) {
        const dsa::sparse_mla_split_range r = dsa::sparse_mla_split(k, ns, sp, kTile);
        CHECK(r.begin == next);
        CHECK(r.begin <= r.end);
        CHECK(r.end <= k);
        if (r.begin < r.end && r.end < k) CHECK(r.end % kTile == 0);
        if (r.begin < k) CHECK(r.begin % kTile == 0);
        next = r.end;
      }
      CHECK(next == k);
    }
  }
  // The V3.2 decode split: 2048 entries in 16 splits of 128.
  CHECK(dsa::sparse_mla_split(2048, 16, 15, kTile).begin == 1920);
  CHECK(dsa::sparse_mla_split(2048, 16, 15, kTile).end == 2048);
}

TEST_CASE("sparse_mla_attention_workspace_size: layout, alignment and argument errors") {
  CHECK(dsa::sparse_mla_attention_workspace_size(4, 128, 512, 1) == 0);
  CHECK(dsa::sparse_mla_attention_workspace_size(0, 128, 512, 8) == 0);
  // 8 splits x 1 token x 128 heads: 8 KB of (max, sum) pairs, then 8·128·512 floats.
  CHECK(dsa::sparse_mla_attention_workspace_size(1, 128, 512, 8) == 8 * 128 * 8 + 8 * 128 * 512 * 4);
  // An odd number of states: the accumulators start on the next 16-byte boundary.
  const dsa::sparse_mla_workspace_layout w = dsa::sparse_mla_workspace(1, 3, 5, 3);
  CHECK(w.acc_offset == 80);  // 9 pairs = 72 bytes, rounded up
  CHECK(w.bytes == 80 + 9 * 5 * 4);
  CHECK(dsa::sparse_mla_attention_workspace_size(1, 3, 5, 3) == w.bytes);
  CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention_workspace_size(1, 16, 512, 0),
                       "dsa::sparse_mla_attention_workspace_size: num_splits = 0; expected a value in [1, 64]",
                       dsa::error);
  CHECK_THROWS_AS(dsa::sparse_mla_attention_workspace_size(1, 16, 512, 65), dsa::error);
  CHECK_THROWS_AS(dsa::sparse_mla_attention_workspace_size(1, 16, 0, 2), dsa::error);
  CHECK_THROWS_AS(dsa::sparse_mla_attention_workspace_size(-1, 16, 512, 2), dsa::error);
}

TEST_CASE("sparse_mla_attention_num_splits: fills the GPU only when the heads do not") {
  // V3.2 decode on an H800/H100 (132 SMs): 1 token x 8 head groups, 16 splits of 128 entries.
  CHECK(dsa::sparse_mla_attention_num_splits(1, 128, 2048, 132) == 16);
  CHECK(dsa::sparse_mla_attention_num_splits(4, 128, 2048, 132) == 9);
  // Prefill: 64 tokens x 8 groups = 512 blocks already fill 132 SMs twice.
  CHECK(dsa::sparse_mla_attention_num_splits(64, 128, 2048, 132) == 1);
  // Short rows are not split; the cap holds.
  CHECK(dsa::sparse_mla_attention_num_splits(1, 16, 128, 132) == 1);
  CHECK(dsa::sparse_mla_attention_num_splits(1, 16, 1 << 20, 10000) == dsa::sparse_mla_max_splits);
  CHECK(dsa::sparse_mla_attention_num_splits(0, 16, 2048, 132) == 1);
  CHECK(dsa::sparse_mla_attention_num_splits(1, 16, 2048, 0) == 2);
}

TEST_CASE("sparse_mla split replay: small odd shapes, every index pattern, 1 to 64 splits") {
  check_replay(5, 5, 40, 24, 70, 50, false, sparse_mla_indices::mixed, {1, 2, 3, 64}, true, 11);
  check_replay(4, 17, 33, 33, 97, 300, false, sparse_mla_indices::random, {1, 4}, true, 12);
  check_replay(3, 3, 8, 1, 5, 2, false, sparse_mla_indices::random, {1, 2}, true, 13);  // k > n: duplicates
  check_replay(2, 4, 40, 24, 64, 50, false, sparse_mla_indices::all_unused, {1, 5}, true, 14);
  check_replay(2, 4, 40, 24, 0, 50, false, sparse_mla_indices::random, {1, 3}, true, 15);  // k = 0
}

TEST_CASE("sparse_mla split replay: V3.2 head dims, bf16 and FP8 caches") {
  check_replay(4, 16, 576, 512, 300, 1000, false, sparse_mla_indices::mixed, {1, 3, 16}, true, 21);
  check_replay(4, 16, 576, 512, 300, 1000, true, sparse_mla_indices::mixed, {1, 3, 16}, true, 22);
}

TEST_CASE("sparse_mla split replay: V3.2 decode, 128 heads, top-2048") {
  check_replay(1, 128, 576, 512, 2048, 8192, true, sparse_mla_indices::random, {1, 16}, false, 31);
}

TEST_CASE("sparse_mla split replay: a token without used entries gives exactly out 0, lse +inf, probs 0") {
  const dsa_test::sparse_mla_inputs in =
      dsa_test::make_sparse_mla_inputs(2, 3, 16, 8, 40, 10, false, sparse_mla_indices::all_unused, 41);
  for (const index_t ns : {1, 2, 7}) {
    const dsa_test::sparse_mla_result r = replay(in.pb, ns, true);
    for (const float v : r.out) CHECK(std::bit_cast<std::uint32_t>(v) == 0u);
    for (const float v : r.lse) CHECK(v == std::numeric_limits<float>::infinity());
    for (const float v : r.probs) CHECK(std::bit_cast<std::uint32_t>(v) == 0u);
  }
}

TEST_CASE("sparse_mla split replay: exact-arithmetic inputs are bit-identical to the CPU for every split count") {
  struct shape {
    index_t s, h, d_qk, d_v, k, n;
    bool fp8;
  };
  for (const shape& c : {shape{6, 5, 40, 24, 70, 50, false}, shape{4, 20, 576, 512, 300, 1000, false},
                         shape{4, 20, 576, 512, 300, 1000, true}, shape{3, 4, 1, 1, 33, 7, false}}) {
    for (const sparse_mla_indices kind : {sparse_mla_indices::random, sparse_mla_indices::mixed}) {
      const dsa_test::sparse_mla_inputs in =
          dsa_test::make_sparse_mla_inputs(c.s, c.h, c.d_qk, c.d_v, c.k, c.n, c.fp8, kind, 51, true);
      const dsa_test::sparse_mla_result ref = dsa_test::cpu_sparse_mla<float>(in, c.fp8, true);
      for (const index_t ns : {1, 2, 3, 9, 64}) {
        CAPTURE(c.d_qk);
        CAPTURE(c.fp8);
        CAPTURE(ns);
        dsa_test::check_sparse_mla_exact("exact replay vs cpu", replay(in.pb, ns, true), ref, c.k);
      }
    }
  }
}

TEST_CASE("sparse_mla_attention on the CPU: the workspace overload is the one-pass result for any split count") {
  const dsa_test::sparse_mla_inputs in =
      dsa_test::make_sparse_mla_inputs(3, 20, 576, 512, 100, 300, true, sparse_mla_indices::mixed, 71);
  const dsa_test::sparse_mla_problem& pb = in.pb;
  const dsa_test::sparse_mla_result ref = dsa_test::cpu_sparse_mla<float>(in, true, true);
  struct alignas(16) chunk {
    std::byte b[16];
  };
  const auto q = dsa::make_view(in.q.data(), {pb.s, pb.h, pb.d_qk});
  const auto kv = dsa::make_view(in.kv_fp8.data(), {pb.n, dsa::kv_fp8_row_bytes});
  const auto kv16 = dsa::make_view(in.kv.data(), {pb.n, pb.d_qk});
  const auto idx = dsa::make_view(pb.indices.data(), {pb.s, pb.k});
  std::vector<float> out(static_cast<std::size_t>(pb.s * pb.h * pb.d_v)), lse(static_cast<std::size_t>(pb.s * pb.h)),
      probs(static_cast<std::size_t>(pb.s * pb.k));
  const auto ov = dsa::make_view(out.data(), {pb.s, pb.h, pb.d_v});
  const auto lv = dsa::make_view(lse.data(), {pb.s, pb.h});
  const auto pv = dsa::make_view(probs.data(), {pb.s, pb.k});
  for (const index_t ns : {1, 3, 64}) {
    CAPTURE(ns);
    dsa::sparse_mla_config cfg{pb.scale, pb.d_v, ns};
    const index_t bytes = dsa::sparse_mla_attention_workspace_size(pb.s, pb.h, pb.d_v, ns);
    std::vector<chunk> ws(static_cast<std::size_t>(bytes / 16 + 1));
    const auto wv = dsa::make_view(reinterpret_cast<std::byte*>(ws.data()), {bytes});
    dsa::sparse_mla_attention(dsa::cpu, q, kv, idx, ov, lv, cfg, wv, pv);
    CHECK(out == ref.out);
    CHECK(lse == ref.lse);
    CHECK(probs == ref.probs);
    if (ns == 1) {
      // One split needs no memory: an absent workspace is accepted.
      dsa::sparse_mla_attention(dsa::cpu, q, kv, idx, ov, lv, cfg, dsa::tensor_view<std::byte, 1>{}, pv);
      CHECK(out == ref.out);
      continue;
    }
    CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(dsa::cpu, q, kv, idx, ov, lv, cfg, pv),
                         ("dsa::sparse_mla_attention: config.num_splits = " + std::to_string(ns) +
                          "; expected 1 without a workspace (pass a workspace of "
                          "sparse_mla_attention_workspace_size(...) bytes to split)")
                             .c_str(),
                         dsa::error);
    CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(dsa::cpu, q, kv16, idx, ov, lv, cfg,
                                                   dsa::make_view(reinterpret_cast<std::byte*>(ws.data()), {bytes - 16}), pv),
                         ("dsa::sparse_mla_attention: workspace.extent(0) = " + std::to_string(bytes - 16) +
                          "; expected at least sparse_mla_attention_workspace_size(s, h, d_v, num_splits) = " +
                          std::to_string(bytes) + " bytes")
                             .c_str(),
                         dsa::error);
    CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(dsa::cpu, q, kv, idx, ov, lv, cfg,
                                                   dsa::make_view(reinterpret_cast<std::byte*>(ws.data()) + 8, {bytes}), pv),
                         "dsa::sparse_mla_attention: workspace.data_handle() % 16 = 8; expected 0 (16-byte aligned)",
                         dsa::error);
    // lse placed inside the workspace.
    CHECK_THROWS_WITH_AS(dsa::sparse_mla_attention(dsa::cpu, q, kv, idx, ov,
                                                   dsa::make_view(reinterpret_cast<float*>(ws.data()) + 4, {pb.s, pb.h}),
                                                   cfg, wv, pv),
                         "dsa::sparse_mla_attention: workspace = a view overlapping lse; expected memory disjoint from lse",
                         dsa::error);
  }
}
