// Sparse MLA attention (bf16 or FP8 cache rows; lse; head-summed probabilities) and sparse MHA
// attention (the MLA prefill's per-head keys).
#include "common.hpp"
#include "dsa/cpu/sparse_mha_attention.hpp"
#include "dsa/cpu/sparse_mla_attention.hpp"
#include "dsa/ops/sparse_mha_attention.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"

namespace dsa_py {
namespace {

void sparse_mla_attention(nb::handle q, nb::handle kv, nb::handle indices, nb::handle out_, nb::handle lse,
                          nb::handle probs, nb::handle workspace, float softmax_scale, dsa::index_t d_v,
                          dsa::index_t num_splits, int threads, std::uintptr_t stream, std::string_view kernels) {
  on_device_of(q, "sparse_mla_attention", "q", threads, stream, [&](const auto& place) {
    const auto p = with_kernels(place, kernels);
    const auto qi = in<dsa::bf16, 3>(p, q, "q");
    const ro_array kva = input_array(kv, p.op, "kv");
    const auto ii = in<std::int32_t, 2>(p, indices, "indices");
    const rw_array oa = output_array(out_, p.op, "out");
    const auto lo = out<float, 2>(p, lse, "lse");
    rw_array kp, kw;
    const auto pv = optional_out<float, 2>(p, probs, kp, "probs");
    const auto wv = optional_out<std::byte, 1>(p, workspace, kw, "workspace");
    const dsa::sparse_mla_config cfg{softmax_scale, d_v, num_splits};
    with_float_or_bf16(oa, p.op, "out", [&]<class O>(std::type_identity<O>) {
      const auto ov = view_of<O, 3>(p, oa, "out");
      auto run = [&](const auto& kvv) {
        p.run([&](const auto& be) {
          if (workspace.is_none()) {
            dsa::sparse_mla_attention(be, qi.view, kvv, ii.view, ov, lo.view, cfg, pv);
          } else {
            dsa::sparse_mla_attention(be, qi.view, kvv, ii.view, ov, lo.view, cfg, wv, pv);
          }
        });
      };
      if (dt::bf16(kva.dtype())) {
        run(view_of<const dsa::bf16, 2>(p, kva, "kv"));
      } else if (dt::u8(kva.dtype())) {
        run(view_of<const std::uint8_t, 2>(p, kva, "kv"));
      } else {
        dsa::fail(p.op, "kv.dtype", dtype_name(kva.dtype()),
                  "bfloat16 (rows of d_qk values) or uint8 (656-byte FP8 cache rows)");
      }
    });
  });
}

dsa::attention_rounding parse_rounding(std::string_view s, std::string_view op) {
  if (s == "fp32") return dsa::attention_rounding::fp32;
  if (s == "bf16") return dsa::attention_rounding::bf16;
  if (s == "bf16_split") return dsa::attention_rounding::bf16_split;
  dsa::fail(op, "rounding", dsa::quoted(s), "'fp32', 'bf16' or 'bf16_split'");
}

void sparse_mha_attention(nb::handle q, nb::handle k_nope, nb::handle k_rope, nb::handle v, nb::handle indices,
                          nb::handle out_, nb::handle lse, float softmax_scale, std::string_view rounding,
                          int threads, std::uintptr_t stream) {
  on_device_of(q, "sparse_mha_attention", "q", threads, stream, [&](const auto& p) {
    // Keys and values may broadcast over heads (stride 0: MQA) or be slices of a wider projection.
    const auto qi = in<dsa::bf16, 3>(p, q, "q", layout::outer_strided);
    const auto kni = in<dsa::bf16, 3>(p, k_nope, "k_nope", layout::outer_strided);
    const auto kri = in<dsa::bf16, 2>(p, k_rope, "k_rope", layout::outer_strided);
    const auto vi = in<dsa::bf16, 3>(p, v, "v", layout::outer_strided);
    const auto ii = in<std::int32_t, 2>(p, indices, "indices");
    const auto oo = out<dsa::bf16, 3>(p, out_, "out");
    rw_array kl;
    const auto lv = optional_out<float, 2>(p, lse, kl, "lse");
    const dsa::sparse_mha_config cfg{softmax_scale, parse_rounding(rounding, p.op)};
    p.run([&](const auto& be) {
      dsa::sparse_mha_attention(be, qi.view, kni.view, kri.view, vi.view, ii.view, oo.view, cfg, lv);
    });
  });
}

}  // namespace

void bind_attention(nb::module_& m) {
  m.def("sparse_mla_attention", &sparse_mla_attention, array("q"), array("kv"), array("indices"),
        array("out"), array("lse"), array("probs"), array("workspace"),
        nb::arg("softmax_scale"), nb::arg("d_v"), nb::arg("num_splits"), nb::arg("threads"), nb::arg("stream"),
        nb::arg("kernels"));
  m.attr("sparse_mla_max_splits") = dsa::sparse_mla_max_splits;
  m.def("sparse_mla_attention_workspace_size", &dsa::sparse_mla_attention_workspace_size, nb::arg("s"), nb::arg("h"),
        nb::arg("d_v"), nb::arg("num_splits"));
  m.def("sparse_mla_attention_num_splits", &dsa::sparse_mla_attention_num_splits, nb::arg("s"), nb::arg("h"),
        nb::arg("k"), nb::arg("sm_count"));
  m.def("sparse_mha_attention", &sparse_mha_attention, array("q"), array("k_nope"), array("k_rope"),
        array("v"), array("indices"), array("out"), array("lse"), nb::arg("softmax_scale"),
        nb::arg("rounding"), nb::arg("threads"), nb::arg("stream"));
}

}  // namespace dsa_py
