// CPU backend of dsa::hadamard_transform.
//
// One row at a time: widen into an fp32 scratch row (16 KB at n = 4096, so it stays in L1/L2),
// butterflies, base mixing for the c * 2^m sizes, then scale and narrow on the way out.
// The butterflies fuse the stages two at a time (radix 4: strides h and 2h in registers), which
// halves the passes over the scratch; strides >= 4 vectorise along the row. Every element still
// sees exactly the fp32 operations of dsa/numerics/hadamard.hpp in the same order, so results
// are bit-identical to the shared numerics (and so to the CUDA backend), and rows are
// independent, so any thread count gives the same bits.
//
// With AVX-512, power-of-two sizes >= 16 take a register path: each block of 128 floats (8 zmm,
// widened from bf16 in registers) goes through strides 1..64 without touching memory (strides
// below 16 pair lanes of one register through a permute; the butterfly (a, b) -> (a + b, a - b)
// becomes p + sign * x, one FMA whose product by +-1 is exact, so it rounds exactly like the
// add or subtract it replaces); longer rows then take radix-8 passes over the fp32 row (strides
// 128, 256, 512 in one pass), and the scale and the narrowing are fused into the last step,
// which takes 32 consecutive floats at a time so that bf16 narrows two registers per instruction
// (AVX512-BF16). n = 128 rows never leave the registers. bf16 outputs larger than the
// last-level cache go around it in that last step (cpu/arch/streaming_stores.hpp), on rows that
// start on a 64-byte boundary. With AVX2 + FMA (x86-64-v3) the same code runs on 8-lane
// registers from n = 8, in 64-float blocks: it is written once over hadamard_vec, the few vector
// operations each instruction set provides.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/avx2_io.hpp"
#include "dsa/cpu/arch/avx512_io.hpp"
#include "dsa/cpu/arch/isa.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/cpu/arch/prefetch.hpp"
#include "dsa/cpu/arch/streaming_stores.hpp"
#include "dsa/numerics/hadamard.hpp"
#include "dsa/ops/hadamard.hpp"

DSA_NAMESPACE_BEGIN

#if DSA_CPU_HAS_AVX512 || (DSA_CPU_HAS_AVX2 && DSA_CPU_HAS_FMA)
#define DSA_HADAMARD_SIMD_ROWS 1
namespace cpu_detail {

// The register path's vector operations, per instruction set: `reg` holds `lanes` fp32 values;
// `groups` registers of consecutive values are narrowed and stored together (AVX-512: 32 bf16
// per instruction with AVX512-BF16; AVX2: one register at a time, as its 16 ymm registers hold
// one group of 8 and the constants). `lane_stages` runs the strides inside one register: lane j
// pairs with lane j ^ H; the lower lane gets x_j + x_(j+H), the upper one x_(j-H) - x_j, as
// partner + (+-1) * x, one FMA whose product by +-1 is exact, so it rounds exactly like the add
// or subtract it replaces. For finite and infinite inputs this gives the scalar butterfly's bits
// (every NaN it can create is the default NaN); which of two NaN inputs an FMA propagates
// differs from a + b, so rows holding a NaN take the scalar loops (see hadamard_row_simd).
#if DSA_CPU_HAS_AVX512
struct hadamard_vec {
  using reg = __m512;
  static constexpr int lanes = 16;
  static constexpr int groups = 2;
  DSA_FORCEINLINE static reg set1(float v) { return _mm512_set1_ps(v); }
  DSA_FORCEINLINE static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  DSA_FORCEINLINE static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  DSA_FORCEINLINE static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  DSA_FORCEINLINE static reg loadu(const float* p) { return _mm512_loadu_ps(p); }
  DSA_FORCEINLINE static void storeu(float* p, reg v) { _mm512_storeu_ps(p, v); }
  template <class T>
  DSA_FORCEINLINE static reg load(const T* x) { return avx512_load16(x); }
  DSA_FORCEINLINE static int nan_lanes(reg v) { return _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q); }
  template <int H>
  DSA_FORCEINLINE static reg lane_stage(reg x) {
    reg partner;
    if constexpr (H == 1) {
      partner = _mm512_permute_ps(x, 0xB1);  // [1, 0, 3, 2] in each 128-bit lane
    } else if constexpr (H == 2) {
      partner = _mm512_permute_ps(x, 0x4E);  // [2, 3, 0, 1]
    } else if constexpr (H == 4) {
      partner = _mm512_shuffle_f32x4(x, x, 0xB1);  // 128-bit lanes [1, 0, 3, 2]
    } else {
      partner = _mm512_shuffle_f32x4(x, x, 0x4E);  // 256-bit halves swapped
    }
    const __mmask16 upper = static_cast<__mmask16>(H == 1 ? 0xAAAA : H == 2 ? 0xCCCC : H == 4 ? 0xF0F0 : 0xFF00);
    const reg sign = _mm512_mask_blend_ps(upper, _mm512_set1_ps(1.0f), _mm512_set1_ps(-1.0f));
    return _mm512_fmadd_ps(sign, x, partner);
  }
  DSA_FORCEINLINE static reg lane_stages(reg x) { return lane_stage<8>(lane_stage<4>(lane_stage<2>(lane_stage<1>(x)))); }
  // y[0, lanes) = v, narrowed for bf16.
  template <class T>
  DSA_FORCEINLINE static void store1(T* y, reg v) { avx512_store16(y, v); }
  // y[0, groups * lanes) = v[0 .. groups), narrowed for bf16; streaming stores if Stream (bf16
  // only, y 64-byte aligned).
  template <bool Stream, class T>
  DSA_FORCEINLINE static void store_groups(T* y, const reg (&v)[groups]) {
    if constexpr (Stream) {
      avx512_stream32(y, v[0], v[1]);
    } else {
      avx512_store32(y, v[0], v[1]);
    }
  }
};
#else
struct hadamard_vec {
  using reg = __m256;
  static constexpr int lanes = 8;
  static constexpr int groups = 1;
  DSA_FORCEINLINE static reg set1(float v) { return _mm256_set1_ps(v); }
  DSA_FORCEINLINE static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  DSA_FORCEINLINE static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  DSA_FORCEINLINE static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  DSA_FORCEINLINE static reg loadu(const float* p) { return _mm256_loadu_ps(p); }
  DSA_FORCEINLINE static void storeu(float* p, reg v) { _mm256_storeu_ps(p, v); }
  template <class T>
  DSA_FORCEINLINE static reg load(const T* x) { return avx2_load8(x); }
  DSA_FORCEINLINE static int nan_lanes(reg v) { return avx2_nan_lanes(v); }
  template <int H>
  DSA_FORCEINLINE static reg lane_stage(reg x) {
    reg partner, sign;
    if constexpr (H == 1) {
      partner = _mm256_permute_ps(x, 0xB1);  // [1, 0, 3, 2] in each 128-bit half
      sign = _mm256_setr_ps(1, -1, 1, -1, 1, -1, 1, -1);
    } else if constexpr (H == 2) {
      partner = _mm256_permute_ps(x, 0x4E);  // [2, 3, 0, 1]
      sign = _mm256_setr_ps(1, 1, -1, -1, 1, 1, -1, -1);
    } else {
      partner = _mm256_permute2f128_ps(x, x, 0x01);  // halves swapped
      sign = _mm256_setr_ps(1, 1, 1, 1, -1, -1, -1, -1);
    }
    return _mm256_fmadd_ps(sign, x, partner);
  }
  DSA_FORCEINLINE static reg lane_stages(reg x) { return lane_stage<4>(lane_stage<2>(lane_stage<1>(x))); }
  template <class T>
  DSA_FORCEINLINE static void store1(T* y, reg v) { avx2_store8(y, v); }
  template <bool Stream, class T>
  DSA_FORCEINLINE static void store_groups(T* y, const reg (&v)[groups]) {
    if constexpr (Stream) {
      avx2_stream8(y, v[0]);
    } else {
      avx2_store8(y, v[0]);
    }
  }
};
#endif
using hadamard_reg = hadamard_vec::reg;
inline constexpr index_t hadamard_lanes = hadamard_vec::lanes;
// Rows of at least this many floats take hadamard_row_simd.
inline constexpr index_t hadamard_simd_min_n = hadamard_lanes;

// The butterfly between two registers (same lanes, stride a multiple of the lanes).
DSA_FORCEINLINE void hadamard_pair(hadamard_reg& a, hadamard_reg& b) {
  const hadamard_reg u = a, v = b;
  a = hadamard_vec::add(u, v);
  b = hadamard_vec::sub(u, v);
}

// Butterflies between registers g apart within each group of 2g, for R registers (R, g powers
// of two). The loops have constant trip counts and are fully unrolled, so that `r` stays in
// registers.
template <int R, int G>
DSA_FORCEINLINE void hadamard_register_stage(hadamard_reg (&r)[8]) {
#pragma GCC unroll 8
  for (int i = 0; i < R; i += 2 * G) {
#pragma GCC unroll 8
    for (int j = i; j < i + G; ++j) hadamard_pair(r[j], r[j + G]);
  }
}

// Strides 1 .. lanes * R / 2 on R registers holding lanes * R consecutive floats (R = 1, 2, 4, 8).
template <int R>
DSA_FORCEINLINE void hadamard_block(hadamard_reg (&r)[8]) {
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) r[i] = hadamard_vec::lane_stages(r[i]);
  if constexpr (R >= 2) hadamard_register_stage<R, 1>(r);
  if constexpr (R >= 4) hadamard_register_stage<R, 2>(r);
  if constexpr (R >= 8) hadamard_register_stage<R, 4>(r);
}

// A whole row of n = lanes * R in registers: widen, butterflies, scale, narrow. Returns false,
// writing nothing, when the row holds a NaN.
template <int R, class T>
DSA_FORCEINLINE bool hadamard_short_row(const T* x, T* y, hadamard_reg sc) {
  constexpr int G = hadamard_vec::groups;
  hadamard_reg r[8];
  int nan = 0;
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    r[i] = hadamard_vec::load(x + hadamard_lanes * i);
    nan |= hadamard_vec::nan_lanes(r[i]);
  }
  if (nan != 0) return false;
  hadamard_block<R>(r);
  if constexpr (R < G) {
    hadamard_vec::store1(y, hadamard_vec::mul(r[0], sc));
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < R; i += G) {
      hadamard_reg out[G];
      for (int g = 0; g < G; ++g) out[g] = hadamard_vec::mul(r[i + g], sc);
      hadamard_vec::store_groups<false>(y + hadamard_lanes * i, out);
    }
  }
  return true;
}

// Strides h, 2h, .. (2^Stages - 1 of them) over the fp32 row s[0, n), h a multiple of 8 * lanes:
// each group of 2^Stages registers h apart goes through all of them in registers, `groups`
// groups (consecutive floats) at a time, for the ILP and so that the narrowing takes register
// pairs. The last pass (Last) scales and narrows into y instead of writing s back, with streaming
// stores if Stream (y then 64-byte aligned).
template <int Stages, bool Last, bool Stream, class T>
void hadamard_radix_pass(float* s, index_t n, index_t h, T* y, hadamard_reg sc) {
  constexpr int R = 1 << Stages;
  constexpr int G = hadamard_vec::groups;
  constexpr index_t L = hadamard_lanes;
  hadamard_reg r[G][8];
  for (index_t base = 0; base < n; base += h * R) {
    for (index_t j = base; j < base + h; j += G * L) {
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        for (int g = 0; g < G; ++g) r[g][i] = hadamard_vec::loadu(s + j + g * L + i * h);
      }
      for (int g = 0; g < G; ++g) {
        hadamard_register_stage<R, 1>(r[g]);
        if constexpr (R >= 4) hadamard_register_stage<R, 2>(r[g]);
        if constexpr (R >= 8) hadamard_register_stage<R, 4>(r[g]);
      }
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        if constexpr (Last) {
          hadamard_reg out[G];
          for (int g = 0; g < G; ++g) out[g] = hadamard_vec::mul(r[g][i], sc);
          hadamard_vec::store_groups<Stream>(y + j + i * h, out);
        } else {
          for (int g = 0; g < G; ++g) hadamard_vec::storeu(s + j + g * L + i * h, r[g][i]);
        }
      }
    }
  }
}

// One row of a power-of-two size n >= lanes (n <= 8 * lanes never touches `s`; longer rows use
// s[0, n) as their fp32 row; it may be y, never x). Returns false when the row holds a NaN,
// having written at most `s`: the caller then runs the scalar loops, so that NaN payloads
// propagate exactly as they always have. Stream: rows longer than 8 * lanes write y with
// streaming stores (cpu/arch/streaming_stores.hpp; y then 64-byte aligned and not `s`).
template <bool Stream, class T>
bool hadamard_row_simd(const T* x, T* y, index_t n, float scale, float* s) {
  constexpr index_t L = hadamard_lanes;
  const hadamard_reg sc = hadamard_vec::set1(scale);
  switch (n) {
    case L: return hadamard_short_row<1>(x, y, sc);
    case 2 * L: return hadamard_short_row<2>(x, y, sc);
    case 4 * L: return hadamard_short_row<4>(x, y, sc);
    case 8 * L: return hadamard_short_row<8>(x, y, sc);
    default: break;
  }
  // Strides 1 .. 4 * lanes per block of 8 registers, widened on the way in.
  hadamard_reg r[8];
  int nan = 0;
  constexpr index_t block = 8 * L;
  constexpr int block_bytes = static_cast<int>(block * sizeof(T));
  for (index_t b = 0; b < n; b += block) {
    // Measured with AVX-512 on n = 4096, 1 thread (docs/performance.md): reading bf16 x 4 KB
    // ahead (later in the row, then the next row's start) and fetching the output row for
    // writing (the last pass writes it in 2^k streams far apart) make bf16 1.3x faster, the
    // write alone fp32 1.1x; a read prefetch made fp32 slower at every distance tried (1-16 KB).
    if constexpr (std::is_same_v<T, bf16>) prefetch_read(prefetch_address(x + b, 4096), block_bytes);
    if constexpr (!Stream) prefetch_write(y + b, block_bytes);
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      r[i] = hadamard_vec::load(x + b + L * i);
      nan |= hadamard_vec::nan_lanes(r[i]);
    }
    hadamard_block<8>(r);
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) hadamard_vec::storeu(s + b + L * i, r[i]);
  }
  if (nan != 0) return false;
  // Strides 8 * lanes and up: radix-8 passes while three or more stages are left, then one
  // radix-8, -4 or -2 pass, which scales and narrows.
  index_t h = block;
  for (;;) {
    const index_t left = n / h;  // 2^(stages left)
    if (left <= 8) {
      if (left == 8) hadamard_radix_pass<3, true, Stream>(s, n, h, y, sc);
      if (left == 4) hadamard_radix_pass<2, true, Stream>(s, n, h, y, sc);
      if (left == 2) hadamard_radix_pass<1, true, Stream>(s, n, h, y, sc);
      return true;
    }
    hadamard_radix_pass<3, false, false>(s, n, h, y, sc);
    h *= 8;
  }
}

}  // namespace cpu_detail
#else
#define DSA_HADAMARD_SIMD_ROWS 0
#endif

template <>
struct op_impl<cpu_backend, hadamard_transform_op> {
  template <class T>
  static void run(const cpu_backend& be, tensor_view<const T, 2> x, tensor_view<T, 2> y, float scale) {
    const hadamard_plan plan = make_hadamard_plan(x.extent(1));
    // About 64K elements per task: enough work to pay for a thread.
    const index_t grain = std::max<index_t>(1, (index_t{1} << 16) / plan.n);
#if DSA_HADAMARD_SIMD_ROWS
    if (plan.base == 1 && plan.n >= cpu_detail::hadamard_simd_min_n) {
      // bf16 output rows longer than 128 can stream (fp32 ones are their own scratch below,
      // which measured faster from memory than a separate scratch and streaming stores).
      const bool stream = !std::is_same_v<T, float> && plan.n > 128 &&
                          cpu_detail::streaming_stores(be, static_cast<std::size_t>(y.size()) * sizeof(T));
      cpu_detail::parallel_for(be, x.extent(0), grain, [&](index_t begin, index_t end) {
        std::vector<float> scratch(static_cast<std::size_t>(plan.n));
        for (index_t r = begin; r < end; ++r) {
          T* yr = y.row(r);
          // An fp32 output row is its own scratch when it is not the input (in place, a row
          // with a NaN must still be there for the scalar loops): one 16 KB row less in the
          // caches at n = 4096, 30% faster from memory.
          float* s = scratch.data();
          bool done;
          if constexpr (std::is_same_v<T, float>) {
            if (x.row(r) != yr) s = yr;
            done = cpu_detail::hadamard_row_simd<false>(x.row(r), yr, plan.n, scale, s);
          } else {
            const bool stream_row = stream && cpu_detail::streaming_aligned(yr);
            done = stream_row ? cpu_detail::hadamard_row_simd<true>(x.row(r), yr, plan.n, scale, s)
                              : cpu_detail::hadamard_row_simd<false>(x.row(r), yr, plan.n, scale, s);
          }
          if (!done) transform_row(plan, x.row(r), yr, scale, scratch.data());  // a NaN in the row
        }
        if (stream) cpu_detail::streaming_fence();  // cheap if no row was aligned enough to stream
      });
      return;
    }
#endif
    cpu_detail::parallel_for(be, x.extent(0), grain, [&](index_t begin, index_t end) {
      std::vector<float> scratch(static_cast<std::size_t>(plan.base > 1 ? 2 * plan.n : plan.n));
      for (index_t r = begin; r < end; ++r) transform_row(plan, x.row(r), y.row(r), scale, scratch.data());
    });
  }

 private:
  // hadamard_butterflies (strides 1, 2, 4, ...) on s[0, len), two stages per pass.
  static void butterflies(float* s, index_t len) {
    index_t h = 1;
    if (len >= 4) {
      // Strides 1 and 2 within each aligned quadruple: written per quadruple so that the
      // compiler vectorises across quadruples.
      for (index_t k = 0; k < len; k += 4) {
        float* a = s + k;
        const float a1 = a[0] + a[1], b1 = a[0] - a[1];
        const float c1 = a[2] + a[3], d1 = a[2] - a[3];
        a[0] = a1 + c1;
        a[2] = a1 - c1;
        a[1] = b1 + d1;
        a[3] = b1 - d1;
      }
      h = 4;
    }
    for (; 4 * h <= len; h *= 4) {
      for (index_t i = 0; i < len; i += 4 * h) {
        float* a = s + i;
        float* b = a + h;
        float* c = b + h;
        float* d = c + h;
        for (index_t j = 0; j < h; ++j) {
          const float a1 = a[j] + b[j], b1 = a[j] - b[j];  // stride h
          const float c1 = c[j] + d[j], d1 = c[j] - d[j];
          a[j] = a1 + c1;  // stride 2h
          c[j] = a1 - c1;
          b[j] = b1 + d1;
          d[j] = b1 - d1;
        }
      }
    }
    if (h < len) {  // one stage left, stride len / 2
      float* a = s;
      float* b = s + h;
      for (index_t j = 0; j < h; ++j) {
        const float u = a[j], v = b[j];
        a[j] = u + v;
        b[j] = u - v;
      }
    }
  }

  // One row; `s` holds n floats, 2n for the c * 2^m sizes.
  template <class T>
  static void transform_row(const hadamard_plan& p, const T* xr, T* yr, float scale, float* s) {
    const index_t n = p.n;
    for (index_t j = 0; j < n; ++j) s[j] = to_float(xr[j]);
    for (int c = 0; c < p.base; ++c) butterflies(s + c * p.pow2, p.pow2);
    const float* res = s;
    if (p.base > 1) {
      float* out = s + n;
      for (int i = 0; i < p.base; ++i) {
        // hadamard_base_dot, vectorised over the offset within the block.
        float* o = out + i * p.pow2;
        const std::uint64_t neg = p.negative[i];
        for (index_t r = 0; r < p.pow2; ++r) o[r] = (neg & 1u) ? -s[r] : s[r];
        for (int j = 1; j < p.base; ++j) {
          const float* v = s + j * p.pow2;
          if ((neg >> j) & 1u) {
            for (index_t r = 0; r < p.pow2; ++r) o[r] -= v[r];
          } else {
            for (index_t r = 0; r < p.pow2; ++r) o[r] += v[r];
          }
        }
      }
      res = out;
    }
    for (index_t j = 0; j < n; ++j) yr[j] = from_float<T>(res[j] * scale);
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CPU_OP_INSTANCES(DSA_HADAMARD_INSTANCES)
