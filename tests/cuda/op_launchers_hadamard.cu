// dsa::hadamard_transform on the CUDA backend, for the doctest tests (see op_launchers.hpp).
#include "op_launchers.hpp"

#include "dsa/cuda.cuh"

namespace dsa_test::cuda_ops {

void hadamard_transform(const cuda_backend& be, dview<const float, 2> x, dview<float, 2> y, float scale) {
  dsa::hadamard_transform(be, x, y, scale);
}

void hadamard_transform(const cuda_backend& be, dview<const bf16, 2> x, dview<bf16, 2> y, float scale) {
  dsa::hadamard_transform(be, x, y, scale);
}

}  // namespace dsa_test::cuda_ops
