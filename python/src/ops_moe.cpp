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
  dsa::fail("moe_route", "scoring", dsa::quoted(s), "'sigmoid' or 'softmax'");
}

dsa::moe_routing_config routing_config(dsa::index_t top_k, dsa::index_t n_group, dsa::index_t topk_group,
                                       std::string_view scoring, bool norm_topk_prob, float routed_scaling_factor) {
  dsa::moe_routing_config cfg;
  cfg.top_k = top_k;
  cfg.n_group = n_group;
  cfg.topk_group = topk_group;
  cfg.scoring = parse_scoring(scoring);
  cfg.norm_topk_prob = norm_topk_prob;
  cfg.routed_scaling_factor = routed_scaling_factor;
  return cfg;
}

/// The routing configuration's checks alone, for `n_experts` experts: the Python layer runs them
/// before it allocates the [t, top_k] outputs, so that a hostile top_k is refused before it sizes
/// anything (the op runs them again).
void moe_route_check(dsa::index_t n_experts, bool has_bias, dsa::index_t top_k, dsa::index_t n_group,
                     dsa::index_t topk_group, std::string_view scoring, bool norm_topk_prob,
                     float routed_scaling_factor) {
  dsa::check_moe_routing_config(
      routing_config(top_k, n_group, topk_group, scoring, norm_topk_prob, routed_scaling_factor), n_experts, has_bias);
}

void moe_route(nb::handle logits, nb::handle bias, nb::handle expert_ids, nb::handle weights, dsa::index_t top_k,
               dsa::index_t n_group, dsa::index_t topk_group, std::string_view scoring, bool norm_topk_prob,
               float routed_scaling_factor, int threads, std::uintptr_t stream) {
  on_device_of(logits, "moe_route", "logits", threads, stream, [&](const auto& p) {
    const auto li = in<float, 2>(p, logits, "logits");
    ro_array kb;
    const auto bv = optional_in<float, 1>(p, bias, kb, "bias");
    const auto io = out<std::int32_t, 2>(p, expert_ids, "expert_ids");
    const auto wo = out<float, 2>(p, weights, "weights");
    const dsa::moe_routing_config cfg =
        routing_config(top_k, n_group, topk_group, scoring, norm_topk_prob, routed_scaling_factor);
    p.run([&](const auto& be) { dsa::moe_route(be, li.view, bv, io.view, wo.view, cfg); });
  });
}

void moe_combine(nb::handle expert_out, nb::handle rows, nb::handle weights, nb::handle shared, nb::handle y,
                 int threads, std::uintptr_t stream) {
  on_device_of(expert_out, "moe_combine", "expert_out", threads, stream, [&](const auto& p) {
    const auto ei = in<dsa::bf16, 2>(p, expert_out, "expert_out");
    const auto ri = in<std::int32_t, 2>(p, rows, "rows");
    const auto wi = in<float, 2>(p, weights, "weights");
    ro_array ks;
    const auto sv = optional_in<dsa::bf16, 2>(p, shared, ks, "shared");
    const auto yo = out<dsa::bf16, 2>(p, y, "y");
    p.run([&](const auto& be) { dsa::moe_combine(be, ei.view, ri.view, wi.view, sv, yo.view); });
  });
}

}  // namespace

void bind_moe(nb::module_& m) {
  m.def("moe_route", &moe_route, array("logits"), array("bias"), array("expert_ids"),
        array("weights"), nb::arg("top_k"), nb::arg("n_group"), nb::arg("topk_group"), nb::arg("scoring"),
        nb::arg("norm_topk_prob"), nb::arg("routed_scaling_factor"), nb::arg("threads"), nb::arg("stream"));
  m.def("moe_route_check", &moe_route_check, nb::arg("n_experts"), nb::arg("has_bias"), nb::arg("top_k"),
        nb::arg("n_group"), nb::arg("topk_group"), nb::arg("scoring"), nb::arg("norm_topk_prob"),
        nb::arg("routed_scaling_factor"));
  m.def("moe_combine", &moe_combine, array("expert_out"), array("rows"), array("weights"),
        array("shared"), array("y"), nb::arg("threads"), nb::arg("stream"));
}

}  // namespace dsa_py
