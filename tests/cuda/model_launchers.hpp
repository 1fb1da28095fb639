// dsa::model::transformer<cuda_backend> for the doctest tests (.cpp, host compiler): the CUDA
// transformer is compiled by nvcc in model_launchers.cu (its ops' implementations are .cuh) and
// reached through this thin pimpl, whose interface is plain C++. Every member forwards to the
// transformer's member of the same name, so the tests exercise the real class.
//
// device_sequence (dsa/model/cuda/device_sequence.hpp) and forward_options (dsa/model/forward.hpp) are
// plain C++ too, so the tests hold sequences and observers directly.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "dsa/core/tensor_view.hpp"
#include "dsa/cuda/backend.hpp"
#include "dsa/model/config.hpp"
#include "dsa/model/cuda/device_sequence.hpp"
#include "dsa/model/forward.hpp"
#include "dsa/model/layers/context.hpp"

namespace dsa_test::cuda_model {

class cuda_transformer {
 public:
  /// transformer<cuda_backend>::load(dir, be, num_layers).
  static cuda_transformer load(const std::filesystem::path& dir, dsa::cuda_backend be, dsa::index_t num_layers = -1);

  cuda_transformer(cuda_transformer&&) noexcept;
  cuda_transformer& operator=(cuda_transformer&&) noexcept;
  ~cuda_transformer();

  const dsa::model::config& config() const;
  dsa::index_t num_layers() const;
  /// The backend the model runs on (blas set: its own handle when the one passed in had none).
  const dsa::cuda_backend& backend() const;
  /// Device bytes of the uploaded weights.
  std::size_t device_weight_bytes() const;
  dsa::model::device_sequence new_sequence(dsa::index_t max_tokens) const;
  std::vector<float> forward(dsa::model::device_sequence& seq, std::span<const std::int64_t> tokens,
                             const dsa::model::forward_options& opt = {});
  std::vector<float> forward(dsa::model::device_sequence& seq, std::span<const std::int32_t> tokens,
                             const dsa::model::forward_options& opt = {});
  const dsa::model::phase_times& phase_times() const;

 private:
  struct impl;
  explicit cuda_transformer(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

}  // namespace dsa_test::cuda_model
