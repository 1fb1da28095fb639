// dsa._core: the compiled part of the Python package (python/dsa/ is the public API).
#include <nanobind/nanobind.h>

#include "common.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"

namespace nb = nanobind;

NB_MODULE(_core, m) {
  m.doc() = "dsa's compiled ops; use the `dsa` package, which allocates outputs and maps dtypes.";
  // Every dsa::error (bad shapes, dtypes, ranges, files) becomes dsa.Error, a ValueError, with the
  // same message.
  nb::exception<dsa::error>(m, "Error", PyExc_ValueError);
  m.attr("__version__") = std::to_string(DSA_VERSION_MAJOR) + "." + std::to_string(DSA_VERSION_MINOR) + "." +
                          std::to_string(DSA_VERSION_PATCH);
#ifdef DSA_PY_CUDA
  m.attr("has_cuda_build") = true;
#else
  m.attr("has_cuda_build") = false;
#endif
  dsa_py::bind_hadamard(m);
  dsa_py::bind_quant(m);
  dsa_py::bind_kv_cache(m);
  dsa_py::bind_indexer(m);
  dsa_py::bind_topk(m);
  dsa_py::bind_attention(m);
  dsa_py::bind_kl_loss(m);
  dsa_py::bind_moe(m);
  dsa_py::bind_dense(m);
  dsa_py::bind_model(m);
  dsa_py::bind_validate(m);
}
