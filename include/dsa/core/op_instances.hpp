// The ops compiled once, and how code that cannot compile them calls them.
//
// dsa is header-only: an op is compiled in every translation unit that calls it, which for a
// program of many such units (a test suite) is most of its build time. Each ops/<op>.hpp names
// the type combinations of its front-ends in a list, DSA_<OP>_INSTANCES(X, B), for a backend B;
// the family lists below group them as docs/architecture.md's "Op families" does. A translation
// unit that expands a list with DSA_DEFINE_INSTANCE inside the dsa namespace, where the backend's
// implementations are visible, holds the one definition of each instance; one that expands it
// with DSA_EXTERN_INSTANCE declares them `extern template`, so that its calls compile to calls of
// those definitions (the front-ends are non-inline function templates, which an explicit
// instantiation declaration keeps from being instantiated: the caller needs neither the
// backend's implementation nor its compiler).
//
// dsa's own programs (tests, tools, examples, benchmarks, the Python binding) use this twice:
//  - to build faster: cpu/<op>.hpp ends with DSA_DECLARE_CPU_OP_INSTANCES(that list) and
//    cuda/<op>.cuh with DSA_DECLARE_CUDA_OP_INSTANCES(it), which declare the list extern where
//    DSA_EXTERN_CPU_OPS (DSA_EXTERN_CUDA_OPS) is defined; instances/cpu_ops_<family>.cpp
//    (instances/cuda_ops_<family>.cu) hold the definitions, in the targets dsa_cpu_ops and
//    dsa_cuda_ops (cmake/);
//  - to call the CUDA backend from code the host compiler builds: dsa/cuda/ops.hpp declares every
//    CUDA list extern next to the front-ends, so a .cpp file compiled by g++ or clang++ calls
//    dsa::<op>(dsa::cuda_backend{stream}, device views...) and links dsa_cuda_ops, where nvcc
//    compiled the kernels. That is the only bridge between host-compiled code and nvcc: the CUDA
//    tests, benchmarks, dsa_validate's CUDA executor and the Python binding's CUDA paths all call
//    the ops so (docs/architecture.md, "Host code and nvcc"). A combination no list names is a
//    compile error there (dispatch's static_assert: the host compiler would have to instantiate
//    the op's CUDA implementation), not a link error; add it to the op's list.
// Combinations a list does not name, and every program built without the macros and without
// dsa/cuda/ops.hpp, instantiate as usual; nothing installed needs the instance files.
//
// An engine can do the same: define the macro in every translation unit (or include
// dsa/cuda/ops.hpp) and, in one translation unit built with the same flags, expand the lists of
// the backend with DSA_DEFINE_INSTANCE inside the dsa namespace (DSA_OP_INSTANCES(X, B) is all of
// them; the instance files do it per family). Code built with other flags (dsa's AVX-512 test
// variants, its --use_fast_math launchers) must neither define the macro nor link those
// instances: it would call code compiled for another target.
#pragma once

#include "dsa/core/config.hpp"

#define DSA_EXTERN_INSTANCE(...) extern template __VA_ARGS__;
#define DSA_DEFINE_INSTANCE(...) template __VA_ARGS__;

// The op families (docs/architecture.md, "Op families"), each the lists of its ops' headers,
// which must be included where a family list is expanded. The layers of dsa that are split by
// family (instances/, the Python binding's ops_<family>.cpp and dsa/<family>.py) follow these.
/// quant: the Hadamard transform, the FP8 quantizers, the KV and indexer cache rows
/// (ops/hadamard.hpp, ops/fp8_quant.hpp, ops/kv_cache.hpp).
#define DSA_QUANT_FAMILY_INSTANCES(X, B) \
  DSA_HADAMARD_INSTANCES(X, B) DSA_FP8_QUANT_INSTANCES(X, B) DSA_KV_CACHE_INSTANCES(X, B)
/// indexer: the lightning indexer's scores and backward, its head weights, the indexer KL losses
/// (ops/lightning_indexer.hpp, ops/indexer_weights.hpp, ops/indexer_kl_loss.hpp).
#define DSA_INDEXER_FAMILY_INSTANCES(X, B) \
  DSA_LIGHTNING_INDEXER_INSTANCES(X, B) DSA_INDEXER_WEIGHTS_INSTANCES(X, B) DSA_INDEXER_KL_LOSS_INSTANCES(X, B)
/// topk: top-k selection and gather_rows (ops/topk.hpp).
#define DSA_TOPK_FAMILY_INSTANCES(X, B) DSA_TOPK_INSTANCES(X, B)
/// attention: sparse MLA and sparse MHA attention (ops/sparse_mla_attention.hpp,
/// ops/sparse_mha_attention.hpp).
#define DSA_ATTENTION_FAMILY_INSTANCES(X, B) \
  DSA_SPARSE_MLA_ATTENTION_INSTANCES(X, B) DSA_SPARSE_MHA_ATTENTION_INSTANCES(X, B)
/// dense: linear and fp8_linear, the norms, RoPE, SwiGLU (ops/linear.hpp, ops/norm.hpp,
/// ops/rope.hpp, ops/activation.hpp).
#define DSA_DENSE_FAMILY_INSTANCES(X, B) \
  DSA_LINEAR_INSTANCES(X, B) DSA_NORM_INSTANCES(X, B) DSA_ROPE_INSTANCES(X, B) DSA_SWIGLU_INSTANCES(X, B)
/// moe: the gate's routing and the weighted combine (ops/moe_routing.hpp, ops/moe_combine.hpp).
#define DSA_MOE_FAMILY_INSTANCES(X, B) DSA_MOE_ROUTING_INSTANCES(X, B) DSA_MOE_COMBINE_INSTANCES(X, B)
/// Every family.
#define DSA_OP_INSTANCES(X, B)                                                                      \
  DSA_QUANT_FAMILY_INSTANCES(X, B) DSA_INDEXER_FAMILY_INSTANCES(X, B) DSA_TOPK_FAMILY_INSTANCES(X, B) \
  DSA_ATTENTION_FAMILY_INSTANCES(X, B) DSA_DENSE_FAMILY_INSTANCES(X, B) DSA_MOE_FAMILY_INSTANCES(X, B)

#if defined(DSA_EXTERN_CPU_OPS)
#define DSA_DECLARE_CPU_OP_INSTANCES(list) DSA_NAMESPACE_BEGIN list(DSA_EXTERN_INSTANCE, cpu_backend) DSA_NAMESPACE_END
#else
#define DSA_DECLARE_CPU_OP_INSTANCES(list)
#endif

#if defined(DSA_EXTERN_CUDA_OPS)
#define DSA_DECLARE_CUDA_OP_INSTANCES(list) DSA_NAMESPACE_BEGIN list(DSA_EXTERN_INSTANCE, cuda_backend) DSA_NAMESPACE_END
#else
#define DSA_DECLARE_CUDA_OP_INSTANCES(list)
#endif
