// CPU backend of dsa::rms_norm, dsa::add_rms_norm and dsa::layer_norm: one row per task
// iteration, rows split over threads (each row's reduction stays on one thread, in the fixed
// lane order of dsa/numerics/norm.hpp, so results are bit-identical for every thread count).
#pragma once

#include <algorithm>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/numerics/norm.hpp"
#include "dsa/ops/norm.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

// Rows per task: about 16K elements, enough to pay for a thread.
inline index_t norm_grain(index_t d) { return std::max<index_t>(1, (index_t{1} << 14) / std::max<index_t>(d, 1)); }

}  // namespace cpu_detail

template <>
struct op_impl<cpu_backend, rms_norm_op> {
  template <class X>
  static void run(const cpu_backend& be, tensor_view<const X, 2> x, tensor_view<const float, 1> weight,
                  tensor_view<bf16, 2> y, float eps) {
    const index_t d = x.extent(1);
    const float* w = weight.data_handle();
    cpu_detail::parallel_for(be, x.extent(0), cpu_detail::norm_grain(d), [&](index_t b, index_t e) {
      for (index_t i = b; i < e; ++i) {
        const X* xr = x.row(i);
        bf16* yr = y.row(i);
        const float r = rms_norm_inv_rms(norm_sum_squares(xr, d), d, eps);
        for (index_t k = 0; k < d; ++k) yr[k] = bf16(rms_norm_scale(to_float(xr[k]), r, w[k]));
      }
    });
  }
};

template <>
struct op_impl<cpu_backend, add_rms_norm_op> {
  static void run(const cpu_backend& be, tensor_view<const bf16, 2> x, tensor_view<bf16, 2> residual,
                  tensor_view<const float, 1> weight, tensor_view<bf16, 2> y, float eps) {
    const index_t d = x.extent(1);
    const float* w = weight.data_handle();
    cpu_detail::parallel_for(be, x.extent(0), cpu_detail::norm_grain(d), [&](index_t b, index_t e) {
      std::vector<float> h(static_cast<std::size_t>(d));
      for (index_t i = b; i < e; ++i) {
        const bf16* xr = x.row(i);
        bf16* rr = residual.row(i);
        bf16* yr = y.row(i);
        for (index_t k = 0; k < d; ++k) {
          h[k] = xr[k].to_float() + rr[k].to_float();
          rr[k] = bf16(h[k]);
        }
        const float r = rms_norm_inv_rms(norm_sum_squares(h.data(), d), d, eps);
        for (index_t k = 0; k < d; ++k) yr[k] = bf16(rms_norm_scale(h[k], r, w[k]));
      }
    });
  }
};

template <>
struct op_impl<cpu_backend, layer_norm_op> {
  template <class X>
  static void run(const cpu_backend& be, tensor_view<const X, 2> x, tensor_view<const float, 1> weight,
                  tensor_view<const float, 1> bias, tensor_view<bf16, 2> y, float eps) {
    const index_t d = x.extent(1);
    const float* w = weight.data_handle();
    const float* bs = bias.data_handle();
    cpu_detail::parallel_for(be, x.extent(0), cpu_detail::norm_grain(d), [&](index_t b, index_t e) {
      for (index_t i = b; i < e; ++i) {
        const X* xr = x.row(i);
        bf16* yr = y.row(i);
        const layer_norm_stats st = layer_norm_row_stats(xr, d, eps);
        for (index_t k = 0; k < d; ++k) yr[k] = bf16(layer_norm_scale(to_float(xr[k]), st, w[k], bs[k]));
      }
    });
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CPU_OP_INSTANCES(DSA_NORM_INSTANCES)
