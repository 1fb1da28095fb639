// dsa::model::transformer<cuda_backend>, instantiated by nvcc for the doctest tests (see
// model_launchers.hpp).
#include "model_launchers.hpp"

#include <utility>

#include "dsa/model/cuda/transformer.cuh"

namespace dsa_test::cuda_model {

struct cuda_transformer::impl {
  dsa::model::transformer<dsa::cuda_backend> m;
};

cuda_transformer::cuda_transformer(std::unique_ptr<impl> p) : p_(std::move(p)) {}
cuda_transformer::cuda_transformer(cuda_transformer&&) noexcept = default;
cuda_transformer& cuda_transformer::operator=(cuda_transformer&&) noexcept = default;
cuda_transformer::~cuda_transformer() = default;

cuda_transformer cuda_transformer::load(const std::filesystem::path& dir, dsa::cuda_backend be,
                                        dsa::index_t num_layers) {
  return cuda_transformer(
      std::make_unique<impl>(impl{dsa::model::transformer<dsa::cuda_backend>::load(dir, be, num_layers)}));
}

const dsa::model::config& cuda_transformer::config() const { return p_->m.config(); }
dsa::index_t cuda_transformer::num_layers() const { return p_->m.num_layers(); }
const dsa::cuda_backend& cuda_transformer::backend() const { return p_->m.backend(); }
std::size_t cuda_transformer::device_weight_bytes() const { return p_->m.resources().device_weights().bytes(); }
dsa::model::device_sequence cuda_transformer::new_sequence(dsa::index_t max_tokens) const {
  return p_->m.new_sequence(max_tokens);
}
std::vector<float> cuda_transformer::forward(dsa::model::device_sequence& seq, std::span<const std::int64_t> tokens,
                                             const dsa::model::forward_options& opt) {
  return p_->m.forward(seq, tokens, opt);
}
std::vector<float> cuda_transformer::forward(dsa::model::device_sequence& seq, std::span<const std::int32_t> tokens,
                                             const dsa::model::forward_options& opt) {
  return p_->m.forward(seq, tokens, opt);
}
const dsa::model::phase_times& cuda_transformer::phase_times() const { return p_->m.phase_times(); }

}  // namespace dsa_test::cuda_model
