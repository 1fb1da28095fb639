// The CUDA executor of dsa_validate (declared in validate/cuda_cases.hpp): each member stages the
// case's host inputs into device buffers, calls the public op with a dsa::cuda_backend and copies
// the outputs back. Compiled by nvcc because the op implementations launch kernels; it holds no
// comparison logic (primitive_cases.hpp has it, for every backend).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>

#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/fp8_quant.cuh"
#include "dsa/cuda/hadamard.cuh"
#include "dsa/cuda/indexer_kl_loss.cuh"
#include "dsa/cuda/lightning_indexer.cuh"
#include "dsa/cuda/memory.cuh"
#include "dsa/cuda/sparse_mla_attention.cuh"
#include "dsa/cuda/topk.cuh"
#include "dsa/ops/fp8_quant.hpp"
#include "dsa/ops/hadamard.hpp"
#include "dsa/ops/indexer_kl_loss.hpp"
#include "dsa/ops/lightning_indexer.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"
#include "dsa/ops/topk.hpp"
#include "validate/cuda_cases.hpp"
#include "validate/executor.hpp"

namespace dsa_validate {
namespace {

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
  if (!d.buffer.empty()) DSA_CUDA_CHECK(cudaMemsetAsync(d.buffer.data(), output_poison_byte, d.buffer.size_bytes(), stream));
  return d;
}

/// A workspace of `bytes` bytes (cudaMalloc: 256-byte aligned, beyond the ops' 16). Its contents
/// start as output_poison_byte too: an op that reads scratch it did not write gets garbage.
inline device_tensor<std::byte, 1> workspace(dsa::index_t bytes, cudaStream_t stream) {
  device_tensor<std::byte, 1> d{dsa::device_buffer<std::byte>(bytes), {}};
  d.view = d.buffer.view();
  if (!d.buffer.empty()) DSA_CUDA_CHECK(cudaMemsetAsync(d.buffer.data(), output_poison_byte, d.buffer.size_bytes(), stream));
  return d;
}

/// Enqueues the copy of output `d` back into `h`.
template <class T, std::size_t R>
void unstage(dsa::host_view<T, R> h, const device_tensor<T, R>& d, cudaStream_t stream) {
  dsa::copy_to_host(h, dsa::device_view<const T, R>(d.view), stream);
}

/// Runs `body(be)` (stage, op, unstage) on cuda_backend{stream}, then waits for the stream so
/// that the host outputs are complete and an asynchronous kernel fault surfaces here, attributed
/// to `op` (the body's device buffers are freed when it returns; a fault that cudaFree meets is
/// sticky and reported by the synchronise). CUDA runtime failures become backend_error; the
/// front-ends' dsa::error (a shape the op rejects) passes through.
template <class Body>
void run_staged(const char* op, cudaStream_t stream, Body&& body) {
  try {
    std::forward<Body>(body)(dsa::cuda_backend{stream});
    DSA_CUDA_CHECK(cudaStreamSynchronize(stream));
  } catch (const dsa::cuda_error& e) {
    throw backend_error(std::string(op) + " on the CUDA backend: " + e.what());
  }
}

}  // namespace

std::string cuda_device_description() {
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

void cuda_executor::hadamard_transform(dsa::host_view<const dsa::bf16, 2> x, dsa::host_view<dsa::bf16, 2> y,
                                       float scale) const {
  run_staged("hadamard_transform", stream_, [&](const auto& be) {
    const auto dx = stage_in(x, stream_);
    const auto dy = stage_out(y, stream_);
    dsa::hadamard_transform(be, dx.view, dy.view, scale);
    unstage(y, dy, stream_);
  });
}

void cuda_executor::hadamard_transform(dsa::host_view<const float, 2> x, dsa::host_view<float, 2> y,
                                       float scale) const {
  run_staged("hadamard_transform", stream_, [&](const auto& be) {
    const auto dx = stage_in(x, stream_);
    const auto dy = stage_out(y, stream_);
    dsa::hadamard_transform(be, dx.view, dy.view, scale);
    unstage(y, dy, stream_);
  });
}

void cuda_executor::act_quant(dsa::host_view<const dsa::bf16, 2> x, dsa::host_view<dsa::fp8_e4m3, 2> q,
                              dsa::host_view<float, 2> s, const dsa::act_quant_config& cfg) const {
  run_staged("act_quant", stream_, [&](const auto& be) {
    const auto dx = stage_in(x, stream_);
    const auto dq = stage_out(q, stream_);
    const auto ds = stage_out(s, stream_);
    dsa::act_quant(be, dsa::device_view<const dsa::bf16, 2>(dx.view), dq.view, ds.view, cfg);
    unstage(q, dq, stream_);
    unstage(s, ds, stream_);
  });
}

void cuda_executor::weight_quant(dsa::host_view<const float, 2> w, dsa::host_view<dsa::fp8_e4m3, 2> q,
                                 dsa::host_view<float, 2> s) const {
  run_staged("weight_quant", stream_, [&](const auto& be) {
    const auto dw = stage_in(w, stream_);
    const auto dq = stage_out(q, stream_);
    const auto ds = stage_out(s, stream_);
    dsa::weight_quant(be, dsa::device_view<const float, 2>(dw.view), dq.view, ds.view);
    unstage(q, dq, stream_);
    unstage(s, ds, stream_);
  });
}

void cuda_executor::lightning_indexer_scores(dsa::host_view<const dsa::fp8_e4m3, 3> q,
                                             dsa::host_view<const float, 2> w,
                                             dsa::host_view<const dsa::fp8_e4m3, 2> k,
                                             dsa::host_view<const float, 1> k_scale,
                                             dsa::host_view<const std::int32_t, 2> ranges,
                                             dsa::host_view<float, 2> scores) const {
  run_staged("lightning_indexer_scores", stream_, [&](const auto& be) {
    const auto dq = stage_in(q, stream_);
    const auto dw = stage_in(w, stream_);
    const auto dk = stage_in(k, stream_);
    const auto dks = stage_in(k_scale, stream_);
    const auto dr = stage_in(ranges, stream_);
    const auto dscores = stage_out(scores, stream_);
    dsa::lightning_indexer_scores(be, dq.view, dw.view, dk.view, dks.view, dr.view,
                                  dscores.view);
    unstage(scores, dscores, stream_);
  });
}

void cuda_executor::topk_indices(dsa::host_view<const float, 2> scores, dsa::host_view<const std::int32_t, 2> ranges,
                                 dsa::index_t k, dsa::host_view<std::int32_t, 2> indices) const {
  run_staged("topk_indices", stream_, [&](const auto& be) {
    const auto ds = stage_in(scores, stream_);
    const auto dr = stage_in(ranges, stream_);
    const auto di = stage_out(indices, stream_);
    dsa::topk_indices(be, ds.view, dr.view, k, di.view);
    unstage(indices, di, stream_);
  });
}

dsa::index_t cuda_executor::sparse_mla_num_splits(dsa::index_t s, dsa::index_t h, dsa::index_t k) const {
  int device = 0, sm_count = 0;
  try {
    DSA_CUDA_CHECK(cudaGetDevice(&device));
    DSA_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  } catch (const dsa::cuda_error& e) {
    throw backend_error(std::string("sparse_mla_attention_num_splits on the CUDA backend: ") + e.what());
  }
  return dsa::sparse_mla_attention_num_splits(s, h, k, sm_count);
}

void cuda_executor::sparse_mla_attention(dsa::host_view<const dsa::bf16, 3> q, dsa::host_view<const dsa::bf16, 2> kv,
                                         dsa::host_view<const std::int32_t, 2> indices, dsa::host_view<float, 3> out,
                                         dsa::host_view<float, 2> lse, const dsa::sparse_mla_config& cfg) const {
  run_staged("sparse_mla_attention", stream_, [&](const auto& be) {
    const auto dq = stage_in(q, stream_);
    const auto dkv = stage_in(kv, stream_);
    const auto di = stage_in(indices, stream_);
    const auto dout = stage_out(out, stream_);
    const auto dlse = stage_out(lse, stream_);
    if (cfg.num_splits > 1) {
      const auto ws = workspace(dsa::sparse_mla_attention_workspace_size(q.extent(0), q.extent(1), cfg.d_v,
                                                                         cfg.num_splits),
                                stream_);
      dsa::sparse_mla_attention(be, dq.view, dkv.view, di.view, dout.view, dlse.view, cfg, ws.view);
    } else {
      dsa::sparse_mla_attention(be, dq.view, dkv.view, di.view, dout.view, dlse.view, cfg);
    }
    unstage(out, dout, stream_);
    unstage(lse, dlse, stream_);
  });
}

void cuda_executor::indexer_kl_loss_dense(dsa::host_view<const float, 3> attn,
                                          dsa::host_view<const float, 2> index_scores,
                                          dsa::host_view<const std::int32_t, 2> ranges, dsa::host_view<float, 1> loss,
                                          dsa::host_view<float, 2> grad_index) const {
  run_staged("indexer_kl_loss_dense", stream_, [&](const auto& be) {
    const auto da = stage_in(attn, stream_);
    const auto di = stage_in(index_scores, stream_);
    const auto dr = stage_in(ranges, stream_);
    const auto dloss = stage_out(loss, stream_);
    const auto dgrad = stage_out(grad_index, stream_);
    const auto ws = workspace(dsa::indexer_kl_loss_dense_workspace_size(attn.extent(0)), stream_);
    dsa::indexer_kl_loss_dense(be, da.view, di.view, dr.view, dloss.view, dgrad.view, ws.view);
    unstage(loss, dloss, stream_);
    unstage(grad_index, dgrad, stream_);
  });
}

void cuda_executor::indexer_kl_loss_sparse(dsa::host_view<const float, 3> attn,
                                           dsa::host_view<const float, 2> index_scores,
                                           dsa::host_view<const std::int32_t, 2> topk, dsa::host_view<float, 1> loss,
                                           dsa::host_view<float, 2> grad_index) const {
  run_staged("indexer_kl_loss_sparse", stream_, [&](const auto& be) {
    const auto da = stage_in(attn, stream_);
    const auto di = stage_in(index_scores, stream_);
    const auto dt = stage_in(topk, stream_);
    const auto dloss = stage_out(loss, stream_);
    const auto dgrad = stage_out(grad_index, stream_);
    const auto ws = workspace(dsa::indexer_kl_loss_sparse_workspace_size(attn.extent(0), topk.extent(1)), stream_);
    dsa::indexer_kl_loss_sparse(be, da.view, di.view, dt.view, dloss.view, dgrad.view, ws.view);
    unstage(loss, dloss, stream_);
    unstage(grad_index, dgrad, stream_);
  });
}

}  // namespace dsa_validate
