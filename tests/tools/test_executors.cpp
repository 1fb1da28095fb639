// The executor seam of dsa_validate (tools/validate/primitive_cases.hpp): the case groups reach
// their backend only through an executor, which is how --backend cuda (validate/cuda_cases.hpp)
// runs the same loading and criteria on the GPU. Checked here on the host, with executors that
// stand in for a device one: outputs left unwritten (the CUDA executor's poisoned buffers) fail
// every group, a backend failure and a rejected input are told apart, and a backend that splits
// sparse_mla's keys is held to the criteria on both paths.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/model/safetensors.hpp"
#include "validate/executor.hpp"
#include "validate/primitive_cases.hpp"

namespace fs = std::filesystem;
namespace dv = dsa_validate;
using dsa::index_t;

namespace {

const fs::path golden_path = fs::path(DSA_TEST_DATA_DIR) / "primitives.safetensors";

template <class T, std::size_t R>
void poison(dsa::host_view<T, R> v) {
  REQUIRE(v.is_contiguous());
  if (v.size() > 0) std::memset(static_cast<void*>(v.data_handle()), dv::output_poison_byte, sizeof(T) * v.size());
}

/// What the CUDA executor hands back from a kernel that writes nothing: every output element is
/// output_poison_byte, as cuda_cases.hpp fills its output buffers before the op.
struct unwritten_executor {
  std::string_view backend_name() const { return "unwritten"; }
  void hadamard_transform(dsa::host_view<const dsa::bf16, 2>, dsa::host_view<dsa::bf16, 2> y, float) const { poison(y); }
  void hadamard_transform(dsa::host_view<const float, 2>, dsa::host_view<float, 2> y, float) const { poison(y); }
  void act_quant(dsa::host_view<const dsa::bf16, 2>, dsa::host_view<dsa::fp8_e4m3, 2> q, dsa::host_view<float, 2> s,
                 const dsa::act_quant_config&) const {
    poison(q);
    poison(s);
  }
  void weight_quant(dsa::host_view<const float, 2>, dsa::host_view<dsa::fp8_e4m3, 2> q,
                    dsa::host_view<float, 2> s) const {
    poison(q);
    poison(s);
  }
  void lightning_indexer_scores(dsa::host_view<const dsa::fp8_e4m3, 3>, dsa::host_view<const float, 2>,
                                dsa::host_view<const dsa::fp8_e4m3, 2>, dsa::host_view<const float, 1>,
                                dsa::host_view<const std::int32_t, 2>, dsa::host_view<float, 2> scores) const {
    poison(scores);
  }
  void topk_indices(dsa::host_view<const float, 2>, dsa::host_view<const std::int32_t, 2>, index_t,
                    dsa::host_view<std::int32_t, 2> indices) const {
    poison(indices);
  }
  index_t sparse_mla_num_splits(index_t, index_t, index_t) const { return 1; }
  void sparse_mla_attention(dsa::host_view<const dsa::bf16, 3>, dsa::host_view<const dsa::bf16, 2>,
                            dsa::host_view<const std::int32_t, 2>, dsa::host_view<float, 3> out,
                            dsa::host_view<float, 2> lse, const dsa::sparse_mla_config&) const {
    poison(out);
    poison(lse);
  }
  void indexer_kl_loss_dense(dsa::host_view<const float, 3>, dsa::host_view<const float, 2>,
                             dsa::host_view<const std::int32_t, 2>, dsa::host_view<float, 1> loss,
                             dsa::host_view<float, 2> grad) const {
    poison(loss);
    poison(grad);
  }
  void indexer_kl_loss_sparse(dsa::host_view<const float, 3>, dsa::host_view<const float, 2>,
                              dsa::host_view<const std::int32_t, 2>, dsa::host_view<float, 1> loss,
                              dsa::host_view<float, 2> grad) const {
    poison(loss);
    poison(grad);
  }
};
static_assert(dv::executor<unwritten_executor>);

/// The CPU backend, except that top-k fails as a device would (a CUDA error) and hadamard rejects
/// its input as a front-end would.
struct failing_executor : dv::host_executor<dsa::cpu_backend> {
  using dv::host_executor<dsa::cpu_backend>::hadamard_transform;  // the float overload stays the CPU's
  void topk_indices(dsa::host_view<const float, 2>, dsa::host_view<const std::int32_t, 2>, index_t,
                    dsa::host_view<std::int32_t, 2>) const {
    throw dv::backend_error("topk_indices on the CUDA backend: dsa::cuda: cudaStreamSynchronize(stream) = "
                            "cudaErrorIllegalAddress");
  }
  void hadamard_transform(dsa::host_view<const dsa::bf16, 2>, dsa::host_view<dsa::bf16, 2>, float) const {
    dsa::fail("hadamard_transform", "x.extent(1)", 100, "a supported length");
  }
};

/// The CPU backend with a backend-chosen split count for sparse_mla, as the CUDA executor has:
/// the split path runs through the workspace overload (the CPU checks the workspace and computes
/// in one pass), optionally with its output perturbed to show that path is compared too.
struct splitting_executor : dv::host_executor<dsa::cpu_backend> {
  index_t splits = 3;
  bool perturb_split_path = false;
  mutable std::vector<int> seen_splits;

  index_t sparse_mla_num_splits(index_t, index_t, index_t) const { return splits; }
  void sparse_mla_attention(dsa::host_view<const dsa::bf16, 3> q, dsa::host_view<const dsa::bf16, 2> kv,
                            dsa::host_view<const std::int32_t, 2> indices, dsa::host_view<float, 3> out,
                            dsa::host_view<float, 2> lse, const dsa::sparse_mla_config& cfg) const {
    seen_splits.push_back(static_cast<int>(cfg.num_splits));
    std::vector<std::byte> ws(static_cast<std::size_t>(
        dsa::sparse_mla_attention_workspace_size(q.extent(0), q.extent(1), cfg.d_v, cfg.num_splits) + 16));
    // 16-byte aligned, as the front-end requires.
    auto* p = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(ws.data()) + 15) & ~std::uintptr_t{15});
    const dsa::host_view<std::byte, 1> w(p, {static_cast<index_t>(ws.size()) - 16});
    dsa::sparse_mla_attention(be, q, kv, indices, out, lse, cfg, w);
    if (perturb_split_path && cfg.num_splits > 1) out.data_handle()[0] += 0.01f;
  }
};

}  // namespace

TEST_CASE("outputs an executor leaves unwritten (the CUDA executor's poison) fail every golden group") {
  const auto f = dsa::safetensors_file::open(golden_path);
  const auto groups = dv::detect_groups(f);
  REQUIRE(groups.size() == dv::known_groups.size());
  for (const std::string& g : groups) {
    CAPTURE(g);
    const dv::case_result r = dv::run_group(unwritten_executor{}, f, g);
    CHECK_FALSE(r.pass());
    // Every output tensor fails at least one of its comparisons, not just the group as a whole.
    for (const dv::output_tensor& out : r.outputs) {
      bool failed = false;
      for (const dv::comparison& c : r.comparisons) failed |= c.tensor == out.name && !c.pass;
      CHECK_MESSAGE(failed, out.name);
    }
  }
}

TEST_CASE("the poison byte is no output value a golden case expects") {
  float f;
  std::uint32_t u = 0x7F7F7F7Fu;
  std::memcpy(&f, &u, sizeof f);
  CHECK(f > 3e38f);  // finite and huge: fails every error bound
  CHECK(static_cast<std::int32_t>(u) > (std::int32_t{1} << 30));  // never an index of a golden file
  dsa::bf16 b;
  b.bits = 0x7F7F;
  CHECK(b.to_float() > 3e38f);
  CHECK(std::isnan(dsa::fp8_e4m3::from_bits(dv::output_poison_byte).to_float()));
}

TEST_CASE("run_group tells a backend failure (backend_error) from an input the op rejects (input_error)") {
  const auto f = dsa::safetensors_file::open(golden_path);
  const failing_executor ex{};
  CHECK_THROWS_AS(dv::run_group(ex, f, "topk"), dv::backend_error);
  try {
    (void)dv::run_group(ex, f, "topk");
  } catch (const dv::backend_error& e) {
    CHECK(std::string(e.what()).find("cudaErrorIllegalAddress") != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(dv::run_group(ex, f, "hadamard"),
                       doctest::Contains("group 'hadamard': dsa::hadamard_transform: x.extent(1) = 100"),
                       dv::input_error);
  // The other groups are the CPU backend's and pass.
  CHECK(dv::run_group(ex, f, "act_quant").pass());
}

TEST_CASE("a backend that splits sparse_mla's keys is checked on the one-pass and the split path") {
  const auto f = dsa::safetensors_file::open(golden_path);
  SUBCASE("both paths pass, and both are reported") {
    splitting_executor ex;
    const dv::case_result r = dv::run_group(ex, f, "sparse_mla");
    CHECK(r.pass());
    CHECK(ex.seen_splits == std::vector<int>{1, 3});
    int split_comparisons = 0;
    for (const dv::comparison& c : r.comparisons) split_comparisons += c.tensor.ends_with(" (3 splits)") ? 1 : 0;
    CHECK(split_comparisons == 4);  // out and lse, error and non-finite each
    // The dump keeps the one-pass outputs under the expected names only.
    REQUIRE(r.outputs.size() == 2);
    CHECK(r.outputs[0].name == "sparse_mla.out");
    CHECK(r.outputs[1].name == "sparse_mla.lse");
  }
  SUBCASE("a wrong split path fails the group") {
    splitting_executor ex;
    ex.perturb_split_path = true;
    const dv::case_result r = dv::run_group(ex, f, "sparse_mla");
    CHECK_FALSE(r.pass());
    for (const dv::comparison& c : r.comparisons) {
      CAPTURE(c.tensor);
      CHECK(c.pass == (c.tensor != "sparse_mla.out (3 splits)" || c.metric != "max abs err"));
    }
  }
  SUBCASE("one split: one run, as on the CPU") {
    splitting_executor ex;
    ex.splits = 1;
    CHECK(dv::run_group(ex, f, "sparse_mla").pass());
    CHECK(ex.seen_splits == std::vector<int>{1});
  }
}
