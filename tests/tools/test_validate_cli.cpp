// The dsa_validate command line: exit codes (0 pass, 1 failed comparison, 2 usage / I/O /
// malformed input, 77 --backend cuda without a device) and messages, run as a child process on
// good, perturbed and broken files. DSA_VALIDATE_CUDA: dsa_validate was built with the CUDA
// executor (DSA_ENABLE_CUDA=ON); its device cases run only where dsa::has_device().
#include <doctest/doctest.h>

#ifndef DSA_VALIDATE_EXE

TEST_CASE("dsa_validate command line (skipped: built without DSA_BUILD_TOOLS)") {
  MESSAGE("dsa_validate is not built in this configuration; its command-line tests are skipped");
}

#else

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "dsa/model/safetensors.hpp"
#include "support/checkpoint_edit.hpp"
#include "support/child_process.hpp"

#ifdef DSA_VALIDATE_CUDA
#include "dsa/cuda/backend.hpp"
#endif

using dsa::index_t;

namespace fs = std::filesystem;

namespace {

const fs::path golden_path = fs::path(DSA_TEST_DATA_DIR) / "primitives.safetensors";

struct temp_dir : dsa_test::temp_dir {
  temp_dir() : dsa_test::temp_dir("dsa_test_validate_cli") {}
  fs::path operator/(const std::string& name) const { return path / name; }
};

std::string read_file(const fs::path& p) { return dsa_test::read_text(p); }
void write_file(const fs::path& p, const std::string& bytes) { dsa_test::write_text(p, bytes); }

using dsa_test::shell_quote;

// dsa_validate with `args`, its output through a file in `dir`.
dsa_test::tool_result run_tool(const temp_dir& dir, const std::vector<std::string>& args) {
  return dsa_test::run_tool(DSA_VALIDATE_EXE, args, dir.path);
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// `s` as dsa_validate echoes a path or argument it did not write: in single quotes (dsa::quoted;
// the test's strings need no escapes).
std::string q(const std::string& s) { return "'" + s + "'"; }

}  // namespace

TEST_CASE("dsa_validate passes the golden file and exits 0") {
  temp_dir dir;
  const auto r = run_tool(dir, {golden_path.string(), "--threads", "2"});
  CAPTURE(r.output);
  CHECK(r.exit_code == 0);
  CHECK(contains(r.output, "backend cpu (2 threads)"));
  for (const char* g : {"hadamard ", "hadamard_f32 ", "act_quant ", "weight_quant ", "indexer ", "topk ", "sparse_mla ",
                        "kl_dense ", "kl_sparse "}) {
    CHECK_MESSAGE(contains(r.output, std::string(g)), g);
  }
  CHECK(contains(r.output, "9 groups: 9 passed, 0 failed"));
  CHECK_FALSE(contains(r.output, "FAIL"));
}

TEST_CASE("dsa_validate --dump writes every output under the expected names, and the dump validates") {
  temp_dir dir;
  const fs::path dump = dir / "dump.safetensors";
  const auto r = run_tool(dir, {golden_path.string(), "--dump", dump.string()});
  CAPTURE(r.output);
  REQUIRE(r.exit_code == 0);
  const auto golden = dsa::safetensors_file::open(golden_path);
  const auto d = dsa::safetensors_file::open(dump);
  CHECK(d.tensors().size() == golden.tensors().size());
  for (const dsa::tensor_info& t : golden.tensors()) {
    CAPTURE(t.name);
    REQUIRE(d.contains(t.name));
    CHECK(d.at(t.name).description() == t.description());
  }
  // Bit-exact groups reproduce the expected bytes exactly.
  for (const char* name :
       {"topk.indices", "weight_quant.q", "weight_quant.s", "act_quant.ue8m0.q", "act_quant.fp32.s"}) {
    const auto a = golden.bytes(name), b = d.bytes(name);
    CHECK_MESSAGE(std::equal(a.begin(), a.end(), b.begin(), b.end()), name);
  }
  CHECK(d.metadata().at("dsa_validate.backend") == "cpu");
  CHECK(d.metadata().at("seed") == "7");
  const auto again = run_tool(dir, {dump.string()});
  CAPTURE(again.output);
  CHECK(again.exit_code == 0);
}

TEST_CASE("dsa_validate exits 1 when a comparison fails") {
  temp_dir dir;
  const auto golden = dsa::safetensors_file::open(golden_path);
  std::vector<dsa::safetensors_entry> entries;
  std::vector<std::int32_t> indices;
  for (const dsa::tensor_info& t : golden.tensors()) {
    if (!t.name.starts_with("topk.")) continue;
    dsa::safetensors_entry e{t.name, t.type, t.shape, golden.bytes(t)};
    if (t.name == "topk.indices") {
      const auto v = golden.view<std::int32_t, 2>(t);
      indices.assign(v.data_handle(), v.data_handle() + v.size());
      indices[3] = indices[3] == 0 ? 1 : 0;
      e.data = std::as_bytes(std::span<const std::int32_t>(indices));
    }
    entries.push_back(e);
  }
  const fs::path p = dir / "bad_topk.safetensors";
  dsa::write_safetensors(p, entries);
  const auto r = run_tool(dir, {p.string()});
  CAPTURE(r.output);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, "topk         FAIL  topk.indices: mismatches 1 EXCEEDS (tol 0)"));
  CHECK(contains(r.output, "1 group: 0 passed, 1 failed"));
}

TEST_CASE("dsa_validate exits 2 with a clear message on missing, truncated and malformed files") {
  temp_dir dir;
  SUBCASE("missing file") {
    const auto r = run_tool(dir, {(dir / "nope.safetensors").string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "nope.safetensors': cannot open: No such file or directory"));  // the path quoted
  }
  SUBCASE("truncated copy") {
    const std::string full = read_file(golden_path);
    const fs::path p = dir / "truncated.safetensors";
    write_file(p, full.substr(0, full.size() / 2));
    const auto r = run_tool(dir, {p.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "the file is truncated or the header is wrong"));
  }
  SUBCASE("malformed header") {
    const std::string json = "{\"hadamard.x\": {\"dtype\": \"BF16\", \"shape\": [64, 128]";
    std::string bytes(8, '\0');
    bytes[0] = static_cast<char>(json.size());
    const fs::path p = dir / "malformed.safetensors";
    write_file(p, bytes + json);
    const auto r = run_tool(dir, {p.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "header is not valid JSON"));
  }
  SUBCASE("no known group") {
    const std::vector<float> v = {1, 2, 3};
    const fs::path p = dir / "other.safetensors";
    dsa::write_safetensors(p, std::vector<dsa::safetensors_entry>{
                                  {"foo.x", dsa::dtype::f32, {3}, std::as_bytes(std::span<const float>(v))}});
    const auto r = run_tool(dir, {p.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "ignoring tensors of unknown group 'foo'"));
    CHECK(contains(r.output, "no known case group"));
  }
  SUBCASE("a group missing an input") {
    const auto golden = dsa::safetensors_file::open(golden_path);
    std::vector<dsa::safetensors_entry> entries;
    for (const dsa::tensor_info& t : golden.tensors()) {
      if (t.name.starts_with("hadamard.") && t.name != "hadamard.x")
        entries.push_back({t.name, t.type, t.shape, golden.bytes(t)});
      if (t.name.starts_with("topk.")) entries.push_back({t.name, t.type, t.shape, golden.bytes(t)});
    }
    const fs::path p = dir / "no_input.safetensors";
    dsa::write_safetensors(p, entries);
    const auto r = run_tool(dir, {p.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "hadamard     ERROR"));
    CHECK(contains(r.output, "tensor 'hadamard.x' is missing"));
    CHECK(contains(r.output, "topk         PASS"));  // the other groups still run
  }
}

TEST_CASE("dsa_validate usage errors exit 2") {
  temp_dir dir;
  const std::string g = golden_path.string();
  struct usage_case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const auto& [args, message] : std::vector<usage_case>{
           {{}, "no input file"},
           {{g, "--backend", "tpu"}, "--backend = 'tpu'; expected cpu or cuda"},
           {{g, "--backend"}, "--backend needs a value"},
           {{g, "--threads", "0"}, "--threads = '0'; expected an integer in [1, 4096]"},
           {{g, "--threads", "2x"}, "--threads = '2x'"},
           {{g, "--frobnicate"}, "unknown option '--frobnicate'"},
           {{g, "--backend", "cuda", "--threads", "2"}, "--threads = 2 with --backend cuda"},
           {{g, "--fp8-dot", "fast"}, "--fp8-dot = 'fast'; expected exact or fp32"},
           {{g, "--backend", "cuda", "--fp8-dot", "fp32"}, "--fp8-dot with --backend cuda"},
           {{g, "--cuda-linear", "magma"}, "--cuda-linear = 'magma'; expected cublas or simt"},
           {{g, "--backend", "cuda", "--cuda-linear", "simt"}, "--cuda-linear with a primitives file"},
           {{"--model", "m", "--cuda-linear", "cublas"}, "--cuda-linear with --backend cpu"},
           {{g, "--backend", "cuda", "--cuda-kernels", "turbo"}, "--cuda-kernels = 'turbo'; expected exact or fast"},
           {{g, "--backend", "cuda", "--cuda-kernels"}, "--cuda-kernels needs a value"},
           {{g, "--cuda-kernels", "exact"}, "--cuda-kernels with --backend cpu; it selects the CUDA backend's kernels"},
           {{"--model", "m", "--backend", "cpu", "--cuda-kernels", "fast"}, "--cuda-kernels with --backend cpu"},
           {{g, g}, "more than one input file (" + q(g) + ", " + q(g) + ")"},
           // argv text that could drive a terminal is escaped (issue 33, class 6)
           {{g, "--backend", "\x1b[2Jcpu"}, "--backend = '\\x1b[2Jcpu'; expected cpu or cuda"},
           {{"--\x1b]0;pwned\x07"}, "unknown option '--\\x1b]0;pwned\\x07'"},
       }) {
    const auto r = run_tool(dir, args);
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, message));
    CHECK(contains(r.output, "usage: dsa_validate"));
  }
  const auto help = run_tool(dir, {"--help"});
  CHECK(help.exit_code == 0);
  CHECK(contains(help.output, "usage: dsa_validate"));
}

// ---- --model DIR ------------------------------------------------------------------------------

namespace {

const fs::path tiny_dir = fs::path(DSA_TEST_DATA_DIR) / "tiny-dsv32";

// A model directory in `dir`: the tiny model's config and checkpoint, and `expected` as
// expected.safetensors.
fs::path model_copy(const temp_dir& dir, const std::string& name, const fs::path& expected) {
  const fs::path m = dir / name;
  fs::create_directories(m);
  fs::copy_file(tiny_dir / "config.json", m / "config.json");
  fs::copy_file(tiny_dir / "model.safetensors", m / "model.safetensors");
  if (!expected.empty()) fs::copy_file(expected, m / "expected.safetensors");
  return m;
}

// A model directory `name` in `dir` whose expected.safetensors is the golden one with some
// tensors' values replaced: `edit(t, values)` gets each T tensor's values and returns whether it
// changed them (same element count).
template <class T, class Edit>
fs::path model_with_expected(const temp_dir& dir, const std::string& name, Edit edit) {
  const auto golden = dsa::safetensors_file::open(tiny_dir / "expected.safetensors");
  std::vector<dsa::safetensors_entry> entries;
  std::vector<std::vector<T>> edited;
  edited.reserve(golden.tensors().size());  // the entries' spans must stay valid
  for (const dsa::tensor_info& t : golden.tensors()) {
    dsa::safetensors_entry e{t.name, t.type, t.shape, golden.bytes(t)};
    if (t.type == dsa::dtype_of<T>()) {
      const auto b = golden.bytes(t);
      std::vector<T> v(b.size() / sizeof(T));
      std::memcpy(v.data(), b.data(), b.size());
      if (edit(t, v)) {
        edited.push_back(std::move(v));
        e.data = std::as_bytes(std::span<const T>(edited.back()));
      }
    }
    entries.push_back(e);
  }
  const fs::path file = dir / (name + "_expected.safetensors");
  dsa::write_safetensors(file, entries, golden.metadata());
  return model_copy(dir, name, file);
}

}  // namespace

TEST_CASE("dsa_validate --model replays the golden tiny model: one line per check, exit 0") {
  // In both FP8 block-dot modes, with the same criteria (issue 13).
  for (const std::string mode : {"exact", "fp32"}) {
    CAPTURE(mode);
    temp_dir dir;
    const auto r = run_tool(dir, {"--model", tiny_dir.string(), "--threads", "2", "--fp8-dot", mode});
    CAPTURE(r.output);
    CHECK(r.exit_code == 0);
    CHECK(contains(r.output, "model " + q(tiny_dir.string()) + ", backend cpu (2 threads" +
                                 (mode == "fp32" ? ", fp32 FP8 block dots)" : ")")));
    for (int s = 0; s <= 8; ++s) {
      const std::string step = "step" + std::to_string(s) + ".logits";
      CHECK_MESSAGE(contains(r.output, step + std::string(20 - step.size(), ' ') + "PASS  cosine 0.99"), step);
    }
    CHECK(contains(r.output, "argmax              PASS  0 of 9 steps disagree (at most 1)"));
    for (int l = 0; l < 3; ++l) {
      const std::string layer = "step0.layer" + std::to_string(l) + ".topk";
      CHECK_MESSAGE(contains(r.output, layer + std::string(20 - layer.size(), ' ') + "PASS  mean top-k set agreement 0.99"),
                    layer);
    }
    CHECK(contains(r.output, "13 checks: 13 passed, 0 failed"));
    CHECK_FALSE(contains(r.output, "FAIL"));
  }
}

TEST_CASE("dsa_validate --model --dump writes the computed tensors under the expected names, and the dump validates") {
  temp_dir dir;
  const fs::path dump = dir / "dump.safetensors";
  const auto r = run_tool(dir, {"--model", tiny_dir.string(), "--dump", dump.string()});
  CAPTURE(r.output);
  REQUIRE(r.exit_code == 0);
  const auto golden = dsa::safetensors_file::open(tiny_dir / "expected.safetensors");
  const auto d = dsa::safetensors_file::open(dump);
  CHECK(d.tensors().size() == golden.tensors().size());
  for (const dsa::tensor_info& t : golden.tensors()) {
    CAPTURE(t.name);
    REQUIRE(d.contains(t.name));
    CHECK(d.at(t.name).description() == t.description());
  }
  for (const char* name : {"prompt", "generated"}) {
    const auto a = golden.bytes(name), b = d.bytes(name);
    CHECK_MESSAGE(std::equal(a.begin(), a.end(), b.begin(), b.end()), name);
  }
  // The computed logits are ours, not a copy of the expected ones.
  const auto a = golden.bytes("step0.logits"), b = d.bytes("step0.logits");
  CHECK_FALSE(std::equal(a.begin(), a.end(), b.begin(), b.end()));
  CHECK(d.metadata().at("dsa_validate.backend") == "cpu");
  CHECK(d.metadata().at("prompt_len") == "80");
  // The dump, as the expected file of the same model, reproduces itself exactly.
  const fs::path m = model_copy(dir, "self", dump);
  const auto again = run_tool(dir, {"--model", m.string(), "--threads", "2"});
  CAPTURE(again.output);
  CHECK(again.exit_code == 0);
  CHECK(contains(again.output, "step8.logits        PASS  cosine 1.000000"));
  CHECK(contains(again.output, "step0.layer2.topk   PASS  mean top-k set agreement 1.0000"));
}

TEST_CASE("dsa_validate --model exits 1 when a step's logits disagree") {
  temp_dir dir;
  const fs::path m = model_with_expected<float>(dir, "bad", [](const dsa::tensor_info& t, std::vector<float>& v) {
    if (t.name != "step3.logits") return false;
    for (float& x : v) x = -x;
    return true;
  });
  const auto r = run_tool(dir, {"--model", m.string(), "--threads", "2"});
  CAPTURE(r.output);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, "step3.logits        FAIL  cosine -0.99"));
  CHECK(contains(r.output, "step2.logits        PASS"));
  CHECK(contains(r.output, "argmax              PASS  1 of 9 steps disagree (at most 1)"));
  CHECK(contains(r.output, "13 checks: 12 passed, 1 failed"));
}

TEST_CASE("dsa_validate --model fails an expected file whose prefill top-k rows hold no valid position") {
  // All -1 (or only positions after the row) is no selection a prefill row can have: such rows
  // count as disagreement, so a file of them scores agreement 0 and fails every top-k check.
  temp_dir dir;
  int replaced = 0;
  const fs::path m = model_with_expected<std::int64_t>(
      dir, "no_topk", [&](const dsa::tensor_info& t, std::vector<std::int64_t>& v) {
        if (!t.name.starts_with("step0.layer") || !t.name.ends_with(".topk")) return false;
        std::fill(v.begin(), v.end(), -1);
        // Layer 1's row r names only position r + 1 (after the row): not a valid entry either.
        if (t.name == "step0.layer1.topk") {
          const index_t rows = t.shape[1], k = t.shape[2];
          for (index_t r = 0; r < rows; ++r) v[static_cast<std::size_t>(r * k)] = r + 1;
        }
        ++replaced;
        return true;
      });
  REQUIRE(replaced == 3);
  const auto r = run_tool(dir, {"--model", m.string(), "--threads", "2"});
  CAPTURE(r.output);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, "step0.layer0.topk   FAIL"));
  CHECK(contains(r.output, "step0.layer1.topk   FAIL"));
  CHECK(contains(r.output, "step0.layer2.topk   FAIL"));
  CHECK(contains(r.output, "expected rows hold no valid causal position (counted as disagreement)"));
}

TEST_CASE("dsa_validate --model exits 2 with a clear message on a bad directory") {
  temp_dir dir;
  SUBCASE("missing directory") {
    const fs::path m = dir / "no_such_model";
    const auto r = run_tool(dir, {"--model", m.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "dsa_validate: --model " + q(m.string()) + ": no such directory"));
  }
  SUBCASE("a file, not a directory") {
    const auto r = run_tool(dir, {"--model", golden_path.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, q(golden_path.string()) + ": not a directory"));
  }
  SUBCASE("no expected.safetensors") {
    const fs::path m = model_copy(dir, "no_expected", {});
    const auto r = run_tool(dir, {"--model", m.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "dsa_validate: --model " + q(m.string()) + ": no expected.safetensors in the directory"));
  }
  SUBCASE("no checkpoint") {
    const fs::path m = dir / "no_checkpoint";
    fs::create_directories(m);
    fs::copy_file(tiny_dir / "config.json", m / "config.json");
    fs::copy_file(tiny_dir / "expected.safetensors", m / "expected.safetensors");
    const auto r = run_tool(dir, {"--model", m.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "directory has neither model.safetensors.index.json nor model.safetensors"));
  }
  SUBCASE("expected.safetensors without the prompt") {
    const auto golden = dsa::safetensors_file::open(tiny_dir / "expected.safetensors");
    std::vector<dsa::safetensors_entry> entries;
    for (const dsa::tensor_info& t : golden.tensors()) {
      if (t.name != "prompt") entries.push_back({t.name, t.type, t.shape, golden.bytes(t)});
    }
    const fs::path e = dir / "no_prompt.safetensors";
    dsa::write_safetensors(e, entries);
    const fs::path m = model_copy(dir, "no_prompt", e);
    const auto r = run_tool(dir, {"--model", m.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "tensor 'prompt' is missing"));
  }
  SUBCASE("both a file and --model") {
    const auto r = run_tool(dir, {golden_path.string(), "--model", tiny_dir.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "both an input file"));
    CHECK(contains(r.output, "usage: dsa_validate"));
  }
  SUBCASE("--model without a value") {
    const auto r = run_tool(dir, {"--model"});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "--model needs a value"));
  }
}

// ---- --dump never destroys data ---------------------------------------------------------------
// (issue 14) The dump is written to a fresh, exclusively created temporary file beside OUT and
// renamed onto it; OUT may not be an input (same device and inode) or a directory.

namespace {

std::vector<std::string> names_in(const fs::path& d) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(d)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

// A sharded copy of the tiny model in `dir`/name: the checkpoint as shard-1.safetensors with a
// model.safetensors.index.json mapping every tensor to it.
fs::path sharded_model_copy(const temp_dir& dir, const std::string& name) {
  const fs::path m = dir / name;
  fs::create_directories(m);
  fs::copy_file(tiny_dir / "config.json", m / "config.json");
  fs::copy_file(tiny_dir / "expected.safetensors", m / "expected.safetensors");
  fs::copy_file(tiny_dir / "model.safetensors", m / "shard-1.safetensors");
  std::string index = "{\"metadata\": {}, \"weight_map\": {";
  const auto ckpt = dsa::safetensors_file::open(tiny_dir / "model.safetensors");
  bool first = true;
  for (const dsa::tensor_info& t : ckpt.tensors()) {
    index += (first ? "\"" : ", \"") + t.name + "\": \"shard-1.safetensors\"";
    first = false;
  }
  write_file(m / "model.safetensors.index.json", index + "}}");
  return m;
}

}  // namespace

TEST_CASE("dsa_validate --dump refuses to write over an input, and leaves it intact") {
  temp_dir dir;
  const fs::path in = dir / "in.safetensors";
  fs::copy_file(golden_path, in);
  const std::string before = read_file(in);
  const std::string refused = "dsa::validate: --dump = ";
  SUBCASE("OUT is the input, and OUT.tmp a symlink to it (the attack)") {
    fs::create_symlink(in, dir / "in.safetensors.tmp");
    const auto r = run_tool(dir, {in.string(), "--dump", in.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, refused + q(in.string()) + "; expected a file other than the inputs; it is the input " +
                                 q(in.string()) + ", which the dump would replace"));
    CHECK_FALSE(contains(r.output, "PASS"));  // refused before anything ran
    CHECK(fs::is_symlink(dir / "in.safetensors.tmp"));
  }
  SUBCASE("OUT is a symlink to the input") {
    fs::create_symlink(in, dir / "link.safetensors");
    const auto r = run_tool(dir, {in.string(), "--dump", (dir / "link.safetensors").string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "it is a symlink to the input " + q(in.string())));
    CHECK(fs::is_symlink(dir / "link.safetensors"));
  }
  SUBCASE("OUT is a hard link to the input") {
    fs::create_hard_link(in, dir / "hard.safetensors");
    const auto r = run_tool(dir, {in.string(), "--dump", (dir / "hard.safetensors").string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "it is the input " + q(in.string())));
  }
  SUBCASE("the input is OUT.tmp: the dump goes to OUT, the input is never touched") {
    const fs::path tmp_named = dir / "out.safetensors.tmp";
    fs::rename(in, tmp_named);
    const fs::path out = dir / "out.safetensors";
    const auto r = run_tool(dir, {tmp_named.string(), "--dump", out.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 0);
    CHECK(read_file(tmp_named) == before);
    CHECK(dsa::safetensors_file::open(out).tensors().size() == dsa::safetensors_file::open(golden_path).tensors().size());
    fs::rename(tmp_named, in);
  }
  CHECK(read_file(in) == before);
}

TEST_CASE("dsa_validate --model --dump refuses every file of the model directory") {
  temp_dir dir;
  const fs::path single = model_copy(dir, "single", tiny_dir / "expected.safetensors");
  const fs::path sharded = sharded_model_copy(dir, "sharded");
  for (const fs::path& target :
       {single / "expected.safetensors", single / "config.json", single / "model.safetensors",
        sharded / "shard-1.safetensors", sharded / "model.safetensors.index.json", sharded / "expected.safetensors"}) {
    CAPTURE(target.string());
    const fs::path m = target.parent_path();
    const std::string before = read_file(target);
    const auto r = run_tool(dir, {"--model", m.string(), "--dump", target.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output,
                   "dsa::validate: --dump = " + q(target.string()) + "; expected a file other than the inputs"));
    CHECK_FALSE(contains(r.output, "PASS"));
    CHECK(read_file(target) == before);
  }
  CHECK(names_in(sharded) == std::vector<std::string>{"config.json", "expected.safetensors",
                                                      "model.safetensors.index.json", "shard-1.safetensors"});
}

TEST_CASE("dsa_validate --dump through a planted OUT.tmp or OUT symlink leaves the victim intact") {
  temp_dir dir;
  const fs::path victim = dir / "victim.txt";
  write_file(victim, "precious data\n");
  const fs::path out_dir = dir / "out";
  fs::create_directories(out_dir);
  const fs::path out = out_dir / "dump.safetensors";
  SUBCASE("OUT.tmp is a symlink to the victim") {
    fs::create_symlink(victim, out_dir / "dump.safetensors.tmp");
    const auto r = run_tool(dir, {golden_path.string(), "--dump", out.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 0);
    CHECK(fs::is_symlink(out_dir / "dump.safetensors.tmp"));  // not ours: neither used nor removed
    CHECK(fs::is_regular_file(fs::symlink_status(out)));
  }
  SUBCASE("OUT is a symlink to the victim (not an input): the link is replaced, not written through") {
    fs::create_symlink(victim, out);
    const auto r = run_tool(dir, {golden_path.string(), "--dump", out.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 0);
    CHECK(fs::is_regular_file(fs::symlink_status(out)));
  }
  CHECK(read_file(victim) == "precious data\n");
  CHECK(dsa::safetensors_file::open(out).contains("topk.indices"));
}

TEST_CASE("dsa_validate --dump onto a directory or into a missing one: a clear error, not \"Success\"") {
  temp_dir dir;
  const fs::path d = dir / "existing_dir";
  fs::create_directories(d);
  write_file(d / "keep.txt", "x");
  SUBCASE("OUT is an existing directory") {
    const auto r = run_tool(dir, {golden_path.string(), "--dump", d.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "dsa::validate: --dump = " + q(d.string()) +
                                 "; expected the name of a file to write; it is an existing directory"));
    CHECK_FALSE(contains(r.output, "Success"));
  }
  SUBCASE("OUT is a symlink to a directory") {
    fs::create_directory_symlink(d, dir / "dir_link");
    const auto r = run_tool(dir, {golden_path.string(), "--dump", (dir / "dir_link").string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "it is an existing directory"));
    CHECK_FALSE(contains(r.output, "Success"));
  }
  SUBCASE("OUT in a directory that does not exist") {
    const fs::path out = dir / "no_such_dir" / "dump.safetensors";
    const auto r = run_tool(dir, {golden_path.string(), "--dump", out.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "dsa::validate: --dump = " + q(out.string()) +
                                 "; expected a file in an existing directory (" + q((dir / "no_such_dir").string()) +
                                 ": No such file or directory)"));
    CHECK_FALSE(contains(r.output, "Success"));
  }
  CHECK(names_in(d) == std::vector<std::string>{"keep.txt"});
}

TEST_CASE("dsa_validate --dump succeeds and leaves no temporary file behind, also over an earlier dump") {
  temp_dir dir;
  const fs::path out_dir = dir / "out";
  fs::create_directories(out_dir);
  const fs::path out = out_dir / "dump.safetensors";
  for (int run = 0; run < 2; ++run) {
    CAPTURE(run);
    const auto r = run_tool(dir, {golden_path.string(), "--dump", out.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 0);
    CHECK(contains(r.output, "wrote " + q(out.string())));
    CHECK(names_in(out_dir) == std::vector<std::string>{"dump.safetensors"});
    CHECK(dsa::safetensors_file::open(out).tensors().size() == dsa::safetensors_file::open(golden_path).tensors().size());
  }
}

TEST_CASE("write_safetensors: a fresh temporary file renamed into place, even over a file it reads from") {
  temp_dir dir;
  const std::vector<float> v = {1, 2, 3, 4};
  const std::vector<dsa::safetensors_entry> entries = {
      {"x", dsa::dtype::f32, {4}, std::as_bytes(std::span<const float>(v))}};
  SUBCASE("rewriting a file from its own mapping: the mapping stays valid, the file is complete") {
    const fs::path p = dir / "self.safetensors";
    fs::copy_file(golden_path, p);
    fs::create_symlink(p, dir / "self.safetensors.tmp");  // the old writer's fixed name
    {
      const auto f = dsa::safetensors_file::open(p);
      std::vector<dsa::safetensors_entry> same;
      for (const dsa::tensor_info& t : f.tensors()) same.push_back({t.name, t.type, t.shape, f.bytes(t)});
      dsa::write_safetensors(p, same, f.metadata());
      const auto golden = dsa::safetensors_file::open(golden_path);
      const auto a = golden.bytes("topk.indices"), b = f.bytes("topk.indices");  // still mapped: the old bytes
      CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
    }
    const auto g = dsa::safetensors_file::open(golden_path);
    const auto f = dsa::safetensors_file::open(p);  // complete: every tensor, the same bytes
    REQUIRE(f.tensors().size() == g.tensors().size());
    for (const dsa::tensor_info& t : g.tensors()) {
      const auto a = g.bytes(t), b = f.bytes(t.name);
      CHECK_MESSAGE(std::equal(a.begin(), a.end(), b.begin(), b.end()), t.name);
    }
    CHECK(names_in(dir.path) == std::vector<std::string>{"self.safetensors", "self.safetensors.tmp"});
  }
  SUBCASE("a directory is refused up front") {
    const fs::path d = dir / "a_dir";
    fs::create_directories(d);
    try {
      dsa::write_safetensors(d, entries);
      FAIL("no error");
    } catch (const dsa::error& e) {
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(contains(what, "dsa::safetensors: '" + d.string() + "': is a directory; expected the name of a file to write"));
    }
    CHECK(fs::is_empty(d));
  }
  SUBCASE("a missing directory: the reason, and nothing created") {
    const fs::path p = dir / "missing" / "x.safetensors";
    try {
      dsa::write_safetensors(p, entries);
      FAIL("no error");
    } catch (const dsa::error& e) {
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(contains(what, "cannot create a temporary file in '" + (dir / "missing").string() +
                               "': No such file or directory"));
    }
    CHECK(names_in(dir.path).empty());
  }
  SUBCASE("a planted symlink at OUT.tmp is neither followed nor removed") {
    const fs::path victim = dir / "victim.txt";
    write_file(victim, "victim");
    fs::create_symlink(victim, dir / "x.safetensors.tmp");
    dsa::write_safetensors(dir / "x.safetensors", entries);
    CHECK(read_file(victim) == "victim");
    CHECK(fs::is_symlink(dir / "x.safetensors.tmp"));
    CHECK(names_in(dir.path) == std::vector<std::string>{"victim.txt", "x.safetensors", "x.safetensors.tmp"});
    const auto f = dsa::safetensors_file::open(dir / "x.safetensors");
    CHECK(f.view<float, 1>("x").data_handle()[3] == 4.0f);
  }
}

// ---- --dump onto what is not a regular file (issue 33, class 3) ------------------------------------
// The dump is a new file renamed onto OUT, so an OUT that is a device or a FIFO would be replaced by
// a regular file: as root, `--dump /dev/null` replaced the system's /dev/null.

namespace {

bool is_char_device(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

}  // namespace

TEST_CASE("dsa_validate --dump refuses a FIFO, a symlink to /dev/null and /dev/null itself, and leaves them") {
  // One case, in this order, without subcases: /dev/null is tried only once the FIFO and the
  // symlink were refused, so that a regression fails the test before it could replace the
  // system's /dev/null (as root it could).
  REQUIRE(is_char_device("/dev/null"));
  temp_dir dir;
  const fs::path fifo = dir / "dump.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const fs::path link = dir / "null_link.safetensors";
  fs::create_symlink("/dev/null", link);
  struct target {
    fs::path path;
    std::vector<std::string> run;
    std::string what;
  };
  for (const target& t : {
           target{fifo, {golden_path.string()}, "a FIFO"},
           target{fifo, {"--model", tiny_dir.string()}, "a FIFO"},
           target{link, {golden_path.string()}, "a symlink to a character device"},
           target{"/dev/null", {golden_path.string()}, "a character device"},
           target{"/dev/null", {"--model", tiny_dir.string()}, "a character device"},
       }) {
    CAPTURE(t.path.string());
    std::vector<std::string> args = t.run;
    args.insert(args.end(), {"--dump", t.path.string()});
    const auto r = run_tool(dir, args);
    CAPTURE(r.output);
    REQUIRE(r.exit_code == 2);
    REQUIRE(contains(r.output, "dsa::validate: --dump = " + q(t.path.string()) +
                                   "; expected a regular file or a new name; it is " + t.what +
                                   ", which the dump would replace"));
    CHECK_FALSE(contains(r.output, "PASS"));  // refused before anything ran
    REQUIRE(is_char_device("/dev/null"));
  }
  struct stat st {};
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK(fs::is_symlink(link));
  CHECK(fs::read_symlink(link) == "/dev/null");
  CHECK(names_in(dir.path) == std::vector<std::string>{"dump.fifo", "null_link.safetensors", "tool_output.txt"});
}

TEST_CASE("write_safetensors refuses a target that is not a regular file, before writing and leaves it") {
  // The library's own check (dsa_validate's is in front of it): nothing is created beside the
  // target, and the target is what it was.
  REQUIRE(is_char_device("/dev/null"));
  temp_dir dir;
  const std::vector<float> v = {1, 2, 3, 4};
  const std::vector<dsa::safetensors_entry> entries = {
      {"x", dsa::dtype::f32, {4}, std::as_bytes(std::span<const float>(v))}};
  const fs::path fifo = dir / "x.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const fs::path link = dir / "null_link.safetensors";
  fs::create_symlink("/dev/null", link);
  for (const auto& [p, what] : std::vector<std::pair<fs::path, std::string>>{
           {fifo, "a FIFO"}, {link, "a symlink to a character device"}, {"/dev/null", "a character device"}}) {
    CAPTURE(p.string());
    try {
      dsa::write_safetensors(p, entries);
      FAIL("no error");
    } catch (const dsa::error& e) {
      const std::string m = e.what();
      CAPTURE(m);
      CHECK(contains(m, "dsa::safetensors: "));
      CHECK(contains(m, p.string()));
      CHECK(contains(m, "is " + what + "; expected a regular file or a new name"));
    }
    REQUIRE(is_char_device("/dev/null"));
  }
  struct stat st {};
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK(fs::read_symlink(link) == "/dev/null");
  CHECK(names_in(dir.path) == std::vector<std::string>{"null_link.safetensors", "x.fifo"});
  // A symlink to a regular file and a dangling one are still replaced (the link, not its target).
  write_file(dir / "victim.txt", "precious");
  fs::create_symlink(dir / "victim.txt", dir / "to_file.safetensors");
  fs::create_symlink(dir / "nowhere", dir / "dangling.safetensors");
  dsa::write_safetensors(dir / "to_file.safetensors", entries);
  dsa::write_safetensors(dir / "dangling.safetensors", entries);
  CHECK(read_file(dir / "victim.txt") == "precious");
  CHECK(fs::is_regular_file(fs::symlink_status(dir / "to_file.safetensors")));
  CHECK(fs::is_regular_file(fs::symlink_status(dir / "dangling.safetensors")));
}

// ---- groups that compare nothing (issue 33, class 8) -----------------------------------------------

namespace {

// A golden file of several groups whose tensors all have a zero extent (so the file holds no data
// at all) and, if `with_topk`, the golden topk group besides.
fs::path empty_groups_file(const temp_dir& dir, bool with_topk) {
  const std::int32_t k = 4;
  const float zero = 0.0f, one = 1.0f;
  std::vector<dsa::safetensors_entry> e = {
      {"hadamard.x", dsa::dtype::bf16, {0, 128}, {}},
      {"hadamard.y", dsa::dtype::bf16, {0, 128}, {}},
      {"act_quant.x", dsa::dtype::bf16, {0, 128}, {}},
      {"act_quant.ue8m0.q", dsa::dtype::f8_e4m3, {0, 128}, {}},
      {"act_quant.ue8m0.s", dsa::dtype::f32, {0, 1}, {}},
      {"weight_quant.w", dsa::dtype::f32, {0, 0}, {}},
      {"weight_quant.q", dsa::dtype::f8_e4m3, {0, 0}, {}},
      {"weight_quant.s", dsa::dtype::f32, {0, 0}, {}},
      {"sparse_mla.q", dsa::dtype::bf16, {0, 16, 576}, {}},
      {"sparse_mla.kv", dsa::dtype::bf16, {0, 576}, {}},
      {"sparse_mla.indices", dsa::dtype::i32, {0, 64}, {}},
      {"sparse_mla.scale", dsa::dtype::f32, {1}, std::as_bytes(std::span(&one, 1))},
      {"sparse_mla.out", dsa::dtype::f32, {0, 16, 512}, {}},
      {"sparse_mla.lse", dsa::dtype::f32, {0, 16}, {}},
      // The loss of no rows is compared (0 = 0), the empty gradient is not: still a FAIL.
      {"kl_dense.attn", dsa::dtype::f32, {0, 2, 8}, {}},
      {"kl_dense.index", dsa::dtype::f32, {0, 8}, {}},
      {"kl_dense.loss", dsa::dtype::f32, {1}, std::as_bytes(std::span(&zero, 1))},
      {"kl_dense.grad_index", dsa::dtype::f32, {0, 8}, {}},
  };
  if (!with_topk) {
    e.push_back({"topk.score", dsa::dtype::f32, {0, 8}, {}});
    e.push_back({"topk.ends", dsa::dtype::i32, {0}, {}});
    e.push_back({"topk.k", dsa::dtype::i32, {1}, std::as_bytes(std::span(&k, 1))});
    e.push_back({"topk.indices", dsa::dtype::i32, {0, 4}, {}});
  }
  const auto golden = dsa::safetensors_file::open(golden_path);
  if (with_topk) {
    for (const dsa::tensor_info& t : golden.tensors()) {
      if (t.name.starts_with("topk.")) e.push_back({t.name, t.type, t.shape, golden.bytes(t)});
    }
  }
  const fs::path p = dir / (with_topk ? "empty_and_topk.safetensors" : "empty.safetensors");
  dsa::write_safetensors(p, e);
  return p;
}

}  // namespace

TEST_CASE("dsa_validate fails a group whose expected tensors are empty: it compares nothing") {
  temp_dir dir;
  SUBCASE("every group empty") {
    const auto r = run_tool(dir, {empty_groups_file(dir, false).string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 1);
    for (const char* line : {"hadamard     FAIL  hadamard.y: max bf16 ulp 0 (tol 1), inexact fraction 0 (tol 0.005), "
                             "no elements to compare (an empty tensor; expected at least 1)",
                             "act_quant    FAIL  ", "weight_quant FAIL  ", "topk         FAIL  ", "sparse_mla   FAIL  ",
                             "kl_dense     FAIL  kl_dense.loss: rel err 0 (tol 0.0001); kl_dense.grad_index: max abs "
                             "err 0 (tol 1e-05), non-finite mismatches 0 (tol 0), no elements to compare"}) {
      CHECK_MESSAGE(contains(r.output, line), line);
    }
    CHECK(contains(r.output,
                   "weight_quant FAIL  weight_quant.q: mismatches 0 (tol 0), no elements to compare (an empty tensor; "
                   "expected at least 1); weight_quant.s: mismatches 0 (tol 0), no elements to compare"));
    CHECK(contains(r.output,
                   "sparse_mla.lse: max abs err 0 (tol 0.0001), non-finite mismatches 0 (tol 0), no elements"));
    CHECK(contains(r.output, "6 groups: 0 passed, 6 failed"));
    CHECK_FALSE(contains(r.output, "PASS"));
  }
  SUBCASE("an empty group beside a real one: the real one passes, the file fails") {
    const auto r = run_tool(dir, {empty_groups_file(dir, true).string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 1);
    CHECK(contains(r.output, "topk         PASS  "));
    CHECK(contains(r.output, "6 groups: 1 passed, 5 failed"));
  }
}

TEST_CASE("dsa_validate refuses an expected tensor whose shape no array holds, as dsa.validate does") {
  // kl_dense with no query rows and 2^62 keys costs the file nothing; its grad_index [0, 2^62]
  // F32 would be 2^64 bytes were it not empty. It passed here while dsa.validate raised NumPy's
  // ValueError making the array of that shape (issue 33, class 7); now both report it malformed.
  temp_dir dir;
  const float zero = 0.0f;
  constexpr index_t n = index_t{1} << 62;
  const fs::path p = dir / "huge_empty.safetensors";
  dsa::write_safetensors(p, std::vector<dsa::safetensors_entry>{
                                {"kl_dense.attn", dsa::dtype::f32, {0, 1, n}, {}},
                                {"kl_dense.index", dsa::dtype::f32, {0, n}, {}},
                                {"kl_dense.loss", dsa::dtype::f32, {1}, std::as_bytes(std::span(&zero, 1))},
                                {"kl_dense.grad_index", dsa::dtype::f32, {0, n}, {}},
                            });
  const auto r = run_tool(dir, {p.string()});
  CAPTURE(r.output);
  CHECK(r.exit_code == 2);
  CHECK(contains(r.output, "kl_dense     ERROR dsa_validate: " + q(p.string()) +
                               ": group 'kl_dense': tensor 'kl_dense.grad_index' shape = [0, 4611686018427387904]; "
                               "expected extents whose product (zero extents aside) times 4 bytes is at most 2^63 - 1 "
                               "bytes"));
}

// ---- what dsa_validate echoes (issue 33, class 6) --------------------------------------------------

TEST_CASE("dsa_validate echoes paths from the command line quoted, control characters escaped") {
  temp_dir dir;
  const std::string evil = "a\x1b[2J\xe2\x80\xae" "b";  // ESC [2J (clear screen), U+202E (right-to-left override)
  const std::string shown = "a\\x1b[2J\\u202eb";
  const fs::path in = dir / (evil + ".safetensors");
  fs::copy_file(golden_path, in);
  SUBCASE("the report's header and the dump") {
    const fs::path out = dir / (evil + ".dump");
    const auto r = run_tool(dir, {in.string(), "--dump", out.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 0);
    CHECK(contains(r.output, ": " + q((dir / (shown + ".safetensors")).string()) + ", backend cpu"));
    CHECK(contains(r.output, "wrote " + q((dir / (shown + ".dump")).string())));
    CHECK_FALSE(contains(r.output, "\x1b"));
    CHECK_FALSE(contains(r.output, "\xe2\x80\xae"));
  }
  SUBCASE("a group's input error") {
    const auto golden = dsa::safetensors_file::open(golden_path);
    std::vector<dsa::safetensors_entry> entries;
    for (const dsa::tensor_info& t : golden.tensors()) {
      if (t.name == "hadamard.y") entries.push_back({t.name, t.type, t.shape, golden.bytes(t)});
    }
    dsa::write_safetensors(in, entries);
    const auto r = run_tool(dir, {in.string()});
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "hadamard     ERROR dsa_validate: " + q((dir / (shown + ".safetensors")).string()) +
                                 ": group 'hadamard': tensor 'hadamard.x' is missing"));
    CHECK_FALSE(contains(r.output, "\x1b"));
  }
  SUBCASE("--model and --dump errors") {
    const auto m = run_tool(dir, {"--model", (dir / evil).string()});
    CAPTURE(m.output);
    CHECK(m.exit_code == 2);
    CHECK(contains(m.output, "dsa_validate: --model " + q((dir / shown).string()) + ": no such directory"));
    const auto d = run_tool(dir, {golden_path.string(), "--dump", (dir / evil / "x").string()});
    CAPTURE(d.output);
    CHECK(d.exit_code == 2);
    CHECK(contains(d.output, "dsa::validate: --dump = " + q((dir / shown / "x").string()) +
                                 "; expected a file in an existing directory (" + q((dir / shown).string())));
    CHECK_FALSE(contains(m.output + d.output, "\x1b"));
  }
}

// ---- --backend cuda ------------------------------------------------------------------------------

#ifndef DSA_VALIDATE_CUDA

TEST_CASE("dsa_validate --model fails a model whose logits go non-finite, naming where (exit 1, issue 33)") {
  // The golden directory with a finite but huge q_b_proj block scale: layer 1's attention output
  // overflows, the logits go NaN, and the replay must say so instead of comparing NaN.
  dsa_test::temp_dir model("dsa_test_validate_nonfinite");
  dsa_test::checkpoint_tensors t;
  const float huge = 3.0e38f;
  std::vector<std::byte> b(4);
  std::memcpy(b.data(), &huge, 4);
  t.fill("model.layers.1.self_attn.q_b_proj.weight_scale_inv", b);
  dsa_test::write_checkpoint(model.path, t);
  fs::copy_file(dsa_test::tiny_dir / "expected.safetensors", model.path / "expected.safetensors");
  temp_dir dir;
  const auto r = run_tool(dir, {"--model", model.path.string(), "--threads", "2"});
  CAPTURE(r.output);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, "FAIL  dsa::model::transformer::forward: logits = "));
  CHECK(contains(r.output, "first stopped being finite in layer 1's attention output at position 0"));
}

TEST_CASE("dsa_validate --backend cuda in a build without CUDA says the backend is not available (exit 2)") {
  temp_dir dir;
  for (const auto& args : std::vector<std::vector<std::string>>{{golden_path.string(), "--backend", "cuda"},
                                                               {"--model", tiny_dir.string(), "--backend", "cuda"}}) {
    const auto r = run_tool(dir, args);
    CAPTURE(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "the CUDA backend is not available in this build"));
    CHECK(contains(r.output, "DSA_ENABLE_CUDA=ON"));
  }
}

#else

TEST_CASE("dsa_validate --backend cuda without a device exits 77 before reading anything") {
  if (dsa::has_device()) {
    MESSAGE("a CUDA device is present: the no-device path is not exercised");
    return;
  }
  temp_dir dir;
  for (const auto& args : std::vector<std::vector<std::string>>{
           {golden_path.string(), "--backend", "cuda"},
           {"--model", tiny_dir.string(), "--backend", "cuda"},
           // The device is checked first: a machine without one skips, whatever the file.
           {(dir / "nope.safetensors").string(), "--backend", "cuda"}}) {
    const auto r = run_tool(dir, args);
    CAPTURE(r.output);
    CHECK(r.exit_code == 77);
    CHECK(contains(r.output, "dsa_validate: --backend cuda: no CUDA device (dsa::device_count() == 0); nothing was run"));
    CHECK_FALSE(contains(r.output, "PASS"));
  }
}

TEST_CASE("dsa_validate --backend cuda passes the golden file, dumps bit-exact groups, and fails a perturbed one") {
  if (!dsa::has_device()) {
    MESSAGE("SKIPPED: no CUDA device (dsa::device_count() == 0)");
    return;
  }
  temp_dir dir;
  const fs::path dump = dir / "dump.safetensors";
  const auto r = run_tool(dir, {golden_path.string(), "--backend", "cuda", "--dump", dump.string()});
  CAPTURE(r.output);
  CHECK(r.exit_code == 0);
  CHECK(contains(r.output, "backend cuda (device "));
  CHECK(contains(r.output, "), fast kernels"));
  CHECK(contains(r.output, "9 groups: 9 passed, 0 failed"));
  CHECK_FALSE(contains(r.output, "FAIL"));
  // The exact kernels and the fast ones named: the same groups pass.
  for (const char* kernels : {"exact", "fast"}) {
    const auto k = run_tool(dir, {golden_path.string(), "--backend", "cuda", "--cuda-kernels", kernels});
    CAPTURE(k.output);
    CHECK(k.exit_code == 0);
    CHECK(contains(k.output, std::string("), ") + kernels + " kernels"));
    CHECK(contains(k.output, "9 groups: 9 passed, 0 failed"));
  }
  const auto golden = dsa::safetensors_file::open(golden_path);
  const auto d = dsa::safetensors_file::open(dump);
  CHECK(d.metadata().at("dsa_validate.backend") == "cuda");
  for (const char* name :
       {"topk.indices", "weight_quant.q", "weight_quant.s", "act_quant.ue8m0.q", "act_quant.fp32.s"}) {
    const auto a = golden.bytes(name), b = d.bytes(name);
    CHECK_MESSAGE(std::equal(a.begin(), a.end(), b.begin(), b.end()), name);
  }

  // One wrong expected index: the CUDA top-k disagrees with it, exit 1.
  std::vector<dsa::safetensors_entry> entries;
  std::vector<std::int32_t> indices;
  for (const dsa::tensor_info& t : golden.tensors()) {
    if (!t.name.starts_with("topk.")) continue;
    dsa::safetensors_entry e{t.name, t.type, t.shape, golden.bytes(t)};
    if (t.name == "topk.indices") {
      const auto v = golden.view<std::int32_t, 2>(t);
      indices.assign(v.data_handle(), v.data_handle() + v.size());
      indices[3] = indices[3] == 0 ? 1 : 0;
      e.data = std::as_bytes(std::span<const std::int32_t>(indices));
    }
    entries.push_back(e);
  }
  const fs::path bad = dir / "bad_topk.safetensors";
  dsa::write_safetensors(bad, entries);
  const auto f = run_tool(dir, {bad.string(), "--backend", "cuda"});
  CAPTURE(f.output);
  CHECK(f.exit_code == 1);
  CHECK(contains(f.output, "topk         FAIL  topk.indices: mismatches 1 EXCEEDS (tol 0)"));
}

TEST_CASE("dsa_validate --model --backend cuda replays the golden tiny model") {
  if (!dsa::has_device()) {
    MESSAGE("SKIPPED: no CUDA device (dsa::device_count() == 0)");
    return;
  }
  temp_dir dir;
  // The default (cuBLAS) and dsa's SIMT kernel for dsa::linear, the fast and the exact kernels of
  // the indexer and sparse MLA attention: the same golden criteria.
  for (const std::vector<std::string>& linear : std::vector<std::vector<std::string>>{
           {}, {"--cuda-linear", "cublas"}, {"--cuda-linear", "simt"}, {"--cuda-kernels", "exact"},
           {"--cuda-kernels", "fast", "--cuda-linear", "simt"}}) {
    std::vector<std::string> args{"--model", tiny_dir.string(), "--backend", "cuda"};
    args.insert(args.end(), linear.begin(), linear.end());
    const auto r = run_tool(dir, args);
    CAPTURE(r.output);
    CHECK(r.exit_code == 0);
    CHECK(contains(r.output, "model " + q(tiny_dir.string()) + ", backend cuda (device "));
    CHECK(contains(r.output, "13 checks: 13 passed, 0 failed"));
  }
}

#endif

#endif
