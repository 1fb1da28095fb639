// dsa_validate: runs the case groups of a golden-format safetensors file through dsa's public
// ops and compares with the expected outputs under each group's tolerance (docs/validation.md);
// with --model, replays a golden model directory (config.json, the checkpoint and
// expected.safetensors) through dsa::model::transformer under the golden README's criteria.
//
//   dsa_validate FILE.safetensors [--backend cpu|cuda] [--dump OUT.safetensors] [--threads N] [--fp8-dot M]
//                                 [--cuda-kernels exact|fast]
//   dsa_validate --model DIR      [--backend cpu|cuda] [--dump OUT.safetensors] [--threads N] [--fp8-dot M]
//                                 [--cuda-linear cublas|simt] [--cuda-kernels exact|fast]
//
// Exit codes: 0 every group (every check) ran and passed; 1 a comparison failed (or the backend
// failed while running a group, or the model's logits went NaN or infinite); 2 usage, I/O or a malformed file (including a group that lacks a
// tensor it needs, a file with no known group, and a model directory without its checkpoint or
// expected.safetensors); 77 --backend cuda on a machine without a CUDA device (nothing was run:
// ctest's SKIP_RETURN_CODE).
//
// --backend cuda runs the same case code (validate/primitive_cases.hpp) through the CUDA executor
// (validate/cuda_cases.hpp), present when dsa is built with DSA_ENABLE_CUDA=ON (DSA_VALIDATE_CUDA).
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/quote.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/model/nonfinite.hpp"
#include "dsa/model/safetensors.hpp"
#include "validate/executor.hpp"
#include "validate/model_cases.hpp"
#include "validate/primitive_cases.hpp"

#ifdef DSA_VALIDATE_CUDA
#include "dsa/cuda/backend.hpp"
#include "validate/cuda_cases.hpp"
#endif

namespace {

constexpr int exit_pass = 0;
constexpr int exit_fail = 1;
constexpr int exit_error = 2;
constexpr int exit_no_device = 77;  ///< --backend cuda without a GPU: the Automake / ctest skip code

const char* const usage_text =
    "usage: dsa_validate FILE.safetensors [--backend cpu|cuda] [--dump OUT.safetensors] [--threads N] [--fp8-dot M]\n"
    "                                     [--cuda-kernels exact|fast]\n"
    "       dsa_validate --model DIR      [--backend cpu|cuda] [--dump OUT.safetensors] [--threads N] [--fp8-dot M]\n"
    "                                     [--cuda-linear cublas|simt] [--cuda-kernels exact|fast]\n"
    "\n"
    "Runs every case group found in FILE (hadamard, hadamard_f32, act_quant, weight_quant, indexer,\n"
    "topk, sparse_mla, kl_dense, kl_sparse) through dsa's ops and compares with the file's expected\n"
    "outputs under each group's tolerance. See docs/validation.md.\n"
    "\n"
    "  --model DIR          instead of FILE: replay the golden model directory DIR (config.json, its\n"
    "                       checkpoint and expected.safetensors): the prompt, the teacher-forced decode\n"
    "                       steps and the per-layer top-k, checked one line per step and per layer\n"
    "  --backend cpu|cuda   backend to run the ops on (default cpu); cuda needs a build with\n"
    "                       DSA_ENABLE_CUDA=ON and a GPU (the current device)\n"
    "  --threads N          CPU threads, N >= 1 (default: every hardware thread); --backend cpu only\n"
    "  --fp8-dot M          the CPU FP8 linear's block dot: exact (default) or fp32 (the fast mode,\n"
    "                       docs/decisions.md); --backend cpu only\n"
    "  --cuda-linear P      the CUDA model's dsa::linear: cublas (default) or simt (dsa's own kernel,\n"
    "                       no cuBLAS: what compute-sanitizer initcheck can follow); --model with\n"
    "                       --backend cuda only\n"
    "  --cuda-kernels K     the CUDA backend's kernels of the ops that have two (the lightning indexer's\n"
    "                       FP8 scores, sparse MLA attention): fast (default: tensor cores where the\n"
    "                       GPU has them) or exact (the SIMT kernels, bit-identical with the CPU);\n"
    "                       --backend cuda only\n"
    "  --dump OUT           write the inputs and the computed outputs, under the expected outputs'\n"
    "                       names, to OUT (a golden-format file; written to a new temporary file\n"
    "                       and renamed onto OUT, so OUT must be a new name or a regular file that\n"
    "                       is not an input: not a directory, device, FIFO or socket); with --model\n"
    "                       the computed tensors are kept for it, at most 4 GiB in all\n"
    "  -h, --help           this text\n"
    "\n"
    "exit status: 0 all checks pass, 1 a comparison failed, 2 usage, I/O or malformed-input error,\n"
    "             77 --backend cuda and no CUDA device (nothing was run)\n";

static_assert(dsa_validate::model_replay_max_kept_bytes == std::uint64_t{4} << 30, "usage_text says 4 GiB");

struct options {
  std::filesystem::path file;
  std::filesystem::path model;  ///< --model DIR (then `file` is empty)
  std::string backend = "cpu";
  std::filesystem::path dump;
  int threads = 0;
  std::optional<dsa::fp8_dot> fp8_dot;  ///< --fp8-dot (else the backend's default)
  std::string cuda_linear;              ///< --cuda-linear (empty: cublas)
  std::string cuda_kernels;             ///< --cuda-kernels (empty: fast)
  std::vector<std::filesystem::path> inputs;  ///< every file the run reads (set by run() for --dump)
};

struct usage_error {
  std::string message;
};

options parse_args(int argc, char** argv) {
  options o;
  bool have_file = false;
  auto value = [&](int& i, std::string_view flag) -> std::string {
    // `flag` is one of the known options (matched exactly), so it is printed as it is.
    if (i + 1 >= argc) throw usage_error{std::string(flag) + " needs a value"};
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << usage_text;
      std::exit(exit_pass);
    } else if (a == "--backend") {
      o.backend = value(i, a);
      if (o.backend != "cpu" && o.backend != "cuda") {
        throw usage_error{"--backend = " + dsa::quoted(o.backend) + "; expected cpu or cuda"};
      }
    } else if (a == "--model") {
      o.model = value(i, a);
      if (o.model.empty()) throw usage_error{"--model needs a directory"};
    } else if (a == "--dump") {
      o.dump = value(i, a);
      if (o.dump.empty()) throw usage_error{"--dump needs a file name"};
    } else if (a == "--threads") {
      const std::string v = value(i, a);
      std::size_t used = 0;
      long n = 0;
      try {
        n = std::stol(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != v.size() || n < 1 || n > 4096)
        throw usage_error{"--threads = " + dsa::quoted(v) + "; expected an integer in [1, 4096]"};
      o.threads = static_cast<int>(n);
    } else if (a == "--fp8-dot") {
      const std::string v = value(i, a);
      if (v == "exact") {
        o.fp8_dot = dsa::fp8_dot::exact;
      } else if (v == "fp32") {
        o.fp8_dot = dsa::fp8_dot::fp32;
      } else {
        throw usage_error{"--fp8-dot = " + dsa::quoted(v) + "; expected exact or fp32"};
      }
    } else if (a == "--cuda-linear") {
      o.cuda_linear = value(i, a);
      if (o.cuda_linear != "cublas" && o.cuda_linear != "simt") {
        throw usage_error{"--cuda-linear = " + dsa::quoted(o.cuda_linear) + "; expected cublas or simt"};
      }
    } else if (a == "--cuda-kernels") {
      o.cuda_kernels = value(i, a);
      if (o.cuda_kernels != "exact" && o.cuda_kernels != "fast") {
        throw usage_error{"--cuda-kernels = " + dsa::quoted(o.cuda_kernels) + "; expected exact or fast"};
      }
    } else if (a.size() > 1 && a[0] == '-') {
      throw usage_error{"unknown option " + dsa::quoted(a)};
    } else if (have_file) {
      throw usage_error{"more than one input file (" + dsa::quoted(o.file.string()) + ", " + dsa::quoted(a) + ")"};
    } else {
      o.file = std::string(a);
      have_file = true;
    }
  }
  if (have_file && !o.model.empty()) {
    throw usage_error{"both an input file (" + dsa::quoted(o.file.string()) + ") and --model " +
                      dsa::quoted(o.model.string()) + "; expected one of them"};
  }
  if (!have_file && o.model.empty()) throw usage_error{"no input file (or --model DIR)"};
  if (o.backend == "cuda" && o.threads != 0) {
    throw usage_error{"--threads = " + std::to_string(o.threads) +
                      " with --backend cuda; --threads sets the CPU backend's threads (drop it, or use --backend cpu)"};
  }
  if (o.backend == "cuda" && o.fp8_dot) {
    throw usage_error{"--fp8-dot with --backend cuda; it selects the CPU backend's FP8 block dot (drop it, or use "
                      "--backend cpu)"};
  }
  if (!o.cuda_linear.empty() && (o.backend != "cuda" || o.model.empty())) {
    throw usage_error{"--cuda-linear with " + (o.model.empty() ? std::string("a primitives file") : "--backend " + o.backend) +
                      "; it selects the kernels of dsa::linear in the CUDA model replay (--model DIR --backend cuda)"};
  }
  if (!o.cuda_kernels.empty() && o.backend != "cuda") {
    throw usage_error{"--cuda-kernels with --backend " + o.backend +
                      "; it selects the CUDA backend's kernels (drop it, or use --backend cuda)"};
  }
  return o;
}

#ifdef DSA_VALIDATE_CUDA
/// The kernels of --cuda-kernels (dsa::default_cuda_kernel_path without it).
dsa::cuda_kernel_path cuda_kernels_of(const options& o) {
  if (o.cuda_kernels.empty()) return dsa::default_cuda_kernel_path;
  return o.cuda_kernels == "exact" ? dsa::cuda_kernel_path::exact : dsa::cuda_kernel_path::fast;
}

/// ", exact kernels" or ", fast kernels" for the report's first line.
std::string cuda_kernels_description(const options& o) {
  return std::string(", ") + dsa::cuda_kernel_path_name(cuda_kernels_of(o)) + " kernels";
}
#endif

std::string format_number(double v) {
  std::ostringstream os;
  os.precision(3);
  os << v;
  return os.str();
}

/// "t1: metric a (tol x), metric b (tol y); t2: ..." with each tensor named once.
std::string describe(const std::vector<dsa_validate::comparison>& cs) {
  std::string s;
  for (std::size_t i = 0; i < cs.size(); ++i) {
    const auto& c = cs[i];
    if (i == 0 || cs[i - 1].tensor != c.tensor) {
      if (i) s += "; ";
      s += c.tensor;
      s += ": ";
    } else {
      s += ", ";
    }
    if (c.metric == dsa_validate::empty_metric) {  // compare_nothing: an empty expected tensor
      s += "no elements to compare (an empty tensor; expected at least 1)";
      continue;
    }
    s += c.metric + " " + format_number(c.max_error) + (c.pass ? "" : " EXCEEDS") + " (tol " +
         format_number(c.tolerance) + ")";
  }
  return s;
}

/// Every file the run reads, which --dump must never replace: FILE; or, with --model, the
/// directory's config.json, expected.safetensors, checkpoint index and every checkpoint file.
std::vector<std::filesystem::path> input_files(const options& o) {
  if (o.model.empty()) return {o.file};
  const std::filesystem::path& dir = o.model;
  std::vector<std::filesystem::path> in = {dir / "config.json", dir / "expected.safetensors",
                                           dir / dsa::safetensors_checkpoint::index_name,
                                           dir / dsa::safetensors_checkpoint::single_name};
  try {
    const auto ckpt = dsa::safetensors_checkpoint::open(dir);
    for (const dsa::safetensors_file& shard : ckpt.shards()) in.push_back(shard.path());
  } catch (const dsa::error&) {
    // A broken checkpoint fails the replay itself (with this message) before anything is dumped.
  }
  return in;
}

/// Refuses a --dump OUT that cannot be written or would replace what it must not: OUT in a
/// directory that does not exist, OUT an existing directory, OUT anything else that is not a
/// regular file (a character or block device, a FIFO, a socket, or a symlink to one: the dump is
/// renamed onto OUT, so `--dump /dev/null` would put a regular file in place of /dev/null), or
/// OUT the same file (device and inode, through symlinks and hard links) as any of o.inputs.
/// Checked before the run and again just before the dump is written; write_safetensors then
/// writes a fresh temporary file, checks OUT once more and renames the file onto it. A symlink OUT
/// to a regular file that is not an input, or a dangling one, is replaced (its target untouched).
void check_dump_target(const options& o) {
  namespace fs = std::filesystem;
  const std::string out = dsa::quoted(o.dump.string());
  const fs::path parent = o.dump.has_parent_path() ? o.dump.parent_path() : fs::path(".");
  struct stat st {};
  if (::stat(parent.c_str(), &st) != 0) {
    const int e = errno;
    dsa::fail("validate", "--dump", out,
              "a file in an existing directory (" + dsa::quoted(parent.string()) + ": " +
                  std::generic_category().message(e) + ")");
  }
  if (!S_ISDIR(st.st_mode)) {
    dsa::fail("validate", "--dump", out,
              "a file in an existing directory (" + dsa::quoted(parent.string()) + " is not a directory)");
  }
  if (!o.dump.has_filename()) dsa::fail("validate", "--dump", out, "the name of a file to write, not a directory path");
  if (::stat(o.dump.c_str(), &st) != 0) return;  // nothing there (or a dangling symlink, which the dump replaces)
  if (S_ISDIR(st.st_mode))
    dsa::fail("validate", "--dump", out, "the name of a file to write; it is an existing directory");
  if (const auto what = dsa::detail::unreplaceable(o.dump)) {
    dsa::fail("validate", "--dump", out,
              "a regular file or a new name; it is " + *what + ", which the dump would replace (it is written to a "
              "new file renamed onto OUT)");
  }
  struct stat link {};
  const bool is_link = ::lstat(o.dump.c_str(), &link) == 0 && S_ISLNK(link.st_mode);
  for (const fs::path& in : o.inputs) {
    struct stat is {};
    if (::stat(in.c_str(), &is) == 0 && is.st_dev == st.st_dev && is.st_ino == st.st_ino) {
      dsa::fail("validate", "--dump", out,
                "a file other than the inputs; it is " + std::string(is_link ? "a symlink to " : "") + "the input " +
                    dsa::quoted(in.string()) + ", which the dump would replace");
    }
  }
}

/// The dump: every tensor of the groups that ran, with the computed outputs in place of the
/// expected ones, so that the dump is itself a golden-format file.
void write_dump(const options& o, const dsa::safetensors_file& f,
                const std::vector<dsa_validate::case_result>& results) {
  std::map<std::string, const dsa_validate::output_tensor*> computed;
  std::set<std::string> ran;
  for (const auto& r : results) {
    ran.insert(r.name);
    for (const auto& out : r.outputs) computed[out.name] = &out;
  }
  std::vector<dsa::safetensors_entry> entries;
  for (const dsa::tensor_info& t : f.tensors()) {
    if (!ran.count(std::string(dsa_validate::group_of(t.name)))) continue;
    if (computed.count(t.name)) continue;
    entries.push_back({t.name, t.type, t.shape, f.bytes(t)});
  }
  for (const auto& [name, out] : computed) entries.push_back({out->name, out->type, out->shape, out->bytes});
  auto metadata = f.metadata();
  metadata["dsa_validate.source"] = o.file.string();
  metadata["dsa_validate.backend"] = o.backend;
  metadata["dsa_validate.version"] = std::to_string(DSA_VERSION_MAJOR) + "." + std::to_string(DSA_VERSION_MINOR) + "." +
                                     std::to_string(DSA_VERSION_PATCH);
  check_dump_target(o);
  dsa::write_safetensors(o.dump, entries, metadata);
}

std::string padded(const std::string& s, std::size_t width) {
  return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' ');
}

/// The CPU backend of the options.
dsa::cpu_backend cpu_backend_of(const options& o) {
  dsa::cpu_backend be{o.threads};
  if (o.fp8_dot) be.fp8_block_dot = *o.fp8_dot;
  return be;
}

/// The CPU backend in the report's first line: "cpu (N threads)", ", fp32 FP8 block dots" added in
/// that mode (CUDA's is "cuda (" + cuda_device_description() + ")").
std::string cpu_description(const dsa::cpu_backend& be) {
  const int threads = dsa::cpu_detail::thread_count(be);
  std::string s = "cpu (" + std::to_string(threads);
  s += threads == 1 ? " thread" : " threads";
  if (be.fp8_block_dot == dsa::fp8_dot::fp32) s += ", fp32 FP8 block dots";
  return s + ")";
}

/// --model DIR: the golden replay of a model directory, one line per check.
int run_model(const options& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path& dir = o.model;
  if (!fs::exists(dir, ec)) {
    std::cerr << "dsa_validate: --model " << dsa::quoted(dir.string()) << ": no such directory\n";
    return exit_error;
  }
  if (!fs::is_directory(dir, ec)) {
    std::cerr << "dsa_validate: --model " << dsa::quoted(dir.string())
              << ": not a directory; expected a golden model directory "
              << "(config.json, model.safetensors or model.safetensors.index.json, expected.safetensors)\n";
    return exit_error;
  }
  if (!fs::exists(dir / "expected.safetensors", ec)) {
    std::cerr << "dsa_validate: --model " << dsa::quoted(dir.string())
              << ": no expected.safetensors in the directory; expected a "
              << "golden model directory (config.json, model.safetensors or model.safetensors.index.json, and "
              << "expected.safetensors with the reference prompt, logits and top-k; see ../shared/golden/README.md)\n";
    return exit_error;
  }
  auto header = [&](const std::string& backend) {
    std::cout << "dsa_validate " << DSA_VERSION_MAJOR << "." << DSA_VERSION_MINOR << "." << DSA_VERSION_PATCH
              << ": model " << dsa::quoted(dir.string()) << ", backend " << backend << "\n";
  };
  dsa_validate::model_case_result r;
#ifdef DSA_VALIDATE_CUDA
  if (o.backend == "cuda") {  // (without DSA_VALIDATE_CUDA, run() has refused --backend cuda)
    header("cuda (" + dsa_validate::cuda_device_description() + ")" + cuda_kernels_description(o) +
           (o.cuda_linear == "simt" ? ", dsa::linear on dsa's SIMT kernel" : ""));
    try {
      r = dsa_validate::run_model_case_cuda(
          dir, o.cuda_linear == "simt" ? dsa::cuda_linear_path::simt : dsa::cuda_linear_path::cublas,
          cuda_kernels_of(o), !o.dump.empty());
    } catch (const dsa_validate::backend_error& e) {
      std::cout << padded("model", 20) << "FAIL  " << e.what() << "\n";
      return exit_fail;
    } catch (const dsa::model::nonfinite_error& e) {
      std::cout << padded("model", 20) << "FAIL  " << e.what() << "\n";
      return exit_fail;
    }
  } else
#endif
  {
    const dsa::cpu_backend be = cpu_backend_of(o);
    header(cpu_description(be));
    // The computed tensors are kept only for the dump: without it the replay streams its rows and
    // holds one row's state at a time, whatever the batch.
    try {
      r = dsa_validate::run_model_case(be, dir, dsa::model::forward_options{}.max_chunk, !o.dump.empty());
    } catch (const dsa::model::nonfinite_error& e) {
      // The model's logits went NaN or infinite: a failed replay, not a malformed input. The
      // message names the step's position and where the values first stopped being finite.
      std::cout << padded("model", 20) << "FAIL  " << e.what() << "\n";
      return exit_fail;
    }
  }

  int passed = 0, failed = 0;
  auto line = [&](const std::string& name, bool pass, const std::string& what) {
    std::cout << padded(name, 20) << (pass ? "PASS  " : "FAIL  ") << what << "\n";
    (pass ? passed : failed) += 1;
  };
  // The per-step and per-layer comparisons of run_model_case, with the argmax of each step.
  std::size_t step = 0;
  for (const dsa_validate::comparison& c : r.result.comparisons) {
    if (c.metric == "1 - cosine") {
      const bool agrees = r.argmax_match[step] != 0;
      line(c.tensor, c.pass,
           "cosine " + dsa_validate::model_detail::fmt(1.0 - c.max_error, 6) + " (min " +
               format_number(dsa_validate::model_min_cosine) + "), argmax " + std::to_string(r.argmax_got[step]) +
               (agrees ? " (agrees)" : " (expected " + std::to_string(r.argmax_want[step]) + ")"));
      ++step;
    } else if (c.metric == "argmax mismatches") {
      // "step*.logits" or, with batch rows, "step*.logits[b]": each row is its own sequence.
      const std::string row = c.tensor.substr(std::string_view("step*.logits").size());
      line(std::string("argmax").append(row), c.pass,
           std::to_string(static_cast<int>(c.max_error)) + " of " +
               std::to_string(r.argmax_match.size() / static_cast<std::size_t>(r.batch)) + " steps disagree (at most " +
               std::to_string(static_cast<int>(c.tolerance)) + ")");
    } else {
      line(c.tensor, c.pass,
           "mean top-k set agreement " + dsa_validate::model_detail::fmt(1.0 - c.max_error, 4) + " (min " +
               format_number(dsa_validate::model_min_topk_agreement) + ")");
    }
  }
  for (const std::string& d : r.diagnostics) {
    if (d.find(".logits") == std::string::npos) std::cout << "  info: " << d << "\n";
  }
  std::cout << (passed + failed) << " checks: " << passed << " passed, " << failed << " failed\n";

  if (!o.dump.empty()) {
    // The inputs of the expected file (prompt, generated) and every computed output under its
    // expected name: the dump is itself a valid expected.safetensors for the same model.
    const dsa::safetensors_file exp = dsa::safetensors_file::open(dir / "expected.safetensors");
    std::set<std::string> computed;
    for (const auto& out : r.result.outputs) computed.insert(out.name);
    std::vector<dsa::safetensors_entry> entries;
    for (const dsa::tensor_info& t : exp.tensors()) {
      if (!computed.count(t.name) && (t.name == "prompt" || t.name == "generated"))
        entries.push_back({t.name, t.type, t.shape, exp.bytes(t)});
    }
    for (const auto& out : r.result.outputs) entries.push_back({out.name, out.type, out.shape, out.bytes});
    auto metadata = exp.metadata();
    metadata["dsa_validate.source"] = dir.string();
    metadata["dsa_validate.backend"] = o.backend;
    metadata["dsa_validate.version"] = std::to_string(DSA_VERSION_MAJOR) + "." + std::to_string(DSA_VERSION_MINOR) +
                                       "." + std::to_string(DSA_VERSION_PATCH);
    check_dump_target(o);
    dsa::write_safetensors(o.dump, entries, metadata);
    std::cout << "wrote " << dsa::quoted(o.dump.string()) << "\n";
  }
  return failed ? exit_fail : exit_pass;
}

/// Runs every group of `f` on executor `ex` and prints one line per group.
template <class Exec>
int run_primitives(const options& o, const dsa::safetensors_file& f, const std::vector<std::string>& groups,
                   const Exec& ex, const std::string& backend) {
  std::cout << "dsa_validate " << DSA_VERSION_MAJOR << "." << DSA_VERSION_MINOR << "." << DSA_VERSION_PATCH << ": "
            << dsa::quoted(o.file.string()) << ", backend " << backend << "\n";

  std::vector<dsa_validate::case_result> results;
  int passed = 0, failed = 0, errors = 0;
  for (const std::string& g : groups) {
    char name[32];
    std::snprintf(name, sizeof name, "%-13s", g.c_str());
    try {
      dsa_validate::case_result r = dsa_validate::run_group(ex, f, g);
      std::cout << name << (r.pass() ? "PASS  " : "FAIL  ") << describe(r.comparisons) << std::endl;
      (r.pass() ? passed : failed) += 1;
      results.push_back(std::move(r));
    } catch (const dsa_validate::backend_error& e) {
      // dsa failed to run the group (a CUDA error): a failure of dsa, not of the file.
      std::cout << name << "FAIL  " << e.what() << std::endl;
      ++failed;
    } catch (const dsa::error& e) {
      std::cout << name << "ERROR " << e.what() << std::endl;
      ++errors;
    }
  }
  std::cout << groups.size() << (groups.size() == 1 ? " group: " : " groups: ") << passed << " passed, " << failed << " failed";
  if (errors) std::cout << ", " << errors << " not run (malformed input)";
  std::cout << "\n";
  if (!o.dump.empty()) {
    write_dump(o, f, results);
    std::cout << "wrote " << dsa::quoted(o.dump.string()) << "\n";
  }
  if (errors) return exit_error;
  return failed ? exit_fail : exit_pass;
}

/// Whether --backend can run here: std::nullopt if so, otherwise the exit code, after saying why.
/// Checked before any file is read, so that a machine without a GPU skips (77) rather than
/// reporting an unrelated error.
std::optional<int> unavailable_backend(const options& o) {
  if (o.backend != "cuda") return std::nullopt;
#ifndef DSA_VALIDATE_CUDA
  std::cerr << "dsa_validate: --backend cuda: the CUDA backend is not available in this build of dsa_validate "
               "(dsa was configured without DSA_ENABLE_CUDA=ON, so it runs host-memory backends only); use "
               "--backend cpu\n";
  return exit_error;
#else
  if (!dsa::has_device()) {
    std::cerr << "dsa_validate: --backend cuda: no CUDA device (dsa::device_count() == 0); nothing was run\n";
    return exit_no_device;
  }
  return std::nullopt;
#endif
}

int run(options o) {
  if (const auto code = unavailable_backend(o)) return *code;
  if (!o.dump.empty()) {  // refuse a --dump OUT that would replace an input before running anything
    o.inputs = input_files(o);
    check_dump_target(o);
  }
  if (!o.model.empty()) return run_model(o);
  const dsa::safetensors_file f = dsa::safetensors_file::open(o.file);
  const std::vector<std::string> groups = dsa_validate::detect_groups(f);
  for (const std::string& u : dsa_validate::unknown_groups(f)) {
    // u comes from the file's tensor names.
    std::cerr << "dsa_validate: note: ignoring tensors of unknown group " << dsa::quoted(u) << "\n";
  }
  if (groups.empty()) {
    std::cerr << "dsa_validate: " << dsa::quoted(o.file.string()) << ": no known case group (expected tensors named "
              << "hadamard.*, hadamard_f32.*, act_quant.*, weight_quant.*, indexer.*, topk.*, sparse_mla.*, "
                 "kl_dense.* or kl_sparse.*)\n";
    return exit_error;
  }
#ifdef DSA_VALIDATE_CUDA
  if (o.backend == "cuda") {
    return run_primitives(o, f, groups, dsa_validate::cuda_executor{nullptr, cuda_kernels_of(o)},
                          "cuda (" + dsa_validate::cuda_device_description() + ")" + cuda_kernels_description(o));
  }
#endif
  const dsa::cpu_backend be = cpu_backend_of(o);
  return run_primitives(o, f, groups, dsa_validate::host_executor<dsa::cpu_backend>{be}, cpu_description(be));
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  try {
    o = parse_args(argc, argv);
  } catch (const usage_error& e) {
    std::cerr << "dsa_validate: " << e.message << "\n\n" << usage_text;  // argv in it is quoted
    return exit_error;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    // A dsa::error is printable as it stands; another exception (std::filesystem_error, say) may
    // carry a path from the command line unescaped.
    std::cerr << dsa::escape_for_terminal(e.what()) << "\n";
    return exit_error;
  }
}
