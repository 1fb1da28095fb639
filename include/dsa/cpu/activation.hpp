// CPU backend of dsa::swiglu: elementwise, rows split over threads.
#pragma once

#include <algorithm>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/numerics/activation.hpp"
#include "dsa/ops/activation.hpp"

DSA_NAMESPACE_BEGIN

template <>
struct op_impl<cpu_backend, swiglu_op> {
  static void run(const cpu_backend& be, tensor_view<const bf16, 2> gate, tensor_view<const bf16, 2> up,
                  tensor_view<bf16, 2> y) {
    const index_t n = gate.extent(1);
    const index_t grain = std::max<index_t>(1, (index_t{1} << 13) / std::max<index_t>(n, 1));
    cpu_detail::parallel_for(be, gate.extent(0), grain, [&](index_t b, index_t e) {
      for (index_t i = b; i < e; ++i) {
        const bf16* g = gate.row(i);
        const bf16* u = up.row(i);
        bf16* yr = y.row(i);
        for (index_t k = 0; k < n; ++k) yr[k] = bf16(swiglu_value(g[k].to_float(), u[k].to_float()));
      }
    });
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CPU_OP_INSTANCES(DSA_SWIGLU_INSTANCES)
