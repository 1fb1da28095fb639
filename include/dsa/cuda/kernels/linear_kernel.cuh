// Kernels of the dense linear layers on the CUDA backend.
//
// fp8_linear_kernel: y [t, out] = x [t, in] . dequant(w)^T with DeepSeek's rounding points
// (dsa/numerics/linear.hpp), bit-identical to the CPU backend. A block computes a TM x TN tile of
// y. For each 128-wide k-block, in ascending order:
//   1. the tile's TM activation groups are quantized in place (a warp per group: integer amax by
//      butterfly, act_quant_scale, quantize_e4m3; the act_quant numerics the CPU applies to the
//      whole row) and their code values staged in shared memory as doubles;
//   2. the weight codes pass through shared memory in 16-wide k-chunks, decoded to doubles;
//   3. every thread accumulates its RM x RN block dots with double FMAs. A product of two e4m3
//      values is exact in double, and so is every partial sum (multiples of 2^-18 below 2^25, 43
//      bits), so the dot is the exact one whatever the order, rounded once to fp32 as on the CPU;
//   4. fp8_linear_block_scale / fp8_linear_accumulate fold it into the fp32 accumulator.
// Double FMAs are fast on the data-centre parts this targets (H100/H200: ~60 TFLOP/s FP64), so
// the exact product costs about what a SIMT fp32 GEMM would. One tile shape, TM = 32 x TN = 64,
// for t > 8.
//
// fp8_gemv_kernel: the same numbers for t <= 8 rows (decode), where the weight stream dominates
// and a tile of 256 columns left a 7168 -> 2048 projection eight blocks (20 GB/s on an H100). A
// warp computes one output column for every row, a pass of 8 k-blocks (1024 codes) at a time:
//   1. each lane loads 2 x 16 weight codes (16-byte loads where aligned), issued first;
//   2. the block quantizes the pass's activation groups into shared memory (a warp per group);
//   3. each lane takes its 16-code partial dots in double, an 8-lane butterfly sums a block's
//      (exact: any order gives the exact dot), the lane layout in dsa/numerics/linear.hpp;
//   4. every lane promotes the pass's block dots in ascending order (fp8_linear_accumulate).
//
// linear_simt_kernel: the products cuBLAS has no kernel for (mixed bf16/fp32 operands, fp32
// operands with a bf16 result) and operands whose strides cuBLAS cannot take (broadcast or
// reversed rows): a 64 x 64 tile per block, 4 x 4 outputs per thread, operands converted exactly
// to fp32 in shared memory, fp32 FMAs in ascending k, one rounding to the output type.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/arch/fp8.cuh"
#include "dsa/cuda/arch/warp.cuh"
#include "dsa/numerics/fp8_quant.hpp"
#include "dsa/numerics/linear.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

template <class X, class O>
struct fp8_linear_params {
  const X* x = nullptr;
  index_t x_row_stride = 0;
  const fp8_e4m3* w = nullptr;
  index_t w_row_stride = 0;
  const float* w_scale = nullptr;
  index_t w_scale_row_stride = 0;
  O* y = nullptr;
  index_t y_row_stride = 0;
  index_t t = 0;
  index_t in = 0;
  index_t out = 0;
  scale_format act_format = scale_format::ue8m0;
  bool w_aligned16 = false;  // w and its row stride are 16-byte multiples: vector loads
};

/// Threads of fp8_linear_kernel.
inline constexpr int fp8_linear_threads = 256;


// Loads N consecutive e4m3 codes (N = 4 or 16) with one vector load when `vec` (the address is
// then an N-byte multiple) and byte by byte otherwise.
template <int N>
DSA_DEVICE DSA_FORCEINLINE void load_codes(const fp8_e4m3* src, bool vec, std::uint8_t (&out)[N]) {
  static_assert(N == 4 || N == 16);
  if (vec) {
    if constexpr (N == 16) {
      const uint4 v = *reinterpret_cast<const uint4*>(src);
      const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int i = 0; i < 16; ++i) out[i] = static_cast<std::uint8_t>(words[i / 4] >> (8 * (i % 4)));
    } else {
      const unsigned v = *reinterpret_cast<const unsigned*>(src);
#pragma unroll
      for (int i = 0; i < 4; ++i) out[i] = static_cast<std::uint8_t>(v >> (8 * i));
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = src[i].bits;
  }
}

// One warp's act_quant of a 128-wide activation group (the numerics the CPU applies to the whole
// row): lane l gets the code values of elements l + 32 i in q; returns the group's scale. Every
// lane of the warp must call it.
template <class X>
DSA_DEVICE DSA_FORCEINLINE float quantize_group(const X* xg, int lane, scale_format format, float (&q)[4]) {
  std::uint32_t m = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    q[i] = to_float(xg[lane + 32 * i]);
    const std::uint32_t a = abs_bits(xg[lane + 32 * i]);
    m = a > m ? a : m;
  }
  m = cuda_arch::warp_reduce_max(m);
  const float s = act_quant_scale(detail::bits_float(m), format);
#pragma unroll
  for (int i = 0; i < 4; ++i) q[i] = quantize_e4m3(q[i], s).to_float();
  return s;
}


template <class X, class O, int TM, int TN, int RM, int RN>
__global__ void __launch_bounds__(fp8_linear_threads) fp8_linear_kernel(const fp8_linear_params<X, O> p) {
  constexpr int threads = fp8_linear_threads;
  constexpr int kb_len = static_cast<int>(fp8_linear_block);  // 128
  constexpr int kc_len = 16;                                  // k-chunk of staged weights
  constexpr int tx_n = TN / RN;                               // threads along the columns
  constexpr int ty_n = TM / RM;                               // threads along the rows
  static_assert(tx_n * ty_n == threads, "the tile must give every thread RM x RN outputs");
  constexpr int codes_per_thread = TN * kc_len / threads;
  constexpr int threads_per_col = kc_len / codes_per_thread;
  static_assert(codes_per_thread == 4 || codes_per_thread == 16);
  // +1 double per row: rows land in different banks.
  __shared__ double xs[TM][kb_len + 1];
  __shared__ double ws[TN][kc_len + 1];
  __shared__ float sx[TM];

  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid % tx_n;
  const int ty = tid / tx_n;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const index_t nkb = p.in / kb_len;
  const index_t col_tiles = (p.out + TN - 1) / TN;
  const index_t row_tiles = (p.t + TM - 1) / TM;

  for (index_t ct = blockIdx.x; ct < col_tiles; ct += gridDim.x) {
    const index_t c0 = ct * TN;
    for (index_t rt = blockIdx.y; rt < row_tiles; rt += gridDim.y) {
      const index_t r0 = rt * TM;
      float acc[RM][RN];
#pragma unroll
      for (int j = 0; j < RM; ++j) {
#pragma unroll
        for (int i = 0; i < RN; ++i) acc[j][i] = 0.0f;
      }
      for (index_t kb = 0; kb < nkb; ++kb) {
        __syncthreads();  // xs, sx and ws of the previous k-block are no longer read
        // 1. Quantize the tile's activation groups of this k-block (warp-uniform row loop).
        for (int r = warp; r < TM; r += threads / 32) {
          const index_t row = r0 + r;
          if (row < p.t) {
            float q[kb_len / 32];
            const float s = quantize_group(p.x + row * p.x_row_stride + kb * kb_len, lane,
                                                                 p.act_format, q);
#pragma unroll
            for (int i = 0; i < kb_len / 32; ++i) xs[r][lane + 32 * i] = static_cast<double>(q[i]);
            if (lane == 0) sx[r] = s;
          } else {
#pragma unroll
            for (int i = 0; i < kb_len / 32; ++i) xs[r][lane + 32 * i] = 0.0;
            if (lane == 0) sx[r] = 0.0f;
          }
        }
        double dot[RM][RN];
#pragma unroll
        for (int j = 0; j < RM; ++j) {
#pragma unroll
          for (int i = 0; i < RN; ++i) dot[j][i] = 0.0;
        }
        for (int kc = 0; kc < kb_len; kc += kc_len) {
          // 2. Stage the weight codes of this k-chunk (columns past `out` read as 0).
          {
            const int col = tid / threads_per_col;
            const int kk = (tid % threads_per_col) * codes_per_thread;
            const index_t c = c0 + col;
            if (c < p.out) {
              std::uint8_t codes[codes_per_thread];
              load_codes<codes_per_thread>(p.w + c * p.w_row_stride + kb * kb_len + kc + kk,
                                                                 p.w_aligned16, codes);
#pragma unroll
              for (int b = 0; b < codes_per_thread; ++b) {
                ws[col][kk + b] = static_cast<double>(fp8_e4m3::from_bits(codes[b]).to_float());
              }
            } else {
#pragma unroll
              for (int b = 0; b < codes_per_thread; ++b) ws[col][kk + b] = 0.0;
            }
          }
          __syncthreads();
          // 3. Exact block dots: every product and partial sum is representable in double.
#pragma unroll
          for (int k = 0; k < kc_len; ++k) {
            double a[RM];
            double b[RN];
#pragma unroll
            for (int j = 0; j < RM; ++j) a[j] = xs[ty + ty_n * j][kc + k];
#pragma unroll
            for (int i = 0; i < RN; ++i) b[i] = ws[tx + tx_n * i][k];
#pragma unroll
            for (int j = 0; j < RM; ++j) {
#pragma unroll
              for (int i = 0; i < RN; ++i) dot[j][i] = fma(a[j], b[i], dot[j][i]);
            }
          }
          __syncthreads();  // ws is rewritten by the next chunk
        }
        // 4. The fp32 promotion, in ascending k-block order as on the CPU.
#pragma unroll
        for (int j = 0; j < RM; ++j) {
#pragma unroll
          for (int i = 0; i < RN; ++i) {
            const index_t c = c0 + tx + tx_n * i;
            if (r0 + ty + ty_n * j < p.t && c < p.out) {
              const float scale =
                  fp8_linear_block_scale(sx[ty + ty_n * j], p.w_scale[(c / kb_len) * p.w_scale_row_stride + kb]);
              acc[j][i] = fp8_linear_accumulate(acc[j][i], static_cast<float>(dot[j][i]), scale);
            }
          }
        }
      }
#pragma unroll
      for (int j = 0; j < RM; ++j) {
        const index_t row = r0 + ty + ty_n * j;
#pragma unroll
        for (int i = 0; i < RN; ++i) {
          const index_t c = c0 + tx + tx_n * i;
          if (row < p.t && c < p.out) p.y[row * p.y_row_stride + c] = from_float<O>(acc[j][i]);
        }
      }
    }
  }
}

/// Threads and rows of fp8_gemv_kernel: 8 warps, one output column each, all of y's (<= 8) rows.
inline constexpr int fp8_gemv_threads = 256;
inline constexpr int fp8_gemv_rows = 8;

/// The shared memory of the decode GEMV: a pass's quantized activations (fp8_gemv_smem_index:
/// conflict-free reads) and their scales.
struct fp8_gemv_smem {
  float xs[fp8_gemv_rows][fp8_gemv_smem_row];
  float sx[fp8_gemv_rows][fp8_gemv_pass_blocks];
};

/// Output columns [cg * 8, cg * 8 + 8) of the decode GEMV for p.t <= 8 rows, a warp per column.
/// Every thread of the block must call it (it synchronises the block).
template <class X, class O>
DSA_DEVICE DSA_FORCEINLINE void fp8_gemv_column_group(const fp8_linear_params<X, O>& p, index_t cg, fp8_gemv_smem& smem) {
  constexpr int warps = fp8_gemv_threads / 32;
  constexpr int kb_len = static_cast<int>(fp8_linear_block);  // 128
  constexpr int pass_blocks = fp8_gemv_pass_blocks;            // 8 k-blocks, 1024 codes per pass
  auto& xs = smem.xs;
  auto& sx = smem.sx;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int rows = static_cast<int>(p.t);  // <= fp8_gemv_rows (the callers' condition)
  const index_t nkb = p.in / kb_len;
  {
    const index_t c = cg * warps + warp;
    const bool col_ok = c < p.out;
    float acc[fp8_gemv_rows];
#pragma unroll
    for (int j = 0; j < fp8_gemv_rows; ++j) acc[j] = 0.0f;
    for (index_t kb0 = 0; kb0 < nkb; kb0 += pass_blocks) {
      const int nb = static_cast<int>(nkb - kb0 < pass_blocks ? nkb - kb0 : pass_blocks);
      // 1. This lane's 2 x 16 weight codes, loaded before the activations are staged so that the
      //    loads are in flight meanwhile (codes of blocks past the row, or of no column, read 0).
      uint4 wc[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        wc[half] = make_uint4(0, 0, 0, 0);
        if (col_ok && fp8_gemv_block(lane, half) < nb) {
          const fp8_e4m3* src = p.w + c * p.w_row_stride + kb0 * kb_len + fp8_gemv_code_offset(lane, half);
          if (p.w_aligned16) {
            wc[half] = *reinterpret_cast<const uint4*>(src);
          } else {
            std::uint8_t codes[16];
            load_codes<16>(src, false, codes);
            unsigned words[4] = {0, 0, 0, 0};
#pragma unroll
            for (int i = 0; i < 16; ++i) words[i / 4] |= static_cast<unsigned>(codes[i]) << (8 * (i % 4));
            wc[half] = make_uint4(words[0], words[1], words[2], words[3]);
          }
        }
      }
      __syncthreads();  // the previous pass's xs and sx are no longer read
      // 2. Quantize the pass's activation groups, a warp per (row, block) (warp-uniform loop).
      for (int g = warp; g < rows * nb; g += warps) {
        const int r = g / nb, b = g % nb;
        float q[kb_len / 32];
        const float s = quantize_group(p.x + r * p.x_row_stride + (kb0 + b) * kb_len, lane,
                                                             p.act_format, q);
#pragma unroll
        for (int i = 0; i < kb_len / 32; ++i) xs[r][fp8_gemv_smem_index(b * kb_len + lane + 32 * i)] = q[i];
        if (lane == 0) sx[r][b] = s;
      }
      __syncthreads();
      // 3. Exact partial dots (16 products per lane and load), then the exact 8-lane sums: the
      //    block dot is exact in double whatever the order (dsa/numerics/linear.hpp). Lanes of
      //    blocks past the pass (whole groups of 8) add nothing: their xs is a previous pass's.
      double part[2][fp8_gemv_rows];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float wv[16];
        cuda_arch::e4m3x16_to_float(wc[half], wv);
        const int k0 = fp8_gemv_code_offset(lane, half);
        const bool live = fp8_gemv_block(lane, half) < nb;
#pragma unroll
        for (int j = 0; j < fp8_gemv_rows; ++j) {
          double d = 0.0;
          if (j < rows && live) {
#pragma unroll
            for (int e = 0; e < 16; ++e) {
              d = fma(static_cast<double>(xs[j][fp8_gemv_smem_index(k0 + e)]), static_cast<double>(wv[e]), d);
            }
          }
          part[half][j] = cuda_arch::warp_reduce_sum<8>(d);
        }
      }
      // 4. The fp32 promotion in ascending k-block order, as on the CPU; every lane fetches each
      //    block's dot from the lane that holds it and keeps the same accumulators.
#pragma unroll
      for (int b = 0; b < pass_blocks; ++b) {
        if (b >= nb) break;  // uniform: nb is the block's
        const float w_scale = col_ok ? p.w_scale[(c / kb_len) * p.w_scale_row_stride + kb0 + b] : 0.0f;
#pragma unroll
        for (int j = 0; j < fp8_gemv_rows; ++j) {
          const double d = __shfl_sync(cuda_arch::full_warp_mask, part[fp8_gemv_block_half(b)][j], fp8_gemv_block_lane(b));
          if (j < rows) acc[j] = fp8_linear_accumulate(acc[j], static_cast<float>(d), fp8_linear_block_scale(sx[j][b], w_scale));
        }
      }
    }
    if (col_ok && lane == 0) {
#pragma unroll
      for (int j = 0; j < fp8_gemv_rows; ++j) {
        if (j < rows) p.y[j * p.y_row_stride + c] = from_float<O>(acc[j]);
      }
    }
  }
}

template <class X, class O>
__global__ void __launch_bounds__(fp8_gemv_threads) fp8_gemv_kernel(const fp8_linear_params<X, O> p) {
  __shared__ fp8_gemv_smem smem;
  const index_t col_groups = (p.out + fp8_gemv_threads / 32 - 1) / (fp8_gemv_threads / 32);
  for (index_t cg = blockIdx.x; cg < col_groups; cg += gridDim.x) fp8_gemv_column_group(p, cg, smem);
}

/// The decode GEMV of an MoE layer's routed experts in one launch (dsa/model/cuda/moe.cuh): the
/// rows of x and y are grouped by expert, expert e's rows are [offsets[e], offsets[e + 1]), and
/// the experts with rows are active[0 .. *n_active) in ascending id. Block (column group, a)
/// computes its columns for every row of expert active[a] against that expert's weight, eight
/// rows at a time: each row's numbers are fp8_linear's (the GEMV's exact block dots), whatever the
/// other rows. Rows no expert owns are not written.
template <class X, class O>
struct fp8_grouped_gemv_params {
  const X* x = nullptr;
  index_t x_row_stride = 0;
  const fp8_weight_ref* experts = nullptr;  ///< [experts] this projection of every expert
  const std::int32_t* offsets = nullptr;    ///< [experts + 1]
  const std::int32_t* active = nullptr;     ///< [max_active]
  const std::int32_t* n_active = nullptr;   ///< one value, <= max_active
  index_t max_active = 0;
  O* y = nullptr;
  index_t y_row_stride = 0;
  index_t in = 0;
  index_t out = 0;
  scale_format act_format = scale_format::ue8m0;
};

template <class X, class O>
__global__ void __launch_bounds__(fp8_gemv_threads) fp8_grouped_gemv_kernel(const fp8_grouped_gemv_params<X, O> g) {
  __shared__ fp8_gemv_smem smem;
  const index_t n_active = *g.n_active < g.max_active ? *g.n_active : g.max_active;
  const index_t col_groups = (g.out + fp8_gemv_threads / 32 - 1) / (fp8_gemv_threads / 32);
  for (index_t a = blockIdx.y; a < n_active; a += gridDim.y) {  // block-uniform bounds
    const std::int32_t e = g.active[a];
    const fp8_weight_ref w = g.experts[e];
    fp8_linear_params<X, O> p;
    p.w = w.q;
    p.w_row_stride = w.q_row_stride;
    p.w_scale = w.scale;
    p.w_scale_row_stride = w.scale_row_stride;
    p.x_row_stride = g.x_row_stride;
    p.y_row_stride = g.y_row_stride;
    p.in = g.in;
    p.out = g.out;
    p.act_format = g.act_format;
    p.w_aligned16 = reinterpret_cast<std::uintptr_t>(w.q) % 16 == 0 && (g.out <= 1 || w.q_row_stride % 16 == 0);
    const index_t r1 = g.offsets[e + 1];
    for (index_t r = g.offsets[e]; r < r1; r += fp8_gemv_rows) {
      p.x = g.x + r * g.x_row_stride;
      p.y = g.y + r * g.y_row_stride;
      p.t = r1 - r < fp8_gemv_rows ? r1 - r : fp8_gemv_rows;
      for (index_t cg = blockIdx.x; cg < col_groups; cg += gridDim.x) fp8_gemv_column_group(p, cg, smem);
    }
  }
}

/// fp8_linear's cuBLASLt path: the weight's [rows, cols] block scales (row stride src_row_stride)
/// copied into the [rows, ld] layout of CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F (ld =
/// round_up(cols, 4)), the padding zero. Grid-stride over the destination. (A template, as every
/// kernel of a header that several translation units include.)
template <int Threads>
__global__ void __launch_bounds__(Threads) fp8_weight_scales_repack_kernel(const float* src, index_t src_row_stride,
                                                                       index_t rows, index_t cols, float* dst,
                                                                       index_t ld) {
  const index_t n = rows * ld;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t r = i / ld, c = i - r * ld;
    dst[i] = c < cols ? src[r * src_row_stride + c] : 0.0f;
  }
}

template <class X, class W, class O>
struct linear_params {
  const X* x = nullptr;
  index_t x_row_stride = 0;
  const W* w = nullptr;
  index_t w_row_stride = 0;
  O* y = nullptr;
  index_t y_row_stride = 0;
  index_t t = 0;
  index_t in = 0;
  index_t out = 0;
};

/// Threads and tile edge of linear_simt_kernel.
inline constexpr int linear_simt_threads = 256;
inline constexpr int linear_simt_tile = 64;

template <class X, class W, class O>
__global__ void __launch_bounds__(linear_simt_threads) linear_simt_kernel(const linear_params<X, W, O> p) {
  constexpr int threads = linear_simt_threads;
  constexpr int tile = linear_simt_tile;  // TM = TN
  constexpr int kc_len = 16;
  constexpr int per = 4;  // outputs per thread along each edge
  static_assert((tile / per) * (tile / per) == threads);
  // [k][row] with a pad: the transposing stores hit distinct banks.
  __shared__ float xs[kc_len][tile + 1];
  __shared__ float ws[kc_len][tile + 1];
  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid % (tile / per);
  const int ty = tid / (tile / per);
  const index_t col_tiles = (p.out + tile - 1) / tile;
  const index_t row_tiles = (p.t + tile - 1) / tile;
  for (index_t ct = blockIdx.x; ct < col_tiles; ct += gridDim.x) {
    const index_t c0 = ct * tile;
    for (index_t rt = blockIdx.y; rt < row_tiles; rt += gridDim.y) {
      const index_t r0 = rt * tile;
      float acc[per][per];
#pragma unroll
      for (int j = 0; j < per; ++j) {
#pragma unroll
        for (int i = 0; i < per; ++i) acc[j][i] = 0.0f;
      }
      for (index_t k0 = 0; k0 < p.in; k0 += kc_len) {
        // Stage a 64 x 16 slice of each operand (zeros outside the matrices).
#pragma unroll
        for (int l = 0; l < tile * kc_len / threads; ++l) {
          const int e = tid + threads * l;
          const int r = e / kc_len;
          const int k = e % kc_len;
          const index_t kk = k0 + k;
          const index_t row = r0 + r;
          const index_t col = c0 + r;
          xs[k][r] = row < p.t && kk < p.in ? to_float(p.x[row * p.x_row_stride + kk]) : 0.0f;
          ws[k][r] = col < p.out && kk < p.in ? to_float(p.w[col * p.w_row_stride + kk]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < kc_len; ++k) {
          float a[per];
          float b[per];
#pragma unroll
          for (int j = 0; j < per; ++j) a[j] = xs[k][ty + (tile / per) * j];
#pragma unroll
          for (int i = 0; i < per; ++i) b[i] = ws[k][tx + (tile / per) * i];
#pragma unroll
          for (int j = 0; j < per; ++j) {
#pragma unroll
            for (int i = 0; i < per; ++i) acc[j][i] = fmaf(a[j], b[i], acc[j][i]);
          }
        }
        __syncthreads();
      }
#pragma unroll
      for (int j = 0; j < per; ++j) {
        const index_t row = r0 + ty + (tile / per) * j;
#pragma unroll
        for (int i = 0; i < per; ++i) {
          const index_t col = c0 + tx + (tile / per) * i;
          if (row < p.t && col < p.out) p.y[row * p.y_row_stride + col] = from_float<O>(acc[j][i]);
        }
      }
    }
  }
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
