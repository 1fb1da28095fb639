// Cache rows: kv_cache_fp8_pack/unpack (FlashMLA's 656-byte FP8 rows), indexer_cache_pack/unpack
// (132-byte indexer key rows).
#include "common.hpp"
#include "dsa/cpu/kv_cache.hpp"
#include "dsa/ops/kv_cache.hpp"

namespace dsa_py {
namespace {

void kv_cache_fp8_pack(nb::handle kv, nb::handle cache, nb::handle slots, int threads) {
  constexpr std::string_view op = "kv_cache_fp8_pack";
  const input<dsa::bf16, 2> kvi(kv, op, "kv");
  output<std::uint8_t, 2> co(cache, op, "cache");
  ro_array keep;
  const auto sv = optional_input<std::int32_t, 1>(slots, keep, op, "slots");
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::kv_cache_fp8_pack(be, kvi.view, co.view, sv);
}

void kv_cache_fp8_unpack(nb::handle cache, nb::handle kv, int threads) {
  constexpr std::string_view op = "kv_cache_fp8_unpack";
  const input<std::uint8_t, 2> ci(cache, op, "cache");
  output<dsa::bf16, 2> kvo(kv, op, "kv");
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::kv_cache_fp8_unpack(be, ci.view, kvo.view);
}

void indexer_cache_pack(nb::handle k, nb::handle k_scale, nb::handle cache, nb::handle slots, int threads) {
  constexpr std::string_view op = "indexer_cache_pack";
  const input<dsa::fp8_e4m3, 2> ki(k, op, "k");
  const input<float, 1> si(k_scale, op, "k_scale");
  output<std::uint8_t, 2> co(cache, op, "cache");
  ro_array keep;
  const auto sv = optional_input<std::int32_t, 1>(slots, keep, op, "slots");
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::indexer_cache_pack(be, ki.view, si.view, co.view, sv);
}

void indexer_cache_unpack(nb::handle cache, nb::handle k, nb::handle k_scale, int threads) {
  constexpr std::string_view op = "indexer_cache_unpack";
  const input<std::uint8_t, 2> ci(cache, op, "cache");
  output<dsa::fp8_e4m3, 2> ko(k, op, "k");
  output<float, 1> so(k_scale, op, "k_scale");
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::indexer_cache_unpack(be, ci.view, ko.view, so.view);
}

}  // namespace

void bind_kv_cache(nb::module_& m) {
  m.def("kv_cache_fp8_pack", &kv_cache_fp8_pack, nb::arg("kv"), nb::arg("cache"), nb::arg("slots").none(),
        nb::arg("threads"));
  m.def("kv_cache_fp8_unpack", &kv_cache_fp8_unpack, nb::arg("cache"), nb::arg("kv"), nb::arg("threads"));
  m.def("indexer_cache_pack", &indexer_cache_pack, nb::arg("k"), nb::arg("k_scale"), nb::arg("cache"),
        nb::arg("slots").none(), nb::arg("threads"));
  m.def("indexer_cache_unpack", &indexer_cache_unpack, nb::arg("cache"), nb::arg("k"), nb::arg("k_scale"),
        nb::arg("threads"));
  m.attr("kv_fp8_row_bytes") = dsa::kv_fp8_row_bytes;
  m.attr("kv_dim") = dsa::kv_dim;
  m.attr("kv_latent_dim") = dsa::kv_latent_dim;
  m.attr("indexer_cache_row_bytes") = dsa::indexer_cache_row_bytes;
  m.attr("indexer_cache_dim") = dsa::indexer_cache_dim;
}

}  // namespace dsa_py
