// The indexer KL losses (dense warm-up, sparse stage) with their gradients. On the CUDA backend
// they need a workspace (the Python layer allocates it on the device); on the CPU one it is
// optional (checked, then ignored).
#include "common.hpp"
#include "dsa/cpu/indexer_kl_loss.hpp"
#include "dsa/ops/indexer_kl_loss.hpp"

namespace dsa_py {
namespace {

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
      DSA_PY_CALL(indexer_kl_loss_dense, be, ai.view, si.view, ri.view, lo.view, go.view, wv);
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
      DSA_PY_CALL(indexer_kl_loss_sparse, be, ai.view, si.view, ti.view, lo.view, go.view, wv);
    });
  });
}

}  // namespace

void bind_kl_loss(nb::module_& m) {
  m.def("indexer_kl_loss_dense", &indexer_kl_loss_dense, array("attn"), array("index_scores"), array("ranges"),
        array("loss"), array("grad_index"), array("workspace"), nb::arg("threads"), nb::arg("stream"));
  m.def("indexer_kl_loss_sparse", &indexer_kl_loss_sparse, array("attn"), array("index_scores"), array("topk"),
        array("loss"), array("grad_index"), array("workspace"), nb::arg("threads"), nb::arg("stream"));
  m.def("indexer_kl_loss_dense_workspace_size", &dsa::indexer_kl_loss_dense_workspace_size, nb::arg("m"));
  m.def("indexer_kl_loss_sparse_workspace_size", &dsa::indexer_kl_loss_sparse_workspace_size, nb::arg("m"),
        nb::arg("k"));
}

}  // namespace dsa_py
