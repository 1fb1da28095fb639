// dsa::model random checkpoints (the generator of tools/dsa_make_tiny_model and the benches):
// the same tensor names, dtypes and shapes as the golden tiny model, per-seed determinism,
// per-tensor streams, weight statistics, and the files it writes (one file or shards).
#include "dsa/model/random_checkpoint.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/ops/fp8_quant.hpp"

namespace fs = std::filesystem;
using dsa::index_t;
using dsa::model::owned_tensor;
using dsa::model::random_checkpoint_tensors;
using dsa::model::tiny_config;

namespace {

const fs::path golden_dir = fs::path(DSA_TEST_DATA_DIR) / "tiny-dsv32";

std::map<std::string, const owned_tensor*> by_name(const std::vector<owned_tensor>& ts) {
  std::map<std::string, const owned_tensor*> m;
  for (const owned_tensor& t : ts) m[t.name] = &t;
  return m;
}

// The dequantized fp32 values of a generated linear weight (or a bf16 / f32 tensor).
std::vector<float> values(const std::map<std::string, const owned_tensor*>& m, const std::string& name) {
  const owned_tensor& t = *m.at(name);
  const auto n = static_cast<std::size_t>(t.numel());
  std::vector<float> v(n);
  if (t.type == dsa::dtype::f32) {
    std::memcpy(v.data(), t.data.data(), n * 4);
  } else if (t.type == dsa::dtype::bf16) {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t b;
      std::memcpy(&b, t.data.data() + 2 * i, 2);
      v[i] = dsa::bf16::from_bits(b).to_float();
    }
  } else {
    REQUIRE(t.type == dsa::dtype::f8_e4m3);
    const std::string sname = name.substr(0, name.size() - std::string("weight").size()) + "weight_scale_inv";
    const owned_tensor& s = *m.at(sname);
    const index_t rows = t.shape[0], cols = t.shape[1];
    dsa::weight_dequant(dsa::cpu_backend{1},
                        dsa::host_view<const dsa::fp8_e4m3, 2>(reinterpret_cast<const dsa::fp8_e4m3*>(t.data.data()), {rows, cols}),
                        dsa::host_view<const float, 2>(reinterpret_cast<const float*>(s.data.data()), {s.shape[0], s.shape[1]}),
                        dsa::host_view<float, 2>(v.data(), {rows, cols}));
  }
  return v;
}

void moments(const std::vector<float>& v, double& mean, double& sd) {
  double s = 0.0, s2 = 0.0;
  for (float x : v) {
    s += x;
    s2 += static_cast<double>(x) * x;
  }
  mean = s / static_cast<double>(v.size());
  sd = std::sqrt(s2 / static_cast<double>(v.size()) - mean * mean);
}

struct temp_dir {
  fs::path path;
  temp_dir() {
    path = fs::temp_directory_path() / ("dsa_test_random_checkpoint_" + std::to_string(::getpid()));
    fs::remove_all(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

TEST_CASE("tiny_config is the golden tiny model's config.json") {
  const dsa::model::config golden = dsa::model::config::load(golden_dir);
  CHECK(tiny_config() == golden);
  CHECK_NOTHROW(tiny_config().validate());
}

TEST_CASE("random checkpoint: tensor names, dtypes and shapes are exactly the golden tiny model's") {
  const auto tensors = random_checkpoint_tensors(tiny_config(), 1, dsa::cpu_backend{1});
  const auto golden = dsa::safetensors_file::open(golden_dir / "model.safetensors");
  CHECK(tensors.size() == golden.tensors().size());
  CHECK(tensors.size() == 280);  // + "__metadata__" = the 281 header entries
  const auto m = by_name(tensors);
  CHECK(m.size() == tensors.size());  // no name twice
  for (const dsa::tensor_info& g : golden.tensors()) {
    CAPTURE(g.name);
    REQUIRE(m.count(g.name) == 1);
    const owned_tensor& t = *m.at(g.name);
    CHECK(t.type == g.type);
    CHECK(t.shape == g.shape);
    CHECK(t.data.size() == g.nbytes());
  }
}

TEST_CASE("random checkpoint: deterministic per seed, one stream per tensor") {
  auto cfg = tiny_config();
  const auto a = random_checkpoint_tensors(cfg, 5, dsa::cpu_backend{1});
  const auto b = random_checkpoint_tensors(cfg, 5, dsa::cpu_backend{2});  // thread count is irrelevant
  const auto c = random_checkpoint_tensors(cfg, 6, dsa::cpu_backend{1});
  REQUIRE(a.size() == b.size());
  REQUIRE(a.size() == c.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].name);
    CHECK(a[i].data == b[i].data);
    // Scales of two seeds can coincide (a block amax is a maximum), codes essentially cannot.
    if (a[i].name.ends_with("weight_scale_inv")) continue;
    CHECK(a[i].data != c[i].data);
  }
  // Distinct tensors are distinct streams (same shape, different names).
  const auto m = by_name(a);
  CHECK(m.at("model.layers.1.mlp.experts.0.up_proj.weight")->data != m.at("model.layers.1.mlp.experts.1.up_proj.weight")->data);
  CHECK(m.at("model.layers.0.input_layernorm.weight")->data != m.at("model.layers.0.post_attention_layernorm.weight")->data);

  // Changing the layer count leaves the common layers as they were.
  cfg.num_hidden_layers = 2;
  const auto fewer_tensors = random_checkpoint_tensors(cfg, 5, dsa::cpu_backend{1});
  const auto fewer = by_name(fewer_tensors);
  CHECK(fewer.count("model.layers.2.input_layernorm.weight") == 0);
  CHECK(fewer.at("model.layers.1.self_attn.q_b_proj.weight")->data == m.at("model.layers.1.self_attn.q_b_proj.weight")->data);
  CHECK(fewer.at("lm_head.weight")->data == m.at("lm_head.weight")->data);
}

TEST_CASE("random checkpoint: weight statistics of the golden tiny model") {
  const auto ts = random_checkpoint_tensors(tiny_config(), 1, dsa::cpu_backend{1});
  const auto m = by_name(ts);
  double mean = 0.0, sd = 0.0;
  struct expect {
    const char* name;
    double mean, sd;
  };
  for (const expect e : {expect{"model.embed_tokens.weight", 0.0, 1.0},
                         expect{"lm_head.weight", 0.0, 1.0 / 16},
                         expect{"model.layers.0.self_attn.q_b_proj.weight", 0.0, 1.0 / 16},
                         expect{"model.layers.0.mlp.down_proj.weight", 0.0, 1.0 / std::sqrt(512.0)},
                         expect{"model.layers.1.mlp.experts.3.down_proj.weight", 0.0, 1.0 / std::sqrt(128.0)},
                         expect{"model.layers.2.self_attn.indexer.weights_proj.weight", 0.0, 1.0 / 16},
                         expect{"model.norm.weight", 1.0, 0.1},
                         expect{"model.layers.2.mlp.gate.e_score_correction_bias", 0.0, 0.05}}) {
    CAPTURE(e.name);
    const std::vector<float> v = values(m, e.name);
    moments(v, mean, sd);
    const double n = static_cast<double>(v.size());
    CHECK(std::abs(mean - e.mean) < 5.0 * e.sd / std::sqrt(n));
    CHECK(std::abs(sd / e.sd - 1.0) < 5.0 * std::sqrt(0.5 / n) + 0.02);  // 0.02: fp8 rounding
  }
  // Quantization uses the full e4m3 range in every block (scale = amax / 448).
  const owned_tensor& q = *m.at("model.layers.0.self_attn.o_proj.weight");
  int max_code = 0;
  for (std::byte b : q.data) max_code = std::max(max_code, static_cast<int>(b) & 0x7F);
  CHECK(max_code == 0x7E);
}

TEST_CASE("random checkpoint: bf16 weights without quantization_config, tied embeddings, no shared expert") {
  auto cfg = tiny_config();
  cfg.quantization_config.reset();
  cfg.tie_word_embeddings = true;
  cfg.n_shared_experts = 0;
  const auto ts = random_checkpoint_tensors(cfg, 2, dsa::cpu_backend{1});
  const auto m = by_name(ts);
  CHECK(m.at("model.layers.0.self_attn.q_a_proj.weight")->type == dsa::dtype::bf16);
  CHECK(m.count("model.layers.0.self_attn.q_a_proj.weight_scale_inv") == 0);
  CHECK(m.count("lm_head.weight") == 0);
  CHECK(m.count("model.layers.1.mlp.shared_experts.up_proj.weight") == 0);
  CHECK(m.count("model.layers.1.mlp.experts.15.up_proj.weight") == 1);
}

TEST_CASE("random checkpoint: an invalid config is rejected before anything is generated") {
  auto cfg = tiny_config();
  cfg.hidden_size = 200;  // FP8 linears need input widths that are multiples of 128
  CHECK_THROWS_WITH_AS(random_checkpoint_tensors(cfg, 1), doctest::Contains("hidden_size = 200"), dsa::error);
  cfg = tiny_config();
  cfg.n_routed_experts = 10;  // not a multiple of n_group = 4
  CHECK_THROWS_WITH_AS(random_checkpoint_tensors(cfg, 1), doctest::Contains("n_routed_experts = 10"), dsa::error);
}

TEST_CASE("write_random_checkpoint: config.json and model.safetensors that read back") {
  temp_dir dir;
  const fs::path out = dir.path / "nested" / "model";
  dsa::model::write_random_checkpoint(out, tiny_config(), 3, dsa::cpu_backend{1});
  CHECK(dsa::model::config::load(out) == tiny_config());
  const auto ck = dsa::safetensors_checkpoint::open(out);
  CHECK(ck.size() == 280);
  CHECK(ck.metadata().at("format") == "pt");
  CHECK(ck.metadata().at("seed") == "3");
  const auto mem = random_checkpoint_tensors(tiny_config(), 3, dsa::cpu_backend{1});
  for (const owned_tensor& t : mem) {
    CAPTURE(t.name);
    const auto bytes = ck.bytes(t.name);
    CHECK(std::equal(bytes.begin(), bytes.end(), t.data.begin(), t.data.end()));
  }
  CHECK_FALSE(fs::exists(out / "config.json.tmp"));
  CHECK_FALSE(fs::exists(out / "model.safetensors.tmp"));

  // A path under a regular file cannot be a directory.
  std::ofstream(dir.path / "file") << "x";
  CHECK_THROWS_WITH_AS(dsa::model::write_random_checkpoint(dir.path / "file" / "sub", tiny_config(), 1),
                       doctest::Contains("dsa::model::write_random_checkpoint: dir = "), dsa::error);
}

TEST_CASE("write_random_checkpoint: shards past shard_bytes, one per unit, with the same bytes") {
  temp_dir dir;
  const fs::path out = dir.path / "sharded";
  // The tiny model is about 6.6 MB: a 1 MiB limit writes the embedding, each layer and the final
  // norm with lm_head as shards, as a V3.2-width checkpoint is written with the default 4 GiB.
  dsa::model::write_random_checkpoint(out, tiny_config(), 3, dsa::cpu_backend{2}, std::uint64_t{1} << 20);
  CHECK(fs::exists(out / "model.safetensors.index.json"));
  CHECK_FALSE(fs::exists(out / "model.safetensors"));
  CHECK(fs::exists(out / "model-00001-of-00005.safetensors"));
  CHECK(fs::exists(out / "model-00005-of-00005.safetensors"));
  CHECK_FALSE(fs::exists(out / "model.safetensors.index.json.tmp"));
  CHECK(dsa::model::config::load(out) == tiny_config());
  const auto ck = dsa::safetensors_checkpoint::open(out);
  CHECK(ck.shards().size() == 5);
  CHECK(ck.metadata().at("seed") == "3");
  const auto mem = random_checkpoint_tensors(tiny_config(), 3, dsa::cpu_backend{1});
  CHECK(ck.size() == mem.size());
  for (const owned_tensor& t : mem) {
    CAPTURE(t.name);
    const auto bytes = ck.bytes(t.name);
    CHECK(std::equal(bytes.begin(), bytes.end(), t.data.begin(), t.data.end()));
  }
  // The first shard is the embedding alone; a layer's shard holds its experts.
  CHECK(ck.shard_of("model.embed_tokens.weight").path().filename() == "model-00001-of-00005.safetensors");
  CHECK(ck.shard_of("model.layers.2.mlp.experts.15.down_proj.weight").path().filename() ==
        "model-00004-of-00005.safetensors");
  CHECK(ck.shard_of("lm_head.weight").path().filename() == "model-00005-of-00005.safetensors");
  // A single-file write into a directory holding an index is refused (the loader would read the
  // index, not the new file).
  CHECK_THROWS_WITH_AS(dsa::model::write_random_checkpoint(out, tiny_config(), 3),
                       doctest::Contains("a directory without model.safetensors.index.json"), dsa::error);
}

TEST_CASE("random_checkpoint_size: every tensor's bytes, from the config alone (issue 33)") {
  // The tiny model: the exact bytes of the tensors generated, one file below 4 GiB.
  const auto tensors = random_checkpoint_tensors(tiny_config(), 1, dsa::cpu_backend{1});
  std::uint64_t bytes = 0;
  for (const owned_tensor& t : tensors) bytes += t.data.size();
  const auto f = dsa::model::random_checkpoint_size(tiny_config(), dsa::cpu_backend{1});
  CHECK_FALSE(f.overflow);
  CHECK_FALSE(f.sharded);
  CHECK(f.total_bytes == bytes);
  CHECK(f.largest_unit == "model.layers.1");  // an MoE layer (layer 2 has the same size)
  CHECK(f.memory_bytes > f.total_bytes);      // everything, plus one tensor's generation
  // Sharded past shard_bytes: held one unit at a time.
  const auto s = dsa::model::random_checkpoint_size(tiny_config(), dsa::cpu_backend{1}, 1 << 20);
  CHECK(s.sharded);
  CHECK(s.total_bytes == bytes);
  CHECK(s.memory_bytes < s.total_bytes);
  CHECK(s.memory_bytes > s.largest_unit_bytes);
}

TEST_CASE("a random checkpoint too large for this machine is refused before anything is allocated (issue 33)") {
  // --vocab 16777216 --hidden 7168 started building a 240 GB embedding and died out of memory.
  // Here the embedding alone would be 32 TiB: refused with what it needs, nothing created.
  temp_dir dir;
  auto cfg = tiny_config();
  cfg.vocab_size = std::int64_t{1} << 24;
  cfg.hidden_size = std::int64_t{1} << 20;
  const auto f = dsa::model::random_checkpoint_size(cfg, dsa::cpu_backend{1});
  CHECK(f.total_bytes > (std::uint64_t{64} << 40));  // embedding + lm_head: 64 TiB
  CHECK(f.largest_unit == "model.norm + lm_head");
  const fs::path out = dir.path / "never";
  CHECK_THROWS_WITH_AS(dsa::model::write_random_checkpoint(out, cfg, 1, dsa::cpu_backend{1}),
                       doctest::Contains("dsa::model::write_random_checkpoint: memory needed = 32768."),
                       dsa::error);
  CHECK_THROWS_WITH_AS(dsa::model::write_random_checkpoint(out, cfg, 1, dsa::cpu_backend{1}),
                       doctest::Contains("of this machine's physical memory)"), dsa::error);
  CHECK_FALSE(fs::exists(out));
  CHECK_THROWS_WITH_AS(random_checkpoint_tensors(cfg, 1, dsa::cpu_backend{1}),
                       doctest::Contains("dsa::model::random_checkpoint_tensors: memory needed = "), dsa::error);

  // 2^31 - 2 experts: sized without a list per expert (that list alone took 51 GB).
  cfg = tiny_config();
  cfg.n_routed_experts = 2147483646;
  cfg.n_group = 2;
  cfg.topk_group = 1;
  const auto e = dsa::model::random_checkpoint_size(cfg, dsa::cpu_backend{1});
  CHECK_FALSE(e.overflow);
  CHECK(e.largest_unit == "model.layers.1");
  // Each expert: 3 FP8 projections of 128 x 256 plus 2 x 2 fp32 scales each.
  CHECK(e.largest_unit_bytes > std::uint64_t{2147483646} * 3 * (128 * 256 + 16));
  CHECK_THROWS_WITH_AS(dsa::model::write_random_checkpoint(out, cfg, 1, dsa::cpu_backend{1}),
                       doctest::Contains("memory needed = "), dsa::error);
  CHECK_FALSE(fs::exists(out));

  // Sizes whose byte count exceeds 64 bits: said so, not wrapped around.
  cfg.hidden_size = 2147483520;
  cfg.moe_intermediate_size = 2147483520;
  const auto o = dsa::model::random_checkpoint_size(cfg, dsa::cpu_backend{1});
  CHECK(o.overflow);
  CHECK(o.total_bytes == UINT64_MAX);
  CHECK_THROWS_WITH_AS(dsa::model::write_random_checkpoint(out, cfg, 1, dsa::cpu_backend{1}),
                       doctest::Contains("checkpoint size = more than 2^64 - 1 bytes"), dsa::error);
  CHECK_FALSE(fs::exists(out));
}
