// dsa::model::transformer on the tiny DeepSeek-V3.2 checkpoint (tests/data/tiny-dsv32): chunked
// prefill, interleaved sequences, decode (absorbed MQA) against prefill (MHA), phase timers,
// progress callbacks and bad input. The golden replay itself is test_transformer_golden.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <vector>

#include <unistd.h>

#include "dsa/core/backend.hpp"
#include "dsa/model/safetensors.hpp"
#include "dsa/model/transformer.hpp"

namespace {

using dsa::index_t;
using model_t = dsa::model::transformer<dsa::cpu_backend>;

const std::filesystem::path tiny_dir = std::filesystem::path(DSA_TEST_DATA_DIR) / "tiny-dsv32";

std::vector<std::int64_t> golden_tokens(const char* name) {
  const auto f = dsa::safetensors_file::open(tiny_dir / "expected.safetensors");
  const auto v = f.view<std::int64_t, 2>(name);
  return {v.data_handle(), v.data_handle() + v.size()};
}

const std::vector<std::int64_t>& prompt() {
  static const std::vector<std::int64_t> p = golden_tokens("prompt");  // 80 tokens
  return p;
}
const std::vector<std::int64_t>& generated() {
  static const std::vector<std::int64_t> g = golden_tokens("generated");  // 8 tokens
  return g;
}

model_t load(int threads = 2) { return model_t::load(tiny_dir, dsa::cpu_backend{threads}); }

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The tiny model's index_topk.
constexpr index_t tiny_topk = 32;

// Per layer, per absolute position: the indexer's selection row, -1 padded to index_topk entries
// (a trace's rows are min(index_topk, chunk end) wide: no token of the chunk has more positions).
using topk_log = std::map<index_t, std::map<index_t, std::vector<std::int32_t>>>;

dsa::model::forward_options recorder(topk_log& log) {
  dsa::model::forward_options o;
  o.observer = [&log](const dsa::model::layer_trace& tr) {
    CHECK(tr.topk.extent(1) == std::min(tiny_topk, tr.start + tr.topk.extent(0)));
    for (index_t r = 0; r < tr.topk.extent(0); ++r) {
      auto& row = log[tr.layer][tr.start + r];
      row.assign(tr.topk.row(r), tr.topk.row(r) + tr.topk.extent(1));
      row.resize(static_cast<std::size_t>(tiny_topk), -1);
    }
  };
  return o;
}

// Prefills the prompt in chunks of the given sizes (explicit forward calls); returns the
// logits of the last token.
std::vector<float> prefill_chunks(model_t& m, dsa::model::sequence& seq, const std::vector<index_t>& sizes,
                                  topk_log& log) {
  std::vector<float> logits;
  index_t at = 0;
  for (index_t n : sizes) {
    logits = m.forward(seq, std::span<const std::int64_t>(prompt().data() + at, static_cast<std::size_t>(n)), recorder(log));
    at += n;
  }
  REQUIRE(at == static_cast<index_t>(prompt().size()));
  return logits;
}

}  // namespace

TEST_CASE("chunked prefill at non-zero start positions equals one-shot prefill bit for bit") {
  // Measured: bit-identical logits and top-k for every split into chunks of >= 2 tokens. A
  // prefill row depends only on itself and the cached rows before it: the FP8 linears are exact
  // per 128-block (batch-invariant), norms, RoPE, Hadamard, act_quant and the attention are per
  // row, and the chunk re-up-projects the cached latents with the same batch-invariant FP8
  // linear. (A one-token chunk is a decode step, the absorbed MQA path: see the decode test.)
  auto m = load();
  topk_log one_log;
  auto one = m.new_sequence(80);
  const std::vector<float> one_shot = m.forward(one, prompt(), recorder(one_log));
  REQUIRE(one.length() == 80);

  for (const std::vector<index_t>& sizes : std::vector<std::vector<index_t>>{{30, 50}, {17, 40, 23}, {2, 78}, {78, 2}, {40, 2, 38}}) {
    CAPTURE(sizes.size());
    CAPTURE(sizes[0]);
    topk_log log;
    auto seq = m.new_sequence(80);
    const std::vector<float> chunked = prefill_chunks(m, seq, sizes, log);
    CHECK(seq.length() == 80);
    CHECK(same_bits(chunked, one_shot));
    for (index_t l = 0; l < m.num_layers(); ++l) {
      for (index_t t = 0; t < 80; ++t) {
        CAPTURE(l);
        CAPTURE(t);
        REQUIRE(log[l].count(t) == 1);
        CHECK(log[l][t] == one_log[l][t]);
      }
    }
  }

  // forward_options::max_chunk splits one call the same way.
  for (index_t max_chunk : {3, 7, 25, 80, 4096}) {
    CAPTURE(max_chunk);
    topk_log log;
    auto opt = recorder(log);
    opt.max_chunk = max_chunk;
    auto seq = m.new_sequence(80);
    const std::vector<float> chunked = m.forward(seq, prompt(), opt);
    CHECK(same_bits(chunked, one_shot));
    for (index_t l = 0; l < m.num_layers(); ++l) {
      for (index_t t = 0; t < 80; ++t) CHECK(log[l][t] == one_log[l][t]);
    }
  }
}

TEST_CASE("top-k rows select only causal positions, ascending, -1 padded") {
  auto m = load();
  topk_log log;
  auto seq = m.new_sequence(80);
  m.forward(seq, prompt(), recorder(log));
  const index_t k = m.config().index_topk;
  REQUIRE(k == tiny_topk);
  for (index_t l = 0; l < m.num_layers(); ++l) {
    for (index_t t = 0; t < 80; ++t) {
      const auto& row = log[l][t];
      REQUIRE(static_cast<index_t>(row.size()) == k);
      const index_t used = std::min(k, t + 1);
      for (index_t j = 0; j < k; ++j) {
        if (j < used) {
          CHECK(row[static_cast<std::size_t>(j)] >= 0);
          CHECK(row[static_cast<std::size_t>(j)] <= t);
          if (j > 0) CHECK(row[static_cast<std::size_t>(j)] > row[static_cast<std::size_t>(j - 1)]);
        } else {
          CHECK(row[static_cast<std::size_t>(j)] == -1);
        }
      }
    }
  }
}

TEST_CASE("interleaved sequences give the same logits as each sequence alone") {
  auto m = load();
  const std::vector<std::int64_t> a = prompt();
  // B: a different, shorter prompt (the golden prompt's first 45 tokens, reversed).
  const std::vector<std::int64_t> b(prompt().rbegin() + 35, prompt().rend());
  REQUIRE(b.size() == 45);
  const std::vector<std::int64_t> next = generated();
  const int steps = 4;

  auto run_alone = [&](const std::vector<std::int64_t>& p) {
    std::vector<std::vector<float>> out;
    auto seq = m.new_sequence(static_cast<index_t>(p.size()) + steps);
    out.push_back(m.forward(seq, p));
    for (int s = 0; s < steps; ++s) out.push_back(m.forward(seq, std::span<const std::int64_t>(&next[static_cast<std::size_t>(s)], 1)));
    return out;
  };
  const auto alone_a = run_alone(a);
  const auto alone_b = run_alone(b);

  auto sa = m.new_sequence(static_cast<index_t>(a.size()) + steps);
  auto sb = m.new_sequence(static_cast<index_t>(b.size()) + steps);
  CHECK(same_bits(m.forward(sa, a), alone_a[0]));
  CHECK(same_bits(m.forward(sb, b), alone_b[0]));
  for (int s = 0; s < steps; ++s) {
    CAPTURE(s);
    const std::span<const std::int64_t> tok(&next[static_cast<std::size_t>(s)], 1);
    CHECK(same_bits(m.forward(sa, tok), alone_a[static_cast<std::size_t>(s + 1)]));
    CHECK(same_bits(m.forward(sb, tok), alone_b[static_cast<std::size_t>(s + 1)]));
  }
  CHECK(sa.length() == 84);
  CHECK(sb.length() == 49);
  // The two prompts really are different computations.
  CHECK(!same_bits(alone_a[0], alone_b[0]));
}

TEST_CASE("results do not depend on the thread count") {
  auto m1 = load(1);
  auto m3 = load(3);
  auto s1 = m1.new_sequence(82);
  auto s3 = m3.new_sequence(82);
  CHECK(same_bits(m1.forward(s1, prompt()), m3.forward(s3, prompt())));
  for (int s = 0; s < 2; ++s) {
    const std::span<const std::int64_t> tok(&generated()[static_cast<std::size_t>(s)], 1);
    CHECK(same_bits(m1.forward(s1, tok), m3.forward(s3, tok)));
  }
}

TEST_CASE("packing the FP8 weights (the CPU default) changes no bit of prefill or decode, in either block-dot mode") {
  for (auto mode : {dsa::fp8_dot::exact, dsa::fp8_dot::fp32}) {
    CAPTURE(static_cast<int>(mode));
    dsa::cpu_backend packed_be{2}, plain_be{2};
    packed_be.fp8_block_dot = plain_be.fp8_block_dot = mode;
    plain_be.pack_fp8_weights = false;
    auto packed = model_t::load(tiny_dir, packed_be);
    auto plain = model_t::load(tiny_dir, plain_be);
    const auto& attn = packed.weights().layers[0].attn;
    CHECK(attn.q_a_proj.packed != nullptr);
    CHECK(attn.kv_b_proj.packed == nullptr);  // read absorbed (decode) or sliced (prefill), never whole
    CHECK(plain.weights().layers[0].attn.q_a_proj.packed == nullptr);
    const auto& last = packed.weights().layers.back();
    CHECK((last.moe && last.moe->experts.front().down_proj.packed != nullptr));
    auto sp = packed.new_sequence(84);
    auto sq = plain.new_sequence(84);
    CHECK(same_bits(packed.forward(sp, prompt()), plain.forward(sq, prompt())));
    for (int s = 0; s < 4; ++s) {
      const std::span<const std::int64_t> tok(&generated()[static_cast<std::size_t>(s)], 1);
      CHECK(same_bits(packed.forward(sp, tok), plain.forward(sq, tok)));
    }
  }
}

TEST_CASE("decode at position p (absorbed MQA) agrees with the last row of a prefill of p + 1 tokens (MHA)") {
  // The two modes are the reference's two code paths: the same mathematics with different
  // rounding points (MHA: per-head bf16 keys/values from wkv_b, one bf16 score; absorbed MQA:
  // q_nope · W_UK in bf16, two bf16 partial scores, P · c, then W_UV). Measured on this model:
  //   - layer 0's attention output (the residual after attention minus the embedding, before
  //     any MoE) has cosine >= 0.9995 between the modes; asserted >= 0.999;
  //   - the MoE layers amplify the bf16-level differences (a routing flip moves a token's FFN
  //     output by a whole expert): the residual stream stays at cosine >= 0.985 (asserted
  //     0.98), the logits at >= 0.929 (asserted 0.9; 0.97 at p = 1 and 60, 0.93 at p = 79).
  // The gap belongs to the reference itself: at position 80 our prefill is as far from the
  // reference's decode logits (golden step1) as from our decode, while our decode reproduces
  // the reference's decode at cosine > 0.999 (checked below).
  auto m = load();
  const auto& emb = m.weights().embed_tokens;
  const index_t d = m.config().hidden_size;
  for (index_t p : {1, 5, 31, 32, 33, 60, 79}) {
    CAPTURE(p);
    // Per layer: the last row's residual (after attention) as floats.
    std::vector<std::vector<float>> res_prefill, res_decode;
    auto last_rows = [d](std::vector<std::vector<float>>& out) {
      dsa::model::forward_options o;
      o.observer = [&out, d](const dsa::model::layer_trace& tr) {
        const index_t r = tr.residual.extent(0) - 1;
        std::vector<float> v(static_cast<std::size_t>(d));
        for (index_t c = 0; c < d; ++c) v[static_cast<std::size_t>(c)] = tr.residual(r, c).to_float();
        out.push_back(std::move(v));
      };
      return o;
    };
    const std::span<const std::int64_t> all(prompt().data(), static_cast<std::size_t>(p + 1));
    auto full = m.new_sequence(p + 1);
    const std::vector<float> prefill = m.forward(full, all, last_rows(res_prefill));
    auto dec = m.new_sequence(p + 1);
    m.forward(dec, all.first(static_cast<std::size_t>(p)));
    const std::vector<float> decode = m.forward(dec, all.subspan(static_cast<std::size_t>(p), 1), last_rows(res_decode));
    REQUIRE(res_prefill.size() == static_cast<std::size_t>(m.num_layers()));
    REQUIRE(res_decode.size() == res_prefill.size());
    std::vector<float> attn_prefill(static_cast<std::size_t>(d)), attn_decode(static_cast<std::size_t>(d));
    for (index_t c = 0; c < d; ++c) {
      const float e = emb(prompt()[static_cast<std::size_t>(p)], c).to_float();
      attn_prefill[static_cast<std::size_t>(c)] = res_prefill[0][static_cast<std::size_t>(c)] - e;
      attn_decode[static_cast<std::size_t>(c)] = res_decode[0][static_cast<std::size_t>(c)] - e;
    }
    const double c_attn = cosine(attn_prefill, attn_decode);
    const double c_logits = cosine(prefill, decode);
    MESSAGE("p = " << p << ": layer-0 attention cosine " << c_attn << ", logits cosine " << c_logits);
    CHECK(c_attn >= 0.999);
    for (std::size_t l = 0; l < res_prefill.size(); ++l) {
      CAPTURE(l);
      CHECK(cosine(res_prefill[l], res_decode[l]) >= 0.98);
    }
    CHECK(c_logits >= 0.9);
  }

  // Position 80 against the golden decode step 1 (reference decode of generated[0]).
  const auto f = dsa::safetensors_file::open(tiny_dir / "expected.safetensors");
  const auto ev = f.view<float, 2>("step1.logits");
  const std::vector<float> ref_decode(ev.data_handle(), ev.data_handle() + ev.size());
  std::vector<std::int64_t> p81 = prompt();
  p81.push_back(generated()[0]);
  auto full = m.new_sequence(81);
  const std::vector<float> prefill = m.forward(full, p81);
  auto dec = m.new_sequence(81);
  m.forward(dec, prompt());
  const std::vector<float> decode = m.forward(dec, std::span<const std::int64_t>(&p81[80], 1));
  const double ours = cosine(decode, ref_decode), modes = cosine(prefill, decode), cross = cosine(prefill, ref_decode);
  MESSAGE("position 80: decode vs reference decode " << ours << ", prefill vs decode " << modes
                                                      << ", prefill vs reference decode " << cross);
  CHECK(ours >= 0.999);
  CHECK(std::fabs(cross - modes) <= 0.005);
}

TEST_CASE("phase timers are non-negative and sum to at most the wall time") {
  auto m = load();
  const auto& t0 = m.phase_times();
  CHECK(t0.total() == 0.0);
  auto seq = m.new_sequence(84);
  const auto start = std::chrono::steady_clock::now();
  m.forward(seq, prompt());
  for (int s = 0; s < 4; ++s) m.forward(seq, std::span<const std::int64_t>(&generated()[static_cast<std::size_t>(s)], 1));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto& t = m.phase_times();
  for (double x : {t.indexer, t.topk, t.attention, t.moe, t.other}) CHECK(x >= 0.0);
  CHECK(t.indexer > 0.0);
  CHECK(t.attention > 0.0);
  CHECK(t.moe > 0.0);
  CHECK(t.total() > 0.0);
  CHECK(t.total() <= wall);
  MESSAGE("phases " << t.total() << " s of " << wall << " s wall");
  m.reset_phase_times();
  CHECK(m.phase_times().total() == 0.0);
}

TEST_CASE("the observer reports each MoE layer's routed experts, the same in chunks as in one call") {
  auto m = load();
  const auto& c = m.config();
  using expert_log = std::map<index_t, std::map<index_t, std::vector<std::int32_t>>>;
  const auto record = [](expert_log& log, index_t max_chunk) {
    dsa::model::forward_options o;
    o.max_chunk = max_chunk;
    o.observer = [&log](const dsa::model::layer_trace& tr) {
      CHECK(tr.experts.extent(0) == (tr.experts.extent(1) == 0 ? 0 : tr.topk.extent(0)));
      for (index_t r = 0; r < tr.experts.extent(0); ++r) {
        log[tr.layer][tr.start + r].assign(tr.experts.row(r), tr.experts.row(r) + tr.experts.extent(1));
      }
    };
    return o;
  };
  expert_log one, chunked;
  auto a = m.new_sequence(81);
  m.forward(a, prompt(), record(one, 4096));
  m.forward(a, std::span<const std::int64_t>(generated().data(), 1), record(one, 4096));
  auto b = m.new_sequence(81);
  m.forward(b, prompt(), record(chunked, 16));
  m.forward(b, std::span<const std::int64_t>(generated().data(), 1), record(chunked, 16));
  // Dense-FFN layers (the first first_k_dense_replace) report none; MoE layers one row per
  // position: num_experts_per_tok distinct ids in [0, n_routed_experts).
  CHECK(one.size() == static_cast<std::size_t>(m.num_layers() - c.first_k_dense_replace));
  for (const auto& [layer, rows] : one) {
    CAPTURE(layer);
    CHECK(layer >= c.first_k_dense_replace);
    REQUIRE(rows.size() == 81);
    for (const auto& [pos, ids] : rows) {
      CAPTURE(pos);
      REQUIRE(ids.size() == static_cast<std::size_t>(c.num_experts_per_tok));
      const std::set<std::int32_t> distinct(ids.begin(), ids.end());
      CHECK(distinct.size() == ids.size());
      CHECK(*distinct.begin() >= 0);
      CHECK(*distinct.rbegin() < c.n_routed_experts);
    }
  }
  CHECK(chunked == one);  // routing is per row: chunking changes nothing
}

TEST_CASE("the progress callback reports every layer of every chunk") {
  auto m = load();
  std::vector<dsa::model::forward_progress> calls;
  dsa::model::forward_options opt;
  opt.max_chunk = 32;
  opt.progress = [&](const dsa::model::forward_progress& p) { calls.push_back(p); };
  auto seq = m.new_sequence(90);
  m.forward(seq, std::span<const std::int64_t>(prompt().data(), 10));  // start the call below at 10
  m.forward(seq, std::span<const std::int64_t>(prompt().data() + 10, 70), opt);
  const index_t layers = m.num_layers();
  REQUIRE(calls.size() == static_cast<std::size_t>(3 * layers));  // chunks [10, 42), [42, 74), [74, 80)
  const index_t begins[3] = {10, 42, 74}, ends[3] = {42, 74, 80};
  for (std::size_t i = 0; i < calls.size(); ++i) {
    CAPTURE(i);
    const std::size_t chunk = i / static_cast<std::size_t>(layers);
    CHECK(calls[i].chunk_begin == begins[chunk]);
    CHECK(calls[i].chunk_end == ends[chunk]);
    CHECK(calls[i].total_end == 80);
    CHECK(calls[i].layer == static_cast<index_t>(i % static_cast<std::size_t>(layers)));
    CHECK(calls[i].num_layers == layers);
  }
  // A decode step: one call per layer.
  calls.clear();
  m.forward(seq, std::span<const std::int64_t>(generated().data(), 1), opt);
  REQUIRE(calls.size() == static_cast<std::size_t>(layers));
  CHECK(calls.back().chunk_begin == 80);
  CHECK(calls.back().chunk_end == 81);
  CHECK(calls.back().total_end == 81);
}

TEST_CASE("a sequence rejects tokens beyond its max_tokens capacity") {
  auto m = load();
  auto seq = m.new_sequence(10);
  CHECK(seq.max_tokens() == 10);
  CHECK_THROWS_WITH_AS(m.forward(seq, std::span<const std::int64_t>(prompt().data(), 11)),
                       doctest::Contains("dsa::model::transformer::forward: tokens.size() = 11; expected at most "
                                         "max_tokens - length = 10 (the sequence is full)"),
                       dsa::error);
  CHECK(seq.length() == 0);  // nothing was appended
  m.forward(seq, std::span<const std::int64_t>(prompt().data(), 8));
  CHECK_THROWS_WITH_AS(m.forward(seq, std::span<const std::int64_t>(prompt().data(), 3)),
                       doctest::Contains("tokens.size() = 3; expected at most max_tokens - length = 2"), dsa::error);
  m.forward(seq, std::span<const std::int64_t>(prompt().data() + 8, 2));
  CHECK(seq.length() == 10);
  CHECK_THROWS_WITH_AS(m.forward(seq, std::span<const std::int64_t>(prompt().data(), 1)),
                       doctest::Contains("tokens.size() = 1; expected at most max_tokens - length = 0 (the sequence is full)"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(m.new_sequence(0), doctest::Contains("dsa::model::sequence: max_tokens = 0; expected >= 1"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(m.new_sequence(-5), doctest::Contains("max_tokens = -5; expected >= 1"), dsa::error);
  // Beyond max_position_embeddings (8192) there is no rotary embedding: refused before any
  // per-layer cache exists (issue 14).
  CHECK(m.new_sequence(8192).max_tokens() == 8192);
  CHECK_THROWS_WITH_AS(m.new_sequence(8193),
                       "dsa::model::transformer::new_sequence: max_tokens = 8193; expected <= max_position_embeddings "
                       "= 8192 (the positions the model has a rotary embedding for)",
                       dsa::error);
  CHECK_THROWS_WITH_AS(m.new_sequence(std::numeric_limits<index_t>::max()),
                       doctest::Contains("max_tokens = 9223372036854775807; expected <= max_position_embeddings"),
                       dsa::error);
  // reset() makes the capacity available again, with the same results as a new sequence.
  seq.reset();
  CHECK(seq.length() == 0);
  auto fresh = m.new_sequence(10);
  CHECK(same_bits(m.forward(seq, std::span<const std::int64_t>(prompt().data(), 10)),
                  m.forward(fresh, std::span<const std::int64_t>(prompt().data(), 10))));
}

TEST_CASE("bad token ids, empty calls and foreign sequences are dsa::error, and leave the sequence usable") {
  auto m = load();
  auto seq = m.new_sequence(16);
  const std::vector<std::int64_t> bad64 = {5, 512, 7};
  CHECK_THROWS_WITH_AS(m.forward(seq, bad64),
                       doctest::Contains("dsa::model::transformer::forward: tokens[1] = 512; expected a token id in "
                                         "[0, vocab_size = 512)"),
                       dsa::error);
  const std::vector<std::int32_t> neg = {-1};
  CHECK_THROWS_WITH_AS(m.forward(seq, neg), doctest::Contains("tokens[0] = -1; expected a token id in [0, vocab_size = 512)"),
                       dsa::error);
  const std::vector<std::int64_t> huge = {1, 2, std::numeric_limits<std::int64_t>::max()};
  CHECK_THROWS_WITH_AS(m.forward(seq, huge), doctest::Contains("tokens[2] = 9223372036854775807"), dsa::error);
  const std::vector<std::uint64_t> wrap = {std::uint64_t{1} << 32};  // would be 0 if narrowed to int32
  CHECK_THROWS_AS(m.forward(seq, wrap), dsa::error);
  CHECK_THROWS_WITH_AS(m.forward(seq, std::span<const std::int64_t>()),
                       doctest::Contains("dsa::model::transformer::forward: tokens.size() = 0; expected >= 1"), dsa::error);
  dsa::model::forward_options opt;
  opt.max_chunk = 0;
  CHECK_THROWS_WITH_AS(m.forward(seq, std::span<const std::int64_t>(prompt().data(), 2), opt),
                       doctest::Contains("options.max_chunk = 0; expected >= 1"), dsa::error);
  CHECK(seq.length() == 0);
  auto other = load();
  auto foreign = other.new_sequence(16);
  CHECK_THROWS_WITH_AS(m.forward(foreign, std::span<const std::int64_t>(prompt().data(), 2)),
                       doctest::Contains("seq = a sequence of another transformer"), dsa::error);
  // Still usable: the same logits as on a fresh sequence.
  auto fresh = m.new_sequence(16);
  const std::span<const std::int64_t> ok(prompt().data(), 5);
  CHECK(same_bits(m.forward(seq, ok), m.forward(fresh, ok)));
}

TEST_CASE("the selection is min(index_topk, positions) wide, whatever index_topk config.json claims (issue 14)") {
  // index_topk = max_position_embeddings = 2^31 - 1 is a valid config; the forward pass used to
  // allocate tokens x index_topk int32 per call (80 x 2^31 x 4 bytes here: std::bad_alloc). Every
  // position is selected once index_topk >= positions, so the logits equal those of the same
  // checkpoint with index_topk = 81, the sequence's length, bit for bit.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("dsa_test_transformer_topk_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto run = [&](index_t index_topk, index_t max_position) {
    std::filesystem::create_directories(dir);
    dsa::model::config c = dsa::model::config::load(tiny_dir);
    c.index_topk = index_topk;
    c.max_position_embeddings = max_position;
    std::ofstream(dir / "config.json") << c.to_json().dump(2);
    if (!std::filesystem::exists(dir / "model.safetensors")) {
      // A copy: the loader refuses shards that resolve outside the checkpoint directory.
      std::filesystem::copy_file(tiny_dir / "model.safetensors", dir / "model.safetensors");
    }
    auto m = model_t::load(dir, dsa::cpu_backend{2});
    index_t widest = 0;
    dsa::model::forward_options o;
    o.observer = [&](const dsa::model::layer_trace& tr) {
      CHECK(tr.topk.extent(1) == tr.start + tr.topk.extent(0));  // index_topk >= every chunk end
      widest = std::max(widest, tr.topk.extent(1));
    };
    auto seq = m.new_sequence(81);
    std::vector<float> logits = m.forward(seq, prompt(), o);
    const std::vector<float> step = m.forward(seq, std::span<const std::int64_t>(generated().data(), 1), o);
    logits.insert(logits.end(), step.begin(), step.end());
    CHECK(widest == 81);
    return logits;
  };
  constexpr index_t int32_max = std::numeric_limits<std::int32_t>::max();
  const std::vector<float> huge = run(int32_max, int32_max);
  const std::vector<float> exact = run(81, 8192);
  std::filesystem::remove_all(dir);
  CHECK(same_bits(huge, exact));
}
