// PTX wrappers of the tensor-core kernels: mma.sync.m16n8k16 (bf16 and f16 operands, fp32
// accumulators), ldmatrix.x4 (plain and .trans), cp.async (16 bytes with zero fill, 4 bytes) and
// the operand packings (two fp32 to a bf16x2 register, two e4m3 codes to an f16x2 register).
// The lane layouts these instructions imply are in arch/mma.hpp, shared with the CPU warp model.
//
// mma.sync.m16n8k16 with 16-bit operands exists from sm_80; the kernels that use it are only
// launched on such devices (cuda_detail::device_has_mma_sync). Compiled for an older target the
// wrappers trap, so that the headers still build there.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/arch/fp8.cuh"
#include "dsa/cuda/arch/mma.hpp"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define DSA_CUDA_HAS_MMA_SYNC 1
#else
#define DSA_CUDA_HAS_MMA_SYNC 0
#endif

DSA_NAMESPACE_BEGIN
namespace cuda_arch {

/// The shared-memory address of a generic pointer into shared memory (what ldmatrix and cp.async
/// take).
DSA_DEVICE DSA_FORCEINLINE std::uint32_t smem_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

/// d += a · b on bf16 operands (registers per arch/mma.hpp), fp32 accumulators.
DSA_DEVICE DSA_FORCEINLINE void mma_bf16_16816(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
#if DSA_CUDA_HAS_MMA_SYNC
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  (void)d, (void)a, (void)b;
  __trap();
#endif
}

/// d += a · b on f16 operands, fp32 accumulators.
DSA_DEVICE DSA_FORCEINLINE void mma_f16_16816(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
#if DSA_CUDA_HAS_MMA_SYNC
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  (void)d, (void)a, (void)b;
  __trap();
#endif
}

/// ldmatrix.x4: this lane supplies the address of row ldmatrix_row(lane) of matrix
/// ldmatrix_matrix(lane); r[j] receives its part of matrix j (arch/mma.hpp).
DSA_DEVICE DSA_FORCEINLINE void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t address) {
#if DSA_CUDA_HAS_MMA_SYNC
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#else
  (void)address;
  r[0] = r[1] = r[2] = r[3] = 0;
  __trap();
#endif
}

/// ldmatrix.x4.trans: each 8 x 8 matrix transposed on the way.
DSA_DEVICE DSA_FORCEINLINE void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t address) {
#if DSA_CUDA_HAS_MMA_SYNC
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#else
  (void)address;
  r[0] = r[1] = r[2] = r[3] = 0;
  __trap();
#endif
}

/// cp.async of 16 bytes from global `src` (16-byte aligned) to shared `dst_address`; with
/// `valid` false nothing is read and the 16 bytes are zero-filled (src-size 0; `src` must still
/// be a valid address).
DSA_DEVICE DSA_FORCEINLINE void cp_async_16(std::uint32_t dst_address, const void* src, bool valid) {
#if DSA_CUDA_HAS_MMA_SYNC
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst_address), "l"(src), "r"(src_bytes)
               : "memory");
#else
  (void)dst_address, (void)src, (void)valid;
  __trap();
#endif
}

/// cp.async of one 16-byte chunk from `src`, or 16 zero bytes when `src` is null: nothing is read
/// then, but the instruction still names an address, `readable` (any valid global pointer).
DSA_DEVICE DSA_FORCEINLINE void cp_async_16_or_zero(std::uint32_t dst_address, const void* src, const void* readable) {
  cp_async_16(dst_address, src != nullptr ? src : readable, src != nullptr);
}

/// cp.async of 4 bytes (4-byte aligned), zero-filled when `valid` is false.
DSA_DEVICE DSA_FORCEINLINE void cp_async_4(std::uint32_t dst_address, const void* src, bool valid) {
#if DSA_CUDA_HAS_MMA_SYNC
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst_address), "l"(src), "r"(src_bytes)
               : "memory");
#else
  (void)dst_address, (void)src, (void)valid;
  __trap();
#endif
}

/// Closes the group of this thread's cp.async operations issued since the last commit.
DSA_DEVICE DSA_FORCEINLINE void cp_async_commit() {
#if DSA_CUDA_HAS_MMA_SYNC
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/// Waits until at most N of this thread's committed groups are still in flight. Other threads'
/// copies are visible only after a barrier that follows their own wait.
template <int N>
DSA_DEVICE DSA_FORCEINLINE void cp_async_wait() {
#if DSA_CUDA_HAS_MMA_SYNC
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/// Two fp32 values rounded to nearest even into a bf16x2 register (`lo` in bits 0-15), as
/// dsa::bf16 rounds them (a NaN stays a NaN; its payload is not kept). One cvt.rn.bf16x2.f32.
DSA_DEVICE DSA_FORCEINLINE std::uint32_t pack_bf16x2(float lo, float hi) {
#if DSA_CUDA_HAS_MMA_SYNC
  std::uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));  // first source -> upper half
  return r;
#else
  return static_cast<std::uint32_t>(bf16(lo).bits) | (static_cast<std::uint32_t>(bf16(hi).bits) << 16);
#endif
}

/// Two e4m3 codes (bits 0-15 of `pair`, the lower byte the lower element) to an f16x2 register.
/// Exact: every e4m3 value is a normal f16 (2^-9 >= 2^-14, 448 < 65504); a NaN code gives an f16
/// NaN. sm_89+: one cvt.rn.f16x2.e4m3x2; elsewhere through the scalar decode.
DSA_DEVICE DSA_FORCEINLINE std::uint32_t e4m3x2_to_f16x2(std::uint32_t pair) {
#if DSA_CUDA_HAS_FP8_CVT
  std::uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(static_cast<unsigned short>(pair & 0xFFFFu)));
  return h2;
#else
  const float2 f = e4m3x2_to_float2_sw(pair);
  const __half2 h = __floats2half2_rn(f.x, f.y);
  return *reinterpret_cast<const std::uint32_t*>(&h);
#endif
}

}  // namespace cuda_arch
DSA_NAMESPACE_END
