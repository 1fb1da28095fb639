// The public ops on the CUDA backend, instantiated by nvcc (op_launchers_*.cu) for the doctest
// tests (.cpp, host compiler): each function here is exactly dsa::<op>(be, ...) with device views,
// so the tests exercise the real front-ends, op_impl<cuda_backend, ...> and kernels.
//
// DESIGN §5 keeps doctest out of .cu files; device views, device_buffer and the op front-ends'
// argument types are all plain C++, so only these declarations cross the boundary. A call with
// bad arguments throws dsa::error from the front-end before touching the device, so those tests
// run without a GPU; every other call needs one.
#pragma once

#include <cstdint>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/ops/fp8_quant.hpp"

namespace dsa_test::cuda_ops {

template <class T, std::size_t R>
using dview = dsa::device_view<T, R>;
using dsa::bf16;
using dsa::cuda_backend;
using dsa::fp8_e4m3;
using dsa::index_t;

// ---- hadamard ----------------------------------------------------------------------------------
void hadamard_transform(const cuda_backend& be, dview<const float, 2> x, dview<float, 2> y, float scale);
void hadamard_transform(const cuda_backend& be, dview<const bf16, 2> x, dview<bf16, 2> y, float scale);

// ---- fp8 quantizers ----------------------------------------------------------------------------
void act_quant(const cuda_backend& be, dview<const float, 2> x, dview<fp8_e4m3, 2> q, dview<float, 2> s,
               dsa::act_quant_config cfg);
void act_quant(const cuda_backend& be, dview<const bf16, 2> x, dview<fp8_e4m3, 2> q, dview<float, 2> s,
               dsa::act_quant_config cfg);
void act_dequant(const cuda_backend& be, dview<const fp8_e4m3, 2> q, dview<const float, 2> s, dview<float, 2> y,
                 index_t group_size);
void act_dequant(const cuda_backend& be, dview<const fp8_e4m3, 2> q, dview<const float, 2> s, dview<bf16, 2> y,
                 index_t group_size);
void weight_quant(const cuda_backend& be, dview<const float, 2> w, dview<fp8_e4m3, 2> q, dview<float, 2> s);
void weight_quant(const cuda_backend& be, dview<const bf16, 2> w, dview<fp8_e4m3, 2> q, dview<float, 2> s);
void weight_dequant(const cuda_backend& be, dview<const fp8_e4m3, 2> q, dview<const float, 2> s, dview<float, 2> w);
void weight_dequant(const cuda_backend& be, dview<const fp8_e4m3, 2> q, dview<const float, 2> s, dview<bf16, 2> w);

// ---- kv caches ---------------------------------------------------------------------------------
void kv_cache_fp8_pack(const cuda_backend& be, dview<const bf16, 2> kv, dview<std::uint8_t, 2> cache,
                       dview<const std::int32_t, 1> slots);
void kv_cache_fp8_unpack(const cuda_backend& be, dview<const std::uint8_t, 2> cache, dview<bf16, 2> kv);
void indexer_cache_pack(const cuda_backend& be, dview<const fp8_e4m3, 2> k, dview<const float, 1> k_scale,
                        dview<std::uint8_t, 2> cache, dview<const std::int32_t, 1> slots);
void indexer_cache_unpack(const cuda_backend& be, dview<const std::uint8_t, 2> cache, dview<fp8_e4m3, 2> k,
                          dview<float, 1> k_scale);

// ---- top-k and gather --------------------------------------------------------------------------
void topk_indices(const cuda_backend& be, dview<const float, 2> scores, dview<const std::int32_t, 2> ranges, index_t k,
                  dview<std::int32_t, 2> indices);
void topk_indices_paged(const cuda_backend& be, dview<const float, 2> scores, dview<const std::int32_t, 2> ranges,
                        index_t k, dview<const std::int32_t, 2> block_table, index_t block_size,
                        dview<std::int32_t, 2> slots);
void gather_rows(const cuda_backend& be, dview<const float, 2> src, dview<const std::int32_t, 2> indices,
                 dview<float, 3> dst);
void gather_rows(const cuda_backend& be, dview<const bf16, 2> src, dview<const std::int32_t, 2> indices,
                 dview<bf16, 3> dst);
void gather_rows(const cuda_backend& be, dview<const std::uint8_t, 2> src, dview<const std::int32_t, 2> indices,
                 dview<std::uint8_t, 3> dst);

}  // namespace dsa_test::cuda_ops
