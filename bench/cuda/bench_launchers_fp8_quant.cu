// The FP8 quantizers on the CUDA backend for bench_cuda_fp8_quant.cpp (see bench_launchers.hpp).
#include "bench_launchers.hpp"

#include "dsa/cuda/fp8_quant.cuh"

namespace dsa_bench::cuda {

void act_quant(const cuda_backend& be, dview<const bf16, 2> x, dview<fp8_e4m3, 2> q, dview<float, 2> s,
               dsa::act_quant_config cfg) {
  dsa::act_quant(be, x, q, s, cfg);
}
void act_dequant(const cuda_backend& be, dview<const fp8_e4m3, 2> q, dview<const float, 2> s, dview<bf16, 2> y,
                 index_t group_size) {
  dsa::act_dequant(be, q, s, y, group_size);
}
void weight_quant(const cuda_backend& be, dview<const bf16, 2> w, dview<fp8_e4m3, 2> q, dview<float, 2> s) {
  dsa::weight_quant(be, w, q, s);
}
void weight_dequant(const cuda_backend& be, dview<const fp8_e4m3, 2> q, dview<const float, 2> s, dview<bf16, 2> w) {
  dsa::weight_dequant(be, q, s, w);
}

}  // namespace dsa_bench::cuda
