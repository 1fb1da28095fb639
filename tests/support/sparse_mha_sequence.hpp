// The sequence of numerics/sparse_mha_attention.hpp as a plain single-threaded loop over
// (token, head, entry): the scalar twin of the CPU kernel's vectorised paths, which must give
// its bits exactly (tests/ops/test_sparse_mha_attention.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "dsa/core/tensor_view.hpp"
#include "dsa/numerics/sparse_mha_attention.hpp"
#include "dsa/ops/sparse_mha_attention.hpp"

namespace dsa_test {

using dsa::bf16;
using dsa::index_t;

inline void sparse_mha_sequence(dsa::host_view<const bf16, 3> q, dsa::host_view<const bf16, 3> k_nope,
                                dsa::host_view<const bf16, 2> k_rope, dsa::host_view<const bf16, 3> v,
                                dsa::host_view<const std::int32_t, 2> indices, dsa::host_view<bf16, 3> out,
                                const dsa::sparse_mha_config& cfg, dsa::host_view<float, 2> lse) {
  const index_t s = q.extent(0), h = q.extent(1), n = k_nope.extent(0);
  const index_t d_nope = k_nope.extent(2), d_rope = k_rope.extent(1), d_v = v.extent(2);
  const index_t k = indices.extent(1);
  const bool want_lse = !lse.is_absent();
  {
    std::vector<float> logit(static_cast<std::size_t>(k));
    std::vector<float> acc(static_cast<std::size_t>(d_v));
    for (index_t t = 0; t < s; ++t) {
      const std::int32_t* idx = indices.row(t);
      for (index_t hh = 0; hh < h; ++hh) {
        const bf16* qh = &q(t, hh, 0);
        float m = -std::numeric_limits<float>::infinity();
        for (index_t j = 0; j < k; ++j) {
          if (!dsa::sparse_mha_index_valid(idx[j], n)) continue;
          const index_t r = idx[j];
          const bf16* kr = d_rope > 0 ? k_rope.row(r) : nullptr;
          logit[static_cast<std::size_t>(j)] =
              dsa::sparse_mha_logit(qh, &k_nope(r, hh, 0), d_nope, kr, d_rope, cfg.softmax_scale, cfg.rounding);
          m = dsa::sparse_mha_max(m, logit[static_cast<std::size_t>(j)]);
        }
        bf16* o = &out(t, hh, 0);
        if (dsa::sparse_mha_row_empty(m)) {
          std::fill(o, o + d_v, bf16(0.0f));
          if (want_lse) lse(t, hh) = std::numeric_limits<float>::infinity();
          continue;
        }
        float sum = 0.0f;
        for (index_t j = 0; j < k; ++j) {
          if (!dsa::sparse_mha_index_valid(idx[j], n)) continue;
          const float e = dsa::sparse_mha_exp(logit[static_cast<std::size_t>(j)] - m);
          logit[static_cast<std::size_t>(j)] = e;
          sum += e;
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (index_t j = 0; j < k; ++j) {
          if (!dsa::sparse_mha_index_valid(idx[j], n)) continue;
          const float p = dsa::sparse_mha_prob(logit[static_cast<std::size_t>(j)], sum, cfg.rounding);
          const bf16* vr = &v(idx[j], hh, 0);
          for (index_t c = 0; c < d_v; ++c) acc[static_cast<std::size_t>(c)] += dsa::sparse_mha_pv(p, vr[c].to_float());
        }
        for (index_t c = 0; c < d_v; ++c) o[c] = bf16(acc[static_cast<std::size_t>(c)]);
        if (want_lse) lse(t, hh) = m + static_cast<float>(std::log(static_cast<double>(sum)));
      }
    }
  }
}


}  // namespace dsa_test
