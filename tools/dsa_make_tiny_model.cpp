// dsa_make_tiny_model: writes a random DeepSeek-V3.2-shaped checkpoint (config.json +
// model.safetensors in the Hugging Face layout) that dsa::model::transformer loads and runs.
//
//   dsa_make_tiny_model DIR [--seed N] [--layers N] [--hidden N] [--experts N] [--vocab N] ...
//
// Defaults are the golden tiny model's sizes (tests/data/tiny-dsv32); the generator is
// dsa::model::write_random_checkpoint (include/dsa/model/random_checkpoint.hpp).
// Exit codes: 0 written; 2 usage error, invalid configuration, a checkpoint larger than --max-gb
// or than this machine's memory can generate, or I/O error. Sizes are checked, from the options
// alone, before anything is allocated or written.
#include <cstdint>
#include <exception>
#include <filesystem>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

#include "cli_args.hpp"
#include "dsa/model/random_checkpoint.hpp"

namespace {

/// --max-gb's default: ten times the largest checkpoint the documentation writes (V3.2's layer
/// geometry at 2 layers, 5.96 GB), so no documented use needs the flag while a size typed
/// 1000 times too large is caught before it fills the disk.
constexpr std::int64_t default_max_gb = 64;

const char* const usage_text =
    "usage: dsa_make_tiny_model DIR [--seed N] [size options]\n"
    "\n"
    "Writes DIR/config.json and DIR/model.safetensors: a DeepSeek-V3.2 checkpoint with random\n"
    "weights (FP8 block-quantized linears, as deepseek-ai/DeepSeek-V3.2) that dsa_run can load.\n"
    "The same seed and sizes always give the same bytes. Defaults are the golden tiny model's.\n"
    "DeepSeek-V3.2's layer geometry with fewer layers and experts (docs/performance.md):\n"
    "  --layers 2 --hidden 7168 --intermediate 18432 --moe-intermediate 2048 --heads 128\n"
    "  --q-lora 1536 --kv-lora 512 --qk-nope 128 --qk-rope 64 --v-head 128 --experts 32\n"
    "  --groups 8 --topk-groups 4 --experts-per-token 8 --index-heads 64 --index-topk 2048\n"
    "  --vocab 129280 --max-position 163840  (5.96 GB, written as shards)\n"
    "\n"
    "  --seed N               random seed (default 1)\n"
    "  --layers N             num_hidden_layers, at most 1024 (3)\n"
    "  --dense-layers N       first_k_dense_replace: leading dense layers (1)\n"
    "  --hidden N             hidden_size, a multiple of 128 (256)\n"
    "  --intermediate N       intermediate_size of the dense layers, a multiple of 128 (512)\n"
    "  --moe-intermediate N   moe_intermediate_size of each expert, a multiple of 128 (128)\n"
    "  --heads N              num_attention_heads (4)\n"
    "  --q-lora N             q_lora_rank, a multiple of 128 (256)\n"
    "  --kv-lora N            kv_lora_rank, a multiple of 128 (256)\n"
    "  --qk-nope N            qk_nope_head_dim: the non-rotary part of a query/key head (64)\n"
    "  --qk-rope N            qk_rope_head_dim: the rotary part, even (64)\n"
    "  --v-head N             v_head_dim: the value head (64)\n"
    "  --experts N            n_routed_experts, a multiple of --groups (16)\n"
    "  --groups N             n_group (4)\n"
    "  --topk-groups N        topk_group (2)\n"
    "  --experts-per-token N  num_experts_per_tok (4)\n"
    "  --shared-experts N     n_shared_experts (1)\n"
    "  --index-heads N        index_n_heads (8)\n"
    "  --index-topk N         index_topk: keys each query attends to, at most --max-position (32)\n"
    "  --vocab N              vocab_size, at most 2^24 (512)\n"
    "  --max-position N       max_position_embeddings; > 4096 turns YaRN on (8192)\n"
    "  --threads N            threads for the generation and quantization (default: all)\n"
    "  --shard-mb N           write shards (one per layer) when the tensors exceed N MiB (4096)\n"
    "  --max-gb N             refuse a checkpoint whose tensors exceed N GiB (64): a typo in a size\n"
    "                         must not fill the disk; raise it to write a larger model on purpose\n"
    "  -h, --help             this text\n";

}  // namespace

int main(int argc, char** argv) {
  using dsa_tools::parse_int;
  namespace fs = std::filesystem;
  constexpr std::int64_t big = std::numeric_limits<std::int32_t>::max();
  try {
    dsa::model::config cfg = dsa::model::tiny_config();
    std::uint64_t seed = 1;
    int threads = 0;
    std::int64_t shard_mb = static_cast<std::int64_t>(dsa::model::random_checkpoint_shard_bytes >> 20);
    std::int64_t max_gb = default_max_gb;
    fs::path dir;
    for (int i = 1; i < argc; ++i) {
      const std::string_view a = argv[i];
      if (a == "-h" || a == "--help") {
        std::cout << usage_text;
        return 0;
      }
      if (a.size() > 1 && a[0] == '-') {
        if (i + 1 >= argc) throw dsa_tools::usage_error{dsa::quoted(a) + " needs a value"};
        const std::string_view v = argv[++i];
        auto size = [&](dsa::index_t& field, std::int64_t lo) { field = parse_int(a, v, lo, big); };
        if (a == "--seed") {
          seed = dsa_tools::parse_u64(a, v);
        } else if (a == "--layers") {
          size(cfg.num_hidden_layers, 1);
        } else if (a == "--dense-layers") {
          size(cfg.first_k_dense_replace, 0);
        } else if (a == "--hidden") {
          size(cfg.hidden_size, 1);
        } else if (a == "--intermediate") {
          size(cfg.intermediate_size, 1);
        } else if (a == "--moe-intermediate") {
          size(cfg.moe_intermediate_size, 1);
        } else if (a == "--heads") {
          size(cfg.num_attention_heads, 1);
          cfg.num_key_value_heads = cfg.num_attention_heads;
        } else if (a == "--q-lora") {
          size(cfg.q_lora_rank, 1);
        } else if (a == "--kv-lora") {
          size(cfg.kv_lora_rank, 1);
        } else if (a == "--qk-nope") {
          size(cfg.qk_nope_head_dim, 1);
        } else if (a == "--qk-rope") {
          size(cfg.qk_rope_head_dim, 1);
        } else if (a == "--v-head") {
          size(cfg.v_head_dim, 1);
        } else if (a == "--shard-mb") {
          shard_mb = parse_int(a, v, 1, std::int64_t{1} << 40);
        } else if (a == "--max-gb") {
          max_gb = parse_int(a, v, 1, std::int64_t{1} << 33);  // << 30 stays below 2^64
        } else if (a == "--experts") {
          size(cfg.n_routed_experts, 1);
        } else if (a == "--groups") {
          size(cfg.n_group, 1);
        } else if (a == "--topk-groups") {
          size(cfg.topk_group, 1);
        } else if (a == "--experts-per-token") {
          size(cfg.num_experts_per_tok, 1);
        } else if (a == "--shared-experts") {
          size(cfg.n_shared_experts, 0);
        } else if (a == "--index-heads") {
          size(cfg.index_n_heads, 1);
        } else if (a == "--index-topk") {
          size(cfg.index_topk, 1);
        } else if (a == "--vocab") {
          size(cfg.vocab_size, 2);  // bos 0 and eos 1 must be ids of the vocabulary
        } else if (a == "--max-position") {
          size(cfg.max_position_embeddings, 1);
        } else if (a == "--threads") {
          threads = static_cast<int>(parse_int(a, v, 1, 4096));
        } else {
          throw dsa_tools::usage_error{"unknown option " + dsa::quoted(a)};
        }
        continue;
      }
      if (!dir.empty()) {
        throw dsa_tools::usage_error{"more than one DIR: " + dsa::quoted(dir.native()) + " and " + dsa::quoted(a)};
      }
      dir = a;
    }
    if (dir.empty()) throw dsa_tools::usage_error{"missing DIR"};
    // The loader's own checks (config::validate), so that no model it would refuse is written.
    cfg.validate("dsa_make_tiny_model");
    const dsa::cpu_backend be{threads};
    const std::uint64_t shard_bytes = static_cast<std::uint64_t>(shard_mb) << 20;
    // The size of every tensor from the options alone (checked 64-bit sums), against --max-gb,
    // before anything is allocated: --vocab 16777216 --hidden 7168 once started building a
    // 240 GB embedding and died out of memory. write_random_checkpoint then checks the memory
    // the generation holds against this machine's (random_checkpoint_memory_limit).
    const dsa::model::random_checkpoint_footprint size = dsa::model::random_checkpoint_size(cfg, be, shard_bytes);
    const std::uint64_t max_bytes = static_cast<std::uint64_t>(max_gb) << 30;
    if (size.overflow || size.total_bytes > max_bytes) {
      namespace rc = dsa::model::detail;
      std::string m = "checkpoint size = " + rc::format_bytes(size.total_bytes, size.overflow);
      if (!size.overflow) {
        m += ", its largest unit (" + size.largest_unit + ") " + rc::format_bytes(size.largest_unit_bytes, false);
      }
      m += "; expected at most " + std::to_string(max_gb) + " GiB (--max-gb " + std::to_string(max_gb) + "): ";
      m += size.overflow ? "reduce the sizes" : "pass a larger --max-gb to write a checkpoint this size on purpose";
      throw std::runtime_error(m);
    }
    dsa::model::write_random_checkpoint(dir, cfg, seed, be, shard_bytes);
    // What the loader will read: the index's shards, or the single file.
    const auto ck = dsa::safetensors_checkpoint::open(dir);
    std::uint64_t bytes = 0;
    for (const auto& shard : ck.shards()) bytes += fs::file_size(shard.path());
    std::cout << "wrote " << dsa::detail::quoted_path(dir / "config.json") << " and "
              << dsa::detail::quoted_path(ck.path());
    if (ck.shards().size() > 1) std::cout << " (" << ck.shards().size() << " shards)";
    std::cout << " (" << bytes << " bytes, seed " << seed << ")\n" << cfg.to_string() << "\n";
    return 0;
  } catch (const dsa_tools::usage_error& e) {
    std::cerr << "dsa_make_tiny_model: " << e.message << "\n\n" << usage_text;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dsa_make_tiny_model: " << e.what() << "\n";
    return 2;
  }
}
