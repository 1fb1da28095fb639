// The CUDA side of dsa_validate: an executor (primitive_cases.hpp) whose members stage the case's
// host inputs into device buffers, call the same public ops with a dsa::cuda_backend, and copy
// the outputs back, so every primitive group runs on the GPU under the same loading and the same
// criteria as on the CPU; and the model replay on transformer<cuda_backend>.
//
// Host code, compiled with dsa_validate.cpp by the host compiler (DSA_VALIDATE_CUDA, a build with
// DSA_ENABLE_CUDA=ON). The ops are called directly through dsa/cuda/ops.hpp and the forward pass
// through dsa/model/cuda/transformer.hpp: their kernels are the ones nvcc compiled once in the
// targets dsa_cuda_ops and dsa_cuda_transformer (dsa/core/op_instances.hpp), which dsa_validate
// links. This file holds no comparison logic (primitive_cases.hpp has it, for every backend).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/memory.hpp"
#include "dsa/cuda/ops.hpp"
#include "dsa/model/cuda/transformer.hpp"
#include "validate/executor.hpp"
#include "validate/model_replay.hpp"

namespace dsa_validate {

/// "<name> (sm_<major><minor>, <memory> GiB)" of the current device, for the report line. Needs a
/// device (check dsa::has_device() first); throws dsa::cuda_error otherwise.
std::string cuda_device_description();

/// The CUDA executor (concept `executor` of primitive_cases.hpp). Each member:
///  1. copies every input view into a device buffer of its shape (cudaMalloc; the views are
///     contiguous host tensors),
///  2. fills every output buffer with output_poison_byte (validate/executor.hpp), so that an
///     element the kernel fails to write fails its comparison instead of passing as a zero,
///  3. calls dsa::<op>(cuda_backend{stream, ..., kernels}, device views..., config): the real
///     front-end, op_impl<cuda_backend, ...> and kernel (the fast or the exact one of the ops
///     that have both: --cuda-kernels),
///  4. copies the outputs into the host views and synchronises the stream.
/// Front-end errors (dsa::error) propagate as they are (run_group reports them as input errors);
/// CUDA runtime errors (dsa::cuda_error, e.g. a kernel fault) become backend_error.
class cuda_executor {
 public:
  explicit cuda_executor(cudaStream_t stream = nullptr, dsa::cuda_kernel_path kernels = dsa::default_cuda_kernel_path)
      : stream_(stream), kernels_(kernels) {}

  std::string_view backend_name() const { return dsa::cuda_backend::name; }
  cudaStream_t stream() const { return stream_; }
  /// The backend every op runs on: the stream and the kernels of --cuda-kernels.
  dsa::cuda_backend backend() const {
    dsa::cuda_backend be{stream_};
    be.kernels = kernels_;
    return be;
  }

  void hadamard_transform(dsa::host_view<const dsa::bf16, 2> x, dsa::host_view<dsa::bf16, 2> y, float scale) const;
  void hadamard_transform(dsa::host_view<const float, 2> x, dsa::host_view<float, 2> y, float scale) const;
  void act_quant(dsa::host_view<const dsa::bf16, 2> x, dsa::host_view<dsa::fp8_e4m3, 2> q, dsa::host_view<float, 2> s,
                 const dsa::act_quant_config& cfg) const;
  void weight_quant(dsa::host_view<const float, 2> w, dsa::host_view<dsa::fp8_e4m3, 2> q,
                    dsa::host_view<float, 2> s) const;
  void lightning_indexer_scores(dsa::host_view<const dsa::fp8_e4m3, 3> q, dsa::host_view<const float, 2> w,
                                dsa::host_view<const dsa::fp8_e4m3, 2> k, dsa::host_view<const float, 1> k_scale,
                                dsa::host_view<const std::int32_t, 2> ranges, dsa::host_view<float, 2> scores) const;
  void topk_indices(dsa::host_view<const float, 2> scores, dsa::host_view<const std::int32_t, 2> ranges,
                    dsa::index_t k, dsa::host_view<std::int32_t, 2> indices) const;
  /// dsa::sparse_mla_attention_num_splits(s, h, k, the current device's SM count).
  dsa::index_t sparse_mla_num_splits(dsa::index_t s, dsa::index_t h, dsa::index_t k) const;
  /// config.num_splits > 1 runs the workspace overload with a device workspace of
  /// sparse_mla_attention_workspace_size(s, h, d_v, num_splits) bytes.
  void sparse_mla_attention(dsa::host_view<const dsa::bf16, 3> q, dsa::host_view<const dsa::bf16, 2> kv,
                            dsa::host_view<const std::int32_t, 2> indices, dsa::host_view<float, 3> out,
                            dsa::host_view<float, 2> lse, const dsa::sparse_mla_config& cfg) const;
  /// The KL losses run the workspace overloads (the CUDA backend sums the per-row losses in a
  /// second pass) with a device workspace of indexer_kl_loss_*_workspace_size bytes.
  void indexer_kl_loss_dense(dsa::host_view<const float, 3> attn, dsa::host_view<const float, 2> index_scores,
                             dsa::host_view<const std::int32_t, 2> ranges, dsa::host_view<float, 1> loss,
                             dsa::host_view<float, 2> grad_index) const;
  void indexer_kl_loss_sparse(dsa::host_view<const float, 3> attn, dsa::host_view<const float, 2> index_scores,
                              dsa::host_view<const std::int32_t, 2> topk, dsa::host_view<float, 1> loss,
                              dsa::host_view<float, 2> grad_index) const;

 private:
  cudaStream_t stream_ = nullptr;
  dsa::cuda_kernel_path kernels_ = dsa::default_cuda_kernel_path;
};

/// --model DIR --backend cuda: run_model_case (validate/model_replay.hpp) on
/// dsa::model::transformer<dsa::cuda_backend> on the default stream of the current device; the
/// same replay and criteria as on the CPU, dsa::linear on `linear` (--cuda-linear), the ops with
/// two kernels on `kernels` (--cuda-kernels), the computed tensors kept only with
/// `keep_outputs` (for --dump).
/// CUDA runtime errors become backend_error; a malformed directory throws as on the CPU
/// (dsa::error, input_error).
model_case_result run_model_case_cuda(const std::filesystem::path& dir, dsa::cuda_linear_path linear,
                                      dsa::cuda_kernel_path kernels, bool keep_outputs);

// ---- definitions ------------------------------------------------------------------------------

namespace staging {

/// A device copy of one host tensor: the buffer and a row-major view of it with the same shape.
template <class T, std::size_t R>
struct device_tensor {
  dsa::device_buffer<T> buffer;
  dsa::device_view<T, R> view;
};

/// The device copy of input `h`, enqueued on `stream`.
template <class T, std::size_t R>
device_tensor<std::remove_const_t<T>, R> stage_in(dsa::host_view<T, R> h, cudaStream_t stream) {
  using U = std::remove_const_t<T>;
  device_tensor<U, R> d{dsa::device_buffer<U>(h.size()), {}};
  d.view = dsa::device_view<U, R>(d.buffer.data(), h.extents());
  dsa::copy_to_device(d.view, dsa::host_view<const U, R>(h), stream);
  return d;
}

/// A device buffer for output `h`, filled with output_poison_byte.
template <class T, std::size_t R>
device_tensor<T, R> stage_out(dsa::host_view<T, R> h, cudaStream_t stream) {
  device_tensor<T, R> d{dsa::device_buffer<T>(h.size()), {}};
  d.view = dsa::device_view<T, R>(d.buffer.data(), h.extents());
  if (!d.buffer.empty()) {
    DSA_CUDA_CHECK(cudaMemsetAsync(d.buffer.data(), output_poison_byte, d.buffer.size_bytes(), stream));
  }
  return d;
}

/// A workspace of `bytes` bytes (cudaMalloc: 256-byte aligned, beyond the ops' 16). Its contents
/// start as output_poison_byte too: an op that reads scratch it did not write gets garbage.
inline device_tensor<std::byte, 1> workspace(dsa::index_t bytes, cudaStream_t stream) {
  device_tensor<std::byte, 1> d{dsa::device_buffer<std::byte>(bytes), {}};
  d.view = d.buffer.view();
  if (!d.buffer.empty()) {
    DSA_CUDA_CHECK(cudaMemsetAsync(d.buffer.data(), output_poison_byte, d.buffer.size_bytes(), stream));
  }
  return d;
}

/// Enqueues the copy of output `d` back into `h`.
template <class T, std::size_t R>
void unstage(dsa::host_view<T, R> h, const device_tensor<T, R>& d, cudaStream_t stream) {
  dsa::copy_to_host(h, dsa::device_view<const T, R>(d.view), stream);
}

/// Runs `body(be)` (stage, op, unstage) on `be`, then waits for its stream so that the host
/// outputs are complete and an asynchronous kernel fault surfaces here, attributed to `op` (the
/// body's device buffers are freed when it returns; a fault that cudaFree meets is sticky and
/// reported by the synchronise). CUDA runtime failures become backend_error; the front-ends'
/// dsa::error (a shape the op rejects) passes through.
template <class Body>
void run_staged(const char* op, const dsa::cuda_backend& be, Body&& body) {
  try {
    std::forward<Body>(body)(be);
    DSA_CUDA_CHECK(cudaStreamSynchronize(be.stream));
  } catch (const dsa::cuda_error& e) {
    throw backend_error(std::string(op) + " on the CUDA backend: " + e.what());
  }
}

}  // namespace staging

inline std::string cuda_device_description() {
  int device = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp p{};
  DSA_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  const double gib = static_cast<double>(p.totalGlobalMem) / static_cast<double>(1ull << 30);
  char mem[32];
  std::snprintf(mem, sizeof mem, "%.0f", gib);
  return "device " + std::to_string(device) + ": " + p.name + ", sm_" + std::to_string(p.major) +
         std::to_string(p.minor) + ", " + mem + " GiB";
}

inline void cuda_executor::hadamard_transform(dsa::host_view<const dsa::bf16, 2> x, dsa::host_view<dsa::bf16, 2> y,
                                              float scale) const {
  staging::run_staged("hadamard_transform", backend(), [&](const auto& be) {
    const auto dx = staging::stage_in(x, stream_);
    const auto dy = staging::stage_out(y, stream_);
    dsa::hadamard_transform(be, dx.view, dy.view, scale);
    staging::unstage(y, dy, stream_);
  });
}

inline void cuda_executor::hadamard_transform(dsa::host_view<const float, 2> x, dsa::host_view<float, 2> y,
                                              float scale) const {
  staging::run_staged("hadamard_transform", backend(), [&](const auto& be) {
    const auto dx = staging::stage_in(x, stream_);
    const auto dy = staging::stage_out(y, stream_);
    dsa::hadamard_transform(be, dx.view, dy.view, scale);
    staging::unstage(y, dy, stream_);
  });
}

inline void cuda_executor::act_quant(dsa::host_view<const dsa::bf16, 2> x, dsa::host_view<dsa::fp8_e4m3, 2> q,
                                     dsa::host_view<float, 2> s, const dsa::act_quant_config& cfg) const {
  staging::run_staged("act_quant", backend(), [&](const auto& be) {
    const auto dx = staging::stage_in(x, stream_);
    const auto dq = staging::stage_out(q, stream_);
    const auto ds = staging::stage_out(s, stream_);
    dsa::act_quant(be, dsa::device_view<const dsa::bf16, 2>(dx.view), dq.view, ds.view, cfg);
    staging::unstage(q, dq, stream_);
    staging::unstage(s, ds, stream_);
  });
}

inline void cuda_executor::weight_quant(dsa::host_view<const float, 2> w, dsa::host_view<dsa::fp8_e4m3, 2> q,
                                        dsa::host_view<float, 2> s) const {
  staging::run_staged("weight_quant", backend(), [&](const auto& be) {
    const auto dw = staging::stage_in(w, stream_);
    const auto dq = staging::stage_out(q, stream_);
    const auto ds = staging::stage_out(s, stream_);
    dsa::weight_quant(be, dsa::device_view<const float, 2>(dw.view), dq.view, ds.view);
    staging::unstage(q, dq, stream_);
    staging::unstage(s, ds, stream_);
  });
}

inline void cuda_executor::lightning_indexer_scores(dsa::host_view<const dsa::fp8_e4m3, 3> q,
                                                    dsa::host_view<const float, 2> w,
                                                    dsa::host_view<const dsa::fp8_e4m3, 2> k,
                                                    dsa::host_view<const float, 1> k_scale,
                                                    dsa::host_view<const std::int32_t, 2> ranges,
                                                    dsa::host_view<float, 2> scores) const {
  staging::run_staged("lightning_indexer_scores", backend(), [&](const auto& be) {
    const auto dq = staging::stage_in(q, stream_);
    const auto dw = staging::stage_in(w, stream_);
    const auto dk = staging::stage_in(k, stream_);
    const auto dks = staging::stage_in(k_scale, stream_);
    const auto dr = staging::stage_in(ranges, stream_);
    const auto dscores = staging::stage_out(scores, stream_);
    dsa::lightning_indexer_scores(be, dq.view, dw.view, dk.view, dks.view, dr.view, dscores.view);
    staging::unstage(scores, dscores, stream_);
  });
}

inline void cuda_executor::topk_indices(dsa::host_view<const float, 2> scores,
                                        dsa::host_view<const std::int32_t, 2> ranges, dsa::index_t k,
                                        dsa::host_view<std::int32_t, 2> indices) const {
  staging::run_staged("topk_indices", backend(), [&](const auto& be) {
    const auto ds = staging::stage_in(scores, stream_);
    const auto dr = staging::stage_in(ranges, stream_);
    const auto di = staging::stage_out(indices, stream_);
    dsa::topk_indices(be, ds.view, dr.view, k, di.view);
    staging::unstage(indices, di, stream_);
  });
}

inline dsa::index_t cuda_executor::sparse_mla_num_splits(dsa::index_t s, dsa::index_t h, dsa::index_t k) const {
  int device = 0, sm_count = 0;
  try {
    DSA_CUDA_CHECK(cudaGetDevice(&device));
    DSA_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  } catch (const dsa::cuda_error& e) {
    throw backend_error(std::string("sparse_mla_attention_num_splits on the CUDA backend: ") + e.what());
  }
  return dsa::sparse_mla_attention_num_splits(s, h, k, sm_count);
}

inline void cuda_executor::sparse_mla_attention(dsa::host_view<const dsa::bf16, 3> q,
                                                dsa::host_view<const dsa::bf16, 2> kv,
                                                dsa::host_view<const std::int32_t, 2> indices,
                                                dsa::host_view<float, 3> out, dsa::host_view<float, 2> lse,
                                                const dsa::sparse_mla_config& cfg) const {
  staging::run_staged("sparse_mla_attention", backend(), [&](const auto& be) {
    const auto dq = staging::stage_in(q, stream_);
    const auto dkv = staging::stage_in(kv, stream_);
    const auto di = staging::stage_in(indices, stream_);
    const auto dout = staging::stage_out(out, stream_);
    const auto dlse = staging::stage_out(lse, stream_);
    if (cfg.num_splits > 1) {
      const auto ws = staging::workspace(
          dsa::sparse_mla_attention_workspace_size(q.extent(0), q.extent(1), cfg.d_v, cfg.num_splits), stream_);
      dsa::sparse_mla_attention(be, dq.view, dkv.view, di.view, dout.view, dlse.view, cfg, ws.view);
    } else {
      dsa::sparse_mla_attention(be, dq.view, dkv.view, di.view, dout.view, dlse.view, cfg);
    }
    staging::unstage(out, dout, stream_);
    staging::unstage(lse, dlse, stream_);
  });
}

inline void cuda_executor::indexer_kl_loss_dense(dsa::host_view<const float, 3> attn,
                                                 dsa::host_view<const float, 2> index_scores,
                                                 dsa::host_view<const std::int32_t, 2> ranges,
                                                 dsa::host_view<float, 1> loss,
                                                 dsa::host_view<float, 2> grad_index) const {
  staging::run_staged("indexer_kl_loss_dense", backend(), [&](const auto& be) {
    const auto da = staging::stage_in(attn, stream_);
    const auto di = staging::stage_in(index_scores, stream_);
    const auto dr = staging::stage_in(ranges, stream_);
    const auto dloss = staging::stage_out(loss, stream_);
    const auto dgrad = staging::stage_out(grad_index, stream_);
    const auto ws = staging::workspace(dsa::indexer_kl_loss_dense_workspace_size(attn.extent(0)), stream_);
    dsa::indexer_kl_loss_dense(be, da.view, di.view, dr.view, dloss.view, dgrad.view, ws.view);
    staging::unstage(loss, dloss, stream_);
    staging::unstage(grad_index, dgrad, stream_);
  });
}

inline void cuda_executor::indexer_kl_loss_sparse(dsa::host_view<const float, 3> attn,
                                                  dsa::host_view<const float, 2> index_scores,
                                                  dsa::host_view<const std::int32_t, 2> topk,
                                                  dsa::host_view<float, 1> loss,
                                                 dsa::host_view<float, 2> grad_index) const {
  staging::run_staged("indexer_kl_loss_sparse", backend(), [&](const auto& be) {
    const auto da = staging::stage_in(attn, stream_);
    const auto di = staging::stage_in(index_scores, stream_);
    const auto dt = staging::stage_in(topk, stream_);
    const auto dloss = staging::stage_out(loss, stream_);
    const auto dgrad = staging::stage_out(grad_index, stream_);
    const auto ws =
        staging::workspace(dsa::indexer_kl_loss_sparse_workspace_size(attn.extent(0), topk.extent(1)), stream_);
    dsa::indexer_kl_loss_sparse(be, da.view, di.view, dt.view, dloss.view, dgrad.view, ws.view);
    staging::unstage(loss, dloss, stream_);
    staging::unstage(grad_index, dgrad, stream_);
  });
}

inline model_case_result run_model_case_cuda(const std::filesystem::path& dir, dsa::cuda_linear_path linear,
                                             dsa::cuda_kernel_path kernels, bool keep_outputs) {
  try {
    // The default stream; the transformer owns a cuBLAS handle (blas == nullptr; none with the
    // SIMT linear) and returns from each forward() once the logits are on the host, so nothing is
    // left in flight here.
    return run_model_case(dsa::cuda_backend{nullptr, nullptr, linear, kernels}, dir,
                          dsa::model::forward_options{}.max_chunk, keep_outputs);
  } catch (const dsa::cuda_error& e) {
    throw backend_error(std::string("model::transformer on the CUDA backend: ") + e.what());
  }
}

}  // namespace dsa_validate
