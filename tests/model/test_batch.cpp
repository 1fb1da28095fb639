// Batched forward calls (issue 38): several sequences advanced in one call, ragged, give each
// sequence the same bits as running it alone, in both block-dot modes and at every thread count.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "dsa/model/transformer.hpp"
#include "support/checkpoint_edit.hpp"

namespace {

using dsa::index_t;
using model_t = dsa::model::transformer<dsa::cpu_backend>;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<std::int32_t> prompt_of(int seed, std::size_t len) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::vector<std::int32_t> p(len);
  for (auto& id : p) id = static_cast<std::int32_t>(rng() % 512);
  return p;
}

// Each sequence alone: its prompt, then `steps` decode tokens (each the previous one's argmax is
// not needed: fixed ids, so both runs feed the same tokens). Returns the logits of every call.
std::vector<std::vector<float>> alone(model_t& m, const std::vector<std::int32_t>& prompt, int steps) {
  auto seq = m.new_sequence(64);
  std::vector<std::vector<float>> out{m.forward(seq, prompt)};
  for (int s = 0; s < steps; ++s) {
    const std::int32_t id = 3 + s;
    out.push_back(m.forward(seq, std::span<const std::int32_t>(&id, 1)));
  }
  return out;
}

}  // namespace

TEST_CASE("a batched call gives each sequence the bits it gets alone: ragged prefills, then decode steps together") {
  for (const dsa::fp8_dot mode : {dsa::fp8_dot::exact, dsa::fp8_dot::fp32}) {
    for (const int threads : {1, 3}) {
      CAPTURE(static_cast<int>(mode));
      CAPTURE(threads);
      dsa::cpu_backend be{threads};
      be.fp8_block_dot = mode;
      auto m = model_t::load(dsa_test::tiny_dir, be);
      const std::size_t lens[] = {7, 1, 13, 2, 5, 9, 1, 4};  // eight sequences, prompts of 1 token among them
      const int steps = 3;
      std::vector<std::vector<std::int32_t>> prompts;
      std::vector<std::vector<std::vector<float>>> want;
      for (std::size_t i = 0; i < std::size(lens); ++i) {
        prompts.push_back(prompt_of(static_cast<int>(i), lens[i]));
        want.push_back(alone(m, prompts.back(), steps));
      }
      std::vector<model_t::sequence_type> seqs;
      for (std::size_t i = 0; i < prompts.size(); ++i) seqs.push_back(m.new_sequence(64));
      std::vector<model_t::batch_entry> batch;
      for (std::size_t i = 0; i < prompts.size(); ++i) batch.push_back({&seqs[i], prompts[i]});
      const auto prefill = m.forward(std::span<const model_t::batch_entry>(batch));
      REQUIRE(prefill.size() == prompts.size());
      for (std::size_t i = 0; i < prompts.size(); ++i) {
        CAPTURE(i);
        CHECK(same_bits(prefill[i], want[i][0]));
      }
      for (int s = 0; s < steps; ++s) {
        const std::int32_t id = 3 + s;
        std::vector<model_t::batch_entry> step;
        for (auto& seq : seqs) step.push_back({&seq, std::span<const std::int32_t>(&id, 1)});
        const auto out = m.forward(std::span<const model_t::batch_entry>(step));
        for (std::size_t i = 0; i < prompts.size(); ++i) {
          CAPTURE(i);
          CAPTURE(s);
          CHECK(same_bits(out[i], want[i][static_cast<std::size_t>(s) + 1]));
        }
      }
    }
  }
}

TEST_CASE("a decode step beside another sequence's chunked prefill keeps every bit") {
  auto m = model_t::load(dsa_test::tiny_dir, dsa::cpu_backend{2});
  const auto p0 = prompt_of(10, 11), p1 = prompt_of(11, 30);
  const auto want0 = alone(m, p0, 1);
  dsa::model::forward_options opt;
  opt.max_chunk = 8;  // rounds: the decode step beside prompt tokens [0, 8), then [8, 16), [16, 24), [24, 30)
  std::vector<float> want1;
  {
    auto s = m.new_sequence(64);
    want1 = m.forward(s, p1, opt);  // alone, chunked the same way
  }
  auto s0 = m.new_sequence(64), s1 = m.new_sequence(64);
  (void)m.forward(s0, p0);
  const std::int32_t id = 3;
  const std::vector<model_t::batch_entry> batch = {{&s0, std::span<const std::int32_t>(&id, 1)}, {&s1, p1}};
  const auto out = m.forward(std::span<const model_t::batch_entry>(batch), opt);
  CHECK(same_bits(out[0], want0[1]));
  CHECK(same_bits(out[1], want1));
  CHECK(s0.length() == 12);
  CHECK(s1.length() == 30);
}

TEST_CASE("all_logits returns every new token's logits, each row the bits of a prefill ending there") {
  auto m = model_t::load(dsa_test::tiny_dir, dsa::cpu_backend{2});
  const auto p = prompt_of(20, 6);
  auto seq = m.new_sequence(16);
  dsa::model::forward_options opt;
  opt.all_logits = true;
  const std::vector<float> all = m.forward(seq, p, opt);
  const std::size_t vocab = 512;
  REQUIRE(all.size() == p.size() * vocab);
  // From 2 tokens: a 1-token call takes the absorbed decode path, not the prefill's.
  for (std::size_t n = 2; n <= p.size(); ++n) {
    auto s = m.new_sequence(16);
    const std::vector<float> last = m.forward(s, std::span<const std::int32_t>(p.data(), n));
    CHECK(std::memcmp(last.data(), all.data() + (n - 1) * vocab, vocab * sizeof(float)) == 0);
  }
}

TEST_CASE("a batch is checked whole before anything runs: a bad entry leaves every sequence as it was") {
  auto m = model_t::load(dsa_test::tiny_dir, dsa::cpu_backend{1});
  auto s0 = m.new_sequence(8), s1 = m.new_sequence(8);
  const std::vector<std::int32_t> ok = {1, 2}, bad = {1, 600};
  std::vector<model_t::batch_entry> batch = {{&s0, ok}, {&s1, bad}};
  CHECK_THROWS_WITH_AS(m.forward(std::span<const model_t::batch_entry>(batch)),
                       doctest::Contains("tokens[1] = 600; expected a token id in [0, vocab_size = 512)"), dsa::error);
  CHECK(s0.length() == 0);
  batch = {{&s0, ok}, {&s0, ok}};
  CHECK_THROWS_WITH_AS(m.forward(std::span<const model_t::batch_entry>(batch)),
                       doctest::Contains("batch[1].seq = the sequence of batch[0]; expected each sequence at most once"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(m.forward(std::span<const model_t::batch_entry>()), doctest::Contains("batch.size() = 0"),
                       dsa::error);
  CHECK(s0.length() == 0);
  CHECK(s1.length() == 0);
}

TEST_CASE("enqueue writes each entry's last-token logits into a view: forward()'s bits, one round, the same checks") {
  // transformer::enqueue is what a CUDA graph captures (tests/cuda/test_model_transformer.cpp);
  // on the CPU it is the same round as forward() with the logits written into the caller's rows.
  auto m = model_t::load(dsa_test::tiny_dir, dsa::cpu_backend{2});
  const index_t vocab = m.config().vocab_size;
  const std::vector<std::int32_t> p0 = prompt_of(1, 6), p1 = prompt_of(2, 1), p2 = prompt_of(3, 4);
  auto a0 = m.new_sequence(16), a1 = m.new_sequence(16), a2 = m.new_sequence(16);
  auto b0 = m.new_sequence(16), b1 = m.new_sequence(16), b2 = m.new_sequence(16);
  std::vector<float> rows(static_cast<std::size_t>(3 * vocab) + 5, -7.0f);
  const auto out = dsa::make_view(rows.data() + 5, {3, vocab});  // not at the start of its array
  const auto check_rows = [&](const std::vector<std::vector<float>>& want) {
    for (std::size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      CHECK(std::memcmp(out.row(static_cast<index_t>(i)), want[i].data(), static_cast<std::size_t>(vocab) * sizeof(float)) == 0);
    }
    CHECK(rows[4] == -7.0f);  // nothing before the view
  };
  // A ragged prefill round, then a decode round.
  std::vector<model_t::batch_entry> want_batch = {{&a0, p0}, {&a1, p1}, {&a2, p2}};
  std::vector<model_t::batch_entry> batch = {{&b0, p0}, {&b1, p1}, {&b2, p2}};
  m.enqueue(std::span<const model_t::batch_entry>(batch), out);
  check_rows(m.forward(std::span<const model_t::batch_entry>(want_batch)));
  CHECK(b0.length() == 6);
  CHECK(b1.length() == 1);
  CHECK(b2.length() == 4);
  const std::int32_t next[] = {11, 12, 13};
  for (std::size_t i = 0; i < 3; ++i) {
    want_batch[i].tokens = std::span<const std::int32_t>(&next[i], 1);
    batch[i].tokens = want_batch[i].tokens;
  }
  m.enqueue(std::span<const model_t::batch_entry>(batch), out);
  check_rows(m.forward(std::span<const model_t::batch_entry>(want_batch)));
  CHECK(b0.length() == 7);
  // enqueue() adds nothing to the phase times.
  const double before = m.phase_times().total();
  m.enqueue(std::span<const model_t::batch_entry>(batch.data(), 1), dsa::make_view(rows.data(), {1, vocab}));
  CHECK(m.phase_times().total() == before);

  // Its own checks, before anything runs.
  const auto one = std::span<const model_t::batch_entry>(batch.data(), 1);
  CHECK_THROWS_WITH_AS(m.enqueue(one, dsa::make_view(rows.data(), {2, vocab})),
                       doctest::Contains("model::transformer::enqueue: logits.shape = [2, 512]; expected [1, 512]"),
                       dsa::error);
  dsa::model::forward_options opt;
  opt.all_logits = true;
  CHECK_THROWS_WITH_AS(m.enqueue(one, out, opt), doctest::Contains("options.all_logits = true; expected false"),
                       dsa::error);
  opt = {};
  opt.observer = [](const dsa::model::layer_trace&) {};
  CHECK_THROWS_WITH_AS(m.enqueue(one, out, opt), doctest::Contains("options.observer = set; expected none"), dsa::error);
  opt = {};
  opt.max_chunk = 3;
  const std::vector<std::int32_t> four = {1, 2, 3, 4};
  const model_t::batch_entry long_entry{&b2, four};
  CHECK_THROWS_WITH_AS(m.enqueue(std::span<const model_t::batch_entry>(&long_entry, 1), dsa::make_view(rows.data(), {1, vocab}), opt),
                       doctest::Contains("batch[0].tokens.size() = 4; expected at most options.max_chunk = 3 (one round)"),
                       dsa::error);
  const std::vector<std::int32_t> bad = {600};
  const model_t::batch_entry bad_entry{&b2, bad};
  CHECK_THROWS_WITH_AS(m.enqueue(std::span<const model_t::batch_entry>(&bad_entry, 1), dsa::make_view(rows.data(), {1, vocab})),
                       doctest::Contains("expected a token id in [0, vocab_size = 512)"), dsa::error);
  CHECK(b2.length() == 5);
}
