// The CUDA test launchers: kernels that run dsa's shared numerics and arch/ helpers on the device,
// and host functions that move data in and out; with the default flags, also the dense kernels'
// grid-capped entry points. See launchers.hpp. launchers_fast_math.cu compiles this file again
// with --use_fast_math.
#include "launchers.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dsa/cuda.cuh"

#ifndef DSA_TEST_LAUNCHERS_FAST_MATH
#define DSA_TEST_LAUNCHERS_FAST_MATH 0
#endif

namespace dsa_test {
namespace {

using dsa::index_t;

constexpr int block_threads = 256;

int grid_for(index_t n) {
  const index_t blocks = (n + block_threads - 1) / block_threads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > 4096 ? 4096 : blocks));
}

// A stream of the launcher's own, so the stream-ordered allocation path is what gets exercised.
class scoped_stream {
 public:
  scoped_stream() { DSA_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~scoped_stream() { (void)cudaStreamDestroy(s_); }
  scoped_stream(const scoped_stream&) = delete;
  scoped_stream& operator=(const scoped_stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

template <class T>
dsa::device_buffer<T> upload(std::span<const T> host, cudaStream_t s) {
  dsa::device_buffer<T> d(static_cast<index_t>(host.size()), s);
  dsa::copy_to_device(d, host, s);
  return d;
}

// Downloads after the stream has finished: to_host synchronises it.
template <class T>
std::vector<T> download(const dsa::device_buffer<T>& d, cudaStream_t s) {
  return dsa::to_host(d, s);
}

void check_multiple(std::size_t n, std::size_t m, const char* what) {
  dsa::check(n % m == 0, "cuda test launcher", what, n, "a multiple of " + std::to_string(m));
}

// ---- kernels ------------------------------------------------------------------------------------

__global__ void convert_kernel(const float* x, index_t n, std::uint8_t* e4m3, float* e4m3_back, std::uint8_t* e5m2,
                               std::uint8_t* e5m2_sat, float* e5m2_back, std::uint16_t* bf, float* bf_back) {
  for (index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const dsa::fp8_e4m3 a(v);
    e4m3[i] = a.bits;
    e4m3_back[i] = a.to_float();
    const dsa::fp8_e5m2 b(v);
    e5m2[i] = b.bits;
    e5m2_sat[i] = dsa::fp8_e5m2::from_float_bits_saturate(v);
    e5m2_back[i] = b.to_float();
    const dsa::bf16 c(v);
    bf[i] = c.bits;
    bf_back[i] = c.to_float();
  }
}

// One 16-byte group of codes per thread: the shape of a vectorised kernel's inner loop.
__global__ void decode_fp8_kernel(const uint4* codes, index_t groups, float* scalar, float* x16, float* x4_sw,
                                  float* e5m2) {
  for (index_t g = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const uint4 packed = codes[g];
    const std::uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
    float v[16];
    dsa::cuda_arch::e4m3x16_to_float(packed, v);
    for (int i = 0; i < 16; ++i) {
      x16[16 * g + i] = v[i];
      scalar[16 * g + i] = dsa::cuda_arch::e4m3_to_float((words[i / 4] >> (8 * (i % 4))) & 0xFFu);
    }
    for (int w = 0; w < 4; ++w) {
      const float4 a = dsa::cuda_arch::e4m3x4_to_float4_sw(words[w]);
      const float4 b = dsa::cuda_arch::e5m2x4_to_float4(words[w]);
      const float av[4] = {a.x, a.y, a.z, a.w};
      const float bv[4] = {b.x, b.y, b.z, b.w};
      for (int i = 0; i < 4; ++i) {
        x4_sw[16 * g + 4 * w + i] = av[i];
        e5m2[16 * g + 4 * w + i] = bv[i];
      }
    }
  }
}

__global__ void encode_e4m3x16_kernel(const float* x, index_t groups, uint4* codes) {
  for (index_t g = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<index_t>(gridDim.x) * blockDim.x) {
    float v[16];
    for (int i = 0; i < 16; ++i) v[i] = x[16 * g + i];
    codes[g] = dsa::cuda_arch::float_to_e4m3x16(v);
  }
}

__global__ void ue8m0_kernel(const float* v, index_t n, std::uint8_t* ceil_bits, float* ceil_value,
                             std::uint8_t* from_pow2) {
  for (index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const dsa::ue8m0 s = dsa::ue8m0::ceil_pow2(v[i]);
    ceil_bits[i] = s.bits;
    ceil_value[i] = s.to_float();
    from_pow2[i] = dsa::ue8m0::from_pow2(v[i]).bits;
  }
}

// Exactly one warp per 32 inputs, every lane active, so the full-mask shuffles are valid.
__global__ void warp_reduce_kernel(const float* x, index_t warps, float* sum32, float* max32, float* min32,
                                   float* sum8, float* max8, std::int32_t* isum32) {
  const index_t warp = (blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x) / 32;
  if (warp >= warps) return;  // whole warps only: blockDim is a multiple of 32
  const index_t i = warp * 32 + (threadIdx.x % 32);
  const float v = x[i];
  sum32[i] = dsa::cuda_arch::warp_reduce_sum(v);
  max32[i] = dsa::cuda_arch::warp_reduce_max(v);
  min32[i] = dsa::cuda_arch::warp_reduce_min(v);
  sum8[i] = dsa::cuda_arch::warp_reduce_sum<8>(v);
  max8[i] = dsa::cuda_arch::warp_reduce_max<8>(v);
  isum32[i] = dsa::cuda_arch::warp_reduce_sum(static_cast<std::int32_t>(v));
}

// ---- host launchers -----------------------------------------------------------------------------

device_conversions convert(std::span<const float> x) {
  scoped_stream stream;
  const cudaStream_t s = stream.get();
  const auto n = static_cast<index_t>(x.size());
  auto dx = upload(x, s);
  dsa::device_buffer<std::uint8_t> e4m3(n, s), e5m2(n, s), e5m2_sat(n, s);
  dsa::device_buffer<std::uint16_t> bf(n, s);
  dsa::device_buffer<float> e4m3_back(n, s), e5m2_back(n, s), bf_back(n, s);
  if (n > 0) {
    convert_kernel<<<grid_for(n), block_threads, 0, s>>>(dx.data(), n, e4m3.data(), e4m3_back.data(), e5m2.data(),
                                                         e5m2_sat.data(), e5m2_back.data(), bf.data(), bf_back.data());
    DSA_CUDA_CHECK_LAUNCH();
  }
  device_conversions r;
  r.e4m3 = download(e4m3, s);
  r.e4m3_back = download(e4m3_back, s);
  r.e5m2 = download(e5m2, s);
  r.e5m2_sat = download(e5m2_sat, s);
  r.e5m2_back = download(e5m2_back, s);
  r.bf16 = download(bf, s);
  r.bf16_back = download(bf_back, s);
  return r;
}

device_fp8_decodes decode_fp8(std::span<const std::uint8_t> codes) {
  check_multiple(codes.size(), 16, "codes.size()");
  scoped_stream stream;
  const cudaStream_t s = stream.get();
  const auto n = static_cast<index_t>(codes.size());
  auto dcodes = upload(codes, s);
  dsa::device_buffer<float> scalar(n, s), x16(n, s), x4_sw(n, s), e5m2(n, s);
  if (n > 0) {
    // cudaMallocAsync memory is at least 256-byte aligned, so the uint4 loads are aligned.
    decode_fp8_kernel<<<grid_for(n / 16), block_threads, 0, s>>>(reinterpret_cast<const uint4*>(dcodes.data()),
                                                                 n / 16, scalar.data(), x16.data(), x4_sw.data(),
                                                                 e5m2.data());
    DSA_CUDA_CHECK_LAUNCH();
  }
  device_fp8_decodes r;
  r.e4m3_scalar = download(scalar, s);
  r.e4m3_x16 = download(x16, s);
  r.e4m3_x4_sw = download(x4_sw, s);
  r.e5m2_x4 = download(e5m2, s);
  return r;
}

std::vector<std::uint8_t> encode_e4m3x16(std::span<const float> x) {
  check_multiple(x.size(), 16, "x.size()");
  scoped_stream stream;
  const cudaStream_t s = stream.get();
  const auto n = static_cast<index_t>(x.size());
  auto dx = upload(x, s);
  dsa::device_buffer<std::uint8_t> codes(n, s);
  if (n > 0) {
    encode_e4m3x16_kernel<<<grid_for(n / 16), block_threads, 0, s>>>(dx.data(), n / 16,
                                                                     reinterpret_cast<uint4*>(codes.data()));
    DSA_CUDA_CHECK_LAUNCH();
  }
  return download(codes, s);
}

device_ue8m0 ue8m0(std::span<const float> v) {
  scoped_stream stream;
  const cudaStream_t s = stream.get();
  const auto n = static_cast<index_t>(v.size());
  auto dv = upload(v, s);
  dsa::device_buffer<std::uint8_t> ceil_bits(n, s), from_pow2(n, s);
  dsa::device_buffer<float> ceil_value(n, s);
  if (n > 0) {
    ue8m0_kernel<<<grid_for(n), block_threads, 0, s>>>(dv.data(), n, ceil_bits.data(), ceil_value.data(),
                                                       from_pow2.data());
    DSA_CUDA_CHECK_LAUNCH();
  }
  device_ue8m0 r;
  r.ceil_pow2 = download(ceil_bits, s);
  r.ceil_pow2_value = download(ceil_value, s);
  r.from_pow2 = download(from_pow2, s);
  return r;
}

device_warp_reductions warp_reduce(std::span<const float> x) {
  check_multiple(x.size(), 32, "x.size()");
  scoped_stream stream;
  const cudaStream_t s = stream.get();
  const auto n = static_cast<index_t>(x.size());
  auto dx = upload(x, s);
  dsa::device_buffer<float> sum32(n, s), max32(n, s), min32(n, s), sum8(n, s), max8(n, s);
  dsa::device_buffer<std::int32_t> isum32(n, s);
  if (n > 0) {
    const auto blocks = static_cast<unsigned>((n + block_threads - 1) / block_threads);  // one thread per value
    warp_reduce_kernel<<<blocks, block_threads, 0, s>>>(dx.data(), n / 32, sum32.data(), max32.data(),
                                                             min32.data(), sum8.data(), max8.data(), isum32.data());
    DSA_CUDA_CHECK_LAUNCH();
  }
  device_warp_reductions r;
  r.sum32 = download(sum32, s);
  r.max32 = download(max32, s);
  r.min32 = download(min32, s);
  r.sum8 = download(sum8, s);
  r.max8 = download(max8, s);
  r.isum32 = download(isum32, s);
  return r;
}

}  // namespace

#if !DSA_TEST_LAUNCHERS_FAST_MATH
void fp8_linear_grid_rows(const dsa::cuda_backend& be, dsa::device_view<const dsa::bf16, 2> x,
                          dsa::device_view<const dsa::fp8_e4m3, 2> w, dsa::device_view<const float, 2> w_scale,
                          dsa::device_view<dsa::bf16, 2> y, dsa::scale_format act_format, index_t max_rows) {
  dsa::cuda_detail::run_fp8_linear(be, x, w, w_scale, y, act_format, max_rows);
}
void fp8_linear_bf16_fallback(const dsa::cuda_backend& be, dsa::device_view<const dsa::bf16, 2> x,
                              dsa::device_view<const dsa::fp8_e4m3, 2> w, dsa::device_view<const float, 2> w_scale,
                              dsa::device_view<dsa::bf16, 2> y, dsa::scale_format act_format,
                              dsa::device_view<std::byte, 1> workspace) {
  dsa::cuda_detail::run_fp8_linear_fast(be, x, w, w_scale, y, act_format, workspace,
                                        dsa::cuda_detail::fp8_linear_forcing::bf16_fallback);
}
void linear_simt_grid_rows(const dsa::cuda_backend& be, dsa::device_view<const dsa::bf16, 2> x,
                           dsa::device_view<const float, 2> w, dsa::device_view<float, 2> y, index_t max_rows) {
  dsa::cuda_detail::run_linear_simt(be, x, w, y, max_rows);
}
#endif

#if DSA_TEST_LAUNCHERS_FAST_MATH
const cuda_launchers& cuda_launchers_fast_math() {
  static const cuda_launchers l{"nvcc --use_fast_math", convert, decode_fp8, encode_e4m3x16, ue8m0, warp_reduce};
  return l;
}
#else
const cuda_launchers& cuda_launchers_default() {
  static const cuda_launchers l{"nvcc default flags", convert, decode_fp8, encode_e4m3x16, ue8m0, warp_reduce};
  return l;
}
#endif

}  // namespace dsa_test
