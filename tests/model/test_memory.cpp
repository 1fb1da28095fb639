// Decode memory grows linearly with the context, never with its square.
//
// Method (docs/performance.md, "Memory"): a small random model (2 layers, kv_lora 512 as in
// V3.2, index_topk 16) is written to a temporary directory by a child process. Then, for each context
// L in {256, 512, 1024, 2048}, a fresh child process loads the model, prefills L tokens in
// chunks of 64 and decodes 16 more, and reports the sequence's cache bytes and its own peak
// resident set size (getrusage ru_maxrss). Separate processes make each peak independent of
// what the others allocated and freed; the parent allocates nothing large before forking.
//
// Checks: the cache holds (L + 16) tokens at the documented bytes per token (with at most the
// 2x slack of geometric growth), and the peak RSS grows by a bounded amount per token: its
// slope over [1024, 2048] is no steeper than over [256, 1024] (plus noise). A quadratic term —
// an [L, L] score matrix, say — doubles that slope at every doubling of L and fails the check.
// Under AddressSanitizer the RSS part is skipped (its quarantine keeps freed memory resident,
// so RSS tracks total allocations rather than live memory); the cache checks still run, at
// L = 256 and 512 only.
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "dsa/model/random_checkpoint.hpp"
#include "dsa/model/sampling.hpp"
#include "dsa/model/transformer.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define DSA_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DSA_TEST_ASAN 1
#endif
#endif
#ifndef DSA_TEST_ASAN
#define DSA_TEST_ASAN 0
#endif

namespace fs = std::filesystem;
using dsa::index_t;

namespace {

constexpr index_t kDecodeSteps = 16;

dsa::model::config memory_config() {
  dsa::model::config c = dsa::model::tiny_config();
  c.kv_lora_rank = 512;
  c.num_hidden_layers = 2;  // one dense, one MoE layer
  c.index_topk = 16;
  return c;
}

// Bytes one token occupies in one layer's caches: the bf16 MLA row (latent + rope) and the
// 132-byte indexer key row.
std::size_t bytes_per_token_per_layer(const dsa::model::config& c) {
  return static_cast<std::size_t>((c.kv_lora_rank + c.qk_rope_head_dim) * 2 + dsa::indexer_cache_row_bytes);
}

struct sample {
  std::uint64_t cache_bytes = 0;
  std::uint64_t peak_rss = 0;
  std::uint64_t length = 0;
  std::uint64_t ok = 0;
};

// Runs body() in a child process that writes a `sample` back through a pipe.
template <class Body>
sample in_child(Body&& body) {
  int fd[2];
  REQUIRE(::pipe(fd) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fd[0]);
    sample s;
    try {
      s = body();
      s.ok = 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    const auto n = ::write(fd[1], &s, sizeof s);
    ::_exit(n == static_cast<ssize_t>(sizeof s) ? 0 : 1);
  }
  ::close(fd[1]);
  sample s;
  const auto n = ::read(fd[0], &s, sizeof s);
  ::close(fd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(n == static_cast<ssize_t>(sizeof s));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(s.ok == 1);
  return s;
}

struct temp_dir {
  fs::path path = fs::temp_directory_path() / ("dsa_test_memory_" + std::to_string(::getpid()));
  temp_dir() { fs::remove_all(path); }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

TEST_CASE("decode memory at context L is linear in L (cache bytes and peak RSS, one process per L)") {
  temp_dir dir;
  const dsa::model::config cfg = memory_config();
  in_child([&] {
    dsa::model::write_random_checkpoint(dir.path, cfg, 7, dsa::cpu_backend{1});
    return sample{};
  });

  // Under AddressSanitizer only the cache checks run, which hold at any length: two short
  // contexts spare the sanitized build 3000 tokens of forward passes (the suite's longest test
  // there, 130 s of CI).
  const std::vector<index_t> contexts = DSA_TEST_ASAN ? std::vector<index_t>{256, 512}
                                                      : std::vector<index_t>{256, 512, 1024, 2048};
  std::vector<sample> samples;
  for (const index_t L : contexts) {
    samples.push_back(in_child([&] {
      auto m = dsa::model::transformer<dsa::cpu_backend>::load(dir.path, dsa::cpu_backend{2});
      auto seq = m.new_sequence(L + kDecodeSteps);
      std::vector<std::int32_t> ids(static_cast<std::size_t>(L));
      for (index_t i = 0; i < L; ++i) ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 37 + 5) % cfg.vocab_size);
      dsa::model::forward_options chunked;
      chunked.max_chunk = 64;  // bounds the prefill's score matrix to 64 x L
      auto logits = m.forward(seq, ids, chunked);
      for (index_t s = 0; s < kDecodeSteps; ++s) {
        const std::int32_t next = dsa::model::greedy_token(logits);
        logits = m.forward(seq, std::span<const std::int32_t>(&next, 1));
      }
      rusage u{};
      ::getrusage(RUSAGE_SELF, &u);
      return sample{seq.cache_bytes(), static_cast<std::uint64_t>(u.ru_maxrss) * 1024u,
                    static_cast<std::uint64_t>(seq.length()), 0};
    }));
  }

  const std::size_t per_token = bytes_per_token_per_layer(cfg) * static_cast<std::size_t>(cfg.num_hidden_layers);
  for (std::size_t i = 0; i < contexts.size(); ++i) {
    const auto tokens = static_cast<std::uint64_t>(contexts[i] + kDecodeSteps);
    CAPTURE(contexts[i]);
    CAPTURE(samples[i].cache_bytes);
    CAPTURE(samples[i].peak_rss);
    MESSAGE("context " << contexts[i] << ": cache " << samples[i].cache_bytes << " B ("
                       << static_cast<double>(samples[i].cache_bytes) / static_cast<double>(tokens) << " B/token), peak RSS "
                       << samples[i].peak_rss / 1024 << " KiB");
    CHECK(samples[i].length == tokens);
    CHECK(samples[i].cache_bytes >= tokens * per_token);      // every token is cached...
    CHECK(samples[i].cache_bytes <= 2 * tokens * per_token);  // ...in at most 2x geometric slack
  }

  if (DSA_TEST_ASAN) {
    MESSAGE("AddressSanitizer build: peak-RSS linearity not checked (its quarantine keeps freed memory resident)");
    return;
  }
  // Slopes of the peak RSS in bytes per token of context.
  auto slope = [&](std::size_t a, std::size_t b) {
    return (static_cast<double>(samples[b].peak_rss) - static_cast<double>(samples[a].peak_rss)) /
           static_cast<double>(contexts[b] - contexts[a]);
  };
  const double low = slope(0, 2);   // [256, 1024]
  const double high = slope(2, 3);  // [1024, 2048]
  CAPTURE(low);
  CAPTURE(high);
  MESSAGE("peak RSS slope: " << low << " B/token over [256, 1024], " << high << " B/token over [1024, 2048]; cache "
                             << per_token << " B/token");
  // Linear: high == low. A quadratic term q L^2 gives high - low = q (3072 - 1280) per token,
  // while every linear term cancels. Noise allowance: 1 MiB of RSS over the 1024-token step.
  CHECK(high <= 1.25 * low + 1024.0);
  // The growth is the caches plus bounded per-token working memory, not a multiple of L.
  CHECK(high <= 8.0 * static_cast<double>(per_token));
  CHECK(high >= 0.5 * static_cast<double>(per_token));  // the caches really are resident
}

TEST_CASE("a batch's memory is linear in its number of sequences (peak RSS, one process per batch size)") {
  // B = 4 ... 32 sequences of kContext tokens each, prefilled in one batched call (chunks of 64 per
  // sequence) and decoded together. Per-call buffers are sized by the batch's total tokens
  // (docs/design.md, "Batches"), so the peak RSS grows by about one sequence's caches and
  // working memory per sequence: a buffer sized by the batch's rows times the lengths of all
  // its sequences (B^2) would double the slope at every doubling of B.
  constexpr index_t kContext = 192;
  temp_dir dir;
  const dsa::model::config cfg = memory_config();
  in_child([&] {
    dsa::model::write_random_checkpoint(dir.path, cfg, 7, dsa::cpu_backend{1});
    return sample{};
  });
  const std::vector<index_t> batches = DSA_TEST_ASAN ? std::vector<index_t>{2, 4} : std::vector<index_t>{4, 8, 16, 32};
  std::vector<sample> samples;
  using model_t = dsa::model::transformer<dsa::cpu_backend>;
  for (const index_t B : batches) {
    samples.push_back(in_child([&] {
      auto m = model_t::load(dir.path, dsa::cpu_backend{2});
      std::vector<model_t::sequence_type> seqs;
      std::vector<std::vector<std::int32_t>> ids(static_cast<std::size_t>(B));
      std::vector<model_t::batch_entry> entries(static_cast<std::size_t>(B));
      for (index_t b = 0; b < B; ++b) {
        seqs.push_back(m.new_sequence(kContext + kDecodeSteps));
        auto& p = ids[static_cast<std::size_t>(b)];
        for (index_t i = 0; i < kContext; ++i) p.push_back(static_cast<std::int32_t>((i * 37 + 11 * b + 5) % cfg.vocab_size));
      }
      for (index_t b = 0; b < B; ++b) entries[static_cast<std::size_t>(b)] = {&seqs[static_cast<std::size_t>(b)], ids[static_cast<std::size_t>(b)]};
      dsa::model::forward_options chunked;
      chunked.max_chunk = 64;
      auto logits = m.forward(std::span<const model_t::batch_entry>(entries), chunked);
      for (index_t s = 0; s < kDecodeSteps; ++s) {
        for (index_t b = 0; b < B; ++b) {
          auto& next = ids[static_cast<std::size_t>(b)];
          next.assign(1, dsa::model::greedy_token(logits[static_cast<std::size_t>(b)]));
          entries[static_cast<std::size_t>(b)] = {&seqs[static_cast<std::size_t>(b)], next};
        }
        logits = m.forward(std::span<const model_t::batch_entry>(entries));
      }
      std::uint64_t cache = 0, length = 0;
      for (const auto& s : seqs) {
        cache += s.cache_bytes();
        length += static_cast<std::uint64_t>(s.length());
      }
      rusage u{};
      ::getrusage(RUSAGE_SELF, &u);
      return sample{cache, static_cast<std::uint64_t>(u.ru_maxrss) * 1024u, length, 0};
    }));
  }
  const std::size_t per_token = bytes_per_token_per_layer(cfg) * static_cast<std::size_t>(cfg.num_hidden_layers);
  for (std::size_t i = 0; i < batches.size(); ++i) {
    const auto tokens = static_cast<std::uint64_t>(batches[i] * (kContext + kDecodeSteps));
    CAPTURE(batches[i]);
    MESSAGE("batch " << batches[i] << ": cache " << samples[i].cache_bytes << " B, peak RSS " << samples[i].peak_rss / 1024 << " KiB");
    CHECK(samples[i].length == tokens);
    CHECK(samples[i].cache_bytes >= tokens * per_token);
    CHECK(samples[i].cache_bytes <= 2 * tokens * per_token);
  }
  if (DSA_TEST_ASAN) {
    MESSAGE("AddressSanitizer build: peak-RSS linearity not checked (its quarantine keeps freed memory resident)");
    return;
  }
  auto slope = [&](std::size_t a, std::size_t b) {
    return (static_cast<double>(samples[b].peak_rss) - static_cast<double>(samples[a].peak_rss)) /
           static_cast<double>(batches[b] - batches[a]);
  };
  const double low = slope(0, 2);   // [4, 16]
  const double high = slope(2, 3);  // [16, 32]
  const double per_sequence_cache = static_cast<double>(per_token) * static_cast<double>(kContext + kDecodeSteps);
  CAPTURE(low);
  CAPTURE(high);
  MESSAGE("peak RSS slope: " << low << " B/sequence over [4, 16], " << high << " B/sequence over [16, 32]; cache "
                             << per_sequence_cache << " B/sequence");
  // Measured (2026-11-28): 0.97 and 1.03 MB per sequence; a [rows, all lengths] buffer would add
  // 49 KB B^2, 2.3 MB per sequence to the second slope and 1.0 MB to the first. Noise
  // allowance: 2 MiB of RSS over the 16-sequence step.
  CHECK(high <= 1.25 * low + 131072.0);
  CHECK(high <= 16.0 * per_sequence_cache);
}
