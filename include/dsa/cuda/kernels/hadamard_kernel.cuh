// Kernel of dsa::hadamard_transform on the CUDA backend.
//
// A block transforms a tile of whole rows held in shared memory as fp32 (rows * n * 4 bytes).
// The butterflies of dsa/numerics/hadamard.hpp run with strides 1, 2, 4, ... in exactly that
// order, each (a, b) -> (a + b, a - b) the same two fp32 operations as on the CPU, so the results
// are bit-identical to the CPU backend:
//   pass 1: each thread loads 8 consecutive values into registers (strides 1, 2, 4), then warp
//           shuffles do strides 8 .. 128 across the lanes of a 256-value group;
//   pass 2: strides 256 and up, radix 8 (three strides per pass) through shared memory;
//   pass 3: for the c * 2^m sizes, the base mixing hadamard_base_dot reads the c values of one
//           offset from shared memory and writes the c outputs straight to global memory;
// then scaling and the one rounding to T on the way out. Rows shorter than 8 use fewer values
// per thread; groups shorter than 256 use fewer lanes. No floating-point reduction is split
// differently from the CPU's, so nothing depends on the launch shape.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/arch/warp.cuh"
#include "dsa/numerics/hadamard.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

/// What hadamard_transform_kernel needs: row pointers and strides (elements), the size plan and
/// the tiling (rows_per_block whole rows per block iteration).
template <class T>
struct hadamard_params {
  const T* x = nullptr;
  index_t x_row_stride = 0;
  T* y = nullptr;
  index_t y_row_stride = 0;
  index_t rows = 0;
  int rows_per_block = 1;
  float scale = 1.0f;
  hadamard_plan plan{};
};

/// Static shared memory of hadamard_transform_kernel: the plan's sign masks of the base matrix.
/// The front-end adds it to the rows' dynamic bytes when it checks the device's limit.
inline constexpr index_t hadamard_static_smem_bytes = static_cast<index_t>(sizeof(hadamard_plan::negative));

/// Values per thread in pass 1 (strides 1 .. 4 in registers).
inline constexpr int pass1_values = 8;
/// Values per warp in pass 1 (strides up to 128 by shuffles).
inline constexpr int pass1_span = 32 * pass1_values;

/// The butterflies of hadamard_butterflies on R register values (strides 1, 2, .., R / 2).
template <int R>
DSA_DEVICE DSA_FORCEINLINE void register_butterflies(float (&v)[R]) {
#pragma unroll
  for (int h = 1; h < R; h <<= 1) {
#pragma unroll
    for (int i = 0; i < R; i += 2 * h) {
#pragma unroll
      for (int j = i; j < i + h; ++j) {
        const float a = v[j];
        const float b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
}

/// Pass 1 over s[0, count) with E values per thread and `lanes` lanes per group of E * lanes
/// values (lanes a power of two <= 32). Every lane of a warp runs the same iterations, so the
/// full-mask shuffles are valid; lanes past the end work on zeros and store nothing.
template <int E>
DSA_DEVICE void pass1(float* s, int count, int lanes) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  const int chunks = count / E;
  for (int c0 = warp * 32; c0 < chunks; c0 += warps * 32) {
    const int c = c0 + lane;
    const bool active = c < chunks;
    float v[E];
#pragma unroll
    for (int e = 0; e < E; ++e) v[e] = active ? s[c * E + e] : 0.0f;
    register_butterflies<E>(v);
    for (int offset = 1; offset < lanes; offset <<= 1) {
      // Stride offset * E: the lower lane of a pair holds a and keeps a + b, the upper holds b
      // and keeps a - b, with a the partner's value.
      const bool upper = (lane & offset) != 0;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float other = __shfl_xor_sync(cuda_arch::full_warp_mask, v[e], offset);
        v[e] = upper ? other - v[e] : v[e] + other;
      }
    }
    if (active) {
#pragma unroll
      for (int e = 0; e < E; ++e) s[c * E + e] = v[e];
    }
  }
}

/// One radix-R pass of pass 2 over s[0, count): strides `stride`, 2 * stride, .. R / 2 * stride
/// within every aligned block of R * stride values.
template <int R>
DSA_DEVICE void radix_pass(float* s, int count, int stride) {
  const int items = count / R;
  for (int i = static_cast<int>(threadIdx.x); i < items; i += static_cast<int>(blockDim.x)) {
    const int base = (i / stride) * (R * stride) + i % stride;
    float v[R];
#pragma unroll
    for (int r = 0; r < R; ++r) v[r] = s[base + r * stride];
    register_butterflies<R>(v);
#pragma unroll
    for (int r = 0; r < R; ++r) s[base + r * stride] = v[r];
  }
}

/// All butterflies of every 2^m block in s[0, count) (count a multiple of pow2). Ends with
/// __syncthreads().
DSA_DEVICE inline void block_butterflies(float* s, int count, int pow2) {
  const int first_span = pow2 < pass1_span ? pow2 : pass1_span;
  const int e = pow2 < pass1_values ? pow2 : pass1_values;
  const int lanes = first_span / e;
  switch (e) {
    case 1: pass1<1>(s, count, lanes); break;
    case 2: pass1<2>(s, count, lanes); break;
    case 4: pass1<4>(s, count, lanes); break;
    default: pass1<8>(s, count, lanes); break;
  }
  __syncthreads();
  for (int stride = first_span; stride < pow2;) {
    const int left = pow2 / stride;  // strides still to do: log2(left)
    if (left >= 8) {
      radix_pass<8>(s, count, stride);
      stride *= 8;
    } else if (left == 4) {
      radix_pass<4>(s, count, stride);
      stride *= 4;
    } else {
      radix_pass<2>(s, count, stride);
      stride *= 2;
    }
    __syncthreads();
  }
}

/// y = (x * H_n) * scale, rows_per_block rows at a time per block; dynamic shared memory of
/// rows_per_block * n floats.
template <class T, int Threads>
__global__ void __launch_bounds__(Threads) hadamard_transform_kernel(const hadamard_params<T> p) {
  extern __shared__ float hadamard_smem[];
  __shared__ std::uint64_t negative[hadamard_static_smem_bytes / sizeof(std::uint64_t)];
  const int n = static_cast<int>(p.plan.n);
  const int pow2 = static_cast<int>(p.plan.pow2);
  const int base = p.plan.base;
  for (int i = static_cast<int>(threadIdx.x); i < base; i += Threads) negative[i] = p.plan.negative[i];

  const index_t tiles = (p.rows + p.rows_per_block - 1) / p.rows_per_block;
  for (index_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const index_t row0 = tile * p.rows_per_block;
    const int rows = static_cast<int>(p.rows - row0 < p.rows_per_block ? p.rows - row0 : p.rows_per_block);
    const int count = rows * n;
    // Every thread is done with the previous tile's shared memory (and `negative` is written)
    // before it is overwritten.
    __syncthreads();
    for (int e = static_cast<int>(threadIdx.x); e < count; e += Threads) {
      const int r = e / n;
      hadamard_smem[e] = to_float(p.x[(row0 + r) * p.x_row_stride + (e - r * n)]);
    }
    __syncthreads();
    block_butterflies(hadamard_smem, count, pow2);
    if (base == 1) {
      for (int e = static_cast<int>(threadIdx.x); e < count; e += Threads) {
        const int r = e / n;
        p.y[(row0 + r) * p.y_row_stride + (e - r * n)] = from_float<T>(hadamard_smem[e] * p.scale);
      }
    } else {
      // One thread per (row, offset within the 2^m block): the base-c dot of each output block.
      for (int e = static_cast<int>(threadIdx.x); e < rows * pow2; e += Threads) {
        const int r = e / pow2;
        const int off = e - r * pow2;
        const float* in = hadamard_smem + r * n + off;
        T* out = p.y + (row0 + r) * p.y_row_stride + off;
        for (int i = 0; i < base; ++i) {
          out[static_cast<index_t>(i) * pow2] = from_float<T>(hadamard_base_dot(negative[i], base, in, pow2) * p.scale);
        }
      }
    }
  }
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
