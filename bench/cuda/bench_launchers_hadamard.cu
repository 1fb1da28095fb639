// hadamard_transform on the CUDA backend for bench_cuda_hadamard.cpp (see bench_launchers.hpp).
#include "bench_launchers.hpp"

#include "dsa/cuda/hadamard.cuh"

namespace dsa_bench::cuda {

void hadamard_transform(const cuda_backend& be, dview<const float, 2> x, dview<float, 2> y, float scale) {
  dsa::hadamard_transform(be, x, y, scale);
}
void hadamard_transform(const cuda_backend& be, dview<const bf16, 2> x, dview<bf16, 2> y, float scale) {
  dsa::hadamard_transform(be, x, y, scale);
}

}  // namespace dsa_bench::cuda
