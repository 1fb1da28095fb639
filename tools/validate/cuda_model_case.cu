// dsa_validate --model DIR --backend cuda (declared in validate/cuda_cases.hpp): the golden model
// replay of validate/model_replay.hpp instantiated for dsa::model::transformer<cuda_backend>.
// Compiled by nvcc (the transformer's layers launch kernels); holds no comparison logic.
#include <filesystem>
#include <string>

#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/error.hpp"
#include "dsa/model/cuda/transformer.cuh"
#include "validate/cuda_cases.hpp"
#include "validate/executor.hpp"
#include "validate/model_replay.hpp"

namespace dsa_validate {

model_case_result run_model_case_cuda(const std::filesystem::path& dir, dsa::cuda_linear_path linear,
                                      bool keep_outputs) {
  try {
    // The default stream; the transformer owns a cuBLAS handle (blas == nullptr; none with the
    // SIMT linear) and returns from each forward() once the logits are on the host, so nothing is
    // left in flight here.
    return run_model_case(dsa::cuda_backend{nullptr, nullptr, linear}, dir, dsa::model::forward_options{}.max_chunk,
                          keep_outputs);
  } catch (const dsa::cuda_error& e) {
    throw backend_error(std::string("model::transformer on the CUDA backend: ") + e.what());
  }
}

}  // namespace dsa_validate
