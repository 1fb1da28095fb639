// dsa_train_indexer: warms up a fresh lightning indexer with the KL losses of DeepSeek-V3.2
// (paper eq. 3, then eq. 4) against the dense attention of one layer of a checkpoint, and
// reports per step the loss and the top-k recall. See docs/training.md.
//
//   dsa_train_indexer [--model DIR] [--layer L] [--tokens T] [--batch B] [--dense-steps N]
//                     [--sparse-steps M] [--lr X] [--seed S] [--eval E] [--threads N]
//                     [--csv FILE] [--check]
//
// Defaults: the bundled tiny checkpoint (tests/data/tiny-dsv32), layer 1, 256 tokens, batch 2,
// 400 dense then 150 sparse steps, Adam with lr 3e-3, seed 1, 8 held-out sequences, all threads.
// --check first compares the hand-written backward pass with central finite differences.
//
// Every step draws B fresh sequences of T uniformly random tokens, so the loss and recall printed
// for a step are measured before the indexer has seen its data (held-out numbers). --eval E
// sequences, drawn once, are evaluated before and after training.
// Exit codes: 0 success; 1 the gradient check failed; 2 usage error or failure.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "indexer_training.hpp"

namespace {

namespace ti = train_indexer;

struct options {
  std::string model = DSA_TRAIN_INDEXER_DEFAULT_MODEL;
  ti::index_t layer = 1;
  ti::index_t tokens = 256;
  ti::index_t batch = 2;
  ti::index_t dense_steps = 400;
  ti::index_t sparse_steps = 150;
  float lr = 3e-3f;
  std::uint64_t seed = 1;
  ti::index_t eval = 8;
  int threads = 0;
  std::string csv;
  bool check = false;
};

const char* const usage_text =
    "usage: dsa_train_indexer [--model DIR] [--layer L] [--tokens T] [--batch B]\n"
    "                         [--dense-steps N] [--sparse-steps M] [--lr X] [--seed S]\n"
    "                         [--eval E] [--threads N] [--csv FILE] [--check]\n";

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "dsa_train_indexer: " << why << "\n" << usage_text;
  std::exit(2);
}

long long to_int(std::string_view flag, const std::string& v, long long lo, long long hi) {
  std::size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    usage(std::string(flag) + " = '" + v + "'; expected an integer");
  }
  if (used != v.size() || x < lo || x > hi) {
    usage(std::string(flag) + " = '" + v + "'; expected an integer in [" + std::to_string(lo) + ", " +
          std::to_string(hi) + "]");
  }
  return x;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << usage_text;
      std::exit(0);
    }
    if (a == "--check") {
      o.check = true;
      continue;
    }
    if (i + 1 >= argc) usage(std::string(a) + " needs a value (or is unknown)");
    const std::string v = argv[++i];
    if (a == "--model") o.model = v;
    else if (a == "--layer") o.layer = to_int(a, v, 0, 1 << 20);
    else if (a == "--tokens") o.tokens = to_int(a, v, 2, 1 << 16);
    else if (a == "--batch") o.batch = to_int(a, v, 1, 1 << 12);
    else if (a == "--dense-steps") o.dense_steps = to_int(a, v, 0, 1 << 24);
    else if (a == "--sparse-steps") o.sparse_steps = to_int(a, v, 0, 1 << 24);
    else if (a == "--seed") o.seed = static_cast<std::uint64_t>(to_int(a, v, 0, (1LL << 62)));
    else if (a == "--eval") o.eval = to_int(a, v, 0, 1 << 12);
    else if (a == "--threads") o.threads = static_cast<int>(to_int(a, v, 0, 1024));
    else if (a == "--csv") o.csv = v;
    else if (a == "--lr") {
      char* end = nullptr;
      o.lr = std::strtof(v.c_str(), &end);
      if (end != v.c_str() + v.size() || !(o.lr > 0.0f) || !std::isfinite(o.lr)) {
        usage("--lr = '" + v + "'; expected a positive number");
      }
    } else {
      usage("unknown option " + std::string(a));
    }
  }
  return o;
}

ti::sample_metrics evaluate(const dsa::cpu_backend& be, const ti::indexer_params& p,
                            const std::vector<ti::layer_sample>& set, const ti::layer_data& data,
                            ti::loss_kind kind) {
  ti::sample_metrics m;
  for (const auto& s : set) {
    m += ti::run_indexer(be, p, s, data.rope(), data.config().num_attention_heads, data.config().index_topk, kind);
  }
  return m;
}

void print_metrics(const char* what, const ti::sample_metrics& m) {
  std::printf("%s: dense KL %.4f per row, top-k recall %.4f (random %.4f, best possible %.4f)\n", what,
              m.dense_kl / static_cast<double>(m.rows), m.recall / static_cast<double>(m.recall_rows),
              m.baseline / static_cast<double>(m.recall_rows), m.oracle / static_cast<double>(m.recall_rows));
}

int run(const options& o) {
  const dsa::cpu_backend be{o.threads};
  ti::layer_data data(o.model, o.layer, be);
  const auto& c = data.config();
  const ti::index_t k = c.index_topk, heads = c.num_attention_heads;
  if (o.tokens <= k) {
    usage("--tokens = " + std::to_string(o.tokens) + "; expected > index_topk = " + std::to_string(k) +
          " (with at most k keys per row every key is selected and there is nothing to rank)");
  }
  const ti::indexer_dims dims = ti::indexer_dims::of(c);
  std::mt19937_64 rng(o.seed);
  ti::indexer_params p = ti::indexer_params::random(dims, o.seed * 7919 + 17);
  std::printf("model %s, layer %lld: indexer %lld heads x %lld, top-%lld; %lld tokens x %lld sequences per step\n",
              o.model.c_str(), static_cast<long long>(o.layer), static_cast<long long>(dims.heads),
              static_cast<long long>(dims.dim), static_cast<long long>(k), static_cast<long long>(o.tokens),
              static_cast<long long>(o.batch));

  if (o.check) {
    const auto tok = data.random_tokens(std::min<ti::index_t>(o.tokens, 2 * k), rng);
    const auto s = data.make(tok);
    bool ok = true;
    for (auto kind : {ti::loss_kind::dense, ti::loss_kind::sparse}) {
      for (const auto& r : ti::check_gradients(be, p, s, data.rope(), heads, k, kind, 3e-3, o.seed)) {
        std::printf("gradient check (%s loss) %-14s analytic %+.6e numeric %+.6e rel.err %.2e\n",
                    kind == ti::loss_kind::dense ? "dense" : "sparse", r.tensor.c_str(), r.analytic, r.numeric,
                    r.rel_error());
        ok = ok && r.rel_error() < 2e-3;
      }
    }
    if (!ok) {
      std::fprintf(stderr, "dsa_train_indexer: gradient check failed\n");
      return 1;
    }
  }

  std::vector<ti::layer_sample> eval_set;
  for (ti::index_t i = 0; i < o.eval; ++i) eval_set.push_back(data.make(data.random_tokens(o.tokens, rng)));
  if (!eval_set.empty()) print_metrics("held-out before", evaluate(be, p, eval_set, data, ti::loss_kind::dense));

  std::ofstream csv;
  if (!o.csv.empty()) {
    csv.open(o.csv);
    if (!csv) usage("--csv = '" + o.csv + "'; cannot open it for writing");
    csv << "step,stage,loss,dense_kl,recall,baseline,oracle,seconds\n";
  }
  ti::adam opt(dims, ti::adam_config{o.lr});
  const auto t0 = std::chrono::steady_clock::now();
  std::printf("%6s %-6s %10s %10s %8s %8s %8s\n", "step", "stage", "loss", "dense_KL", "recall", "random", "best");
  for (ti::index_t step = 0; step < o.dense_steps + o.sparse_steps; ++step) {
    const auto kind = step < o.dense_steps ? ti::loss_kind::dense : ti::loss_kind::sparse;
    ti::indexer_params g = ti::indexer_params::zeros(dims);
    ti::sample_metrics m;
    // The loss is the mean over the batch's query rows.
    const float scale = 1.0f / static_cast<float>(o.batch * o.tokens);
    for (ti::index_t b = 0; b < o.batch; ++b) {
      const auto s = data.make(data.random_tokens(o.tokens, rng));
      m += ti::run_indexer(be, p, s, data.rope(), heads, k, kind, &g, scale);
    }
    opt.step(p, g);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double rows = static_cast<double>(m.rows), rr = static_cast<double>(m.recall_rows);
    const char* stage = kind == ti::loss_kind::dense ? "dense" : "sparse";
    std::printf("%6lld %-6s %10.5f %10.5f %8.4f %8.4f %8.4f\n", static_cast<long long>(step), stage, m.loss / rows,
                m.dense_kl / rows, m.recall / rr, m.baseline / rr, m.oracle / rr);
    if (csv) {
      csv << step << ',' << stage << ',' << m.loss / rows << ',' << m.dense_kl / rows << ',' << m.recall / rr << ','
          << m.baseline / rr << ',' << m.oracle / rr << ',' << secs << '\n';
    }
  }
  std::fflush(stdout);
  if (!eval_set.empty()) print_metrics("held-out after", evaluate(be, p, eval_set, data, ti::loss_kind::dense));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "dsa_train_indexer: " << e.what() << "\n";
    return 2;
  }
}
