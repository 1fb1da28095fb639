// The dense building blocks on the CUDA backend (norms, rope, swiglu, linear, fp8_linear,
// sparse_mha_attention), instantiated by nvcc in op_launchers_dense.cu for the doctest tests:
// each function is exactly dsa::<op>(be, ...) with device views (see op_launchers.hpp).
#pragma once

#include <cstdint>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/numerics/fp8_quant.hpp"
#include "dsa/numerics/rope.hpp"
#include "dsa/ops/sparse_mha_attention.hpp"

namespace dsa_test::cuda_ops {

template <class T, std::size_t R>
using dview = dsa::device_view<T, R>;
using dsa::bf16;
using dsa::cuda_backend;
using dsa::fp8_e4m3;
using dsa::index_t;

// ---- norms -------------------------------------------------------------------------------------
void rms_norm(const cuda_backend& be, dview<const bf16, 2> x, dview<const float, 1> weight, dview<bf16, 2> y,
              float eps);
void rms_norm(const cuda_backend& be, dview<const float, 2> x, dview<const float, 1> weight, dview<bf16, 2> y,
              float eps);
void add_rms_norm(const cuda_backend& be, dview<const bf16, 2> x, dview<bf16, 2> residual,
                  dview<const float, 1> weight, dview<bf16, 2> y, float eps);
void layer_norm(const cuda_backend& be, dview<const bf16, 2> x, dview<const float, 1> weight,
                dview<const float, 1> bias, dview<bf16, 2> y, float eps);
void layer_norm(const cuda_backend& be, dview<const float, 2> x, dview<const float, 1> weight,
                dview<const float, 1> bias, dview<bf16, 2> y, float eps);

// ---- rope and swiglu ---------------------------------------------------------------------------
void rope_apply(const cuda_backend& be, dview<bf16, 3> x, dview<const std::int32_t, 1> positions,
                const dsa::rope_config& cfg, dsa::rope_layout layout);
void swiglu(const cuda_backend& be, dview<const bf16, 2> gate, dview<const bf16, 2> up, dview<bf16, 2> y);

// ---- linear (every x, w, y type combination) ---------------------------------------------------
#define DSA_TEST_DENSE_LINEAR(X, W, O) \
  void linear(const cuda_backend& be, dview<const X, 2> x, dview<const W, 2> w, dview<O, 2> y);
DSA_TEST_DENSE_LINEAR(bf16, bf16, bf16)
DSA_TEST_DENSE_LINEAR(bf16, bf16, float)
DSA_TEST_DENSE_LINEAR(float, float, float)
DSA_TEST_DENSE_LINEAR(float, float, bf16)
DSA_TEST_DENSE_LINEAR(bf16, float, float)
DSA_TEST_DENSE_LINEAR(bf16, float, bf16)
DSA_TEST_DENSE_LINEAR(float, bf16, float)
DSA_TEST_DENSE_LINEAR(float, bf16, bf16)
#undef DSA_TEST_DENSE_LINEAR

// ---- fp8_linear ----------------------------------------------------------------------------------
#define DSA_TEST_DENSE_FP8_LINEAR(X, O)                                                                   \
  void fp8_linear(const cuda_backend& be, dview<const X, 2> x, dview<const fp8_e4m3, 2> w, dview<const float, 2> ws, \
                  dview<O, 2> y, dsa::scale_format act_format);
DSA_TEST_DENSE_FP8_LINEAR(bf16, bf16)
DSA_TEST_DENSE_FP8_LINEAR(bf16, float)
DSA_TEST_DENSE_FP8_LINEAR(float, bf16)
DSA_TEST_DENSE_FP8_LINEAR(float, float)
#undef DSA_TEST_DENSE_FP8_LINEAR

// ---- linear and fp8_linear with at most max_rows blocks along y -------------------------------------
// The kernels on arguments the caller has checked (dsa::cuda_detail::run_fp8_linear, run_linear_simt):
// a small max_rows makes each block loop over several row tiles on a small shape.
void fp8_linear_grid_rows(const cuda_backend& be, dview<const bf16, 2> x, dview<const fp8_e4m3, 2> w,
                          dview<const float, 2> ws, dview<bf16, 2> y, dsa::scale_format act_format, index_t max_rows);
void linear_simt_grid_rows(const cuda_backend& be, dview<const bf16, 2> x, dview<const float, 2> w, dview<float, 2> y,
                           index_t max_rows);

// ---- sparse_mha_attention ----------------------------------------------------------------------
void sparse_mha_attention(const cuda_backend& be, dview<const bf16, 3> q, dview<const bf16, 3> k_nope,
                          dview<const bf16, 2> k_rope, dview<const bf16, 3> v, dview<const std::int32_t, 2> indices,
                          dview<bf16, 3> out, const dsa::sparse_mha_config& cfg, dview<float, 2> lse);

}  // namespace dsa_test::cuda_ops
