// dsa.validate: dsa_validate's golden primitive replay (tools/validate/primitive_cases.hpp, the
// same code the command-line tool runs) returning the report as data.
#include <filesystem>
#include <string>

#include "common.hpp"
#include "dsa/core/quote.hpp"
#include "dsa/model/safetensors.hpp"
#include "results.hpp"
#include "validate/primitive_cases.hpp"

namespace dsa_py {
namespace {

nb::dict validate(const std::string& file, int threads) {
  constexpr std::string_view op = "validate";
  const auto be = cpu_backend(threads, op);
  const std::filesystem::path path = path_arg(op, "file", file);
  nb::dict report;
  report["file"] = file;
  report["backend"] = cpu_description(be);
  const dsa::safetensors_file f = dsa::safetensors_file::open(path);
  const std::vector<std::string> groups = dsa_validate::detect_groups(f);
  nb::list unknown;
  for (const std::string& u : dsa_validate::unknown_groups(f)) unknown.append(u);
  report["unknown_groups"] = unknown;
  if (groups.empty()) {
    dsa::fail(op, "file", dsa::quoted(file),
              "a golden-format file with at least one known case group (tensors named hadamard.*, hadamard_f32.*, "
              "act_quant.*, weight_quant.*, indexer.*, topk.*, sparse_mla.*, kl_dense.* or kl_sparse.*)");
  }
  nb::list results;
  int passed = 0, failed = 0, errors = 0;
  const dsa_validate::host_executor<dsa::cpu_backend> ex{be};
  for (const std::string& g : groups) {
    nb::dict r;
    r["name"] = g;
    dsa_validate::case_result cr;
    std::string error;
    bool backend_failed = false;
    {
      nogil release;
      try {
        cr = dsa_validate::run_group(ex, f, g);
      } catch (const dsa_validate::backend_error& e) {
        error = e.what();
        backend_failed = true;
      } catch (const dsa::error& e) {
        error = e.what();
      }
    }
    if (!error.empty()) {
      // A backend failure is a FAIL of dsa; a malformed group an ERROR of the file (as the tool).
      r["pass"] = false;
      r["error"] = error;
      r["comparisons"] = nb::list();
      r["outputs"] = nb::dict();
      (backend_failed ? failed : errors) += 1;
    } else {
      r["pass"] = cr.pass();
      r["error"] = nb::none();
      r["comparisons"] = comparison_list(cr.comparisons);
      r["outputs"] = output_dict(cr.outputs);
      (cr.pass() ? passed : failed) += 1;
    }
    results.append(r);
  }
  report["groups"] = results;
  report["passed"] = passed;
  report["failed"] = failed;
  report["errors"] = errors;
  report["pass"] = failed == 0 && errors == 0;
  return report;
}

}  // namespace

void bind_validate(nb::module_& m) { m.def("validate", &validate, nb::arg("file"), nb::arg("threads")); }

}  // namespace dsa_py
