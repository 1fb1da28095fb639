// The CUDA ops compiled once for dsa's own programs (dsa/core/op_instances.hpp), family "dense"
// (docs/architecture.md, "Op families"): linear and fp8_linear (cuBLAS and dsa's kernels), the
// norms, RoPE and SwiGLU. The families' six files compile in parallel.
#include "dsa/cuda/activation.cuh"
#include "dsa/cuda/linear.cuh"
#include "dsa/cuda/norm.cuh"
#include "dsa/cuda/rope.cuh"

DSA_NAMESPACE_BEGIN
DSA_DENSE_FAMILY_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_NAMESPACE_END
