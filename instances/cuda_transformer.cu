// The CUDA forward pass, compiled once for dsa's own programs: they build with
// DSA_EXTERN_CUDA_TRANSFORMER (dsa/model/cuda/transformer.hpp) and link this instance (target
// dsa_cuda_transformer, cmake/dsaCuda.cmake), so that host-compiled tests, tools and the Python
// binding run transformer<cuda_backend> without nvcc compiling it in each of them.
#include "dsa/model/cuda/transformer.cuh"

template class dsa::model::transformer<dsa::cuda_backend>;
