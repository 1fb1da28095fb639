// FP8 quantizers: act_quant, act_dequant, weight_quant, weight_dequant.
#include "common.hpp"
#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/ops/fp8_quant.hpp"

namespace dsa_py {
namespace {

dsa::scale_format parse_scale_format(std::string_view s, std::string_view op, std::string_view name) {
  if (s == "ue8m0") return dsa::scale_format::ue8m0;
  if (s == "fp32") return dsa::scale_format::fp32;
  dsa::fail(op, name, dsa::quoted(s), "'ue8m0' or 'fp32'");
}

void act_quant(nb::handle x, nb::handle q, nb::handle s, std::string_view format, dsa::index_t group_size, int threads,
               std::uintptr_t stream) {
  on_device_of(x, "act_quant", "x", threads, stream, [&](const auto& p) {
    const ro_array xa = input_array(x, p.op, "x");
    const dsa::act_quant_config cfg{parse_scale_format(format, p.op, "scale_format"), group_size};
    with_float_or_bf16(xa, p.op, "x", [&]<class T>(std::type_identity<T>) {
      const auto xv = view_of<const T, 2>(p, xa, "x");
      const auto qo = out<dsa::fp8_e4m3, 2>(p, q, "q");
      const auto so = out<float, 2>(p, s, "s");
      p.run([&](const auto& be) { DSA_PY_CALL(act_quant, be, xv, qo.view, so.view, cfg); });
    });
  });
}

void act_dequant(nb::handle q, nb::handle s, nb::handle y, dsa::index_t group_size, int threads,
                 std::uintptr_t stream) {
  on_device_of(q, "act_dequant", "q", threads, stream, [&](const auto& p) {
    const auto qi = in<dsa::fp8_e4m3, 2>(p, q, "q");
    const auto si = in<float, 2>(p, s, "s");
    const rw_array ya = output_array(y, p.op, "y");
    with_float_or_bf16(ya, p.op, "y", [&]<class T>(std::type_identity<T>) {
      const auto yv = view_of<T, 2>(p, ya, "y");
      p.run([&](const auto& be) { DSA_PY_CALL(act_dequant, be, qi.view, si.view, yv, group_size); });
    });
  });
}

void weight_quant(nb::handle w, nb::handle q, nb::handle s, int threads, std::uintptr_t stream) {
  on_device_of(w, "weight_quant", "w", threads, stream, [&](const auto& p) {
    const ro_array wa = input_array(w, p.op, "w");
    with_float_or_bf16(wa, p.op, "w", [&]<class T>(std::type_identity<T>) {
      const auto wv = view_of<const T, 2>(p, wa, "w");
      const auto qo = out<dsa::fp8_e4m3, 2>(p, q, "q");
      const auto so = out<float, 2>(p, s, "s");
      p.run([&](const auto& be) { DSA_PY_CALL(weight_quant, be, wv, qo.view, so.view); });
    });
  });
}

void weight_dequant(nb::handle q, nb::handle s, nb::handle w, int threads, std::uintptr_t stream) {
  on_device_of(q, "weight_dequant", "q", threads, stream, [&](const auto& p) {
    const auto qi = in<dsa::fp8_e4m3, 2>(p, q, "q");
    const auto si = in<float, 2>(p, s, "s");
    const rw_array wa = output_array(w, p.op, "w");
    with_float_or_bf16(wa, p.op, "w", [&]<class T>(std::type_identity<T>) {
      const auto wv = view_of<T, 2>(p, wa, "w");
      p.run([&](const auto& be) { DSA_PY_CALL(weight_dequant, be, qi.view, si.view, wv); });
    });
  });
}

}  // namespace

void bind_quant(nb::module_& m) {
  m.def("act_quant", &act_quant, array("x"), array("q"), array("s"), nb::arg("scale_format"),
        nb::arg("group_size"), nb::arg("threads"), nb::arg("stream"));
  m.def("act_dequant", &act_dequant, array("q"), array("s"), array("y"), nb::arg("group_size"),
        nb::arg("threads"), nb::arg("stream"));
  m.def("weight_quant", &weight_quant, array("w"), array("q"), array("s"), nb::arg("threads"),
        nb::arg("stream"));
  m.def("weight_dequant", &weight_dequant, array("q"), array("s"), array("w"), nb::arg("threads"),
        nb::arg("stream"));
}

}  // namespace dsa_py
