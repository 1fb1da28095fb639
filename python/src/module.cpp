// dsa._core: the compiled part of the Python package (python/dsa/ is the public API).
#include <nanobind/nanobind.h>

#include "common.hpp"
#include "dsa/core/config.hpp"
#include "dsa/cpu/arch/isa.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/quote.hpp"
#include "dsa/model/nonfinite.hpp"

namespace nb = nanobind;

NB_MODULE(_core, m) {
  m.doc() = "dsa's compiled ops; use the `dsa` package, which allocates outputs and maps dtypes.";
  // Every dsa::error (bad shapes, dtypes, ranges, files) becomes dsa.Error, a ValueError, with the
  // same message.
  nb::exception<dsa::error> error(m, "Error", PyExc_ValueError);
  // Transformer.forward's non-finite logits (dsa/model/nonfinite.hpp): a dsa.Error of its own, so
  // that a caller can tell a run that went NaN from a bad argument. Registered after dsa.Error:
  // nanobind tries the translators newest first.
  nb::exception<dsa::model::nonfinite_error>(m, "NonFiniteError", error.ptr());
  m.attr("__version__") = std::to_string(DSA_VERSION_MAJOR) + "." + std::to_string(DSA_VERSION_MINOR) + "." +
                          std::to_string(DSA_VERSION_PATCH);
#ifdef DSA_PY_CUDA
  // The CUDA paths are compiled in (DSA_ENABLE_CUDA=ON): CUDA arrays run dsa::cuda_backend.
  m.attr("has_cuda_build") = true;
  m.def("cuda_device_count", [] { return dsa_py::cuda_device_count(); },
        "The number of CUDA devices this process sees (0 without a GPU or a new enough driver).");
#else
  m.attr("has_cuda_build") = false;
  m.def("cuda_device_count", [] { return 0; }, "0: this build has no CUDA paths.");
#endif
  // For the Python layer's argument checks (python/dsa/_arrays.py): the thread bound, the import
  // of an array argument before anything is allocated from its shape, and the escaping every
  // dsa::error message gets, for the messages built in Python.
  m.attr("max_threads") = dsa_py::max_threads;
  // The level the CPU kernels run at: that of the libdsa_cpu.so the loader chose for this CPU
  // (cmake/dsaCpuDispatch.cmake), or the module's own where its units compile the ops.
#if defined(DSA_EXTERN_CPU_OPS)
  m.attr("cpu_isa") = std::string(dsa::cpu_detail::isa_level_name(dsa::cpu_detail::instances_isa_level()));
#else
  m.attr("cpu_isa") = std::string(dsa::cpu_detail::isa_level_name(dsa::cpu_detail::compiled_isa_level()));
#endif
  m.def("array_info", &dsa_py::array_info, dsa_py::array("a"), nb::arg("op"), nb::arg("name"), nb::arg("rank"),
        nb::arg("strided"));
  m.def("quoted", [](std::string_view text) { return dsa::quoted(text); }, nb::arg("text"));
  m.def("printable", [](std::string_view text) { return dsa::detail::printable_error_message(text); },
        nb::arg("text"));
  // The ops, by family (docs/architecture.md, "Op families"): ops_<family>.cpp.
  dsa_py::bind_quant(m);
  dsa_py::bind_indexer(m);
  dsa_py::bind_topk(m);
  dsa_py::bind_attention(m);
  dsa_py::bind_dense(m);
  dsa_py::bind_moe(m);
  dsa_py::bind_model(m);
  dsa_py::bind_validate(m);
}
