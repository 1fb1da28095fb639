// hadamard_transform.
#include "common.hpp"
#include "dsa/cpu/hadamard.hpp"
#include "dsa/ops/hadamard.hpp"

namespace dsa_py {
namespace {

void hadamard_transform(nb::handle x, nb::handle y, float scale, int threads) {
  constexpr std::string_view op = "hadamard_transform";
  const ro_array xa = input_array(x, op, "x");
  with_float_or_bf16(xa, op, "x", [&]<class T>(std::type_identity<T>) {
    const auto xv = view_of<const T, 2>(xa, op, "x");
    // y may be x itself (in place): the front-end accepts exactly that aliasing.
    output<T, 2> yo(y, op, "y");
    const auto be = cpu_backend(threads, op);
    nogil g;
    dsa::hadamard_transform(be, xv, yo.view, scale);
  });
}

}  // namespace

void bind_hadamard(nb::module_& m) {
  m.def("hadamard_transform", &hadamard_transform, nb::arg("x"), nb::arg("y"), nb::arg("scale"), nb::arg("threads"));
}

}  // namespace dsa_py
