// sparse_mha_attention (family "attention", docs/architecture.md) on the CUDA backend against the
// CPU backend: V3.2's MHA prefill (128 heads, 128 + 64, v 128, top-2048) and absorbed decode
// (stride-0 512 latent + 64 rope), more entries than one shared-memory chunk, wide values, a
// single key; -1, n, INT32_MIN / MAX indices, a token with no used entry, NaN and inf queries; the
// three roundings. Tolerance: bit-identical but for rare transcendental roundings (the device's
// double exp/log differ from glibc's by an ulp, which changes the fp32 rounding with probability
// ~2^-28 per value): at most one bf16 ulp of out and 2 fp32 ulps of lse, on at most 1e-4 (out) and
// 1e-3 (lse) of the elements. NaN results compare as NaN.
// Needs a GPU for the parity case; the front-end case runs (and passes) without one.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "cuda/cuda_test.hpp"
#include "cuda/op_test.hpp"
#include "dsa/cpu/sparse_mha_attention.hpp"
#include "dsa/cuda/ops.hpp"
#include "dsa/ops/sparse_mha_attention.hpp"
#include "support/random.hpp"

namespace {

using dsa::bf16;
using dsa::index_t;
constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();
constexpr float inf_f = std::numeric_limits<float>::infinity();

using dsa_test::normal_as;

struct mha_case {
  index_t s, h, n, k, d_nope, d_rope, d_v;
  bool mqa;  // k_nope and v broadcast over heads (stride 0), v = the latent itself
  dsa::attention_rounding rounding;
  bool want_lse = true;
};

void check_sparse_mha(const mha_case& c, std::uint64_t seed) {
  CAPTURE(c.s);
  CAPTURE(c.h);
  CAPTURE(c.n);
  CAPTURE(c.k);
  CAPTURE(c.d_nope);
  CAPTURE(c.d_rope);
  CAPTURE(c.d_v);
  CAPTURE(c.mqa);
  CAPTURE(static_cast<int>(c.rounding));
  const index_t dqk = c.d_nope + c.d_rope;
  const index_t kh = c.mqa ? 1 : c.h;
  std::vector<bf16> q = normal_as<bf16>(static_cast<std::size_t>(c.s * c.h * dqk), seed, 1.0f);
  // Per-head keys and values interleaved as the wkv_b output [n, h, d_nope + d_v] (MHA), or one
  // latent row [n, d_nope] that is both key and value (MQA).
  const index_t kv_width = c.mqa ? c.d_nope : c.d_nope + c.d_v;
  std::vector<bf16> kv = normal_as<bf16>(static_cast<std::size_t>(std::max<index_t>(c.n * kh * kv_width, 1)),
                                             seed + 1, 1.0f);
  std::vector<bf16> kr = normal_as<bf16>(static_cast<std::size_t>(std::max<index_t>(c.n * c.d_rope, 1)), seed + 2);
  std::vector<std::int32_t> idx(static_cast<std::size_t>(c.s * c.k));
  std::mt19937_64 rng(seed + 3);
  for (index_t t = 0; t < c.s; ++t) {
    for (index_t j = 0; j < c.k; ++j) {
      std::int32_t r = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(std::max<index_t>(c.n, 1)));
      const auto u = rng() % 16;
      if (u == 0) r = -1;
      if (u == 1) r = static_cast<std::int32_t>(c.n);                   // one past the end
      if (u == 2) r = std::numeric_limits<std::int32_t>::min();
      if (u == 3) r = std::numeric_limits<std::int32_t>::max();
      idx[static_cast<std::size_t>(t * c.k + j)] = r;
    }
  }
  if (c.s >= 2) {  // token 1: no used entry at all
    for (index_t j = 0; j < c.k; ++j) idx[static_cast<std::size_t>(c.k + j)] = -1;
  }
  if (c.s >= 3 && c.k >= 2) {  // token 2: a NaN query head 0 and an inf query in head 1
    q[static_cast<std::size_t>(2 * c.h * dqk)] = bf16(nan_f);
    if (c.h >= 2) q[static_cast<std::size_t>(2 * c.h * dqk + dqk)] = bf16(inf_f);
  }
  const dsa::sparse_mha_config cfg{0.1660156f, c.rounding};
  const index_t kh_stride = c.mqa ? 0 : kv_width;
  auto host_views = [&](const bf16* kvp, const bf16* krp) {
    return std::make_tuple(
        dsa::host_view<const bf16, 3>(kvp, {c.n, c.h, c.d_nope}, {kh * kv_width, kh_stride, 1}),
        dsa::host_view<const bf16, 2>(krp, {c.n, c.d_rope}, {c.d_rope, 1}),
        dsa::host_view<const bf16, 3>(kvp + (c.mqa ? 0 : c.d_nope), {c.n, c.h, c.d_v}, {kh * kv_width, kh_stride, 1}));
  };
  const auto [hkn, hkr, hv] = host_views(kv.data(), kr.data());
  std::vector<bf16> hout(static_cast<std::size_t>(c.s * c.h * c.d_v));
  std::vector<float> hlse(static_cast<std::size_t>(c.s * c.h));
  dsa::sparse_mha_attention(dsa::cpu, dsa::make_view(static_cast<const bf16*>(q.data()), {c.s, c.h, dqk}), hkn, hkr, hv,
                            dsa::make_view(static_cast<const std::int32_t*>(idx.data()), {c.s, c.k}),
                            dsa::make_view(hout.data(), {c.s, c.h, c.d_v}), cfg,
                            c.want_lse ? dsa::make_view(hlse.data(), {c.s, c.h}) : dsa::host_view<float, 2>{});
  dsa_test::test_stream stream;
  auto dq = dsa_test::upload(q, stream.get());
  auto dkv = dsa_test::upload(kv, stream.get());
  auto dkr = dsa_test::upload(kr, stream.get());
  auto didx = dsa_test::upload(idx, stream.get());
  dsa::device_buffer<bf16> dout(c.s * c.h * c.d_v, stream.get());
  dsa::device_buffer<float> dlse(c.s * c.h, stream.get());
  const bf16* kvp = dkv.data();
  dsa::sparse_mha_attention(
      stream.backend(), dq.view({c.s, c.h, dqk}),
      dsa::device_view<const bf16, 3>(kvp, {c.n, c.h, c.d_nope}, {kh * kv_width, kh_stride, 1}),
      dsa::device_view<const bf16, 2>(dkr.data(), {c.n, c.d_rope}, {c.d_rope, 1}),
      dsa::device_view<const bf16, 3>(kvp + (c.mqa ? 0 : c.d_nope), {c.n, c.h, c.d_v}, {kh * kv_width, kh_stride, 1}),
      didx.view({c.s, c.k}), dout.view({c.s, c.h, c.d_v}), cfg,
      c.want_lse ? dlse.view({c.s, c.h}) : dsa::device_view<float, 2>{});
  dsa_test::check_nearly_same("out", dsa_test::download(dout, stream.get()), hout, 1);
  if (c.want_lse) dsa_test::check_nearly_same("lse", dsa_test::download(dlse, stream.get()), hlse, 2, 1e-3);
}

}  // namespace

TEST_CASE("cuda sparse_mha_attention: front-end checks with device views (no GPU needed)") {
  const dsa::cuda_backend be{};
  auto q = dsa_test::fake_device_view<bf16, 3>({2, 128, 192});
  auto kn = dsa_test::fake_device_view<bf16, 3>({100, 128, 128});
  auto kr = dsa_test::fake_device_view<bf16, 2>({100, 64});
  auto v = dsa_test::fake_device_view<bf16, 3>({100, 128, 128});
  auto idx = dsa_test::fake_device_view<std::int32_t, 2>({2, 2048});
  auto o = dsa_test::fake_device_view<bf16, 3>({2, 128, 128});
  CHECK_THROWS_WITH_AS(dsa::sparse_mha_attention(be, q, kn, kr, v, idx, o, {0.0f, dsa::attention_rounding::bf16}, {}),
                       doctest::Contains("dsa::sparse_mha_attention: cfg.softmax_scale = 0; expected a finite value > 0"),
                       dsa::error);
  auto v_bad = dsa_test::fake_device_view<bf16, 3>({100, 128, 512});
  CHECK_THROWS_WITH_AS(dsa::sparse_mha_attention(be, q, kn, kr, v_bad, idx, o, {0.1f, dsa::attention_rounding::bf16}, {}),
                       doctest::Contains("dsa::sparse_mha_attention: out.extent(2) = 128; expected 512"), dsa::error);
}

TEST_CASE("cuda sparse_mha_attention: the CPU's bits but for rare transcendental roundings") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  using dsa::attention_rounding;
  std::uint64_t seed = 700;
  for (const attention_rounding r : {attention_rounding::fp32, attention_rounding::bf16, attention_rounding::bf16_split}) {
    // V3.2 MHA prefill: 128 heads, 128 nope + 64 rope, v 128, top-2048.
    check_sparse_mha({3, 128, 3000, 2048, 128, 64, 128, false, r}, ++seed);
    // V3.2 absorbed decode: one 512-wide latent shared by 128 heads (stride 0), 64 rope.
    check_sparse_mha({3, 128, 2500, 2048, 512, 64, 512, true, r}, ++seed);
    // More entries than one shared-memory chunk (logits recomputed per pass), no lse.
    check_sparse_mha({3, 4, 700, 5000, 64, 32, 96, false, r, false}, ++seed);
    // Wider values than one column group (512), no rope, duplicate rows (n small).
    check_sparse_mha({3, 2, 5, 64, 48, 0, 700, false, r}, ++seed);
    // A single key row, a single entry.
    check_sparse_mha({4, 3, 1, 1, 16, 8, 16, true, r}, ++seed);
  }
}
