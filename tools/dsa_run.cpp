// dsa_run: generates tokens with the reference DeepSeek-V3.2 forward pass of dsa::model on the
// CPU or the GPU and reports where the time went.
//
//   dsa_run --model DIR (--prompt-ids "1 2 3" | --prompt-file F) --max-new-tokens N [--batch B]
//           [--backend cpu|cuda] [--threads T] [--fp8-dot exact|fp32] [--fp8-pack on|off]
//           [--cuda-linear cublas|simt] [--cuda-kernels exact|fast]
//           [--temperature X [--top-p P] [--seed S]] [--stop-at-eos] [--quiet]
//
// Greedy (argmax, ties to the smaller id) unless --temperature X > 0 is given; sampling is
// seeded and reproducible (dsa::model::sampler). Prints the generated ids, tokens/s of the
// prefill and of the decode, and the per-phase breakdown of each; for the decode also the bytes
// of weights one token reads and the bandwidth that makes. A progress line goes to stderr while
// a prefill runs longer than a second.
// --batch B decodes B sequences together, one batched forward call per step (the prompt for the
// first and, beside it, pseudo-random prompts of the same length for the others; or one line of
// --prompt-file per sequence): the prefill and decode lines report the whole batch's tokens/s,
// with the per-sequence figure, and the decode the bytes one step reads.
// --backend cuda runs dsa::model::transformer<cuda_backend> (a build with DSA_ENABLE_CUDA=ON;
// the pass is compiled once in dsa_cuda_transformer, DSA_RUN_CUDA): the same phases, timed as
// device time. Without a CUDA device it exits 2 saying so, before loading anything.
// Exit codes: 0 success; 2 usage error, unreadable or invalid model, or a failed forward pass;
// 3 the run went non-finite: logits that are NaN or infinite (the run stops there, naming where
// the values first stopped being finite), or a non-finite value inside the model that did not
// reach the logits (the run completes, then a warning names it). dsa/model/nonfinite.hpp.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli_args.hpp"
#include "dsa/cpu/arch/isa.hpp"
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/model/sampling.hpp"
#include "dsa/model/transformer.hpp"
#ifdef DSA_RUN_CUDA
#include <cuda_runtime_api.h>

#include "dsa/cuda/backend.hpp"
#include "dsa/model/cuda/transformer.hpp"
#endif

namespace {

using clock_type = std::chrono::steady_clock;

const char* const usage_text =
    "usage: dsa_run --model DIR (--prompt-ids \"1 2 3\" | --prompt-file F) [--max-new-tokens N] [--batch B]\n"
    "               [--backend cpu|cuda] [--threads T] [--fp8-dot MODE] [--fp8-pack on|off]\n"
    "               [--cuda-linear cublas|simt] [--cuda-kernels exact|fast]\n"
    "               [--temperature X] [--top-p P] [--seed S] [--stop-at-eos] [--quiet]\n"
    "\n"
    "Runs a DeepSeek-V3.2 checkpoint (config.json + safetensors, Hugging Face layout) with dsa's\n"
    "reference forward pass on the CPU or the GPU: prefill of the prompt, then N - 1 decode steps.\n"
    "\n"
    "  --model DIR          checkpoint directory\n"
    "  --prompt-ids IDS     prompt token ids, separated by spaces or commas\n"
    "  --prompt-file F      the same from a text file (any whitespace or commas between ids;\n"
    "                       at most 64 MiB): long prompts exceed one argument's 128 KiB; with\n"
    "                       --batch B > 1 a file of B lines gives one prompt per line\n"
    "  --max-new-tokens N   tokens to generate, N >= 0 (default 16)\n"
    "  --batch B            decode B sequences together, 1 <= B <= 4096 (default 1): the prompt\n"
    "                       for the first, pseudo-random prompts of its length for the others\n"
    "  --backend B          cpu (default) or cuda (a build with DSA_ENABLE_CUDA=ON and a GPU:\n"
    "                       the whole model is copied to the device)\n"
    "  --threads T          CPU threads, T >= 1 (default: every hardware thread; --backend cpu)\n"
    "  --fp8-dot MODE       FP8 linear block dots: exact (default) or fp32 (faster prefill;\n"
    "                       docs/decisions.md)\n"
    "  --fp8-pack on|off    pack the FP8 weights for the CPU kernels at load (default on: same\n"
    "                       results, faster decode, a second copy of the FP8 weights in memory)\n"
    "  --cuda-linear P      dsa::linear on the GPU: cublas (default) or simt (dsa's own kernel)\n"
    "  --cuda-kernels K     the indexer's and sparse MLA attention's kernels on the GPU: fast\n"
    "                       (default: tensor cores where the GPU has them) or exact (the SIMT\n"
    "                       kernels, bit-identical with the CPU's ops)\n"
    "  --temperature X      sample at temperature X > 0; 0 or absent: greedy\n"
    "  --top-p P            nucleus sampling mass, 0 < P <= 1 (default 1; needs --temperature)\n"
    "  --seed S             sampling seed (default 0)\n"
    "  --stop-at-eos        stop after generating the config's eos_token_id\n"
    "  --quiet              no progress line on stderr\n"
    "  -h, --help           this text\n"
    "\n"
    "Output: the generated ids, then for prefill and decode the tokens/s and the wall time per\n"
    "phase (indexer, top-k, attention, MoE, other); for the decode also the bytes of weights read\n"
    "per token (and of cache) and the GB/s they make; then cache size and peak resident memory.\n"
    "\n"
    "Exit status: 0 success; 2 usage error, bad model or failed forward pass; 3 the run went\n"
    "non-finite (NaN or inf logits stop it with an error naming the layer where the values first\n"
    "stopped being finite; a non-finite value that did not reach the logits is a warning).\n";

struct options {
  std::filesystem::path model;
  std::vector<std::vector<std::int64_t>> prompts;  ///< one per sequence of the batch
  std::string prompt_text;                         ///< --prompt-ids or --prompt-file, parsed last
  std::string prompt_flag;
  bool have_prompt = false;
  std::int64_t batch = 1;
  std::int64_t max_new_tokens = 16;
  std::string backend = "cpu";
  int threads = 0;
  std::optional<dsa::fp8_dot> fp8_dot;
  std::optional<std::string> cuda_linear;
  std::optional<std::string> cuda_kernels;
  std::optional<bool> fp8_pack;  ///< --fp8-pack (cpu_backend::pack_fp8_weights; on by default)
  double temperature = 0.0;
  std::optional<double> top_p;
  std::optional<std::uint64_t> seed;
  bool stop_at_eos = false;
  bool quiet = false;
};

/// The text of a --prompt-file, its size checked before anything is allocated for it.
std::string read_prompt_file(std::string_view flag, const std::filesystem::path& path) {
  constexpr std::uintmax_t max_bytes = std::uintmax_t{64} << 20;
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) dsa_tools::usage_fail(flag, path.string(), "a readable regular file (" + ec.message() + ")");
  if (size > max_bytes) {
    dsa_tools::usage_fail(flag, path.string(), "a file of at most 64 MiB; it has " + std::to_string(size) + " bytes");
  }
  std::ifstream in(path, std::ios::binary);
  std::string text(static_cast<std::size_t>(size), '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(size))) {
    dsa_tools::usage_fail(flag, path.string(), "a readable file (reading it failed)");
  }
  return text;
}

/// The prompts of the batch: one line per sequence when a --prompt-file has exactly `batch` lines
/// of ids (batch > 1), else the one prompt the text holds for every sequence (prompt_variant
/// makes the others distinct once the vocabulary is known).
std::vector<std::vector<std::int64_t>> prompts_of(const std::string& flag, std::string_view text, std::int64_t batch) {
  constexpr std::int64_t max_id = std::numeric_limits<std::int32_t>::max();
  if (flag == "--prompt-file" && batch > 1) {
    std::vector<std::string_view> lines;
    std::size_t b = 0;
    while (b < text.size()) {
      std::size_t e = text.find('\n', b);
      if (e == std::string_view::npos) e = text.size();
      const std::string_view line = text.substr(b, e - b);
      if (line.find_first_not_of(" \t\r,") != std::string_view::npos) lines.push_back(line);
      b = e + 1;
    }
    if (static_cast<std::int64_t>(lines.size()) == batch) {
      std::vector<std::vector<std::int64_t>> out;
      for (const std::string_view line : lines) out.push_back(dsa_tools::parse_int_list(flag, line, 0, max_id));
      return out;
    }
    if (lines.size() > 1) {
      throw dsa_tools::usage_error{"--prompt-file has " + std::to_string(lines.size()) + " lines of ids; expected 1, or " +
                                   std::to_string(batch) + " (one per sequence of --batch)"};
    }
  }
  return {dsa_tools::parse_int_list(flag, text, 0, max_id)};
}

/// Sequence i's prompt beside the given one: the same length, each id replaced by a
/// pseudo-random one (splitmix64 of the sequence and position), so that the batch's sequences
/// are distinct and the run is reproducible.
std::vector<std::int64_t> prompt_variant(const std::vector<std::int64_t>& prompt, std::int64_t i, std::int64_t vocab) {
  std::vector<std::int64_t> out(prompt.size());
  for (std::size_t j = 0; j < prompt.size(); ++j) {
    std::uint64_t z = (static_cast<std::uint64_t>(i) << 32) + j + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    out[j] = static_cast<std::int64_t>(z % static_cast<std::uint64_t>(vocab));
  }
  return out;
}

options parse_args(int argc, char** argv) {
  using dsa_tools::usage_error;
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help") throw usage_error{};
    if (a == "--stop-at-eos") {
      o.stop_at_eos = true;
      continue;
    }
    if (a == "--quiet") {
      o.quiet = true;
      continue;
    }
    if (i + 1 >= argc) throw usage_error{dsa::quoted(a) + (a.starts_with("-") ? " needs a value" : ": unexpected argument")};
    const std::string_view v = argv[++i];
    if (a == "--model") {
      o.model = v;
    } else if (a == "--prompt-ids" || a == "--prompt-file") {
      if (o.have_prompt) throw usage_error{"give one prompt: --prompt-ids or --prompt-file, once"};
      o.prompt_text = a == "--prompt-file" ? read_prompt_file(a, std::filesystem::path(v)) : std::string(v);
      o.prompt_flag = a;
      o.have_prompt = true;
    } else if (a == "--batch") {
      o.batch = dsa_tools::parse_int(a, v, 1, 4096);
    } else if (a == "--max-new-tokens") {
      o.max_new_tokens = dsa_tools::parse_int(a, v, 0, std::numeric_limits<std::int32_t>::max());
    } else if (a == "--backend") {
      if (v != "cpu" && v != "cuda") dsa_tools::usage_fail(a, v, "cpu or cuda");
      o.backend = v;
    } else if (a == "--cuda-linear") {
      if (v != "cublas" && v != "simt") dsa_tools::usage_fail(a, v, "cublas or simt");
      o.cuda_linear = v;
    } else if (a == "--cuda-kernels") {
      if (v != "exact" && v != "fast") dsa_tools::usage_fail(a, v, "exact or fast");
      o.cuda_kernels = v;
    } else if (a == "--threads") {
      o.threads = static_cast<int>(dsa_tools::parse_int(a, v, 1, 4096));
    } else if (a == "--fp8-dot") {
      if (v == "exact") {
        o.fp8_dot = dsa::fp8_dot::exact;
      } else if (v == "fp32") {
        o.fp8_dot = dsa::fp8_dot::fp32;
      } else {
        dsa_tools::usage_fail(a, v, "exact or fp32");
      }
    } else if (a == "--fp8-pack") {
      if (v != "on" && v != "off") dsa_tools::usage_fail(a, v, "on or off");
      o.fp8_pack = v == "on";
    } else if (a == "--temperature") {
      o.temperature = dsa_tools::parse_double(a, v);
      if (o.temperature < 0.0) dsa_tools::usage_fail(a, v, "a finite number >= 0 (0: greedy)");
    } else if (a == "--top-p") {
      o.top_p = dsa_tools::parse_double(a, v);
      if (!(*o.top_p > 0.0 && *o.top_p <= 1.0)) dsa_tools::usage_fail(a, v, "a number in (0, 1]");
    } else if (a == "--seed") {
      o.seed = dsa_tools::parse_u64(a, v);
    } else {
      throw usage_error{"unknown option " + dsa::quoted(a)};
    }
  }
  if (o.model.empty()) throw usage_error{"missing --model DIR"};
  if (!o.have_prompt) throw usage_error{"missing --prompt-ids or --prompt-file"};
  o.prompts = prompts_of(o.prompt_flag, o.prompt_text, o.batch);
  for (std::size_t i = 0; i < o.prompts.size(); ++i) {
    if (o.prompts[i].empty()) {
      throw usage_error{o.prompts.size() == 1 ? std::string("the prompt is empty; expected at least one token id")
                                              : "prompt " + std::to_string(i) + " is empty; expected at least one token id"};
    }
  }
  if (o.temperature == 0.0 && (o.top_p || o.seed)) {
    throw usage_error{"--top-p and --seed apply to sampling; give --temperature X > 0 as well"};
  }
  if (o.backend == "cuda" && (o.threads != 0 || o.fp8_dot || o.fp8_pack)) {
    throw usage_error{"--threads, --fp8-dot and --fp8-pack set the CPU backend; drop them with --backend cuda"};
  }
  if (o.backend == "cpu" && o.cuda_linear) throw usage_error{"--cuda-linear applies to --backend cuda"};
  if (o.backend == "cpu" && o.cuda_kernels) throw usage_error{"--cuda-kernels applies to --backend cuda"};
  return o;
}

/// Peak resident set size of this process so far, in bytes (Linux reports ru_maxrss in KiB).
std::uint64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<std::uint64_t>(u.ru_maxrss) * 1024u;
}

dsa::model::phase_times minus(const dsa::model::phase_times& a, const dsa::model::phase_times& b) {
  return {a.indexer - b.indexer, a.topk - b.topk, a.attention - b.attention, a.moe - b.moe, a.other - b.other};
}

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

// prefill: 80 tokens in 0.0123 s = 6504.1 tokens/s
//   phases: indexer 0.0012 s (9.8%) | top-k ... | other ...   (shares of the phases' sum)
// With a batch of B sequences the first line adds "(B sequences: X tokens/s each)".
void print_stage(std::string_view name, std::int64_t tokens, double wall, const dsa::model::phase_times& t,
                 std::int64_t sequences = 0) {
  std::cout << name << ": " << tokens << " tokens in " << fixed(wall, 4) << " s = "
            << (wall > 0.0 ? fixed(static_cast<double>(tokens) / wall, 1) : std::string("inf")) << " tokens/s";
  if (sequences > 0) {
    std::cout << " (" << sequences << " sequences: "
              << (wall > 0.0 ? fixed(static_cast<double>(tokens) / wall / static_cast<double>(sequences), 1)
                             : std::string("inf"))
              << " tokens/s each)";
  }
  std::cout << "\n";
  const double total = t.total();
  const char* sep = " ";
  auto part = [&](const char* label, double s) {
    std::cout << sep << label << " " << fixed(s, 4) << " s (" << fixed(total > 0.0 ? 100.0 * s / total : 0.0, 1) << "%)";
    sep = " | ";
  };
  std::cout << "  phases:";
  part("indexer", t.indexer);
  part("top-k", t.topk);
  part("attention", t.attention);
  part("MoE", t.moe);
  part("other", t.other);
  std::cout << "\n";
}

// Bytes a decode step reads, from the loaded weights and the config.
struct decode_bytes {
  double weights = 0;         ///< every weight a step reads once, but the routed experts
  double expert = 0;          ///< one routed expert of every MoE layer (the mean expert)
  double experts = 0;         ///< routed experts per MoE layer
  double experts_per_tok = 0;
  double cache_fixed = 0;     ///< per token and layer: the top-k rows of the MLA cache
  double cache_per_key = 0;   ///< per layer and cached position: the indexer key row

  /// The weights a step of `tokens` decode tokens reads: the fixed ones, and the routed experts
  /// they meet, E (1 - (1 - k / E)^tokens) per layer when routing is uniform (k for one token).
  double weights_per_step(double tokens) const {
    if (experts == 0) return weights;
    const double met = experts * (1.0 - std::pow(1.0 - experts_per_tok / experts, tokens));
    return weights + expert * met;
  }
};

double view_bytes(const dsa::model::linear_weight& w) {
  if (w.fp8()) return static_cast<double>(w.q.size()) + 4.0 * static_cast<double>(w.scale.size());
  return 2.0 * static_cast<double>(w.w.size());
}

template <class T, std::size_t R>
double view_bytes(const dsa::host_view<const T, R>& v) {
  return static_cast<double>(sizeof(T)) * static_cast<double>(v.size());
}

double view_bytes(const dsa::model::mlp_weights& m) {
  return view_bytes(m.gate_proj) + view_bytes(m.up_proj) + view_bytes(m.down_proj);
}

// One decode token: the norms, every attention and indexer projection, the absorbed decode's
// bf16 copies of wkv_b (W_UK transposed and W_UV: 2 bytes per element of wkv_b, which the step
// reads instead of the FP8 wkv_b), the dense FFN or the MoE gate, the routed experts the step's
// tokens meet (weights_per_step) and the shared experts, the final norm,
// lm_head and one embedding row. The caches: per layer the selected min(index_topk, L) MLA rows
// of (kv_lora_rank + rope) bf16 values and all L indexer rows of 132 bytes.
decode_bytes decode_bytes_of(const dsa::model::weights& w) {
  const dsa::model::config& c = w.config();
  decode_bytes b;
  for (const auto& l : w.layers) {
    const auto& a = l.attn;
    b.weights += view_bytes(l.input_layernorm) + view_bytes(l.post_attention_layernorm);
    b.weights += view_bytes(a.q_a_proj) + view_bytes(a.q_a_layernorm) + view_bytes(a.q_b_proj) +
                 view_bytes(a.kv_a_proj_with_mqa) + view_bytes(a.kv_a_layernorm) + view_bytes(a.o_proj);
    b.weights += 2.0 * static_cast<double>(c.num_attention_heads) * static_cast<double>(c.kv_lora_rank) *
                 static_cast<double>(c.qk_nope_head_dim + c.v_head_dim);
    b.weights += view_bytes(a.indexer.wq_b) + view_bytes(a.indexer.wk) + view_bytes(a.indexer.k_norm_weight) +
                 view_bytes(a.indexer.k_norm_bias) + view_bytes(a.indexer.weights_proj);
    if (l.mlp) b.weights += view_bytes(*l.mlp);
    if (l.moe) {
      b.weights += view_bytes(l.moe->gate) + view_bytes(l.moe->bias);
      if (!l.moe->experts.empty()) {
        double experts = 0;
        for (const auto& e : l.moe->experts) experts += view_bytes(e);
        b.expert += experts / static_cast<double>(l.moe->experts.size());
        b.experts = static_cast<double>(l.moe->experts.size());
        b.experts_per_tok = static_cast<double>(c.num_experts_per_tok);
      }
      if (l.moe->shared_experts) b.weights += view_bytes(*l.moe->shared_experts);
    }
  }
  b.weights += view_bytes(w.norm) + view_bytes(w.lm_head) + 2.0 * static_cast<double>(c.hidden_size);
  const double layers = static_cast<double>(w.layers.size());
  b.cache_fixed = layers * 2.0 * static_cast<double>(c.kv_lora_rank + c.qk_rope_head_dim);
  b.cache_per_key = layers * 132.0;
  return b;
}

std::string megabytes(double bytes) { return fixed(bytes / 1e6, 1) + " MB"; }

/// The run itself, on any backend: load, prefill, decode, report. `backend_line` describes the
/// backend for the header line. Returns the exit code (0, or 3 for a non-finite site whose values
/// never reached the logits).
template <class Backend>
int run(const options& o, Backend be, const std::string& backend_line) {
  const auto t_load = clock_type::now();
  auto model = dsa::model::transformer<Backend>::load(o.model, be);
  const double load_s = std::chrono::duration<double>(clock_type::now() - t_load).count();
  const dsa::model::config& cfg = model.config();

  // The batch's prompts: the given ones, or the given one and pseudo-random ones of its length.
  std::vector<std::vector<std::int64_t>> prompts = o.prompts;
  for (std::int64_t i = static_cast<std::int64_t>(prompts.size()); i < o.batch; ++i) {
    prompts.push_back(prompt_variant(o.prompts.front(), i, cfg.vocab_size));
  }
  std::size_t longest = 0, prompt_tokens = 0;
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    for (std::size_t i = 0; i < prompts[p].size(); ++i) {
      if (prompts[p][i] >= cfg.vocab_size) {
        throw dsa_tools::usage_error{(prompts.size() > 1 ? "prompt " + std::to_string(p) + " token " : "prompt token ") +
                                     std::to_string(i) + " = " + std::to_string(prompts[p][i]) +
                                     "; expected an id in [0, vocab_size = " + std::to_string(cfg.vocab_size) + ")"};
      }
    }
    longest = std::max(longest, prompts[p].size());
    prompt_tokens += prompts[p].size();
  }
  const std::int64_t total = static_cast<std::int64_t>(longest) + o.max_new_tokens;
  if (total > cfg.max_position_embeddings) {
    throw dsa_tools::usage_error{"prompt + max-new-tokens = " + std::to_string(total) +
                                 " tokens; expected at most max_position_embeddings = " +
                                 std::to_string(cfg.max_position_embeddings)};
  }
  const std::size_t batch = prompts.size();

  // One sampler per sequence (seed + i), so a sequence samples the same tokens in any batch.
  std::vector<dsa::model::sampler> samplers;
  if (o.temperature > 0.0) {
    for (std::size_t i = 0; i < batch; ++i) {
      samplers.emplace_back(
          dsa::model::sampling_params{static_cast<float>(o.temperature), static_cast<float>(o.top_p.value_or(1.0))},
          o.seed.value_or(0) + i);
    }
  }
  auto next_token = [&](std::size_t i, const std::vector<float>& logits) {
    return samplers.empty() ? dsa::model::greedy_token(logits) : samplers[i](logits);
  };

  std::cout << "model: " << dsa::quoted(o.model.string()) << " (loaded in " << fixed(load_s, 3) << " s)\n  " << cfg.to_string() << "\n";
  std::cout << backend_line << "; prompt: " << prompts.front().size() << " tokens";
  if (batch > 1) std::cout << "; batch: " << batch << " sequences, " << prompt_tokens << " prompt tokens";
  std::cout << "; sampling: ";
  if (!samplers.empty()) {
    std::cout << "temperature " << samplers.front().params().temperature << ", top-p " << samplers.front().params().top_p
              << ", seed " << o.seed.value_or(0) << (batch > 1 ? " (+ i for sequence i)" : "") << "\n";
  } else {
    std::cout << "greedy\n";
  }
  std::cout.flush();

  // Progress of long prefills: after the first second, at most every half second. A terminal
  // gets one line rewritten in place, a log file one line per report.
  const bool tty = isatty(STDERR_FILENO) != 0;
  const auto t_prefill = clock_type::now();
  auto last_report = t_prefill;
  bool reported = false;
  dsa::model::forward_options prefill_opt;
  if (!o.quiet) {
    prefill_opt.progress = [&](const dsa::model::forward_progress& p) {
      const auto now = clock_type::now();
      if (now - t_prefill < std::chrono::seconds(1) || now - last_report < std::chrono::milliseconds(500)) return;
      last_report = now;
      reported = true;
      const double done = static_cast<double>(p.chunk_begin) +
                          static_cast<double>(p.chunk_end - p.chunk_begin) * static_cast<double>(p.layer + 1) /
                              static_cast<double>(p.num_layers);
      const double elapsed = std::chrono::duration<double>(now - t_prefill).count();
      std::cerr << (tty ? "\r" : "") << "prefill: " << fixed(100.0 * done / static_cast<double>(p.total_end), 1)
                << "% (chunk [" << p.chunk_begin << ", " << p.chunk_end << ") of " << p.total_end << " tokens, layer "
                << p.layer + 1 << "/" << p.num_layers << ", " << fixed(elapsed, 1) << " s)" << (tty ? "" : "\n");
      std::cerr.flush();
    };
  }

  using model_type = dsa::model::transformer<Backend>;
  std::vector<typename model_type::sequence_type> seqs;
  for (std::size_t i = 0; i < batch; ++i) seqs.push_back(model.new_sequence(total));
  std::vector<std::vector<std::int32_t>> ids(batch);
  for (std::size_t i = 0; i < batch; ++i) ids[i].assign(prompts[i].begin(), prompts[i].end());
  std::vector<typename model_type::batch_entry> entries(batch);
  for (std::size_t i = 0; i < batch; ++i) entries[i] = {&seqs[i], ids[i]};
  model.reset_phase_times();
  std::vector<std::vector<float>> logits = model.forward(std::span<const typename model_type::batch_entry>(entries), prefill_opt);
  const double prefill_s = std::chrono::duration<double>(clock_type::now() - t_prefill).count();
  if (reported && tty) std::cerr << "\n";
  const dsa::model::phase_times prefill_times = model.phase_times();

  // Decode: every sequence one token per step, in one call, until each has max_new_tokens (or
  // stopped at eos).
  std::vector<std::vector<std::int32_t>> generated(batch);
  std::vector<bool> stopped(batch, false);
  const auto t_decode = clock_type::now();
  std::int64_t decode_steps = 0, decode_tokens = 0;
  for (;;) {
    std::vector<std::size_t> active;
    for (std::size_t i = 0; i < batch; ++i) {
      if (stopped[i]) continue;
      generated[i].push_back(next_token(i, logits[i]));
      if (static_cast<std::int64_t>(generated[i].size()) >= o.max_new_tokens ||
          (o.stop_at_eos && cfg.eos_token_id && generated[i].back() == *cfg.eos_token_id)) {
        stopped[i] = true;
      } else {
        active.push_back(i);
      }
    }
    if (active.empty() || o.max_new_tokens == 0) break;
    std::vector<typename model_type::batch_entry> step;
    for (const std::size_t i : active) step.push_back({&seqs[i], std::span<const std::int32_t>(&generated[i].back(), 1)});
    const std::vector<std::vector<float>> out = model.forward(std::span<const typename model_type::batch_entry>(step));
    for (std::size_t j = 0; j < active.size(); ++j) logits[active[j]] = out[j];
    ++decode_steps;
    decode_tokens += static_cast<std::int64_t>(active.size());
  }
  if (o.max_new_tokens == 0) {
    for (auto& g : generated) g.clear();
  }
  const double decode_s = std::chrono::duration<double>(clock_type::now() - t_decode).count();
  const dsa::model::phase_times decode_times = minus(model.phase_times(), prefill_times);

  std::cout << "generated ids:";
  for (const std::int32_t id : generated.front()) std::cout << ' ' << id;
  std::cout << "\n";
  for (std::size_t i = 1; i < batch; ++i) {
    std::cout << "  sequence " << i << ":";
    for (const std::int32_t id : generated[i]) std::cout << ' ' << id;
    std::cout << "\n";
  }
  print_stage("prefill", static_cast<std::int64_t>(prompt_tokens), prefill_s, prefill_times,
              batch > 1 ? static_cast<std::int64_t>(batch) : 0);
  print_stage("decode", decode_tokens, decode_s, decode_times, batch > 1 ? static_cast<std::int64_t>(batch) : 0);
  if (decode_steps > 0 && decode_s > 0.0) {
    // Per step: the weights once (the routed experts the batch's tokens meet), and each
    // sequence's caches; the mean over the steps (step j attends over prompt + j positions).
    const decode_bytes db = decode_bytes_of(model.weights());
    const double weights = db.weights_per_step(static_cast<double>(decode_tokens) / static_cast<double>(decode_steps));
    double cache = 0;
    const double k = static_cast<double>(cfg.index_topk);
    for (std::size_t i = 0; i < batch; ++i) {
      for (std::size_t j = 1; j < generated[i].size(); ++j) {
        const double len = static_cast<double>(prompts[i].size() + j);
        cache += db.cache_fixed * std::min(k, len) + db.cache_per_key * len;
      }
    }
    cache /= static_cast<double>(decode_steps);
    const double sps = static_cast<double>(decode_steps) / decode_s;
    std::cout << "  weights: " << megabytes(weights) << " read per " << (batch > 1 ? "step" : "token") << " (+ "
              << megabytes(cache) << " of KV and indexer cache) = " << fixed(weights * sps / 1e9, 2)
              << " GB/s of weights (" << fixed((weights + cache) * sps / 1e9, 2) << " GB/s with the cache)\n";
  }
  std::size_t cache_bytes = 0;
  std::int64_t cached_tokens = 0;
  std::optional<dsa::model::nonfinite_site> site;
  for (const auto& seq : seqs) {
    cache_bytes += seq.cache_bytes();
    cached_tokens += seq.length();
    if (!site && seq.first_nonfinite()) site = seq.first_nonfinite();
  }
  std::cout << "memory: kv cache " << fixed(static_cast<double>(cache_bytes) / (1 << 20), 2) << " MiB for "
            << cached_tokens << " tokens, peak RSS " << fixed(static_cast<double>(peak_rss_bytes()) / (1 << 20), 1)
            << " MiB\n";
  if (site) {
    std::cout.flush();
    std::cerr << "dsa_run: warning: the model's values stopped being finite in " << site->to_string()
              << "; the logits stayed finite, but the run is not a valid result (a weight or scale too large "
                 "for the arithmetic?)\n";
    return 3;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  try {
    o = parse_args(argc, argv);
  } catch (const dsa_tools::usage_error& e) {
    if (e.message.empty()) {
      std::cout << usage_text;
      return 0;
    }
    std::cerr << "dsa_run: " << e.message << "\n\n" << usage_text;
    return 2;
  }

  try {
    if (o.backend == "cuda") {
#ifdef DSA_RUN_CUDA
      if (!dsa::has_device()) {
        std::cerr << "dsa_run: --backend cuda: no CUDA device is visible to this process (or the driver is too old); "
                     "expected a GPU for the CUDA backend (--backend cpu runs on the CPU)\n";
        return 2;
      }
      dsa::cuda_backend be{};
      if (o.cuda_linear == "simt") be.linear = dsa::cuda_linear_path::simt;
      if (o.cuda_kernels) be.kernels = *o.cuda_kernels == "exact" ? dsa::cuda_kernel_path::exact : dsa::cuda_kernel_path::fast;
      int device = 0;
      cudaDeviceProp prop{};
      DSA_CUDA_CHECK(cudaGetDevice(&device));
      DSA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
      return run(o, be, "backend: cuda (" + dsa::escape_for_terminal(prop.name) + ", sm_" + std::to_string(prop.major) +
                            std::to_string(prop.minor) + "); linear: " + (o.cuda_linear.value_or("cublas")) +
                            "; kernels: " + dsa::cuda_kernel_path_name(be.kernels));
#else
      std::cerr << "dsa_run: --backend cuda: this dsa_run was built without the CUDA backend (configure with "
                   "-DDSA_ENABLE_CUDA=ON, e.g. the cuda preset)\n";
      return 2;
#endif
    }
    dsa::cpu_backend be{o.threads};
    if (o.fp8_dot) be.fp8_block_dot = *o.fp8_dot;
    be.pack_fp8_weights = o.fp8_pack.value_or(true);
    return run(o, be,
               "threads: " + std::to_string(dsa::cpu_detail::thread_count(be)) + "; cpu kernels: " +
                   std::string(dsa::cpu_detail::isa_level_name(dsa::cpu_detail::instances_isa_level())) +
                   "; fp8 block dots: " +
                   (be.fp8_block_dot == dsa::fp8_dot::fp32 ? "fp32" : "exact") +
                   (be.pack_fp8_weights ? ", packed" : ", unpacked"));
  } catch (const dsa::model::nonfinite_error& e) {
    std::cout.flush();
    std::cerr << "dsa_run: " << e.what() << "\n";
    return 3;
  } catch (const dsa_tools::usage_error& e) {
    std::cerr << "dsa_run: " << e.message << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dsa_run: " << e.what() << "\n";
    return 2;
  }
}
