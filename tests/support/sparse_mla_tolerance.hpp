// The tolerance of a sparse MLA attention implementation that sums in another order than the CPU
// backend (the CUDA kernels and their host replay): inputs, the CPU reference, and a check of
// out / lse / probs against bounds derived from the data.
//
// Sources of difference, per (token t, head h) with U used entries:
//   logits  sum_i q_i k_ji of exact products in another order: |dx| <= d_qk · 2^-23 · scale ·
//           sum_i |q_i| max_j |k_ji| =: E (the textbook gamma_n bound of both orders, bounding
//           max_j sum_i |q_i k_ji| by a sum that costs O(k d) per token);
//   softmax exp / log of another libm (device expf / logf: 2 ulp), sums of U positive weights
//           in another order (relative 2 U 2^-24): together R = 2^-20 + 2 U 2^-24;
//   lse     max + ln(sum): |d lse| <= E (the max) + 2E + R (ln of the sum) + 2^-22 |lse|;
//   out     sum_j p_j v_j with p_j = exp(x_j - lse) moving by at most |dx_j| + |d lse|, so
//           |d out| <= (4E + R + 2^-22 |lse|) · max_j |v_j|, plus one bf16 ulp (2^-8 |out|) when
//           out is bf16 (the two fp32 values may round to neighbours);
//   probs   a sum over heads of such p_j: relative 4E + R + 2^-22 (1 + |lse|) (the device forms
//           exp(x - lse), the CPU exp(x - max) / sum), so |d probs| <= that · probs + 2^-126.
// Unused entries and tokens without used entries must match exactly (0, +inf).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/sparse_mla_attention.hpp"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/numerics/sparse_mla_attention.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"
#include "support/random.hpp"

namespace dsa_test {

/// A sparse MLA problem with its inputs as fp32 (q: bf16 values [s, h, d_qk]; kv: the decoded
/// rows [n, d_qk], bf16 values or FP8 code · scale).
struct sparse_mla_problem {
  dsa::index_t s = 0, h = 0, d_qk = 0, d_v = 0, k = 0, n = 0;
  float scale = 0.0f;
  std::vector<float> q;
  std::vector<float> kv;
  std::vector<std::int32_t> indices;
};

/// Results of one implementation, out widened to fp32.
struct sparse_mla_result {
  std::vector<float> out;    // [s, h, d_v]
  std::vector<float> lse;    // [s, h]
  std::vector<float> probs;  // [s, k] or empty
};

/// How a problem's index rows are filled.
enum class sparse_mla_indices {
  random,     // uniform in [0, n), duplicates likely when k is close to n
  mixed,      // random, with -1 padding at the end, INT32_MIN, n, INT32_MAX, duplicates, and every
              // fourth row without any used entry
  all_unused  // every entry -1 or out of range
};

/// A problem and its inputs in the formats the op takes: q and (bf16 cache) kv in bf16, or
/// (fp8) the 656-byte rows of the bf16 values; `pb.kv` holds the rows as the op sees them.
struct sparse_mla_inputs {
  sparse_mla_problem pb;
  std::vector<dsa::bf16> q;
  std::vector<dsa::bf16> kv;        // [n, d_qk] (bf16 cache)
  std::vector<std::uint8_t> kv_fp8;  // [n, 656] (fp8 cache)
};

/// Random inputs (exact = false), or (exact = true) inputs on which every summation order gives
/// the same bits: q has 0 / 1 in columns 0 and 1 only (by head: (1, 0), (0, 1), (1, 1), (0, 0)),
/// kv column 0 is 0 or -16, column 1 is 0 or -32, the rest small integers, softmax_scale = 16, so
/// the logits are 0, -256, -512 or -768: exp of a difference is exactly 1 or exactly 0, sums of
/// weights are exact integers, and out = (sum of the top keys' rows) / count is one rounding
/// (every value survives the FP8 cache: integers of at most 4 significant bits). Then out must be
/// bit-identical to the CPU's for any split count, and a dropped, extra or misplaced key shows.
inline sparse_mla_inputs make_sparse_mla_inputs(dsa::index_t s, dsa::index_t h, dsa::index_t d_qk, dsa::index_t d_v,
                                                dsa::index_t k, dsa::index_t n, bool fp8, sparse_mla_indices kind,
                                                std::uint64_t seed, bool exact = false) {
  using dsa::index_t;
  sparse_mla_inputs in;
  sparse_mla_problem& pb = in.pb;
  pb.s = s, pb.h = h, pb.d_qk = d_qk, pb.d_v = d_v, pb.k = k, pb.n = n;
  pb.scale = 1.0f / std::sqrt(static_cast<float>(d_qk));
  if (exact) {
    pb.scale = 16.0f;
    std::vector<float> q(static_cast<std::size_t>(s * h * d_qk), 0.0f);
    for (index_t t = 0; t < s; ++t) {
      for (index_t hh = 0; hh < h; ++hh) {
        const index_t pattern = (t + hh) % 4;
        float* row = q.data() + (t * h + hh) * d_qk;
        row[0] = (pattern == 0 || pattern == 2) ? 1.0f : 0.0f;
        if (d_qk > 1) row[1] = (pattern == 1 || pattern == 2) ? 1.0f : 0.0f;
      }
    }
    in.q = convert<dsa::bf16>(q);
    std::mt19937_64 krng(seed + 1);
    std::vector<float> kv(static_cast<std::size_t>(n * d_qk));
    for (index_t j = 0; j < n; ++j) {
      for (index_t i = 0; i < d_qk; ++i) {
        float v = static_cast<float>(static_cast<int>(krng() % 17) - 8);
        if (i == 0) v = krng() % 2 ? 0.0f : -16.0f;
        if (i == 1) v = krng() % 2 ? 0.0f : -32.0f;
        kv[static_cast<std::size_t>(j * d_qk + i)] = v;
      }
    }
    in.kv = convert<dsa::bf16>(kv);
  } else {
    in.q = convert<dsa::bf16>(normal(static_cast<std::size_t>(s * h * d_qk), seed, 1.0f));
    // Keys of a larger spread than the queries, so that the softmax is neither flat nor one-hot.
    in.kv = convert<dsa::bf16>(normal(static_cast<std::size_t>(n * d_qk), seed + 1, 1.5f));
  }
  std::mt19937_64 rng(seed + 2);
  pb.indices.resize(static_cast<std::size_t>(s * k));
  for (index_t t = 0; t < s; ++t) {
    std::int32_t* row = pb.indices.data() + t * k;
    for (index_t e = 0; e < k; ++e) {
      row[e] = n > 0 ? static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(n)) : -1;
    }
    if (kind == sparse_mla_indices::all_unused || (kind == sparse_mla_indices::mixed && t % 4 == 3)) {
      for (index_t e = 0; e < k; ++e) row[e] = (e % 3 == 0) ? static_cast<std::int32_t>(n + e) : -1 - static_cast<std::int32_t>(e % 2);
    } else if (kind == sparse_mla_indices::mixed) {
      for (index_t e = 0; e < k; ++e) {
        switch (rng() % 8) {
          case 0: row[e] = -1; break;
          case 1: row[e] = static_cast<std::int32_t>(n); break;
          case 2: row[e] = -2147483647 - 1; break;
          case 3: row[e] = e > 0 ? row[e - 1] : row[e]; break;  // a duplicate
          case 4: row[e] = 2147483647; break;
          default: break;
        }
      }
      // top-k padding: the last third unused (fewer selectable keys than k)
      for (index_t e = k - k / 3; e < k; ++e) row[e] = -1;
    }
  }
  // Rows no valid index selects hold NaN (FlashMLA's tests do the same): a kernel that reads an
  // unused entry's row, or lets a masked lane's garbage into a sum, turns the result into NaN.
  std::vector<bool> selected(static_cast<std::size_t>(n), false);
  for (const std::int32_t j : pb.indices) {
    if (dsa::sparse_mla_index_valid(j, n)) selected[static_cast<std::size_t>(j)] = true;
  }
  for (index_t j = 0; j < n; ++j) {
    if (selected[static_cast<std::size_t>(j)]) continue;
    std::fill(in.kv.begin() + j * d_qk, in.kv.begin() + (j + 1) * d_qk, dsa::bf16::from_bits(0x7FC0));
  }
  pb.q = to_floats(in.q);
  if (fp8) {
    REQUIRE(d_qk == dsa::kv_dim);
    in.kv_fp8.resize(static_cast<std::size_t>(n * dsa::kv_fp8_row_bytes));
    pb.kv.resize(static_cast<std::size_t>(n * d_qk));
    for (index_t j = 0; j < n; ++j) {
      std::uint8_t* row = in.kv_fp8.data() + j * dsa::kv_fp8_row_bytes;
      dsa::kv_fp8_row_encode(in.kv.data() + j * d_qk, row);
      dsa::sparse_mla_fp8_row_to_f32(row, pb.kv.data() + j * d_qk);
    }
    if (exact) {  // the FP8 round trip is exact on these values (NaN rows stay NaN)
      const std::vector<float> want = to_floats(in.kv);
      for (std::size_t i = 0; i < want.size(); ++i) REQUIRE((pb.kv[i] == want[i] || (std::isnan(pb.kv[i]) && std::isnan(want[i]))));
    }
  } else {
    pb.kv = to_floats(in.kv);
  }
  return in;
}

/// The CPU backend's result (the reference).
template <class O>
sparse_mla_result cpu_sparse_mla(const sparse_mla_inputs& in, bool fp8, bool want_probs) {
  using dsa::index_t;
  const sparse_mla_problem& pb = in.pb;
  std::vector<O> out(static_cast<std::size_t>(pb.s * pb.h * pb.d_v));
  sparse_mla_result r;
  r.lse.resize(static_cast<std::size_t>(pb.s * pb.h));
  if (want_probs) r.probs.resize(static_cast<std::size_t>(pb.s * pb.k));
  dsa::sparse_mla_config cfg;
  cfg.softmax_scale = pb.scale;
  cfg.d_v = pb.d_v;
  const auto q = dsa::make_view(in.q.data(), {pb.s, pb.h, pb.d_qk});
  const auto idx = dsa::make_view(pb.indices.data(), {pb.s, pb.k});
  const auto ov = dsa::make_view(out.data(), {pb.s, pb.h, pb.d_v});
  const auto lv = dsa::make_view(r.lse.data(), {pb.s, pb.h});
  const auto pv = want_probs ? dsa::make_view(r.probs.data(), {pb.s, pb.k}) : dsa::tensor_view<float, 2>{};
  if (fp8) {
    dsa::sparse_mla_attention(dsa::cpu, q, dsa::make_view(in.kv_fp8.data(), {pb.n, dsa::kv_fp8_row_bytes}), idx, ov,
                              lv, cfg, pv);
  } else {
    dsa::sparse_mla_attention(dsa::cpu, q, dsa::make_view(in.kv.data(), {pb.n, pb.d_qk}), idx, ov, lv, cfg, pv);
  }
  if constexpr (std::is_same_v<O, float>) {
    r.out = std::move(out);
  } else {
    r.out = to_floats(out);
  }
  return r;
}

inline void check_sparse_mla_close(const char* what, const sparse_mla_problem& pb, const sparse_mla_result& dev,
                                   const sparse_mla_result& ref, bool out_is_bf16) {
  using dsa::index_t;
  REQUIRE(dev.out.size() == ref.out.size());
  REQUIRE(dev.lse.size() == ref.lse.size());
  REQUIRE(dev.probs.size() == ref.probs.size());
  std::size_t bad = 0, checked = 0;
  double worst = 0.0;  // largest |difference| / bound seen
  const auto expect = [&](bool ok, double ratio, index_t t, index_t hh, index_t c, const char* field, double d,
                          double r) {
    ++checked;
    worst = std::max(worst, ratio);
    if (!ok && ++bad <= 5) {
      MESSAGE(what << ": " << field << " differs at token " << t << ", head " << hh << ", index " << c << ": device "
                   << d << ", reference " << r);
    }
  };
  std::vector<float> max_abs_lse(static_cast<std::size_t>(pb.s), 0.0f);
  std::vector<float> head_rel(static_cast<std::size_t>(pb.s), 0.0f);
  for (index_t t = 0; t < pb.s; ++t) {
    index_t used = 0;
    float vmax = 0.0f;
    for (index_t e = 0; e < pb.k; ++e) {
      const std::int32_t j = pb.indices[static_cast<std::size_t>(t * pb.k + e)];
      if (!dsa::sparse_mla_index_valid(j, pb.n)) continue;
      ++used;
      for (index_t c = 0; c < pb.d_v; ++c) vmax = std::max(vmax, std::fabs(pb.kv[static_cast<std::size_t>(j * pb.d_qk + c)]));
    }
    const double r = std::ldexp(1.0, -20) + 2.0 * static_cast<double>(used) * std::ldexp(1.0, -24);
    // kmax[i] = max over the used rows of |k_ji|, so that sum_i |q_i| kmax[i] bounds every
    // sum_i |q_i k_ji| at O(k d + h d) per token.
    std::vector<double> kmax(static_cast<std::size_t>(pb.d_qk), 0.0);
    for (index_t e = 0; e < pb.k; ++e) {
      const std::int32_t j = pb.indices[static_cast<std::size_t>(t * pb.k + e)];
      if (!dsa::sparse_mla_index_valid(j, pb.n)) continue;
      for (index_t i = 0; i < pb.d_qk; ++i) {
        kmax[static_cast<std::size_t>(i)] = std::max(kmax[static_cast<std::size_t>(i)], static_cast<double>(std::fabs(pb.kv[static_cast<std::size_t>(j * pb.d_qk + i)])));
      }
    }
    for (index_t hh = 0; hh < pb.h; ++hh) {
      double dot_abs = 0.0;
      for (index_t i = 0; i < pb.d_qk; ++i) {
        dot_abs += std::fabs(static_cast<double>(pb.q[static_cast<std::size_t>((t * pb.h + hh) * pb.d_qk + i)])) * kmax[static_cast<std::size_t>(i)];
      }
      const double big_e = static_cast<double>(pb.d_qk) * std::ldexp(1.0, -23) * pb.scale * dot_abs;
      const std::size_t th = static_cast<std::size_t>(t * pb.h + hh);
      const double lr = ref.lse[th], ld = dev.lse[th];
      if (used == 0) {
        expect(std::isinf(ld) && ld > 0, std::isinf(ld) ? 0.0 : 1e9, t, hh, -1, "lse (no used entry: +inf)", ld, lr);
      } else {
        const double bound = 3.0 * big_e + r + std::ldexp(1.0, -22) * std::fabs(lr);
        const double diff = std::fabs(ld - lr);
        expect(diff <= bound, diff / bound, t, hh, -1, "lse", ld, lr);
        max_abs_lse[static_cast<std::size_t>(t)] = std::max(max_abs_lse[static_cast<std::size_t>(t)], static_cast<float>(std::fabs(lr)));
        head_rel[static_cast<std::size_t>(t)] = std::max(head_rel[static_cast<std::size_t>(t)], static_cast<float>(4.0 * big_e + r));
      }
      for (index_t c = 0; c < pb.d_v; ++c) {
        const double od = dev.out[th * static_cast<std::size_t>(pb.d_v) + static_cast<std::size_t>(c)];
        const double orf = ref.out[th * static_cast<std::size_t>(pb.d_v) + static_cast<std::size_t>(c)];
        const double diff = std::fabs(od - orf);
        if (used == 0) {
          expect(od == 0.0 && !std::signbit(od) == !std::signbit(orf), od == 0.0 ? 0.0 : 1e9, t, hh, c,
                 "out (no used entry: 0)", od, orf);
          continue;
        }
        double bound = (4.0 * big_e + r + std::ldexp(1.0, -22) * std::fabs(lr)) * vmax + 1e-30;
        if (out_is_bf16) bound += std::ldexp(1.0, -8) * std::fabs(orf);
        expect(diff <= bound, diff / bound, t, hh, c, "out", od, orf);
      }
    }
  }
  if (!ref.probs.empty()) {
    for (index_t t = 0; t < pb.s; ++t) {
      const double rel = head_rel[static_cast<std::size_t>(t)] +
                         std::ldexp(1.0, -22) * (1.0 + max_abs_lse[static_cast<std::size_t>(t)]);
      for (index_t e = 0; e < pb.k; ++e) {
        const std::size_t i = static_cast<std::size_t>(t * pb.k + e);
        const double pd = dev.probs[i], pr = ref.probs[i];
        if (!dsa::sparse_mla_index_valid(pb.indices[i], pb.n)) {
          expect(pd == 0.0, pd == 0.0 ? 0.0 : 1e9, t, -1, e, "probs (unused entry: 0)", pd, pr);
          continue;
        }
        const double bound = rel * std::fabs(pr) + std::ldexp(1.0, -126);
        const double diff = std::fabs(pd - pr);
        expect(diff <= bound, diff / bound, t, -1, e, "probs", pd, pr);
      }
    }
  }
  INFO(what << ": " << bad << " of " << checked << " values outside the bound; largest difference / bound = " << worst);
  CHECK(bad == 0);
}

/// For make_sparse_mla_inputs(..., exact = true) with k index entries per token: out
/// bit-identical; lse = max + ln(count) within 2 ulp (the libm's logf); probs = count^-1 summed
/// over heads, each term exp(x - lse) from the device's own lse, so within check_sparse_mla's
/// bound at E = 0: (2^-20 + 2k·2^-24 + 2^-22·(1 + max_h |lse|)) relative; +inf / 0 exactly where
/// nothing is used.
inline void check_sparse_mla_exact(const char* what, const sparse_mla_result& dev, const sparse_mla_result& ref,
                                   dsa::index_t k) {
  REQUIRE(dev.out.size() == ref.out.size());
  REQUIRE(dev.lse.size() == ref.lse.size());
  REQUIRE(dev.probs.size() == ref.probs.size());
  std::size_t bad_out = 0, bad_lse = 0, bad_probs = 0;
  for (std::size_t i = 0; i < ref.out.size(); ++i) {
    if (std::bit_cast<std::uint32_t>(dev.out[i]) != std::bit_cast<std::uint32_t>(ref.out[i]) && ++bad_out <= 5) {
      MESSAGE(what << ": out[" << i << "] = " << dev.out[i] << ", reference " << ref.out[i]);
    }
  }
  for (std::size_t i = 0; i < ref.lse.size(); ++i) {
    const float d = dev.lse[i], r = ref.lse[i];
    const bool ok = std::isinf(r) ? d == r : std::fabs(d - r) <= 2.0f * std::nextafter(std::max(std::fabs(r), 0x1p-20f), INFINITY) - 2.0f * std::max(std::fabs(r), 0x1p-20f);
    if (!ok && ++bad_lse <= 5) MESSAGE(what << ": lse[" << i << "] = " << d << ", reference " << r);
  }
  const std::size_t tokens = k > 0 ? ref.probs.size() / static_cast<std::size_t>(k) : 0;
  const std::size_t heads = tokens > 0 ? ref.lse.size() / tokens : 0;
  for (std::size_t i = 0; i < ref.probs.size(); ++i) {
    const float d = dev.probs[i], r = ref.probs[i];
    const std::size_t t = i / static_cast<std::size_t>(k);
    double max_lse = 0.0;
    for (std::size_t hh = 0; hh < heads; ++hh) {
      const double l = ref.lse[t * heads + hh];
      if (std::isfinite(l)) max_lse = std::max(max_lse, std::fabs(l));
    }
    const double rel = std::ldexp(1.0, -20) + 2.0 * static_cast<double>(k) * std::ldexp(1.0, -24) +
                       std::ldexp(1.0, -22) * (1.0 + max_lse);
    const bool ok = r == 0.0f ? d == 0.0f : std::fabs(static_cast<double>(d) - r) <= rel * r;
    if (!ok && ++bad_probs <= 5) MESSAGE(what << ": probs[" << i << "] = " << d << ", reference " << r);
  }
  CHECK(bad_out == 0);
  CHECK(bad_lse == 0);
  CHECK(bad_probs == 0);
}

}  // namespace dsa_test
