// Byte formats of the V3.2 KV caches, and accessors that read one field of a row in place so
// that attention and indexer kernels can decode rows without a materialised copy.
//
// MLA FP8 row (FlashMLA's V3.2 format), 656 bytes per token:
//   [0, 512)    512 e4m3 codes of the latent vector c
//   [512, 528)  4 fp32 scales, one per 128 latent values, little-endian; powers of two computed
//               exactly as act_quant with scale_format::ue8m0 and group 128 on the bf16 latent
//   [528, 656)  64 bf16 RoPE values k_pe, little-endian, copied bit for bit (not quantized)
// Indexer key row, 132 bytes per token:
//   [0, 128)    128 e4m3 codes of the key
//   [128, 132)  its fp32 scale, little-endian
// Multi-byte fields are read and written with memcpy, so rows need no alignment. Every dsa
// target (x86-64, AArch64, NVIDIA GPUs) is little-endian; the static_assert keeps it honest.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/fp8_quant.hpp"

DSA_NAMESPACE_BEGIN

static_assert(std::endian::native == std::endian::little, "dsa: the KV-cache byte formats assume a little-endian host");

/// Latent width of the MLA cache (V3.2: kv_lora_rank).
inline constexpr index_t kv_latent_dim = 512;
/// RoPE width of the MLA cache.
inline constexpr index_t kv_rope_dim = 64;
/// Values per token of the unpacked MLA cache: latent then RoPE.
inline constexpr index_t kv_dim = kv_latent_dim + kv_rope_dim;
/// Latent values per scale of the FP8 row.
inline constexpr index_t kv_fp8_group = 128;
/// Scales per FP8 row.
inline constexpr index_t kv_fp8_num_scales = kv_latent_dim / kv_fp8_group;
/// Byte offset of the fp32 scales in an FP8 row.
inline constexpr index_t kv_fp8_scale_offset = kv_latent_dim;
/// Byte offset of the bf16 RoPE values in an FP8 row.
inline constexpr index_t kv_fp8_rope_offset = kv_fp8_scale_offset + 4 * kv_fp8_num_scales;
/// Bytes per token of the FP8 MLA cache.
inline constexpr index_t kv_fp8_row_bytes = kv_fp8_rope_offset + 2 * kv_rope_dim;
static_assert(kv_dim == 576 && kv_fp8_rope_offset == 528 && kv_fp8_row_bytes == 656);

/// Key width of the indexer cache.
inline constexpr index_t indexer_cache_dim = 128;
/// Byte offset of the key scale in an indexer cache row.
inline constexpr index_t indexer_cache_scale_offset = indexer_cache_dim;
/// Bytes per token of the indexer key cache.
inline constexpr index_t indexer_cache_row_bytes = indexer_cache_scale_offset + 4;
static_assert(indexer_cache_row_bytes == 132);

// ---- MLA FP8 row -------------------------------------------------------------------------

/// e4m3 code of latent value j (0..511).
DSA_HOST_DEVICE DSA_FORCEINLINE fp8_e4m3 kv_fp8_row_code(const std::uint8_t* row, index_t j) {
  return fp8_e4m3::from_bits(row[j]);
}

/// Scale of latent group g (0..3).
DSA_HOST_DEVICE DSA_FORCEINLINE float kv_fp8_row_scale(const std::uint8_t* row, index_t g) {
  float s;
  std::memcpy(&s, row + kv_fp8_scale_offset + 4 * g, sizeof s);
  return s;
}

/// Latent value j (0..511) in fp32: code times its group's scale (exact for power-of-two scales
/// unless the product leaves fp32's normal range).
DSA_HOST_DEVICE DSA_FORCEINLINE float kv_fp8_row_latent(const std::uint8_t* row, index_t j) {
  return dequantize_e4m3(kv_fp8_row_code(row, j), kv_fp8_row_scale(row, j / kv_fp8_group));
}

/// RoPE value j (0..63), bit for bit as packed.
DSA_HOST_DEVICE DSA_FORCEINLINE bf16 kv_fp8_row_rope(const std::uint8_t* row, index_t j) {
  std::uint16_t b;
  std::memcpy(&b, row + kv_fp8_rope_offset + 2 * j, sizeof b);
  return bf16::from_bits(b);
}

/// Packs one token kv[0, 576) (bf16 latent then RoPE) into a 656-byte row.
DSA_HOST_DEVICE inline void kv_fp8_row_encode(const bf16* kv, std::uint8_t* row) {
  for (index_t g = 0; g < kv_fp8_num_scales; ++g) {
    const bf16* x = kv + g * kv_fp8_group;
    const float s = act_quant_scale(abs_max(x, kv_fp8_group), scale_format::ue8m0);
    for (index_t j = 0; j < kv_fp8_group; ++j) row[g * kv_fp8_group + j] = quantize_e4m3(x[j].to_float(), s).bits;
    std::memcpy(row + kv_fp8_scale_offset + 4 * g, &s, sizeof s);
  }
  std::memcpy(row + kv_fp8_rope_offset, kv + kv_latent_dim, 2 * kv_rope_dim);
}

/// Unpacks a 656-byte row into kv[0, 576): latent = bf16(code * scale), RoPE copied.
DSA_HOST_DEVICE inline void kv_fp8_row_decode(const std::uint8_t* row, bf16* kv) {
  for (index_t g = 0; g < kv_fp8_num_scales; ++g) {
    const float s = kv_fp8_row_scale(row, g);
    for (index_t j = g * kv_fp8_group; j < (g + 1) * kv_fp8_group; ++j) {
      kv[j] = bf16(dequantize_e4m3(kv_fp8_row_code(row, j), s));
    }
  }
  std::memcpy(kv + kv_latent_dim, row + kv_fp8_rope_offset, 2 * kv_rope_dim);
}

// ---- indexer key row ---------------------------------------------------------------------

/// e4m3 code of key value j (0..127).
DSA_HOST_DEVICE DSA_FORCEINLINE fp8_e4m3 indexer_cache_row_code(const std::uint8_t* row, index_t j) {
  return fp8_e4m3::from_bits(row[j]);
}

/// The key's fp32 scale.
DSA_HOST_DEVICE DSA_FORCEINLINE float indexer_cache_row_scale(const std::uint8_t* row) {
  float s;
  std::memcpy(&s, row + indexer_cache_scale_offset, sizeof s);
  return s;
}

/// Packs 128 codes and a scale into a 132-byte row (bit for bit).
DSA_HOST_DEVICE inline void indexer_cache_row_encode(const fp8_e4m3* k, float scale, std::uint8_t* row) {
  for (index_t j = 0; j < indexer_cache_dim; ++j) row[j] = k[j].bits;
  std::memcpy(row + indexer_cache_scale_offset, &scale, sizeof scale);
}

/// Unpacks a 132-byte row into 128 codes; returns the scale.
DSA_HOST_DEVICE inline float indexer_cache_row_decode(const std::uint8_t* row, fp8_e4m3* k) {
  for (index_t j = 0; j < indexer_cache_dim; ++j) k[j] = indexer_cache_row_code(row, j);
  return indexer_cache_row_scale(row);
}

DSA_NAMESPACE_END
