// dsa::model::config: parsing the golden tiny model's and the real V3.2's config.json, the
// derived quantities, the round trip through to_json, and every rejection with its message.
#include "dsa/model/config.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace fs = std::filesystem;
using dsa::model::config;
using nlohmann::json;

namespace {

// deepseek-ai/DeepSeek-V3.2 config.json (values of docs/design.md "Checkpoints"), with a few of the keys that
// Hugging Face configs carry and dsa ignores.
const char* const v32_text = R"({
  "architectures": ["DeepseekV32ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 0,
  "eos_token_id": 1,
  "ep_size": 1,
  "first_k_dense_replace": 3,
  "hidden_act": "silu",
  "hidden_size": 7168,
  "index_head_dim": 128,
  "index_n_heads": 64,
  "index_topk": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 18432,
  "kv_lora_rank": 512,
  "max_position_embeddings": 163840,
  "model_type": "deepseek_v32",
  "moe_intermediate_size": 2048,
  "moe_layer_freq": 1,
  "n_group": 8,
  "n_routed_experts": 256,
  "n_shared_experts": 1,
  "norm_topk_prob": true,
  "num_attention_heads": 128,
  "num_experts_per_tok": 8,
  "num_hidden_layers": 61,
  "num_key_value_heads": 128,
  "num_nextn_predict_layers": 1,
  "q_lora_rank": 1536,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "quantization_config": {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "scale_fmt": "ue8m0",
    "weight_block_size": [128, 128]
  },
  "rms_norm_eps": 1e-06,
  "rope_scaling": {
    "beta_fast": 32,
    "beta_slow": 1,
    "factor": 40,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
    "type": "yarn"
  },
  "rope_theta": 10000,
  "routed_scaling_factor": 2.5,
  "scoring_func": "sigmoid",
  "tie_word_embeddings": false,
  "topk_group": 4,
  "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16",
  "transformers_version": "4.44.2",
  "use_cache": true,
  "v_head_dim": 128,
  "vocab_size": 129280
})";

json v32() { return json::parse(v32_text); }

config parse(const json& j) { return config::from_json(j, "v32.json"); }

/// A fresh directory under the system temp dir, removed with everything in it at scope exit.
struct temp_dir {
  fs::path path;
  temp_dir() {
    static std::atomic<int> counter{0};
    path =
        fs::temp_directory_path() / ("dsa_test_config_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  fs::path write(const std::string& name, const std::string& text) const {
    const fs::path p = path / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
};

}  // namespace

// The whole message prefix: op, file, key, value and the start of the expectation.
#define CHECK_REJECTS(json_value, message) \
  CHECK_THROWS_WITH_AS(parse(json_value), doctest::Contains(std::string(message).c_str()), dsa::error)

TEST_CASE("config: the golden tiny model's config.json") {
  const fs::path dir = fs::path(DSA_TEST_DATA_DIR) / "tiny-dsv32";
  const config c = config::load(dir);
  CHECK(c == config::load(dir / "config.json"));

  CHECK(c.model_type == "deepseek_v32");
  CHECK(c.vocab_size == 512);
  CHECK(c.hidden_size == 256);
  CHECK(c.intermediate_size == 512);
  CHECK(c.moe_intermediate_size == 128);
  CHECK(c.num_hidden_layers == 3);
  CHECK(c.first_k_dense_replace == 1);
  CHECK(c.num_attention_heads == 4);
  CHECK(c.num_key_value_heads == 4);
  CHECK(c.n_routed_experts == 16);
  CHECK(c.n_shared_experts == 1);
  CHECK(c.num_experts_per_tok == 4);
  CHECK(c.n_group == 4);
  CHECK(c.topk_group == 2);
  CHECK(c.scoring_func == "sigmoid");
  CHECK(c.routed_scaling_factor == 2.5f);
  CHECK(c.norm_topk_prob);
  CHECK(c.topk_method == "noaux_tc");
  CHECK(c.q_lora_rank == 256);
  CHECK(c.kv_lora_rank == 256);
  CHECK(c.qk_nope_head_dim == 64);
  CHECK(c.qk_rope_head_dim == 64);
  CHECK(c.v_head_dim == 64);
  CHECK(c.index_n_heads == 8);
  CHECK(c.index_head_dim == 128);
  CHECK(c.index_topk == 32);
  CHECK(c.rms_norm_eps == 1e-6f);
  CHECK(c.rope_theta == 10000.0f);
  CHECK(c.max_position_embeddings == 8192);
  CHECK(c.hidden_act == "silu");
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(c.bos_token_id == 0);
  CHECK(c.eos_token_id == 1);
  CHECK(c.torch_dtype == "bfloat16");
  CHECK(c.num_nextn_predict_layers == 0);

  REQUIRE(c.rope_scaling.has_value());
  CHECK(c.rope_scaling->type == "yarn");
  CHECK(c.rope_scaling->factor == 40.0f);
  CHECK(c.rope_scaling->original_max_position_embeddings == 4096);
  CHECK(c.rope_scaling->beta_fast == 32.0f);
  CHECK(c.rope_scaling->beta_slow == 1.0f);
  CHECK(c.rope_scaling->mscale == 1.0f);
  CHECK(c.rope_scaling->mscale_all_dim == 1.0f);

  REQUIRE(c.quantization_config.has_value());
  CHECK(c.quantization_config->quant_method == "fp8");
  CHECK(c.quantization_config->fmt == "e4m3");
  CHECK(c.quantization_config->activation_scheme == "dynamic");
  CHECK(c.quantization_config->scale_fmt == "ue8m0");
  CHECK(c.quantization_config->block_n == 128);
  CHECK(c.quantization_config->block_k == 128);
  CHECK(c.fp8_weights());
  CHECK(c.ue8m0_scales());

  // Derived: 8192 > 4096 turns YaRN on (golden README), so the mscale factor is in the scale.
  CHECK(c.qk_head_dim() == 128);
  CHECK(c.yarn_enabled());
  // 128^-0.5 = 0.08838834764831845, mscale = 0.1 ln 40 + 1 = 1.3688879454113936.
  const double hand = 0.08838834764831845 * 1.3688879454113936 * 1.3688879454113936;
  CHECK(c.softmax_scale() == static_cast<float>(hand));
  CHECK(c.softmax_scale() == doctest::Approx(0.16562687709876717).epsilon(1e-7));

  CHECK_FALSE(c.is_moe_layer(0));
  CHECK(c.is_moe_layer(1));
  CHECK(c.is_moe_layer(2));
  CHECK_THROWS_WITH_AS(c.is_moe_layer(3),
                       "dsa::model::config::is_moe_layer: layer = 3; expected 0 <= layer < num_hidden_layers = 3",
                       dsa::error);
}

TEST_CASE("config: DeepSeek-V3.2 sizes and derived values") {
  const config c = parse(v32());
  CHECK(c.hidden_size == 7168);
  CHECK(c.num_hidden_layers == 61);
  CHECK(c.first_k_dense_replace == 3);
  CHECK(c.num_attention_heads == 128);
  CHECK(c.q_lora_rank == 1536);
  CHECK(c.kv_lora_rank == 512);
  CHECK(c.qk_nope_head_dim == 128);
  CHECK(c.qk_rope_head_dim == 64);
  CHECK(c.v_head_dim == 128);
  CHECK(c.n_routed_experts == 256);
  CHECK(c.moe_intermediate_size == 2048);
  CHECK(c.n_group == 8);
  CHECK(c.topk_group == 4);
  CHECK(c.num_experts_per_tok == 8);
  CHECK(c.routed_scaling_factor == 2.5f);
  CHECK(c.index_n_heads == 64);
  CHECK(c.index_head_dim == 128);
  CHECK(c.index_topk == 2048);
  CHECK(c.vocab_size == 129280);
  CHECK(c.intermediate_size == 18432);
  CHECK(c.max_position_embeddings == 163840);
  CHECK(c.num_nextn_predict_layers == 1);
  REQUIRE(c.rope_scaling.has_value());
  CHECK(c.rope_scaling->factor == 40.0f);
  CHECK(c.rope_scaling->original_max_position_embeddings == 4096);

  CHECK(c.qk_head_dim() == 192);
  CHECK(c.yarn_enabled());
  // By hand: 192^-0.5 = 1 / 13.856406460551018 = 0.07216878364870322; ln 40 = 3.6888794541139363,
  // mscale = 1.36888794541139363, mscale^2 = 1.8738542070926265; product 0.1352337788608801.
  const double hand = 0.07216878364870322 * 1.8738542070926265;
  CHECK(hand == doctest::Approx(0.1352337788608801).epsilon(1e-15));
  CHECK(c.softmax_scale() == static_cast<float>(hand));
  CHECK(c.softmax_scale() == doctest::Approx(0.1352337788608801).epsilon(1e-7));

  for (dsa::index_t l = 0; l < 61; ++l) CHECK(c.is_moe_layer(l) == (l >= 3));
  CHECK_THROWS_WITH_AS(c.is_moe_layer(-1),
                       doctest::Contains("layer = -1; expected 0 <= layer < num_hidden_layers = 61"), dsa::error);
  CHECK_THROWS_WITH_AS(c.is_moe_layer(61), doctest::Contains("layer = 61;"), dsa::error);

  const std::string s = c.to_string();
  CHECK(s.find('\n') == std::string::npos);
  for (const char* part :
       {"deepseek_v32", "61 layers (3 dense)", "hidden 7168", "vocab 129280", "128 heads", "q_lora 1536", "kv_lora 512",
        "qk 128+64", "v 128", "256x2048", "top-8", "8 groups (top-4)", "1 shared", "scale 2.5",
        "indexer 64x128 top-2048", "YaRN x40 4096 -> 163840", "fp8 e4m3 128x128", "ue8m0"}) {
    CHECK_MESSAGE(s.find(part) != std::string::npos, s, " lacks ", part);
  }
}

TEST_CASE("config: YaRN off") {
  SUBCASE("max_position_embeddings not above the original context") {
    json j = v32();
    j["max_position_embeddings"] = 4096;
    const config c = parse(j);
    CHECK_FALSE(c.yarn_enabled());
    // 192^-0.5 only.
    CHECK(c.softmax_scale() == static_cast<float>(0.07216878364870322));
    CHECK(c.to_string().find("YaRN") == std::string::npos);
  }
  SUBCASE("no rope_scaling") {
    json j = v32();
    j.erase("rope_scaling");
    CHECK_FALSE(parse(j).rope_scaling.has_value());
    CHECK_FALSE(parse(j).yarn_enabled());
    CHECK(parse(j).softmax_scale() == static_cast<float>(0.07216878364870322));
    j["rope_scaling"] = nullptr;  // Python's None
    CHECK_FALSE(parse(j).rope_scaling.has_value());
  }
  SUBCASE("factor 1: mscale is 1") {
    json j = v32();
    j["rope_scaling"]["factor"] = 1;
    CHECK(parse(j).yarn_enabled());
    CHECK(parse(j).softmax_scale() == static_cast<float>(0.07216878364870322));
  }
  SUBCASE("mscale_all_dim 0: Hugging Face's no-mscale setting") {
    json j = v32();
    j["rope_scaling"]["mscale"] = 0;
    j["rope_scaling"]["mscale_all_dim"] = 0;
    CHECK(parse(j).softmax_scale() == static_cast<float>(0.07216878364870322));
  }
  SUBCASE("mscale_all_dim 0.5") {
    json j = v32();
    j["rope_scaling"]["mscale"] = 0.5;
    j["rope_scaling"]["mscale_all_dim"] = 0.5;
    const double m = 0.05 * 3.6888794541139363 + 1.0;
    CHECK(parse(j).softmax_scale() == static_cast<float>(0.07216878364870322 * m * m));
  }
}

TEST_CASE("config: optional keys, aliases and ignored keys") {
  json j = v32();
  for (const char* k : {"num_key_value_heads", "hidden_act", "tie_word_embeddings", "bos_token_id", "eos_token_id",
                        "torch_dtype", "num_nextn_predict_layers", "moe_layer_freq", "attention_bias"}) {
    j.erase(k);
  }
  config c = parse(j);
  CHECK(c.num_key_value_heads == 128);
  CHECK(c.hidden_act == "silu");
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK_FALSE(c.bos_token_id.has_value());
  CHECK_FALSE(c.eos_token_id.has_value());
  CHECK(c.torch_dtype == "bfloat16");
  CHECK(c.num_nextn_predict_layers == 0);

  j["dtype"] = "float32";  // the newer transformers name
  CHECK(parse(j).torch_dtype == "float32");
  j["bos_token_id"] = nullptr;
  CHECK_FALSE(parse(j).bos_token_id.has_value());

  json r = v32();
  r["rope_scaling"].erase("type");
  r["rope_scaling"]["rope_type"] = "yarn";
  CHECK(parse(r).rope_scaling->type == "yarn");
  r["rope_scaling"]["type"] = "yarn";
  CHECK(parse(r) == parse(v32()));

  json q = v32();
  q["quantization_config"].erase("scale_fmt");
  q["quantization_config"].erase("fmt");
  q["quantization_config"].erase("activation_scheme");
  c = parse(q);
  CHECK(c.fp8_weights());
  CHECK_FALSE(c.ue8m0_scales());
  CHECK(c.quantization_config->scale_fmt.empty());
  CHECK(c.quantization_config->fmt == "e4m3");
  CHECK(c.quantization_config->activation_scheme == "dynamic");

  q.erase("quantization_config");
  c = parse(q);
  CHECK_FALSE(c.fp8_weights());
  CHECK_FALSE(c.ue8m0_scales());
  CHECK(c.to_string().find("bfloat16 weights") != std::string::npos);

  json x = v32();
  x["some_future_key"] = json::object({{"nested", {1, 2, 3}}});
  x["rope_scaling"]["extra"] = "ignored";
  x["quantization_config"]["modules_to_not_convert"] = nullptr;
  CHECK(parse(x) == parse(v32()));

  // Sizes that only FP8 weights constrain are fine for a bf16 checkpoint.
  json b = v32();
  b.erase("quantization_config");
  b["hidden_size"] = 7000;
  b["q_lora_rank"] = 1500;
  b["moe_intermediate_size"] = 2000;
  CHECK(parse(b).hidden_size == 7000);
}

TEST_CASE("config: to_json round trip") {
  const auto round_trip = [](const config& c) {
    const json j = c.to_json();
    CHECK(config::from_json(j, "written") == c);
    // Through text, as a tool writes and a later run reads it.
    CHECK(config::from_json(json::parse(j.dump(2)), "written") == c);
  };
  const config tiny = config::load(fs::path(DSA_TEST_DATA_DIR) / "tiny-dsv32");
  round_trip(tiny);
  round_trip(parse(v32()));

  json j = v32();
  j.erase("rope_scaling");
  j.erase("quantization_config");
  j.erase("bos_token_id");
  j.erase("eos_token_id");
  j["tie_word_embeddings"] = true;
  j["norm_topk_prob"] = false;
  j["rms_norm_eps"] = 1e-5;
  j["routed_scaling_factor"] = 0.1;
  round_trip(parse(j));

  json q = v32();
  q["quantization_config"].erase("scale_fmt");
  round_trip(parse(q));
  CHECK_FALSE(parse(q).to_json()["quantization_config"].contains("scale_fmt"));

  // The file a tool writes reads like Hugging Face's: shortest decimals, the same keys.
  const json w = tiny.to_json();
  CHECK(w["rms_norm_eps"].dump() == "1e-06");
  CHECK(w["routed_scaling_factor"].dump() == "2.5");
  CHECK(w["model_type"] == "deepseek_v32");
  CHECK(w["architectures"] == json::array({"DeepseekV32ForCausalLM"}));
  CHECK(w["quantization_config"]["weight_block_size"] == json::array({128, 128}));
  CHECK(w["rope_scaling"]["type"] == "yarn");
  const json golden = json::parse(std::ifstream(fs::path(DSA_TEST_DATA_DIR) / "tiny-dsv32" / "config.json"));
  for (const auto& [key, value] : golden.items()) {
    CHECK_MESSAGE(w.contains(key), "to_json() lacks ", key);
  }

  temp_dir tmp;
  std::ofstream(tmp.path / "config.json") << w.dump(2);
  CHECK(config::load(tmp.path) == tiny);
}

TEST_CASE("config: validate() on a hand-built config") {
  config c;
  CHECK_THROWS_WITH_AS(c.validate(),
                       "dsa::model::config: config: vocab_size = 0; expected a positive integer <= 16777216 (2^24: a "
                       "bound far above any real vocabulary, checked before anything is sized by it)",
                       dsa::error);
  c = parse(v32());
  c.validate("mine");
  c.index_topk = 0;
  CHECK_THROWS_WITH_AS(c.validate("mine"), doctest::Contains("dsa::model::config: mine: index_topk = 0;"), dsa::error);
  c = parse(v32());
  c.model_type = "deepseek_v3";
  CHECK_THROWS_WITH_AS(c.validate("mine"),
                       doctest::Contains("mine: model_type = 'deepseek_v3'; expected \"deepseek_v32\""), dsa::error);
}

TEST_CASE("config: model_type") {
  for (const char* t : {"deepseek_v3", "deepseek_v2", "llama"}) {
    json j = v32();
    j["model_type"] = t;
    CHECK_REJECTS(j,
                  std::string("dsa::model::config: v32.json: model_type = '") + t + "'; expected \"deepseek_v32\"");
  }
  // A foreign config is reported by its type, not by its first missing V3.2 key.
  CHECK_REJECTS((json{{"model_type", "llama"}, {"hidden_size", 4096}}),
                "model_type = 'llama'; expected \"deepseek_v32\"");
  json j = v32();
  j.erase("model_type");
  CHECK_REJECTS(j, "v32.json: model_type = <missing>; expected a string (a required key)");
}

TEST_CASE("config: missing required keys") {
  for (const char* k : {"vocab_size",
                        "hidden_size",
                        "intermediate_size",
                        "moe_intermediate_size",
                        "num_hidden_layers",
                        "first_k_dense_replace",
                        "num_attention_heads",
                        "n_routed_experts",
                        "n_shared_experts",
                        "num_experts_per_tok",
                        "n_group",
                        "topk_group",
                        "q_lora_rank",
                        "kv_lora_rank",
                        "qk_nope_head_dim",
                        "qk_rope_head_dim",
                        "v_head_dim",
                        "index_n_heads",
                        "index_head_dim",
                        "index_topk",
                        "max_position_embeddings"}) {
    CAPTURE(k);
    json j = v32();
    j.erase(k);
    CHECK_REJECTS(
        j, std::string("dsa::model::config: v32.json: ") + k + " = <missing>; expected an integer (a required key)");
    j[k] = nullptr;
    CHECK_REJECTS(j, std::string("v32.json: ") + k + " = <missing>; expected an integer");
  }
  for (const char* k : {"routed_scaling_factor", "rms_norm_eps", "rope_theta"}) {
    json j = v32();
    j.erase(k);
    CHECK_REJECTS(j, std::string("v32.json: ") + k + " = <missing>; expected a number (a required key)");
  }
  for (const char* k : {"scoring_func", "topk_method"}) {
    json j = v32();
    j.erase(k);
    CHECK_REJECTS(j, std::string("v32.json: ") + k + " = <missing>; expected a string (a required key)");
  }
  json j = v32();
  j.erase("norm_topk_prob");
  CHECK_REJECTS(j, "v32.json: norm_topk_prob = <missing>; expected true or false (a required key)");

  for (const char* k :
       {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "type"}) {
    CAPTURE(k);
    json r = v32();
    r["rope_scaling"].erase(k);
    CHECK_REJECTS(r, std::string("v32.json: rope_scaling.") + k + " = <missing>; expected");
  }
  for (const char* k : {"quant_method", "weight_block_size"}) {
    json q = v32();
    q["quantization_config"].erase(k);
    CHECK_REJECTS(q, std::string("v32.json: quantization_config.") + k + " = <missing>; expected");
  }
}

TEST_CASE("config: wrong JSON types") {
  const auto with = [](const char* key, json value) {
    json j = v32();
    j[key] = std::move(value);
    return j;
  };
  CHECK_REJECTS(with("hidden_size", "7168"),
                "dsa::model::config: v32.json: hidden_size = '7168'; expected an integer");
  CHECK_REJECTS(with("hidden_size", 7168.0), "v32.json: hidden_size = 7168.0; expected an integer");
  CHECK_REJECTS(with("hidden_size", true), "v32.json: hidden_size = true; expected an integer");
  CHECK_REJECTS(with("num_hidden_layers", json::array({61})),
                "v32.json: num_hidden_layers = [61]; expected an integer");
  CHECK_REJECTS(with("vocab_size", json::parse("18446744073709551615")),
                "v32.json: vocab_size = 18446744073709551615; expected an integer in the int64 range");
  CHECK_REJECTS(with("routed_scaling_factor", "2.5"), "v32.json: routed_scaling_factor = '2.5'; expected a number");
  CHECK_REJECTS(with("rms_norm_eps", 1e300),
                "v32.json: rms_norm_eps = 1e+300; expected a finite number in the fp32 range");
  CHECK_REJECTS(with("norm_topk_prob", 1), "v32.json: norm_topk_prob = 1; expected true or false");
  CHECK_REJECTS(with("scoring_func", 3), "v32.json: scoring_func = 3; expected a string");
  CHECK_REJECTS(with("model_type", json::object()), "v32.json: model_type = {}; expected a string");
  CHECK_REJECTS(with("rope_scaling", 5), "v32.json: rope_scaling = 5; expected a JSON object or null");
  CHECK_REJECTS(with("quantization_config", json::array()),
                "v32.json: quantization_config = []; expected a JSON object or null");
  CHECK_REJECTS(with("tie_word_embeddings", "false"),
                "v32.json: tie_word_embeddings = 'false'; expected true or false");
  CHECK_REJECTS(with("eos_token_id", json::array({1, 2})), "v32.json: eos_token_id = [1,2]; expected an integer");
  CHECK_REJECTS(with("torch_dtype", 16), "v32.json: torch_dtype = 16; expected a string");

  json r = v32();
  r["rope_scaling"]["factor"] = "40";
  CHECK_REJECTS(r, "v32.json: rope_scaling.factor = '40'; expected a number");
  r = v32();
  r["rope_scaling"]["original_max_position_embeddings"] = 4096.5;
  CHECK_REJECTS(r, "v32.json: rope_scaling.original_max_position_embeddings = 4096.5; expected an integer");

  for (const json& bs : {json::array({128}), json::array({128, 128, 1}), json("128"), json::array({-128, 128}),
                         json::array({128.0, 128})}) {
    json q = v32();
    q["quantization_config"]["weight_block_size"] = bs;
    // A string is shown quoted, like every text from the file; numbers and arrays of them as they are.
    const std::string shown = bs.is_string() ? "'" + bs.get<std::string>() + "'" : bs.dump();
    CHECK_REJECTS(q, "v32.json: quantization_config.weight_block_size = " + shown + "; expected [128, 128]");
  }

  CHECK_THROWS_WITH_AS(config::from_json(json::array({v32()}), "arr.json"),
                       "dsa::model::config: arr.json: top-level value = array; expected a JSON object (a Hugging Face "
                       "config.json)",
                       dsa::error);
  CHECK_THROWS_WITH_AS(config::from_json(json("x"), "s.json"), doctest::Contains("top-level value = string;"),
                       dsa::error);
}

TEST_CASE("config: sizes out of range") {
  for (const char* k : {"hidden_size", "intermediate_size", "moe_intermediate_size", "num_attention_heads",
                        "n_routed_experts", "num_experts_per_tok", "n_group", "topk_group",
                        "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                        "index_n_heads", "index_head_dim", "index_topk", "max_position_embeddings"}) {
    CAPTURE(k);
    for (const long long v : {0LL, -1LL, 2147483648LL}) {
      json j = v32();
      j[k] = v;
      if (std::string(k) == "num_attention_heads") j["num_key_value_heads"] = v;
      CHECK_REJECTS(j, std::string("dsa::model::config: v32.json: ") + k + " = " + std::to_string(v) +
                           "; expected a positive integer <= 2147483647");
    }
  }
  for (const char* k : {"n_shared_experts", "first_k_dense_replace", "num_nextn_predict_layers"}) {
    json j = v32();
    j[k] = -1;
    CHECK_REJECTS(j, std::string("v32.json: ") + k + " = -1; expected an integer in [0, 2147483647]");
  }
  json j = v32();
  j["rope_scaling"]["original_max_position_embeddings"] = 0;
  CHECK_REJECTS(j, "v32.json: rope_scaling.original_max_position_embeddings = 0; expected a positive integer");

  // Zero shared experts and zero dense layers are legal.
  j = v32();
  j["n_shared_experts"] = 0;
  j["first_k_dense_replace"] = 0;
  CHECK(parse(j).is_moe_layer(0));
  j["first_k_dense_replace"] = 61;  // all dense
  CHECK_FALSE(parse(j).is_moe_layer(60));
}

TEST_CASE("config: sizes that allocations follow have documented bounds, named in the message (issue 14)") {
  // num_hidden_layers 1e9 and vocab_size 2^31 - 1 used to pass and end in std::bad_alloc.
  struct bound_case {
    const char* key;
    long long max;
    const char* why;
  };
  const bound_case cases[] = {{"vocab_size", 1LL << 24, "2^24: a bound far above any real vocabulary"},
                              {"num_hidden_layers", 1024, "a bound far above any real model"}};
  for (const auto& [key, max, why] : cases) {
    CAPTURE(key);
    json j = v32();
    j[key] = max;
    CHECK_NOTHROW(parse(j));
    for (const long long v : {max + 1, 1'000'000'000LL, 2147483647LL, 0LL, -1LL}) {
      CAPTURE(v);
      j[key] = v;
      CHECK_REJECTS(j, std::string("dsa::model::config: v32.json: ") + key + " = " + std::to_string(v) +
                           "; expected a positive integer <= " + std::to_string(max) + " (" + why);
    }
  }
  // index_topk: no token can select more positions than a sequence holds.
  json j = v32();
  j["index_topk"] = 163840;
  CHECK(parse(j).index_topk == 163840);
  j["index_topk"] = 163841;
  CHECK_REJECTS(j, "dsa::model::config: v32.json: index_topk = 163841; expected <= max_position_embeddings = 163840 "
                   "(no token can select more positions than a sequence holds)");
  j["index_topk"] = 2147483647;
  CHECK_REJECTS(j, "v32.json: index_topk = 2147483647; expected <= max_position_embeddings = 163840");
  j = v32();
  j["max_position_embeddings"] = 1024;
  j.erase("rope_scaling");
  CHECK_REJECTS(j, "v32.json: index_topk = 2048; expected <= max_position_embeddings = 1024");
  // Through load(): the message names the file and the key, and nothing was sized by the value.
  temp_dir tmp;
  j = v32();
  j["num_hidden_layers"] = 1'000'000'000;
  const fs::path file = tmp.write("config.json", j.dump());
  CHECK_THROWS_WITH_AS(config::load(tmp.path),
                       doctest::Contains(("dsa::model::config: '" + file.string() +
                                          "': num_hidden_layers = 1000000000; expected a positive integer <= 1024")
                                             .c_str()),
                       dsa::error);
  // A hand-built config (what dsa_make_tiny_model validates before writing) is held to the same.
  config c = parse(v32());
  c.vocab_size = 2147483647;
  CHECK_THROWS_WITH_AS(c.validate("dsa_make_tiny_model"),
                       doctest::Contains("dsa_make_tiny_model: vocab_size = 2147483647; expected a positive integer "
                                         "<= 16777216"),
                       dsa::error);
}

TEST_CASE("config: inconsistent MoE routing") {
  json j = v32();
  j["n_routed_experts"] = 250;
  CHECK_REJECTS(j, "dsa::model::config: v32.json: n_routed_experts = 250; expected a multiple of n_group = 8");

  j = v32();
  j["topk_group"] = 9;
  CHECK_REJECTS(j, "v32.json: topk_group = 9; expected <= n_group = 8");

  j = v32();
  j["num_experts_per_tok"] = 129;  // 4 kept groups of 32
  CHECK_REJECTS(j, "v32.json: num_experts_per_tok = 129; expected <= topk_group * (n_routed_experts / n_group) = 128");
  j["num_experts_per_tok"] = 128;
  CHECK(parse(j).num_experts_per_tok == 128);

  j = v32();
  j["n_routed_experts"] = 8;  // one expert per group: no top-2 group score
  j["num_experts_per_tok"] = 4;
  CHECK_REJECTS(j, "v32.json: n_routed_experts = 8; expected at least 2 experts per group (n_group = 8)");
  j["n_group"] = 1;  // no grouping: fine
  j["topk_group"] = 1;
  CHECK(parse(j).n_group == 1);

  j = v32();
  j["scoring_func"] = "softmax";
  CHECK_REJECTS(j, "v32.json: scoring_func = 'softmax'; expected \"sigmoid\"");
  j = v32();
  j["topk_method"] = "group_limited_greedy";
  CHECK_REJECTS(j, "v32.json: topk_method = 'group_limited_greedy'; expected \"noaux_tc\"");
  j = v32();
  j["routed_scaling_factor"] = 0;
  CHECK_REJECTS(j, "v32.json: routed_scaling_factor = 0; expected a positive number");
  j = v32();
  j["hidden_act"] = "gelu";
  CHECK_REJECTS(j, "v32.json: hidden_act = 'gelu'; expected \"silu\"");
  j = v32();
  j["moe_layer_freq"] = 2;
  CHECK_REJECTS(j, "v32.json: moe_layer_freq = 2; expected 1");
}

TEST_CASE("config: inconsistent attention shapes") {
  json j = v32();
  j["first_k_dense_replace"] = 62;
  CHECK_REJECTS(j, "dsa::model::config: v32.json: first_k_dense_replace = 62; expected <= num_hidden_layers = 61");

  j = v32();
  j["num_key_value_heads"] = 1;
  CHECK_REJECTS(j, "v32.json: num_key_value_heads = 1; expected num_attention_heads = 128");

  j = v32();
  j["qk_rope_head_dim"] = 63;
  CHECK_REJECTS(j, "v32.json: qk_rope_head_dim = 63; expected an even number");

  j = v32();
  j["qk_rope_head_dim"] = 256;
  CHECK_REJECTS(j, "v32.json: index_head_dim = 128; expected >= qk_rope_head_dim = 256");

  j = v32();
  j["index_head_dim"] = 256;
  CHECK_REJECTS(j, "v32.json: index_head_dim = 256; expected 128");
  j["index_head_dim"] = 64;
  CHECK_REJECTS(j, "v32.json: index_head_dim = 64; expected 128");

  j = v32();
  j["kv_lora_rank"] = 500;
  CHECK_REJECTS(j, "v32.json: kv_lora_rank = 500; expected a multiple of 128");
  j.erase("quantization_config");  // the KV cache needs it with bf16 weights too
  CHECK_REJECTS(j, "v32.json: kv_lora_rank = 500; expected a multiple of 128");

  j = v32();
  j["rms_norm_eps"] = 0;
  CHECK_REJECTS(j, "v32.json: rms_norm_eps = 0; expected a positive number");
  j = v32();
  j["rope_theta"] = 1;
  CHECK_REJECTS(j, "v32.json: rope_theta = 1; expected a number > 1");

  j = v32();
  j["attention_bias"] = true;
  CHECK_REJECTS(j, "v32.json: attention_bias = true; expected false");
  j = v32();
  j["rope_interleave"] = false;
  CHECK_REJECTS(j, "v32.json: rope_interleave = false; expected true");
  j["rope_interleave"] = true;
  CHECK(parse(j) == parse(v32()));
  j = v32();
  j["indexer_rope_interleave"] = true;
  CHECK_REJECTS(j, "v32.json: indexer_rope_interleave = true; expected false");

  j = v32();
  j["bos_token_id"] = 129280;
  CHECK_REJECTS(j, "v32.json: bos_token_id = 129280; expected a token id in [0, vocab_size = 129280)");
  j = v32();
  j["eos_token_id"] = -1;
  CHECK_REJECTS(j, "v32.json: eos_token_id = -1; expected a token id in [0, vocab_size = 129280)");

  j = v32();
  j["torch_dtype"] = "int8";
  CHECK_REJECTS(j, "v32.json: torch_dtype = 'int8'; expected \"bfloat16\", \"float16\" or \"float32\"");
  j = v32();
  j["dtype"] = "float32";
  CHECK_REJECTS(j, "v32.json: dtype = 'float32'; expected the same value as torch_dtype = 'bfloat16'");
}

TEST_CASE("config: rope_scaling") {
  const auto with = [](const char* key, json value) {
    json j = v32();
    j["rope_scaling"][key] = std::move(value);
    return j;
  };
  CHECK_REJECTS(with("type", "linear"),
                "dsa::model::config: v32.json: rope_scaling.type = 'linear'; expected \"yarn\"");
  CHECK_REJECTS(
      with("rope_type", "dynamic"),
      "v32.json: rope_scaling.rope_type = 'dynamic'; expected the same value as rope_scaling.type = 'yarn'");
  CHECK_REJECTS(with("factor", 0.5), "v32.json: rope_scaling.factor = 0.5; expected a number >= 1");
  CHECK_REJECTS(with("factor", -40), "v32.json: rope_scaling.factor = -40; expected a number >= 1");
  CHECK_REJECTS(with("beta_slow", 0), "v32.json: rope_scaling.beta_slow = 0; expected a positive number");
  CHECK_REJECTS(with("beta_fast", 0.5),
                "v32.json: rope_scaling.beta_fast = 0.5; expected >= rope_scaling.beta_slow = 1");
  CHECK_REJECTS(
      with("mscale", 0.707),
      "v32.json: rope_scaling.mscale = 0.707; expected rope_scaling.mscale_all_dim = 1 (DeepSeek's reference");
  json j = with("mscale_all_dim", -1);
  j["rope_scaling"]["mscale"] = -1;
  CHECK_REJECTS(j, "v32.json: rope_scaling.mscale_all_dim = -1; expected a number >= 0");
  CHECK(parse(with("beta_fast", 1)).rope_scaling->beta_fast == 1.0f);  // equal betas: a step ramp
}

TEST_CASE("config: quantization_config") {
  const auto with = [](const char* key, json value) {
    json j = v32();
    j["quantization_config"][key] = std::move(value);
    return j;
  };
  CHECK_REJECTS(with("quant_method", "gptq"),
                "dsa::model::config: v32.json: quantization_config.quant_method = 'gptq'; expected \"fp8\"");
  CHECK_REJECTS(with("fmt", "e5m2"), "v32.json: quantization_config.fmt = 'e5m2'; expected \"e4m3\"");
  CHECK_REJECTS(with("activation_scheme", "static"),
                "v32.json: quantization_config.activation_scheme = 'static'; expected \"dynamic\"");
  CHECK_REJECTS(with("scale_fmt", "fp32"),
                "v32.json: quantization_config.scale_fmt = 'fp32'; expected \"ue8m0\", or the key absent");
  CHECK_REJECTS(with("weight_block_size", json::array({64, 128})),
                "v32.json: quantization_config.weight_block_size = [64, 128]; expected [128, 128]");
  CHECK_REJECTS(with("weight_block_size", json::array({128, 256})),
                "v32.json: quantization_config.weight_block_size = [128, 256]; expected [128, 128]");
  CHECK_REJECTS(with("weight_block_size", json::parse("[128, 18446744073709551615]")),
                "v32.json: quantization_config.weight_block_size = [128,18446744073709551615]; expected [128, 128]");

  // Every FP8 linear quantizes its input in 1x128 groups.
  const auto size = [](const char* key, dsa::index_t v) {
    json j = v32();
    j[key] = v;
    return j;
  };
  CHECK_REJECTS(size("hidden_size", 7000), "v32.json: hidden_size = 7000; expected a multiple of 128 with FP8 weights");
  CHECK_REJECTS(size("q_lora_rank", 1500), "v32.json: q_lora_rank = 1500; expected a multiple of 128 with FP8 weights");
  CHECK_REJECTS(size("intermediate_size", 18000),
                "v32.json: intermediate_size = 18000; expected a multiple of 128 with FP8 weights");
  CHECK_REJECTS(size("moe_intermediate_size", 2000),
                "v32.json: moe_intermediate_size = 2000; expected a multiple of 128 with FP8 weights");
  json j = v32();
  j["num_attention_heads"] = 127;
  j["num_key_value_heads"] = 127;
  j["v_head_dim"] = 100;
  CHECK_REJECTS(
      j, "v32.json: v_head_dim = 100; expected num_attention_heads * v_head_dim (= 127 * 100) a multiple of 128");
  j["v_head_dim"] = 128;  // 127 * 128 is a multiple
  CHECK(parse(j).num_attention_heads == 127);
}

TEST_CASE("config: load() failures") {
  temp_dir tmp;

  const fs::path missing = tmp.path / "nope.json";
  CHECK_THROWS_WITH_AS(config::load(missing),
                       doctest::Contains(("dsa::model::config: '" + missing.string() +
                                          "': file = <not found>; expected an existing config.json")
                                             .c_str()),
                       dsa::error);

  const fs::path empty_dir = tmp.path / "model";
  fs::create_directories(empty_dir);
  CHECK_THROWS_WITH_AS(config::load(empty_dir),
                       ("dsa::model::config: '" + (empty_dir / "config.json").string() +
                        "': file = <not found>; expected a config.json in the directory '" + empty_dir.string() + "'")
                           .c_str(),
                       dsa::error);

  fs::create_directories(tmp.path / "odd" / "config.json");
  CHECK_THROWS_WITH_AS(config::load(tmp.path / "odd"),
                       doctest::Contains("file = <a directory>; expected a config.json file"), dsa::error);

  CHECK_THROWS_WITH_AS(config::load("/dev/null"),
                       "dsa::model::config: '/dev/null': file = <not a regular file>; expected a config.json file",
                       dsa::error);

  const fs::path bad = tmp.write("bad.json", "{\"model_type\": \"deepseek_v32\",\n  \"hidden_size\": 7168,,}");
  CHECK_THROWS_WITH_AS(config::load(bad),
                       doctest::Contains(
                           ("dsa::model::config: '" + bad.string() + "': JSON = 'parse error at line 2").c_str()),
                       dsa::error);
  CHECK_THROWS_WITH_AS(config::load(bad), doctest::Contains("line 2"), dsa::error);
  CHECK_THROWS_WITH_AS(config::load(bad), doctest::Contains("; expected a valid JSON document"), dsa::error);

  const fs::path truncated = tmp.write("truncated.json", std::string(v32_text).substr(0, 300));
  CHECK_THROWS_WITH_AS(config::load(truncated), doctest::Contains("expected a valid JSON document"), dsa::error);

  const fs::path empty = tmp.write("empty.json", "");
  CHECK_THROWS_WITH_AS(config::load(empty), doctest::Contains("expected a valid JSON document"), dsa::error);

  const fs::path array = tmp.write("array.json", std::string("[") + v32_text + "]");
  CHECK_THROWS_WITH_AS(
      config::load(array),
      doctest::Contains(
          ("dsa::model::config: '" + array.string() + "': top-level value = array; expected a JSON object").c_str()),
      dsa::error);

  std::string dup = v32_text;
  dup.insert(dup.find("\"vocab_size\""), "\"vocab_size\": 1000,\n  ");
  const fs::path twice = tmp.write("twice.json", dup);
  CHECK_THROWS_WITH_AS(
      config::load(twice),
      doctest::Contains(
          ("dsa::model::config: '" + twice.string() + "': key 'vocab_size' = <given twice>; expected each key once")
              .c_str()),
      dsa::error);
  std::string dup_nested = v32_text;
  dup_nested.insert(dup_nested.find("\"factor\""), "\"factor\": 4,\n    ");
  CHECK_THROWS_WITH_AS(config::load(tmp.write("twice_nested.json", dup_nested)),
                       doctest::Contains("key 'factor' = <given twice>"), dsa::error);

  // Deep nesting is refused while parsing (an error naming the bound, never a stack overflow
  // when the value is later printed or destroyed), at the top and as the value of a key.
  const fs::path deep = tmp.write("deep.json", std::string(100000, '[') + std::string(100000, ']'));
  CHECK_THROWS_WITH_AS(config::load(deep), doctest::Contains("JSON = <nested deeper than 64 levels>"), dsa::error);
  std::string deep_value = v32_text;
  deep_value.replace(deep_value.find("7168"), 4, std::string(100000, '[') + std::string(100000, ']'));
  CHECK_THROWS_WITH_AS(config::load(tmp.write("deep_value.json", deep_value)),
                       doctest::Contains("nested deeper than 64 levels"), dsa::error);
  std::string deep_ok = v32_text;  // 64 levels are fine (and then a wrong type for the key)
  deep_ok.replace(deep_ok.find("7168"), 4, std::string(63, '[') + std::string(63, ']'));
  try {
    config::load(tmp.write("deep_ok.json", deep_ok));
    FAIL("a nested array as hidden_size was accepted");
  } catch (const dsa::error& e) {
    CHECK(std::string(e.what()).find("hidden_size") != std::string::npos);
    CHECK(std::string(e.what()).find("nested deeper") == std::string::npos);
  }

  const fs::path huge = tmp.path / "huge.json";
  std::ofstream(huge) << "{}";
  fs::resize_file(huge, (std::uintmax_t{16} << 20) + 1);  // sparse: costs no disk
  CHECK_THROWS_WITH_AS(config::load(huge), doctest::Contains("file size = 16777217 bytes; expected at most 16 MiB"),
                       dsa::error);

  // Validation errors name the file that was loaded.
  json j = v32();
  j["n_group"] = 7;
  const fs::path inconsistent = tmp.write("inconsistent.json", j.dump());
  CHECK_THROWS_WITH_AS(
      config::load(inconsistent),
      ("dsa::model::config: '" + inconsistent.string() +
       "': n_routed_experts = 256; expected a multiple of n_group = 7")
          .c_str(),
      dsa::error);

  tmp.write("config.json", v32_text);
  CHECK(config::load(tmp.path) == parse(v32()));
}

TEST_CASE("config: a checkpoint's config.json must not link outside its directory (issue 33)") {
  // A downloaded checkpoint whose config.json links to a private file: reading it would put the
  // file's first bytes in the parse error. Refused before it is opened.
  temp_dir outside, ckpt;
  const fs::path secret = outside.write("id_rsa", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n");
  fs::create_symlink(secret, ckpt.path / "config.json");
  try {
    config::load(ckpt.path);
    FAIL("a config.json linking outside the checkpoint was read");
  } catch (const dsa::error& e) {
    const std::string m = e.what();
    CAPTURE(m);
    CHECK(m.find("dsa::model::config: '" + (ckpt.path / "config.json").string() + "': real path = '" +
                 secret.string() + "'; expected a file inside the checkpoint directory '" + ckpt.path.string() +
                 "'") == 0);
    CHECK(m.find("BEGIN") == std::string::npos);
    CHECK(m.find("b3Blbn") == std::string::npos);
  }
  // A link to a device or a FIFO outside is refused the same way, before it could block.
  fs::remove(ckpt.path / "config.json");
  fs::create_symlink("/dev/zero", ckpt.path / "config.json");
  CHECK_THROWS_WITH_AS(config::load(ckpt.path), doctest::Contains("real path = '/dev/zero'"), dsa::error);
  // Links inside the directory are fine, and so is the Hugging Face hub cache's layout.
  fs::remove(ckpt.path / "config.json");
  ckpt.write("real-config.json", v32_text);
  fs::create_symlink("real-config.json", ckpt.path / "config.json");
  CHECK(config::load(ckpt.path) == parse(v32()));
  temp_dir repo;
  fs::create_directories(repo.path / "blobs");
  fs::create_directories(repo.path / "snapshots" / "5eed");
  repo.write("blobs/9f86d081", v32_text);
  fs::create_symlink("../../blobs/9f86d081", repo.path / "snapshots" / "5eed" / "config.json");
  CHECK(config::load(repo.path / "snapshots" / "5eed") == parse(v32()));
  // A file the caller names itself is read as named: the caller chose it.
  fs::remove(ckpt.path / "config.json");
  fs::create_symlink(outside.write("mine.json", v32_text), ckpt.path / "config.json");
  CHECK_THROWS_WITH_AS(config::load(ckpt.path), doctest::Contains("real path = "), dsa::error);
  CHECK(config::load(ckpt.path / "config.json") == parse(v32()));
}

TEST_CASE("config: file-supplied text in messages is quoted and bounded (issue 33)") {
  temp_dir tmp;
  // A 15 MiB model_type (the file may be up to 16 MiB) was printed whole.
  json j = v32();
  j["model_type"] = std::string(std::size_t{15} << 20, 'q') + "\x1b]0;owned\x07";
  const fs::path file = tmp.write("big.json", j.dump());
  try {
    config::load(file);
    FAIL("a 15 MiB model_type was accepted");
  } catch (const dsa::error& e) {
    const std::string m = e.what();
    CHECK(m.size() < 1024);
    CHECK(m.find("model_type = 'qqqq") != std::string::npos);
    CHECK(m.find("... (15728650 bytes in all); expected \"deepseek_v32\"") != std::string::npos);
  }
  // A duplicate key with a terminal escape: quoted, escaped.
  const fs::path dup = tmp.write("dup.json", "{\"\\u001b[2J\": 1, \"\\u001b[2J\": 2}");
  CHECK_THROWS_WITH_AS(config::load(dup), doctest::Contains("key '\\x1b[2J' = <given twice>"), dsa::error);
  // An unterminated 1 MiB string: the parser's message quotes its last token, cut.
  const fs::path open_string = tmp.write("open.json", "{\"model_type\": \"" + std::string(1 << 20, 'z'));
  try {
    config::load(open_string);
    FAIL("an unterminated string parsed");
  } catch (const dsa::error& e) {
    const std::string m = e.what();
    CHECK(m.size() < 1024);
    CHECK(m.find("JSON = 'parse error") != std::string::npos);
    CHECK(m.find("bytes in all); expected a valid JSON document") != std::string::npos);
  }
  // A string where a number belongs: quoted and cut too.
  j = v32();
  j["hidden_size"] = std::string(100000, '7');
  CHECK_THROWS_WITH_AS(parse(j), doctest::Contains("hidden_size = '7777"), dsa::error);
  CHECK_THROWS_WITH_AS(parse(j), doctest::Contains("... (100000 bytes in all); expected an integer"), dsa::error);
}
