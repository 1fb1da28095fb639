// CPU backend of dsa::rope_apply: the frequencies once per call, cos/sin once per token (shared
// by its heads), tokens split over threads. Every element is computed by the same scalar
// arithmetic whatever the split, so results are bit-identical for every thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/numerics/rope.hpp"
#include "dsa/ops/rope.hpp"

DSA_NAMESPACE_BEGIN

template <>
struct op_impl<cpu_backend, rope_apply_op> {
  static void run(const cpu_backend& be, tensor_view<bf16, 3> x, tensor_view<const std::int32_t, 1> positions,
                  const rope_config& cfg, rope_layout layout) {
    const index_t half = cfg.dim / 2;
    const index_t heads = x.extent(1);
    std::vector<float> inv_freq(static_cast<std::size_t>(half));
    for (index_t j = 0; j < half; ++j) inv_freq[j] = rope_inv_freq(cfg, j);
    // The second element of pair j sits `step` after the first, pairs start `stride` apart.
    const index_t stride = layout == rope_layout::interleaved ? 2 : 1;
    const index_t step = layout == rope_layout::interleaved ? 1 : half;
    const index_t grain = std::max<index_t>(1, 256 / std::max<index_t>(heads, 1));
    cpu_detail::parallel_for(be, x.extent(0), grain, [&](index_t b, index_t e) {
      std::vector<rope_cos_sin> cs(static_cast<std::size_t>(half));
      for (index_t i = b; i < e; ++i) {
        const std::int32_t pos = positions(i);
        for (index_t j = 0; j < half; ++j) cs[j] = rope_cos_sin_at(pos, inv_freq[j]);
        for (index_t h = 0; h < heads; ++h) {
          bf16* row = &x(i, h, 0);
          for (index_t j = 0; j < half; ++j) {
            bf16& p = row[j * stride];
            bf16& q = row[j * stride + step];
            float re = p.to_float();
            float im = q.to_float();
            rope_rotate(re, im, cs[j]);
            p = bf16(re);
            q = bf16(im);
          }
        }
      }
    });
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CPU_OP_INSTANCES(DSA_ROPE_INSTANCES)
