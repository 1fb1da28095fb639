// The CUDA backend's fp8_linear plan (dsa/cuda/fp8_linear_plan.hpp), computed on the host: which
// kernel runs for which shape, stride, alignment and GPU, cuBLASLt's leading dimensions and the
// scale layouts it reads (the activations' 1 x 128 scales transposed, the weight's 128 x 128
// scales in place or repacked to round_up(in / 128, 4) per row), the workspace offsets (aligned,
// disjoint, inside fp8_linear_workspace_size), and the decode choice recorded once per shape.
// No GPU needed: the plan is a pure function.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "dsa/cuda/fp8_linear_plan.hpp"

namespace {

using dsa::fp8_decode_kernel;
using dsa::fp8_linear_path;
using dsa::index_t;

dsa::fp8_linear_problem problem(index_t t, index_t in, index_t out) {
  dsa::fp8_linear_problem p;
  p.t = t;
  p.in = in;
  p.out = out;
  p.w_row_stride = in;
  p.w_scale_row_stride = in / 128;
  p.y_row_stride = out;
  p.y_element_bytes = 2;
  return p;
}

constexpr int hopper = 9;

// Every region of the plan's layout starts 256-byte aligned, the regions do not overlap, and all
// of them fit in fp8_linear_workspace_size.
void check_layout(const dsa::fp8_linear_problem& p, const dsa::fp8_linear_plan& plan) {
  std::vector<std::pair<index_t, index_t>> regions;  // [begin, end)
  const index_t nkb = p.in / 128, nb_out = (p.out + 127) / 128;
  regions.emplace_back(plan.codes_offset, plan.codes_offset + p.t * p.in);
  regions.emplace_back(plan.act_scales_offset, plan.act_scales_offset + 4 * p.t * nkb);
  if (plan.path == fp8_linear_path::cublaslt) {
    if (plan.repack_weight_scales) {
      regions.emplace_back(plan.weight_scales_offset, plan.weight_scales_offset + 4 * nb_out * plan.weight_scales_ld);
    }
    regions.emplace_back(plan.cublaslt_workspace_offset, plan.cublaslt_workspace_offset + plan.cublaslt_workspace_bytes);
    CHECK(plan.cublaslt_workspace_bytes >= (index_t{1} << 20));
    CHECK(plan.cublaslt_workspace_bytes <= (index_t{32} << 20));
  } else {
    regions.emplace_back(plan.x_bf16_offset, plan.x_bf16_offset + 2 * p.t * p.in);
    regions.emplace_back(plan.slab_offset, plan.slab_offset + 2 * plan.slab_rows * p.in);
    CHECK(plan.slab_rows >= std::min<index_t>(p.out, 128));
    CHECK(plan.slab_rows <= p.out);
    CHECK((plan.slab_rows % 128 == 0 || plan.slab_rows == p.out));
  }
  const index_t size = dsa::fp8_linear_workspace_size(p.t, p.in, p.out);
  std::sort(regions.begin(), regions.end());
  for (std::size_t i = 0; i < regions.size(); ++i) {
    CHECK(regions[i].first % 256 == 0);
    CHECK(regions[i].second <= size);
    if (i > 0) CHECK(regions[i - 1].second <= regions[i].first);
  }
}

}  // namespace

TEST_CASE("fp8_linear plan: the exact kernels without the fast path, the GEMV for up to 8 rows") {
  for (const index_t t : {1, 8, 9, 4096}) {
    const auto plan = dsa::plan_fp8_linear(problem(t, 7168, 2048), false, hopper, fp8_decode_kernel::tensor_cores);
    CHECK(plan.path == (t <= 8 ? fp8_linear_path::exact_gemv : fp8_linear_path::exact_tiled));
  }
  const auto decode = dsa::plan_fp8_linear(problem(1, 7168, 2048), true, hopper, fp8_decode_kernel::gemv);
  CHECK(decode.path == fp8_linear_path::exact_gemv);
  CHECK(std::string(decode.reason).find("GEMV") != std::string::npos);
  // The decode choice matters only for decode rows.
  CHECK(dsa::plan_fp8_linear(problem(9, 7168, 2048), true, hopper, fp8_decode_kernel::gemv).path ==
        fp8_linear_path::cublaslt);
}

TEST_CASE("fp8_linear plan: cuBLASLt on Hopper for V3.2's projections, TN with the views' strides") {
  // (in, out) of V3.2's FP8 linears: wq_a, wq_b, wkv_a, wkv_b, wo, expert gate/up and down, the
  // dense MLP's down projection, the indexer's wq_b and wk.
  const std::pair<index_t, index_t> shapes[] = {{7168, 1536}, {1536, 24576}, {7168, 576}, {512, 32768},
                                                {16384, 7168}, {7168, 2048}, {2048, 7168}, {18432, 7168},
                                                {1536, 8192}, {7168, 128}};
  for (const auto& [in, out] : shapes) {
    for (const index_t t : {5, 8, 1024, 4096, 4097}) {
      CAPTURE(in);
      CAPTURE(out);
      CAPTURE(t);
      const auto p = problem(t, in, out);
      const auto plan = dsa::plan_fp8_linear(p, true, hopper, fp8_decode_kernel::tensor_cores);
      REQUIRE(plan.path == fp8_linear_path::cublaslt);
      CHECK(plan.m == out);
      CHECK(plan.n == t);
      CHECK(plan.k == in);
      CHECK(plan.lda == in);  // w [out, in] row-major = [in, out] column-major, CUBLAS_OP_T
      CHECK(plan.ldb == in);  // the codes [t, in] row-major = [in, t] column-major, CUBLAS_OP_N
      CHECK(plan.ldd == out);
      // VEC128_32F: the 1 x 128 scales k-block-major, t apart.
      CHECK(plan.act_scale_row_stride == 1);
      CHECK(plan.act_scale_col_stride == t);
      // BLK128x128_32F: [ceil(out / 128), round_up(in / 128, 4)]; every V3.2 width is a multiple
      // of 4 blocks, so the checkpoint's tensor is read in place.
      CHECK(plan.weight_scales_ld == (in / 128 + 3) / 4 * 4);
      CHECK_FALSE(plan.repack_weight_scales);
      check_layout(p, plan);
    }
  }
}

TEST_CASE("fp8_linear plan: the weight's scales are repacked where their rows are not round_up(in / 128, 4) apart") {
  auto p = problem(64, 1152, 256);  // 9 k-blocks: rows of 12 floats for cuBLASLt
  auto plan = dsa::plan_fp8_linear(p, true, hopper, fp8_decode_kernel::tensor_cores);
  REQUIRE(plan.path == fp8_linear_path::cublaslt);
  CHECK(plan.repack_weight_scales);
  CHECK(plan.weight_scales_ld == 12);
  check_layout(p, plan);
  p = problem(64, 1024, 256);  // 8 k-blocks, but rows 10 floats apart (a strided view)
  p.w_scale_row_stride = 10;
  CHECK(dsa::plan_fp8_linear(p, true, hopper, fp8_decode_kernel::tensor_cores).repack_weight_scales);
  p = problem(64, 1024, 256);
  p.w_scale_aligned16 = false;
  CHECK(dsa::plan_fp8_linear(p, true, hopper, fp8_decode_kernel::tensor_cores).repack_weight_scales);
  p = problem(64, 1024, 100);  // one block row: any stride, but still 16-byte aligned and whole
  p.w_scale_row_stride = 999;
  CHECK_FALSE(dsa::detail::fp8_cublaslt_layout(p).repack_weight_scales);
}

TEST_CASE("fp8_linear plan: the bf16 tensor-core fallback elsewhere, never the fp64 kernel") {
  struct fallback_case {
    const char* what;
    dsa::fp8_linear_problem p;
    int cc;
  };
  std::vector<fallback_case> cases;
  cases.push_back({"sm_80", problem(4096, 7168, 2048), 8});
  cases.push_back({"sm_100", problem(4096, 7168, 2048), 10});
  cases.push_back({"out not a multiple of 16", problem(4096, 7168, 13), hopper});
  auto p = problem(4096, 7168, 2048);
  p.w_aligned16 = false;
  cases.push_back({"misaligned w", p, hopper});
  p = problem(4096, 7168, 2048);
  p.w_row_stride = 7168 + 8;
  cases.push_back({"w rows 8 bytes off 16", p, hopper});
  p = problem(4096, 7168, 2048);
  p.y_row_stride = 2048 + 3;
  cases.push_back({"y rows not 16-byte multiples", p, hopper});
  p = problem(4096, 7168, 2048);
  p.y_aligned16 = false;
  cases.push_back({"misaligned y", p, hopper});
  for (const auto& c : cases) {
    CAPTURE(c.what);
    const auto plan = dsa::plan_fp8_linear(c.p, true, c.cc, fp8_decode_kernel::tensor_cores);
    CHECK(plan.path == fp8_linear_path::bf16_gemm);
    CHECK(plan.lda == c.p.in);  // the dequantized slab is contiguous
    CHECK(plan.ldb == c.p.in);
    CHECK(plan.ldd == c.p.y_row_stride);
    CHECK(plan.act_scale_row_stride == c.p.in / 128);  // act_quant's own layout
    CHECK(plan.act_scale_col_stride == 1);
    check_layout(c.p, plan);
  }
  // Decode rows where cuBLASLt cannot run stay on the GEMV: the fallback would dequantize the
  // whole weight to read it once.
  CHECK(dsa::plan_fp8_linear(problem(8, 7168, 2048), true, 8, fp8_decode_kernel::tensor_cores).path ==
        fp8_linear_path::exact_gemv);
  CHECK(dsa::plan_fp8_linear(problem(8, 7168, 13), true, hopper, fp8_decode_kernel::tensor_cores).path ==
        fp8_linear_path::exact_gemv);
  // cuBLASLt found no algorithm at run time: the fallback in the same workspace.
  const auto lt_problem = problem(4096, 7168, 2048);
  const auto lt = dsa::plan_fp8_linear(lt_problem, true, hopper, fp8_decode_kernel::tensor_cores);
  const auto fb = dsa::plan_fp8_linear_fallback(lt_problem);
  CHECK(fb.path == fp8_linear_path::bf16_gemm);
  CHECK(fb.ldd == lt.ldd);
  check_layout(lt_problem, fb);
}

TEST_CASE("fp8_linear plan: y rows cuBLAS cannot write through a leading dimension keep the exact kernel") {
  auto p = problem(4096, 7168, 2048);
  p.y_row_stride = -2048;  // reversed rows
  const auto plan = dsa::plan_fp8_linear(p, true, 8, fp8_decode_kernel::tensor_cores);
  CHECK(plan.path == fp8_linear_path::exact_tiled);
  CHECK(std::string(plan.reason).find("leading dimension") != std::string::npos);
}

TEST_CASE("fp8_linear_workspace_size: both layouts, V3.2 sizes, argument checks") {
  CHECK(dsa::fp8_linear_workspace_size(0, 7168, 2048) == 0);
  CHECK(dsa::fp8_linear_workspace_size(5, 7168, 0) == 0);
  // t = 4096 rows of 7168 -> 2048: codes 29 MiB, scales 0.9 MiB, bf16 activations 56 MiB and a
  // 16 MiB slab (the fallback is the larger layout).
  const index_t big = dsa::fp8_linear_workspace_size(4096, 7168, 2048);
  CHECK(big >= 4096 * 7168 * 3 + (index_t{16} << 20) - 7168 * 128 * 2);
  CHECK(big < 4096 * 7168 * 3 + (index_t{18} << 20));
  // Decode: the cuBLASLt scratch (1 MiB) and a 16 MiB slab bound it.
  CHECK(dsa::fp8_linear_workspace_size(1, 7168, 2048) < (index_t{17} << 20));
  CHECK_THROWS_AS(dsa::fp8_linear_workspace_size(-1, 128, 1), dsa::error);
  CHECK_THROWS_AS(dsa::fp8_linear_workspace_size(1, 100, 1), dsa::error);
  CHECK_THROWS_AS(dsa::fp8_linear_workspace_size(1, 128, -1), dsa::error);
}

TEST_CASE("fp8_linear decode kernel: the heuristic, recorded once per (device, shape); a record replaces it") {
  CHECK(dsa::fp8_linear_decode_heuristic(1, 7168, 2048) == fp8_decode_kernel::gemv);
  CHECK(dsa::fp8_linear_decode_heuristic(4, 7168, 2048) == fp8_decode_kernel::gemv);
  CHECK(dsa::fp8_linear_decode_heuristic(5, 7168, 2048) == fp8_decode_kernel::tensor_cores);
  CHECK(dsa::fp8_linear_decode_heuristic(8, 7168, 2048) == fp8_decode_kernel::tensor_cores);
  const int device = 77;  // a device id no other test uses
  CHECK(dsa::fp8_linear_decode_kernel(device, 2, 7168, 2048) == fp8_decode_kernel::gemv);
  dsa::record_fp8_linear_decode_kernel(device, 2, 7168, 2048, fp8_decode_kernel::tensor_cores);
  CHECK(dsa::fp8_linear_decode_kernel(device, 2, 7168, 2048) == fp8_decode_kernel::tensor_cores);
  CHECK(dsa::fp8_linear_decode_kernel(device + 1, 2, 7168, 2048) == fp8_decode_kernel::gemv);  // per device
  CHECK(dsa::fp8_linear_decode_kernel(device, 2, 7168, 4096) == fp8_decode_kernel::gemv);      // per shape
}
