// Kernel of rope_apply on the CUDA backend: one block per token (grid-stride), in chunks of up to
// 256 frequency pairs. The block first evaluates cos/sin of the chunk's pairs for the token's
// position into shared memory (rope_inv_freq and rope_cos_sin_at: the CPU's functions, double
// precision, see dsa/numerics/rope.hpp), then rotates every (head, pair) of the chunk with
// rope_rotate. Consecutive threads take consecutive pairs of a head, so the interleaved layout
// reads contiguous bf16 pairs and the half layout two contiguous runs.
//
// Parity: every rounding is the shared numerics'; the transcendental functions (pow, log, cos,
// sin in double) are the device's, within 2 double ulps of glibc's, so an element can differ from
// the CPU only when the exact cos/sin/pow lies within ~2^-52 relative of an fp32 rounding boundary
// (probability ~2^-28 per value), and then by one bf16 ulp at most.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/numerics/rope.hpp"

DSA_NAMESPACE_BEGIN
namespace cuda_kernels {

/// Frequency pairs per shared-memory chunk (V3.2 rotates 32).
inline constexpr index_t rope_chunk_pairs = 256;

struct rope_params {
  bf16* x = nullptr;
  index_t token_stride = 0;
  index_t head_stride = 0;
  const std::int32_t* positions = nullptr;
  index_t tokens = 0;
  index_t heads = 0;
  index_t half = 0;  // pairs per row
  index_t pair_stride = 0;  // 2 (interleaved) or 1 (half): where pair j starts
  index_t pair_step = 0;    // 1 (interleaved) or half: its second element
  rope_config cfg{};
};

template <int Threads>
__global__ void __launch_bounds__(Threads) rope_kernel(const rope_params p) {
  __shared__ rope_cos_sin cs[rope_chunk_pairs];
  for (index_t tok = blockIdx.x; tok < p.tokens; tok += gridDim.x) {
    const std::int32_t pos = p.positions[tok];
    bf16* xt = p.x + tok * p.token_stride;
    for (index_t j0 = 0; j0 < p.half; j0 += rope_chunk_pairs) {
      const index_t cn = p.half - j0 < rope_chunk_pairs ? p.half - j0 : rope_chunk_pairs;
      __syncthreads();  // the previous chunk's (or token's) readers of cs are done
      for (index_t j = threadIdx.x; j < cn; j += Threads) cs[j] = rope_cos_sin_at(pos, rope_inv_freq(p.cfg, j0 + j));
      __syncthreads();
      for (index_t e = threadIdx.x; e < p.heads * cn; e += Threads) {
        const index_t h = e / cn;
        const index_t j = e - h * cn;
        bf16* a = xt + h * p.head_stride + (j0 + j) * p.pair_stride;
        bf16* b = a + p.pair_step;
        float re = a->to_float();
        float im = b->to_float();
        rope_rotate(re, im, cs[j]);
        *a = bf16(re);
        *b = bf16(im);
      }
    }
  }
}

}  // namespace cuda_kernels
DSA_NAMESPACE_END
