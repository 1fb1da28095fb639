// CPU backend of moe_combine (ops/moe_combine.hpp): tokens split over threads, each row summed
// in slot order by the shared numerics, so results do not depend on the thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/numerics/moe_combine.hpp"
#include "dsa/ops/moe_combine.hpp"

DSA_NAMESPACE_BEGIN

template <>
struct op_impl<cpu_backend, moe_combine_op> {
  static void run(const cpu_backend& be, tensor_view<const bf16, 2> expert_out, tensor_view<const std::int32_t, 2> rows,
                  tensor_view<const float, 2> weights, tensor_view<const bf16, 2> shared, tensor_view<bf16, 2> y) {
    const index_t d = y.extent(1), k = rows.extent(1);
    const bool has_shared = !shared.is_absent();
    const index_t grain = std::max<index_t>(1, (index_t{1} << 14) / std::max<index_t>(1, d * (k + 1)));
    cpu_detail::parallel_for(be, y.extent(0), grain, [&](index_t begin, index_t end) {
      std::vector<float> acc(static_cast<std::size_t>(d));
      for (index_t t = begin; t < end; ++t) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (index_t j = 0; j < k; ++j) {
          const std::int32_t r = rows(t, j);
          if (r < 0) continue;
          const float w = weights(t, j);
          const bf16* e = expert_out.row(r);
          for (index_t c = 0; c < d; ++c) acc[static_cast<std::size_t>(c)] = moe_combine_add(acc[static_cast<std::size_t>(c)], w, e[c]);
        }
        bf16* yr = y.row(t);
        if (has_shared) {
          const bf16* sr = shared.row(t);
          for (index_t c = 0; c < d; ++c) yr[c] = bf16(acc[static_cast<std::size_t>(c)] + sr[c].to_float());
        } else {
          for (index_t c = 0; c < d; ++c) yr[c] = bf16(acc[static_cast<std::size_t>(c)]);
        }
      }
    });
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CPU_OP_INSTANCES(DSA_MOE_COMBINE_INSTANCES)
