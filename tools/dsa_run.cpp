// dsa_run: generates tokens with the reference DeepSeek-V3.2 forward pass of dsa::model on the
// CPU and reports where the time went.
//
//   dsa_run --model DIR (--prompt-ids "1 2 3" | --prompt-file F) --max-new-tokens N [--threads T]
//           [--fp8-dot exact|fp32] [--fp8-pack on|off]
//           [--temperature X [--top-p P] [--seed S]] [--stop-at-eos] [--quiet]
//
// Greedy (argmax, ties to the smaller id) unless --temperature X > 0 is given; sampling is
// seeded and reproducible (dsa::model::sampler). Prints the generated ids, tokens/s of the
// prefill and of the decode, and the per-phase breakdown of each; for the decode also the bytes
// of weights one token reads and the bandwidth that makes. A progress line goes to stderr while
// a prefill runs longer than a second.
// Exit codes: 0 success; 2 usage error, unreadable or invalid model, or a failed forward pass;
// 3 the run went non-finite: logits that are NaN or infinite (the run stops there, naming where
// the values first stopped being finite), or a non-finite value inside the model that did not
// reach the logits (the run completes, then a warning names it). dsa/model/nonfinite.hpp.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
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
#include "dsa/cpu/arch/parallel.hpp"
#include "dsa/model/sampling.hpp"
#include "dsa/model/transformer.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

const char* const usage_text =
    "usage: dsa_run --model DIR (--prompt-ids \"1 2 3\" | --prompt-file F) [--max-new-tokens N]\n"
    "               [--threads T] [--fp8-dot MODE] [--fp8-pack on|off]\n"
    "               [--temperature X] [--top-p P] [--seed S] [--stop-at-eos] [--quiet]\n"
    "\n"
    "Runs a DeepSeek-V3.2 checkpoint (config.json + safetensors, Hugging Face layout) with dsa's\n"
    "reference forward pass on the CPU: prefill of the prompt, then N - 1 decode steps.\n"
    "\n"
    "  --model DIR          checkpoint directory\n"
    "  --prompt-ids IDS     prompt token ids, separated by spaces or commas\n"
    "  --prompt-file F      the same from a text file (any whitespace or commas between ids;\n"
    "                       at most 64 MiB): long prompts exceed one argument's 128 KiB\n"
    "  --max-new-tokens N   tokens to generate, N >= 0 (default 16)\n"
    "  --threads T          CPU threads, T >= 1 (default: every hardware thread)\n"
    "  --fp8-dot MODE       FP8 linear block dots: exact (default) or fp32 (faster prefill;\n"
    "                       docs/decisions.md)\n"
    "  --fp8-pack on|off    pack the FP8 weights for the CPU kernels at load (default on: same\n"
    "                       results, faster decode, a second copy of the FP8 weights in memory)\n"
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
  std::vector<std::int64_t> prompt;
  bool have_prompt = false;
  std::int64_t max_new_tokens = 16;
  int threads = 0;
  std::optional<dsa::fp8_dot> fp8_dot;
  bool fp8_pack = true;  ///< --fp8-pack (cpu_backend::pack_fp8_weights)
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
      const std::string text = a == "--prompt-file" ? read_prompt_file(a, std::filesystem::path(v)) : std::string(v);
      o.prompt = dsa_tools::parse_int_list(a, text, 0, std::numeric_limits<std::int32_t>::max());
      o.have_prompt = true;
    } else if (a == "--max-new-tokens") {
      o.max_new_tokens = dsa_tools::parse_int(a, v, 0, std::numeric_limits<std::int32_t>::max());
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
  if (o.prompt.empty()) throw usage_error{"the prompt is empty; expected at least one token id"};
  if (o.temperature == 0.0 && (o.top_p || o.seed)) {
    throw usage_error{"--top-p and --seed apply to sampling; give --temperature X > 0 as well"};
  }
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
void print_stage(std::string_view name, std::int64_t tokens, double wall, const dsa::model::phase_times& t) {
  std::cout << name << ": " << tokens << " tokens in " << fixed(wall, 4) << " s = "
            << (wall > 0.0 ? fixed(static_cast<double>(tokens) / wall, 1) : std::string("inf")) << " tokens/s\n";
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
  double weights = 0;       ///< per token: every weight the step reads once
  double cache_fixed = 0;   ///< per token and layer: the top-k rows of the MLA cache
  double cache_per_key = 0; ///< per layer and cached position: the indexer key row
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
// reads instead of the FP8 wkv_b), the dense FFN or the MoE gate, num_experts_per_tok routed
// experts (one token meets that many distinct experts) and the shared experts, the final norm,
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
        b.weights += experts / static_cast<double>(l.moe->experts.size()) * static_cast<double>(c.num_experts_per_tok);
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
    dsa::cpu_backend be{o.threads};
    if (o.fp8_dot) be.fp8_block_dot = *o.fp8_dot;
    be.pack_fp8_weights = o.fp8_pack;
    const auto t_load = clock_type::now();
    auto model = dsa::model::transformer<dsa::cpu_backend>::load(o.model, be);
    const double load_s = std::chrono::duration<double>(clock_type::now() - t_load).count();
    const dsa::model::config& cfg = model.config();

    for (std::size_t i = 0; i < o.prompt.size(); ++i) {
      if (o.prompt[i] >= cfg.vocab_size) {
        throw dsa_tools::usage_error{"prompt token " + std::to_string(i) + " = " + std::to_string(o.prompt[i]) +
                                     "; expected an id in [0, vocab_size = " + std::to_string(cfg.vocab_size) + ")"};
      }
    }
    const std::int64_t total = static_cast<std::int64_t>(o.prompt.size()) + o.max_new_tokens;
    if (total > cfg.max_position_embeddings) {
      throw dsa_tools::usage_error{"prompt + max-new-tokens = " + std::to_string(total) +
                                   " tokens; expected at most max_position_embeddings = " +
                                   std::to_string(cfg.max_position_embeddings)};
    }

    std::optional<dsa::model::sampler> sampler;
    if (o.temperature > 0.0) {
      sampler.emplace(dsa::model::sampling_params{static_cast<float>(o.temperature), static_cast<float>(o.top_p.value_or(1.0))},
                      o.seed.value_or(0));
    }
    auto next_token = [&](const std::vector<float>& logits) {
      return sampler ? (*sampler)(logits) : dsa::model::greedy_token(logits);
    };

    std::cout << "model: " << dsa::quoted(o.model.string()) << " (loaded in " << fixed(load_s, 3) << " s)\n  " << cfg.to_string() << "\n";
    std::cout << "threads: " << dsa::cpu_detail::thread_count(be)
              << "; fp8 block dots: " << (be.fp8_block_dot == dsa::fp8_dot::fp32 ? "fp32" : "exact")
              << (be.pack_fp8_weights ? ", packed" : ", unpacked")
              << "; prompt: " << o.prompt.size() << " tokens; sampling: ";
    if (sampler) {
      std::cout << "temperature " << sampler->params().temperature << ", top-p " << sampler->params().top_p << ", seed "
                << o.seed.value_or(0) << "\n";
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

    auto seq = model.new_sequence(total);
    model.reset_phase_times();
    std::vector<float> logits = model.forward(seq, o.prompt, prefill_opt);
    const double prefill_s = std::chrono::duration<double>(clock_type::now() - t_prefill).count();
    if (reported && tty) std::cerr << "\n";
    const dsa::model::phase_times prefill_times = model.phase_times();

    std::vector<std::int32_t> generated;
    const auto t_decode = clock_type::now();
    std::int64_t decode_steps = 0;
    while (static_cast<std::int64_t>(generated.size()) < o.max_new_tokens) {
      if (!generated.empty()) {
        const std::int32_t last = generated.back();
        logits = model.forward(seq, std::span<const std::int32_t>(&last, 1));
        ++decode_steps;
      }
      generated.push_back(next_token(logits));
      if (o.stop_at_eos && cfg.eos_token_id && generated.back() == *cfg.eos_token_id) break;
    }
    const double decode_s = std::chrono::duration<double>(clock_type::now() - t_decode).count();
    const dsa::model::phase_times decode_times = minus(model.phase_times(), prefill_times);

    std::cout << "generated ids:";
    for (const std::int32_t id : generated) std::cout << ' ' << id;
    std::cout << "\n";
    print_stage("prefill", static_cast<std::int64_t>(o.prompt.size()), prefill_s, prefill_times);
    print_stage("decode", decode_steps, decode_s, decode_times);
    if (decode_steps > 0 && decode_s > 0.0) {
      // Mean cache bytes over the steps: step j (1 .. steps) attends over prompt + j positions.
      const decode_bytes db = decode_bytes_of(model.weights());
      double cache = 0;
      const double k = static_cast<double>(cfg.index_topk);
      for (std::int64_t j = 1; j <= decode_steps; ++j) {
        const double len = static_cast<double>(static_cast<std::int64_t>(o.prompt.size()) + j);
        cache += db.cache_fixed * std::min(k, len) + db.cache_per_key * len;
      }
      cache /= static_cast<double>(decode_steps);
      const double tps = static_cast<double>(decode_steps) / decode_s;
      std::cout << "  weights: " << megabytes(db.weights) << " read per token (+ " << megabytes(cache)
                << " of KV and indexer cache) = " << fixed(db.weights * tps / 1e9, 2) << " GB/s of weights ("
                << fixed((db.weights + cache) * tps / 1e9, 2) << " GB/s with the cache)\n";
    }
    std::cout << "memory: kv cache " << fixed(static_cast<double>(seq.cache_bytes()) / (1 << 20), 2)
              << " MiB for " << seq.length() << " tokens, peak RSS " << fixed(static_cast<double>(peak_rss_bytes()) / (1 << 20), 1)
              << " MiB\n";
    if (const auto& site = seq.first_nonfinite()) {
      std::cout.flush();
      std::cerr << "dsa_run: warning: the model's values stopped being finite in " << site->to_string()
                << "; the logits stayed finite, but the run is not a valid result (a weight or scale too large "
                   "for the arithmetic?)\n";
      return 3;
    }
    return 0;
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
