// sparse_mla_attention on the CUDA backend against the CPU backend: bf16 and FP8 caches, float
// and bf16 outputs, with and without probs, one split without a workspace and 2 .. 64 splits with
// one, over V3.2's shapes (128 heads, 576 / 512, top-2048 of a 128K cache, decode s = 1 .. 4 and
// prefill-like s = 64; also 16 and 64 heads) and small odd ones; -1, negative, >= n and duplicate
// indices, tokens without any used entry, k > the number of used entries, k = 0, strided views.
//
// Two kinds of check (support/sparse_mla_tolerance.hpp): random data within a bound derived from
// the data (the kernels sum in another order than the CPU and use the device expf / logf), and
// exact-arithmetic data on which every order gives the same bits, where out must be bit-identical
// to the CPU's for every split count. Needs a GPU for those; the front-end and CUDA-limit errors
// (bad workspace, split count, d_v > 512, too wide d_qk) throw before any CUDA call and run
// without one.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/cuda_test.hpp"
#include "cuda/op_test.hpp"
#include "dsa/cuda/kernel_choice.hpp"
#include "dsa/cuda/memory.hpp"
#include "dsa/cuda/ops.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"
#include "support/fast_kernel_criteria.hpp"
#include "support/sparse_mla_tolerance.hpp"

namespace {

using dsa::bf16;
using dsa::index_t;
using dsa_test::sparse_mla_indices;

// How the device call is made.
struct call {
  index_t num_splits = 1;
  bool workspace_overload = false;  // false: the workspace-less overload (num_splits must be 1)
  bool probs = true;
  bool strided = false;  // every view with padded outer strides
  dsa::cuda_kernel_path kernels = dsa::cuda_kernel_path::exact;
};

// Pads the rows of a row-major host array [rows, cols] to `ld` columns (garbage in the padding).
template <class T>
std::vector<T> pad_rows(const std::vector<T>& v, index_t rows, index_t cols, index_t ld, T fill) {
  std::vector<T> out(static_cast<std::size_t>(rows * ld), fill);
  for (index_t r = 0; r < rows; ++r) {
    for (index_t c = 0; c < cols; ++c) out[static_cast<std::size_t>(r * ld + c)] = v[static_cast<std::size_t>(r * cols + c)];
  }
  return out;
}

template <class T>
std::vector<T> unpad_rows(const std::vector<T>& v, index_t rows, index_t cols, index_t ld) {
  std::vector<T> out(static_cast<std::size_t>(rows * cols));
  for (index_t r = 0; r < rows; ++r) {
    for (index_t c = 0; c < cols; ++c) out[static_cast<std::size_t>(r * cols + c)] = v[static_cast<std::size_t>(r * ld + c)];
  }
  return out;
}

template <class O>
dsa_test::sparse_mla_result cuda_sparse_mla(const dsa_test::sparse_mla_inputs& in, bool fp8, const call& c) {
  const dsa_test::sparse_mla_problem& pb = in.pb;
  dsa_test::test_stream stream;
  const cudaStream_t st = stream.get();
  // Strided layouts: q rows of d_qk + 8, kv rows + 16 elements, indices rows + 3, out rows
  // d_v + 4, lse and probs rows + 5 (filled with NaN / garbage that must stay untouched).
  const index_t pq = c.strided ? 8 : 0, pkv = c.strided ? 16 : 0, pi = c.strided ? 3 : 0, po = c.strided ? 4 : 0,
                pl = c.strided ? 5 : 0;
  const index_t ldq = pb.d_qk + pq, ldi = pb.k + pi, ldo = pb.d_v + po, ldl = pb.h + pl, ldp = pb.k + pl;
  const auto q = dsa_test::upload(pad_rows(in.q, pb.s * pb.h, pb.d_qk, ldq, bf16(7.0f)), st);
  const auto idx = dsa_test::upload(pad_rows(pb.indices, pb.s, pb.k, ldi, std::int32_t{-1}), st);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  dsa::device_buffer<O> out(pb.s * pb.h * ldo, st);
  dsa::device_buffer<float> lse(pb.s * ldl, st);
  dsa::device_buffer<float> probs(c.probs ? pb.s * ldp : 0, st);
  dsa::copy_to_device(out, std::span<const O>(std::vector<O>(static_cast<std::size_t>(out.size()), dsa::from_float<O>(nan))), st);
  dsa::copy_to_device(lse, std::span<const float>(std::vector<float>(static_cast<std::size_t>(lse.size()), nan)), st);
  if (c.probs) dsa::copy_to_device(probs, std::span<const float>(std::vector<float>(static_cast<std::size_t>(probs.size()), nan)), st);
  const index_t ws_bytes = dsa::sparse_mla_attention_workspace_size(pb.s, pb.h, pb.d_v, c.num_splits);
  dsa::device_buffer<std::byte> ws(ws_bytes, st);

  dsa::sparse_mla_config cfg;
  cfg.softmax_scale = pb.scale;
  cfg.d_v = pb.d_v;
  cfg.num_splits = c.num_splits;
  const dsa::device_view<const bf16, 3> qv(q.data(), {pb.s, pb.h, pb.d_qk}, {pb.h * ldq, ldq, 1});
  const dsa::device_view<const std::int32_t, 2> iv(idx.data(), {pb.s, pb.k}, {ldi, 1});
  const dsa::device_view<O, 3> ov(out.data(), {pb.s, pb.h, pb.d_v}, {pb.h * ldo, ldo, 1});
  const dsa::device_view<float, 2> lv(lse.data(), {pb.s, pb.h}, {ldl, 1});
  const dsa::device_view<float, 2> prv =
      c.probs ? dsa::device_view<float, 2>(probs.data(), {pb.s, pb.k}, {ldp, 1}) : dsa::device_view<float, 2>{};
  const dsa::device_view<std::byte, 1> wv = ws_bytes > 0 ? ws.view({ws_bytes}) : dsa::device_view<std::byte, 1>{};
  const auto run = [&](const auto& kv) {
    if (c.workspace_overload) {
      dsa::sparse_mla_attention(stream.backend(c.kernels), qv, kv, iv, ov, lv, cfg, wv, prv);
    } else {
      dsa::sparse_mla_attention(stream.backend(c.kernels), qv, kv, iv, ov, lv, cfg, prv);
    }
  };
  if (fp8) {
    const index_t ld = dsa::kv_fp8_row_bytes + pkv;
    const auto kv = dsa_test::upload(pad_rows(in.kv_fp8, pb.n, dsa::kv_fp8_row_bytes, ld, std::uint8_t{0x7F}), st);
    run(dsa::device_view<const std::uint8_t, 2>(kv.data(), {pb.n, dsa::kv_fp8_row_bytes}, {ld, 1}));
    DSA_CUDA_CHECK(cudaStreamSynchronize(st));
  } else {
    const index_t ld = pb.d_qk + pkv;
    const auto kv = dsa_test::upload(pad_rows(in.kv, pb.n, pb.d_qk, ld, bf16(1e30f)), st);
    run(dsa::device_view<const bf16, 2>(kv.data(), {pb.n, pb.d_qk}, {ld, 1}));
    DSA_CUDA_CHECK(cudaStreamSynchronize(st));
  }

  dsa_test::sparse_mla_result r;
  const std::vector<O> o = unpad_rows(dsa_test::download(out, st), pb.s * pb.h, pb.d_v, ldo);
  r.out.resize(o.size());
  for (std::size_t i = 0; i < o.size(); ++i) r.out[i] = dsa::to_float(o[i]);
  r.lse = unpad_rows(dsa_test::download(lse, st), pb.s, pb.h, ldl);
  if (c.probs) r.probs = unpad_rows(dsa_test::download(probs, st), pb.s, pb.k, ldp);
  if (c.strided) {
    // The padding is never written.
    const std::vector<float> lraw = dsa_test::download(lse, st);
    for (index_t t = 0; t < pb.s; ++t) {
      for (index_t x = pb.h; x < ldl; ++x) CHECK(std::isnan(lraw[static_cast<std::size_t>(t * ldl + x)]));
    }
  }
  return r;
}

struct shape {
  index_t s, h, d_qk, d_v, k, n;
};

// Every variant of one shape against the CPU: float and bf16 out, bf16 and (for d_qk = 576) FP8
// caches, one split without a workspace, the suggested split count and a few fixed ones.
void check_shape(const shape& sh, sparse_mla_indices kind, std::uint64_t seed, bool exact,
                 std::initializer_list<index_t> splits, bool strided = false) {
  for (const bool fp8 : {false, true}) {
    if (fp8 && (sh.d_qk != dsa::kv_dim || sh.d_v != dsa::kv_latent_dim)) continue;
    const dsa_test::sparse_mla_inputs in =
        dsa_test::make_sparse_mla_inputs(sh.s, sh.h, sh.d_qk, sh.d_v, sh.k, sh.n, fp8, kind, seed, exact);
    for (const bool bf16_out : {false, true}) {
      const dsa_test::sparse_mla_result ref =
          bf16_out ? dsa_test::cpu_sparse_mla<bf16>(in, fp8, true) : dsa_test::cpu_sparse_mla<float>(in, fp8, true);
      for (const index_t ns : splits) {
        CAPTURE(sh.s);
        CAPTURE(sh.h);
        CAPTURE(sh.d_qk);
        CAPTURE(sh.d_v);
        CAPTURE(sh.k);
        CAPTURE(sh.n);
        CAPTURE(fp8);
        CAPTURE(bf16_out);
        CAPTURE(ns);
        CAPTURE(exact);
        call c;
        c.num_splits = ns;
        c.workspace_overload = ns > 1 || seed % 2 == 1;  // one split: both overloads
        c.strided = strided;
        const dsa_test::sparse_mla_result dev =
            bf16_out ? cuda_sparse_mla<bf16>(in, fp8, c) : cuda_sparse_mla<float>(in, fp8, c);
        if (exact) {
          dsa_test::check_sparse_mla_exact("cuda vs cpu (exact data)", dev, ref, sh.k);
        } else {
          dsa_test::check_sparse_mla_close("cuda vs cpu", in.pb, dev, ref, bf16_out);
        }
      }
    }
  }
}

index_t sm_count() {
  int device = 0, sms = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&device));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

}  // namespace

TEST_CASE("cuda sparse_mla_attention: small odd shapes, every index pattern, 1 to 64 splits") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  for (const bool exact : {false, true}) {
    check_shape({5, 5, 40, 24, 70, 50}, sparse_mla_indices::mixed, 1, exact, {1, 2, 3, 64});
    check_shape({4, 17, 33, 33, 97, 300}, sparse_mla_indices::random, 2, exact, {1, 4});
    check_shape({3, 3, 8, 1, 5, 2}, sparse_mla_indices::random, 3, exact, {1, 2});     // k > n: duplicates
    check_shape({2, 4, 40, 24, 64, 50}, sparse_mla_indices::all_unused, 4, exact, {1, 5});  // out 0, lse +inf
    check_shape({2, 4, 40, 24, 0, 50}, sparse_mla_indices::random, 5, exact, {1, 3});       // k = 0
    check_shape({3, 2, 1, 1, 40, 9}, sparse_mla_indices::mixed, 6, exact, {1, 2});          // d_qk = 1
    check_shape({2, 3, 16, 8, 40, 0}, sparse_mla_indices::random, 7, exact, {1, 2});        // empty cache
  }
}

TEST_CASE("cuda sparse_mla_attention: V3.2 head dims with 16 and 64 heads, bf16 and FP8 caches") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  // Under the sanitizers fewer tokens, entries and calls (exact data only, fewer split counts):
  // still several tiles, a partial one, one split and several.
  const bool small = dsa_test::under_sanitizer();
  for (const bool exact : {false, true}) {
    if (small && !exact) continue;
    check_shape({small ? 2 : 4, 16, 576, 512, small ? 70 : 300, 1000}, sparse_mla_indices::mixed, 11, exact,
                small ? std::initializer_list<index_t>{1, 3} : std::initializer_list<index_t>{1, 3, 16});
    check_shape({small ? 1 : 2, 64, 576, 512, small ? 100 : 2048, 4096}, sparse_mla_indices::mixed, 12, exact,
                small ? std::initializer_list<index_t>{8} : std::initializer_list<index_t>{1, 8});
  }
}

TEST_CASE("cuda sparse_mla_attention: V3.2 decode, 128 heads, top-2048 of a 128K cache") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  const index_t sms = sm_count();
  // Under the sanitizers one token, 40 entries (two tiles) of the 128K cache, exact data, one split
  // and 4.
  const bool small = dsa_test::under_sanitizer();
  const index_t k = small ? 40 : 2048;
  for (const index_t s : small ? std::vector<index_t>{1} : std::vector<index_t>{1, 2, 4}) {
    const index_t ns = small ? 4 : dsa::sparse_mla_attention_num_splits(s, 128, k, sms);
    CAPTURE(ns);
    if (!small) {
      check_shape({s, 128, 576, 512, k, 131072}, sparse_mla_indices::random, 20 + static_cast<std::uint64_t>(s),
                  false, {1, ns});
    }
    check_shape({s, 128, 576, 512, k, 131072}, sparse_mla_indices::mixed, 30 + static_cast<std::uint64_t>(s),
                true, small ? std::initializer_list<index_t>{1, ns} : std::initializer_list<index_t>{ns});
  }
}

TEST_CASE("cuda sparse_mla_attention: prefill-like, 64 tokens x 128 heads, top-2048") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  // Under the sanitizers 3 tokens, 40 entries, exact data.
  const bool small = dsa_test::under_sanitizer();
  const index_t s = small ? 3 : 64, k = small ? 40 : 2048;
  if (!small) check_shape({s, 128, 576, 512, k, 8192}, sparse_mla_indices::mixed, 41, false, {1});
  check_shape({s, 128, 576, 512, k, 8192}, sparse_mla_indices::mixed, 42, true, {1, 2});
}

TEST_CASE("cuda sparse_mla_attention: strided views leave the padding untouched") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  check_shape({3, 20, 576, 512, 100, 300}, sparse_mla_indices::mixed, 51, false, {1, 3}, true);
  check_shape({3, 20, 576, 512, 100, 300}, sparse_mla_indices::mixed, 52, true, {1, 3}, true);
  check_shape({4, 6, 40, 24, 70, 50}, sparse_mla_indices::mixed, 53, true, {1, 2}, true);
}

TEST_CASE("cuda sparse_mla_attention: run to run bit-identical, and split counts agree") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  // Under the sanitizers 100 entries and two split counts.
  const bool small = dsa_test::under_sanitizer();
  const dsa_test::sparse_mla_inputs in = dsa_test::make_sparse_mla_inputs(2, 128, 576, 512, small ? 100 : 2048, 8192,
                                                                          true, sparse_mla_indices::mixed, 61);
  call c;
  c.workspace_overload = true;
  const dsa_test::sparse_mla_result one = cuda_sparse_mla<float>(in, true, c);
  for (const index_t ns : small ? std::vector<index_t>{2, 64} : std::vector<index_t>{2, 5, 16, 64}) {
    CAPTURE(ns);
    c.num_splits = ns;
    const dsa_test::sparse_mla_result a = cuda_sparse_mla<float>(in, true, c);
    const dsa_test::sparse_mla_result b = cuda_sparse_mla<float>(in, true, c);
    dsa_test::check_bits_equal("out, run to run", a.out, b.out);
    dsa_test::check_bits_equal("lse, run to run", a.lse, b.lse);
    dsa_test::check_bits_equal("probs, run to run", a.probs, b.probs);
    dsa_test::check_sparse_mla_close("split vs one split", in.pb, a, one, false);
  }
}

// ---- the tensor-core kernel against the exact one ------------------------------------------------
//
// On the same inputs (bf16 rows, or the 656-byte FP8 rows they quantise to) the fast kernel's out,
// lse and probs against the exact kernel's, with FlashMLA's criteria
// (support/fast_kernel_criteria.hpp): decode out within abs 1e-3 or rel 2.01/128 and a cos diff
// below 5e-6, prefill out within abs 8e-4 or rel 3.01/128; lse within abs 1e-6 or rel 8.01/65536;
// probs (the exact probs kernel on the fast lse) as lse. Every non-finite value where the exact
// kernel has it: unused and out-of-range entries, tokens without a used entry (out 0, lse +inf),
// NaN-filled unused rows (never read), NaN in a used row or a query. On exact-arithmetic data
// (weights exactly 0 or 1) out and lse are bit-identical.

namespace {

struct fast_case {
  index_t s, h, d_qk, d_v, k, n;
};

bool device_has_mma_sync() { return dsa::cuda_detail::current_device_caps().compute_capability >= 80; }

// Whether the fast kernel serves these dims with the tests' (16-byte aligned) views on this device.
bool fast_kernel_serves(index_t d_qk, index_t d_v, bool fp8) {
  dsa::cuda_detail::sparse_mla_call c;
  c.d_qk = d_qk;
  c.d_v = d_v;
  c.fp8 = fp8;
  c.aligned = true;
  return dsa::cuda_detail::choose_sparse_mla_kernel(dsa::cuda_kernel_path::fast, dsa::cuda_detail::current_device_caps(),
                                                    c) != dsa::cuda_detail::sparse_mla_kernel::exact;
}

enum class poison { none, nan_row, nan_query };

template <class O>
void check_fast_one(const dsa_test::sparse_mla_inputs& in, bool fp8, index_t ns, bool strided, bool exact_data,
                    bool prefill) {
  call c;
  c.num_splits = ns;
  c.workspace_overload = ns > 1;
  c.strided = strided;
  const dsa_test::sparse_mla_result ref = cuda_sparse_mla<O>(in, fp8, c);
  c.kernels = dsa::cuda_kernel_path::fast;
  const dsa_test::sparse_mla_result got = cuda_sparse_mla<O>(in, fp8, c);
  if (exact_data) {
    dsa_test::check_bits_equal("out, fast vs exact (exact data)", got.out, ref.out);
    dsa_test::check_bits_equal("lse, fast vs exact (exact data)", got.lse, ref.lse);
  }
  const double out_abs = prefill ? 8e-4 : 1e-3, out_rel = prefill ? 3.01 / 128 : 2.01 / 128;
  const dsa_test::criterion_result o = dsa_test::flashmla_close("out", got.out, ref.out, out_abs, out_rel, 5e-6);
  CHECK_MESSAGE(o.ok, o.message);
  const dsa_test::criterion_result l = dsa_test::flashmla_close("lse", got.lse, ref.lse, 1e-6, 8.01 / 65536, 5e-6);
  CHECK_MESSAGE(l.ok, l.message);
  const dsa_test::criterion_result pr = dsa_test::flashmla_close("probs", got.probs, ref.probs, 1e-6, 8.01 / 65536, 5e-6);
  CHECK_MESSAGE(pr.ok, pr.message);
}

// Both caches (FP8 for 576 / 512 only), both outputs, every split count of `splits`.
void check_fast(const fast_case& fc, sparse_mla_indices kind, std::uint64_t seed, bool exact_data,
                std::initializer_list<index_t> splits, bool prefill = false, bool strided = false,
                poison what = poison::none, bool both_outputs = true) {
  for (const bool fp8 : {false, true}) {
    if (fp8 && (fc.d_qk != dsa::kv_dim || fc.d_v != dsa::kv_latent_dim)) continue;
    CAPTURE(fc.s);
    CAPTURE(fc.h);
    CAPTURE(fc.d_qk);
    CAPTURE(fc.d_v);
    CAPTURE(fc.k);
    CAPTURE(fc.n);
    CAPTURE(fp8);
    CAPTURE(exact_data);
    // The shapes the fast kernel holds must reach it (else this compares the exact kernel with
    // itself); the others must not.
    const bool holds = fc.d_qk % 64 == 0 && fc.d_qk <= 576 && fc.d_v % 32 == 0;
    if (device_has_mma_sync()) CHECK(fast_kernel_serves(fc.d_qk, fc.d_v, fp8) == holds);
    dsa_test::sparse_mla_inputs in =
        dsa_test::make_sparse_mla_inputs(fc.s, fc.h, fc.d_qk, fc.d_v, fc.k, fc.n, fp8, kind, seed, exact_data);
    if (what == poison::nan_row && fc.s > 0 && fc.k > 0) {
      // A NaN in a used row: every head of the tokens that select it is NaN, on both kernels.
      std::int32_t row = -1;
      for (index_t e = 0; e < fc.k && row < 0; ++e) {
        if (dsa::sparse_mla_index_valid(in.pb.indices[static_cast<std::size_t>(e)], fc.n)) row = in.pb.indices[static_cast<std::size_t>(e)];
      }
      REQUIRE(row >= 0);
      if (fp8) {
        in.kv_fp8[static_cast<std::size_t>(row * dsa::kv_fp8_row_bytes + 5)] = 0x7F;  // an e4m3 NaN code
      } else {
        in.kv[static_cast<std::size_t>(row * fc.d_qk + 5)] = bf16::from_bits(0x7FC0);
      }
    } else if (what == poison::nan_query && fc.h > 1) {
      in.q[static_cast<std::size_t>((0 * fc.h + 1) * fc.d_qk + 7)] = bf16::from_bits(0x7FC0);  // token 0, head 1
    }
    for (const index_t ns : splits) {
      CAPTURE(ns);
      if (both_outputs) check_fast_one<float>(in, fp8, ns, strided, exact_data, prefill);
      check_fast_one<bf16>(in, fp8, ns, strided, exact_data, prefill);
    }
  }
}

}  // namespace

TEST_CASE("cuda sparse_mla_attention fast kernel: small shapes, every index pattern, against the exact kernel") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  for (const bool exact : {false, true}) {
    check_fast({5, 5, 64, 32, 70, 50}, sparse_mla_indices::mixed, 71, exact, {1, 2, 3, 64});  // 5 of 64 heads
    check_fast({4, 17, 128, 64, 97, 300}, sparse_mla_indices::random, 72, exact, {1, 4});
    check_fast({3, 3, 64, 32, 5, 2}, sparse_mla_indices::random, 73, exact, {1, 2});       // k > n: duplicates
    check_fast({2, 4, 128, 64, 64, 50}, sparse_mla_indices::all_unused, 74, exact, {1, 5});  // out 0, lse +inf
    check_fast({2, 4, 128, 64, 0, 50}, sparse_mla_indices::random, 75, exact, {1, 3});       // k = 0
    check_fast({3, 70, 192, 96, 130, 400}, sparse_mla_indices::mixed, 76, exact, {1, 2});   // two head groups
    check_fast({3, 2, 40, 24, 40, 9}, sparse_mla_indices::mixed, 77, exact, {1, 2});         // the exact kernel's
  }
}

TEST_CASE("cuda sparse_mla_attention fast kernel: NaN in a used row or a query, strided views") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  check_fast({3, 20, 576, 512, 100, 300}, sparse_mla_indices::mixed, 81, false, {1, 3}, false, false, poison::nan_row);
  check_fast({3, 20, 576, 512, 100, 300}, sparse_mla_indices::mixed, 82, false, {1, 3}, false, false, poison::nan_query);
  check_fast({3, 20, 576, 512, 100, 300}, sparse_mla_indices::mixed, 83, false, {1, 3}, false, true);
  check_fast({4, 6, 128, 64, 70, 50}, sparse_mla_indices::mixed, 84, true, {1, 2}, false, true);
}

TEST_CASE("cuda sparse_mla_attention fast kernel: V3.2 decode, 128 heads, top-2048 of a 128K cache, s = 1 .. 128") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  const index_t sms = sm_count();
  // Under the sanitizers one and two tokens, 200 entries (four tiles, a partial one), exact data
  // too, one split and the suggested count.
  const bool small = dsa_test::under_sanitizer();
  const index_t k = small ? 200 : 2048;
  for (const index_t s : small ? std::vector<index_t>{1, 2} : std::vector<index_t>{1, 2, 4, 128}) {
    const index_t ns = dsa::sparse_mla_attention_num_splits(s, 128, k, sms);
    CAPTURE(ns);
    check_fast({s, 128, 576, 512, k, 131072}, sparse_mla_indices::random, 90 + static_cast<std::uint64_t>(s), false,
               {1, ns}, false, false, poison::none, /*both_outputs=*/s <= 4);
    if (s <= 4) check_fast({s, 128, 576, 512, k, 131072}, sparse_mla_indices::mixed, 95 + static_cast<std::uint64_t>(s), true, {ns});
  }
  // 16 and 64 heads (a partial head group, one group).
  check_fast({small ? 2 : 4, 16, 576, 512, small ? 70 : 300, 1000}, sparse_mla_indices::mixed, 99, false, {1, 3});
  check_fast({2, 64, 576, 512, small ? 100 : 2048, 4096}, sparse_mla_indices::mixed, 100, false, {1, 8});
}

TEST_CASE("cuda sparse_mla_attention fast kernel: prefill-like, 128 heads, top-2048 over 8K and 64K contexts") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  // Under the sanitizers 3 tokens of 40 entries.
  const bool small = dsa_test::under_sanitizer();
  check_fast({small ? 3 : 64, 128, 576, 512, small ? 40 : 2048, 8192}, sparse_mla_indices::mixed, 110, false, {1}, true);
  if (!small) {
    // The largest promised shape the exact reference runs in reasonable time: 512 tokens of a
    // 64K context (the benchmark's prefill is 4096 tokens), bf16 out, one split.
    check_fast({512, 128, 576, 512, 2048, 65536}, sparse_mla_indices::random, 111, false, {1}, true, false,
               poison::none, /*both_outputs=*/false);
  }
}

// ---- front-end and CUDA-limit errors: no GPU needed ----------------------------------------------

namespace {

struct fake_problem {
  index_t s = 2, h = 16, d_qk = 576, d_v = 512, k = 64, n = 100;
  dsa::device_view<bf16, 3> q = dsa_test::fake_device_view<bf16, 3>({2, 16, 576});
  dsa::device_view<bf16, 2> kv = dsa_test::fake_device_view<bf16, 2>({100, 576});
  dsa::device_view<std::uint8_t, 2> kv_fp8 = dsa_test::fake_device_view<std::uint8_t, 2>({100, 656});
  dsa::device_view<std::int32_t, 2> idx = dsa_test::fake_device_view<std::int32_t, 2>({2, 64});
  dsa::device_view<float, 3> out = dsa_test::fake_device_view<float, 3>({2, 16, 512});
  dsa::device_view<float, 2> lse = dsa_test::fake_device_view<float, 2>({2, 16});
  dsa::device_view<float, 2> probs = dsa_test::fake_device_view<float, 2>({2, 64});
  dsa::sparse_mla_config cfg{0.0625f, 512, 4};
  index_t ws_bytes = dsa::sparse_mla_attention_workspace_size(2, 16, 512, 4);
  dsa::device_view<std::byte, 1> ws = dsa_test::fake_device_view<std::byte, 1>({ws_bytes});
};

template <class F>
void expect_error(F&& f, const std::string& message) {
  CHECK_THROWS_WITH_AS(f(), message.c_str(), dsa::error);
}

}  // namespace

TEST_CASE("cuda sparse_mla_attention front-end: workspace size, alignment, overlap, split count") {
  fake_problem p;
  const dsa::cuda_backend be{};
  const std::string need = std::to_string(p.ws_bytes);
  for (const bool fp8 : {false, true}) {
    CAPTURE(fp8);
    const auto call_ws = [&](dsa::device_view<std::byte, 1> ws, dsa::sparse_mla_config cfg) {
      if (fp8) {
        dsa::sparse_mla_attention(be, p.q, p.kv_fp8, p.idx, p.out, p.lse, cfg, ws, p.probs);
      } else {
        dsa::sparse_mla_attention(be, p.q, p.kv, p.idx, p.out, p.lse, cfg, ws, p.probs);
      }
    };
    // Too small by one byte.
    expect_error([&] { call_ws(dsa::make_view<dsa::device_space>(p.ws.data_handle(), {p.ws_bytes - 1}), p.cfg); },
                 "dsa::sparse_mla_attention: workspace.extent(0) = " + std::to_string(p.ws_bytes - 1) +
                     "; expected at least sparse_mla_attention_workspace_size(s, h, d_v, num_splits) = " + need +
                     " bytes");
    // Absent although 4 splits need one.
    expect_error([&] { call_ws(dsa::device_view<std::byte, 1>{}, p.cfg); },
                 "dsa::sparse_mla_attention: workspace.extent(0) = 0; expected at least "
                 "sparse_mla_attention_workspace_size(s, h, d_v, num_splits) = " + need + " bytes");
    // Misaligned by 4 bytes.
    expect_error([&] { call_ws(dsa::make_view<dsa::device_space>(p.ws.data_handle() + 4, {p.ws_bytes}), p.cfg); },
                 "dsa::sparse_mla_attention: workspace.data_handle() % 16 = 4; expected 0 (16-byte aligned)");
    // Not contiguous.
    expect_error(
        [&] { call_ws(dsa::device_view<std::byte, 1>(p.ws.data_handle(), {p.ws_bytes}, {2}), p.cfg); },
        "dsa::sparse_mla_attention: workspace.stride(0) = 2; expected 1 (contiguous bytes)");
    // Overlapping out.
    expect_error(
        [&] {
          call_ws(dsa::make_view<dsa::device_space>(reinterpret_cast<std::byte*>(p.out.data_handle()), {p.ws_bytes}),
                  p.cfg);
        },
        "dsa::sparse_mla_attention: workspace = a view overlapping out; expected memory disjoint from out");
    // Split counts out of range, and more than one split without a workspace.
    for (const index_t bad : {0, 65}) {
      dsa::sparse_mla_config cfg = p.cfg;
      cfg.num_splits = bad;
      expect_error([&] { call_ws(p.ws, cfg); }, "dsa::sparse_mla_attention: config.num_splits = " +
                                                    std::to_string(bad) + "; expected a value in [1, 64]");
    }
    expect_error(
        [&] {
          if (fp8) {
            dsa::sparse_mla_attention(be, p.q, p.kv_fp8, p.idx, p.out, p.lse, p.cfg, p.probs);
          } else {
            dsa::sparse_mla_attention(be, p.q, p.kv, p.idx, p.out, p.lse, p.cfg, p.probs);
          }
        },
        "dsa::sparse_mla_attention: config.num_splits = 4; expected 1 without a workspace (pass a workspace of "
        "sparse_mla_attention_workspace_size(...) bytes to split)");
  }
}

TEST_CASE("cuda sparse_mla_attention: the kernels' limits are dsa::errors before any CUDA call") {
  const dsa::cuda_backend be{};
  // d_v > 512 (allowed by the front-end for d_qk >= d_v, not by the CUDA kernels).
  {
    auto q = dsa_test::fake_device_view<bf16, 3>({1, 4, 640});
    auto kv = dsa_test::fake_device_view<bf16, 2>({10, 640});
    auto idx = dsa_test::fake_device_view<std::int32_t, 2>({1, 8});
    auto out = dsa_test::fake_device_view<float, 3>({1, 4, 576});
    auto lse = dsa_test::fake_device_view<float, 2>({1, 4});
    const dsa::sparse_mla_config cfg{0.05f, 576, 1};
    expect_error([&] { dsa::sparse_mla_attention(be, q, kv, idx, out, lse, cfg); },
                 "dsa::sparse_mla_attention: config.d_v = 576; expected at most 512 on the CUDA backend");
  }
  // A head dimension whose tile of rows does not fit any GPU's shared memory.
  {
    auto q = dsa_test::fake_device_view<bf16, 3>({1, 4, 1300});
    auto kv = dsa_test::fake_device_view<bf16, 2>({10, 1300});
    auto idx = dsa_test::fake_device_view<std::int32_t, 2>({1, 8});
    auto out = dsa_test::fake_device_view<float, 3>({1, 4, 512});
    auto lse = dsa_test::fake_device_view<float, 2>({1, 4});
    const dsa::sparse_mla_config cfg{0.05f, 512, 1};
    expect_error([&] { dsa::sparse_mla_attention(be, q, kv, idx, out, lse, cfg); },
                 "dsa::sparse_mla_attention: q.extent(2) = 1300; expected at most 1198 on the CUDA backend (a tile "
                 "of rows in shared memory)");
  }
}
