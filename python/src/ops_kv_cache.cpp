// Cache rows: kv_cache_fp8_pack/unpack (FlashMLA's 656-byte FP8 rows), indexer_cache_pack/unpack
// (132-byte indexer key rows).
#include <algorithm>

#include "common.hpp"
#include "dsa/cpu/kv_cache.hpp"
#include "dsa/ops/kv_cache.hpp"

namespace dsa_py {
namespace {

void kv_cache_fp8_pack(nb::handle kv, nb::handle cache, nb::handle slots, int threads, std::uintptr_t stream) {
  on_device_of(kv, "kv_cache_fp8_pack", "kv", threads, stream, [&](const auto& p) {
    const auto kvi = in<dsa::bf16, 2>(p, kv, "kv");
    const auto co = out<std::uint8_t, 2>(p, cache, "cache");
    ro_array keep;
    const auto sv = optional_in<std::int32_t, 1>(p, slots, keep, "slots");
    p.run([&](const auto& be) { DSA_PY_CALL(kv_cache_fp8_pack, be, kvi.view, co.view, sv); });
  });
}

void kv_cache_fp8_unpack(nb::handle cache, nb::handle kv, int threads, std::uintptr_t stream) {
  on_device_of(cache, "kv_cache_fp8_unpack", "cache", threads, stream, [&](const auto& p) {
    const auto ci = in<std::uint8_t, 2>(p, cache, "cache");
    const auto kvo = out<dsa::bf16, 2>(p, kv, "kv");
    p.run([&](const auto& be) { DSA_PY_CALL(kv_cache_fp8_unpack, be, ci.view, kvo.view); });
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
    p.run([&](const auto& be) { DSA_PY_CALL(indexer_cache_pack, be, ki.view, si.view, co.view, sv); });
  });
}

void indexer_cache_unpack(nb::handle cache, nb::handle k, nb::handle k_scale, int threads, std::uintptr_t stream) {
  on_device_of(cache, "indexer_cache_unpack", "cache", threads, stream, [&](const auto& p) {
    const auto ci = in<std::uint8_t, 2>(p, cache, "cache");
    const auto ko = out<dsa::fp8_e4m3, 2>(p, k, "k");
    const auto so = out<float, 1>(p, k_scale, "k_scale");
    p.run([&](const auto& be) { DSA_PY_CALL(indexer_cache_unpack, be, ci.view, ko.view, so.view); });
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

void bind_kv_cache(nb::module_& m) {
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
