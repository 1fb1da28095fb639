// The "indexer" family (docs/architecture.md, "Op families"): the lightning indexer's scores (FP8
// or fp32 q/k), paged scores over the indexer key cache, the backward pass and the per-head
// weights; the indexer KL losses (dense warm-up, sparse stage) with their gradients. On the CUDA
// backend the losses need a workspace (the Python layer allocates it on the device); on the CPU
// one it is optional (checked, then ignored).
#include "common.hpp"
#include "dsa/cpu/indexer_kl_loss.hpp"
#include "dsa/cpu/indexer_weights.hpp"
#include "dsa/cpu/lightning_indexer.hpp"
#include "dsa/ops/indexer_kl_loss.hpp"
#include "dsa/ops/indexer_weights.hpp"
#include "dsa/ops/lightning_indexer.hpp"

namespace dsa_py {
namespace {

void lightning_indexer_scores(nb::handle q, nb::handle w, nb::handle k, nb::handle k_scale, nb::handle ranges,
                              nb::handle scores, int threads, std::uintptr_t stream, std::string_view kernels) {
  on_device_of(q, "lightning_indexer_scores", "q", threads, stream, [&](const auto& place) {
    const auto p = with_kernels(place, kernels);
    const ro_array qa = input_array(q, p.op, "q");
    const auto wi = in<float, 2>(p, w, "w");
    const auto si = in<float, 1>(p, k_scale, "k_scale");
    const auto ri = in<std::int32_t, 2>(p, ranges, "ranges");
    const auto so = out<float, 2>(p, scores, "scores");
    auto run = [&]<class T>(std::type_identity<T>) {
      const auto qv = view_of<const T, 3>(p, qa, "q");
      const auto ki = in<T, 2>(p, k, "k");
      p.run([&](const auto& be) {
        dsa::lightning_indexer_scores(be, qv, wi.view, ki.view, si.view, ri.view, so.view);
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
                                    std::uintptr_t stream, std::string_view kernels) {
  on_device_of(q, "lightning_indexer_scores_paged", "q", threads, stream, [&](const auto& place) {
    const auto p = with_kernels(place, kernels);
    const auto qi = in<dsa::fp8_e4m3, 3>(p, q, "q");
    const auto wi = in<float, 2>(p, w, "w");
    const auto ci = in<std::uint8_t, 2>(p, cache, "cache");
    const auto bi = in<std::int32_t, 2>(p, block_table, "block_table");
    const auto ri = in<std::int32_t, 2>(p, ranges, "ranges");
    const auto so = out<float, 2>(p, scores, "scores");
    p.run([&](const auto& be) {
      dsa::lightning_indexer_scores_paged(be, qi.view, wi.view, ci.view, bi.view, block_size, ri.view,
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
      dsa::lightning_indexer_backward(be, qi.view, wi.view, ki.view, si.view, ri.view, gi.view, gq, gw, gk);
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
      dsa::lightning_indexer_weights(be, pi.view, qi.view, wo.view, head_scale, dim_scale);
    });
  });
}

template <class P>
void require_workspace(const P& p, nb::handle workspace, const char* size_fn) {
  if (is_cuda_place<P> && workspace.is_none()) {
    dsa::fail(p.op, "workspace", "None",
              std::string("a uint8 device array of at least ") + size_fn + " bytes (the CUDA backend needs one)");
  }
}

void indexer_kl_loss_dense(nb::handle attn, nb::handle index_scores, nb::handle ranges, nb::handle loss,
                           nb::handle grad_index, nb::handle workspace, int threads, std::uintptr_t stream) {
  on_device_of(attn, "indexer_kl_loss_dense", "attn", threads, stream, [&](const auto& p) {
    const auto ai = in<float, 3>(p, attn, "attn");
    const auto si = in<float, 2>(p, index_scores, "index_scores");
    const auto ri = in<std::int32_t, 2>(p, ranges, "ranges");
    const auto lo = out<float, 1>(p, loss, "loss");
    const auto go = out<float, 2>(p, grad_index, "grad_index");
    require_workspace(p, workspace, "indexer_kl_loss_dense_workspace_size(m)");
    rw_array kw;
    const auto wv = optional_out<std::byte, 1>(p, workspace, kw, "workspace");
    p.run([&](const auto& be) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(be)>, dsa::cpu_backend>) {
        if (workspace.is_none()) {
          dsa::indexer_kl_loss_dense(be, ai.view, si.view, ri.view, lo.view, go.view);
          return;
        }
      }
      dsa::indexer_kl_loss_dense(be, ai.view, si.view, ri.view, lo.view, go.view, wv);
    });
  });
}

void indexer_kl_loss_sparse(nb::handle attn, nb::handle index_scores, nb::handle topk, nb::handle loss,
                            nb::handle grad_index, nb::handle workspace, int threads, std::uintptr_t stream) {
  on_device_of(attn, "indexer_kl_loss_sparse", "attn", threads, stream, [&](const auto& p) {
    const auto ai = in<float, 3>(p, attn, "attn");
    const auto si = in<float, 2>(p, index_scores, "index_scores");
    const auto ti = in<std::int32_t, 2>(p, topk, "topk");
    const auto lo = out<float, 1>(p, loss, "loss");
    const auto go = out<float, 2>(p, grad_index, "grad_index");
    require_workspace(p, workspace, "indexer_kl_loss_sparse_workspace_size(m, k)");
    rw_array kw;
    const auto wv = optional_out<std::byte, 1>(p, workspace, kw, "workspace");
    p.run([&](const auto& be) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(be)>, dsa::cpu_backend>) {
        if (workspace.is_none()) {
          dsa::indexer_kl_loss_sparse(be, ai.view, si.view, ti.view, lo.view, go.view);
          return;
        }
      }
      dsa::indexer_kl_loss_sparse(be, ai.view, si.view, ti.view, lo.view, go.view, wv);
    });
  });
}

}  // namespace

void bind_indexer(nb::module_& m) {
  m.def("lightning_indexer_scores", &lightning_indexer_scores, array("q"), array("w"), array("k"),
        array("k_scale"), array("ranges"), array("scores"), nb::arg("threads"), nb::arg("stream"), nb::arg("kernels"));
  m.def("lightning_indexer_scores_paged", &lightning_indexer_scores_paged, array("q"), array("w"),
        array("cache"), array("block_table"), nb::arg("block_size"), array("ranges"), array("scores"),
        nb::arg("threads"), nb::arg("stream"), nb::arg("kernels"));
  m.def("lightning_indexer_backward", &lightning_indexer_backward, array("q"), array("w"), array("k"),
        array("k_scale"), array("ranges"), array("grad_scores"), array("grad_q"),
        array("grad_w"), array("grad_k"), nb::arg("threads"), nb::arg("stream"));
  m.def("lightning_indexer_weights", &lightning_indexer_weights, array("proj"), array("q_scale"), array("w"),
        nb::arg("head_scale"), nb::arg("dim_scale"), nb::arg("threads"), nb::arg("stream"));
  m.def("indexer_kl_loss_dense", &indexer_kl_loss_dense, array("attn"), array("index_scores"), array("ranges"),
        array("loss"), array("grad_index"), array("workspace"), nb::arg("threads"), nb::arg("stream"));
  m.def("indexer_kl_loss_sparse", &indexer_kl_loss_sparse, array("attn"), array("index_scores"), array("topk"),
        array("loss"), array("grad_index"), array("workspace"), nb::arg("threads"), nb::arg("stream"));
  m.def("indexer_kl_loss_dense_workspace_size", &dsa::indexer_kl_loss_dense_workspace_size, nb::arg("m"));
  m.def("indexer_kl_loss_sparse_workspace_size", &dsa::indexer_kl_loss_sparse_workspace_size, nb::arg("m"),
        nb::arg("k"));
}

}  // namespace dsa_py
