// The dense building blocks on the CUDA backend, for the doctest tests (see
// op_launchers_dense.hpp).
#include "op_launchers_dense.hpp"

#include "dsa/cuda/activation.cuh"
#include "dsa/cuda/linear.cuh"
#include "dsa/cuda/norm.cuh"
#include "dsa/cuda/rope.cuh"
#include "dsa/cuda/sparse_mha_attention.cuh"

namespace dsa_test::cuda_ops {

void rms_norm(const cuda_backend& be, dview<const bf16, 2> x, dview<const float, 1> weight, dview<bf16, 2> y,
              float eps) {
  dsa::rms_norm(be, x, weight, y, eps);
}
void rms_norm(const cuda_backend& be, dview<const float, 2> x, dview<const float, 1> weight, dview<bf16, 2> y,
              float eps) {
  dsa::rms_norm(be, x, weight, y, eps);
}
void add_rms_norm(const cuda_backend& be, dview<const bf16, 2> x, dview<bf16, 2> residual,
                  dview<const float, 1> weight, dview<bf16, 2> y, float eps) {
  dsa::add_rms_norm(be, x, residual, weight, y, eps);
}
void layer_norm(const cuda_backend& be, dview<const bf16, 2> x, dview<const float, 1> weight,
                dview<const float, 1> bias, dview<bf16, 2> y, float eps) {
  dsa::layer_norm(be, x, weight, bias, y, eps);
}
void layer_norm(const cuda_backend& be, dview<const float, 2> x, dview<const float, 1> weight,
                dview<const float, 1> bias, dview<bf16, 2> y, float eps) {
  dsa::layer_norm(be, x, weight, bias, y, eps);
}

void rope_apply(const cuda_backend& be, dview<bf16, 3> x, dview<const std::int32_t, 1> positions,
                const dsa::rope_config& cfg, dsa::rope_layout layout) {
  dsa::rope_apply(be, x, positions, cfg, layout);
}
void swiglu(const cuda_backend& be, dview<const bf16, 2> gate, dview<const bf16, 2> up, dview<bf16, 2> y) {
  dsa::swiglu(be, gate, up, y);
}

#define DSA_TEST_DENSE_LINEAR(X, W, O)                                                          \
  void linear(const cuda_backend& be, dview<const X, 2> x, dview<const W, 2> w, dview<O, 2> y) { \
    dsa::linear(be, x, w, y);                                                                   \
  }
DSA_TEST_DENSE_LINEAR(bf16, bf16, bf16)
DSA_TEST_DENSE_LINEAR(bf16, bf16, float)
DSA_TEST_DENSE_LINEAR(float, float, float)
DSA_TEST_DENSE_LINEAR(float, float, bf16)
DSA_TEST_DENSE_LINEAR(bf16, float, float)
DSA_TEST_DENSE_LINEAR(bf16, float, bf16)
DSA_TEST_DENSE_LINEAR(float, bf16, float)
DSA_TEST_DENSE_LINEAR(float, bf16, bf16)
#undef DSA_TEST_DENSE_LINEAR

#define DSA_TEST_DENSE_FP8_LINEAR(X, O)                                                                   \
  void fp8_linear(const cuda_backend& be, dview<const X, 2> x, dview<const fp8_e4m3, 2> w, dview<const float, 2> ws, \
                  dview<O, 2> y, dsa::scale_format act_format) {                                          \
    dsa::fp8_linear(be, x, w, ws, y, act_format);                                                         \
  }
DSA_TEST_DENSE_FP8_LINEAR(bf16, bf16)
DSA_TEST_DENSE_FP8_LINEAR(bf16, float)
DSA_TEST_DENSE_FP8_LINEAR(float, bf16)
DSA_TEST_DENSE_FP8_LINEAR(float, float)
#undef DSA_TEST_DENSE_FP8_LINEAR

void fp8_linear_grid_rows(const cuda_backend& be, dview<const bf16, 2> x, dview<const fp8_e4m3, 2> w,
                          dview<const float, 2> ws, dview<bf16, 2> y, dsa::scale_format act_format, index_t max_rows) {
  dsa::cuda_detail::run_fp8_linear(be, x, w, ws, y, act_format, max_rows);
}
void linear_simt_grid_rows(const cuda_backend& be, dview<const bf16, 2> x, dview<const float, 2> w, dview<float, 2> y,
                           index_t max_rows) {
  dsa::cuda_detail::run_linear_simt(be, x, w, y, max_rows);
}

void sparse_mha_attention(const cuda_backend& be, dview<const bf16, 3> q, dview<const bf16, 3> k_nope,
                          dview<const bf16, 2> k_rope, dview<const bf16, 3> v, dview<const std::int32_t, 2> indices,
                          dview<bf16, 3> out, const dsa::sparse_mha_config& cfg, dview<float, 2> lse) {
  dsa::sparse_mha_attention(be, q, k_nope, k_rope, v, indices, out, cfg, lse);
}

}  // namespace dsa_test::cuda_ops
