// CPU backend of dsa::fp8_linear, for both weight forms: the checkpoint's row-major codes
// (op_impl<cpu_backend, fp8_linear_op>) and a weight packed by pack_fp8_weight (the fp8_linear
// overload below, cpu/packed_fp8_weight.hpp). Included by cpu/linear.hpp, the CPU header of
// ops/linear.hpp; the micro-kernels it drives are kernels/fp8_*.hpp.
//
// The activation rows are quantized with act_quant's numerics (the vectorised
// group functions of cpu/fp8_quant.hpp) and their codes decoded to T = double (fp8_dot::exact)
// or float (fp8_dot::fp32). The weights are processed per panel of NR output features (NR
// divides 128, so a panel never straddles a weight-scale block) and per 128-wide k-block:
//  - the block's codes of the panel's rows are decoded into an L1 tile of bf16 pairs (every
//    e4m3 value is exact in bf16): AVX-512 loads 16 rows x 64 codes, transposes them as a
//    16 x 16 matrix of 4-code dwords, and decodes each dword column with 16-bit integer
//    operations into two vectors: lane j = (code k, code k + 2) and (k + 1, k + 3) of row j.
//    (Writing the values as fp32 instead took one 64-byte store per 16 codes, and stores were
//    the bottleneck: 1.4 cycles each on this CPU);
//  - decode (t <= 4 rows): a micro-kernel widens the pairs to T in registers and accumulates
//    t rows x NR outputs over NB blocks at once (each block's sum is an independent chain);
//    prefill (t > 4): the tile is widened once into a T tile [128][NR] and a register-blocked
//    micro-kernel (MR rows x NR outputs, x broadcast) runs over it for every MR rows;
//  - every output lane sums its block's products in ascending k from +0: exactly the
//    fp8_dot::fp32 definition of dsa/numerics/linear.hpp for T = float, and an exact sum (any
//    order is) for T = double, rounded once to fp32; then acc = fl32(acc + fl32(d * s)) in
//    ascending block order.
// Both paths compute every output with the same arithmetic in the same order, so results are
// independent of t (batch invariance), of the thread count (panels are split over threads;
// each output is computed by one thread) and of the ISA (GCC vector extensions: AVX-512, AVX2,
// SSE/NEON widths, or the scalar decode). Scratch (tiles, decoded activations) lives in
// thread-local buffers that grow to the largest call and are reused.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <string_view>
#include <type_traits>

#include "dsa/core/backend.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/arch/isa.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/cpu/kernels/fp8_block_dot.hpp"
#include "dsa/cpu/kernels/fp8_gemm.hpp"
#include "dsa/cpu/kernels/fp8_gemv.hpp"
#include "dsa/cpu/kernels/fp8_pair_tile.hpp"
#include "dsa/cpu/packed_fp8_weight.hpp"
#include "dsa/numerics/fp8_quant.hpp"
#include "dsa/numerics/linear.hpp"
#include "dsa/ops/fp8_quant.hpp"
#include "dsa/ops/linear.hpp"

DSA_NAMESPACE_BEGIN
namespace cpu_detail {

// ---- scratch ------------------------------------------------------------------------------------

/// A thread-local, 64-byte aligned buffer of at least n elements (Tag separates the buffers a
/// thread uses at once). It grows to the largest request and is kept for the next call.
template <class T, int Tag>
T* scratch(std::size_t n) {
  struct deleter {
    void operator()(T* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<T, deleter> buf;
  thread_local std::size_t cap = 0;
  if (n > cap) {
    const std::size_t bytes = (std::max<std::size_t>(n, 1) * sizeof(T) + 63) / 64 * 64;
    T* p = static_cast<T*>(std::aligned_alloc(64, bytes));
    if (p == nullptr) throw std::bad_alloc();
    buf.reset(p);
    cap = bytes / sizeof(T);
  }
  return buf.get();
}

// ---- activations --------------------------------------------------------------------------------

/// Quantizes rows [r0, r0 + rows) of x with act_quant (its CPU implementation, 1 x 128 groups):
/// the group scales into scales[rows][in / 128] and the codes' values times activation_scale
/// into vals as T, rows of `in` values, or packed = [in / 128][rows][128] (the GEMM's layout: a
/// block of every row of the chunk is contiguous).
template <class T, class X>
void quantize_rows(const cpu_backend& be, const tensor_view<const X, 2>& x, index_t r0, index_t rows,
                   scale_format fmt, T* vals, float* scales, bool packed = false) {
  const index_t in = x.extent(1);
  const index_t nkb = in / block;
  fp8_e4m3* codes = scratch<fp8_e4m3, 7>(static_cast<std::size_t>(rows * in));
  const tensor_view<const X, 2> xr(x.row(r0), {rows, in}, {x.stride(0), 1});
  op_impl<cpu_backend, act_quant_op>::run(be, xr, tensor_view<fp8_e4m3, 2>(codes, {rows, in}),
                                          tensor_view<float, 2>(scales, {rows, nkb}), act_quant_config{fmt, block});
  auto body = [&](index_t b, index_t e) {
    const T* values = e4m3_activation_values<T>();
    for (index_t i = b; i < e; ++i) {
      for (index_t kb = 0; kb < nkb; ++kb) {
        const std::uint8_t* c = code_bytes(codes + i * in + kb * block);
        T* dst = packed ? vals + (kb * rows + i) * block : vals + i * in + kb * block;
        for (index_t k = 0; k < block; ++k) dst[k] = values[c[k]];
      }
    }
  };
  if (rows * in >= (index_t{1} << 16)) {
    parallel_for(be, rows, 4, body);
  } else {
    body(0, rows);
  }
}

// ---- fp8_linear drivers -------------------------------------------------------------------------

/// Weights of at least this many bytes are split over threads by the GEMV; smaller ones run on
/// the calling thread (waking a worker costs more than it saves).
inline constexpr index_t gemv_parallel_bytes = index_t{1} << 16;

/// The rows of panel p (NR outputs from n0): pointers to their codes, or to zero_codes (which
/// never advance: step 0) past the last output.
template <index_t NR>
struct panel_rows {
  const std::uint8_t* base[NR];
  index_t step[NR];
  const std::uint8_t* at[NR];
  void init(const tensor_view<const fp8_e4m3, 2>& w, index_t n0) {
    const index_t nn = std::min(NR, w.extent(0) - n0);
    for (index_t j = 0; j < NR; ++j) {
      base[j] = j < nn ? code_bytes(w.row(n0 + j)) : zero_codes();
      step[j] = j < nn ? block : 0;
    }
  }
  const std::uint8_t* const* block_rows(index_t kb) {
    for (index_t j = 0; j < NR; ++j) at[j] = base[j] + kb * step[j];
    return at;
  }
};

/// f(r0, r1) for the ceil(t / max_rows) balanced parts [r0, r1) of rows [0, t), in order: each
/// at most max_rows rows, and with t > max_rows at least max_rows / 2 (the decode GEMVs' rows
/// beyond what one micro-kernel call holds).
template <class F>
DSA_FORCEINLINE void for_row_parts(index_t t, index_t max_rows, F&& f) {
  const index_t parts = (t + max_rows - 1) / max_rows;
  for (index_t p = 0, r0 = 0; p < parts; ++p) {
    const index_t r1 = t * (p + 1) / parts;
    f(r0, r1);
    r0 = r1;
  }
}

/// Where a driver's pair tiles come from: the checkpoint's row-major codes (transposed and
/// scanned for slow codes on the fly) or a packed weight (loaded as they are). panel(n0) selects
/// the NR outputs from n0, tile(kb, pt) decodes their block kb.
template <index_t NR>
struct row_major_tiles {
  const tensor_view<const fp8_e4m3, 2>& w;
  panel_rows<NR> rows{};
  void panel(index_t n0) { rows.init(w, n0); }
  void tile(index_t kb, std::uint32_t* pt) { decode_pair_tile<NR>(rows.block_rows(kb), pt); }
  void tiles(index_t kb0, int nb, std::uint32_t* pt, index_t tile_stride) {
    for (int b = 0; b < nb; ++b) tile(kb0 + b, pt + b * tile_stride);
  }
  const std::uint8_t* ahead(index_t, int) const { return nullptr; }
  template <class T>
  bool gemv_regs(index_t, int, index_t, const T*, index_t, float*) {
    return false;
  }
  template <class T>
  bool gemv_regs_all(index_t) const {
    return false;
  }
};
template <index_t NR>
struct packed_tiles {
  const packed_fp8_weight& w;
  index_t g0 = 0;
  void panel(index_t n0) { g0 = n0 / group_rows; }
  void tile(index_t kb, std::uint32_t* pt) { decode_packed_tile<NR>(w, g0, kb, pt); }
  /// Whether blocks [kb0, kb0 + nb) are exactly one run of the packed layout.
  bool whole_run(index_t kb0, int nb) const {
    return kb0 % packed_fp8_weight::block_run == 0 && w.quad_stride(kb0) == nb * 4 * group_rows;
  }
  /// The tiles of blocks [kb0, kb0 + nb) at pt + b * tile_stride (the decode GEMV's steps lie
  /// within one run: nb divides the run length).
  void tiles(index_t kb0, int nb, std::uint32_t* pt, index_t tile_stride) {
    constexpr index_t R = packed_fp8_weight::block_run;
    if (kb0 / R == (kb0 + nb - 1) / R) {
      if (ahead(kb0, nb) != nullptr) {
        decode_packed_run<NR, false>(w, g0, kb0, nb, pt, tile_stride);  // the micro-kernel prefetches
      } else {
        decode_packed_run<NR>(w, g0, kb0, nb, pt, tile_stride);
      }
    } else {
      for (int b = 0; b < nb; ++b) tile(kb0 + b, pt + b * tile_stride);
    }
  }
  /// Where the micro-kernel prefetches, one line per quad and block, spreading over its work the
  /// prefetches decode_packed_run would issue in one burst (a burst of 128 misses waits on the
  /// core's fill buffers: measured, exact t = 1 from DRAM 41% -> 55% of the read probe, fp32
  /// t = 4 50% -> 59%; with the two-block steps of the exact t = 3, 4 it measured slower). For
  /// whole runs of one group (the step is then one 8 KB stream); else null, and the decode
  /// prefetches.
  const std::uint8_t* ahead(index_t kb0, int nb) const {
    if constexpr (NR == group_rows) {
      if (nb == packed_fp8_weight::block_run && whole_run(kb0, nb)) return w.block_codes(g0, kb0) + packed_tile_prefetch;
    }
    (void)kb0, (void)nb;
    return nullptr;
  }
  /// The fp32 block dots of t <= gemv_max_rows<T> rows (x: rows ldx apart) for blocks
  /// [kb0, kb0 + nb) into d (gemv_micro's layout) without a pair tile, when this build, mode and
  /// step allow (else false, and the caller takes the tile path; never for t > 4).
  template <class T>
  bool gemv_regs(index_t kb0, int nb, index_t t, const T* x, index_t ldx, float* d) {
#if DSA_CPU_HAS_AVX512
    if constexpr (std::is_same_v<T, float> && NR == 16 && gemv_max_nb == 4) {
      if (!whole_run(kb0, nb)) return false;  // the kernel reads the step's blocks as one run
      // Full runs for every t; a shorter last run (in not a multiple of 512) with one row only,
      // the tile path takes it for more (fewer instantiations, a few blocks per row).
      if (nb == 4) {
        switch (t) {
          case 1: packed_gemv_fp32<1, 4>(w, g0, kb0, x, ldx, d); return true;
          case 2: packed_gemv_fp32<2, 4>(w, g0, kb0, x, ldx, d); return true;
          case 3: packed_gemv_fp32<3, 4>(w, g0, kb0, x, ldx, d); return true;
          case 4: packed_gemv_fp32<4, 4>(w, g0, kb0, x, ldx, d); return true;
          default: break;
        }
        // 5 to 32 rows: one part of t rows, or balanced parts of 4 to 8, the later parts' codes
        // from L1.
        if (t > gemv_max_rows<T>) return false;
        for_row_parts(t, 8, [&](index_t r0, index_t r1) {
          gemv_regs_rows(r1 - r0, kb0, x + r0 * ldx, ldx, d + r0 * 16, t);
        });
        return true;
      }
      if (t == 1) {
        switch (nb) {
          case 3: packed_gemv_fp32<1, 3>(w, g0, kb0, x, ldx, d); return true;
          case 2: packed_gemv_fp32<1, 2>(w, g0, kb0, x, ldx, d); return true;
          case 1: packed_gemv_fp32<1, 1>(w, g0, kb0, x, ldx, d); return true;
          default: return false;
        }
      }
      return false;
    }
#elif DSA_CPU_HAS_AVX2
    if constexpr (std::is_same_v<T, float> && NR == 16) {
      // 2 to 4 rows (one row is as fast through the tile: packed_gemv8_fp32); the step's blocks
      // lie in one run (nb = gemv_nb(t) divides the run length).
      constexpr index_t R = packed_fp8_weight::block_run;
      if (t < 2 || t > 4 || nb != gemv_nb<float>(t) || kb0 / R != (kb0 + nb - 1) / R) return false;
      switch (t) {
        case 2: packed_gemv8_fp32<2, gemv_nb<float>(2)>(w, g0, kb0, x, ldx, d); return true;
        case 3: packed_gemv8_fp32<3, gemv_nb<float>(3)>(w, g0, kb0, x, ldx, d); return true;
        default: packed_gemv8_fp32<4, gemv_nb<float>(4)>(w, g0, kb0, x, ldx, d); return true;
      }
    }
#endif
    (void)kb0, (void)nb, (void)t, (void)x, (void)ldx, (void)d;
    return false;
  }
#if DSA_CPU_HAS_AVX512
  /// 4 to 8 rows over a whole run: blocks 0-1, then 2-3, into d's blocks in order (each block
  /// drows rows of d).
  template <int MR>
  void gemv_regs_halves(index_t kb0, const float* x, index_t ldx, float* d, index_t drows) {
    packed_gemv_fp32<MR, 2>(w, g0, kb0, x, ldx, d, 0, drows);
    packed_gemv_fp32<MR, 2>(w, g0, kb0, x + 2 * block, ldx, d + 2 * drows * 16, 2, drows);
  }
  /// gemv_regs_halves for a runtime row count, 4 to 8.
  void gemv_regs_rows(index_t rows, index_t kb0, const float* x, index_t ldx, float* d, index_t drows) {
    switch (rows) {
      case 4: gemv_regs_halves<4>(kb0, x, ldx, d, drows); break;
      case 5: gemv_regs_halves<5>(kb0, x, ldx, d, drows); break;
      case 6: gemv_regs_halves<6>(kb0, x, ldx, d, drows); break;
      case 7: gemv_regs_halves<7>(kb0, x, ldx, d, drows); break;
      default: gemv_regs_halves<8>(kb0, x, ldx, d, drows); break;
    }
  }
#endif
  /// Whether gemv_regs takes every step of a t-row GEMV over this weight: the rows above 4 only
  /// run there (fp32 mode, AVX-512, whole runs), never on the tile path.
  template <class T>
  bool gemv_regs_all(index_t t) const {
#if DSA_CPU_HAS_AVX512
    if constexpr (std::is_same_v<T, float> && NR == 16 && gemv_max_nb == 4) {
      return t <= gemv_max_rows<T> && (w.in_features() / block) % packed_fp8_weight::block_run == 0;
    }
#endif
    (void)t;
    return false;
  }
};
template <index_t NR>
row_major_tiles<NR> tiles_of(const tensor_view<const fp8_e4m3, 2>& w) {
  return {w};
}
template <index_t NR>
packed_tiles<NR> tiles_of(const packed_fp8_weight& w) {
  return {w};
}
inline index_t out_features(const tensor_view<const fp8_e4m3, 2>& w) { return w.extent(0); }
inline index_t out_features(const packed_fp8_weight& w) { return w.out_features(); }
inline index_t in_features(const tensor_view<const fp8_e4m3, 2>& w) { return w.extent(1); }
inline index_t in_features(const packed_fp8_weight& w) { return w.in_features(); }

/// Where the fp8 kernels write y, its element type (bf16 or float) a runtime tag: they store
/// each output once, after its whole k loop, so the branch costs nothing there, while a type
/// parameter doubled every micro-kernel instantiated (and the build time of every translation
/// unit that calls fp8_linear). Rows are y.stride(0) apart, columns contiguous (the front-end's
/// contract).
struct fp8_out_rows {
  void* data;
  index_t ld;
  bool is_bf16;

  template <class O>
  explicit fp8_out_rows(const tensor_view<O, 2>& y)
      : data(y.data_handle()), ld(y.stride(0)), is_bf16(std::is_same_v<O, bf16>) {
    static_assert(std::is_same_v<O, bf16> || std::is_same_v<O, float>);
  }

  /// y(y0 + i, n0 + j) = acc[i * nr + j] rounded once, for i < rows and j < nn.
  void store_panel(index_t y0, index_t rows, index_t n0, index_t nn, const float* acc, index_t nr) const {
    for (index_t i = 0; i < rows; ++i) {
      const float* ar = acc + i * nr;
      if (is_bf16) {
        bf16* yr = static_cast<bf16*>(data) + (y0 + i) * ld + n0;
        for (index_t j = 0; j < nn; ++j) yr[j] = from_float<bf16>(ar[j]);
      } else {
        float* yr = static_cast<float*>(data) + (y0 + i) * ld + n0;
        for (index_t j = 0; j < nn; ++j) yr[j] = ar[j];
      }
    }
  }
};

/// Whether fp8_gemv takes t rows of this weight (else the prefill GEMM): t <= gemv_tile_rows,
/// more where the register kernel takes every step (fp32 mode, packed), or, in the exact mode,
/// up to gemv_max_rows through the tile GEMV in parts of at most gemv_tile_rows rows.
template <class T, class Codes>
bool fp8_gemv_takes(index_t t, const Codes& w) {
  using shape = fp8_shape<T>;
  if (t <= gemv_tile_rows<T>) return true;
  if constexpr (std::is_same_v<T, double>) return t <= gemv_max_rows<T>;
  return tiles_of<shape::gemv_nr>(w).template gemv_regs_all<T>(t);
}

/// Decode (fp8_gemv_takes): panels of NR outputs split over threads; each panel walks the
/// k-blocks nb at a time: nb pair tiles, the micro-kernel calls for all rows (one, or one per
/// part of at most gemv_tile_rows rows over one block), then every block's promotion in
/// ascending order.
template <class T, index_t NR, class Codes>
void fp8_gemv(const cpu_backend& be, const T* xv, const float* xs, index_t t, const Codes& w,
              const tensor_view<const float, 2>& ws, const fp8_out_rows& y) {
  const index_t in = in_features(w);
  const index_t out = out_features(w);
  const index_t nkb = in / block;
  const index_t panels = (out + NR - 1) / NR;
  // The register kernel's rows (fp32, more than the tile GEMV takes): whole runs (gemv_regs_all);
  // the tile GEMV's: gemv_nb of its call's rows (one block for parts of gemv_tile_rows rows, so
  // that a part's rows are contiguous in d).
  const bool parts = t > gemv_tile_rows<T>;
  const int nb_max = parts && std::is_same_v<T, float> ? gemv_max_nb : gemv_nb<T>(std::min(t, gemv_tile_rows<T>));
  constexpr index_t tile_stride = (NR / group_rows) * pair_tile_dwords;
  auto body = [&](index_t p0, index_t p1) {
    std::uint32_t* pt = scratch<std::uint32_t, 1>(static_cast<std::size_t>(gemv_max_nb * tile_stride));
    float* d = scratch<float, 2>(static_cast<std::size_t>(gemv_max_nb * gemv_max_rows<T> * NR));
    alignas(64) float acc[gemv_max_rows<T> * NR];
    auto tiles = tiles_of<NR>(w);
    for (index_t p = p0; p < p1; ++p) {
      const index_t n0 = p * NR;
      tiles.panel(n0);
      std::fill(acc, acc + t * NR, 0.0f);
      const float* wsr = ws.row(n0 / block);
      for (index_t kb0 = 0; kb0 < nkb; kb0 += nb_max) {
        const int nb = static_cast<int>(std::min<index_t>(nb_max, nkb - kb0));
        if (!tiles.gemv_regs(kb0, nb, t, xv + kb0 * block, in, d)) {
          tiles.tiles(kb0, nb, pt, tile_stride);
          if (!parts) {
            gemv_micro_call<T, NR>(static_cast<int>(t), nb, xv + kb0 * block, in, pt, tile_stride, d, tiles.ahead(kb0, nb));
          } else {
            // Parts of at most gemv_tile_rows rows (nb = 1: row i at d + i * NR); the first
            // streams the next codes, the others read the tile from L1.
            for_row_parts(t, gemv_tile_rows<T>, [&](index_t r0, index_t r1) {
              gemv_micro_call<T, NR>(static_cast<int>(r1 - r0), nb, xv + r0 * in + kb0 * block, in, pt, tile_stride,
                                     d + r0 * NR, r0 == 0 ? tiles.ahead(kb0, nb) : nullptr);
            });
          }
        }
        for (int b = 0; b < nb; ++b) {
          const float wscale = wsr[kb0 + b];
          for (index_t i = 0; i < t; ++i) {
            promote<NR>(acc + i * NR, d + (b * t + i) * NR, fp8_linear_block_scale(xs[i * nkb + kb0 + b], wscale));
          }
        }
      }
      y.store_panel(0, t, n0, std::min(NR, out - n0), acc, NR);
    }
  };
  if (out * in >= gemv_parallel_bytes) {
    parallel_for(be, panels, 1, body);
  } else {
    body(0, panels);
  }
}

/// Prefill: rows [0, rows) of a chunk (decoded activations xv [rows][in], scales xs) into
/// y.row(y0 + i). Panels of NR outputs split over threads; per panel and block: the pair tile,
/// widened once into a T tile, then MR rows at a time through the micro-kernel and the
/// promotion.
template <class T, index_t NR, int MR, class Codes>
void fp8_gemm(const cpu_backend& be, const T* xv, const float* xs, index_t rows, const Codes& w,
              const tensor_view<const float, 2>& ws, const fp8_out_rows& y, index_t y0) {
  const index_t in = in_features(w);
  const index_t out = out_features(w);
  const index_t nkb = in / block;
  const index_t panels = (out + NR - 1) / NR;
  parallel_for(be, panels, 1, [&](index_t p0, index_t p1) {
    std::uint32_t* pt = scratch<std::uint32_t, 1>(static_cast<std::size_t>((NR / group_rows) * pair_tile_dwords));
    T* tile = scratch<T, 3>(static_cast<std::size_t>(block * NR));
    float* d = scratch<float, 2>(static_cast<std::size_t>(MR * NR));
    float* acc = scratch<float, 4>(static_cast<std::size_t>(rows * NR));
    auto tiles = tiles_of<NR>(w);
    for (index_t p = p0; p < p1; ++p) {
      const index_t n0 = p * NR;
      tiles.panel(n0);
      std::fill(acc, acc + rows * NR, 0.0f);
      const float* wsr = ws.row(n0 / block);
      for (index_t kb = 0; kb < nkb; ++kb) {
        tiles.tile(kb, pt);
        widen_tile<T, NR>(pt, tile);
        gemm_block_rows<T, NR, MR>(rows, xv + kb * rows * block, tile, d, acc, xs, nkb, kb, wsr[kb]);
      }
      y.store_panel(y0, rows, n0, std::min(NR, out - n0), acc, NR);
    }
  });
}

template <class T, class X, class Codes>
void fp8_linear_run(const cpu_backend& be, const tensor_view<const X, 2>& x, const Codes& w,
                    const tensor_view<const float, 2>& ws, const fp8_out_rows& y, scale_format fmt) {
  using shape = fp8_shape<T>;
  const index_t t = x.extent(0);
  const index_t in = x.extent(1);
  const index_t nkb = in / block;
  if (fp8_gemv_takes<T>(t, w)) {
    // Decode: the activations are a few KB (decoded on the calling thread's scratch, read by
    // every worker); the weights stream once. 5 to 32 rows (a batched decode step) where the
    // tile GEMV (exact mode, AVX-512) or the register kernel (fp32 mode, packed) takes them: it
    // decodes each code once for all rows, where the prefill path below stores and reloads a
    // widened tile per block (23-37% of the FMA peak at 8 rows).
    T* xv = scratch<T, 5>(static_cast<std::size_t>(t * in));
    float* xs = scratch<float, 6>(static_cast<std::size_t>(t * nkb));
    quantize_rows(be, x, 0, t, fmt, xv, xs);
    fp8_gemv<T, shape::gemv_nr>(be, xv, xs, t, w, ws, y);
    return;
  }
  // Prefill: rows in chunks of about 8 MiB of decoded activations (each chunk decodes the
  // weights once more), MR rows per micro-kernel call.
  // The chunks are balanced (t = 256 is two chunks of 128, not 252 + 4: each chunk decodes the
  // whole weight).
  constexpr index_t mr = shape::gemm_mr;
  const index_t by_size = (index_t{8} << 20) / (in * static_cast<index_t>(sizeof(T)));
  const index_t chunk_max = std::clamp<index_t>(by_size / mr * mr, 4 * mr, 256 / mr * mr);
  const index_t chunks = (t + chunk_max - 1) / chunk_max;
  const index_t chunk = ((t + chunks - 1) / chunks + mr - 1) / mr * mr;
  const index_t rows_max = std::min(chunk, t);
  T* xv = scratch<T, 5>(static_cast<std::size_t>(rows_max * in));
  float* xs = scratch<float, 6>(static_cast<std::size_t>(rows_max * nkb));
  for (index_t r0 = 0; r0 < t; r0 += chunk) {
    const index_t rows = std::min(chunk, t - r0);
    quantize_rows(be, x, r0, rows, fmt, xv, xs, true);
    fp8_gemm<T, shape::gemm_nr, static_cast<int>(mr)>(be, xv, xs, rows, w, ws, y, r0);
  }
}

template <class O>
void fill_zero(const cpu_backend& be, const tensor_view<O, 2>& y) {
  parallel_for(be, y.extent(0), 64, [&](index_t b, index_t e) {
    for (index_t i = b; i < e; ++i) {
      O* yr = y.row(i);
      for (index_t j = 0; j < y.extent(1); ++j) yr[j] = from_float<O>(0.0f);
    }
  });
}

/// fp8_linear of either weight form in the backend's block-dot mode (in == 0: zeros).
template <class X, class Codes, class O>
void fp8_linear_dispatch(const cpu_backend& be, const tensor_view<const X, 2>& x, const Codes& w,
                         const tensor_view<const float, 2>& ws, const tensor_view<O, 2>& y, scale_format fmt) {
  if (x.extent(1) == 0) {
    fill_zero(be, y);
  } else if (be.fp8_block_dot == fp8_dot::fp32) {
    fp8_linear_run<float>(be, x, w, ws, fp8_out_rows(y), fmt);
  } else {
    fp8_linear_run<double>(be, x, w, ws, fp8_out_rows(y), fmt);
  }
}

}  // namespace cpu_detail

template <>
struct op_impl<cpu_backend, fp8_linear_op> {
  template <class X, class O>
  static void run(const cpu_backend& be, tensor_view<const X, 2> x, tensor_view<const fp8_e4m3, 2> w,
                  tensor_view<const float, 2> w_scale, tensor_view<O, 2> y, scale_format act_format) {
    cpu_detail::fp8_linear_dispatch(be, x, w, w_scale, y, act_format);
  }
  // The workspace overload: the CPU's kernels keep their own scratch and ignore it.
  template <class X, class O>
  static void run(const cpu_backend& be, tensor_view<const X, 2> x, tensor_view<const fp8_e4m3, 2> w,
                  tensor_view<const float, 2> w_scale, tensor_view<O, 2> y, scale_format act_format,
                  tensor_view<std::byte, 1> /*workspace*/) {
    cpu_detail::fp8_linear_dispatch(be, x, w, w_scale, y, act_format);
  }
};

/// y [t, out] = x [t, in] . dequant(w)^T as dsa::fp8_linear, with w packed by pack_fp8_weight
/// (cpu/packed_fp8_weight.hpp): the same bits as fp8_linear with the weight it was packed from,
/// in both block-dot modes, without transposing the codes on every call (the decode GEMV's
/// largest cost). Argument checks and errors as fp8_linear's.
template <class XT, class O>
void fp8_linear(const cpu_backend& be, host_view<XT, 2> x, const packed_fp8_weight& w, host_view<const float, 2> w_scale,
                host_view<O, 2> y, scale_format act_format = scale_format::ue8m0) {
  static_assert(detail::is_bf16_or_float<XT>, "dsa::fp8_linear: x must hold dsa::bf16 or float");
  static_assert(std::is_same_v<O, bf16> || std::is_same_v<O, float>, "dsa::fp8_linear: y must hold dsa::bf16 or float");
  using X = std::remove_const_t<XT>;
  constexpr std::string_view op = "fp8_linear";
  const host_view<const X, 2> xc(x.data_handle(), x.extents(), x.strides());
  if (w.group_rows() != packed_fp8_group_rows) {
    fail(op, "w.group_rows()", w.group_rows(), "the rows per group of this build's vectors (packed by code built for other ones)");
  }
  detail::check_fp8_linear_operands(op, xc, w.out_features(), w_scale, y, act_format);
  if (w.in_features() != xc.extent(1)) fail(op, "w.in_features()", w.in_features(), "x.extent(1), the input features");
  if (y.empty()) return;
  cpu_detail::fp8_linear_dispatch(be, xc, w, w_scale, y, act_format);
}

DSA_NAMESPACE_END

// The packed-weight fp8_linear's instances for dsa's own programs (dsa/core/op_instances.hpp;
// CPU only, so B is unused).
#define DSA_CPU_PACKED_FP8_LINEAR_INSTANCES(X, B) \
  X(void fp8_linear<float, float>(const cpu_backend&, host_view<float, 2>, const packed_fp8_weight&, host_view<const float, 2>, host_view<float, 2>, scale_format)) \
  X(void fp8_linear<float, bf16>(const cpu_backend&, host_view<float, 2>, const packed_fp8_weight&, host_view<const float, 2>, host_view<bf16, 2>, scale_format)) \
  X(void fp8_linear<const float, float>(const cpu_backend&, host_view<const float, 2>, const packed_fp8_weight&, host_view<const float, 2>, host_view<float, 2>, scale_format)) \
  X(void fp8_linear<const float, bf16>(const cpu_backend&, host_view<const float, 2>, const packed_fp8_weight&, host_view<const float, 2>, host_view<bf16, 2>, scale_format)) \
  X(void fp8_linear<bf16, float>(const cpu_backend&, host_view<bf16, 2>, const packed_fp8_weight&, host_view<const float, 2>, host_view<float, 2>, scale_format)) \
  X(void fp8_linear<bf16, bf16>(const cpu_backend&, host_view<bf16, 2>, const packed_fp8_weight&, host_view<const float, 2>, host_view<bf16, 2>, scale_format)) \
  X(void fp8_linear<const bf16, float>(const cpu_backend&, host_view<const bf16, 2>, const packed_fp8_weight&, host_view<const float, 2>, host_view<float, 2>, scale_format)) \
  X(void fp8_linear<const bf16, bf16>(const cpu_backend&, host_view<const bf16, 2>, const packed_fp8_weight&, host_view<const float, 2>, host_view<bf16, 2>, scale_format))
DSA_DECLARE_CPU_OP_INSTANCES(DSA_CPU_PACKED_FP8_LINEAR_INSTANCES)
