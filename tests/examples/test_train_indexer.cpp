// examples/train_indexer: the training target is the layer's own attention, the hand-written
// backward pass matches finite differences, and a few Adam steps lower the loss.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "train_indexer/indexer_training.hpp"

namespace ti = train_indexer;

namespace {

const std::string model_dir = std::string(DSA_TEST_DATA_DIR) + "/tiny-dsv32";
const dsa::cpu_backend be{2};

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

}  // namespace

TEST_CASE("train_indexer: the target is the dense attention of the layer the transformer runs") {
  for (dsa::index_t layer : {0, 2}) {
    CAPTURE(layer);
    ti::layer_data data(model_dir, layer, be);
    const auto& c = data.config();
    // At most index_topk tokens: the model's sparse attention selects every causal key, so its
    // attention output must equal wo · (P · V) with our dense probabilities.
    const dsa::index_t t = c.index_topk - 4, h = c.num_attention_heads;
    std::mt19937_64 rng(11);
    const auto tokens = data.random_tokens(t, rng);
    const auto s = data.make(tokens);
    REQUIRE(s.tokens == t);
    for (dsa::index_t i = 0; i < t; ++i) {
      for (dsa::index_t hh = 0; hh < h; ++hh) {
        double sum = 0;
        for (dsa::index_t j = 0; j < t; ++j) {
          const float p = s.attn[static_cast<std::size_t>((i * h + hh) * t + j)];
          if (j > i) REQUIRE(p == 0.0f);
          REQUIRE(p >= 0.0f);
          sum += p;
        }
        REQUIRE(sum == doctest::Approx(1.0).epsilon(1e-5));
      }
    }
    // The model's attention output of layer L = residual after its attention - residual before.
    auto m = dsa::model::transformer<dsa::cpu_backend>::load(model_dir, be, layer + 1);
    const dsa::index_t d = c.hidden_size;
    std::vector<float> before(static_cast<std::size_t>(t * d)), after(before.size());
    dsa::model::forward_options opt;
    opt.observer = [&](const dsa::model::layer_trace& tr) {
      if (tr.layer == layer - 1) {  // the stream entering layer L: bf16(ffn_out + residual)
        for (dsa::index_t i = 0; i < t; ++i) {
          for (dsa::index_t j = 0; j < d; ++j) {
            before[static_cast<std::size_t>(i * d + j)] =
                dsa::bf16(tr.ffn_out(i, j).to_float() + tr.residual(i, j).to_float()).to_float();
          }
        }
      }
      if (tr.layer == layer) {
        for (dsa::index_t i = 0; i < t; ++i) {
          for (dsa::index_t j = 0; j < d; ++j) after[static_cast<std::size_t>(i * d + j)] = tr.residual(i, j).to_float();
        }
      }
    };
    if (layer == 0) {  // layer 0's input stream is the embedding itself
      const auto& emb = m.weights().embed_tokens;
      for (dsa::index_t i = 0; i < t; ++i) {
        for (dsa::index_t j = 0; j < d; ++j) before[static_cast<std::size_t>(i * d + j)] = emb(tokens[i], j).to_float();
      }
    }
    auto seq = m.new_sequence(t);
    m.forward(seq, tokens, opt);
    std::vector<float> model_attn(before.size());
    for (std::size_t i = 0; i < before.size(); ++i) model_attn[i] = after[i] - before[i];
    const double cos = cosine(model_attn, s.attn_out);
    MESSAGE("layer ", layer, ": cosine(model attention output, wo (P V)) = ", cos);
    CHECK(cos > 0.99);
  }
}

TEST_CASE("train_indexer: the backward pass matches central finite differences") {
  ti::layer_data data(model_dir, 1, be);
  const auto& c = data.config();
  std::mt19937_64 rng(5);
  const auto s = data.make(data.random_tokens(c.index_topk + 16, rng));
  const auto p = ti::indexer_params::random(ti::indexer_dims::of(c), 99);
  for (auto kind : {ti::loss_kind::dense, ti::loss_kind::sparse}) {
    const auto checks = ti::check_gradients(be, p, s, data.rope(), c.num_attention_heads, c.index_topk, kind, 3e-3, 7);
    REQUIRE(checks.size() == 5);
    double worst = 0;
    for (const auto& r : checks) worst = std::max(worst, r.rel_error());
    MESSAGE(std::string(kind == ti::loss_kind::dense ? "dense" : "sparse"), " loss: worst relative error ", worst);
    for (const auto& r : checks) {
      CAPTURE(r.tensor);
      CAPTURE(r.analytic);
      CAPTURE(r.numeric);
      CHECK(std::abs(r.analytic) > 1e-2);  // a zero gradient would pass trivially
      CHECK(r.rel_error() < 2e-3);  // measured: <= 2.2e-4
    }
  }
}

TEST_CASE("train_indexer: gradients scale with grad_scale and accumulate over samples") {
  ti::layer_data data(model_dir, 1, be);
  const auto& c = data.config();
  std::mt19937_64 rng(6);
  const auto s = data.make(data.random_tokens(c.index_topk + 8, rng));
  auto p = ti::indexer_params::random(ti::indexer_dims::of(c), 3);
  ti::indexer_params g = ti::indexer_params::zeros(p.dims), g2 = g;
  ti::run_indexer(be, p, s, data.rope(), c.num_attention_heads, c.index_topk, ti::loss_kind::dense, &g, 1.0f);
  ti::run_indexer(be, p, s, data.rope(), c.num_attention_heads, c.index_topk, ti::loss_kind::dense, &g2, 2.0f);
  // grad_scale is linear, and gradients accumulate.
  for (std::size_t i = 0; i < g.wk.size(); i += 97) CHECK(g2.wk[i] == doctest::Approx(2.0 * g.wk[i]).epsilon(1e-5));
  ti::run_indexer(be, p, s, data.rope(), c.num_attention_heads, c.index_topk, ti::loss_kind::dense, &g, 1.0f);
  for (std::size_t i = 0; i < g.wq_b.size(); i += 997) CHECK(g.wq_b[i] == doctest::Approx(g2.wq_b[i]).epsilon(1e-5));
}

TEST_CASE("train_indexer: Adam's first step moves every parameter by lr against its gradient's sign") {
  const ti::indexer_dims d{2, 4, 2, 3, 3};
  auto p = ti::indexer_params::zeros(d), g = ti::indexer_params::zeros(d);
  g.wk = {1, -2, 0.5f, -1e-3f, 3, -4, 5, -6, 7, -8, 9, -10};
  ti::adam opt(d, ti::adam_config{0.01f});
  opt.step(p, g);
  for (std::size_t i = 0; i < g.wk.size(); ++i) CHECK(p.wk[i] == doctest::Approx(g.wk[i] > 0 ? -0.01 : 0.01).epsilon(1e-4));
  for (float v : p.wq_b) CHECK(v == 0.0f);  // zero gradient: no move
}

TEST_CASE("train_indexer: a few Adam steps lower the dense and the sparse loss") {
  ti::layer_data data(model_dir, 1, be);
  const auto& c = data.config();
  const dsa::index_t t = 96, k = c.index_topk, heads = c.num_attention_heads;
  std::mt19937_64 rng(21);
  std::vector<ti::layer_sample> eval;
  for (int i = 0; i < 2; ++i) eval.push_back(data.make(data.random_tokens(t, rng)));
  auto p = ti::indexer_params::random(ti::indexer_dims::of(c), 1234);
  auto measure = [&](ti::loss_kind kind) {
    ti::sample_metrics m;
    for (const auto& s : eval) m += ti::run_indexer(be, p, s, data.rope(), heads, k, kind);
    return m;
  };
  const auto dense0 = measure(ti::loss_kind::dense);
  ti::adam opt(p.dims, ti::adam_config{3e-3f});
  auto train = [&](ti::loss_kind kind, int steps) {
    for (int step = 0; step < steps; ++step) {
      ti::indexer_params g = ti::indexer_params::zeros(p.dims);
      const auto s = data.make(data.random_tokens(t, rng));
      ti::run_indexer(be, p, s, data.rope(), heads, k, kind, &g, 1.0f / static_cast<float>(t));
      opt.step(p, g);
    }
  };
  train(ti::loss_kind::dense, 12);
  const auto dense1 = measure(ti::loss_kind::dense);
  MESSAGE("dense KL per row on held-out sequences: ", dense0.dense_kl / dense0.rows, " -> ",
          dense1.dense_kl / dense1.rows);
  CHECK(dense1.dense_kl < 0.95 * dense0.dense_kl);

  const auto sparse0 = measure(ti::loss_kind::sparse);
  train(ti::loss_kind::sparse, 6);
  const auto sparse1 = measure(ti::loss_kind::sparse);
  MESSAGE("sparse KL per row on held-out sequences: ", sparse0.loss / sparse0.rows, " -> ",
          sparse1.loss / sparse1.rows);
  CHECK(sparse1.loss < sparse0.loss);
}

TEST_CASE("train_indexer: bad arguments are clear errors") {
  CHECK_THROWS_WITH_AS(ti::layer_data(model_dir, 3, be), doctest::Contains("train_indexer::layer_data: layer = 3"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(ti::layer_data(model_dir, -1, be), doctest::Contains("layer = -1"), dsa::error);
  ti::layer_data data(model_dir, 0, be);
  const std::vector<std::int32_t> bad{1, 2, 512};
  CHECK_THROWS_WITH_AS(data.make(bad), doctest::Contains("train_indexer::layer_data::make: tokens[2] = 512"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(data.make(std::vector<std::int32_t>{}), doctest::Contains("tokens.size() = 0"), dsa::error);
  const std::vector<std::int32_t> ok{1, 2, 3};
  const auto s = data.make(ok);
  const auto p = ti::indexer_params::random(ti::indexer_dims::of(data.config()), 1);
  CHECK_THROWS_WITH_AS(ti::run_indexer(be, p, s, data.rope(), data.config().num_attention_heads, 0, ti::loss_kind::dense),
                       doctest::Contains("train_indexer::run_indexer: k = 0"), dsa::error);
  CHECK_THROWS_WITH_AS(ti::run_indexer(be, p, s, data.rope(), 3, 2, ti::loss_kind::dense),
                       doctest::Contains("s.attn.size()"), dsa::error);
  auto small = ti::indexer_params::zeros(ti::indexer_dims{8, 128, 64, 256, 128});
  CHECK_THROWS_WITH_AS(
      ti::run_indexer(be, p, s, data.rope(), data.config().num_attention_heads, 2, ti::loss_kind::dense, &small),
      doctest::Contains("grad->wq_b.size() = 131072; expected 262144"), dsa::error);
  auto bad_p = p;
  bad_p.wk.pop_back();
  CHECK_THROWS_WITH_AS(ti::run_indexer(be, bad_p, s, data.rope(), data.config().num_attention_heads, 2, ti::loss_kind::dense),
                       doctest::Contains("p.wk.size() = 32767"), dsa::error);
  const std::vector<std::int32_t> sel(5);
  CHECK_THROWS_WITH_AS(
      ti::run_indexer(be, p, s, data.rope(), data.config().num_attention_heads, 2, ti::loss_kind::sparse, nullptr, 1.0f, &sel),
      doctest::Contains("fixed_selection->size() = 5"), dsa::error);
}
