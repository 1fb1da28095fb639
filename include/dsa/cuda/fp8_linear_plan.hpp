// How the CUDA backend runs one fp8_linear call: which kernel, and for the tensor-core paths the
// operand layouts, leading dimensions and workspace offsets. A pure host function of the shapes,
// strides, alignments and the GPU's compute capability, so that a host test checks every
// decision without a GPU (tests/numerics/test_fp8_linear_plan.cpp); dsa/cuda/linear.cuh follows
// the plan it returns.
//
// The paths (docs/cuda.md, "fp8_linear on the GPU"):
//   exact_gemv / exact_tiled  the exact kernels, bit-identical to the CPU backend: every call with
//       cuda_kernel_path::exact or without a workspace, and decode rows (t <= 8) where the GEMV is
//       the faster of the two (fp8_linear_decode_kernel);
//   cublaslt   cuBLASLt's block-scaled FP8 GEMM on Hopper (sm_90): the activations quantized on
//       the device by act_quant's numerics into the workspace, their 1 x 128 scales written
//       transposed (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F reads them k-block-major: [in / 128]
//       rows of t), the weight's 128 x 128 scales (BLK128x128_32F: [ceil(out / 128)] rows of
//       round_up(in / 128, 4)) used in place when the checkpoint's tensor already has that
//       layout, else repacked into the workspace; fast accumulation off;
//   bf16_gemm  where cuBLASLt cannot run (another architecture, an odd shape or stride, or no
//       algorithm at run time): the quantized activations dequantized to bf16, the weight
//       dequantized to bf16 in slabs of 128-row blocks, cuBLAS's bf16 GEMM with fp32
//       accumulation per slab. Tensor cores everywhere (sm_80+), never the fp64 exact kernel.
// cuBLAS is column-major: y [t, out] row-major is D [out, t] column-major, D = op(A) . B with
// A = w (CUBLAS_OP_T: w [out, in] row-major is [in, out] column-major, lda = w's row stride),
// B = the activation codes [in, t] column-major (ldb = in), ldd = y's row stride. Hopper's FP8
// GEMMs take only this "TN" form.
//
// Host-only and plain C++ (no CUDA header): g++ compiles it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/numerics/linear.hpp"

DSA_NAMESPACE_BEGIN

/// The kernel that runs an fp8_linear call on the CUDA backend.
enum class fp8_linear_path : unsigned char {
  exact_gemv,   ///< the exact decode GEMV (t <= 8)
  exact_tiled,  ///< the exact tiled kernel
  cublaslt,     ///< cuBLASLt's block-scaled FP8 GEMM
  bf16_gemm,    ///< dequantized operands, cuBLAS's bf16 GEMM (the tensor-core fallback)
};

inline const char* to_string(fp8_linear_path p) {
  switch (p) {
    case fp8_linear_path::exact_gemv: return "exact_gemv";
    case fp8_linear_path::exact_tiled: return "exact_tiled";
    case fp8_linear_path::cublaslt: return "cublaslt";
    case fp8_linear_path::bf16_gemm: return "bf16_gemm";
  }
  return "?";
}

/// Rows of y up to which the exact path runs the decode GEMV.
inline constexpr index_t fp8_linear_gemv_max_rows = 8;

/// What a plan depends on: the shapes, the strides (elements) and the 16-byte alignment of the
/// operands' base addresses.
struct fp8_linear_problem {
  index_t t = 0, in = 0, out = 0;
  index_t w_row_stride = 0;        ///< w's row stride (e4m3 codes, so also bytes)
  index_t w_scale_row_stride = 0;  ///< w_scale's row stride (floats)
  index_t y_row_stride = 0;        ///< y's row stride (elements)
  index_t y_element_bytes = 2;     ///< 2 (bf16) or 4 (float)
  bool w_aligned16 = true;
  bool w_scale_aligned16 = true;
  bool y_aligned16 = true;
};

/// The decode rows' choice between the GEMV and the tensor cores (fp8_linear_decode_kernel).
enum class fp8_decode_kernel : unsigned char { gemv, tensor_cores };

/// Where each part lives in the workspace (byte offsets, 256-byte aligned) and the leading
/// dimensions cuBLAS gets (elements).
struct fp8_linear_plan {
  fp8_linear_path path = fp8_linear_path::exact_tiled;
  /// cuBLAS's problem: m = out, n = t, k = in; A = w (lda), B = the codes (ldb), D = y (ldd).
  index_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldd = 0;
  /// The activation codes [t, in] (row stride in) and their 1 x 128 scales: cublaslt writes
  /// them transposed, [in / 128, t] (act_scale_row_stride = 1 element between rows of x,
  /// act_scale_col_stride = t between k-blocks); bf16_gemm row-major [t, in / 128].
  index_t codes_offset = 0, act_scales_offset = 0;
  index_t act_scale_row_stride = 0, act_scale_col_stride = 0;
  /// cublaslt: the weight's scales as BLK128x128_32F reads them, [ceil(out / 128), L4] with L4 =
  /// round_up(in / 128, 4): w_scale itself (repack_weight_scales false) or a zero-padded copy at
  /// weight_scales_offset.
  bool repack_weight_scales = false;
  index_t weight_scales_offset = 0, weight_scales_ld = 0;
  /// cublaslt: the scratch cuBLASLt's algorithms may use (CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES).
  index_t cublaslt_workspace_offset = 0, cublaslt_workspace_bytes = 0;
  /// bf16_gemm: the dequantized activations [t, in] bf16 and one slab of the dequantized weight,
  /// [slab_rows, in] bf16 (slab_rows a multiple of 128, or out).
  index_t x_bf16_offset = 0, slab_offset = 0, slab_rows = 0;
  /// Why this path: a short sentence (tests and docs).
  const char* reason = "";
};

namespace detail {

constexpr index_t round_up(index_t v, index_t m) { return (v + m - 1) / m * m; }
inline constexpr index_t fp8_plan_alignment = 256;
/// cuBLASLt's scratch: room for split-k partial sums of up to 16 splits of D, 1 to 32 MiB (the
/// size NVIDIA's samples give Hopper GEMMs).
constexpr index_t fp8_cublaslt_scratch_bytes(index_t t, index_t out) {
  return std::min<index_t>(index_t{32} << 20, std::max<index_t>(index_t{1} << 20, round_up(64 * t * out, 256)));
}
/// Rows of one dequantized weight slab of the bf16 fallback: 128-row blocks up to 16 MiB of bf16.
constexpr index_t fp8_bf16_slab_rows(index_t in, index_t out) {
  const index_t blocks = std::max<index_t>(1, (index_t{16} << 20) / (2 * in * fp8_linear_block));
  return std::min(out, blocks * fp8_linear_block);
}

/// The two tensor-core layouts; plan_fp8_linear fills the rest.
inline fp8_linear_plan fp8_cublaslt_layout(const fp8_linear_problem& p) {
  fp8_linear_plan plan;
  const index_t nkb = p.in / fp8_linear_block;
  const index_t nb_out = (p.out + fp8_linear_block - 1) / fp8_linear_block;
  const index_t l4 = round_up(nkb, 4);
  index_t at = 0;
  plan.codes_offset = at;
  at = round_up(at + p.t * p.in, fp8_plan_alignment);
  plan.act_scales_offset = at;
  plan.act_scale_row_stride = 1;
  plan.act_scale_col_stride = p.t;
  at = round_up(at + 4 * nkb * p.t, fp8_plan_alignment);
  plan.weight_scales_offset = at;
  plan.weight_scales_ld = l4;
  at = round_up(at + 4 * nb_out * l4, fp8_plan_alignment);
  plan.cublaslt_workspace_offset = at;
  plan.cublaslt_workspace_bytes = fp8_cublaslt_scratch_bytes(p.t, p.out);
  // The checkpoint's [ceil(out / 128), in / 128] scales are BLK128x128's layout when their rows
  // are exactly L4 apart and no padding entry would be read past the tensor: in / 128 a multiple
  // of 4 and contiguous rows (any stride for one row), 16-byte aligned.
  plan.repack_weight_scales =
      !(nkb % 4 == 0 && (nb_out == 1 || p.w_scale_row_stride == nkb) && p.w_scale_aligned16);
  return plan;
}

inline index_t fp8_cublaslt_layout_bytes(const fp8_linear_plan& plan) {
  return plan.cublaslt_workspace_offset + plan.cublaslt_workspace_bytes;
}

inline fp8_linear_plan fp8_bf16_layout(const fp8_linear_problem& p) {
  fp8_linear_plan plan;
  const index_t nkb = p.in / fp8_linear_block;
  index_t at = 0;
  plan.codes_offset = at;
  at = round_up(at + p.t * p.in, fp8_plan_alignment);
  plan.act_scales_offset = at;
  plan.act_scale_row_stride = nkb;
  plan.act_scale_col_stride = 1;
  at = round_up(at + 4 * nkb * p.t, fp8_plan_alignment);
  plan.x_bf16_offset = at;
  at = round_up(at + 2 * p.t * p.in, fp8_plan_alignment);
  plan.slab_offset = at;
  plan.slab_rows = fp8_bf16_slab_rows(p.in, p.out);
  return plan;
}

inline index_t fp8_bf16_layout_bytes(const fp8_linear_plan& plan, index_t in) {
  return plan.slab_offset + 2 * plan.slab_rows * in;
}

}  // namespace detail

/// Bytes of scratch memory the workspace overload of fp8_linear may use for x [t, in] and a
/// weight of `out` rows on the CUDA backend: the larger of the cuBLASLt layout and the bf16
/// fallback's (which of the two runs is known only on the device), 0 for an empty product.
/// A pure function of the shapes (t, out >= 0; in a multiple of 128).
inline index_t fp8_linear_workspace_size(index_t t, index_t in, index_t out) {
  constexpr const char* op = "fp8_linear_workspace_size";
  check(t >= 0, op, "t", t, ">= 0");
  check(out >= 0, op, "out", out, ">= 0");
  check(in >= 0 && in % fp8_linear_block == 0, op, "in", in, "a multiple of 128 (>= 0)");
  if (t == 0 || in == 0 || out == 0) return 0;
  fp8_linear_problem p;
  p.t = t;
  p.in = in;
  p.out = out;
  return std::max(detail::fp8_cublaslt_layout_bytes(detail::fp8_cublaslt_layout(p)),
                  detail::fp8_bf16_layout_bytes(detail::fp8_bf16_layout(p), in));
}

/// The choice for decode rows (t <= 8) before anything was measured: the GEMV streams the weight
/// once at up to 4 rows, where its exact fp64 products ask for at most 8 DFMA flops per weight
/// byte (27 TFLOP/s at an H100's 3.35 TB/s, under half its fp64 peak); from 5 rows its fp64 rate
/// and the activations it quantizes again for every 8 columns bound it, and the tensor cores take
/// over. The benchmark measures both (bench/cuda/bench_cuda_dense.cpp) and records its choice
/// with record_fp8_linear_decode_kernel.
constexpr fp8_decode_kernel fp8_linear_decode_heuristic(index_t t, index_t /*in*/, index_t /*out*/) {
  return t <= 4 ? fp8_decode_kernel::gemv : fp8_decode_kernel::tensor_cores;
}

namespace detail {
struct fp8_decode_choices {
  std::mutex mutex;
  std::map<std::tuple<int, index_t, index_t, index_t>, fp8_decode_kernel> chosen;
};
inline fp8_decode_choices& fp8_decode_choice_table() {
  static fp8_decode_choices table;
  return table;
}
}  // namespace detail

/// The decode kernel of (device, t, in, out), chosen once per process: the first call records
/// fp8_linear_decode_heuristic's answer (or one record_fp8_linear_decode_kernel gave before) and
/// every later call returns it, so a shape never changes kernels, hence bits, within a run.
/// Thread-safe.
inline fp8_decode_kernel fp8_linear_decode_kernel(int device, index_t t, index_t in, index_t out) {
  auto& table = detail::fp8_decode_choice_table();
  const std::lock_guard<std::mutex> lock(table.mutex);
  return table.chosen.try_emplace({device, t, in, out}, fp8_linear_decode_heuristic(t, in, out)).first->second;
}

/// Records the decode kernel of (device, t, in, out), e.g. the faster one a measurement found,
/// replacing an earlier choice. Calls made before it keep the kernel they ran.
inline void record_fp8_linear_decode_kernel(int device, index_t t, index_t in, index_t out, fp8_decode_kernel k) {
  auto& table = detail::fp8_decode_choice_table();
  const std::lock_guard<std::mutex> lock(table.mutex);
  table.chosen[{device, t, in, out}] = k;
}

/// The bf16 fallback's plan of a problem: the quantized activations dequantized to bf16 and the
/// weight in slabs, cuBLAS's bf16 GEMM with D = y through y's row stride (cuBLAS's m x n = out x t
/// column-major). `reason` says why it runs.
inline fp8_linear_plan plan_fp8_linear_bf16(const fp8_linear_problem& p, const char* reason) {
  fp8_linear_plan plan = detail::fp8_bf16_layout(p);
  plan.path = fp8_linear_path::bf16_gemm;
  plan.reason = reason;
  plan.m = p.out;
  plan.n = p.t;
  plan.k = p.in;
  plan.lda = p.in;  // the dequantized slab is contiguous
  plan.ldb = p.in;  // so are the dequantized activations
  plan.ldd = p.t <= 1 ? std::max<index_t>(p.out, 1) : p.y_row_stride;
  return plan;
}

/// The plan of one call. `fast`: cuda_kernel_path::fast and a workspace of
/// fp8_linear_workspace_size bytes were given; `cc_major`: the GPU's compute capability;
/// `decode`: the decode rows' choice (fp8_linear_decode_kernel; used when t <= 8).
inline fp8_linear_plan plan_fp8_linear(const fp8_linear_problem& p, bool fast, int cc_major, fp8_decode_kernel decode) {
  const auto exact = [&](const char* why) {
    fp8_linear_plan plan;
    plan.path = p.t <= fp8_linear_gemv_max_rows ? fp8_linear_path::exact_gemv : fp8_linear_path::exact_tiled;
    plan.reason = why;
    return plan;
  };
  if (!fast) return exact("the exact kernels were asked for (cuda_kernel_path::exact, or no workspace)");
  if (p.t <= fp8_linear_gemv_max_rows && decode == fp8_decode_kernel::gemv) {
    return exact("decode rows: the GEMV is the faster kernel for this shape");
  }
  const auto fits = [](index_t v) { return v >= 0 && v <= 0x7FFFFFFF; };
  const auto aligned_ld = [](index_t ld_bytes) { return ld_bytes % 16 == 0; };
  const index_t ldd = p.t <= 1 ? std::max<index_t>(p.out, 1) : p.y_row_stride;
  const index_t lda = p.out <= 1 ? p.in : p.w_row_stride;
  const char* not_lt = nullptr;
  if (cc_major != 9) {
    not_lt = "cuBLASLt's 1 x 128 and 128 x 128 FP8 block scaling runs on Hopper (sm_90) only";
  } else if (p.out % 16 != 0) {
    not_lt = "FP8 GEMMs need the output features (cuBLAS's m) to be a multiple of 16";
  } else if (!p.w_aligned16 || !aligned_ld(lda)) {
    not_lt = "FP8 GEMMs need w 16-byte aligned with a row stride that is a multiple of 16 bytes";
  } else if (!p.y_aligned16 || !aligned_ld(ldd * p.y_element_bytes) || ldd < p.out) {
    not_lt = "cuBLASLt needs y 16-byte aligned with a row stride that is a multiple of 16 bytes";
  } else if (!fits(p.t) || !fits(p.in) || !fits(p.out) || !fits(lda) || !fits(ldd)) {
    not_lt = "a dimension or leading dimension does not fit int32";
  }
  if (not_lt != nullptr && (ldd < p.out || !fits(ldd) || !fits(p.t) || !fits(p.in) || !fits(p.out))) {
    // cuBLAS's GEMM writes D through a positive leading dimension of at least m.
    return exact("y's rows are not a leading dimension cuBLAS can write (reversed, broadcast or too far apart)");
  }
  if (not_lt != nullptr && p.t <= fp8_linear_gemv_max_rows) {
    // Without cuBLASLt's FP8 the tensor cores would need the weight dequantized first (5 bytes of
    // traffic per weight element instead of the GEMV's 1): decode rows stay on the GEMV.
    return exact("decode rows where cuBLASLt cannot run: the GEMV reads the weight once, the bf16 fallback "
                 "would dequantize it first");
  }
  if (not_lt != nullptr) return plan_fp8_linear_bf16(p, not_lt);
  fp8_linear_plan plan = detail::fp8_cublaslt_layout(p);
  plan.path = fp8_linear_path::cublaslt;
  plan.reason = "Hopper, aligned operands: cuBLASLt's block-scaled FP8 GEMM";
  plan.m = p.out;
  plan.n = p.t;
  plan.k = p.in;
  plan.lda = lda;
  plan.ldb = p.in;
  plan.ldd = ldd;
  return plan;
}

/// The bf16 fallback's plan for a problem planned for cuBLASLt that found no algorithm at run
/// time (the same workspace holds it: fp8_linear_workspace_size covers both).
inline fp8_linear_plan plan_fp8_linear_fallback(const fp8_linear_problem& p) {
  return plan_fp8_linear_bf16(p, "cuBLASLt returned no algorithm for this problem");
}

DSA_NAMESPACE_END
