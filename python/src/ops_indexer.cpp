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
                              nb::handle scores, int threads, std::uintptr_t stream) {
  on_device_of(q, "lightning_indexer_scores", "q", threads, stream, [&](const auto& p) {
    const ro_array qa = input_array(q, p.op, "q");
    const auto wi = in<float, 2>(p, w, "w");
    const auto si = in<float, 1>(p, k_scale, "k_scale");
    const auto ri = in<std::int32_t, 2>(p, ranges, "ranges");
    const auto so = out<float, 2>(p, scores, "scores");
    auto run = [&]<class T>(std::type_identity<T>) {
      const auto qv = view_of<const T, 3>(p, qa, "q");
      const auto ki = in<T, 2>(p, k, "k");
      p.run([&](const auto& be) {
        DSA_PY_CALL(lightning_indexer_scores, be, qv, wi.view, ki.view, si.view, ri.view, so.view);
      });
    };
    if (dt::f32(qa.dtype())) {
      run(std::type_identity<float>{});
    } else if (dt::e4m3(qa.dtype())) {
      run(std::type_identity<dsa::fp8_e4m3>{});
    } else {
      dsa::fail(p.op, "q.dtype", dtype_name(qa.dtype()), "float8_e4m3fn (or uint8 codes), or float32");
    }
  });
}

void lightning_indexer_scores_paged(nb::handle q, nb::handle w, nb::handle cache, nb::handle block_table,
                                    dsa::index_t block_size, nb::handle ranges, nb::handle scores, int threads,
                                    std::uintptr_t stream) {
  on_device_of(q, "lightning_indexer_scores_paged", "q", threads, stream, [&](const auto& p) {
    const auto qi = in<dsa::fp8_e4m3, 3>(p, q, "q");
    const auto wi = in<float, 2>(p, w, "w");
    const auto ci = in<std::uint8_t, 2>(p, cache, "cache");
    const auto bi = in<std::int32_t, 2>(p, block_table, "block_table");
    const auto ri = in<std::int32_t, 2>(p, ranges, "ranges");
    const auto so = out<float, 2>(p, scores, "scores");
    p.run([&](const auto& be) {
      DSA_PY_CALL(lightning_indexer_scores_paged, be, qi.view, wi.view, ci.view, bi.view, block_size, ri.view,
                  so.view);
    });
  });
}

void lightning_indexer_backward(nb::handle q, nb::handle w, nb::handle k, nb::handle k_scale, nb::handle ranges,
                                nb::handle grad_scores, nb::handle grad_q, nb::handle grad_w, nb::handle grad_k,
                                int threads, std::uintptr_t stream) {
  on_device_of(q, "lightning_indexer_backward", "q", threads, stream, [&](const auto& p) {
    const auto qi = in<float, 3>(p, q, "q");
    const auto wi = in<float, 2>(p, w, "w");
    const auto ki = in<float, 2>(p, k, "k");
    const auto si = in<float, 1>(p, k_scale, "k_scale");
    const auto ri = in<std::int32_t, 2>(p, ranges, "ranges");
    const auto gi = in<float, 2>(p, grad_scores, "grad_scores");
    rw_array kq, kw, kk;
    const auto gq = optional_out<float, 3>(p, grad_q, kq, "grad_q");
    const auto gw = optional_out<float, 2>(p, grad_w, kw, "grad_w");
    const auto gk = optional_out<float, 2>(p, grad_k, kk, "grad_k");
    p.run([&](const auto& be) {
      DSA_PY_CALL(lightning_indexer_backward, be, qi.view, wi.view, ki.view, si.view, ri.view, gi.view, gq, gw, gk);
    });
  });
}

void lightning_indexer_weights(nb::handle proj, nb::handle q_scale, nb::handle w, float head_scale, float dim_scale,
                               int threads, std::uintptr_t stream) {
  on_device_of(proj, "lightning_indexer_weights", "proj", threads, stream, [&](const auto& p) {
    const auto pi = in<float, 2>(p, proj, "proj");
    const auto qi = in<float, 2>(p, q_scale, "q_scale");
    const auto wo = out<float, 2>(p, w, "w");
    p.run([&](const auto& be) {
      DSA_PY_CALL(lightning_indexer_weights, be, pi.view, qi.view, wo.view, head_scale, dim_scale);
    });
  });
}

}  // namespace

void bind_indexer(nb::module_& m) {
  m.def("lightning_indexer_scores", &lightning_indexer_scores, array("q"), array("w"), array("k"),
        array("k_scale"), array("ranges"), array("scores"), nb::arg("threads"), nb::arg("stream"));
  m.def("lightning_indexer_scores_paged", &lightning_indexer_scores_paged, array("q"), array("w"),
        array("cache"), array("block_table"), nb::arg("block_size"), array("ranges"), array("scores"),
        nb::arg("threads"), nb::arg("stream"));
  m.def("lightning_indexer_backward", &lightning_indexer_backward, array("q"), array("w"), array("k"),
        array("k_scale"), array("ranges"), array("grad_scores"), array("grad_q"),
        array("grad_w"), array("grad_k"), nb::arg("threads"), nb::arg("stream"));
  m.def("lightning_indexer_weights", &lightning_indexer_weights, array("proj"), array("q_scale"), array("w"),
        nb::arg("head_scale"), nb::arg("dim_scale"), nb::arg("threads"), nb::arg("stream"));
}

}  // namespace dsa_py
