// The dsa_run command line on hostile input: a checkpoint whose finite weights overflow at run
// time exits 3 naming where the values first stopped being finite (issue 33, class 1), and
// argument text is echoed quoted and escaped (class 6).
#include <doctest/doctest.h>

#ifndef DSA_RUN_EXE

TEST_CASE("dsa_run command line (skipped: built without DSA_BUILD_TOOLS)") {
  MESSAGE("dsa_run is not built in this configuration; its command-line tests are skipped");
}

#else

#include <cstring>
#include <string>
#include <vector>

#include "dsa/core/types.hpp"
#ifdef DSA_RUN_CUDA
#include "dsa/cuda/backend.hpp"
#endif
#include "support/checkpoint_edit.hpp"
#include "support/child_process.hpp"

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

dsa_test::tool_result run_dsa_run(const dsa_test::temp_dir& dir, std::vector<std::string> args) {
  return dsa_test::run_tool(DSA_RUN_EXE, args, dir.path);
}

std::vector<std::byte> f32_bytes(float v) {
  std::vector<std::byte> out(4);
  std::memcpy(out.data(), &v, 4);
  return out;
}

}  // namespace

TEST_CASE("dsa_run: non-finite logits stop the run with exit 3 and the layer where they began") {
  dsa_test::temp_dir dir("dsa_test_run_cli");
  dsa_test::checkpoint_tensors t;
  t.fill("model.layers.1.self_attn.q_b_proj.weight_scale_inv", f32_bytes(3.0e38f));
  dsa_test::write_checkpoint(dir.path, t);
  for (const char* mode : {"exact", "fp32"}) {
    CAPTURE(mode);
    const auto r = run_dsa_run(dir, {"--model", dir.path.string(), "--prompt-ids", "5 17 3 99", "--max-new-tokens",
                                     "4", "--threads", "2", "--fp8-dot", mode, "--quiet"});
    CAPTURE(r.output);
    CHECK(r.exit_code == 3);
    CHECK(contains(r.output, "dsa_run: dsa::model::transformer::forward: logits = "));
    CHECK(contains(r.output, "first stopped being finite in layer 1's attention output at position 0"));
    CHECK_FALSE(contains(r.output, "generated ids:"));
  }
}

TEST_CASE("dsa_run: a non-finite value that never reached the logits is a warning and exit 3") {
  // The indexer's weights_proj at +-3e38: the index scores go NaN, top-k still selects (NaN ranks
  // first), the attention and the logits stay finite.
  dsa_test::temp_dir dir("dsa_test_run_cli");
  dsa_test::checkpoint_tensors t;
  const std::string name = "model.layers.0.self_attn.indexer.weights_proj.weight";
  const dsa::safetensors_entry& e = *t.find(name);
  std::vector<std::byte> huge;
  for (dsa::index_t i = 0; i < e.shape[0] * e.shape[1]; ++i) {
    const dsa::bf16 b(((i / e.shape[1]) % 2 ? -1.0f : 1.0f) * 3.0e38f);
    huge.push_back(static_cast<std::byte>(b.bits & 0xFF));
    huge.push_back(static_cast<std::byte>(b.bits >> 8));
  }
  t.patch(name, 0, huge);
  dsa_test::write_checkpoint(dir.path, t);
  const auto r = run_dsa_run(dir, {"--model", dir.path.string(), "--prompt-ids", "5 17 3 99", "--max-new-tokens", "3",
                                   "--threads", "2", "--quiet"});
  CAPTURE(r.output);
  CHECK(r.exit_code == 3);
  CHECK(contains(r.output, "generated ids:"));
  CHECK(contains(r.output, "dsa_run: warning: the model's values stopped being finite in layer 0's index scores at "
                           "position 0; the logits stayed finite"));
}

TEST_CASE("dsa_run: the intact checkpoint exits 0 without a warning") {
  dsa_test::temp_dir dir("dsa_test_run_cli");
  const auto r = run_dsa_run(dir, {"--model", dsa_test::tiny_dir.string(), "--prompt-ids", "5 17 3 99",
                                   "--max-new-tokens", "3", "--threads", "2", "--quiet"});
  CAPTURE(r.output);
  CHECK(r.exit_code == 0);
  CHECK_FALSE(contains(r.output, "warning"));
}

TEST_CASE("dsa_run: argument text is echoed quoted, escaped and bounded") {
  dsa_test::temp_dir dir("dsa_test_run_cli");
  const std::string model = dsa_test::tiny_dir.string();
  // ESC, BEL and a C1 CSI in --prompt-ids; an unknown option with ESC in it; a long bad id.
  auto r = run_dsa_run(dir, {"--model", model, "--prompt-ids", "1 2\x1b[2J\x07", "--max-new-tokens", "1"});
  CAPTURE(r.output);
  CHECK(r.exit_code == 2);
  CHECK(contains(r.output, "--prompt-ids = '2\\x1b[2J\\x07'; expected an integer"));
  r = run_dsa_run(dir, {"--model", model, "--prompt-ids", "1 \xc2\x9b" "31m"});
  CHECK(contains(r.output, "--prompt-ids = '\\u009b31m'"));
  r = run_dsa_run(dir, {"--model", model, "--prompt-ids", "1", "--bogus\x1b]0;owned\x07", "x"});
  CHECK(contains(r.output, "unknown option '--bogus\\x1b]0;owned\\x07'"));
  r = run_dsa_run(dir, {"--model", model, "--prompt-ids", std::string(100000, '9')});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.output, "... (100000 bytes in all); expected an integer"));
  CHECK(r.output.size() < 4000);
  for (const char c : r.output) CHECK((static_cast<unsigned char>(c) >= 0x20 || c == '\n'));
}

TEST_CASE("dsa_run --backend cuda runs on a GPU, and says clearly why it cannot without one") {
  dsa_test::temp_dir dir("dsa_test_run_cli");
  const auto r = run_dsa_run(dir, {"--model", dsa_test::tiny_dir.string(), "--prompt-ids", "5 17 3 99",
                                   "--max-new-tokens", "3", "--backend", "cuda", "--quiet"});
  CAPTURE(r.output);
#ifdef DSA_RUN_CUDA
  if (dsa::has_device()) {
    CHECK(r.exit_code == 0);
    CHECK(contains(r.output, "backend: cuda ("));
    CHECK(contains(r.output, "; kernels: fast"));
    CHECK(contains(r.output, "generated ids:"));
    CHECK(contains(r.output, "decode: 2 tokens in"));
    // The exact kernels one option away.
    const auto e = run_dsa_run(dir, {"--model", dsa_test::tiny_dir.string(), "--prompt-ids", "5 17 3 99",
                                     "--max-new-tokens", "3", "--backend", "cuda", "--cuda-kernels", "exact", "--quiet"});
    CAPTURE(e.output);
    CHECK(e.exit_code == 0);
    CHECK(contains(e.output, "; kernels: exact"));
    CHECK(contains(e.output, "decode: 2 tokens in"));
  } else {
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "dsa_run: --backend cuda: no CUDA device is visible to this process"));
  }
#else
  CHECK(r.exit_code == 2);
  CHECK(contains(r.output, "dsa_run: --backend cuda: this dsa_run was built without the CUDA backend"));
#endif
  // CPU-only options with the CUDA backend are usage errors, whatever the build.
  const auto u = run_dsa_run(dir, {"--model", dsa_test::tiny_dir.string(), "--prompt-ids", "5", "--backend", "cuda",
                                   "--threads", "2"});
  CHECK(u.exit_code == 2);
  CHECK(contains(u.output, "--threads, --fp8-dot and --fp8-pack set the CPU backend"));
  const auto b = run_dsa_run(dir, {"--model", dsa_test::tiny_dir.string(), "--prompt-ids", "5", "--backend", "tpu"});
  CHECK(b.exit_code == 2);
  CHECK(contains(b.output, "--backend = 'tpu'; expected cpu or cuda"));
  // --cuda-kernels: exact or fast, and only with the CUDA backend, whatever the build.
  const auto k = run_dsa_run(dir, {"--model", dsa_test::tiny_dir.string(), "--prompt-ids", "5", "--backend", "cuda",
                                   "--cuda-kernels", "tensor"});
  CHECK(k.exit_code == 2);
  CHECK(contains(k.output, "--cuda-kernels = 'tensor'; expected exact or fast"));
  const auto c = run_dsa_run(dir, {"--model", dsa_test::tiny_dir.string(), "--prompt-ids", "5", "--cuda-kernels", "exact"});
  CHECK(c.exit_code == 2);
  CHECK(contains(c.output, "--cuda-kernels applies to --backend cuda"));
}

#endif
