// Top-k selection (plain and through a page table) and gather_rows.
#include "common.hpp"
#include "dsa/cpu/topk.hpp"
#include "dsa/ops/topk.hpp"

namespace dsa_py {
namespace {

void topk_indices(nb::handle scores, nb::handle ranges, dsa::index_t k, nb::handle indices, int threads,
                  std::uintptr_t stream) {
  on_device_of(scores, "topk_indices", "scores", threads, stream, [&](const auto& p) {
    const auto si = in<float, 2>(p, scores, "scores");
    const auto ri = in<std::int32_t, 2>(p, ranges, "ranges");
    const auto io = out<std::int32_t, 2>(p, indices, "indices");
    p.run([&](const auto& be) { dsa::topk_indices(be, si.view, ri.view, k, io.view); });
  });
}

void topk_indices_paged(nb::handle scores, nb::handle ranges, dsa::index_t k, nb::handle block_table,
                        dsa::index_t block_size, nb::handle slots, int threads, std::uintptr_t stream) {
  on_device_of(scores, "topk_indices_paged", "scores", threads, stream, [&](const auto& p) {
    const auto si = in<float, 2>(p, scores, "scores");
    const auto ri = in<std::int32_t, 2>(p, ranges, "ranges");
    const auto bi = in<std::int32_t, 2>(p, block_table, "block_table");
    const auto so = out<std::int32_t, 2>(p, slots, "slots");
    p.run([&](const auto& be) {
      dsa::topk_indices_paged(be, si.view, ri.view, k, bi.view, block_size, so.view);
    });
  });
}

/// gather_rows copies rows bit for bit, so any element type is gathered as the unsigned integer
/// of its size: float32, bfloat16, float8 codes, cache-row bytes, int32, ...
template <std::size_t N, class P, class I>
void gather_as(const P& p, const ro_array& sa, const I& ii, const rw_array& da) {
  static_assert(N == 1 || N == 2 || N == 4 || N == 8, "gather_rows' instance list names these sizes");
  const auto sv = view_of<const raw_uint<N>, 2, raw_element<N>>(p, sa, "src");
  const auto dv = view_of<raw_uint<N>, 3, raw_element<N>>(p, da, "dst");
  p.run([&](const auto& be) { dsa::gather_rows(be, sv, ii.view, dv); });
}

void gather_rows(nb::handle src, nb::handle indices, nb::handle dst, int threads, std::uintptr_t stream) {
  on_device_of(src, "gather_rows", "src", threads, stream, [&](const auto& p) {
    const ro_array sa = input_array(src, p.op, "src");
    const auto ii = in<std::int32_t, 2>(p, indices, "indices");
    const rw_array da = output_array(dst, p.op, "dst");
    const auto sd = sa.dtype(), dd = da.dtype();
    if (sd.code != dd.code || sd.bits != dd.bits || sd.lanes != dd.lanes) {
      dsa::fail(p.op, "dst.dtype", dtype_name(dd), "the dtype of src, " + dtype_name(sd));
    }
    switch (sa.itemsize()) {
      case 1: return gather_as<1>(p, sa, ii, da);
      case 2: return gather_as<2>(p, sa, ii, da);
      case 4: return gather_as<4>(p, sa, ii, da);
      case 8: return gather_as<8>(p, sa, ii, da);
      default: dsa::fail(p.op, "src.dtype", dtype_name(sd), "an element of 1, 2, 4 or 8 bytes");
    }
  });
}

}  // namespace

void bind_topk(nb::module_& m) {
  m.def("topk_indices", &topk_indices, array("scores"), array("ranges"), nb::arg("k"), array("indices"),
        nb::arg("threads"), nb::arg("stream"));
  m.def("topk_indices_paged", &topk_indices_paged, array("scores"), array("ranges"), nb::arg("k"),
        array("block_table"), nb::arg("block_size"), array("slots"), nb::arg("threads"), nb::arg("stream"));
  m.def("gather_rows", &gather_rows, array("src"), array("indices"), array("dst"), nb::arg("threads"),
        nb::arg("stream"));
}

}  // namespace dsa_py
