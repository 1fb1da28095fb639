// The indexer KL losses (dense warm-up, sparse stage) with their gradients.
#include "common.hpp"
#include "dsa/cpu/indexer_kl_loss.hpp"
#include "dsa/ops/indexer_kl_loss.hpp"

namespace dsa_py {
namespace {

void indexer_kl_loss_dense(nb::handle attn, nb::handle index_scores, nb::handle ranges, nb::handle loss,
                           nb::handle grad_index, int threads) {
  constexpr std::string_view op = "indexer_kl_loss_dense";
  const input<float, 3> ai(attn, op, "attn");
  const input<float, 2> si(index_scores, op, "index_scores");
  const input<std::int32_t, 2> ri(ranges, op, "ranges");
  output<float, 1> lo(loss, op, "loss");
  output<float, 2> go(grad_index, op, "grad_index");
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::indexer_kl_loss_dense(be, ai.view, si.view, ri.view, lo.view, go.view);
}

void indexer_kl_loss_sparse(nb::handle attn, nb::handle index_scores, nb::handle topk, nb::handle loss,
                            nb::handle grad_index, int threads) {
  constexpr std::string_view op = "indexer_kl_loss_sparse";
  const input<float, 3> ai(attn, op, "attn");
  const input<float, 2> si(index_scores, op, "index_scores");
  const input<std::int32_t, 2> ti(topk, op, "topk");
  output<float, 1> lo(loss, op, "loss");
  output<float, 2> go(grad_index, op, "grad_index");
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::indexer_kl_loss_sparse(be, ai.view, si.view, ti.view, lo.view, go.view);
}

}  // namespace

void bind_kl_loss(nb::module_& m) {
  m.def("indexer_kl_loss_dense", &indexer_kl_loss_dense, nb::arg("attn"), nb::arg("index_scores"), nb::arg("ranges"),
        nb::arg("loss"), nb::arg("grad_index"), nb::arg("threads"));
  m.def("indexer_kl_loss_sparse", &indexer_kl_loss_sparse, nb::arg("attn"), nb::arg("index_scores"), nb::arg("topk"),
        nb::arg("loss"), nb::arg("grad_index"), nb::arg("threads"));
  m.def("indexer_kl_loss_dense_workspace_size", &dsa::indexer_kl_loss_dense_workspace_size, nb::arg("m"));
  m.def("indexer_kl_loss_sparse_workspace_size", &dsa::indexer_kl_loss_sparse_workspace_size, nb::arg("m"),
        nb::arg("k"));
}

}  // namespace dsa_py
