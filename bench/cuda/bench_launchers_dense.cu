// The dense linear layers (cuBLAS bf16 linear, the exact fp8_linear kernel) on the CUDA backend
// for bench_cuda_dense.cpp (see bench_launchers.hpp).
#include "bench_launchers.hpp"

#include "dsa/cuda/linear.cuh"

namespace dsa_bench::cuda {

void linear(const cuda_backend& be, dview<const bf16, 2> x, dview<const bf16, 2> w, dview<bf16, 2> y) {
  dsa::linear(be, x, w, y);
}
void fp8_linear(const cuda_backend& be, dview<const bf16, 2> x, dview<const fp8_e4m3, 2> w,
                dview<const float, 2> w_scale, dview<bf16, 2> y) {
  dsa::fp8_linear(be, x, w, w_scale, y);
}

}  // namespace dsa_bench::cuda
