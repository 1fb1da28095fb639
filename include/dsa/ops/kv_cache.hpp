// Packing tokens into the V3.2 KV caches and back (byte formats in dsa/numerics/kv_cache.hpp):
// the 656-byte FP8 MLA rows of FlashMLA and the 132-byte indexer key rows.
//
// Scatter by slot: with `slots` absent, token i goes to cache row i; otherwise to row slots[i],
// and slots[i] = -1 skips the token. Any other slot outside [0, cache rows), and two tokens
// writing the same slot, are errors (checked here for host memory; device kernels skip
// out-of-range slots, and duplicate slots there leave the row unspecified: writes interleave).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "dsa/core/aliasing.hpp"
#include "dsa/core/backend.hpp"
#include "dsa/core/dispatch.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/op_instances.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/kv_cache.hpp"

DSA_NAMESPACE_BEGIN

struct kv_cache_fp8_pack_op {};
struct kv_cache_fp8_unpack_op {};
struct indexer_cache_pack_op {};
struct indexer_cache_unpack_op {};

namespace detail {

// A [rows, row_bytes] byte matrix whose rows do not overlap one another.
template <class V>
void check_row_matrix(std::string_view op, std::string_view name, const V& v, index_t width, std::string_view what) {
  check_valid(op, name, v);
  check_extent(op, name, v, 1, width, what);
  check_inner_contiguous(op, name, v);
  if (v.extent(0) > 1 && v.stride(0) < width && v.stride(0) > -width) {
    fail(op, std::string(name) + ".stride(0)", v.stride(0),
         "|stride| >= " + std::to_string(width) + " (rows must not overlap)");
  }
}

// The slot map of a pack: absent, or [n] with -1 or a distinct row of the cache per token.
template <class Space>
void check_slots(std::string_view op, const tensor_view<const std::int32_t, 1, Space>& slots, index_t n,
                 index_t cache_rows) {
  if (slots.is_absent()) {
    if (n > cache_rows) {
      fail(op, "cache.extent(0)", cache_rows,
           ">= " + std::to_string(n) + " (without slots, token i goes to cache row i)");
    }
    return;
  }
  check_valid(op, "slots", slots);
  check_extent(op, "slots", slots, 0, n, "one slot per token");
  check_inner_contiguous(op, "slots", slots);
  if constexpr (std::is_same_v<Space, host_space>) {
    std::vector<std::pair<std::int32_t, index_t>> used;
    used.reserve(static_cast<std::size_t>(n));
    for (index_t i = 0; i < n; ++i) {
      const std::int32_t s = slots(i);
      if (s == -1) continue;
      if (s < 0 || s >= cache_rows) {
        fail(op, "slots(" + std::to_string(i) + ")", s,
             "-1 (skip) or a cache row in [0, " + std::to_string(cache_rows) + ")");
      }
      used.emplace_back(s, i);
    }
    std::sort(used.begin(), used.end());
    for (std::size_t k = 1; k < used.size(); ++k) {
      if (used[k].first == used[k - 1].first) {
        fail(op, "slots(" + std::to_string(used[k].second) + ")", used[k].first,
             "distinct slots (token " + std::to_string(used[k - 1].second) + " writes the same row)");
      }
    }
  }
}

}  // namespace detail

/// Packs tokens kv [n, 576] (bf16: 512 latent then 64 RoPE) into FP8 rows of cache [rows, 656]:
/// the latent quantized to e4m3 in 4 groups of 128 with power-of-two (ue8m0) scales exactly as
/// act_quant, the RoPE copied. See the file comment for `slots`.
template <backend B>
void kv_cache_fp8_pack(const B& be, in_view<B, bf16, 2> kv, out_view<B, std::uint8_t, 2> cache,
                       in_view<B, std::int32_t, 1> slots = {}) {
  constexpr std::string_view op = "kv_cache_fp8_pack";
  detail::check_row_matrix(op, "kv", kv, kv_dim, "512 latent + 64 RoPE values");
  detail::check_row_matrix(op, "cache", cache, kv_fp8_row_bytes, "bytes per FP8 row");
  detail::check_slots(op, slots, kv.extent(0), cache.extent(0));
  if (kv.extent(0) == 0) return;
  detail::check_disjoint_rows(op, "cache", cache);
  detail::check_no_overlap(op, "cache", cache, "kv", kv, false);
  detail::check_no_overlap(op, "cache", cache, "slots", slots, false);
  dispatch<kv_cache_fp8_pack_op>(be, kv, cache, slots);
}

/// Unpacks FP8 rows cache [n, 656] into kv [n, 576] bf16: latent = bf16(code * scale), exact
/// for the format's power-of-two scales unless the product underflows fp32's normal range;
/// RoPE bit for bit.
template <backend B>
void kv_cache_fp8_unpack(const B& be, in_view<B, std::uint8_t, 2> cache, out_view<B, bf16, 2> kv) {
  constexpr std::string_view op = "kv_cache_fp8_unpack";
  detail::check_row_matrix(op, "cache", cache, kv_fp8_row_bytes, "bytes per FP8 row");
  detail::check_row_matrix(op, "kv", kv, kv_dim, "512 latent + 64 RoPE values");
  check_extent(op, "kv", kv, 0, cache.extent(0), "cache.extent(0)");
  if (kv.extent(0) == 0) return;
  detail::check_disjoint_rows(op, "kv", kv);
  detail::check_no_overlap(op, "kv", kv, "cache", cache, false);
  dispatch<kv_cache_fp8_unpack_op>(be, cache, kv);
}

/// Packs keys k [n, 128] (e4m3 codes) and their scales k_scale [n] into rows of cache [rows, 132],
/// bit for bit. See the file comment for `slots`.
template <backend B>
void indexer_cache_pack(const B& be, in_view<B, fp8_e4m3, 2> k, in_view<B, float, 1> k_scale,
                        out_view<B, std::uint8_t, 2> cache, in_view<B, std::int32_t, 1> slots = {}) {
  constexpr std::string_view op = "indexer_cache_pack";
  detail::check_row_matrix(op, "k", k, indexer_cache_dim, "the indexer head dimension");
  check_valid(op, "k_scale", k_scale);
  check_extent(op, "k_scale", k_scale, 0, k.extent(0), "one scale per key");
  check_inner_contiguous(op, "k_scale", k_scale);
  detail::check_row_matrix(op, "cache", cache, indexer_cache_row_bytes, "bytes per indexer row");
  detail::check_slots(op, slots, k.extent(0), cache.extent(0));
  if (k.extent(0) == 0) return;
  detail::check_disjoint_rows(op, "cache", cache);
  detail::check_no_overlap(op, "cache", cache, "k", k, false);
  detail::check_no_overlap(op, "cache", cache, "k_scale", k_scale, false);
  detail::check_no_overlap(op, "cache", cache, "slots", slots, false);
  dispatch<indexer_cache_pack_op>(be, k, k_scale, cache, slots);
}

/// Unpacks rows cache [n, 132] into k [n, 128] and k_scale [n], bit for bit.
template <backend B>
void indexer_cache_unpack(const B& be, in_view<B, std::uint8_t, 2> cache, out_view<B, fp8_e4m3, 2> k,
                          out_view<B, float, 1> k_scale) {
  constexpr std::string_view op = "indexer_cache_unpack";
  detail::check_row_matrix(op, "cache", cache, indexer_cache_row_bytes, "bytes per indexer row");
  detail::check_row_matrix(op, "k", k, indexer_cache_dim, "the indexer head dimension");
  check_extent(op, "k", k, 0, cache.extent(0), "cache.extent(0)");
  check_valid(op, "k_scale", k_scale);
  check_extent(op, "k_scale", k_scale, 0, cache.extent(0), "cache.extent(0)");
  check_inner_contiguous(op, "k_scale", k_scale);
  if (cache.extent(0) == 0) return;
  detail::check_disjoint_rows(op, "k", k);
  detail::check_no_overlap(op, "k", k, "cache", cache, false);
  detail::check_disjoint_rows(op, "k_scale", k_scale);
  detail::check_no_overlap(op, "k_scale", k_scale, "cache", cache, false);
  detail::check_no_overlap(op, "k_scale", k_scale, "k", k, false);
  dispatch<indexer_cache_unpack_op>(be, cache, k, k_scale);
}

DSA_NAMESPACE_END

// The type combinations dsa's own programs compile once per backend (dsa/core/op_instances.hpp).
#define DSA_KV_CACHE_INSTANCES(X, B) \
  X(void kv_cache_fp8_pack<B>(const B&, in_view<B, bf16, 2>, out_view<B, std::uint8_t, 2>, in_view<B, std::int32_t, 1>)) \
  X(void kv_cache_fp8_unpack<B>(const B&, in_view<B, std::uint8_t, 2>, out_view<B, bf16, 2>)) \
  X(void indexer_cache_pack<B>(const B&, in_view<B, fp8_e4m3, 2>, in_view<B, float, 1>, out_view<B, std::uint8_t, 2>, in_view<B, std::int32_t, 1>)) \
  X(void indexer_cache_unpack<B>(const B&, in_view<B, std::uint8_t, 2>, out_view<B, fp8_e4m3, 2>, out_view<B, float, 1>))
