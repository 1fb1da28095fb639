// dsa::model::transformer<cuda_backend>: the forward pass of dsa/model/basic_transformer.hpp on the GPU.
// This header holds what is truly device-specific, and compiles with g++ as well as nvcc:
//   - backend_resources<cuda_backend>: the checkpoint's weights copied once to the device
//     (device_weights, dsa/model/cuda/device_weights.hpp), a cuBLAS handle of the transformer's
//     own (with a workspace, for graph capture) when the backend passed in has none and its linear
//     path is cuBLAS or its kernels are fast, and a cuBLASLt handle when it has none and its
//     kernels are fast (fp8_linear's tensor-core path);
//   - device_sequence (dsa/model/cuda/device_sequence.hpp), the caches in device memory;
//   - layer_memory<cuda_backend> (dsa/model/cuda/layer_memory.hpp), the layers' buffers.
//
//   cudaStream_t s = ...;
//   auto m = dsa::model::transformer<dsa::cuda_backend>::load("tiny-dsv32/", dsa::cuda_backend{s});
//   auto seq = m.new_sequence(4096);                       // a device_sequence
//   std::vector<float> logits = m.forward(seq, prompt);    // on the host when forward() returns
//
// Compiling the pass itself needs nvcc and the CUDA op implementations: include
// <dsa/model/cuda/transformer.cuh> in a .cu file, or, from host-compiled code, define
// DSA_EXTERN_CUDA_TRANSFORMER and link one translation unit that instantiates
// `template class dsa::model::transformer<dsa::cuda_backend>;` under transformer.cuh (dsa's
// own: instances/cuda_transformer.cu, target dsa_cuda_transformer).
//
// Numerics versus the CPU transformer: every op is bit-identical to the CPU backend except where
// its CUDA implementation documents a tolerance (the fp32 accumulation order of the cuBLAS-backed
// linear, attention, ...); those last-bit differences propagate through bf16 roundings, the FP8
// quantization of activations and the indexer's top-k, so logits agree to a cosine similarity
// >= 0.999 with the same argmax, not bit for bit (tests/cuda/test_model_transformer.cpp).
//
// Part of the dsa::model and dsa::cuda targets.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/blas.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/model/cuda/device_sequence.hpp"
#include "dsa/model/cuda/device_weights.hpp"
#include "dsa/model/cuda/layer_memory.hpp"
#include "dsa/model/basic_transformer.hpp"
#include "dsa/model/weights.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

template <>
class backend_resources<cuda_backend> {
 public:
  using sequence_type = device_sequence;

  /// Gives `be` a cuBLAS handle of its own if it needs one and has none, then copies the
  /// weights to the device on be.stream and waits for the copies.
  backend_resources(const weights& w, cuda_backend& be) {
    if (be.blas == nullptr && (be.linear == cuda_linear_path::cublas || be.kernels == cuda_kernel_path::fast)) {
      blas_ = std::make_unique<cublas_handle>();
      be.blas = blas_->get();
      // A workspace of the handle's own, so that its GEMMs can be captured in a CUDA graph (cuBLAS's
      // rule for graph capture); 32 MiB, the size cuBLAS recommends on Hopper.
      blas_workspace_ = device_buffer<std::byte>(index_t{32} << 20);
      DSA_CUBLAS_CHECK(cublasSetWorkspace(be.blas, blas_workspace_.data(), blas_workspace_.size_bytes()));
    }
    if (be.blaslt == nullptr && be.kernels == cuda_kernel_path::fast) {
      blaslt_ = std::make_unique<cublaslt_handle>();  // fp8_linear's block-scaled FP8 GEMM
      be.blaslt = blaslt_->get();
    }
    dw_ = ::dsa::model::device_weights(w, be.stream);
    DSA_CUDA_CHECK(cudaStreamSynchronize(be.stream));
  }

  const device_layer_weights& layer(const weights&, index_t l) const { return dw_.layers[static_cast<std::size_t>(l)]; }
  device_view<const bf16, 2> embed_tokens(const weights&) const { return dw_.embed_tokens; }
  device_view<const float, 1> norm(const weights&) const { return dw_.norm; }
  device_view<const bf16, 2> lm_head(const weights&) const { return dw_.lm_head; }

  /// The device copy of the weights.
  const ::dsa::model::device_weights& device_weights() const { return dw_; }

  static void reserve(device_sequence& seq, index_t rows, const cuda_backend& be) { seq.reserve(rows, be.stream); }

 private:
  // Declared before the handles: destroyed after them.
  device_buffer<std::byte> blas_workspace_;
  std::unique_ptr<cublas_handle> blas_;      // owned when the backend passed in had no handle
  std::unique_ptr<cublaslt_handle> blaslt_;  // likewise
  ::dsa::model::device_weights dw_;
};

#ifdef DSA_EXTERN_CUDA_TRANSFORMER
extern template class transformer<cuda_backend>;
extern template layer_buffer<cuda_backend, std::int32_t> moe_experts_grouped_on_device<cuda_backend>(
    const layer_context<cuda_backend>&, const device_moe_weights&, device_view<const bf16, 2>,
    device_view<const std::int32_t, 2>, device_view<bf16, 2>);
#endif

}  // namespace model
DSA_NAMESPACE_END
