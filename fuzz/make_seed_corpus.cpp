// Writes the seed corpora of fuzz/corpus/ (checked in; rerun after a format change):
//
//   dsa_fuzz_make_seeds <fuzz/corpus>
//
// safetensors/ and golden/ seeds are written by dsa::write_safetensors (small valid files, one
// golden-format file per case group of dsa_validate), then a few malformed variants of them;
// config/ holds the golden tiny model's config.json and variants; checkpoint_index/ index files
// for the two shards fuzz_checkpoint_index creates; ops/ a few byte strings.
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "dsa/core/types.hpp"
#include "dsa/model/safetensors.hpp"
#include "model_recipe.hpp"

namespace fs = std::filesystem;

namespace {

struct tensor_spec {
  std::string name;
  dsa::dtype type;
  std::vector<dsa::index_t> shape;
};

// Deterministic, varied contents: small floats as the dtype stores them.
std::vector<std::byte> contents(const tensor_spec& t, std::uint32_t seed) {
  std::size_t n = 1;
  for (auto d : t.shape) n *= static_cast<std::size_t>(d);
  std::vector<std::byte> out(n * dsa::dtype_size(t.type));
  std::uint32_t x = seed * 2654435761u + 12345u;
  for (std::size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    const float f = static_cast<float>(static_cast<int>(x >> 20) - 2048) / 512.0f;
    std::byte* p = out.data() + i * dsa::dtype_size(t.type);
    switch (t.type) {
      case dsa::dtype::f32: std::memcpy(p, &f, 4); break;
      case dsa::dtype::bf16: {
        const auto b = dsa::bf16(f).bits;
        std::memcpy(p, &b, 2);
        break;
      }
      case dsa::dtype::f8_e4m3: *p = static_cast<std::byte>(dsa::fp8_e4m3(f).bits); break;
      case dsa::dtype::i32: {
        const std::int32_t v = static_cast<std::int32_t>((x >> 24) % 8) - 1;
        std::memcpy(p, &v, 4);
        break;
      }
      default: break;
    }
  }
  return out;
}

void write(const fs::path& file, const std::vector<tensor_spec>& specs,
           const std::vector<std::pair<std::string, std::vector<std::byte>>>& overrides = {}) {
  std::vector<std::vector<std::byte>> data;
  std::vector<dsa::safetensors_entry> entries;
  std::uint32_t seed = 1;
  for (const auto& s : specs) {
    data.push_back(contents(s, seed++));
    for (const auto& [name, bytes] : overrides) {
      if (name == s.name) data.back() = bytes;
    }
  }
  for (std::size_t i = 0; i < specs.size(); ++i) {
    entries.push_back({specs[i].name, specs[i].type, specs[i].shape, std::span<const std::byte>(data[i])});
  }
  dsa::write_safetensors(file, entries, {{"format", "pt"}});
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void put(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

template <class T>
std::vector<std::byte> bytes_of(std::initializer_list<T> v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  std::memcpy(b.data(), std::data(v), b.size());
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: dsa_fuzz_make_seeds <fuzz/corpus>\n");
    return 2;
  }
  const fs::path root = argv[1];
  using dsa::dtype;

  // ---- safetensors -------------------------------------------------------------------------
  const fs::path st = root / "safetensors";
  fs::create_directories(st);
  write(st / "mixed.safetensors", {{"a.weight", dtype::f8_e4m3, {4, 8}},
                                   {"a.weight_scale_inv", dtype::f32, {1, 1}},
                                   {"b", dtype::bf16, {3, 2}},
                                   {"c", dtype::i32, {2}},
                                   {"empty", dtype::f32, {0, 4}},
                                   {"scalar", dtype::f32, {}}});
  write(st / "rank3.safetensors", {{"x", dtype::f32, {2, 2, 2}}});
  {
    const std::string good = read(st / "mixed.safetensors");
    put(st / "truncated.safetensors", good.substr(0, good.size() - 7));
    std::string huge = good;
    huge[7] = '\x7f';  // header length beyond the file
    put(st / "header_length.safetensors", huge);
    const std::string h1 = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
    std::string overlap(8, '\0');
    overlap[0] = static_cast<char>(h1.size());
    put(st / "overlap.safetensors", overlap + h1 + std::string(12, '\1'));
    const std::string h2 = R"({"a":{"dtype":"Q4","shape":[18446744073709551615,2],"data_offsets":[0,8]}})";
    std::string bad(8, '\0');
    bad[0] = static_cast<char>(h2.size());
    put(st / "bad_dtype.safetensors", bad + h2 + std::string(8, '\0'));
  }

  // ---- golden (dsa_validate's case groups) ---------------------------------------------------
  const fs::path gd = root / "golden";
  fs::create_directories(gd);
  const std::vector<std::pair<std::string, std::vector<tensor_spec>>> groups = {
      {"hadamard", {{"hadamard.x", dtype::bf16, {2, 128}}, {"hadamard.y", dtype::bf16, {2, 128}}}},
      {"hadamard_f32", {{"hadamard_f32.x", dtype::f32, {2, 16}}, {"hadamard_f32.y", dtype::f32, {2, 16}}}},
      {"act_quant",
       {{"act_quant.x", dtype::bf16, {2, 128}},
        {"act_quant.ue8m0.q", dtype::f8_e4m3, {2, 128}},
        {"act_quant.ue8m0.s", dtype::f32, {2, 1}},
        {"act_quant.fp32.q", dtype::f8_e4m3, {2, 128}},
        {"act_quant.fp32.s", dtype::f32, {2, 1}}}},
      {"weight_quant",
       {{"weight_quant.w", dtype::f32, {3, 5}}, {"weight_quant.q", dtype::f8_e4m3, {3, 5}},
        {"weight_quant.s", dtype::f32, {1, 1}}}},
      {"indexer",
       {{"indexer.q", dtype::f8_e4m3, {2, 2, 4}},
        {"indexer.w", dtype::f32, {2, 2}},
        {"indexer.k", dtype::f8_e4m3, {3, 4}},
        {"indexer.k_scale", dtype::f32, {3}},
        {"indexer.score", dtype::f32, {2, 3}}}},
      {"topk",
       {{"topk.score", dtype::f32, {2, 6}},
        {"topk.ends", dtype::i32, {2}},
        {"topk.k", dtype::i32, {1}},
        {"topk.indices", dtype::i32, {2, 3}}}},
      {"sparse_mla",
       {{"sparse_mla.q", dtype::bf16, {1, 2, 8}},
        {"sparse_mla.kv", dtype::bf16, {3, 8}},
        {"sparse_mla.indices", dtype::i32, {1, 2}},
        {"sparse_mla.scale", dtype::f32, {1}},
        {"sparse_mla.out", dtype::f32, {1, 2, 4}},
        {"sparse_mla.lse", dtype::f32, {1, 2}}}},
      {"kl_dense",
       {{"kl_dense.attn", dtype::f32, {2, 1, 3}},
        {"kl_dense.index", dtype::f32, {2, 3}},
        {"kl_dense.loss", dtype::f32, {1}},
        {"kl_dense.grad_index", dtype::f32, {2, 3}}}},
      {"kl_sparse",
       {{"kl_sparse.attn", dtype::f32, {2, 1, 3}},
        {"kl_sparse.index", dtype::f32, {2, 3}},
        {"kl_sparse.topk", dtype::i32, {2, 2}},
        {"kl_sparse.loss", dtype::f32, {1}},
        {"kl_sparse.grad_index", dtype::f32, {2, 3}}}},
  };
  const std::vector<std::pair<std::string, std::vector<std::byte>>> overrides = {
      {"topk.ends", bytes_of<std::int32_t>({6, 2})},
      {"topk.k", bytes_of<std::int32_t>({3})},
      {"sparse_mla.scale", bytes_of<float>({0.35f})},
      {"sparse_mla.indices", bytes_of<std::int32_t>({2, -1})},
      {"kl_sparse.topk", bytes_of<std::int32_t>({0, -1, 1, 2})}};
  for (const auto& [g, specs] : groups) write(gd / (g + ".safetensors"), specs, overrides);

  // ---- config.json ---------------------------------------------------------------------------
  const fs::path cf = root / "config";
  fs::create_directories(cf);
  const fs::path tiny = fs::path(DSA_SOURCE_DIR) / "tests/data/tiny-dsv32/config.json";
  const std::string cfg = read(tiny);
  put(cf / "tiny-dsv32.json", cfg);
  put(cf / "truncated.json", cfg.substr(0, cfg.size() / 2));
  put(cf / "no_quantization.json", R"({"model_type":"deepseek_v32","vocab_size":8,"hidden_size":128})");
  put(cf / "duplicate.json", R"({"model_type":"deepseek_v32","model_type":"deepseek_v3"})");

  // ---- checkpoint_index ----------------------------------------------------------------------
  const fs::path ix = root / "checkpoint_index";
  fs::create_directories(ix);
  put(ix / "valid.json",
      R"({"metadata":{"total_size":32},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})");
  put(ix / "escape.json", R"({"weight_map":{"a":"../model-00001-of-00002.safetensors"}})");
  put(ix / "wrong_shard.json", R"({"weight_map":{"b":"model-00001-of-00002.safetensors"}})");

  // ---- ops -----------------------------------------------------------------------------------
  const fs::path op = root / "ops";
  fs::create_directories(op);
  for (int i = 0; i < 25; ++i) {
    std::string s(48, '\0');
    for (std::size_t j = 0; j < s.size(); ++j) s[j] = static_cast<char>((i * 131 + static_cast<int>(j) * 29) & 0xff);
    s.back() = static_cast<char>(i);  // the op selector is read from the end
    put(op / ("op" + std::to_string(i)), s);
  }

  // ---- model (recipes over the golden tiny model, model_recipe.hpp) --------------------------
  const fs::path md = root / "model";
  fs::create_directories(md);
  {
    const dsa_fuzz::model_base base(fs::path(DSA_SOURCE_DIR) / "tests/data/tiny-dsv32");
    const auto index_of = [&](const std::string& name) {
      const auto& ts = base.file.tensors();
      for (std::size_t i = 0; i < ts.size(); ++i) {
        if (ts[i].name == name) return static_cast<std::uint16_t>(i);
      }
      std::fprintf(stderr, "no tensor %s in the base checkpoint\n", name.c_str());
      std::exit(2);
    };
    const auto put_recipe = [&](const std::string& file, const dsa_fuzz::recipe_writer& w) {
      put(md / file, std::string(w.bytes().begin(), w.bytes().end()));
    };
    const std::uint32_t bf16_huge = 0x7F61u;      // 2.99e38
    const std::uint32_t f32_huge = 0x7F61B1E6u;   // 3.0e38
    put_recipe("intact", dsa_fuzz::recipe_writer{});
    // Class 1 of issue 33: finite weights that overflow at run time.
    put_recipe("weights_proj_huge",
               dsa_fuzz::recipe_writer{}.fill(index_of("model.layers.0.self_attn.indexer.weights_proj.weight"), bf16_huge));
    put_recipe("scale_inv_huge",
               dsa_fuzz::recipe_writer{}.fill(index_of("model.layers.1.self_attn.q_b_proj.weight_scale_inv"), f32_huge));
    put_recipe("k_norm_huge",
               dsa_fuzz::recipe_writer{}.fill(index_of("model.layers.2.self_attn.indexer.k_norm.weight"), f32_huge));
    // Class 2: a config contradicting the checkpoint.
    put_recipe("no_shared_experts", dsa_fuzz::recipe_writer{}.set_int("n_shared_experts", 0));
    put_recipe("tied_with_lm_head", dsa_fuzz::recipe_writer{}.set_bool("tie_word_embeddings", true));
    put_recipe("unused_tensor",
               dsa_fuzz::recipe_writer{}.add("model.layers.0.mlp.experts.0.gate_proj.weight", dsa::dtype::f8_e4m3, {8, 8}, 0x38));
    put_recipe("fewer_layers", dsa_fuzz::recipe_writer{}.set_int("num_hidden_layers", 2));
    // Class 6: text that must be echoed escaped and bounded.
    put_recipe("model_type_escapes", dsa_fuzz::recipe_writer{}.set_string("model_type", "deepseek\x1b[2J\xc2\x9b" "31m"));
    put_recipe("long_tensor_name", dsa_fuzz::recipe_writer{}.add(std::string(3000, 'w') + "\x1b]0;x\x07", dsa::dtype::f32, {2}, 0));
  }
  return 0;
}
