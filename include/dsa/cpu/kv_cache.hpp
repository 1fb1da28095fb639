// CPU backend of the KV-cache pack/unpack ops: the row codecs of dsa/numerics/kv_cache.hpp,
// split over tokens (each writes its own cache row, so any thread count gives the same bytes).
#pragma once

#include <cstdint>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/ops/kv_cache.hpp"

DSA_NAMESPACE_BEGIN

namespace cpu_detail {

// Destination row of token i, or -1 to skip it. The front-end has validated host slots; the
// range check stays so that no slot value can ever write outside the cache.
inline index_t kv_cache_destination(const tensor_view<const std::int32_t, 1>& slots, index_t i, index_t rows) {
  if (slots.is_absent()) return i;
  const index_t s = slots(i);
  return (s >= 0 && s < rows) ? s : -1;
}

}  // namespace cpu_detail

template <>
struct op_impl<cpu_backend, kv_cache_fp8_pack_op> {
  static void run(const cpu_backend& be, tensor_view<const bf16, 2> kv, tensor_view<std::uint8_t, 2> cache,
                  tensor_view<const std::int32_t, 1> slots) {
    cpu_detail::parallel_for(be, kv.extent(0), 64, [&](index_t begin, index_t end) {
      for (index_t i = begin; i < end; ++i) {
        const index_t dst = cpu_detail::kv_cache_destination(slots, i, cache.extent(0));
        if (dst >= 0) kv_fp8_row_encode(kv.row(i), cache.row(dst));
      }
    });
  }
};

template <>
struct op_impl<cpu_backend, kv_cache_fp8_unpack_op> {
  static void run(const cpu_backend& be, tensor_view<const std::uint8_t, 2> cache, tensor_view<bf16, 2> kv) {
    cpu_detail::parallel_for(be, cache.extent(0), 64, [&](index_t begin, index_t end) {
      for (index_t i = begin; i < end; ++i) kv_fp8_row_decode(cache.row(i), kv.row(i));
    });
  }
};

template <>
struct op_impl<cpu_backend, indexer_cache_pack_op> {
  static void run(const cpu_backend& be, tensor_view<const fp8_e4m3, 2> k, tensor_view<const float, 1> k_scale,
                  tensor_view<std::uint8_t, 2> cache, tensor_view<const std::int32_t, 1> slots) {
    cpu_detail::parallel_for(be, k.extent(0), 256, [&](index_t begin, index_t end) {
      for (index_t i = begin; i < end; ++i) {
        const index_t dst = cpu_detail::kv_cache_destination(slots, i, cache.extent(0));
        if (dst >= 0) indexer_cache_row_encode(k.row(i), k_scale(i), cache.row(dst));
      }
    });
  }
};

template <>
struct op_impl<cpu_backend, indexer_cache_unpack_op> {
  static void run(const cpu_backend& be, tensor_view<const std::uint8_t, 2> cache, tensor_view<fp8_e4m3, 2> k,
                  tensor_view<float, 1> k_scale) {
    cpu_detail::parallel_for(be, cache.extent(0), 256, [&](index_t begin, index_t end) {
      for (index_t i = begin; i < end; ++i) k_scale(i) = indexer_cache_row_decode(cache.row(i), k.row(i));
    });
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CPU_OP_INSTANCES(DSA_KV_CACHE_INSTANCES)
