// FP8 quantizers: act_quant, act_dequant, weight_quant, weight_dequant.
#include "common.hpp"
#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/ops/fp8_quant.hpp"

namespace dsa_py {
namespace {

dsa::scale_format parse_scale_format(std::string_view s, std::string_view op, std::string_view name) {
  if (s == "ue8m0") return dsa::scale_format::ue8m0;
  if (s == "fp32") return dsa::scale_format::fp32;
  dsa::fail(op, name, std::string(s), "'ue8m0' or 'fp32'");
}

void act_quant(nb::handle x, nb::handle q, nb::handle s, std::string_view format, dsa::index_t group_size,
               int threads) {
  constexpr std::string_view op = "act_quant";
  const ro_array xa = input_array(x, op, "x");
  const dsa::act_quant_config cfg{parse_scale_format(format, op, "scale_format"), group_size};
  with_float_or_bf16(xa, op, "x", [&]<class T>(std::type_identity<T>) {
    const auto xv = view_of<const T, 2>(xa, op, "x");
    output<dsa::fp8_e4m3, 2> qo(q, op, "q");
    output<float, 2> so(s, op, "s");
    const auto be = cpu_backend(threads, op);
    nogil g;
    dsa::act_quant(be, xv, qo.view, so.view, cfg);
  });
}

void act_dequant(nb::handle q, nb::handle s, nb::handle y, dsa::index_t group_size, int threads) {
  constexpr std::string_view op = "act_dequant";
  const input<dsa::fp8_e4m3, 2> qi(q, op, "q");
  const input<float, 2> si(s, op, "s");
  const rw_array ya = output_array(y, op, "y");
  with_float_or_bf16(ya, op, "y", [&]<class T>(std::type_identity<T>) {
    const auto yv = view_of<T, 2>(ya, op, "y");
    const auto be = cpu_backend(threads, op);
    nogil g;
    dsa::act_dequant(be, qi.view, si.view, yv, group_size);
  });
}

void weight_quant(nb::handle w, nb::handle q, nb::handle s, int threads) {
  constexpr std::string_view op = "weight_quant";
  const ro_array wa = input_array(w, op, "w");
  with_float_or_bf16(wa, op, "w", [&]<class T>(std::type_identity<T>) {
    const auto wv = view_of<const T, 2>(wa, op, "w");
    output<dsa::fp8_e4m3, 2> qo(q, op, "q");
    output<float, 2> so(s, op, "s");
    const auto be = cpu_backend(threads, op);
    nogil g;
    dsa::weight_quant(be, wv, qo.view, so.view);
  });
}

void weight_dequant(nb::handle q, nb::handle s, nb::handle w, int threads) {
  constexpr std::string_view op = "weight_dequant";
  const input<dsa::fp8_e4m3, 2> qi(q, op, "q");
  const input<float, 2> si(s, op, "s");
  const rw_array wa = output_array(w, op, "w");
  with_float_or_bf16(wa, op, "w", [&]<class T>(std::type_identity<T>) {
    const auto wv = view_of<T, 2>(wa, op, "w");
    const auto be = cpu_backend(threads, op);
    nogil g;
    dsa::weight_dequant(be, qi.view, si.view, wv);
  });
}

}  // namespace

void bind_quant(nb::module_& m) {
  m.def("act_quant", &act_quant, nb::arg("x"), nb::arg("q"), nb::arg("s"), nb::arg("scale_format"),
        nb::arg("group_size"), nb::arg("threads"));
  m.def("act_dequant", &act_dequant, nb::arg("q"), nb::arg("s"), nb::arg("y"), nb::arg("group_size"),
        nb::arg("threads"));
  m.def("weight_quant", &weight_quant, nb::arg("w"), nb::arg("q"), nb::arg("s"), nb::arg("threads"));
  m.def("weight_dequant", &weight_dequant, nb::arg("q"), nb::arg("s"), nb::arg("w"), nb::arg("threads"));
}

}  // namespace dsa_py
