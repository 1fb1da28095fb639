// Host replays of the reduction structure of the CUDA dense kernels (include/dsa/cuda/kernels/
// norm_kernel.cuh, sparse_mha_attention_kernel.cuh, linear_kernel.cuh) against the CPU backend's
// numerics: the device cannot run here, so what makes the kernels bit-identical — the 8-lane xor
// butterfly of the norms, the order-free row maximum of the attention, the +0 terms of its sum,
// the order-free exact fp8 block dot — is checked by replaying it with the same operations.
// Mirrors: norm_kernel.cuh combine (xor offsets 1, 2, 4) and the lane sums
// of rms_norm_kernel / layer_norm_kernel; sparse_mha_attention_kernel.cuh sparse_mha_kernel's
// row maximum (thread-strided fmaxf, warp butterflies, first used entry) and its entry-order exp
// sum; linear_kernel.cuh fp8_linear_kernel's per-128-block DFMA dot, and fp8_gemv_kernel's lane
// layout (dsa/numerics/linear.hpp), pass loop, 8-lane butterflies and ascending promotion.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dsa/core/types.hpp"
#include "dsa/cpu/linear.hpp"
#include "dsa/numerics/fp8_quant.hpp"
#include "dsa/numerics/linear.hpp"
#include "dsa/numerics/norm.hpp"
#include "dsa/numerics/sparse_mha_attention.hpp"
#include "support/random.hpp"

namespace {

using dsa::index_t;

std::uint64_t bits_of(double v) {
  std::uint64_t b = 0;
  std::memcpy(&b, &v, 8);
  return b;
}
std::uint32_t bits_of(float v) {
  std::uint32_t b = 0;
  std::memcpy(&b, &v, 4);
  return b;
}

// The kernels' combine: lane l of an 8-lane group adds its xor-1, xor-2, xor-4 partners' values
// (warp_reduce_sum<8>); returns every lane's result.
std::vector<double> butterfly8(std::vector<double> v) {
  for (int offset = 1; offset < 8; offset *= 2) {
    std::vector<double> next(8);
    for (int l = 0; l < 8; ++l) next[static_cast<std::size_t>(l)] = v[static_cast<std::size_t>(l)] + v[static_cast<std::size_t>(l ^ offset)];
    v = next;
  }
  return v;
}

// The norm kernel's lane sums: thread l sums f(x[k]) over k = l, l + 8, ... in index order.
template <class T, class F>
std::vector<double> lane_sums(const std::vector<T>& x, F f) {
  std::vector<double> s(8, 0.0);
  for (std::size_t k = 0; k < x.size(); ++k) s[k % 8] += f(x[k]);
  return s;
}

template <class T>
void check_norm_replay(index_t d, std::uint64_t seed) {
  CAPTURE(d);
  auto xf = dsa_test::normal(static_cast<std::size_t>(d), seed, 5.0f);
  for (std::size_t i = 0; i < xf.size(); i += 3) xf[i] += 100.0f;
  const std::vector<T> x = dsa_test::convert<T>(xf);
  const auto sq = [](T v) {
    const double a = static_cast<double>(dsa::to_float(v));
    return a * a;
  };
  const double cpu = dsa::norm_sum_squares(x.data(), d);
  for (const double lane : butterfly8(lane_sums(x, sq))) CHECK(bits_of(lane) == bits_of(cpu));

  const dsa::layer_norm_stats st = dsa::layer_norm_row_stats(x.data(), d, 1e-6f);
  const double sum = butterfly8(lane_sums(x, [](T v) { return static_cast<double>(dsa::to_float(v)); }))[0];
  const double mean = sum / static_cast<double>(d);
  const double dev = butterfly8(lane_sums(x, [&](T v) {
    return dsa::detail::square_rn(static_cast<double>(dsa::to_float(v)) - mean);
  }))[0];
  const dsa::layer_norm_stats rep = dsa::layer_norm_finish(sum, dev, d, 1e-6f);
  CHECK(bits_of(rep.mean) == bits_of(st.mean));
  CHECK(bits_of(rep.inv_std) == bits_of(st.inv_std));
}

}  // namespace

TEST_CASE("norm kernels: the 8-lane xor butterfly is the CPU's combine_lanes, bit for bit") {
  std::uint64_t seed = 1;
  for (const index_t d : {1, 7, 8, 13, 100, 512, 1536, 7168}) {
    check_norm_replay<dsa::bf16>(d, ++seed);
    check_norm_replay<float>(d, ++seed);
  }
}

TEST_CASE("sparse_mha kernel: the parallel row maximum equals the CPU loop's, NaN propagating") {
  constexpr int threads = 128;  // sparse_mha_threads
  constexpr float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 4000; ++trial) {
    const int k = 1 + static_cast<int>(rng() % 300);
    std::vector<float> logit(static_cast<std::size_t>(k));
    std::vector<bool> used(static_cast<std::size_t>(k));
    const int mode = trial % 5;
    for (int j = 0; j < k; ++j) {
      const auto u = rng() % 20;
      float v = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 16.0f;
      if (mode >= 1 && u == 0) v = nan;
      if (mode >= 2 && u == 1) v = -inf;
      if (mode >= 3 && u == 2) v = inf;
      if (mode == 4) v = (u < 10) ? -inf : nan;  // rows of only -inf and NaN
      logit[static_cast<std::size_t>(j)] = v;
      used[static_cast<std::size_t>(j)] = rng() % 4 != 0;
    }
    if (trial % 7 == 0) logit[0] = nan;  // a NaN first entry (if used)
    // The CPU loop, and what the row must be: NaN iff a used logit is NaN.
    float m = -inf;
    bool any_nan = false;
    for (int j = 0; j < k; ++j) {
      if (!used[static_cast<std::size_t>(j)]) continue;
      m = dsa::sparse_mha_max(m, logit[static_cast<std::size_t>(j)]);
      any_nan = any_nan || std::isnan(logit[static_cast<std::size_t>(j)]);
    }
    // The kernel: thread-strided maxima, warp butterflies, warps in order.
    std::vector<float> tmax(threads, -inf);
    for (int tid = 0; tid < threads; ++tid) {
      for (int j = tid; j < k; j += threads) {
        if (!used[static_cast<std::size_t>(j)]) continue;
        tmax[static_cast<std::size_t>(tid)] = dsa::sparse_mha_max(tmax[static_cast<std::size_t>(tid)], logit[static_cast<std::size_t>(j)]);
      }
    }
    float km = -inf;
    for (int w = 0; w < threads / 32; ++w) {
      std::vector<float> lm(tmax.begin() + 32 * w, tmax.begin() + 32 * w + 32);
      for (int offset = 16; offset > 0; offset /= 2) {
        std::vector<float> next(32);
        for (int l = 0; l < 32; ++l) {
          next[static_cast<std::size_t>(l)] = dsa::detail::max_propagate_nan(lm[static_cast<std::size_t>(l)], lm[static_cast<std::size_t>(l ^ offset)]);
        }
        lm = next;
      }
      km = w == 0 ? lm[0] : dsa::sparse_mha_max(km, lm[0]);
    }
    CAPTURE(trial);
    REQUIRE(std::isnan(m) == any_nan);
    REQUIRE(std::isnan(km) == any_nan);
    REQUIRE(dsa::sparse_mha_row_empty(km) == dsa::sparse_mha_row_empty(m));
    if (!any_nan) CHECK(bits_of(km) == bits_of(m));  // the same value and sign (no zero ties drawn here)
  }
}

TEST_CASE("sparse_mha kernel: unused entries added as +0 leave the CPU's fp32 sum unchanged") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int k = 1 + static_cast<int>(rng() % 500);
    float skip = 0.0f, padded = 0.0f;
    for (int j = 0; j < k; ++j) {
      const bool used = rng() % 3 != 0;
      float e = std::ldexp(static_cast<float>(rng() % 100000) / 100000.0f, -static_cast<int>(rng() % 140));
      if (rng() % 50 == 0) e = 0.0f;
      if (trial % 100 == 0 && j == k / 2) e = std::numeric_limits<float>::quiet_NaN();
      if (used) skip += e;
      padded += used ? e : 0.0f;
    }
    CHECK((bits_of(skip) == bits_of(padded) || (std::isnan(skip) && std::isnan(padded))));
  }
}

TEST_CASE("fp8_linear kernel: the block dot is exact in double, so its FMA order cannot matter") {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<dsa::fp8_e4m3> a(128), b(128);
    for (int k = 0; k < 128; ++k) {
      std::uint8_t ca = static_cast<std::uint8_t>(rng()), cb = static_cast<std::uint8_t>(rng());
      if ((ca & 0x7F) == 0x7F) ca = 0x7E;  // +-448
      if ((cb & 0x7F) == 0x7F) cb = 0x01;  // the smallest subnormal
      if (trial % 3 == 0) ca = static_cast<std::uint8_t>(k % 2 ? 0x7E : 0xFE);  // cancelling extremes
      a[static_cast<std::size_t>(k)] = dsa::fp8_e4m3::from_bits(ca);
      b[static_cast<std::size_t>(k)] = dsa::fp8_e4m3::from_bits(cb);
    }
    const float cpu = dsa::fp8_block_dot(a.data(), b.data(), 128);
    // The kernel: FMAs in ascending k (16-wide chunks); then reversed and strided orders.
    double fwd = 0.0, rev = 0.0, strided = 0.0;
    for (int k = 0; k < 128; ++k) {
      fwd = std::fma(static_cast<double>(a[static_cast<std::size_t>(k)].to_float()),
                     static_cast<double>(b[static_cast<std::size_t>(k)].to_float()), fwd);
      rev = std::fma(static_cast<double>(a[static_cast<std::size_t>(127 - k)].to_float()),
                     static_cast<double>(b[static_cast<std::size_t>(127 - k)].to_float()), rev);
      const int j = (k * 37) % 128;
      strided += static_cast<double>(a[static_cast<std::size_t>(j)].to_float()) *
                 static_cast<double>(b[static_cast<std::size_t>(j)].to_float());
    }
    CHECK(bits_of(static_cast<float>(fwd)) == bits_of(cpu));
    CHECK(bits_of(static_cast<float>(rev)) == bits_of(cpu));
    CHECK(bits_of(static_cast<float>(strided)) == bits_of(cpu));
  }
}

// ---- fp8_gemv_kernel (linear_kernel.cuh): the decode GEMV's lane layout -------------------------

TEST_CASE("fp8_gemv kernel: the lane layout covers each pass once, block by block, without bank conflicts") {
  std::vector<int> seen(static_cast<std::size_t>(dsa::fp8_gemv_pass_blocks * 128), 0);
  for (int half = 0; half < 2; ++half) {
    for (int lane = 0; lane < 32; ++lane) {
      const int k0 = dsa::fp8_gemv_code_offset(lane, half);
      for (int e = 0; e < 16; ++e) {
        ++seen[static_cast<std::size_t>(k0 + e)];
        CHECK((k0 + e) / 128 == dsa::fp8_gemv_block(lane, half));  // a lane's 16 codes lie in its block
      }
      CHECK(k0 % 16 == 0);  // 16-byte loads where the row is aligned
    }
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  for (int b = 0; b < dsa::fp8_gemv_pass_blocks; ++b) {
    // The lane the promotion reads a block's dot from holds that block, and so does its group of 8.
    const int lane = dsa::fp8_gemv_block_lane(b), half = dsa::fp8_gemv_block_half(b);
    CHECK(lane % 8 == 0);
    for (int l = lane; l < lane + 8; ++l) CHECK(dsa::fp8_gemv_block(l, half) == b);
  }
  // Step 3 reads code k0 + e of every lane at once: 32 different banks (4-byte words, 32 banks).
  for (int half = 0; half < 2; ++half) {
    for (int e = 0; e < 16; ++e) {
      std::vector<int> banks;
      for (int lane = 0; lane < 32; ++lane) {
        banks.push_back(dsa::fp8_gemv_smem_index(dsa::fp8_gemv_code_offset(lane, half) + e) % 32);
      }
      std::sort(banks.begin(), banks.end());
      CHECK(std::adjacent_find(banks.begin(), banks.end()) == banks.end());
    }
  }
  // The shared row holds every index.
  CHECK(dsa::fp8_gemv_smem_index(dsa::fp8_gemv_pass_blocks * 128 - 1) < dsa::fp8_gemv_smem_row);
}

namespace {

// A host replay of fp8_gemv_kernel for one output column: the pass loop, the per-group
// quantization (quantize_group), the lanes' 16-code DFMA partial dots, the
// 8-lane butterflies and the ascending promotion from fp8_gemv_block_lane.
std::vector<float> replay_fp8_gemv(const std::vector<float>& x, index_t t, index_t in, const std::vector<dsa::fp8_e4m3>& w,
                                   const std::vector<float>& w_scale, index_t c, dsa::scale_format fmt) {
  const index_t nkb = in / 128;
  const index_t scale_cols = nkb;
  std::vector<float> acc(static_cast<std::size_t>(t), 0.0f);
  for (index_t kb0 = 0; kb0 < nkb; kb0 += dsa::fp8_gemv_pass_blocks) {
    const int nb = static_cast<int>(std::min<index_t>(dsa::fp8_gemv_pass_blocks, nkb - kb0));
    // Step 2: quantized activations and scales of the pass.
    std::vector<std::vector<float>> xs(static_cast<std::size_t>(t), std::vector<float>(dsa::fp8_gemv_pass_blocks * 128, 0.0f));
    std::vector<std::vector<float>> sx(static_cast<std::size_t>(t), std::vector<float>(dsa::fp8_gemv_pass_blocks, 0.0f));
    for (index_t r = 0; r < t; ++r) {
      for (int b = 0; b < nb; ++b) {
        const float* xg = x.data() + r * in + (kb0 + b) * 128;
        const float s = dsa::act_quant_scale(dsa::abs_max(xg, 128), fmt);
        for (int k = 0; k < 128; ++k) {
          xs[static_cast<std::size_t>(r)][static_cast<std::size_t>(b * 128 + k)] = dsa::quantize_e4m3(xg[k], s).to_float();
        }
        sx[static_cast<std::size_t>(r)][static_cast<std::size_t>(b)] = s;
      }
    }
    for (index_t r = 0; r < t; ++r) {
      // Step 3: each lane's partial dot per load, then the butterfly within groups of 8 lanes.
      std::vector<std::vector<double>> part(2, std::vector<double>(32, 0.0));
      for (int half = 0; half < 2; ++half) {
        for (int lane = 0; lane < 32; ++lane) {
          if (dsa::fp8_gemv_block(lane, half) >= nb) continue;  // codes read as 0
          const int k0 = dsa::fp8_gemv_code_offset(lane, half);
          double d = 0.0;
          for (int e = 0; e < 16; ++e) {
            const double wv = w[static_cast<std::size_t>(c * in + kb0 * 128 + k0 + e)].to_float();
            d = std::fma(static_cast<double>(xs[static_cast<std::size_t>(r)][static_cast<std::size_t>(k0 + e)]), wv, d);
          }
          part[static_cast<std::size_t>(half)][static_cast<std::size_t>(lane)] = d;
        }
        for (int g = 0; g < 4; ++g) {
          const std::vector<double> sums = butterfly8(std::vector<double>(part[static_cast<std::size_t>(half)].begin() + 8 * g,
                                                                          part[static_cast<std::size_t>(half)].begin() + 8 * g + 8));
          std::copy(sums.begin(), sums.end(), part[static_cast<std::size_t>(half)].begin() + 8 * g);
        }
      }
      // Step 4: the ascending promotion.
      for (int b = 0; b < nb; ++b) {
        const double d = part[static_cast<std::size_t>(dsa::fp8_gemv_block_half(b))][static_cast<std::size_t>(dsa::fp8_gemv_block_lane(b))];
        const float ws = w_scale[static_cast<std::size_t>((c / 128) * scale_cols + kb0 + b)];
        acc[static_cast<std::size_t>(r)] = dsa::fp8_linear_accumulate(
            acc[static_cast<std::size_t>(r)], static_cast<float>(d),
            dsa::fp8_linear_block_scale(sx[static_cast<std::size_t>(r)][static_cast<std::size_t>(b)], ws));
      }
    }
  }
  return acc;
}

}  // namespace

TEST_CASE("fp8_gemv kernel: a replay of its passes, lanes and butterflies gives the CPU's fp8_linear bits") {
  std::uint64_t seed = 900;
  // in: one pass, a pass and a half, seven passes (V3.2's 7168), three blocks; t: 1, 4, 8.
  for (const auto& [t, in, out] : {std::array<index_t, 3>{1, 7168, 5}, {4, 1536, 130}, {8, 384, 3}, {3, 1024, 129}}) {
    CAPTURE(t);
    CAPTURE(in);
    for (const dsa::scale_format fmt : {dsa::scale_format::ue8m0, dsa::scale_format::fp32}) {
      auto x = dsa_test::normal(static_cast<std::size_t>(t * in), ++seed, 3.0f);
      x[5] = std::numeric_limits<float>::quiet_NaN();  // a NaN activation group (row 0, block 0)
      if (in > 256) std::fill(x.begin() + 128, x.begin() + 256, 0.0f);  // an all-zero group
      std::vector<dsa::fp8_e4m3> w(static_cast<std::size_t>(out * in));
      std::mt19937 rng(static_cast<std::mt19937::result_type>(++seed));
      for (auto& code : w) code = dsa::fp8_e4m3::from_bits(static_cast<std::uint8_t>(rng() % 256));
      const index_t scale_rows = (out + 127) / 128, scale_cols = in / 128;
      const auto w_scale = dsa_test::uniform(static_cast<std::size_t>(scale_rows * scale_cols), ++seed, 1e-3f, 1e-2f);
      std::vector<float> y(static_cast<std::size_t>(t * out));
      dsa::fp8_linear(dsa::cpu_backend{1}, dsa::make_view(x.data(), {t, in}), dsa::make_view(w.data(), {out, in}),
                      dsa::make_view(w_scale.data(), {scale_rows, scale_cols}), dsa::make_view(y.data(), {t, out}), fmt);
      for (index_t c = 0; c < out; ++c) {
        const std::vector<float> rep = replay_fp8_gemv(x, t, in, w, w_scale, c, fmt);
        for (index_t r = 0; r < t; ++r) {
          const float cpu = y[static_cast<std::size_t>(r * out + c)], got = rep[static_cast<std::size_t>(r)];
          CHECK((bits_of(got) == bits_of(cpu) || (std::isnan(got) && std::isnan(cpu))));
        }
      }
    }
  }
}
