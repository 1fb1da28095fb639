// CUDA backend of dsa::fp8_linear and dsa::linear (kernels: kernels/linear_kernel.cuh).
//
// fp8_linear without a workspace, or with cuda_kernel_path::exact: the exact kernels,
// bit-identical to the CPU backend (batch-invariant too: a row's result does not depend on t, on
// the tiling or on the kernel): the decode GEMV for up to 8 rows, the tiled kernel above that.
// The activations are quantized inside the kernels, per tile or pass, with the act_quant
// numerics, so no workspace is needed.
//
// fp8_linear with a workspace and cuda_kernel_path::fast: the tensor cores, as
// plan_fp8_linear (dsa/cuda/fp8_linear_plan.hpp) decides per call from the shapes, strides,
// alignments and the GPU. On Hopper, cuBLASLt's block-scaled FP8 GEMM (be.blaslt): act_quant of
// x into the workspace with its 1 x 128 scales written transposed, the weight's 128 x 128 scales
// in place or repacked, CUBLASLT_MATMUL_DESC_A_SCALE_MODE = BLK128x128_32F for the weight and
// B_SCALE_MODE = VEC128_32F for the activations, fast accumulation off, y written by cuBLASLt in
// its output type. Elsewhere, or where cuBLASLt returns no algorithm, the bf16 fallback (be.blas):
// the quantized activations dequantized to bf16, the weight dequantized to bf16 in slabs of
// 128-row blocks, cublasGemmEx with fp32 accumulation per slab. Decode rows (t <= 8) run the
// exact GEMV where it is the faster kernel (fp8_linear_decode_kernel, chosen once per shape and
// device) and wherever cuBLASLt cannot run. The algorithm cuBLASLt's heuristic picks is cached per
// problem, device and operand alignment, so a call enqueues the GEMM without asking again; nothing
// in the path waits for the device, and cuBLASLt's scratch is the workspace's, so a call can be
// captured in a CUDA graph. Results: within DeepGEMM's calc_diff of the exact kernel
// (tests/cuda/test_ops_dense.cpp), deterministic for one GPU model and cuBLAS version.
//
// linear: cuBLAS (cublasGemmEx on be.blas, which must be a handle: dsa::cublas_handle) for the
// type combinations it has (be.linear == cuda_linear_path::cublas, the default), fp32 accumulation
// and one rounding to the output type:
//   bf16 x bf16 -> bf16 or fp32   CUBLAS_COMPUTE_32F (bf16 products are exact in fp32)
//   fp32 x fp32 -> fp32           CUBLAS_COMPUTE_32F_PEDANTIC (full fp32 products: no TF32)
// and the SIMT kernel for the rest (a bf16 operand with an fp32 one, fp32 operands into bf16), for
// operand strides cuBLAS cannot take (broadcast or reversed rows), and for every call with
// be.linear == cuda_linear_path::simt (no handle needed). Row-major y = x . w^T is,
// column-major, y^T = w^T' . x^T: cuBLAS gets w with CUBLAS_OP_T and x with CUBLAS_OP_N, the
// views' row strides as leading dimensions. Before the call the op binds the handle to be.stream
// and sets host pointer mode and CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (partial sums
// of split-k kernels in fp32, not in the bf16 output type): handle state the caller shares. The
// fp32 summation order is cuBLAS's: results are deterministic run to run on one GPU model and
// cuBLAS version (cuBLAS's guarantee), not bit-identical to the CPU backend's Eigen order.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#include "dsa/core/backend.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/cuda/fp8_linear_plan.hpp"
#include "dsa/cuda/fp8_quant.cuh"
#include "dsa/cuda/kernels/linear_kernel.cuh"
#include "dsa/cuda/launch.cuh"
#include "dsa/ops/linear.hpp"

DSA_NAMESPACE_BEGIN

namespace cuda_detail {

/// Rows of y up to which fp8_linear runs the decode GEMV (a warp per output column, every row).
inline constexpr index_t fp8_linear_decode_rows = cuda_kernels::fp8_gemv_rows;

template <class X, class O, int TM, int TN, int RM, int RN>
void launch_fp8_linear(const cuda_backend& be, const cuda_kernels::fp8_linear_params<X, O>& p, index_t max_rows) {
  const dim3 grid(grid_blocks(p.out, TN), grid_rows((p.t + TM - 1) / TM, max_rows));
  cuda_kernels::fp8_linear_kernel<X, O, TM, TN, RM, RN><<<grid, cuda_kernels::fp8_linear_threads, 0, be.stream>>>(p);
  DSA_CUDA_CHECK_LAUNCH();
}

/// fp8_linear on checked arguments, with at most `max_rows` blocks along y (grid_rows).
template <class X, class O>
void run_fp8_linear(const cuda_backend& be, tensor_view<const X, 2, device_space> x,
                    tensor_view<const fp8_e4m3, 2, device_space> w, tensor_view<const float, 2, device_space> w_scale,
                    tensor_view<O, 2, device_space> y, scale_format act_format, index_t max_rows = max_grid_y) {
  cuda_kernels::fp8_linear_params<X, O> p;
  p.x = x.data_handle();
  p.x_row_stride = x.stride(0);
  p.w = w.data_handle();
  p.w_row_stride = w.stride(0);
  p.w_scale = w_scale.data_handle();
  p.w_scale_row_stride = w_scale.stride(0);
  p.y = y.data_handle();
  p.y_row_stride = y.stride(0);
  p.t = x.extent(0);
  p.in = x.extent(1);
  p.out = w.extent(0);
  p.act_format = act_format;
  p.w_aligned16 = reinterpret_cast<std::uintptr_t>(p.w) % 16 == 0 && (p.out <= 1 || p.w_row_stride % 16 == 0);
  if (p.t <= fp8_linear_decode_rows) {
    // The weights dominate: one warp streams each column, so that 7168 -> 2048 fills 256 blocks.
    constexpr index_t columns_per_block = cuda_kernels::fp8_gemv_threads / 32;
    cuda_kernels::fp8_gemv_kernel<X, O>
        <<<grid_blocks(p.out, columns_per_block), cuda_kernels::fp8_gemv_threads, 0, be.stream>>>(p);
    DSA_CUDA_CHECK_LAUNCH();
  } else {
    launch_fp8_linear<X, O, 32, 64, 2, 4>(be, p, max_rows);
  }
}

/// The decode GEMV over the rows of many experts at once (kernels/linear_kernel.cuh,
/// fp8_grouped_gemv_kernel): x and y [rows, in | out] grouped by expert as `offsets` says, the
/// experts with rows listed in active[0 .. *n_active), n_active <= max_active (device values),
/// each expert's weight in the table `experts`. Asynchronous; nothing on the host depends on how
/// many rows each expert has. For the MoE layers of the device forward pass (dsa/model/cuda/moe.cuh).
template <class X, class O>
void run_fp8_linear_grouped(const cuda_backend& be, const X* x, index_t x_row_stride, const fp8_weight_ref* experts,
                            const std::int32_t* offsets, const std::int32_t* active, const std::int32_t* n_active,
                            index_t max_active, O* y, index_t y_row_stride, index_t in, index_t out,
                            scale_format act_format) {
  if (max_active <= 0 || out <= 0) return;
  cuda_kernels::fp8_grouped_gemv_params<X, O> g;
  g.x = x;
  g.x_row_stride = x_row_stride;
  g.experts = experts;
  g.offsets = offsets;
  g.active = active;
  g.n_active = n_active;
  g.max_active = max_active;
  g.y = y;
  g.y_row_stride = y_row_stride;
  g.in = in;
  g.out = out;
  g.act_format = act_format;
  constexpr index_t columns_per_block = cuda_kernels::fp8_gemv_threads / 32;
  const dim3 grid(grid_blocks(out, columns_per_block), static_cast<unsigned>(std::min<index_t>(max_active, max_grid_y)));
  cuda_kernels::fp8_grouped_gemv_kernel<X, O><<<grid, cuda_kernels::fp8_gemv_threads, 0, be.stream>>>(g);
  DSA_CUDA_CHECK_LAUNCH();
}

/// linear's SIMT kernel on checked arguments, with at most `max_rows` blocks along y (grid_rows).
template <class X, class W, class O>
void run_linear_simt(const cuda_backend& be, tensor_view<const X, 2, device_space> x,
                     tensor_view<const W, 2, device_space> w, tensor_view<O, 2, device_space> y,
                     index_t max_rows = max_grid_y) {
  cuda_kernels::linear_params<X, W, O> p;
  p.x = x.data_handle();
  p.x_row_stride = x.stride(0);
  p.w = w.data_handle();
  p.w_row_stride = w.stride(0);
  p.y = y.data_handle();
  p.y_row_stride = y.stride(0);
  p.t = x.extent(0);
  p.in = x.extent(1);
  p.out = w.extent(0);
  constexpr int tile = cuda_kernels::linear_simt_tile;
  const dim3 grid(grid_blocks(p.out, tile), grid_rows((p.t + tile - 1) / tile, max_rows));
  cuda_kernels::linear_simt_kernel<X, W, O><<<grid, cuda_kernels::linear_simt_threads, 0, be.stream>>>(p);
  DSA_CUDA_CHECK_LAUNCH();
}

template <class T>
constexpr cudaDataType_t cublas_type() {
  return std::is_same_v<T, bf16> ? CUDA_R_16BF : CUDA_R_32F;
}

/// A leading dimension for cuBLAS: a single row may have any stride (cuBLAS only needs ld >= rows
/// of the column-major matrix); otherwise the view's row stride, or -1 when cuBLAS cannot take it.
inline index_t cublas_ld(index_t rows, index_t row_stride, index_t len) {
  if (rows <= 1) return std::max<index_t>(len, 1);
  return row_stride >= len && row_stride >= 1 ? row_stride : -1;
}

inline bool fits_int(index_t v) { return v >= 0 && v <= INT_MAX; }

/// The current device and its compute capability's major number (asked once per device).
inline int current_device() {
  int device = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}
inline int compute_capability_major(int device) {
  static std::mutex mutex;
  static std::map<int, int> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = known.find(device);
  if (it != known.end()) return it->second;
  int major = 0;
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  known.emplace(device, major);
  return major;
}

/// The largest power of two up to 256 that divides the address: cuBLASLt's algorithms may assume
/// 256-byte aligned operands unless told otherwise (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES).
inline std::uint32_t address_alignment(const void* p) {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// Owners of the cuBLASLt descriptors of one call (host objects: creating them enqueues nothing).
struct lt_matmul_desc {
  cublasLtMatmulDesc_t d = nullptr;
  lt_matmul_desc() { DSA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F)); }
  ~lt_matmul_desc() { (void)cublasLtMatmulDescDestroy(d); }
  lt_matmul_desc(const lt_matmul_desc&) = delete;
  lt_matmul_desc& operator=(const lt_matmul_desc&) = delete;
  template <class V>
  void set(cublasLtMatmulDescAttributes_t a, const V& v) {
    DSA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v)));
  }
};
struct lt_layout {
  cublasLtMatrixLayout_t l = nullptr;
  lt_layout(cudaDataType_t type, index_t rows, index_t cols, index_t ld) {
    DSA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<std::uint64_t>(rows),
                                                static_cast<std::uint64_t>(cols), static_cast<std::int64_t>(ld)));
  }
  ~lt_layout() { (void)cublasLtMatrixLayoutDestroy(l); }
  lt_layout(const lt_layout&) = delete;
  lt_layout& operator=(const lt_layout&) = delete;
};
struct lt_preference {
  cublasLtMatmulPreference_t p = nullptr;
  lt_preference() { DSA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p)); }
  ~lt_preference() { (void)cublasLtMatmulPreferenceDestroy(p); }
  lt_preference(const lt_preference&) = delete;
  lt_preference& operator=(const lt_preference&) = delete;
  template <class V>
  void set(cublasLtMatmulPreferenceAttributes_t a, const V& v) {
    DSA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, a, &v, sizeof(v)));
  }
};

/// fp8_linear's cuBLASLt GEMM of one plan: the operation, the operands' layouts and the
/// preference (scratch size, operand alignments). The scale pointers are set per call.
struct fp8_cublaslt_problem {
  lt_matmul_desc desc;
  lt_layout a, b, d;
  lt_preference pref;
  fp8_cublaslt_problem(const fp8_linear_plan& plan, cudaDataType_t d_type, std::uint32_t align_a,
                       std::uint32_t align_b, std::uint32_t align_d)
      : a(CUDA_R_8F_E4M3, plan.k, plan.m, plan.lda),
        b(CUDA_R_8F_E4M3, plan.k, plan.n, plan.ldb),
        d(d_type, plan.m, plan.n, plan.ldd) {
    const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, transa);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, transb);
    const std::int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;  // the weight's 128 x 128 blocks
    const std::int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;      // the activations' 1 x 128 groups
    desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_mode);
    desc.set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_mode);
    const std::int8_t fast_accumulation = 0;  // promote partial sums as DeepSeek's GEMM does
    desc.set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accumulation);
    const std::uint64_t scratch = static_cast<std::uint64_t>(plan.cublaslt_workspace_bytes);
    pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, scratch);
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a);
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b);
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d);
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d);
  }
};

/// The algorithm cuBLASLt's heuristic gives a problem, asked once per (device, shape, leading
/// dimensions, output type, alignments, scratch) and cached: nullptr-equivalent `found = false`
/// when it has none (the bf16 fallback then runs).
struct fp8_cublaslt_algo {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};
inline fp8_cublaslt_algo find_fp8_cublaslt_algo(cublasLtHandle_t handle, int device, const fp8_linear_plan& plan,
                                                fp8_cublaslt_problem& problem, cudaDataType_t d_type,
                                                std::uint32_t align_a, std::uint32_t align_b, std::uint32_t align_d) {
  using key_t = std::tuple<int, index_t, index_t, index_t, index_t, index_t, index_t, int, std::uint32_t,
                           std::uint32_t, std::uint32_t, index_t>;
  static std::mutex mutex;
  static std::map<key_t, fp8_cublaslt_algo> known;
  const key_t key{device,  plan.m,  plan.n,  plan.k,  plan.lda, plan.ldb, plan.ldd, static_cast<int>(d_type),
                  align_a, align_b, align_d, plan.cublaslt_workspace_bytes};
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = known.find(key);
  if (it != known.end()) return it->second;
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, problem.desc.d, problem.a.l, problem.b.l,
                                                               problem.d.l, problem.d.l, problem.pref.p, 1,
                                                               &result, &returned);
  fp8_cublaslt_algo found;
  // NOT_SUPPORTED is cuBLASLt's "no algorithm" for a combination it lacks (another architecture,
  // an alignment); any other failure is an error.
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) DSA_CUBLAS_CHECK(status);
  if (status == CUBLAS_STATUS_SUCCESS && returned > 0) {
    found.found = true;
    found.algo = result.algo;
  }
  known.emplace(key, found);
  return found;
}

/// Binds a cuBLAS handle to the backend's stream with the settings dsa's GEMMs assume (host
/// pointer mode; split-k partial sums in fp32).
inline void bind_cublas(const cuda_backend& be) {
  DSA_CUBLAS_CHECK(cublasSetStream(be.blas, be.stream));
  DSA_CUBLAS_CHECK(cublasSetPointerMode(be.blas, CUBLAS_POINTER_MODE_HOST));
  DSA_CUBLAS_CHECK(cublasSetMathMode(
      be.blas, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
}

/// The plan of one fast fp8_linear call on the current device (dsa/cuda/fp8_linear_plan.hpp).
template <class O>
fp8_linear_problem fp8_problem_of(tensor_view<const fp8_e4m3, 2, device_space> w,
                                  tensor_view<const float, 2, device_space> w_scale,
                                  tensor_view<O, 2, device_space> y, index_t t, index_t in) {
  fp8_linear_problem p;
  p.t = t;
  p.in = in;
  p.out = w.extent(0);
  p.w_row_stride = w.stride(0);
  p.w_scale_row_stride = w_scale.stride(0);
  p.y_row_stride = y.stride(0);
  p.y_element_bytes = static_cast<index_t>(sizeof(O));
  p.w_aligned16 = reinterpret_cast<std::uintptr_t>(w.data_handle()) % 16 == 0;
  p.w_scale_aligned16 = reinterpret_cast<std::uintptr_t>(w_scale.data_handle()) % 16 == 0;
  p.y_aligned16 = reinterpret_cast<std::uintptr_t>(y.data_handle()) % 16 == 0;
  return p;
}

/// The bf16 fallback of a plan: act_quant, act_dequant to bf16, then per slab of the weight its
/// dequantization to bf16 and one cublasGemmEx (fp32 accumulation) into y's columns.
template <class X, class O>
void run_fp8_linear_bf16(const cuda_backend& be, const fp8_linear_plan& plan, tensor_view<const X, 2, device_space> x,
                         tensor_view<const fp8_e4m3, 2, device_space> w,
                         tensor_view<const float, 2, device_space> w_scale, tensor_view<O, 2, device_space> y,
                         scale_format act_format, std::byte* ws) {
  const index_t t = x.extent(0), in = x.extent(1), out = w.extent(0), nkb = in / fp8_linear_block;
  auto* codes = reinterpret_cast<fp8_e4m3*>(ws + plan.codes_offset);
  auto* scales = reinterpret_cast<float*>(ws + plan.act_scales_offset);
  auto* x_bf16 = reinterpret_cast<bf16*>(ws + plan.x_bf16_offset);
  auto* slab = reinterpret_cast<bf16*>(ws + plan.slab_offset);
  launch_act_quant(be, x, codes, in, scales, nkb, 1, act_quant_config{act_format, fp8_linear_block});
  launch_dequant(be, tensor_view<const fp8_e4m3, 2, device_space>(codes, {t, in}),
                 tensor_view<const float, 2, device_space>(scales, {t, nkb}),
                 tensor_view<bf16, 2, device_space>(x_bf16, {t, in}), 1, fp8_linear_block);
  bind_cublas(be);
  const float alpha = 1.0f, beta = 0.0f;
  for (index_t r0 = 0; r0 < out; r0 += plan.slab_rows) {
    const index_t rows = std::min(plan.slab_rows, out - r0);
    const index_t blocks = (rows + fp8_linear_block - 1) / fp8_linear_block;
    launch_dequant(be,
                   tensor_view<const fp8_e4m3, 2, device_space>(w.data_handle() + r0 * w.stride(0), {rows, in},
                                                                {w.stride(0), 1}),
                   tensor_view<const float, 2, device_space>(
                       w_scale.data_handle() + (r0 / fp8_linear_block) * w_scale.stride(0), {blocks, nkb},
                       {w_scale.stride(0), 1}),
                   tensor_view<bf16, 2, device_space>(slab, {rows, in}), weight_quant_block, weight_quant_block);
    // The slab is rewritten by the next iteration's dequantization only after this GEMM has read
    // it: the stream orders them.
    DSA_CUBLAS_CHECK(cublasGemmEx(be.blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(t),
                                  static_cast<int>(in), &alpha, slab, CUDA_R_16BF, static_cast<int>(in), x_bf16,
                                  CUDA_R_16BF, static_cast<int>(in), &beta, y.data_handle() + r0, cublas_type<O>(),
                                  static_cast<int>(plan.ldd), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

/// Which fp8_linear kernel the tests ask for (tests/cuda/launchers.cu): the plan's, or the bf16
/// fallback in its place.
enum class fp8_linear_forcing : unsigned char { none, bf16_fallback };

/// fp8_linear with a workspace on checked arguments: the fast path as plan_fp8_linear decides
/// (see the top of this header), the exact kernels for cuda_kernel_path::exact. Every argument and
/// handle is checked, and cuBLASLt's algorithm looked up, before anything is enqueued.
template <class X, class O>
void run_fp8_linear_fast(const cuda_backend& be, tensor_view<const X, 2, device_space> x,
                         tensor_view<const fp8_e4m3, 2, device_space> w,
                         tensor_view<const float, 2, device_space> w_scale, tensor_view<O, 2, device_space> y,
                         scale_format act_format, tensor_view<std::byte, 1, device_space> workspace,
                         fp8_linear_forcing forcing = fp8_linear_forcing::none) {
  if (be.kernels != cuda_kernel_path::fast && be.kernels != cuda_kernel_path::exact) {
    fail("fp8_linear", "backend.kernels", static_cast<int>(be.kernels),
         "cuda_kernel_path::fast (0) or cuda_kernel_path::exact (1)");
  }
  const index_t t = x.extent(0), in = x.extent(1), out = w.extent(0);
  const fp8_linear_problem p = fp8_problem_of(w, w_scale, y, t, in);
  const bool fast = be.kernels == cuda_kernel_path::fast;
  const int device = fast ? current_device() : 0;
  const int cc = fast ? compute_capability_major(device) : 0;
  const fp8_decode_kernel decode = fast && t <= fp8_linear_gemv_max_rows
                                       ? fp8_linear_decode_kernel(device, t, in, out)
                                       : fp8_decode_kernel::tensor_cores;
  fp8_linear_plan plan = plan_fp8_linear(p, fast, cc, decode);
  if (forcing == fp8_linear_forcing::bf16_fallback) {
    plan = plan_fp8_linear_bf16(p, "forced by the caller (tests)");
  }
  std::byte* ws = workspace.data_handle();
  if (plan.path == fp8_linear_path::cublaslt) {
    if (be.blaslt == nullptr) {
      fail("fp8_linear", "backend.blaslt", "null",
           "a cuBLASLt handle (dsa::cublaslt_handle) for the tensor-core path, or cuda_kernel_path::exact");
    }
    const fp8_e4m3* codes = reinterpret_cast<const fp8_e4m3*>(ws + plan.codes_offset);
    const cudaDataType_t d_type = cublas_type<O>();
    const std::uint32_t align_a = address_alignment(w.data_handle());
    const std::uint32_t align_b = address_alignment(codes);
    const std::uint32_t align_d = address_alignment(y.data_handle());
    fp8_cublaslt_problem lt(plan, d_type, align_a, align_b, align_d);
    const fp8_cublaslt_algo algo = find_fp8_cublaslt_algo(be.blaslt, device, plan, lt, d_type, align_a, align_b, align_d);
    if (algo.found) {
      auto* act_scales = reinterpret_cast<float*>(ws + plan.act_scales_offset);
      launch_act_quant(be, x, reinterpret_cast<fp8_e4m3*>(ws + plan.codes_offset), in, act_scales,
                       plan.act_scale_row_stride, plan.act_scale_col_stride,
                       act_quant_config{act_format, fp8_linear_block});
      const float* w_scales = w_scale.data_handle();
      if (plan.repack_weight_scales) {
        auto* packed = reinterpret_cast<float*>(ws + plan.weight_scales_offset);
        const index_t rows = w_scale.extent(0);
        constexpr int threads = 256;
        cuda_kernels::fp8_weight_scales_repack_kernel<threads>
            <<<grid_blocks(rows * plan.weight_scales_ld, threads), threads, 0, be.stream>>>(
                w_scale.data_handle(), w_scale.stride(0), rows, w_scale.extent(1), packed, plan.weight_scales_ld);
        DSA_CUDA_CHECK_LAUNCH();
        w_scales = packed;
      }
      const float* b_scales = act_scales;
      lt.desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, w_scales);
      lt.desc.set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scales);
      const float alpha = 1.0f, beta = 0.0f;
      DSA_CUBLAS_CHECK(cublasLtMatmul(be.blaslt, lt.desc.d, &alpha, w.data_handle(), lt.a.l, codes, lt.b.l, &beta,
                                      y.data_handle(), lt.d.l, y.data_handle(), lt.d.l, &algo.algo,
                                      ws + plan.cublaslt_workspace_offset,
                                      static_cast<std::size_t>(plan.cublaslt_workspace_bytes), be.stream));
      return;
    }
    // No algorithm: decode rows keep the GEMV (the fallback would dequantize the weight first),
    // larger products take the bf16 fallback in the same workspace.
    if (t <= fp8_linear_gemv_max_rows) {
      run_fp8_linear(be, x, w, w_scale, y, act_format);
      return;
    }
    plan = plan_fp8_linear_fallback(p);
  }
  if (plan.path == fp8_linear_path::bf16_gemm) {
    if (be.blas == nullptr) {
      fail("fp8_linear", "backend.blas", "null",
           "a cuBLAS handle (dsa::cublas_handle) for the tensor-core fallback (" + std::string(plan.reason) +
               "), or cuda_kernel_path::exact");
    }
    run_fp8_linear_bf16(be, plan, x, w, w_scale, y, act_format, ws);
    return;
  }
  run_fp8_linear(be, x, w, w_scale, y, act_format);  // the exact kernels
}

}  // namespace cuda_detail

template <>
struct op_impl<cuda_backend, fp8_linear_op> {
  // Without a workspace: the exact kernels.
  template <class X, class O>
  static void run(const cuda_backend& be, tensor_view<const X, 2, device_space> x,
                  tensor_view<const fp8_e4m3, 2, device_space> w, tensor_view<const float, 2, device_space> w_scale,
                  tensor_view<O, 2, device_space> y, scale_format act_format) {
    cuda_detail::run_fp8_linear(be, x, w, w_scale, y, act_format);
  }
  // With one: the tensor cores unless be.kernels is exact.
  template <class X, class O>
  static void run(const cuda_backend& be, tensor_view<const X, 2, device_space> x,
                  tensor_view<const fp8_e4m3, 2, device_space> w, tensor_view<const float, 2, device_space> w_scale,
                  tensor_view<O, 2, device_space> y, scale_format act_format,
                  tensor_view<std::byte, 1, device_space> workspace) {
    cuda_detail::run_fp8_linear_fast(be, x, w, w_scale, y, act_format, workspace);
  }
};

template <>
struct op_impl<cuda_backend, linear_op> {
  template <class X, class W, class O>
  static void run(const cuda_backend& be, tensor_view<const X, 2, device_space> x,
                  tensor_view<const W, 2, device_space> w, tensor_view<O, 2, device_space> y) {
    if (be.linear == cuda_linear_path::simt) {
      cuda_detail::run_linear_simt(be, x, w, y);
      return;
    }
    if (be.linear != cuda_linear_path::cublas) {
      fail("linear", "backend.linear", static_cast<int>(be.linear),
           "cuda_linear_path::cublas (0) or cuda_linear_path::simt (1)");
    }
    if (be.blas == nullptr) {
      fail("linear", "backend.blas", "null", "a cuBLAS handle (dsa::cublas_handle) for the CUDA backend");
    }
    const index_t t = x.extent(0);
    const index_t in = x.extent(1);
    const index_t out = w.extent(0);
    // cuBLAS has no kernel for mixed operand types, nor for fp32 operands with a bf16 result.
    constexpr bool blas_types = std::is_same_v<X, W> && (std::is_same_v<X, bf16> || std::is_same_v<O, float>);
    const index_t ldx = cuda_detail::cublas_ld(t, x.stride(0), in);
    const index_t ldw = cuda_detail::cublas_ld(out, w.stride(0), in);
    const index_t ldy = cuda_detail::cublas_ld(t, y.stride(0), out);
    const bool blas_shapes = in > 0 && cuda_detail::fits_int(t) && cuda_detail::fits_int(in) &&
                             cuda_detail::fits_int(out) && ldx > 0 && cuda_detail::fits_int(ldx) && ldw > 0 &&
                             cuda_detail::fits_int(ldw) && ldy > 0 && cuda_detail::fits_int(ldy);
    if (blas_types && blas_shapes) {
      const float alpha = 1.0f;
      const float beta = 0.0f;
      const cublasComputeType_t compute =
          std::is_same_v<X, float> ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
      cuda_detail::bind_cublas(be);
      DSA_CUBLAS_CHECK(cublasGemmEx(be.blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(t),
                                    static_cast<int>(in), &alpha, w.data_handle(), cuda_detail::cublas_type<W>(),
                                    static_cast<int>(ldw), x.data_handle(), cuda_detail::cublas_type<X>(),
                                    static_cast<int>(ldx), &beta, y.data_handle(), cuda_detail::cublas_type<O>(),
                                    static_cast<int>(ldy), compute, CUBLAS_GEMM_DEFAULT));
      return;
    }
    // The SIMT kernel: every other type combination, unusual strides, and in == 0 (y = 0).
    cuda_detail::run_linear_simt(be, x, w, y);
  }
};

DSA_NAMESPACE_END

DSA_DECLARE_CUDA_OP_INSTANCES(DSA_LINEAR_INSTANCES)
