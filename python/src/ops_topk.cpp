// Top-k selection (plain and through a page table) and gather_rows.
#include "common.hpp"
#include "dsa/cpu/topk.hpp"
#include "dsa/ops/topk.hpp"

namespace dsa_py {
namespace {

void topk_indices(nb::handle scores, nb::handle ranges, dsa::index_t k, nb::handle indices, int threads) {
  constexpr std::string_view op = "topk_indices";
  const input<float, 2> si(scores, op, "scores");
  const input<std::int32_t, 2> ri(ranges, op, "ranges");
  output<std::int32_t, 2> io(indices, op, "indices");
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::topk_indices(be, si.view, ri.view, k, io.view);
}

void topk_indices_paged(nb::handle scores, nb::handle ranges, dsa::index_t k, nb::handle block_table,
                        dsa::index_t block_size, nb::handle slots, int threads) {
  constexpr std::string_view op = "topk_indices_paged";
  const input<float, 2> si(scores, op, "scores");
  const input<std::int32_t, 2> ri(ranges, op, "ranges");
  const input<std::int32_t, 2> bi(block_table, op, "block_table");
  output<std::int32_t, 2> so(slots, op, "slots");
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::topk_indices_paged(be, si.view, ri.view, k, bi.view, block_size, so.view);
}

/// gather_rows copies rows bit for bit, so any element type is gathered as the unsigned integer
/// of its size: float32, bfloat16, float8 codes, cache-row bytes, int32, ...
template <class U>
void gather_as(const ro_array& sa, const input<std::int32_t, 2>& ii, const rw_array& da, int threads) {
  constexpr std::string_view op = "gather_rows";
  const auto sv = view_of<const U, 2>(sa, op, "src");
  const auto dv = view_of<U, 3>(da, op, "dst");
  const auto be = cpu_backend(threads, op);
  nogil g;
  dsa::gather_rows(be, sv, ii.view, dv);
}

void gather_rows(nb::handle src, nb::handle indices, nb::handle dst, int threads) {
  constexpr std::string_view op = "gather_rows";
  const ro_array sa = input_array(src, op, "src");
  const input<std::int32_t, 2> ii(indices, op, "indices");
  const rw_array da = output_array(dst, op, "dst");
  const auto sd = sa.dtype(), dd = da.dtype();
  if (sd.code != dd.code || sd.bits != dd.bits || sd.lanes != dd.lanes) {
    dsa::fail(op, "dst.dtype", dtype_name(dd), "the dtype of src, " + dtype_name(sd));
  }
  switch (sa.itemsize()) {
    case 1: return gather_as<raw_element<1>>(sa, ii, da, threads);
    case 2: return gather_as<raw_element<2>>(sa, ii, da, threads);
    case 4: return gather_as<raw_element<4>>(sa, ii, da, threads);
    case 8: return gather_as<raw_element<8>>(sa, ii, da, threads);
    default: dsa::fail(op, "src.dtype", dtype_name(sd), "an element of 1, 2, 4 or 8 bytes");
  }
}

}  // namespace

void bind_topk(nb::module_& m) {
  m.def("topk_indices", &topk_indices, nb::arg("scores"), nb::arg("ranges"), nb::arg("k"), nb::arg("indices"),
        nb::arg("threads"));
  m.def("topk_indices_paged", &topk_indices_paged, nb::arg("scores"), nb::arg("ranges"), nb::arg("k"),
        nb::arg("block_table"), nb::arg("block_size"), nb::arg("slots"), nb::arg("threads"));
  m.def("gather_rows", &gather_rows, nb::arg("src"), nb::arg("indices"), nb::arg("dst"), nb::arg("threads"));
}

}  // namespace dsa_py
