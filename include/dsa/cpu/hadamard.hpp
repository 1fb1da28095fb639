// CPU backend of dsa::hadamard_transform.
//
// One row at a time: widen into an fp32 scratch row (16 KB at n = 4096, so it stays in L1/L2),
// butterflies, base mixing for the c * 2^m sizes, then scale and narrow on the way out.
// The butterflies fuse the stages two at a time (radix 4: strides h and 2h in registers), which
// halves the passes over the scratch; strides >= 4 vectorise along the row. Every element still
// sees exactly the fp32 operations of dsa/numerics/hadamard.hpp in the same order, so results
// are bit-identical to the shared numerics (and so to the CUDA backend), and rows are
// independent, so any thread count gives the same bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/parallel.hpp"
#include "dsa/numerics/hadamard.hpp"
#include "dsa/ops/hadamard.hpp"

DSA_NAMESPACE_BEGIN

template <>
struct op_impl<cpu_backend, hadamard_transform_op> {
  template <class T>
  static void run(const cpu_backend& be, tensor_view<const T, 2> x, tensor_view<T, 2> y, float scale) {
    const hadamard_plan plan = make_hadamard_plan(x.extent(1));
    // About 64K elements per task: enough work to pay for a thread.
    const index_t grain = std::max<index_t>(1, (index_t{1} << 16) / plan.n);
    cpu_detail::parallel_for(be, x.extent(0), grain, [&](index_t begin, index_t end) {
      std::vector<float> scratch(static_cast<std::size_t>(plan.base > 1 ? 2 * plan.n : plan.n));
      for (index_t r = begin; r < end; ++r) transform_row(plan, x.row(r), y.row(r), scale, scratch.data());
    });
  }

 private:
  // hadamard_butterflies (strides 1, 2, 4, ...) on s[0, len), two stages per pass.
  static void butterflies(float* s, index_t len) {
    index_t h = 1;
    if (len >= 4) {
      // Strides 1 and 2 within each aligned quadruple: written per quadruple so that the
      // compiler vectorises across quadruples.
      for (index_t k = 0; k < len; k += 4) {
        float* a = s + k;
        const float a1 = a[0] + a[1], b1 = a[0] - a[1];
        const float c1 = a[2] + a[3], d1 = a[2] - a[3];
        a[0] = a1 + c1;
        a[2] = a1 - c1;
        a[1] = b1 + d1;
        a[3] = b1 - d1;
      }
      h = 4;
    }
    for (; 4 * h <= len; h *= 4) {
      for (index_t i = 0; i < len; i += 4 * h) {
        float* a = s + i;
        float* b = a + h;
        float* c = b + h;
        float* d = c + h;
        for (index_t j = 0; j < h; ++j) {
          const float a1 = a[j] + b[j], b1 = a[j] - b[j];  // stride h
          const float c1 = c[j] + d[j], d1 = c[j] - d[j];
          a[j] = a1 + c1;  // stride 2h
          c[j] = a1 - c1;
          b[j] = b1 + d1;
          d[j] = b1 - d1;
        }
      }
    }
    if (h < len) {  // one stage left, stride len / 2
      float* a = s;
      float* b = s + h;
      for (index_t j = 0; j < h; ++j) {
        const float u = a[j], v = b[j];
        a[j] = u + v;
        b[j] = u - v;
      }
    }
  }

  // One row; `s` holds n floats, 2n for the c * 2^m sizes.
  template <class T>
  static void transform_row(const hadamard_plan& p, const T* xr, T* yr, float scale, float* s) {
    const index_t n = p.n;
    for (index_t j = 0; j < n; ++j) s[j] = to_float(xr[j]);
    for (int c = 0; c < p.base; ++c) butterflies(s + c * p.pow2, p.pow2);
    const float* res = s;
    if (p.base > 1) {
      float* out = s + n;
      for (int i = 0; i < p.base; ++i) {
        // hadamard_base_dot, vectorised over the offset within the block.
        float* o = out + i * p.pow2;
        const std::uint64_t neg = p.negative[i];
        for (index_t r = 0; r < p.pow2; ++r) o[r] = (neg & 1u) ? -s[r] : s[r];
        for (int j = 1; j < p.base; ++j) {
          const float* v = s + j * p.pow2;
          if ((neg >> j) & 1u) {
            for (index_t r = 0; r < p.pow2; ++r) o[r] -= v[r];
          } else {
            for (index_t r = 0; r < p.pow2; ++r) o[r] += v[r];
          }
        }
      }
      res = out;
    }
    for (index_t j = 0; j < n; ++j) yr[j] = from_float<T>(res[j] * scale);
  }
};

DSA_NAMESPACE_END
