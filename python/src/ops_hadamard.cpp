// hadamard_transform.
#include "common.hpp"
#include "dsa/cpu/hadamard.hpp"
#include "dsa/ops/hadamard.hpp"

namespace dsa_py {
namespace {

void hadamard_transform(nb::handle x, nb::handle y, float scale, int threads, std::uintptr_t stream) {
  on_device_of(x, "hadamard_transform", "x", threads, stream, [&](const auto& p) {
    const ro_array xa = input_array(x, p.op, "x");
    with_float_or_bf16(xa, p.op, "x", [&]<class T>(std::type_identity<T>) {
      const auto xv = view_of<const T, 2>(p, xa, "x");
      // y may be x itself (in place): the front-end accepts exactly that aliasing.
      const auto yo = out<T, 2>(p, y, "y");
      p.run([&](const auto& be) { DSA_PY_CALL(hadamard_transform, be, xv, yo.view, scale); });
    });
  });
}

}  // namespace

void bind_hadamard(nb::module_& m) {
  m.def("hadamard_transform", &hadamard_transform, array("x"), array("y"), nb::arg("scale"), nb::arg("threads"),
        nb::arg("stream"));
}

}  // namespace dsa_py
