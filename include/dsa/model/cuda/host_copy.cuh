// Small host arrays into device memory without waiting: the bytes travel as kernel parameters.
//
// A forward call sends a few index arrays to the device (positions, token ids, the indexer's
// ranges, the non-finite watch's segment map). cudaMemcpyAsync from pageable memory cannot be
// captured in a CUDA graph, and the host array would have to outlive the copy unless the call
// waits for it, which is what layer_memory::upload does. A kernel's parameters are copied when it
// is launched (into the graph's node when captured), so the host array may go at once and nothing
// waits. Each launch carries host_copy_payload_bytes (its parameters stay under the 4 KB every
// architecture takes).
//
// nvcc only: layer_memory<cuda_backend>::upload_async (dsa/model/cuda/layer_memory.hpp) declares
// enqueue_host_copy; dsa/model/cuda/transformer.cuh includes this definition, and
// instances/cuda_transformer.cu instantiates it for the index types. Part of the dsa::model and
// dsa::cuda targets.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>
#include <span>

#include "dsa/core/config.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/model/cuda/layer_memory.hpp"

DSA_NAMESPACE_BEGIN
namespace model {
namespace detail {

/// Bytes one launch carries: with the destination pointer and the count, under 4 KB of parameters.
inline constexpr int host_copy_payload_bytes = 3968;

struct host_copy_payload {
  unsigned char bytes[host_copy_payload_bytes];
};

// (A template, as every kernel of a header that several translation units may include.)
template <int Threads>
__global__ void __launch_bounds__(Threads) host_copy_kernel(unsigned char* dst, int n, const host_copy_payload p) {
  for (int i = static_cast<int>(threadIdx.x); i < n; i += Threads) dst[i] = p.bytes[i];
}

template <class T>
void enqueue_host_copy(T* dst, std::span<const T> src, cudaStream_t stream) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(src.data());
  auto* out = reinterpret_cast<unsigned char*>(dst);
  const std::size_t total = src.size_bytes();
  constexpr int threads = 256;
  for (std::size_t at = 0; at < total; at += host_copy_payload_bytes) {
    const std::size_t n = total - at < host_copy_payload_bytes ? total - at : host_copy_payload_bytes;
    host_copy_payload p{};  // zeros past n: a captured node's parameters are all defined
    std::memcpy(p.bytes, bytes + at, n);
    host_copy_kernel<threads><<<1, threads, 0, stream>>>(out + at, static_cast<int>(n), p);
    DSA_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace detail
}  // namespace model
DSA_NAMESPACE_END
