// CPU backend of indexer_weights (ops/indexer_weights.hpp, lightning_indexer_weights): elementwise, rows split over threads.
#pragma once

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/numerics/indexer_weights.hpp"
#include "dsa/ops/indexer_weights.hpp"

DSA_NAMESPACE_BEGIN

template <>
struct op_impl<cpu_backend, lightning_indexer_weights_op> {
  static void run(const cpu_backend& be, tensor_view<const float, 2> proj, tensor_view<const float, 2> q_scale,
                  tensor_view<float, 2> w, float head_scale, float dim_scale) {
    const index_t heads = proj.extent(1);
    cpu_detail::parallel_for(be, proj.extent(0), 4096, [&](index_t begin, index_t end) {
      for (index_t t = begin; t < end; ++t) {
        for (index_t h = 0; h < heads; ++h) w(t, h) = indexer_head_weight(proj(t, h), q_scale(t, h), head_scale, dim_scale);
      }
    });
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CPU_OP_INSTANCES(DSA_INDEXER_WEIGHTS_INSTANCES)
