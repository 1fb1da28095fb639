// Sparse MLA attention (bf16 or FP8 cache rows; lse; head-summed probabilities) and sparse MHA
// attention (the MLA prefill's per-head keys).
#include "common.hpp"
#include "dsa/cpu/sparse_mha_attention.hpp"
#include "dsa/cpu/sparse_mla_attention.hpp"
#include "dsa/ops/sparse_mha_attention.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"

namespace dsa_py {
namespace {

void sparse_mla_attention(nb::handle q, nb::handle kv, nb::handle indices, nb::handle out, nb::handle lse,
                          nb::handle probs, nb::handle workspace, float softmax_scale, dsa::index_t d_v,
                          dsa::index_t num_splits, int threads) {
  constexpr std::string_view op = "sparse_mla_attention";
  const input<dsa::bf16, 3> qi(q, op, "q");
  const ro_array kva = input_array(kv, op, "kv");
  const input<std::int32_t, 2> ii(indices, op, "indices");
  const rw_array oa = output_array(out, op, "out");
  output<float, 2> lo(lse, op, "lse");
  rw_array kp, kw;
  const auto pv = optional_output<float, 2>(probs, kp, op, "probs");
  const auto wv = optional_output<std::byte, 1>(workspace, kw, op, "workspace");
  const dsa::sparse_mla_config cfg{softmax_scale, d_v, num_splits};
  const auto be = cpu_backend(threads, op);
  with_float_or_bf16(oa, op, "out", [&]<class O>(std::type_identity<O>) {
    const auto ov = view_of<O, 3>(oa, op, "out");
    auto run = [&](const auto& kvv) {
      nogil g;
      if (workspace.is_none()) {
        dsa::sparse_mla_attention(be, qi.view, kvv, ii.view, ov, lo.view, cfg, pv);
      } else {
        dsa::sparse_mla_attention(be, qi.view, kvv, ii.view, ov, lo.view, cfg, wv, pv);
      }
    };
    if (dt::bf16(kva.dtype())) {
      run(view_of<const dsa::bf16, 2>(kva, op, "kv"));
    } else if (dt::u8(kva.dtype())) {
      run(view_of<const std::uint8_t, 2>(kva, op, "kv"));
    } else {
      dsa::fail(op, "kv.dtype", dtype_name(kva.dtype()),
                "bfloat16 (rows of d_qk values) or uint8 (656-byte FP8 cache rows)");
    }
  });
}

dsa::attention_rounding parse_rounding(std::string_view s, std::string_view op) {
  if (s == "fp32") return dsa::attention_rounding::fp32;
  if (s == "bf16") return dsa::attention_rounding::bf16;
  if (s == "bf16_split") return dsa::attention_rounding::bf16_split;
  dsa::fail(op, "rounding", std::string(s), "'fp32', 'bf16' or 'bf16_split'");
}

void sparse_mha_attention(nb::handle q, nb::handle k_nope, nb::handle k_rope, nb::handle v, nb::handle indices,
                          nb::handle out, nb::handle lse, float softmax_scale, std::string_view rounding,
                          int threads) {
  constexpr std::string_view op = "sparse_mha_attention";
  // Keys and values may broadcast over heads (stride 0: MQA) or be slices of a wider projection.
  const input<dsa::bf16, 3> qi(q, op, "q", layout::outer_strided);
  const input<dsa::bf16, 3> kni(k_nope, op, "k_nope", layout::outer_strided);
  const input<dsa::bf16, 2> kri(k_rope, op, "k_rope", layout::outer_strided);
  const input<dsa::bf16, 3> vi(v, op, "v", layout::outer_strided);
  const input<std::int32_t, 2> ii(indices, op, "indices");
  output<dsa::bf16, 3> oo(out, op, "out");
  rw_array kl;
  const auto lv = optional_output<float, 2>(lse, kl, op, "lse");
  const dsa::sparse_mha_config cfg{softmax_scale, parse_rounding(rounding, op)};
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::sparse_mha_attention(be, qi.view, kni.view, kri.view, vi.view, ii.view, oo.view, cfg, lv);
}

}  // namespace

void bind_attention(nb::module_& m) {
  m.def("sparse_mla_attention", &sparse_mla_attention, nb::arg("q"), nb::arg("kv"), nb::arg("indices"),
        nb::arg("out"), nb::arg("lse"), nb::arg("probs").none(), nb::arg("workspace").none(),
        nb::arg("softmax_scale"), nb::arg("d_v"), nb::arg("num_splits"), nb::arg("threads"));
  m.def("sparse_mla_attention_workspace_size", &dsa::sparse_mla_attention_workspace_size, nb::arg("s"), nb::arg("h"),
        nb::arg("d_v"), nb::arg("num_splits"));
  m.def("sparse_mla_attention_num_splits", &dsa::sparse_mla_attention_num_splits, nb::arg("s"), nb::arg("h"),
        nb::arg("k"), nb::arg("sm_count"));
  m.def("sparse_mha_attention", &sparse_mha_attention, nb::arg("q"), nb::arg("k_nope"), nb::arg("k_rope"),
        nb::arg("v"), nb::arg("indices"), nb::arg("out"), nb::arg("lse").none(), nb::arg("softmax_scale"),
        nb::arg("rounding"), nb::arg("threads"));
}

}  // namespace dsa_py
