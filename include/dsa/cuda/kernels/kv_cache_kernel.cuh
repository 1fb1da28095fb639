// Kernels of the KV-cache row codecs on the CUDA backend: the 656-byte FP8 MLA rows and the
// 132-byte indexer key rows (formats in dsa/numerics/kv_cache.hpp).
//
// Bytes are bit-identical to the CPU backend: the latent groups use act_quant's numerics
// (integer amax, act_quant_scale, quantize_e4m3) and the RoPE values and indexer rows are copied
// bit for bit. Destination slots come from device memory, which the front-end cannot read: a
// slot outside [0, rows) skips its token here instead of writing out of bounds.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/arch/warp.cuh"
#include "dsa/numerics/fp8_quant.hpp"
#include "dsa/numerics/kv_cache.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

/// Token -> cache row map of the pack kernels: row i without slots, else slots[i]; -1 skips.
struct cache_slots {
  const std::int32_t* slots = nullptr;  // null: identity
  index_t slot_stride = 1;
  index_t cache_rows = 0;

  DSA_DEVICE DSA_FORCEINLINE index_t destination(index_t i) const {
    if (slots == nullptr) return i;
    const index_t s = slots[i * slot_stride];
    return (s >= 0 && s < cache_rows) ? s : -1;
  }
};

struct kv_cache_fp8_pack_params {
  const bf16* kv = nullptr;
  index_t kv_row_stride = 0;
  std::uint8_t* cache = nullptr;
  index_t cache_row_stride = 0;
  index_t tokens = 0;
  cache_slots map{};
};

/// Four warps per token, one per 128-value latent group (lane l owns values 4l .. 4l + 3);
/// warp 0 also copies the 128 RoPE bytes.
template <int Threads>
__global__ void __launch_bounds__(Threads) kv_cache_fp8_pack_kernel(const kv_cache_fp8_pack_params p) {
  static_assert(Threads % 128 == 0);
  constexpr int tokens_per_block = Threads / 128;
  constexpr int values_per_lane = static_cast<int>(kv_fp8_group) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int group = (static_cast<int>(threadIdx.x) / 32) % 4;
  for (index_t t = static_cast<index_t>(blockIdx.x) * tokens_per_block + threadIdx.x / 128; t < p.tokens;
       t += static_cast<index_t>(gridDim.x) * tokens_per_block) {
    const index_t dst = p.map.destination(t);
    if (dst < 0) continue;  // the same for the whole warp: no shuffle below is left half-done
    const bf16* x = p.kv + t * p.kv_row_stride + group * kv_fp8_group + values_per_lane * lane;
    std::uint8_t* row = p.cache + dst * p.cache_row_stride;
    bf16 v[values_per_lane];
    std::uint32_t m = 0;
#pragma unroll
    for (int j = 0; j < values_per_lane; ++j) {
      v[j] = x[j];
      const std::uint32_t a = abs_bits(v[j]);
      m = a > m ? a : m;
    }
    m = cuda_arch::warp_reduce_max(m);
    const float s = act_quant_scale(detail::bits_float(m), scale_format::ue8m0);
    std::uint8_t* codes = row + group * kv_fp8_group + values_per_lane * lane;
#pragma unroll
    for (int j = 0; j < values_per_lane; ++j) codes[j] = quantize_e4m3(v[j].to_float(), s).bits;
    if (lane == 0) std::memcpy(row + kv_fp8_scale_offset + 4 * group, &s, sizeof s);
    if (group == 0) {
      const std::uint8_t* rope = reinterpret_cast<const std::uint8_t*>(p.kv + t * p.kv_row_stride + kv_latent_dim);
      for (int b = lane; b < 2 * kv_rope_dim; b += 32) row[kv_fp8_rope_offset + b] = rope[b];
    }
  }
}

struct kv_cache_fp8_unpack_params {
  const std::uint8_t* cache = nullptr;
  index_t cache_row_stride = 0;
  bf16* kv = nullptr;
  index_t kv_row_stride = 0;
  index_t tokens = 0;
};

/// One block per token (grid-stride): thread j writes value j of the 576 (latent then RoPE).
template <int Threads>
__global__ void __launch_bounds__(Threads) kv_cache_fp8_unpack_kernel(const kv_cache_fp8_unpack_params p) {
  for (index_t t = blockIdx.x; t < p.tokens; t += gridDim.x) {
    const std::uint8_t* row = p.cache + t * p.cache_row_stride;
    bf16* out = p.kv + t * p.kv_row_stride;
    for (index_t j = threadIdx.x; j < kv_dim; j += Threads) {
      out[j] = j < kv_latent_dim ? bf16(kv_fp8_row_latent(row, j)) : kv_fp8_row_rope(row, j - kv_latent_dim);
    }
  }
}

struct indexer_cache_pack_params {
  const fp8_e4m3* k = nullptr;
  index_t k_row_stride = 0;
  const float* k_scale = nullptr;
  index_t k_scale_stride = 1;
  std::uint8_t* cache = nullptr;
  index_t cache_row_stride = 0;
  index_t tokens = 0;
  cache_slots map{};
};

/// One warp per token: the 128 code bytes (four per lane), lane 0 the scale.
template <int Threads>
__global__ void __launch_bounds__(Threads) indexer_cache_pack_kernel(const indexer_cache_pack_params p) {
  constexpr int warps = Threads / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (index_t t = static_cast<index_t>(blockIdx.x) * warps + threadIdx.x / 32; t < p.tokens;
       t += static_cast<index_t>(gridDim.x) * warps) {
    const index_t dst = p.map.destination(t);
    if (dst < 0) continue;
    const fp8_e4m3* k = p.k + t * p.k_row_stride;
    std::uint8_t* row = p.cache + dst * p.cache_row_stride;
    for (int j = lane; j < indexer_cache_dim; j += 32) row[j] = k[j].bits;
    if (lane == 0) {
      const float s = p.k_scale[t * p.k_scale_stride];
      std::memcpy(row + indexer_cache_scale_offset, &s, sizeof s);
    }
  }
}

struct indexer_cache_unpack_params {
  const std::uint8_t* cache = nullptr;
  index_t cache_row_stride = 0;
  fp8_e4m3* k = nullptr;
  index_t k_row_stride = 0;
  float* k_scale = nullptr;
  index_t k_scale_stride = 1;
  index_t tokens = 0;
};

/// One warp per token.
template <int Threads>
__global__ void __launch_bounds__(Threads) indexer_cache_unpack_kernel(const indexer_cache_unpack_params p) {
  constexpr int warps = Threads / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (index_t t = static_cast<index_t>(blockIdx.x) * warps + threadIdx.x / 32; t < p.tokens;
       t += static_cast<index_t>(gridDim.x) * warps) {
    const std::uint8_t* row = p.cache + t * p.cache_row_stride;
    fp8_e4m3* k = p.k + t * p.k_row_stride;
    for (int j = lane; j < indexer_cache_dim; j += 32) k[j] = indexer_cache_row_code(row, j);
    if (lane == 0) p.k_scale[t * p.k_scale_stride] = indexer_cache_row_scale(row);
  }
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
