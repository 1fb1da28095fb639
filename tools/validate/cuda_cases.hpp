// The CUDA side of dsa_validate: an executor (primitive_cases.hpp) whose members stage the case's
// host inputs into device buffers, call the same public ops with a dsa::cuda_backend, and copy
// the outputs back, so every primitive group runs on the GPU under the same loading and the same
// criteria as on the CPU.
//
// Declarations only, compiled by the host compiler (dsa_validate.cpp); the definitions are in
// validate/cuda_cases.cu and validate/cuda_model_case.cu, compiled by nvcc (the op
// implementations launch kernels), and are linked into dsa_validate only when dsa is built with
// DSA_ENABLE_CUDA=ON. Only plain host types cross the boundary: host views, the ops' config
// structs, std::string, model_case_result.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/ops/fp8_quant.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"
#include "validate/model_replay.hpp"

namespace dsa_validate {

/// "<name> (sm_<major><minor>, <memory> GiB)" of the current device, for the report line. Needs a
/// device (check dsa::has_device() first); throws dsa::cuda_error otherwise.
std::string cuda_device_description();

/// The CUDA executor (concept `executor` of primitive_cases.hpp). Each member:
///  1. copies every input view into a device buffer of its shape (cudaMalloc; the views are
///     contiguous host tensors),
///  2. fills every output buffer with output_poison_byte (validate/executor.hpp), so that an
///     element the kernel fails to write fails its comparison instead of passing as a zero,
///  3. calls dsa::<op>(cuda_backend{stream}, device views..., config): the real front-end,
///     op_impl<cuda_backend, ...> and kernel,
///  4. copies the outputs into the host views and synchronises the stream.
/// Front-end errors (dsa::error) propagate as they are (run_group reports them as input errors);
/// CUDA runtime errors (dsa::cuda_error, e.g. a kernel fault) become backend_error.
class cuda_executor {
 public:
  explicit cuda_executor(cudaStream_t stream = nullptr) : stream_(stream) {}

  std::string_view backend_name() const { return dsa::cuda_backend::name; }
  cudaStream_t stream() const { return stream_; }

  void hadamard_transform(dsa::host_view<const dsa::bf16, 2> x, dsa::host_view<dsa::bf16, 2> y, float scale) const;
  void hadamard_transform(dsa::host_view<const float, 2> x, dsa::host_view<float, 2> y, float scale) const;
  void act_quant(dsa::host_view<const dsa::bf16, 2> x, dsa::host_view<dsa::fp8_e4m3, 2> q, dsa::host_view<float, 2> s,
                 const dsa::act_quant_config& cfg) const;
  void weight_quant(dsa::host_view<const float, 2> w, dsa::host_view<dsa::fp8_e4m3, 2> q,
                    dsa::host_view<float, 2> s) const;
  void lightning_indexer_scores(dsa::host_view<const dsa::fp8_e4m3, 3> q, dsa::host_view<const float, 2> w,
                                dsa::host_view<const dsa::fp8_e4m3, 2> k, dsa::host_view<const float, 1> k_scale,
                                dsa::host_view<const std::int32_t, 2> ranges, dsa::host_view<float, 2> scores) const;
  void topk_indices(dsa::host_view<const float, 2> scores, dsa::host_view<const std::int32_t, 2> ranges,
                    dsa::index_t k, dsa::host_view<std::int32_t, 2> indices) const;
  /// dsa::sparse_mla_attention_num_splits(s, h, k, the current device's SM count).
  dsa::index_t sparse_mla_num_splits(dsa::index_t s, dsa::index_t h, dsa::index_t k) const;
  /// config.num_splits > 1 runs the workspace overload with a device workspace of
  /// sparse_mla_attention_workspace_size(s, h, d_v, num_splits) bytes.
  void sparse_mla_attention(dsa::host_view<const dsa::bf16, 3> q, dsa::host_view<const dsa::bf16, 2> kv,
                            dsa::host_view<const std::int32_t, 2> indices, dsa::host_view<float, 3> out,
                            dsa::host_view<float, 2> lse, const dsa::sparse_mla_config& cfg) const;
  /// The KL losses run the workspace overloads (the CUDA backend sums the per-row losses in a
  /// second pass) with a device workspace of indexer_kl_loss_*_workspace_size bytes.
  void indexer_kl_loss_dense(dsa::host_view<const float, 3> attn, dsa::host_view<const float, 2> index_scores,
                             dsa::host_view<const std::int32_t, 2> ranges, dsa::host_view<float, 1> loss,
                             dsa::host_view<float, 2> grad_index) const;
  void indexer_kl_loss_sparse(dsa::host_view<const float, 3> attn, dsa::host_view<const float, 2> index_scores,
                              dsa::host_view<const std::int32_t, 2> topk, dsa::host_view<float, 1> loss,
                              dsa::host_view<float, 2> grad_index) const;

 private:
  cudaStream_t stream_ = nullptr;
};

/// --model DIR --backend cuda: run_model_case (validate/model_replay.hpp) on
/// dsa::model::transformer<dsa::cuda_backend> on the default stream of the current device; the
/// same replay and criteria as on the CPU, dsa::linear on `linear` (--cuda-linear), the computed
/// tensors kept only with `keep_outputs` (for --dump). Defined in validate/cuda_model_case.cu.
/// CUDA runtime errors become backend_error; a malformed directory throws as on the CPU
/// (dsa::error, input_error).
model_case_result run_model_case_cuda(const std::filesystem::path& dir, dsa::cuda_linear_path linear,
                                      bool keep_outputs);

}  // namespace dsa_validate
