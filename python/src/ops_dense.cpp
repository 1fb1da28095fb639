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
  dsa::fail("fp8_linear", "act_format", dsa::quoted(s), "'ue8m0' or 'fp32'");
}

void fp8_linear(nb::handle x, nb::handle w, nb::handle w_scale, nb::handle y, std::string_view act_format,
                int threads, std::uintptr_t stream) {
  on_device_of(x, "fp8_linear", "x", threads, stream, [&](const auto& p) {
    const ro_array xa = input_array(x, p.op, "x");
    const auto wi = in<dsa::fp8_e4m3, 2>(p, w, "w");
    const auto si = in<float, 2>(p, w_scale, "w_scale");
    const rw_array ya = output_array(y, p.op, "y");
    const auto fmt = parse_act_format(act_format);
    with_float_or_bf16(xa, p.op, "x", [&]<class X>(std::type_identity<X>) {
      const auto xv = view_of<const X, 2>(p, xa, "x");
      with_float_or_bf16(ya, p.op, "y", [&]<class O>(std::type_identity<O>) {
        const auto yv = view_of<O, 2>(p, ya, "y");
        p.run([&](const auto& be) { dsa::fp8_linear(be, xv, wi.view, si.view, yv, fmt); });
      });
    });
  });
}

void linear(nb::handle x, nb::handle w, nb::handle y, int threads, std::uintptr_t stream) {
  on_device_of(x, "linear", "x", threads, stream, [&](const auto& p) {
    const ro_array xa = input_array(x, p.op, "x");
    const ro_array wa = input_array(w, p.op, "w");
    const rw_array ya = output_array(y, p.op, "y");
    with_float_or_bf16(xa, p.op, "x", [&]<class X>(std::type_identity<X>) {
      const auto xv = view_of<const X, 2>(p, xa, "x");
      with_float_or_bf16(wa, p.op, "w", [&]<class W>(std::type_identity<W>) {
        const auto wv = view_of<const W, 2>(p, wa, "w");
        with_float_or_bf16(ya, p.op, "y", [&]<class O>(std::type_identity<O>) {
          const auto yv = view_of<O, 2>(p, ya, "y");
          // The CUDA backend's linear runs on cuBLAS: this thread's handle for the device.
          p.run_blas([&](const auto& be) { dsa::linear(be, xv, wv, yv); });
        });
      });
    });
  });
}

void rms_norm(nb::handle x, nb::handle weight, nb::handle y, float eps, int threads, std::uintptr_t stream) {
  on_device_of(x, "rms_norm", "x", threads, stream, [&](const auto& p) {
    const ro_array xa = input_array(x, p.op, "x");
    const auto wi = in<float, 1>(p, weight, "weight");
    const auto yo = out<dsa::bf16, 2>(p, y, "y");
    with_float_or_bf16(xa, p.op, "x", [&]<class X>(std::type_identity<X>) {
      const auto xv = view_of<const X, 2>(p, xa, "x");
      p.run([&](const auto& be) { dsa::rms_norm(be, xv, wi.view, yo.view, eps); });
    });
  });
}

void add_rms_norm(nb::handle x, nb::handle residual, nb::handle weight, nb::handle y, float eps, int threads,
                  std::uintptr_t stream) {
  on_device_of(x, "add_rms_norm", "x", threads, stream, [&](const auto& p) {
    const auto xi = in<dsa::bf16, 2>(p, x, "x");
    const auto ro = out<dsa::bf16, 2>(p, residual, "residual");
    const auto wi = in<float, 1>(p, weight, "weight");
    const auto yo = out<dsa::bf16, 2>(p, y, "y");
    p.run([&](const auto& be) { dsa::add_rms_norm(be, xi.view, ro.view, wi.view, yo.view, eps); });
  });
}

void layer_norm(nb::handle x, nb::handle weight, nb::handle bias, nb::handle y, float eps, int threads,
                std::uintptr_t stream) {
  on_device_of(x, "layer_norm", "x", threads, stream, [&](const auto& p) {
    const ro_array xa = input_array(x, p.op, "x");
    const auto wi = in<float, 1>(p, weight, "weight");
    const auto bi = in<float, 1>(p, bias, "bias");
    const auto yo = out<dsa::bf16, 2>(p, y, "y");
    with_float_or_bf16(xa, p.op, "x", [&]<class X>(std::type_identity<X>) {
      const auto xv = view_of<const X, 2>(p, xa, "x");
      p.run([&](const auto& be) { dsa::layer_norm(be, xv, wi.view, bi.view, yo.view, eps); });
    });
  });
}

dsa::rope_layout parse_layout(std::string_view s) {
  if (s == "interleaved") return dsa::rope_layout::interleaved;
  if (s == "half") return dsa::rope_layout::half;
  dsa::fail("rope_apply", "layout", dsa::quoted(s), "'interleaved' (pairs 2j, 2j+1) or 'half' (pairs j, j + dim/2)");
}

void rope_apply(nb::handle x, nb::handle positions, dsa::index_t dim, float base, float factor,
                dsa::index_t original_max_position, dsa::index_t max_position, float beta_fast, float beta_slow,
                std::string_view layout_name, int threads, std::uintptr_t stream) {
  on_device_of(x, "rope_apply", "x", threads, stream, [&](const auto& p) {
    // In place on x, which may be a strided slice (the rope part of a wider q or kv tensor).
    const auto xo = out<dsa::bf16, 3>(p, x, "x", layout::outer_strided);
    const auto pi = in<std::int32_t, 1>(p, positions, "positions");
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
    p.run([&](const auto& be) { dsa::rope_apply(be, xo.view, pi.view, cfg, lay); });
  });
}

void swiglu(nb::handle gate, nb::handle up, nb::handle y, int threads, std::uintptr_t stream) {
  on_device_of(gate, "swiglu", "gate", threads, stream, [&](const auto& p) {
    const auto gi = in<dsa::bf16, 2>(p, gate, "gate");
    const auto ui = in<dsa::bf16, 2>(p, up, "up");
    const auto yo = out<dsa::bf16, 2>(p, y, "y");
    p.run([&](const auto& be) { dsa::swiglu(be, gi.view, ui.view, yo.view); });
  });
}

}  // namespace

void bind_dense(nb::module_& m) {
  m.def("fp8_linear", &fp8_linear, array("x"), array("w"), array("w_scale"), array("y"),
        nb::arg("act_format"), nb::arg("threads"), nb::arg("stream"));
  m.def("linear", &linear, array("x"), array("w"), array("y"), nb::arg("threads"), nb::arg("stream"));
  m.def("rms_norm", &rms_norm, array("x"), array("weight"), array("y"), nb::arg("eps"), nb::arg("threads"),
        nb::arg("stream"));
  m.def("add_rms_norm", &add_rms_norm, array("x"), array("residual"), array("weight"), array("y"),
        nb::arg("eps"), nb::arg("threads"), nb::arg("stream"));
  m.def("layer_norm", &layer_norm, array("x"), array("weight"), array("bias"), array("y"), nb::arg("eps"),
        nb::arg("threads"), nb::arg("stream"));
  m.def("rope_apply", &rope_apply, array("x"), array("positions"), nb::arg("dim"), nb::arg("base"),
        nb::arg("factor"), nb::arg("original_max_position"), nb::arg("max_position"), nb::arg("beta_fast"),
        nb::arg("beta_slow"), nb::arg("layout"), nb::arg("threads"), nb::arg("stream"));
  m.def("swiglu", &swiglu, array("gate"), array("up"), array("y"), nb::arg("threads"), nb::arg("stream"));
}

}  // namespace dsa_py
