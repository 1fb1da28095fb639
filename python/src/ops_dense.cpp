// The dense building blocks of the forward pass: fp8_linear, linear, rms_norm, add_rms_norm,
// layer_norm, rope_apply, swiglu.
#include "common.hpp"
#include "dsa/cpu/activation.hpp"
#include "dsa/cpu/linear.hpp"
#include "dsa/cpu/norm.hpp"
#include "dsa/cpu/rope.hpp"
#include "dsa/ops/activation.hpp"
#include "dsa/ops/linear.hpp"
#include "dsa/ops/norm.hpp"
#include "dsa/ops/rope.hpp"

namespace dsa_py {
namespace {

dsa::scale_format parse_act_format(std::string_view s) {
  if (s == "ue8m0") return dsa::scale_format::ue8m0;
  if (s == "fp32") return dsa::scale_format::fp32;
  dsa::fail("fp8_linear", "act_format", std::string(s), "'ue8m0' or 'fp32'");
}

void fp8_linear(nb::handle x, nb::handle w, nb::handle w_scale, nb::handle y, std::string_view act_format,
                int threads) {
  constexpr std::string_view op = "fp8_linear";
  const ro_array xa = input_array(x, op, "x");
  const input<dsa::fp8_e4m3, 2> wi(w, op, "w");
  const input<float, 2> si(w_scale, op, "w_scale");
  const rw_array ya = output_array(y, op, "y");
  const auto fmt = parse_act_format(act_format);
  const auto be = cpu_backend(threads, op);
  with_float_or_bf16(xa, op, "x", [&]<class X>(std::type_identity<X>) {
    const auto xv = view_of<const X, 2>(xa, op, "x");
    with_float_or_bf16(ya, op, "y", [&]<class O>(std::type_identity<O>) {
      const auto yv = view_of<O, 2>(ya, op, "y");
      nogil g;
      dsa::fp8_linear(be, xv, wi.view, si.view, yv, fmt);
    });
  });
}

void linear(nb::handle x, nb::handle w, nb::handle y, int threads) {
  constexpr std::string_view op = "linear";
  const ro_array xa = input_array(x, op, "x");
  const ro_array wa = input_array(w, op, "w");
  const rw_array ya = output_array(y, op, "y");
  const auto be = cpu_backend(threads, op);
  with_float_or_bf16(xa, op, "x", [&]<class X>(std::type_identity<X>) {
    const auto xv = view_of<const X, 2>(xa, op, "x");
    with_float_or_bf16(wa, op, "w", [&]<class W>(std::type_identity<W>) {
      const auto wv = view_of<const W, 2>(wa, op, "w");
      with_float_or_bf16(ya, op, "y", [&]<class O>(std::type_identity<O>) {
        const auto yv = view_of<O, 2>(ya, op, "y");
        nogil g;
        dsa::linear(be, xv, wv, yv);
      });
    });
  });
}

void rms_norm(nb::handle x, nb::handle weight, nb::handle y, float eps, int threads) {
  constexpr std::string_view op = "rms_norm";
  const ro_array xa = input_array(x, op, "x");
  const input<float, 1> wi(weight, op, "weight");
  output<dsa::bf16, 2> yo(y, op, "y");
  const auto be = cpu_backend(threads, op);
  with_float_or_bf16(xa, op, "x", [&]<class X>(std::type_identity<X>) {
    const auto xv = view_of<const X, 2>(xa, op, "x");
    nogil g;
    dsa::rms_norm(be, xv, wi.view, yo.view, eps);
  });
}

void add_rms_norm(nb::handle x, nb::handle residual, nb::handle weight, nb::handle y, float eps, int threads) {
  constexpr std::string_view op = "add_rms_norm";
  const input<dsa::bf16, 2> xi(x, op, "x");
  output<dsa::bf16, 2> ro(residual, op, "residual");
  const input<float, 1> wi(weight, op, "weight");
  output<dsa::bf16, 2> yo(y, op, "y");
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::add_rms_norm(be, xi.view, ro.view, wi.view, yo.view, eps);
}

void layer_norm(nb::handle x, nb::handle weight, nb::handle bias, nb::handle y, float eps, int threads) {
  constexpr std::string_view op = "layer_norm";
  const ro_array xa = input_array(x, op, "x");
  const input<float, 1> wi(weight, op, "weight");
  const input<float, 1> bi(bias, op, "bias");
  output<dsa::bf16, 2> yo(y, op, "y");
  const auto be = cpu_backend(threads, op);
  with_float_or_bf16(xa, op, "x", [&]<class X>(std::type_identity<X>) {
    const auto xv = view_of<const X, 2>(xa, op, "x");
    nogil g;
    dsa::layer_norm(be, xv, wi.view, bi.view, yo.view, eps);
  });
}

dsa::rope_layout parse_layout(std::string_view s) {
  if (s == "interleaved") return dsa::rope_layout::interleaved;
  if (s == "half") return dsa::rope_layout::half;
  dsa::fail("rope_apply", "layout", std::string(s), "'interleaved' (pairs 2j, 2j+1) or 'half' (pairs j, j + dim/2)");
}

void rope_apply(nb::handle x, nb::handle positions, dsa::index_t dim, float base, float factor,
                dsa::index_t original_max_position, dsa::index_t max_position, float beta_fast, float beta_slow,
                std::string_view layout_name, int threads) {
  constexpr std::string_view op = "rope_apply";
  // In place on x, which may be a strided slice (the rope part of a wider q or kv tensor).
  output<dsa::bf16, 3> xo(x, op, "x", layout::outer_strided);
  const input<std::int32_t, 1> pi(positions, op, "positions");
  dsa::rope_config cfg;
  cfg.dim = dim;
  cfg.base = base;
  cfg.factor = factor;
  cfg.original_max_position = original_max_position;
  cfg.max_position = max_position;
  cfg.beta_fast = beta_fast;
  cfg.beta_slow = beta_slow;
  const auto lay = parse_layout(layout_name);
  dsa::check_rope_config(cfg);
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::rope_apply(be, xo.view, pi.view, cfg, lay);
}

void swiglu(nb::handle gate, nb::handle up, nb::handle y, int threads) {
  constexpr std::string_view op = "swiglu";
  const input<dsa::bf16, 2> gi(gate, op, "gate");
  const input<dsa::bf16, 2> ui(up, op, "up");
  output<dsa::bf16, 2> yo(y, op, "y");
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::swiglu(be, gi.view, ui.view, yo.view);
}

}  // namespace

void bind_dense(nb::module_& m) {
  m.def("fp8_linear", &fp8_linear, nb::arg("x"), nb::arg("w"), nb::arg("w_scale"), nb::arg("y"),
        nb::arg("act_format"), nb::arg("threads"));
  m.def("linear", &linear, nb::arg("x"), nb::arg("w"), nb::arg("y"), nb::arg("threads"));
  m.def("rms_norm", &rms_norm, nb::arg("x"), nb::arg("weight"), nb::arg("y"), nb::arg("eps"), nb::arg("threads"));
  m.def("add_rms_norm", &add_rms_norm, nb::arg("x"), nb::arg("residual"), nb::arg("weight"), nb::arg("y"),
        nb::arg("eps"), nb::arg("threads"));
  m.def("layer_norm", &layer_norm, nb::arg("x"), nb::arg("weight"), nb::arg("bias"), nb::arg("y"), nb::arg("eps"),
        nb::arg("threads"));
  m.def("rope_apply", &rope_apply, nb::arg("x"), nb::arg("positions"), nb::arg("dim"), nb::arg("base"),
        nb::arg("factor"), nb::arg("original_max_position"), nb::arg("max_position"), nb::arg("beta_fast"),
        nb::arg("beta_slow"), nb::arg("layout"), nb::arg("threads"));
  m.def("swiglu", &swiglu, nb::arg("gate"), nb::arg("up"), nb::arg("y"), nb::arg("threads"));
}

}  // namespace dsa_py
