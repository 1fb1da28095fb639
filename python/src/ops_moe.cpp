// MoE routing (noaux_tc) and the combine.
#include "common.hpp"
#include "dsa/cpu/moe_combine.hpp"
#include "dsa/cpu/moe_routing.hpp"
#include "dsa/ops/moe_combine.hpp"
#include "dsa/ops/moe_routing.hpp"

namespace dsa_py {
namespace {

dsa::moe_scoring parse_scoring(std::string_view s) {
  if (s == "sigmoid") return dsa::moe_scoring::sigmoid;
  if (s == "softmax") return dsa::moe_scoring::softmax;
  dsa::fail("moe_route", "scoring", std::string(s), "'sigmoid' or 'softmax'");
}

void moe_route(nb::handle logits, nb::handle bias, nb::handle expert_ids, nb::handle weights, dsa::index_t top_k,
               dsa::index_t n_group, dsa::index_t topk_group, std::string_view scoring, bool norm_topk_prob,
               float routed_scaling_factor, int threads) {
  constexpr std::string_view op = "moe_route";
  const input<float, 2> li(logits, op, "logits");
  ro_array kb;
  const auto bv = optional_input<float, 1>(bias, kb, op, "bias");
  output<std::int32_t, 2> io(expert_ids, op, "expert_ids");
  output<float, 2> wo(weights, op, "weights");
  dsa::moe_routing_config cfg;
  cfg.top_k = top_k;
  cfg.n_group = n_group;
  cfg.topk_group = topk_group;
  cfg.scoring = parse_scoring(scoring);
  cfg.norm_topk_prob = norm_topk_prob;
  cfg.routed_scaling_factor = routed_scaling_factor;
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::moe_route(be, li.view, bv, io.view, wo.view, cfg);
}

void moe_combine(nb::handle expert_out, nb::handle rows, nb::handle weights, nb::handle shared, nb::handle y,
                 int threads) {
  constexpr std::string_view op = "moe_combine";
  const input<dsa::bf16, 2> ei(expert_out, op, "expert_out");
  const input<std::int32_t, 2> ri(rows, op, "rows");
  const input<float, 2> wi(weights, op, "weights");
  ro_array ks;
  const auto sv = optional_input<dsa::bf16, 2>(shared, ks, op, "shared");
  output<dsa::bf16, 2> yo(y, op, "y");
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::moe_combine(be, ei.view, ri.view, wi.view, sv, yo.view);
}

}  // namespace

void bind_moe(nb::module_& m) {
  m.def("moe_route", &moe_route, nb::arg("logits"), nb::arg("bias").none(), nb::arg("expert_ids"),
        nb::arg("weights"), nb::arg("top_k"), nb::arg("n_group"), nb::arg("topk_group"), nb::arg("scoring"),
        nb::arg("norm_topk_prob"), nb::arg("routed_scaling_factor"), nb::arg("threads"));
  m.def("moe_combine", &moe_combine, nb::arg("expert_out"), nb::arg("rows"), nb::arg("weights"),
        nb::arg("shared").none(), nb::arg("y"), nb::arg("threads"));
}

}  // namespace dsa_py
