// Converting dsa_validate's result types (tools/validate/golden_format.hpp) into Python data:
// dicts, lists, and the computed tensors as (dtype name, shape, bytes) for the Python layer to
// turn into arrays.
#pragma once

#include <nanobind/nanobind.h>

#include <string>
#include <vector>

#include "common.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "validate/golden_format.hpp"

namespace dsa_py {

inline nb::dict comparison_dict(const dsa_validate::comparison& c) {
  nb::dict d;
  d["tensor"] = c.tensor;
  d["metric"] = c.metric;
  d["max_error"] = c.max_error;
  d["tolerance"] = c.tolerance;
  d["pass"] = c.pass;
  return d;
}

inline nb::list comparison_list(const std::vector<dsa_validate::comparison>& cs) {
  nb::list l;
  for (const auto& c : cs) l.append(comparison_dict(c));
  return l;
}

/// {name: {"dtype": "F32", "shape": [...], "data": bytes}} of the computed outputs.
inline nb::dict output_dict(const std::vector<dsa_validate::output_tensor>& outs) {
  nb::dict d;
  for (const auto& o : outs) {
    nb::dict t;
    t["dtype"] = std::string(dsa::dtype_name(o.type));
    nb::list shape;
    for (dsa::index_t e : o.shape) shape.append(e);
    t["shape"] = shape;
    t["data"] = nb::bytes(reinterpret_cast<const char*>(o.bytes.data()), o.bytes.size());
    d[o.name.c_str()] = t;
  }
  return d;
}

/// "cpu (N threads)", as dsa_validate prints it.
inline std::string cpu_description(const dsa::cpu_backend& be) {
  const int threads = dsa::cpu_detail::thread_count(be);
  return "cpu (" + std::to_string(threads) + (threads == 1 ? " thread)" : " threads)");
}

}  // namespace dsa_py
