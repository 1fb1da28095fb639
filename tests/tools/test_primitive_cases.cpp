// The golden test of every primitive: each case group of tests/data/primitives.safetensors (the
// independent float64 references of ../shared/golden) run through the public ops on the CPU
// backend must pass its tolerance. Also checks that the metrics can fail, and that a file that
// lacks what a group needs is an input_error rather than a crash.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/model/safetensors.hpp"
#include "validate/primitive_cases.hpp"

namespace fs = std::filesystem;
namespace dv = dsa_validate;

namespace {

const fs::path golden_path = fs::path(DSA_TEST_DATA_DIR) / "primitives.safetensors";

struct temp_file {
  fs::path path;
  explicit temp_file(const std::string& stem) {
    static int counter = 0;
    path = fs::temp_directory_path() /
           (stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".safetensors");
  }
  ~temp_file() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

/// Copies the golden file's tensors into `out`, letting `edit` change (or drop, by clearing the
/// name) each one; owned byte buffers keep the edited data alive until written.
void copy_golden(const fs::path& out,
                 const std::function<void(dsa::safetensors_entry&, std::vector<std::byte>&)>& edit) {
  const auto f = dsa::safetensors_file::open(golden_path);
  std::vector<std::vector<std::byte>> buffers;
  buffers.reserve(f.tensors().size());
  std::vector<dsa::safetensors_entry> entries;
  for (const dsa::tensor_info& t : f.tensors()) {
    const auto b = f.bytes(t);
    buffers.emplace_back(b.begin(), b.end());
    dsa::safetensors_entry e{t.name, t.type, t.shape, {}};
    edit(e, buffers.back());
    e.data = buffers.back();
    if (!e.name.empty()) entries.push_back(e);
  }
  dsa::write_safetensors(out, entries, f.metadata());
}

template <class T>
T read_at(const std::vector<std::byte>& b, std::size_t i) {
  T v;
  std::memcpy(&v, b.data() + i * sizeof(T), sizeof(T));
  return v;
}
template <class T>
void write_at(std::vector<std::byte>& b, std::size_t i, T v) {
  std::memcpy(b.data() + i * sizeof(T), &v, sizeof(T));
}

std::string describe(const dv::case_result& r) {
  std::string s = r.name + (r.pass() ? " PASS:" : " FAIL:");
  for (const auto& c : r.comparisons) {
    s += " [" + c.tensor + " " + c.metric + " " + std::to_string(c.max_error) + " tol " + std::to_string(c.tolerance) +
         "]";
  }
  return s;
}

}  // namespace

TEST_CASE("every primitive reproduces its golden group on the CPU backend") {
  const auto f = dsa::safetensors_file::open(golden_path);
  const auto groups = dv::detect_groups(f);
  REQUIRE(groups.size() == dv::known_groups.size());
  CHECK(dv::unknown_groups(f).empty());
  for (const std::string& g : groups) {
    SUBCASE(g.c_str()) {
      const dv::case_result r = dv::run_group(dsa::cpu_backend{2}, f, g);
      MESSAGE(describe(r));
      CHECK(r.name == g);
      REQUIRE_FALSE(r.comparisons.empty());
      for (const auto& c : r.comparisons) {
        CAPTURE(c.tensor);
        CAPTURE(c.metric);
        CHECK(c.max_error <= c.tolerance);
        CHECK(c.pass);
        // Every compared tensor is an expected tensor of the file, and each is produced.
        CHECK(f.contains(c.tensor));
      }
      CHECK(r.pass());
      for (const auto& out : r.outputs) {
        CAPTURE(out.name);
        const dsa::tensor_info& t = f.at(out.name);
        CHECK(out.type == t.type);
        CHECK(out.shape == t.shape);
        CHECK(out.bytes.size() == t.nbytes());
      }
    }
  }
}

TEST_CASE("golden outputs do not depend on the thread count") {
  const auto f = dsa::safetensors_file::open(golden_path);
  for (std::string_view g : dv::known_groups) {
    CAPTURE(g);
    const auto one = dv::run_group(dsa::cpu_backend{1}, f, g);
    const auto three = dv::run_group(dsa::cpu_backend{3}, f, g);
    REQUIRE(one.outputs.size() == three.outputs.size());
    for (std::size_t i = 0; i < one.outputs.size(); ++i) CHECK(one.outputs[i].bytes == three.outputs[i].bytes);
  }
}

TEST_CASE("bf16 ulp distance") {
  using dsa::bf16;
  CHECK(dv::bf16_ulp_distance(bf16(1.0f), bf16(1.0f)) == 0.0);
  CHECK(dv::bf16_ulp_distance(bf16::from_bits(0x3F80), bf16::from_bits(0x3F81)) == 1.0);
  CHECK(dv::bf16_ulp_distance(bf16::from_bits(0x3F7F), bf16::from_bits(0x3F80)) == 1.0);  // across a binade
  CHECK(dv::bf16_ulp_distance(bf16::from_bits(0x0001), bf16::from_bits(0x8001)) == 2.0);  // across zero
  CHECK(dv::bf16_ulp_distance(bf16::from_bits(0x0000), bf16::from_bits(0x8000)) == 0.0);  // +0 and -0
  CHECK(dv::bf16_ulp_distance(bf16::from_bits(0x7F7F), bf16::from_bits(0x7F80)) == 1.0);  // max finite, inf
  CHECK(dv::bf16_ulp_distance(bf16::from_bits(0x7FC0), bf16::from_bits(0xFFC1)) == 0.0);  // NaN, NaN
  CHECK(std::isinf(dv::bf16_ulp_distance(bf16::from_bits(0x7FC0), bf16(1.0f))));
}

TEST_CASE("the hadamard criterion: >= 99.5% bit-exact, the rest within 1 ulp") {
  std::vector<dsa::bf16> expected(1000, dsa::bf16(1.0f));
  auto got = expected;
  for (int i = 0; i < 5; ++i) got[static_cast<std::size_t>(i)] = dsa::bf16::from_bits(0x3F81);
  auto c = dv::compare_bf16_near_exact("y", got, expected);
  CHECK(c[0].pass);
  CHECK(c[1].pass);
  CHECK(c[1].max_error == doctest::Approx(0.005));
  got[5] = dsa::bf16::from_bits(0x3F7F);  // a sixth inexact element: 0.6% > 0.5%
  c = dv::compare_bf16_near_exact("y", got, expected);
  CHECK(c[0].pass);
  CHECK_FALSE(c[1].pass);
  got[5] = expected[5];
  got[0] = dsa::bf16::from_bits(0x3F82);  // 2 ulp
  c = dv::compare_bf16_near_exact("y", got, expected);
  CHECK_FALSE(c[0].pass);
  CHECK(c[0].max_error == 2.0);
}

TEST_CASE("comparison helpers") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> e = {1.0f, inf, -inf, 2.0f, nan};
  std::vector<float> g = e;
  CHECK(dv::compare_nonfinite("t", g, e).pass);
  CHECK(dv::compare_abs("t", g, e, 0.0).pass);
  g[1] = -inf;
  CHECK(dv::compare_nonfinite("t", g, e).max_error == 1.0);
  g[1] = 1e30f;
  CHECK_FALSE(dv::compare_nonfinite("t", g, e).pass);
  g = e;
  g[3] = nan;
  CHECK_FALSE(dv::compare_nonfinite("t", g, e).pass);
  g = e;
  g[3] = 2.5f;
  CHECK(dv::compare_abs("t", g, e, 0.5).pass);
  CHECK_FALSE(dv::compare_abs("t", g, e, 0.4).pass);

  const std::vector<float> ge = {1.0f, 1.0f, 0.0f, 0.0f};
  std::vector<float> gg = {1.5f, 1.0f, 0.0f, 0.0f};
  auto c = dv::compare_row_relative("t", "m", gg, ge, 2, 2, {10.0, 0.0}, 0.05);
  CHECK(c.max_error == doctest::Approx(0.05));
  CHECK(c.pass);
  gg[3] = 1e-30f;  // a row of scale 0 must match exactly
  CHECK_FALSE(dv::compare_row_relative("t", "m", gg, ge, 2, 2, {10.0, 0.0}, 0.05).pass);

  CHECK(dv::compare_scalar_relative("loss", 1.0001f, 1.0f, 1e-4).max_error == doctest::Approx(1e-4).epsilon(1e-3));
  CHECK_FALSE(dv::compare_scalar_relative("loss", 1.001f, 1.0f, 1e-4).pass);
  CHECK(dv::compare_scalar_relative("loss", inf, inf, 1e-4).pass);
  CHECK_FALSE(dv::compare_scalar_relative("loss", nan, 1.0f, 1e-4).pass);

  const std::vector<std::int32_t> a = {1, 2, 3}, b = {1, 2, 4};
  CHECK(dv::compare_bits<std::int32_t>("i", a, a).pass);
  CHECK(dv::compare_bits<std::int32_t>("i", a, b).max_error == 1.0);
}

TEST_CASE("a perturbed expected output fails its group") {
  const temp_file tmp("dsa_test_primitive_cases");
  struct perturbation {
    const char* tensor;
    std::function<void(std::vector<std::byte>&)> apply;
  };
  const std::vector<perturbation> cases = {
      // hadamard: one element off by 2 ulp.
      {"hadamard.y", [](auto& b) { write_at<std::uint16_t>(b, 7, read_at<std::uint16_t>(b, 7) + 2); }},
      // hadamard_f32: an error of 0.01 on one element, ~3e-4 x the L2 norm of its row of x.
      {"hadamard_f32.y", [](auto& b) { write_at<float>(b, 3, read_at<float>(b, 3) + 0.01f); }},
      {"act_quant.ue8m0.q", [](auto& b) { b[100] ^= std::byte{1}; }},
      {"act_quant.fp32.s", [](auto& b) { write_at<float>(b, 2, std::nextafter(read_at<float>(b, 2), 1.0f)); }},
      {"weight_quant.s", [](auto& b) { write_at<float>(b, 11, std::nextafter(read_at<float>(b, 11), 0.0f)); }},
      {"indexer.score", [](auto& b) { write_at<float>(b, 42, read_at<float>(b, 42) * 1.01f + 1.0f); }},
      {"topk.indices", [](auto& b) { write_at<std::int32_t>(b, 0, read_at<std::int32_t>(b, 0) + 1); }},
      {"sparse_mla.out", [](auto& b) { write_at<float>(b, 5, read_at<float>(b, 5) + 3e-3f); }},
      // The empty row's lse is +inf: a finite value there must fail.
      {"sparse_mla.lse",
       [](auto& b) {
         for (std::size_t i = 0; i < b.size() / 4; ++i) {
           if (std::isinf(read_at<float>(b, i))) {
             write_at<float>(b, i, 0.0f);
             break;
           }
         }
       }},
      {"kl_dense.loss", [](auto& b) { write_at<float>(b, 0, read_at<float>(b, 0) * 1.001f); }},
      {"kl_sparse.grad_index", [](auto& b) { write_at<float>(b, 30, read_at<float>(b, 30) + 2e-5f); }},
  };
  for (const auto& p : cases) {
    INFO("perturbed tensor: ", p.tensor);
    copy_golden(tmp.path, [&](dsa::safetensors_entry& e, std::vector<std::byte>& b) {
      if (e.name == p.tensor) p.apply(b);
    });
    const auto f = dsa::safetensors_file::open(tmp.path);
    const std::string group(dv::group_of(p.tensor));
    const auto r = dv::run_group(dsa::cpu_backend{2}, f, group);
    INFO(describe(r));
    CHECK_FALSE(r.pass());
    for (const auto& c : r.comparisons) {
      if (!c.pass) CHECK(c.tensor == p.tensor);
    }
  }
}

TEST_CASE("a file lacking what a group needs is an input_error naming the group and tensor") {
  const temp_file tmp("dsa_test_primitive_cases");
  const auto run = [&](const std::string& group) {
    const auto f = dsa::safetensors_file::open(tmp.path);
    (void)dv::run_group(dsa::cpu_backend{1}, f, group);
  };
  copy_golden(tmp.path, [](auto& e, auto&) {
    if (e.name == "hadamard.x") e.name.clear();
  });
  CHECK_THROWS_WITH_AS(run("hadamard"),
                       doctest::Contains("group 'hadamard': tensor 'hadamard.x' is missing; expected BF16 of rank 2"),
                       dv::input_error);
  copy_golden(tmp.path, [](auto& e, auto&) {
    if (e.name == "sparse_mla.lse") e.name.clear();
  });
  CHECK_THROWS_WITH_AS(run("sparse_mla"), doctest::Contains("tensor 'sparse_mla.lse' is missing"), dv::input_error);
  copy_golden(tmp.path, [](auto& e, auto&) {
    if (e.name.starts_with("act_quant.") && e.name != "act_quant.x") e.name.clear();
  });
  CHECK_THROWS_WITH_AS(run("act_quant"), doctest::Contains("group 'act_quant': no expected outputs"), dv::input_error);
  // Wrong dtype: hadamard.x re-labelled as I16 (same byte size).
  copy_golden(tmp.path, [](auto& e, auto&) {
    if (e.name == "hadamard.x") e.type = dsa::dtype::i16;
  });
  CHECK_THROWS_WITH_AS(run("hadamard"),
                       doctest::Contains("tensor 'hadamard.x' = I16 [64, 128]; expected BF16 of rank 2"),
                       dv::input_error);
  // Expected output of the wrong shape.
  copy_golden(tmp.path, [](auto& e, auto&) {
    if (e.name == "topk.indices") e.shape = {64, 12};
  });
  CHECK_THROWS_WITH_AS(run("topk"), doctest::Contains("tensor 'topk.indices' shape = [64, 12]; expected [12, 64]"),
                       dv::input_error);
  // A value the op's front-end rejects comes back naming the group and the op.
  copy_golden(tmp.path, [](auto& e, auto& b) {
    if (e.name == "topk.ends") write_at<std::int32_t>(b, 0, 701);
  });
  CHECK_THROWS_WITH_AS(run("topk"), doctest::Contains("group 'topk': dsa::topk_indices: ranges(0, 1) = 701"),
                       dv::input_error);
}
