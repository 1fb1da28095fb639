// CPU backend of sparse_mha_attention (ops/sparse_mha_attention.hpp). Work items are query
// tokens; each (token, head) is evaluated by the shared numerics with a two-pass softmax over its
// entries (logits, then probabilities and P · V), so results are bit-identical for every thread
// count. Costs O(s · k · h · (d_qk + d_v)) and k floats of scratch per thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/parallel.hpp"
#include "dsa/numerics/sparse_mha_attention.hpp"
#include "dsa/ops/sparse_mha_attention.hpp"

DSA_NAMESPACE_BEGIN

template <>
struct op_impl<cpu_backend, sparse_mha_attention_op> {
  static void run(const cpu_backend& be, tensor_view<const bf16, 3> q, tensor_view<const bf16, 3> k_nope,
                  tensor_view<const bf16, 2> k_rope, tensor_view<const bf16, 3> v,
                  tensor_view<const std::int32_t, 2> indices, tensor_view<bf16, 3> out, const sparse_mha_config& cfg,
                  tensor_view<float, 2> lse) {
    const index_t s = q.extent(0), h = q.extent(1), n = k_nope.extent(0);
    const index_t d_nope = k_nope.extent(2), d_rope = k_rope.extent(1), d_v = v.extent(2);
    const index_t k = indices.extent(1);
    const bool want_lse = !lse.is_absent();
    const index_t cost = std::max<index_t>(1, k * h * (d_nope + d_rope + d_v));
    const index_t grain = std::max<index_t>(1, (index_t{1} << 16) / cost);
    cpu_detail::parallel_for(be, s, grain, [&](index_t begin, index_t end) {
      std::vector<float> logit(static_cast<std::size_t>(k));
      std::vector<float> acc(static_cast<std::size_t>(d_v));
      for (index_t t = begin; t < end; ++t) {
        const std::int32_t* idx = indices.row(t);
        for (index_t hh = 0; hh < h; ++hh) {
          const bf16* qh = &q(t, hh, 0);
          float m = -std::numeric_limits<float>::infinity();
          for (index_t j = 0; j < k; ++j) {
            if (!sparse_mha_index_valid(idx[j], n)) continue;
            const index_t r = idx[j];
            const bf16* kr = d_rope > 0 ? k_rope.row(r) : nullptr;
            logit[static_cast<std::size_t>(j)] =
                sparse_mha_logit(qh, &k_nope(r, hh, 0), d_nope, kr, d_rope, cfg.softmax_scale, cfg.rounding);
            m = sparse_mha_max(m, logit[static_cast<std::size_t>(j)]);
          }
          bf16* o = &out(t, hh, 0);
          if (sparse_mha_row_empty(m)) {
            std::fill(o, o + d_v, bf16(0.0f));
            if (want_lse) lse(t, hh) = std::numeric_limits<float>::infinity();
            continue;
          }
          float sum = 0.0f;
          for (index_t j = 0; j < k; ++j) {
            if (!sparse_mha_index_valid(idx[j], n)) continue;
            const float e = sparse_mha_exp(logit[static_cast<std::size_t>(j)] - m);
            logit[static_cast<std::size_t>(j)] = e;
            sum += e;
          }
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (index_t j = 0; j < k; ++j) {
            if (!sparse_mha_index_valid(idx[j], n)) continue;
            const float p = sparse_mha_prob(logit[static_cast<std::size_t>(j)], sum, cfg.rounding);
            const bf16* vr = &v(idx[j], hh, 0);
            for (index_t c = 0; c < d_v; ++c) acc[static_cast<std::size_t>(c)] += sparse_mha_pv(p, vr[c].to_float());
          }
          for (index_t c = 0; c < d_v; ++c) o[c] = bf16(acc[static_cast<std::size_t>(c)]);
          if (want_lse) lse(t, hh) = m + static_cast<float>(std::log(static_cast<double>(sum)));
        }
      }
    });
  }
};

DSA_NAMESPACE_END
