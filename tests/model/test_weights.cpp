// dsa::model::weights on broken and re-packaged copies of tests/data/tiny-dsv32: every bad
// checkpoint is a dsa::error naming the file and the tensor; the MTP layer is ignored; a sharded
// copy gives the same logits bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/model/safetensors.hpp"
#include "dsa/model/transformer.hpp"
#include "dsa/model/weights.hpp"
#include "support/checkpoint_edit.hpp"

namespace fs = std::filesystem;

namespace {

using dsa::index_t;

using dsa_test::read_text;
using dsa_test::tiny_dir;
using dsa_test::write_checkpoint;
using dsa_test::write_text;
using tensors = dsa_test::checkpoint_tensors;

struct temp_dir : dsa_test::temp_dir {
  temp_dir() : dsa_test::temp_dir("dsa_test_weights") {}
};

// The message of the dsa::error that loading `dir` throws ("" if it loads).
std::string load_error(const fs::path& dir) {
  try {
    dsa::model::weights::load(dir);
  } catch (const dsa::error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A path as messages show it (dsa::quoted: the test's temporary paths need no escaping).
// Appended piece by piece: GCC 12 gives a false -Wrestrict on "'" + p.string() + "'".
std::string quoted(const fs::path& p) {
  std::string q = "'";
  q += p.string();
  q += '\'';
  return q;
}

// Logits of the golden prompt's first 40 tokens, then one decode step.
std::vector<float> logits_of(const fs::path& dir) {
  const auto f = dsa::safetensors_file::open(tiny_dir / "expected.safetensors");
  const auto pv = f.view<std::int64_t, 2>("prompt");
  auto m = dsa::model::transformer<dsa::cpu_backend>::load(dir, dsa::cpu_backend{2});
  auto seq = m.new_sequence(41);
  std::vector<float> out = m.forward(seq, std::span<const std::int64_t>(pv.data_handle(), 40));
  const std::vector<float> step = m.forward(seq, std::span<const std::int64_t>(pv.data_handle() + 40, 1));
  out.insert(out.end(), step.begin(), step.end());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Rewrites the JSON header of a safetensors file (the data section is kept as it is).
void edit_header(const fs::path& file, const std::function<void(nlohmann::json&)>& edit) {
  const std::string bytes = read_text(file);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t(static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)])) << (8 * i);
  nlohmann::json h = nlohmann::json::parse(bytes.substr(8, n));
  edit(h);
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[static_cast<std::size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xFF);
  write_text(file, len + text + bytes.substr(8 + n));
}

}  // namespace

TEST_CASE("the intact copy loads and reproduces the original's logits") {
  temp_dir dir;
  tensors t;
  write_checkpoint(dir.path, t);
  CHECK(load_error(dir.path).empty());
  CHECK(same_bits(logits_of(dir.path), logits_of(tiny_dir)));
}

TEST_CASE("a missing tensor names the file and the tensor") {
  temp_dir dir;
  const std::string file = quoted(dir.path / "model.safetensors");
  for (const char* name : {"model.layers.1.self_attn.q_a_proj.weight", "model.layers.2.mlp.experts.15.up_proj.weight_scale_inv",
                           "model.layers.0.self_attn.indexer.k_norm.bias", "lm_head.weight", "model.norm.weight"}) {
    CAPTURE(name);
    tensors t;
    t.remove(name);
    write_checkpoint(dir.path, t);
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    CHECK(contains(e, "dsa::model::weights: " + file + ": tensor '" + name + "' presence = missing"));
  }
}

TEST_CASE("a wrong shape names the file, the tensor, both shapes and the config keys") {
  temp_dir dir;
  const std::string file = quoted(dir.path / "model.safetensors");
  {
    tensors t;
    t.set("model.layers.2.mlp.experts.3.down_proj.weight", dsa::dtype::f8_e4m3, {256, 127});
    write_checkpoint(dir.path, t);
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    CHECK(contains(e, file + ": tensor 'model.layers.2.mlp.experts.3.down_proj.weight' shape = [256, 127]; expected "
                             "[256, 128] (hidden_size, moe_intermediate_size)"));
  }
  {
    tensors t;
    t.set("model.layers.1.self_attn.kv_a_layernorm.weight", dsa::dtype::f32, {255});
    write_checkpoint(dir.path, t);
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    CHECK(contains(e, file + ": tensor 'model.layers.1.self_attn.kv_a_layernorm.weight' shape = [255]; expected [256] "
                             "(kv_lora_rank)"));
  }
  {
    tensors t;
    t.set("model.layers.0.self_attn.o_proj.weight_scale_inv", dsa::dtype::f32, {2, 3});
    write_checkpoint(dir.path, t);
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    CHECK(contains(e, file + ": tensor 'model.layers.0.self_attn.o_proj.weight_scale_inv' shape = [2, 3]; expected [2, 2] "
                             "(FP8 block scales of model.layers.0.self_attn.o_proj.weight)"));
  }
}

TEST_CASE("a wrong dtype names the file and the tensor") {
  temp_dir dir;
  const std::string file = quoted(dir.path / "model.safetensors");
  {
    tensors t;
    t.set("model.layers.1.self_attn.q_b_proj.weight", dsa::dtype::bf16, {4 * 128, 256});
    write_checkpoint(dir.path, t);
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    CHECK(contains(e, file + ": tensor 'model.layers.1.self_attn.q_b_proj.weight' dtype = BF16; expected F8_E4M3"));
  }
  {
    tensors t;
    t.set("model.layers.0.post_attention_layernorm.weight", dsa::dtype::i32, {256});
    write_checkpoint(dir.path, t);
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    CHECK(contains(e, file + ": tensor 'model.layers.0.post_attention_layernorm.weight' dtype = I32; expected F32 or BF16"));
  }
  {
    tensors t;
    t.set("model.embed_tokens.weight", dsa::dtype::f32, {512, 256});
    write_checkpoint(dir.path, t);
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    CHECK(contains(e, file + ": tensor 'model.embed_tokens.weight' dtype = F32; expected BF16"));
  }
}

TEST_CASE("a truncated file names the file and the first tensor past the end") {
  temp_dir dir;
  tensors t;
  write_checkpoint(dir.path, t);
  const fs::path file = dir.path / "model.safetensors";
  const std::string full = read_text(file);
  std::uint64_t data_offset = 0, data_size = 0;
  std::string victim;
  {
    const auto f = dsa::safetensors_file::open(file);
    data_offset = f.data_offset();
    data_size = f.file_size() - data_offset;
    // Cut the data section in half: the header then describes tensors past the end. The reader
    // checks entries in name order, so the first one (by name) that ends past the cut is named.
    for (const dsa::tensor_info& ti : f.tensors()) {
      if (ti.end > data_size / 2) {
        victim = ti.name;
        break;
      }
    }
  }
  REQUIRE(!victim.empty());
  write_text(file, full.substr(0, static_cast<std::size_t>(data_offset + data_size / 2)));
  const std::string e = load_error(dir.path);
  CAPTURE(e);
  CHECK(contains(e, "dsa::safetensors: " + quoted(file) + ": tensor '" + victim + "': data_offsets ["));
  CHECK(contains(e, "the file is truncated or the header is wrong"));
  // Cut inside the header.
  write_text(file, full.substr(0, 100));
  const std::string h = load_error(dir.path);
  CAPTURE(h);
  CHECK(contains(h, quoted(file) + ": header length = "));
  CHECK(contains(h, "the file is truncated or not safetensors"));
}

TEST_CASE("a header lying about sizes names the file and the tensor") {
  temp_dir dir;
  tensors t;
  write_checkpoint(dir.path, t);
  const fs::path file = dir.path / "model.safetensors";
  const std::string good = read_text(file);
  SUBCASE("shape bigger than its bytes") {
    edit_header(file, [](nlohmann::json& h) { h["model.norm.weight"]["shape"] = {300}; });
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    CHECK(contains(e, quoted(file) + ": tensor 'model.norm.weight': data_offsets ["));
    CHECK(contains(e, "= 1024 bytes; expected 1200 bytes (F32 [300])"));
  }
  SUBCASE("data_offsets past the end") {
    edit_header(file, [](nlohmann::json& h) {
      auto& off = h["model.layers.0.mlp.down_proj.weight"]["data_offsets"];
      const std::uint64_t size = off[1].get<std::uint64_t>() - off[0].get<std::uint64_t>();
      off = {std::uint64_t{1} << 40, (std::uint64_t{1} << 40) + size};
    });
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    CHECK(contains(e, quoted(file) + ": tensor 'model.layers.0.mlp.down_proj.weight': data_offsets [1099511627776, "));
    CHECK(contains(e, "the file is truncated or the header is wrong"));
  }
  SUBCASE("two tensors claiming the same bytes") {
    edit_header(file, [](nlohmann::json& h) {
      h["model.layers.1.input_layernorm.weight"]["data_offsets"] = h["model.layers.0.input_layernorm.weight"]["data_offsets"];
    });
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    CHECK(contains(e, quoted(file) + ": tensor 'model.layers."));
    CHECK(contains(e, "overlap tensor 'model.layers."));
  }
  SUBCASE("the header length field") {
    std::string bad = good;
    bad[0] = static_cast<char>(0xFF);
    bad[1] = static_cast<char>(0xFF);
    bad[2] = static_cast<char>(0x7F);
    write_text(file, bad);
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    CHECK(contains(e, quoted(file) + ": header length = "));
  }
}

TEST_CASE("a config.json contradicting the tensors names the file and the tensor") {
  temp_dir dir;
  const std::string file = quoted(dir.path / "model.safetensors");
  struct edit_case {
    const char* key;
    int value;
    const char* message;
  };
  for (const auto& [key, value, message] : std::vector<edit_case>{
           {"hidden_size", 384,
            "tensor 'model.embed_tokens.weight' shape = [512, 256]; expected [512, 384] (vocab_size, hidden_size)"},
           {"n_routed_experts", 8,
            "tensor 'model.layers.1.mlp.gate.weight' shape = [16, 256]; expected [8, 256] (n_routed_experts, hidden_size)"},
           {"vocab_size", 1024, "tensor 'model.embed_tokens.weight' shape = [512, 256]; expected [1024, 256]"},
           {"num_hidden_layers", 4, "tensor 'model.layers.3.input_layernorm.weight' presence = missing"},
           // The most layers a config may claim: the loader sizes nothing by it before the tensors.
           {"num_hidden_layers", 1024, "tensor 'model.layers.3.input_layernorm.weight' presence = missing"},
           // Fewer layers than stored would run a truncated model: refused (num_layers truncates on purpose).
           {"num_hidden_layers", 2,
            "config.json num_hidden_layers = 2; expected the checkpoint's layer count: it stores model.layers.0 .. 2 "
            "(3 layers, 0 of them MTP per num_nextn_predict_layers); to run fewer layers, load with num_layers"},
           {"q_lora_rank", 128, "tensor 'model.layers.0.self_attn.q_a_proj.weight' shape = [256, 256]; expected [128, 256]"},
           {"moe_intermediate_size", 256,
            "tensor 'model.layers.1.mlp.experts.0.gate_proj.weight' shape = [128, 256]; expected [256, 256]"},
           {"index_n_heads", 4,
            "tensor 'model.layers.0.self_attn.indexer.wq_b.weight' shape = [1024, 256]; expected [512, 256]"},
       }) {
    CAPTURE(key);
    tensors t;
    write_checkpoint(dir.path, t, [&, key = key, value = value](nlohmann::json& c) { c[key] = value; });
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    CHECK(contains(e, "dsa::model::weights: " + file + ": "));
    CHECK(contains(e, message));
  }
}

TEST_CASE("a NaN or infinite weight is refused at load, naming the tensor and the element (issue 14)") {
  // Each of these made a layer's attention vanish, or poisoned it, with dsa_run printing
  // plausible tokens: a NaN in the indexer's weights_proj (index scores NaN, nothing selected),
  // a norm weight, a block scale, an FP8 NaN code.
  temp_dir dir;
  const std::string file = quoted(dir.path / "model.safetensors");
  const auto f32 = [](float v) {
    std::vector<std::byte> b(4);
    std::memcpy(b.data(), &v, 4);
    return b;
  };
  const auto bytes = [](std::initializer_list<unsigned> v) {
    std::vector<std::byte> b;
    for (const unsigned x : v) b.push_back(static_cast<std::byte>(x));
    return b;
  };
  struct bad_case {
    const char* name;
    std::size_t offset;
    std::vector<std::byte> value;
    const char* element;
  };
  tensors probe;
  const auto& ix = *probe.find("model.layers.0.self_attn.indexer.weights_proj.weight");
  REQUIRE(ix.type == dsa::dtype::bf16);
  const std::size_t ix_row = static_cast<std::size_t>(ix.shape[1]) * 2;
  const auto& norm = *probe.find("model.layers.1.input_layernorm.weight");
  const std::size_t norm_elem = dsa::dtype_size(norm.type);
  std::vector<std::byte> norm_inf = norm.type == dsa::dtype::f32 ? f32(std::numeric_limits<float>::infinity())
                                                                  : bytes({0x80, 0x7F});  // bf16 +inf
  const auto& fp8 = *probe.find("model.layers.2.mlp.experts.3.down_proj.weight");
  REQUIRE(fp8.type == dsa::dtype::f8_e4m3);
  const std::size_t fp8_row = static_cast<std::size_t>(fp8.shape[1]);
  const std::vector<bad_case> cases = {
      {"model.layers.0.self_attn.indexer.weights_proj.weight", 1 * ix_row + 2 * 2, bytes({0xC0, 0x7F}), "[1, 2]"},
      {"model.layers.1.input_layernorm.weight", 5 * norm_elem, norm_inf, "[5]"},
      {"model.layers.1.self_attn.q_b_proj.weight_scale_inv", 4, f32(std::numeric_limits<float>::quiet_NaN()), "[0, 1]"},
      {"model.layers.2.mlp.experts.3.down_proj.weight", 3 * fp8_row + 7, bytes({0xFF}), "[3, 7]"},
  };
  for (const bad_case& c : cases) {
    CAPTURE(c.name);
    tensors t;
    t.patch(c.name, c.offset, c.value);
    write_checkpoint(dir.path, t);
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    CHECK(contains(e, "dsa::model::weights: " + file + ": tensor '" + c.name + "' element " + c.element +
                          " = non-finite (NaN or inf); expected finite values"));
    // The transformer refuses it too; weight_check::none loads it (the user's explicit choice).
    CHECK_THROWS_AS(dsa::model::transformer<dsa::cpu_backend>::load(dir.path, dsa::cpu_backend{1}), dsa::error);
    CHECK_NOTHROW(dsa::model::weights::load(dir.path, -1, dsa::model::weight_check::none));
  }
}

TEST_CASE("first_non_finite finds exactly the NaN and infinite patterns of every float dtype") {
  using dsa::dtype;
  using dsa::model::first_non_finite;
  const auto at = [](dtype t, std::vector<std::uint8_t> b) {
    return first_non_finite(t, std::as_bytes(std::span<const std::uint8_t>(b)));
  };
  std::vector<std::uint8_t> codes(10000);
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>(i % 256 == 0x7F || i % 256 == 0xFF ? 0 : i);
  CHECK(at(dtype::f8_e4m3, codes) == -1);  // every other code, incl. 448 (0x7E) and subnormals, is finite
  codes[9000] = 0xFF;
  CHECK(at(dtype::f8_e4m3, codes) == 9000);  // in the third block of 4096
  codes[5] = 0x7F;
  CHECK(at(dtype::f8_e4m3, codes) == 5);
  CHECK(at(dtype::i8, codes) == -1);
  CHECK(at(dtype::bf16, {0x80, 0x7F}) == 0);        // +inf
  CHECK(at(dtype::bf16, {0x7F, 0x7F, 0x81, 0xFF}) == 1);  // max finite, then NaN
  CHECK(at(dtype::f32, {0xFF, 0xFF, 0x7F, 0x7F, 0x00, 0x00, 0x80, 0xFF}) == 1);  // FLT_MAX, then -inf
  CHECK(at(dtype::f16, {0xFF, 0x7B, 0x00, 0x7C}) == 1);  // 65504, then +inf
  CHECK(at(dtype::f64, {0, 0, 0, 0, 0, 0, 0xF0, 0x7F}) == 0);
  CHECK(at(dtype::i32, {0xFF, 0xFF, 0xFF, 0x7F}) == -1);
}

TEST_CASE("the MTP layer (index num_hidden_layers) is ignored") {
  temp_dir dir;
  tensors t;
  // DeepSeek's checkpoints carry the multi-token-prediction module as layer num_hidden_layers:
  // a full decoder layer plus enorm/hnorm/eh_proj/shared_head. Add one whose every value is NaN
  // (0xFF bytes), so that reading any of it would poison the logits.
  const std::vector<dsa::safetensors_entry> base = t.entries;
  for (const auto& e : base) {
    if (!e.name.starts_with("model.layers.2.")) continue;
    t.set("model.layers.3." + e.name.substr(std::string("model.layers.2.").size()), e.type, e.shape, 0xFF);
  }
  t.set("model.layers.3.enorm.weight", dsa::dtype::bf16, {256}, 0xFF);
  t.set("model.layers.3.hnorm.weight", dsa::dtype::bf16, {256}, 0xFF);
  t.set("model.layers.3.eh_proj.weight", dsa::dtype::f8_e4m3, {256, 512}, 0xFF);
  t.set("model.layers.3.eh_proj.weight_scale_inv", dsa::dtype::f32, {2, 4}, 0xFF);
  t.set("model.layers.3.shared_head.norm.weight", dsa::dtype::bf16, {256}, 0xFF);
  t.set("model.layers.3.shared_head.head.weight", dsa::dtype::bf16, {512, 256}, 0xFF);
  write_checkpoint(dir.path, t, [](nlohmann::json& c) { c["num_nextn_predict_layers"] = 1; });
  const auto w = dsa::model::weights::load(dir.path);
  CHECK(w.layers.size() == 3);
  CHECK(w.checkpoint().contains("model.layers.3.eh_proj.weight"));
  const std::vector<float> got = logits_of(dir.path);
  for (const float x : got) REQUIRE(std::isfinite(x));
  CHECK(same_bits(got, logits_of(tiny_dir)));
}

TEST_CASE("a sharded checkpoint (index + 2 shards) gives the single file's logits bit for bit") {
  temp_dir dir;
  tensors t;
  // Alternate tensors between the shards (sorted by name, so every layer spans both).
  std::vector<dsa::safetensors_entry> shard[2];
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  const char* names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < t.entries.size(); ++i) {
    shard[i % 2].push_back(t.entries[i]);
    index["weight_map"][t.entries[i].name] = names[i % 2];
    total += t.entries[i].data.size();
  }
  index["metadata"]["total_size"] = total;
  fs::copy_file(tiny_dir / "config.json", dir.path / "config.json");
  for (int s = 0; s < 2; ++s) dsa::write_safetensors(dir.path / names[s], shard[s]);
  write_text(dir.path / "model.safetensors.index.json", index.dump(2));

  const auto w = dsa::model::weights::load(dir.path);
  CHECK(w.checkpoint().shards().size() == 2);
  CHECK(w.checkpoint().size() == t.entries.size());
  CHECK(same_bits(logits_of(dir.path), logits_of(tiny_dir)));

  // An error in a shard names that shard.
  const std::string victim = shard[1].front().name;
  std::vector<dsa::safetensors_entry> bad = shard[1];
  std::vector<std::byte> junk(bad.front().data.size() / 2);
  bad.front().shape = {static_cast<index_t>(junk.size())};
  bad.front().type = dsa::dtype::u8;
  bad.front().data = junk;
  dsa::write_safetensors(dir.path / names[1], bad);
  const std::string e = load_error(dir.path);
  CAPTURE(e);
  CHECK(contains(e, quoted(dir.path / names[1]) + ": tensor '" + victim + "'"));
  // A shard missing from disk names the index and the shard.
  fs::remove(dir.path / names[1]);
  const std::string m = load_error(dir.path);
  CAPTURE(m);
  CHECK(contains(m, quoted(dir.path / "model.safetensors.index.json")));
  CHECK(contains(m, names[1]));
}

TEST_CASE("a config.json that leaves stored tensors unread is refused, naming them (issue 33)") {
  // Each of these loaded before and ran another model than the checkpoint's, silently: the
  // shared experts or lm_head dropped, a layer's MoE weights ignored.
  temp_dir dir;
  const std::string file = quoted(dir.path / "model.safetensors");
  SUBCASE("n_shared_experts = 0 over a checkpoint with shared experts") {
    tensors t;
    write_checkpoint(dir.path, t, [](nlohmann::json& c) { c["n_shared_experts"] = 0; });
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    // 2 MoE layers x 3 projections x (FP8 codes + scales); the first three by name, then the count.
    CHECK(contains(e, "dsa::model::weights: " + file + ": tensors the config does not use = 12 ("
                      "'model.layers.1.mlp.shared_experts.down_proj.weight', "
                      "'model.layers.1.mlp.shared_experts.down_proj.weight_scale_inv', "
                      "'model.layers.1.mlp.shared_experts.gate_proj.weight', ...); expected none"));
    CHECK(contains(e, "(check n_shared_experts)"));
    CHECK_THROWS_AS(dsa::model::transformer<dsa::cpu_backend>::load(dir.path, dsa::cpu_backend{1}), dsa::error);
    // Layers a caller skips on purpose (num_layers) are not examined: layer 0 is dense.
    CHECK_NOTHROW(dsa::model::weights::load(dir.path, 1));
    CHECK_THROWS_AS(dsa::model::weights::load(dir.path, 2), dsa::error);
  }
  SUBCASE("tie_word_embeddings = true beside a stored lm_head.weight") {
    tensors t;
    write_checkpoint(dir.path, t, [](nlohmann::json& c) { c["tie_word_embeddings"] = true; });
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    CHECK(contains(e, file + ": tensors the config does not use = 1 ('lm_head.weight'); expected none"));
    CHECK(contains(e, "(tie_word_embeddings = true, but the checkpoint stores its own lm_head.weight)"));
    // Without the stored lm_head, a tied config is what the checkpoint holds.
    t.remove("lm_head.weight");
    write_checkpoint(dir.path, t, [](nlohmann::json& c) { c["tie_word_embeddings"] = true; });
    CHECK(load_error(dir.path).empty());
  }
  SUBCASE("first_k_dense_replace = 0 over a dense first layer: refused as missing MoE tensors") {
    tensors t;
    write_checkpoint(dir.path, t, [](nlohmann::json& c) { c["first_k_dense_replace"] = 0; });
    CHECK(contains(load_error(dir.path), "tensor 'model.layers.0.mlp.gate.weight' presence = missing"));
  }
  SUBCASE("a tensor no config key accounts for") {
    tensors t;
    t.set("model.layers.0.self_attn.extra_bias", dsa::dtype::f32, {256});
    t.set("model.unknown.weight", dsa::dtype::bf16, {4, 4});
    write_checkpoint(dir.path, t);
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    CHECK(contains(e, "tensors the config does not use = 2 ('model.layers.0.self_attn.extra_bias', "
                      "'model.unknown.weight'); expected none"));
  }
  SUBCASE("what a genuine checkpoint stores beside the model still loads") {
    tensors t;
    // Rotary inv_freq buffers, which older Hugging Face exports saved: fixed by the config.
    t.set("model.layers.0.self_attn.rotary_emb.inv_freq", dsa::dtype::f32, {32});
    // The MTP layer (num_nextn_predict_layers = 1), as in deepseek-ai/DeepSeek-V3.2.
    t.set("model.layers.3.eh_proj.weight", dsa::dtype::f8_e4m3, {256, 512});
    t.set("model.layers.3.embed_tokens.weight", dsa::dtype::bf16, {512, 256});
    write_checkpoint(dir.path, t, [](nlohmann::json& c) { c["num_nextn_predict_layers"] = 1; });
    CHECK(load_error(dir.path).empty());
    // The checked-in random model and the golden one load as they are.
    CHECK_NOTHROW(dsa::model::weights::load(fs::path(DSA_TEST_DATA_DIR) / ".." / ".." / "models" / "tiny-random"));
    CHECK_NOTHROW(dsa::model::weights::load(tiny_dir));
  }
  SUBCASE("the reverse: a config needing a tensor the checkpoint lacks names it") {
    tensors t;
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      for (const char* layer : {"1", "2"}) {
        const std::string p = std::string("model.layers.") + layer + ".mlp.shared_experts." + proj;
        t.remove(p + ".weight");
        t.remove(p + ".weight_scale_inv");
      }
    }
    write_checkpoint(dir.path, t);  // n_shared_experts = 1
    CHECK(contains(load_error(dir.path),
                   file + ": tensor 'model.layers.1.mlp.shared_experts.gate_proj.weight' presence = missing"));
    write_checkpoint(dir.path, t, [](nlohmann::json& c) { c["n_shared_experts"] = 0; });
    CHECK(load_error(dir.path).empty());
  }
}

TEST_CASE("every file of a checkpoint directory must resolve inside it (issue 33)") {
  // A config.json or an index linking outside the checkpoint was read and its bytes echoed in
  // the parse error: refused now before it is opened, like the shards. The Hugging Face hub cache
  // (snapshots/<revision>/<file> -> ../../blobs/<hash>) keeps working.
  const temp_dir outside;
  write_text(outside.path / "secret", "root:x:0:0:root:/root:/bin/bash\nSECRET-TOKEN-1234\n");
  tensors t;
  SUBCASE("config.json linking outside") {
    temp_dir dir;
    write_checkpoint(dir.path, t);
    fs::remove(dir.path / "config.json");
    fs::create_symlink(outside.path / "secret", dir.path / "config.json");
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    CHECK(contains(e, "dsa::model::config: " + quoted(dir.path / "config.json") + ": real path = " +
                          quoted(outside.path / "secret") + "; expected a file inside the checkpoint directory"));
    CHECK_FALSE(contains(e, "root:x"));
    CHECK_FALSE(contains(e, "SECRET"));
    // A relative link out (../) is the same.
    fs::remove(dir.path / "config.json");
    fs::create_symlink(fs::relative(outside.path / "secret", dir.path), dir.path / "config.json");
    CHECK(contains(load_error(dir.path), "expected a file inside the checkpoint directory"));
  }
  SUBCASE("the index linking outside") {
    temp_dir dir;
    write_checkpoint(dir.path, t);
    fs::create_symlink(outside.path / "secret", dir.path / "model.safetensors.index.json");
    const std::string e = load_error(dir.path);
    CAPTURE(e);
    CHECK(contains(e, "dsa::safetensors: " + quoted(dir.path / "model.safetensors.index.json") +
                          ": real path = " + quoted(outside.path / "secret")));
    CHECK_FALSE(contains(e, "SECRET"));
  }
  SUBCASE("the Hugging Face hub cache: every file a link into blobs/") {
    const temp_dir repo;
    const fs::path snap = repo.path / "snapshots" / "0123abcd";
    fs::create_directories(repo.path / "blobs");
    fs::create_directories(snap);
    temp_dir src;
    write_checkpoint(src.path, t);
    // Sharded in two, as the hub's copies of V3.2 are; each file stored under its hash.
    std::vector<dsa::safetensors_entry> shard[2];
    nlohmann::json index = {{"weight_map", nlohmann::json::object()}};
    const char* names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    for (std::size_t i = 0; i < t.entries.size(); ++i) {
      shard[i % 2].push_back(t.entries[i]);
      index["weight_map"][t.entries[i].name] = names[i % 2];
    }
    const auto blob = [&](const std::string& hash, const std::string& name) {
      fs::create_symlink(fs::path("..") / ".." / "blobs" / hash, snap / name);
    };
    for (int s = 0; s < 2; ++s) {
      dsa::write_safetensors(repo.path / "blobs" / ("b10b" + std::to_string(s)), shard[s]);
      blob("b10b" + std::to_string(s), names[s]);
    }
    write_text(repo.path / "blobs" / "c0ff1c", read_text(src.path / "config.json"));
    blob("c0ff1c", "config.json");
    write_text(repo.path / "blobs" / "1d3c", index.dump());
    blob("1d3c", "model.safetensors.index.json");
    CHECK(load_error(snap).empty());
    CHECK(same_bits(logits_of(snap), logits_of(tiny_dir)));
    // A blob that itself links outside the repository is still refused.
    fs::remove(repo.path / "blobs" / "c0ff1c");
    fs::create_symlink(outside.path / "secret", repo.path / "blobs" / "c0ff1c");
    const std::string e = load_error(snap);
    CAPTURE(e);
    CHECK(contains(e, "expected a file inside the checkpoint directory"));
    CHECK_FALSE(contains(e, "SECRET"));
  }
}

TEST_CASE("text from a checkpoint reaches a message quoted and bounded (issue 33)") {
  temp_dir dir;
  tensors t;
  SUBCASE("a 15 MiB model_type") {
    const std::string huge(std::size_t{15} << 20, 'x');
    write_checkpoint(dir.path, t, [&](nlohmann::json& c) { c["model_type"] = "\x1b[2J" + huge; });
    const std::string e = load_error(dir.path);
    CHECK(e.size() < 1024);
    CHECK(contains(e, "model_type = '\\x1b[2Jxxxx"));
    CHECK(contains(e, "... (15728644 bytes in all); expected \"deepseek_v32\""));
  }
  SUBCASE("a 5,000-character shard name") {
    write_checkpoint(dir.path, t);
    const std::string shard(5000, 's');
    write_text(dir.path / "model.safetensors.index.json",
               nlohmann::json{{"weight_map", {{"model.norm.weight", shard}}}}.dump());
    const std::string e = load_error(dir.path);
    CAPTURE(e.substr(0, 600));
    CHECK(e.size() < 1024);
    CHECK(contains(e, "weight_map['model.norm.weight'] = 'ssss"));
    CHECK(contains(e, "... (5000 bytes in all); expected an existing shard file in " + quoted(dir.path)));
  }
  SUBCASE("5,000-character tensor names the config does not use") {
    t.set(std::string(5000, 'n'), dsa::dtype::f32, {1});
    t.set(std::string(5000, 'm'), dsa::dtype::f32, {1});
    write_checkpoint(dir.path, t);
    const std::string e = load_error(dir.path);
    CHECK(e.size() < 2048);
    CHECK(contains(e, "tensors the config does not use = 2 ('mmmm"));
    CHECK(contains(e, "... (5000 bytes in all), 'nnnn"));
  }
}
