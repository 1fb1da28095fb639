// The "quant" family (docs/architecture.md, "Op families"): hadamard_transform; the FP8
// quantizers act_quant, act_dequant, weight_quant, weight_dequant; the cache rows
// kv_cache_fp8_pack/unpack (FlashMLA's 656-byte FP8 rows) and indexer_cache_pack/unpack (132-byte
// indexer key rows).
#include <algorithm>

#include "common.hpp"
#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/cpu/hadamard.hpp"
#include "dsa/cpu/kv_cache.hpp"
#include "dsa/ops/fp8_quant.hpp"
#include "dsa/ops/hadamard.hpp"
#include "dsa/ops/kv_cache.hpp"

namespace dsa_py {
namespace {

void hadamard_transform(nb::handle x, nb::handle y, float scale, int threads, std::uintptr_t stream) {
  on_device_of(x, "hadamard_transform", "x", threads, stream, [&](const auto& p) {
    const ro_array xa = input_array(x, p.op, "x");
    with_float_or_bf16(xa, p.op, "x", [&]<class T>(std::type_identity<T>) {
      const auto xv = view_of<const T, 2>(p, xa, "x");
      // y may be x itself (in place): the front-end accepts exactly that aliasing.
      const auto yo = out<T, 2>(p, y, "y");
      p.run([&](const auto& be) { dsa::hadamard_transform(be, xv, yo.view, scale); });
    });
  });
}

dsa::scale_format parse_scale_format(std::string_view s, std::string_view op, std::string_view name) {
  if (s == "ue8m0") return dsa::scale_format::ue8m0;
  if (s == "fp32") return dsa::scale_format::fp32;
  dsa::fail(op, name, dsa::quoted(s), "'ue8m0' or 'fp32'");
}

void act_quant(nb::handle x, nb::handle q, nb::handle s, std::string_view format, dsa::index_t group_size, int threads,
               std::uintptr_t stream) {
  on_device_of(x, "act_quant", "x", threads, stream, [&](const auto& p) {
    const ro_array xa = input_array(x, p.op, "x");
    const dsa::act_quant_config cfg{parse_scale_format(format, p.op, "scale_format"), group_size};
    with_float_or_bf16(xa, p.op, "x", [&]<class T>(std::type_identity<T>) {
      const auto xv = view_of<const T, 2>(p, xa, "x");
      const auto qo = out<dsa::fp8_e4m3, 2>(p, q, "q");
      const auto so = out<float, 2>(p, s, "s");
      p.run([&](const auto& be) { dsa::act_quant(be, xv, qo.view, so.view, cfg); });
    });
  });
}

void act_dequant(nb::handle q, nb::handle s, nb::handle y, dsa::index_t group_size, int threads,
                 std::uintptr_t stream) {
  on_device_of(q, "act_dequant", "q", threads, stream, [&](const auto& p) {
    const auto qi = in<dsa::fp8_e4m3, 2>(p, q, "q");
    const auto si = in<float, 2>(p, s, "s");
    const rw_array ya = output_array(y, p.op, "y");
    with_float_or_bf16(ya, p.op, "y", [&]<class T>(std::type_identity<T>) {
      const auto yv = view_of<T, 2>(p, ya, "y");
      p.run([&](const auto& be) { dsa::act_dequant(be, qi.view, si.view, yv, group_size); });
    });
  });
}

void weight_quant(nb::handle w, nb::handle q, nb::handle s, int threads, std::uintptr_t stream) {
  on_device_of(w, "weight_quant", "w", threads, stream, [&](const auto& p) {
    const ro_array wa = input_array(w, p.op, "w");
    with_float_or_bf16(wa, p.op, "w", [&]<class T>(std::type_identity<T>) {
      const auto wv = view_of<const T, 2>(p, wa, "w");
      const auto qo = out<dsa::fp8_e4m3, 2>(p, q, "q");
      const auto so = out<float, 2>(p, s, "s");
      p.run([&](const auto& be) { dsa::weight_quant(be, wv, qo.view, so.view); });
    });
  });
}

void weight_dequant(nb::handle q, nb::handle s, nb::handle w, int threads, std::uintptr_t stream) {
  on_device_of(q, "weight_dequant", "q", threads, stream, [&](const auto& p) {
    const auto qi = in<dsa::fp8_e4m3, 2>(p, q, "q");
    const auto si = in<float, 2>(p, s, "s");
    const rw_array wa = output_array(w, p.op, "w");
    with_float_or_bf16(wa, p.op, "w", [&]<class T>(std::type_identity<T>) {
      const auto wv = view_of<T, 2>(p, wa, "w");
      p.run([&](const auto& be) { dsa::weight_dequant(be, qi.view, si.view, wv); });
    });
  });
}

void kv_cache_fp8_pack(nb::handle kv, nb::handle cache, nb::handle slots, int threads, std::uintptr_t stream) {
  on_device_of(kv, "kv_cache_fp8_pack", "kv", threads, stream, [&](const auto& p) {
    const auto kvi = in<dsa::bf16, 2>(p, kv, "kv");
    const auto co = out<std::uint8_t, 2>(p, cache, "cache");
    ro_array keep;
    const auto sv = optional_in<std::int32_t, 1>(p, slots, keep, "slots");
    p.run([&](const auto& be) { dsa::kv_cache_fp8_pack(be, kvi.view, co.view, sv); });
  });
}

void kv_cache_fp8_unpack(nb::handle cache, nb::handle kv, int threads, std::uintptr_t stream) {
  on_device_of(cache, "kv_cache_fp8_unpack", "cache", threads, stream, [&](const auto& p) {
    const auto ci = in<std::uint8_t, 2>(p, cache, "cache");
    const auto kvo = out<dsa::bf16, 2>(p, kv, "kv");
    p.run([&](const auto& be) { dsa::kv_cache_fp8_unpack(be, ci.view, kvo.view); });
  });
}

void indexer_cache_pack(nb::handle k, nb::handle k_scale, nb::handle cache, nb::handle slots, int threads,
                        std::uintptr_t stream) {
  on_device_of(k, "indexer_cache_pack", "k", threads, stream, [&](const auto& p) {
    const auto ki = in<dsa::fp8_e4m3, 2>(p, k, "k");
    const auto si = in<float, 1>(p, k_scale, "k_scale");
    const auto co = out<std::uint8_t, 2>(p, cache, "cache");
    ro_array keep;
    const auto sv = optional_in<std::int32_t, 1>(p, slots, keep, "slots");
    p.run([&](const auto& be) { dsa::indexer_cache_pack(be, ki.view, si.view, co.view, sv); });
  });
}

void indexer_cache_unpack(nb::handle cache, nb::handle k, nb::handle k_scale, int threads, std::uintptr_t stream) {
  on_device_of(cache, "indexer_cache_unpack", "cache", threads, stream, [&](const auto& p) {
    const auto ci = in<std::uint8_t, 2>(p, cache, "cache");
    const auto ko = out<dsa::fp8_e4m3, 2>(p, k, "k");
    const auto so = out<float, 1>(p, k_scale, "k_scale");
    p.run([&](const auto& be) { dsa::indexer_cache_unpack(be, ci.view, ko.view, so.view); });
  });
}

/// The rows a cache allocated for `slots` needs: max(slots) + 1 (slots of -1 are skipped, so
/// all -1 or none needs 0). `slots` is checked as the op checks it (a host int32 vector) before an
/// entry is read, so a float, 2-D or foreign object is refused, never truncated or iterated.
dsa::index_t slot_rows(nb::handle slots, std::string_view op) {
  const host_place p{op, {}};
  const auto si = in<std::int32_t, 1>(p, slots, "slots");
  std::int32_t top = -1;
  for (dsa::index_t i = 0; i < si.view.extent(0); ++i) top = std::max(top, si.view(i));
  return static_cast<dsa::index_t>(top) + 1;
}

}  // namespace

void bind_quant(nb::module_& m) {
  m.def("hadamard_transform", &hadamard_transform, array("x"), array("y"), nb::arg("scale"), nb::arg("threads"),
        nb::arg("stream"));
  m.def("act_quant", &act_quant, array("x"), array("q"), array("s"), nb::arg("scale_format"),
        nb::arg("group_size"), nb::arg("threads"), nb::arg("stream"));
  m.def("act_dequant", &act_dequant, array("q"), array("s"), array("y"), nb::arg("group_size"),
        nb::arg("threads"), nb::arg("stream"));
  m.def("weight_quant", &weight_quant, array("w"), array("q"), array("s"), nb::arg("threads"),
        nb::arg("stream"));
  m.def("weight_dequant", &weight_dequant, array("q"), array("s"), array("w"), nb::arg("threads"),
        nb::arg("stream"));
  m.def("kv_cache_fp8_pack", &kv_cache_fp8_pack, array("kv"), array("cache"), array("slots"),
        nb::arg("threads"), nb::arg("stream"));
  m.def("kv_cache_fp8_unpack", &kv_cache_fp8_unpack, array("cache"), array("kv"), nb::arg("threads"),
        nb::arg("stream"));
  m.def("indexer_cache_pack", &indexer_cache_pack, array("k"), array("k_scale"), array("cache"),
        array("slots"), nb::arg("threads"), nb::arg("stream"));
  m.def("indexer_cache_unpack", &indexer_cache_unpack, array("cache"), array("k"), array("k_scale"),
        nb::arg("threads"), nb::arg("stream"));
  m.def("slot_rows", &slot_rows, array("slots"), nb::arg("op"));
  m.attr("kv_fp8_row_bytes") = dsa::kv_fp8_row_bytes;
  m.attr("kv_dim") = dsa::kv_dim;
  m.attr("kv_latent_dim") = dsa::kv_latent_dim;
  m.attr("indexer_cache_row_bytes") = dsa::indexer_cache_row_bytes;
  m.attr("indexer_cache_dim") = dsa::indexer_cache_dim;
}

}  // namespace dsa_py
