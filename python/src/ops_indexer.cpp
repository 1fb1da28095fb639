// The lightning indexer: scores (FP8 or fp32 q/k), paged scores over the indexer key cache, the
// backward pass, and the per-head weights.
#include "common.hpp"
#include "dsa/cpu/indexer_weights.hpp"
#include "dsa/cpu/lightning_indexer.hpp"
#include "dsa/ops/indexer_weights.hpp"
#include "dsa/ops/lightning_indexer.hpp"

namespace dsa_py {
namespace {

void lightning_indexer_scores(nb::handle q, nb::handle w, nb::handle k, nb::handle k_scale, nb::handle ranges,
                              nb::handle scores, int threads) {
  constexpr std::string_view op = "lightning_indexer_scores";
  const ro_array qa = input_array(q, op, "q");
  const input<float, 2> wi(w, op, "w");
  const input<float, 1> si(k_scale, op, "k_scale");
  const input<std::int32_t, 2> ri(ranges, op, "ranges");
  output<float, 2> so(scores, op, "scores");
  const auto be = cpu_backend(threads, op);
  if (dt::f32(qa.dtype())) {
    const auto qv = view_of<const float, 3>(qa, op, "q");
    const input<float, 2> ki(k, op, "k");
    nogil g;
    dsa::lightning_indexer_scores(be, qv, wi.view, ki.view, si.view, ri.view, so.view);
  } else if (dt::e4m3(qa.dtype())) {
    const auto qv = view_of<const dsa::fp8_e4m3, 3>(qa, op, "q");
    const input<dsa::fp8_e4m3, 2> ki(k, op, "k");
    nogil g;
    dsa::lightning_indexer_scores(be, qv, wi.view, ki.view, si.view, ri.view, so.view);
  } else {
    dsa::fail(op, "q.dtype", dtype_name(qa.dtype()), "float8_e4m3fn (or uint8 codes), or float32");
  }
}

void lightning_indexer_scores_paged(nb::handle q, nb::handle w, nb::handle cache, nb::handle block_table,
                                    dsa::index_t block_size, nb::handle ranges, nb::handle scores, int threads) {
  constexpr std::string_view op = "lightning_indexer_scores_paged";
  const input<dsa::fp8_e4m3, 3> qi(q, op, "q");
  const input<float, 2> wi(w, op, "w");
  const input<std::uint8_t, 2> ci(cache, op, "cache");
  const input<std::int32_t, 2> bi(block_table, op, "block_table");
  const input<std::int32_t, 2> ri(ranges, op, "ranges");
  output<float, 2> so(scores, op, "scores");
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::lightning_indexer_scores_paged(be, qi.view, wi.view, ci.view, bi.view, block_size, ri.view, so.view);
}

void lightning_indexer_backward(nb::handle q, nb::handle w, nb::handle k, nb::handle k_scale, nb::handle ranges,
                                nb::handle grad_scores, nb::handle grad_q, nb::handle grad_w, nb::handle grad_k,
                                int threads) {
  constexpr std::string_view op = "lightning_indexer_backward";
  const input<float, 3> qi(q, op, "q");
  const input<float, 2> wi(w, op, "w");
  const input<float, 2> ki(k, op, "k");
  const input<float, 1> si(k_scale, op, "k_scale");
  const input<std::int32_t, 2> ri(ranges, op, "ranges");
  const input<float, 2> gi(grad_scores, op, "grad_scores");
  rw_array kq, kw, kk;
  const auto gq = optional_output<float, 3>(grad_q, kq, op, "grad_q");
  const auto gw = optional_output<float, 2>(grad_w, kw, op, "grad_w");
  const auto gk = optional_output<float, 2>(grad_k, kk, op, "grad_k");
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::lightning_indexer_backward(be, qi.view, wi.view, ki.view, si.view, ri.view, gi.view, gq, gw, gk);
}

void lightning_indexer_weights(nb::handle proj, nb::handle q_scale, nb::handle w, float head_scale, float dim_scale,
                               int threads) {
  constexpr std::string_view op = "lightning_indexer_weights";
  const input<float, 2> pi(proj, op, "proj");
  const input<float, 2> qi(q_scale, op, "q_scale");
  output<float, 2> wo(w, op, "w");
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::lightning_indexer_weights(be, pi.view, qi.view, wo.view, head_scale, dim_scale);
}

}  // namespace

void bind_indexer(nb::module_& m) {
  m.def("lightning_indexer_scores", &lightning_indexer_scores, nb::arg("q"), nb::arg("w"), nb::arg("k"),
        nb::arg("k_scale"), nb::arg("ranges"), nb::arg("scores"), nb::arg("threads"));
  m.def("lightning_indexer_scores_paged", &lightning_indexer_scores_paged, nb::arg("q"), nb::arg("w"),
        nb::arg("cache"), nb::arg("block_table"), nb::arg("block_size"), nb::arg("ranges"), nb::arg("scores"),
        nb::arg("threads"));
  m.def("lightning_indexer_backward", &lightning_indexer_backward, nb::arg("q"), nb::arg("w"), nb::arg("k"),
        nb::arg("k_scale"), nb::arg("ranges"), nb::arg("grad_scores"), nb::arg("grad_q").none(),
        nb::arg("grad_w").none(), nb::arg("grad_k").none(), nb::arg("threads"));
  m.def("lightning_indexer_weights", &lightning_indexer_weights, nb::arg("proj"), nb::arg("q_scale"), nb::arg("w"),
        nb::arg("head_scale"), nb::arg("dim_scale"), nb::arg("threads"));
}

}  // namespace dsa_py
