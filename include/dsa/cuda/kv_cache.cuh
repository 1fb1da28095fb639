// CUDA backend of the KV-cache pack/unpack ops (kernels: kernels/kv_cache_kernel.cuh). Bytes are
// bit-identical to the CPU backend. Slots live in device memory, so the front-end cannot check
// them: here a slot outside [0, cache rows) skips its token (never an out-of-bounds write), and
// two tokens with the same slot leave the row's contents unspecified (their writes interleave).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/kernels/kv_cache_kernel.cuh"
#include "dsa/cuda/launch.cuh"
#include "dsa/ops/kv_cache.hpp"

DSA_NAMESPACE_BEGIN

namespace cuda_detail {

inline constexpr int kv_cache_threads = 256;

inline cuda_kernels::cache_slots make_cache_slots(tensor_view<const std::int32_t, 1, device_space> slots,
                                                  index_t cache_rows) {
  cuda_kernels::cache_slots m;
  m.slots = slots.is_absent() ? nullptr : slots.data_handle();
  m.slot_stride = slots.stride(0);
  m.cache_rows = cache_rows;
  return m;
}

}  // namespace cuda_detail

template <>
struct op_impl<cuda_backend, kv_cache_fp8_pack_op> {
  static void run(const cuda_backend& be, tensor_view<const bf16, 2, device_space> kv,
                  tensor_view<std::uint8_t, 2, device_space> cache, tensor_view<const std::int32_t, 1, device_space> slots) {
    constexpr int threads = cuda_detail::kv_cache_threads;
    cuda_kernels::kv_cache_fp8_pack_params p;
    p.kv = kv.data_handle();
    p.kv_row_stride = kv.stride(0);
    p.cache = cache.data_handle();
    p.cache_row_stride = cache.stride(0);
    p.tokens = kv.extent(0);
    p.map = cuda_detail::make_cache_slots(slots, cache.extent(0));
    cuda_kernels::kv_cache_fp8_pack_kernel<threads>
        <<<cuda_detail::grid_blocks(p.tokens, threads / 128), threads, 0, be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  }
};

template <>
struct op_impl<cuda_backend, kv_cache_fp8_unpack_op> {
  static void run(const cuda_backend& be, tensor_view<const std::uint8_t, 2, device_space> cache,
                  tensor_view<bf16, 2, device_space> kv) {
    constexpr int threads = cuda_detail::kv_cache_threads;
    cuda_kernels::kv_cache_fp8_unpack_params p;
    p.cache = cache.data_handle();
    p.cache_row_stride = cache.stride(0);
    p.kv = kv.data_handle();
    p.kv_row_stride = kv.stride(0);
    p.tokens = cache.extent(0);
    cuda_kernels::kv_cache_fp8_unpack_kernel<threads>
        <<<cuda_detail::grid_blocks(p.tokens, 1), threads, 0, be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  }
};

template <>
struct op_impl<cuda_backend, indexer_cache_pack_op> {
  static void run(const cuda_backend& be, tensor_view<const fp8_e4m3, 2, device_space> k,
                  tensor_view<const float, 1, device_space> k_scale, tensor_view<std::uint8_t, 2, device_space> cache,
                  tensor_view<const std::int32_t, 1, device_space> slots) {
    constexpr int threads = cuda_detail::kv_cache_threads;
    cuda_kernels::indexer_cache_pack_params p;
    p.k = k.data_handle();
    p.k_row_stride = k.stride(0);
    p.k_scale = k_scale.data_handle();
    p.k_scale_stride = k_scale.stride(0);
    p.cache = cache.data_handle();
    p.cache_row_stride = cache.stride(0);
    p.tokens = k.extent(0);
    p.map = cuda_detail::make_cache_slots(slots, cache.extent(0));
    cuda_kernels::indexer_cache_pack_kernel<threads>
        <<<cuda_detail::grid_blocks(p.tokens, threads / 32), threads, 0, be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  }
};

template <>
struct op_impl<cuda_backend, indexer_cache_unpack_op> {
  static void run(const cuda_backend& be, tensor_view<const std::uint8_t, 2, device_space> cache,
                  tensor_view<fp8_e4m3, 2, device_space> k, tensor_view<float, 1, device_space> k_scale) {
    constexpr int threads = cuda_detail::kv_cache_threads;
    cuda_kernels::indexer_cache_unpack_params p;
    p.cache = cache.data_handle();
    p.cache_row_stride = cache.stride(0);
    p.k = k.data_handle();
    p.k_row_stride = k.stride(0);
    p.k_scale = k_scale.data_handle();
    p.k_scale_stride = k_scale.stride(0);
    p.tokens = cache.extent(0);
    cuda_kernels::indexer_cache_unpack_kernel<threads>
        <<<cuda_detail::grid_blocks(p.tokens, threads / 32), threads, 0, be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CUDA_OP_INSTANCES(DSA_KV_CACHE_INSTANCES)
