// The CUDA ops compiled once for dsa's own programs (dsa/core/op_instances.hpp): the dense layers
// (linear and fp8_linear on cuBLAS, norms, SwiGLU, RoPE).
#include "dsa/cuda/activation.cuh"
#include "dsa/cuda/linear.cuh"
#include "dsa/cuda/norm.cuh"
#include "dsa/cuda/rope.cuh"

DSA_NAMESPACE_BEGIN
DSA_LINEAR_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_NORM_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_SWIGLU_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_ROPE_INSTANCES(DSA_DEFINE_INSTANCE, cuda_backend)
DSA_NAMESPACE_END
