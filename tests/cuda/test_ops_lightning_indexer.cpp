// The lightning indexer on the CUDA backend against the CPU backend.
//   fp8 scores (dense and paged): bit-identical, over a grid of shapes (V3.2's 64 heads x 128 at
//     decode with a 128K context and at prefill), head counts and widths that leave partial
//     head chunks and column rounds, full / causal / offset / empty ranges, NaN codes in q and k,
//     strided and misaligned views (the 16-byte, 4-byte and byte load paths), block sizes 1, 64
//     and 100 through scattered page tables, and device-side values the front-end cannot check
//     (ranges outside [0, n], negative or out-of-cache page-table entries: -inf, never read).
//   fp32 scores and the backward: bit-identical when every product and sum is exact (integer q
//     and k, dyadic w, k_scale and gradients), which pins the index logic and the summation
//     order; otherwise within the rounding-error bound of the two summations (the device fuses
//     multiply-adds, the CPU may not): |device - cpu| <= 2 gamma(N) A, with A the same sum
//     of absolute values in double and gamma(N) = N u / (1 - N u), u = 2^-24.
//   Backward with each gradient absent in turn.
// Needs a GPU for the parity cases (they skip cleanly without one); the front-end cases at the
// end run everywhere.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda/cuda_test.hpp"
#include "cuda/op_test.hpp"
#include "dsa/core/error.hpp"
#include "dsa/cpu/lightning_indexer.hpp"
#include "dsa/cuda/kernel_choice.hpp"
#include "dsa/cuda/ops.hpp"
#include "dsa/ops/lightning_indexer.hpp"
#include "support/fast_kernel_criteria.hpp"
#include "support/random.hpp"

namespace {

using dsa::fp8_e4m3;
using dsa::index_t;
constexpr float neg_inf = -std::numeric_limits<float>::infinity();
constexpr float sentinel = 12345.0f;  // the padding of strided outputs, which must survive

template <class T, std::size_t R>
dsa::device_view<T, R> dview_of(dsa::device_buffer<std::remove_const_t<T>>& b, const index_t (&ext)[R],
                                const index_t (&str)[R], index_t offset = 0) {
  std::array<index_t, R> e{}, s{};
  for (std::size_t r = 0; r < R; ++r) e[r] = ext[r], s[r] = str[r];
  return dsa::device_view<T, R>(b.data() + offset, e, s);
}

template <class T, std::size_t R>
dsa::tensor_view<T, R> hview_of(std::vector<std::remove_const_t<T>>& v, const index_t (&ext)[R],
                                const index_t (&str)[R], index_t offset = 0) {
  std::array<index_t, R> e{}, s{};
  for (std::size_t r = 0; r < R; ++r) e[r] = ext[r], s[r] = str[r];
  return dsa::tensor_view<T, R>(v.data() + offset, e, s);
}

// (start, end) per row: full, causal (end = t * n / m + 1), offset window, empty.
std::vector<std::int32_t> mixed_ranges(index_t m, index_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> r(static_cast<std::size_t>(2 * m));
  for (index_t t = 0; t < m; ++t) {
    index_t a = 0, b = n;
    switch (t % 4) {
      case 0: break;
      case 1: b = std::min<index_t>(n, t * n / m + 1); break;
      case 2:
        a = static_cast<index_t>(rng() % static_cast<std::uint64_t>(n + 1));
        b = a + static_cast<index_t>(rng() % static_cast<std::uint64_t>(n - a + 1));
        break;
      default: a = b = static_cast<index_t>(rng() % static_cast<std::uint64_t>(n + 1)); break;
    }
    r[static_cast<std::size_t>(2 * t)] = static_cast<std::int32_t>(a);
    r[static_cast<std::size_t>(2 * t + 1)] = static_cast<std::int32_t>(b);
  }
  return r;
}

std::vector<std::int32_t> causal_ranges(index_t m, index_t n) {
  std::vector<std::int32_t> r(static_cast<std::size_t>(2 * m));
  for (index_t t = 0; t < m; ++t) r[static_cast<std::size_t>(2 * t + 1)] = static_cast<std::int32_t>(n - m + t + 1);
  return r;
}

// ---- forward -----------------------------------------------------------------------------------

struct layout {
  index_t q_pad = 0;      // extra elements between heads of q
  index_t k_pad = 0;      // extra elements between key rows
  index_t score_pad = 0;  // extra elements between score rows
  index_t offset = 0;     // elements before the first q / k value (misaligns the base)
};

// A forward problem: q [m, H, d] and k [n, d] of T, in padded host storage.
template <class T>
struct fwd_problem {
  index_t m, heads, d, n;
  layout lay;
  std::vector<T> q, k;
  std::vector<float> w, k_scale;
  std::vector<std::int32_t> ranges;

  index_t qs1() const { return d + lay.q_pad; }
  index_t qs0() const { return heads * qs1(); }
  index_t ks0() const { return d + lay.k_pad; }
  index_t ld() const { return n + lay.score_pad; }

  std::vector<float> cpu() {
    std::vector<float> out(static_cast<std::size_t>(m * ld()), sentinel);
    dsa::lightning_indexer_scores(dsa::cpu, hview_of<const T, 3>(q, {m, heads, d}, {qs0(), qs1(), 1}, lay.offset),
                                  dsa::make_view(std::as_const(w).data(), {m, heads}),
                                  hview_of<const T, 2>(k, {n, d}, {ks0(), 1}, lay.offset),
                                  dsa::make_view(std::as_const(k_scale).data(), {n}),
                                  dsa::make_view(std::as_const(ranges).data(), {m, 2}),
                                  hview_of<float, 2>(out, {m, n}, {ld(), 1}));
    return out;
  }

  /// The scores on the device with `kernels`; `chosen` (FP8, with the fast kernels asked for)
  /// receives the kernel kernel_choice.hpp picks for these views on this device.
  std::vector<float> cuda(const std::vector<std::int32_t>& device_ranges,
                          dsa::cuda_kernel_path kernels = dsa::cuda_kernel_path::exact,
                          dsa::cuda_detail::indexer_kernel* chosen = nullptr) {
    dsa_test::test_stream stream;
    auto dq = dsa_test::upload(q, stream.get());
    auto dk = dsa_test::upload(k, stream.get());
    auto dw = dsa_test::upload(w, stream.get());
    auto ds = dsa_test::upload(k_scale, stream.get());
    auto dr = dsa_test::upload(device_ranges, stream.get());
    auto dout = dsa_test::upload(std::vector<float>(static_cast<std::size_t>(m * ld()), sentinel), stream.get());
    const auto qv = dview_of<const T, 3>(dq, {m, heads, d}, {qs0(), qs1(), 1}, lay.offset);
    const auto kv = dview_of<const T, 2>(dk, {n, d}, {ks0(), 1}, lay.offset);
    if (chosen != nullptr) {
      dsa::cuda_detail::indexer_call c;
      c.heads = heads;
      c.d = d;
      c.q = qv.data_handle();
      c.q_stride0 = qs0() * static_cast<index_t>(sizeof(T));
      c.q_stride1 = qs1() * static_cast<index_t>(sizeof(T));
      c.keys = kv.data_handle();
      c.key_stride = ks0() * static_cast<index_t>(sizeof(T));
      *chosen = dsa::cuda_detail::choose_indexer_kernel(kernels, dsa::cuda_detail::current_device_caps(), c);
    }
    dsa::lightning_indexer_scores(stream.backend(kernels), qv, dw.view({m, heads}), kv, ds.view({n}), dr.view({m, 2}),
                                  dview_of<float, 2>(dout, {m, n}, {ld(), 1}));
    return dsa_test::download(dout, stream.get());
  }
  std::vector<float> cuda() { return cuda(ranges); }
};

fwd_problem<fp8_e4m3> make_fp8(index_t m, index_t heads, index_t d, index_t n, std::uint64_t seed, layout lay = {},
                               bool nan_codes = false) {
  fwd_problem<fp8_e4m3> p{m, heads, d, n, lay, {}, {}, {}, {}, {}};
  const auto qv = dsa_test::normal(static_cast<std::size_t>(lay.offset + m * p.qs0()), seed, 60.0f);
  const auto kv = dsa_test::normal(static_cast<std::size_t>(lay.offset + n * p.ks0()), seed + 1, 60.0f);
  p.q = dsa_test::convert<fp8_e4m3>(qv);
  p.k = dsa_test::convert<fp8_e4m3>(kv);
  if (nan_codes) {
    // A few NaN codes (both signs) in q and k: the scores they reach are NaN on both backends.
    std::mt19937_64 rng(seed + 9);
    for (int i = 0; i < 8; ++i) {
      p.q[rng() % p.q.size()] = fp8_e4m3::from_bits(i % 2 ? 0xFF : 0x7F);
      p.k[rng() % p.k.size()] = fp8_e4m3::from_bits(i % 2 ? 0x7F : 0xFF);
    }
  }
  p.w = dsa_test::normal(static_cast<std::size_t>(m * heads), seed + 2, 0.01f);
  p.k_scale = dsa_test::uniform(static_cast<std::size_t>(n), seed + 3, 1e-3f, 4e-3f);
  p.ranges = mixed_ranges(m, n, seed + 4);
  return p;
}

// fp32 inputs; `exact`: q and k small integers, w and k_scale dyadic, so every dot, product and
// head sum is exact and both backends must give the same bits.
fwd_problem<float> make_f32(index_t m, index_t heads, index_t d, index_t n, std::uint64_t seed, bool exact,
                            layout lay = {}) {
  fwd_problem<float> p{m, heads, d, n, lay, {}, {}, {}, {}, {}};
  p.q = dsa_test::normal(static_cast<std::size_t>(lay.offset + m * p.qs0()), seed, 1.0f);
  p.k = dsa_test::normal(static_cast<std::size_t>(lay.offset + n * p.ks0()), seed + 1, 1.0f);
  p.w = dsa_test::normal(static_cast<std::size_t>(m * heads), seed + 2, 0.1f);
  p.k_scale = dsa_test::uniform(static_cast<std::size_t>(n), seed + 3, 0.5f, 2.0f);
  if (exact) {
    for (auto& x : p.q) x = std::round(x * 4.0f);
    for (auto& x : p.k) x = std::round(x * 4.0f);
    for (auto& x : p.w) x = std::round(x * 64.0f) / 64.0f;
    for (auto& x : p.k_scale) x = std::exp2(std::round(std::log2(x)));
  }
  p.ranges = mixed_ranges(m, n, seed + 4);
  return p;
}

// |device - cpu| <= 2 gamma(d + H + 1) k_scale sum_h |w| sum_i |q k| per in-range score; the same
// -inf elsewhere; the padding untouched.
void check_f32_bound(fwd_problem<float>& p, const std::vector<float>& dev, const std::vector<float>& host) {
  REQUIRE(dev.size() == host.size());
  const double u = std::ldexp(1.0, -24);
  const double nu = static_cast<double>(p.d + p.heads + 1) * u;
  const double gamma = nu / (1.0 - nu);
  index_t bad = 0;
  for (index_t t = 0; t < p.m; ++t) {
    for (index_t s = 0; s < p.ld(); ++s) {
      const float a = dev[static_cast<std::size_t>(t * p.ld() + s)], b = host[static_cast<std::size_t>(t * p.ld() + s)];
      const bool in = s < p.n && s >= p.ranges[static_cast<std::size_t>(2 * t)] &&
                      s < p.ranges[static_cast<std::size_t>(2 * t + 1)];
      if (!in) {
        if (std::memcmp(&a, &b, sizeof a) != 0 && ++bad <= 5) MESSAGE("t " << t << " s " << s << ": " << a << " vs " << b);
        continue;
      }
      double abs_sum = 0.0;
      for (index_t h = 0; h < p.heads; ++h) {
        double dot = 0.0;
        for (index_t i = 0; i < p.d; ++i) {
          dot += std::abs(static_cast<double>(p.q[static_cast<std::size_t>(p.lay.offset + t * p.qs0() + h * p.qs1() + i)]) *
                          p.k[static_cast<std::size_t>(p.lay.offset + s * p.ks0() + i)]);
        }
        abs_sum += std::abs(static_cast<double>(p.w[static_cast<std::size_t>(t * p.heads + h)])) * dot;
      }
      const double bound = 2.0 * gamma * abs_sum * p.k_scale[static_cast<std::size_t>(s)];
      if (!(std::abs(static_cast<double>(a) - b) <= bound) && ++bad <= 5) {
        MESSAGE("t " << t << " s " << s << ": " << a << " vs " << b << " (bound " << bound << ")");
      }
    }
  }
  CHECK(bad == 0);
}

void check_fp8(index_t m, index_t heads, index_t d, index_t n, std::uint64_t seed, layout lay = {},
               bool nan_codes = false) {
  CAPTURE(m);
  CAPTURE(heads);
  CAPTURE(d);
  CAPTURE(n);
  CAPTURE(lay.q_pad);
  CAPTURE(lay.offset);
  auto p = make_fp8(m, heads, d, n, seed, lay, nan_codes);
  dsa_test::check_bits_equal("scores", p.cuda(), p.cpu());
}

}  // namespace

TEST_CASE("cuda lightning_indexer_scores fp8: bit-identical to the CPU over a grid of shapes") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  std::uint64_t seed = 100;
  check_fp8(1, 1, 1, 1, ++seed);
  check_fp8(3, 7, 40, 300, ++seed);     // partial head chunk, 40 = 32 + 8 columns, 1 row per block
  check_fp8(5, 64, 128, 777, ++seed);   // 4 rows per block, partial last row tile and key tile
  check_fp8(9, 65, 136, 300, ++seed);   // 65 heads: a second head chunk of one head
  check_fp8(17, 64, 128, 1000, ++seed); // 16 rows per block
  check_fp8(64, 64, 128, 4096, ++seed); // V3.2 decode batch (MTP-sized rows)
  check_fp8(16, 3, 16, 64, ++seed);
  check_fp8(40, 1, 128, 65, ++seed);    // one head: 16 rows x 4 heads tile with 3 unused heads
}

TEST_CASE("cuda lightning_indexer_scores fp8: V3.2 shapes (64 heads x 128, decode over 128K, prefill)") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  // Under the sanitizers (racecheck did not finish the full shapes in 310 s alone on an H100) the
  // same instances at an eighth of the keys and rows: decode (1 row per block) over 16K keys,
  // prefill (16 rows per block) as 32 causal rows of a 1K context.
  const bool small = dsa_test::under_sanitizer();
  check_fp8(2, 64, 128, small ? 16384 : 131072, 201);
  const index_t rows = small ? 32 : 256, context = small ? 1024 : 4096;
  auto pre = make_fp8(rows, 64, 128, context, 202);
  pre.ranges = causal_ranges(rows, context);  // the last `rows` positions of a prefill
  dsa_test::check_bits_equal("scores", pre.cuda(), pre.cpu());
}

TEST_CASE("cuda lightning_indexer_scores fp8: NaN codes, strided and misaligned views") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  check_fp8(6, 8, 128, 500, 301, {}, true);
  check_fp8(6, 8, 128, 500, 302, {16, 32, 3, 0});  // padded rows, 16-byte loads still aligned
  check_fp8(6, 8, 128, 500, 303, {4, 4, 1, 4});    // 4-byte aligned rows: word loads
  check_fp8(6, 8, 128, 500, 304, {3, 1, 0, 1});    // odd strides: byte loads
  check_fp8(20, 5, 48, 200, 305, {1, 7, 2, 1}, true);
}

TEST_CASE("cuda lightning_indexer_scores: device-side ranges outside [0, n] are clamped") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  auto p = make_fp8(4, 8, 128, 300, 401);
  const std::vector<std::int32_t> bad = {-100, 50, 200, 100000, 250, 100, std::numeric_limits<std::int32_t>::min(),
                                         std::numeric_limits<std::int32_t>::max()};
  p.ranges = {0, 50, 200, 300, 250, 250, 0, 300};
  dsa_test::check_bits_equal("scores", p.cuda(bad), p.cpu());
}

TEST_CASE("cuda lightning_indexer_scores fp32: bit-identical on exact data, within the bound otherwise") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  std::uint64_t seed = 500;
  for (const bool exact : {true, false}) {
    CAPTURE(exact);
    for (auto [m, heads, d, n] : {std::array<index_t, 4>{3, 7, 40, 300}, {17, 64, 128, 1000}, {5, 65, 33, 129},
                                  {64, 64, 128, 2048}}) {
      CAPTURE(m);
      CAPTURE(d);
      auto p = make_f32(m, heads, d, n, ++seed, exact);
      if (exact) {
        dsa_test::check_bits_equal("scores", p.cuda(), p.cpu());
      } else {
        const auto dev = p.cuda();
        check_f32_bound(p, dev, p.cpu());
      }
    }
    auto strided = make_f32(9, 6, 40, 100, ++seed, exact, {5, 3, 2, 1});  // misaligned: scalar loads
    if (exact) {
      dsa_test::check_bits_equal("scores", strided.cuda(), strided.cpu());
    } else {
      const auto dev = strided.cuda();
      check_f32_bound(strided, dev, strided.cpu());
    }
  }
}

// ---- paged -------------------------------------------------------------------------------------

namespace {

struct paged_problem {
  index_t m, heads, n, block_size, max_blocks, slots;
  std::vector<fp8_e4m3> q;
  std::vector<float> w;
  std::vector<std::uint8_t> cache;
  std::vector<std::int32_t> table, ranges;

  // Each row's blocks are a random selection of the cache's blocks (rows share some), so
  // consecutive logical positions are scattered.
  paged_problem(index_t m_, index_t heads_, index_t n_, index_t bs, std::uint64_t seed)
      : m(m_), heads(heads_), n(n_), block_size(bs) {
    max_blocks = (n + bs - 1) / bs + 1;
    const index_t cache_blocks = max_blocks * 2;
    slots = cache_blocks * bs;
    q = dsa_test::convert<fp8_e4m3>(dsa_test::normal(static_cast<std::size_t>(m * heads * 128), seed, 60.0f));
    w = dsa_test::normal(static_cast<std::size_t>(m * heads), seed + 1, 0.01f);
    const auto codes = dsa_test::convert<fp8_e4m3>(dsa_test::normal(static_cast<std::size_t>(slots * 128), seed + 2, 60.0f));
    const auto scales = dsa_test::uniform(static_cast<std::size_t>(slots), seed + 3, 1e-3f, 4e-3f);
    cache.resize(static_cast<std::size_t>(slots * 132));
    for (index_t s = 0; s < slots; ++s) {
      dsa::indexer_cache_row_encode(codes.data() + s * 128, scales[static_cast<std::size_t>(s)],
                                    cache.data() + s * 132);
    }
    std::mt19937_64 rng(seed + 4);
    table.resize(static_cast<std::size_t>(m * max_blocks));
    std::vector<std::int32_t> blocks(static_cast<std::size_t>(cache_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    for (index_t t = 0; t < m; ++t) {
      std::shuffle(blocks.begin(), blocks.end(), rng);
      std::copy_n(blocks.begin(), max_blocks, table.begin() + t * max_blocks);
    }
    ranges = mixed_ranges(m, n, seed + 5);
  }

  std::vector<float> cpu() const {
    std::vector<float> out(static_cast<std::size_t>(m * n), sentinel);
    dsa::lightning_indexer_scores_paged(dsa::cpu, dsa::make_view(q.data(), {m, heads, 128}),
                                        dsa::make_view(w.data(), {m, heads}), dsa::make_view(cache.data(), {slots, 132}),
                                        dsa::make_view(table.data(), {m, max_blocks}), block_size,
                                        dsa::make_view(ranges.data(), {m, 2}), dsa::make_view(out.data(), {m, n}));
    return out;
  }

  std::vector<float> cuda(const std::vector<std::int32_t>& dev_table,
                          dsa::cuda_kernel_path kernels = dsa::cuda_kernel_path::exact) const {
    dsa_test::test_stream stream;
    auto dq = dsa_test::upload(q, stream.get());
    auto dw = dsa_test::upload(w, stream.get());
    auto dc = dsa_test::upload(cache, stream.get());
    auto dt = dsa_test::upload(dev_table, stream.get());
    auto dr = dsa_test::upload(ranges, stream.get());
    auto dout = dsa_test::upload(std::vector<float>(static_cast<std::size_t>(m * n), sentinel), stream.get());
    dsa::lightning_indexer_scores_paged(stream.backend(kernels), dq.view({m, heads, 128}), dw.view({m, heads}),
                                        dc.view({slots, 132}), dt.view({m, max_blocks}), block_size, dr.view({m, 2}),
                                        dout.view({m, n}));
    return dsa_test::download(dout, stream.get());
  }
};

}  // namespace

TEST_CASE("cuda lightning_indexer_scores_paged: bit-identical to the CPU through scattered block tables") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  for (const index_t bs : {index_t{1}, index_t{64}, index_t{100}}) {
    CAPTURE(bs);
    const paged_problem p(6, 64, 3000, bs, 600 + static_cast<std::uint64_t>(bs));
    dsa_test::check_bits_equal("scores", p.cuda(p.table), p.cpu());
  }
  const paged_problem decode(4, 64, 32768, 64, 650);  // V3.2 decode rows over a 32K paged context
  dsa_test::check_bits_equal("scores", decode.cuda(decode.table), decode.cpu());
}

TEST_CASE("cuda lightning_indexer_scores_paged: unreadable device-side page-table entries score -inf") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  paged_problem p(2, 8, 256, 64, 700);
  p.ranges = {0, 256, 0, 256};
  const auto good = p.cpu();
  auto bad_table = p.table;
  const index_t mb = p.max_blocks;
  bad_table[1] = -1;                                              // row 0, block 1: negative
  bad_table[static_cast<std::size_t>(mb + 2)] = static_cast<std::int32_t>(p.slots / 64);  // row 1, block 2: past the cache
  bad_table[static_cast<std::size_t>(mb + 3)] = std::numeric_limits<std::int32_t>::max();  // row 1, block 3: overflow
  auto expected = good;
  for (index_t s = 64; s < 128; ++s) expected[static_cast<std::size_t>(s)] = neg_inf;
  for (index_t s = 128; s < 256; ++s) expected[static_cast<std::size_t>(p.n + s)] = neg_inf;
  dsa_test::check_bits_equal("scores", p.cuda(bad_table), expected);
}

// ---- the tensor-core kernels against the exact ones ----------------------------------------------
//
// On the same FP8 inputs the fast kernels' scores against the exact kernel's with DeepGEMM's
// criterion (support/fast_kernel_criteria.hpp): the same -inf (and NaN) positions, calc_diff < 5e-6
// over the rest; and the top-2048 sets of every row equal except for keys whose exact score lies
// within the a-priori error bound of the k-th one. The padding of strided score rows is never
// written. The cases the fast kernel holds must reach it (kernel_choice.hpp, asked with the same
// views), the others not.

namespace {

bool device_has_mma_sync() { return dsa::cuda_detail::current_device_caps().compute_capability >= 80; }

// An a-priori bound of |fast - exact| for score (t, s): both paths sum exact e4m3 products in
// fp32 (the tensor cores in their own order and precision, at most 2 ulps of the partial sum per
// addition; the exact kernel sequentially), then 64 rounded head terms in two orders, then one
// scale: within 515 u A for u = 2^-24 and A = k_scale Σ_h |w| Σ_i |q k|; twice that, 2^-14 A.
double score_bound(const std::vector<fp8_e4m3>& q, index_t q_off, index_t qs0, index_t qs1, const std::vector<float>& w,
                   const fp8_e4m3* k, float k_scale, index_t t, index_t heads, index_t d) {
  double a = 0.0;
  for (index_t h = 0; h < heads; ++h) {
    double dot = 0.0;
    for (index_t i = 0; i < d; ++i) {
      dot += std::abs(static_cast<double>(q[static_cast<std::size_t>(q_off + t * qs0 + h * qs1 + i)].to_float()) * k[i].to_float());
    }
    a += std::abs(static_cast<double>(w[static_cast<std::size_t>(t * heads + h)])) * dot;
  }
  return std::ldexp(a * std::abs(static_cast<double>(k_scale)), -14);
}

// Rows [m, n] of a padded score matrix; checks that the padding still holds the sentinel.
std::vector<float> unpadded(const std::vector<float>& v, index_t m, index_t n, index_t ld) {
  std::vector<float> out(static_cast<std::size_t>(m * n));
  index_t touched = 0;
  for (index_t t = 0; t < m; ++t) {
    for (index_t s = 0; s < ld; ++s) {
      const float x = v[static_cast<std::size_t>(t * ld + s)];
      if (s < n) {
        out[static_cast<std::size_t>(t * n + s)] = x;
      } else if (!(x == sentinel)) {
        ++touched;
      }
    }
  }
  CHECK(touched == 0);
  return out;
}

void check_criteria(const std::vector<float>& fast, const std::vector<float>& exact, index_t m, index_t n, index_t topk,
                    const std::function<double(index_t, index_t)>& bound) {
  const dsa_test::criterion_result logits = dsa_test::indexer_logits_close(fast, exact);
  CHECK_MESSAGE(logits.ok, logits.message);
  const dsa_test::criterion_result sets = dsa_test::topk_sets_agree(fast, exact, m, n, n, topk, bound);
  CHECK_MESSAGE(sets.ok, sets.message);
}

void check_fast(fwd_problem<fp8_e4m3>& p, const std::vector<std::int32_t>& device_ranges, index_t topk = 2048) {
  CAPTURE(p.m);
  CAPTURE(p.heads);
  CAPTURE(p.d);
  CAPTURE(p.n);
  CAPTURE(p.lay.q_pad);
  CAPTURE(p.lay.k_pad);
  CAPTURE(p.lay.offset);
  dsa::cuda_detail::indexer_kernel chosen = dsa::cuda_detail::indexer_kernel::exact;
  const std::vector<float> exact = unpadded(p.cuda(device_ranges), p.m, p.n, p.ld());
  const std::vector<float> fast = unpadded(p.cuda(device_ranges, dsa::cuda_kernel_path::fast, &chosen), p.m, p.n, p.ld());
  // d = 128, at most 64 heads, q rows on 16 bytes, key rows on 4: the fast kernel.
  const bool holds = p.d == 128 && p.heads <= 64 && p.lay.offset % 16 == 0 && p.qs1() % 16 == 0 && p.lay.offset % 4 == 0 &&
                     p.ks0() % 4 == 0;
  if (device_has_mma_sync()) CHECK((chosen != dsa::cuda_detail::indexer_kernel::exact) == holds);
  check_criteria(fast, exact, p.m, p.n, topk, [&](index_t t, index_t s) {
    return score_bound(p.q, p.lay.offset, p.qs0(), p.qs1(), p.w, p.k.data() + p.lay.offset + s * p.ks0(),
                       p.k_scale[static_cast<std::size_t>(s)], t, p.heads, p.d);
  });
}

}  // namespace

TEST_CASE("cuda lightning_indexer_scores fast kernel: against the exact kernel over a grid of shapes") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  std::uint64_t seed = 800;
  for (auto [m, heads, d, n] : {std::array<index_t, 4>{1, 1, 1, 1}, {3, 7, 128, 300}, {5, 64, 128, 777},
                                {9, 65, 128, 300}, {17, 64, 128, 1000}, {64, 64, 128, 4096}, {40, 1, 128, 65},
                                {100, 64, 128, 3000}, {3, 8, 40, 300}}) {
    auto p = make_fp8(m, heads, d, n, ++seed);
    check_fast(p, p.ranges);
  }
}

TEST_CASE("cuda lightning_indexer_scores fast kernel: V3.2 shapes (decode over 128K, prefill, 4096 rows)") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  // Under the sanitizers an eighth of the keys and rows, as for the exact kernel.
  const bool small = dsa_test::under_sanitizer();
  for (const index_t m : {index_t{1}, index_t{2}}) {
    auto decode = make_fp8(m, 64, 128, small ? 16384 : 131072, 810 + static_cast<std::uint64_t>(m));
    for (index_t t = 0; t < m; ++t) {
      decode.ranges[static_cast<std::size_t>(2 * t)] = 0;
      decode.ranges[static_cast<std::size_t>(2 * t + 1)] = static_cast<std::int32_t>(decode.n);
    }
    check_fast(decode, decode.ranges);
  }
  const index_t rows = small ? 32 : 256, context = small ? 1024 : 4096;
  auto pre = make_fp8(rows, 64, 128, context, 820);
  pre.ranges = causal_ranges(rows, context);
  check_fast(pre, pre.ranges);
  if (!small) {
    // m = 4096, the largest promised row count: a causal prefill chunk at the end of 8K keys.
    auto big = make_fp8(4096, 64, 128, 8192, 821);
    big.ranges = causal_ranges(4096, 8192);
    check_fast(big, big.ranges);
  }
}

TEST_CASE("cuda lightning_indexer_scores fast kernel: NaN codes, strided views, clamped ranges, k > keys") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  auto nan_codes = make_fp8(6, 8, 128, 500, 830, {}, true);
  check_fast(nan_codes, nan_codes.ranges);
  for (const layout lay : {layout{16, 32, 3, 0},    // padded rows: 16-byte key copies
                           layout{16, 4, 0, 0},     // 132-byte key rows: 4-byte copies
                           layout{16, 4, 1, 16},    // an offset base, still aligned
                           layout{4, 4, 1, 4},      // q rows on 4 bytes: the exact kernel
                           layout{0, 1, 0, 1}}) {   // odd key rows: the exact kernel
    auto p = make_fp8(20, 64, 128, 700, 831, lay);
    check_fast(p, p.ranges);
  }
  auto clamp = make_fp8(4, 8, 128, 300, 840);
  const std::vector<std::int32_t> bad = {-100, 50, 200, 100000, 250, 100, std::numeric_limits<std::int32_t>::min(),
                                         std::numeric_limits<std::int32_t>::max()};
  clamp.ranges = {0, 50, 200, 300, 250, 250, 0, 300};
  check_fast(clamp, bad);
  // Every row's range shorter than k (top-2048 of at most 300 keys), empty rows among them.
  auto few = make_fp8(12, 64, 128, 300, 841);
  check_fast(few, few.ranges, 2048);
}

TEST_CASE("cuda lightning_indexer_scores_paged fast kernel: against the exact kernel through scattered block tables") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  const auto compare = [](const paged_problem& p, const std::vector<std::int32_t>& table) {
    const std::vector<float> exact = p.cuda(table);
    const std::vector<float> fast = p.cuda(table, dsa::cuda_kernel_path::fast);
    check_criteria(fast, exact, p.m, p.n, 2048, [&](index_t t, index_t s) {
      // The key's cache row through the (valid) table entry; unreadable keys are -inf on both.
      const std::int32_t entry = table[static_cast<std::size_t>(t * p.max_blocks + s / p.block_size)];
      const index_t slot = static_cast<index_t>(entry) * p.block_size + s % p.block_size;
      std::vector<fp8_e4m3> codes(128);
      const float scale = dsa::indexer_cache_row_decode(p.cache.data() + slot * 132, codes.data());
      return score_bound(p.q, 0, p.heads * 128, 128, p.w, codes.data(), scale, t, p.heads, 128);
    });
  };
  for (const index_t bs : {index_t{1}, index_t{64}, index_t{100}}) {
    CAPTURE(bs);
    const paged_problem p(6, 64, 3000, bs, 850 + static_cast<std::uint64_t>(bs));
    compare(p, p.table);
  }
  const bool small = dsa_test::under_sanitizer();
  const paged_problem decode(small ? 2 : 64, 64, small ? 4096 : 32768, 64, 860);  // V3.2 decode rows, out-of-order blocks
  compare(decode, decode.table);
  paged_problem bad(2, 8, 256, 64, 870);
  bad.ranges = {0, 256, 0, 256};
  auto bad_table = bad.table;
  bad_table[1] = -1;
  bad_table[static_cast<std::size_t>(bad.max_blocks + 2)] = static_cast<std::int32_t>(bad.slots / 64);
  bad_table[static_cast<std::size_t>(bad.max_blocks + 3)] = std::numeric_limits<std::int32_t>::max();
  const std::vector<float> exact = bad.cuda(bad_table);
  const std::vector<float> fast = bad.cuda(bad_table, dsa::cuda_kernel_path::fast);
  const dsa_test::criterion_result r = dsa_test::indexer_logits_close(fast, exact);
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(std::isinf(fast[64]));   // row 0, block 1: negative entry
  CHECK(std::isinf(fast[static_cast<std::size_t>(bad.n + 200)]));  // row 1, block 3: past the cache
}

// ---- backward ----------------------------------------------------------------------------------

namespace {

struct bwd_problem {
  index_t m, heads, d, n;
  std::vector<float> q, w, k, k_scale, g;
  std::vector<std::int32_t> ranges;

  // q and k small integers (every dot exact, so both backends see the same ReLU masks); with
  // `exact` also w, k_scale and g dyadic and small, so that every gradient sum is exact.
  bwd_problem(index_t m_, index_t heads_, index_t d_, index_t n_, std::uint64_t seed, bool exact)
      : m(m_), heads(heads_), d(d_), n(n_) {
    q = dsa_test::normal(static_cast<std::size_t>(m * heads * d), seed, 2.0f);
    k = dsa_test::normal(static_cast<std::size_t>(n * d), seed + 1, 2.0f);
    for (auto& x : q) x = std::round(x);
    for (auto& x : k) x = std::round(x);
    w = dsa_test::normal(static_cast<std::size_t>(m * heads), seed + 2, 0.1f);
    k_scale = dsa_test::uniform(static_cast<std::size_t>(n), seed + 3, 0.5f, 2.0f);
    g = dsa_test::normal(static_cast<std::size_t>(m * n), seed + 4, 1.0f);
    std::mt19937_64 rng(seed + 5);
    for (auto& x : g) {
      if (rng() % 3 == 0) x = 0.0f;  // zero upstream gradients are skipped
    }
    if (exact) {
      for (auto& x : w) x = std::round(x * 16.0f) / 16.0f;
      for (auto& x : k_scale) x = std::exp2(std::round(std::log2(x)));
      for (auto& x : g) x = std::round(x * 4.0f) / 4.0f;
    }
    set_ranges(mixed_ranges(m, n, seed + 6));
  }

  // New row ranges; the NaN planted at key 0 of rows that start after it (out-of-range gradients
  // are ignored whatever they hold) moves with them, so no NaN is ever in range.
  void set_ranges(std::vector<std::int32_t> r) {
    for (auto& x : g) {
      if (std::isnan(x)) x = 0.5f;
    }
    ranges = std::move(r);
    for (index_t t = 0; t < m; ++t) {
      if (ranges[static_cast<std::size_t>(2 * t)] > 0) g[static_cast<std::size_t>(t * n)] = std::nanf("");
    }
  }

  struct grads {
    std::vector<float> q, w, k;
  };

  grads cpu() const {
    grads r{std::vector<float>(q.size()), std::vector<float>(w.size()), std::vector<float>(k.size())};
    dsa::lightning_indexer_backward(dsa::cpu, dsa::make_view(q.data(), {m, heads, d}), dsa::make_view(w.data(), {m, heads}),
                                    dsa::make_view(k.data(), {n, d}), dsa::make_view(k_scale.data(), {n}),
                                    dsa::make_view(ranges.data(), {m, 2}), dsa::make_view(g.data(), {m, n}),
                                    dsa::make_view(r.q.data(), {m, heads, d}), dsa::make_view(r.w.data(), {m, heads}),
                                    dsa::make_view(r.k.data(), {n, d}));
    return r;
  }

  // The outputs start as the sentinel; absent ones are passed as absent views and stay so.
  grads cuda(bool want_q, bool want_w, bool want_k) const {
    dsa_test::test_stream stream;
    auto dq = dsa_test::upload(q, stream.get());
    auto dw = dsa_test::upload(w, stream.get());
    auto dk = dsa_test::upload(k, stream.get());
    auto ds = dsa_test::upload(k_scale, stream.get());
    auto dr = dsa_test::upload(ranges, stream.get());
    auto dg = dsa_test::upload(g, stream.get());
    auto gq = dsa_test::upload(std::vector<float>(q.size(), sentinel), stream.get());
    auto gw = dsa_test::upload(std::vector<float>(w.size(), sentinel), stream.get());
    auto gk = dsa_test::upload(std::vector<float>(k.size(), sentinel), stream.get());
    dsa::lightning_indexer_backward(stream.backend(dsa::cuda_kernel_path::exact), dq.view({m, heads, d}), dw.view({m, heads}), dk.view({n, d}),
                                    ds.view({n}), dr.view({m, 2}), dg.view({m, n}),
                                    want_q ? gq.view({m, heads, d}) : dsa::device_view<float, 3>{},
                                    want_w ? gw.view({m, heads}) : dsa::device_view<float, 2>{},
                                    want_k ? gk.view({n, d}) : dsa::device_view<float, 2>{});
    return {dsa_test::download(gq, stream.get()), dsa_test::download(gw, stream.get()),
            dsa_test::download(gk, stream.get())};
  }

  // Double-precision sums of |terms| of each gradient element (the summation's condition).
  grads abs_sums() const {
    grads a{std::vector<float>(q.size()), std::vector<float>(w.size()), std::vector<float>(k.size())};
    std::vector<double> aq(q.size()), aw(w.size()), ak(k.size());
    for (index_t t = 0; t < m; ++t) {
      for (index_t s = ranges[static_cast<std::size_t>(2 * t)]; s < ranges[static_cast<std::size_t>(2 * t + 1)]; ++s) {
        const double gs = std::abs(static_cast<double>(g[static_cast<std::size_t>(t * n + s)]) * k_scale[static_cast<std::size_t>(s)]);
        if (gs == 0.0) continue;
        for (index_t h = 0; h < heads; ++h) {
          const float* qr = q.data() + (t * heads + h) * d;
          const float* kr = k.data() + s * d;
          double z = 0.0;
          for (index_t i = 0; i < d; ++i) z += static_cast<double>(qr[i]) * kr[i];
          if (!(z > 0.0)) continue;
          aw[static_cast<std::size_t>(t * heads + h)] += gs * z;
          const double c = gs * std::abs(static_cast<double>(w[static_cast<std::size_t>(t * heads + h)]));
          for (index_t i = 0; i < d; ++i) {
            aq[static_cast<std::size_t>((t * heads + h) * d + i)] += c * std::abs(kr[i]);
            ak[static_cast<std::size_t>(s * d + i)] += c * std::abs(qr[i]);
          }
        }
      }
    }
    for (std::size_t i = 0; i < aq.size(); ++i) a.q[i] = static_cast<float>(aq[i]);
    for (std::size_t i = 0; i < aw.size(); ++i) a.w[i] = static_cast<float>(aw[i]);
    for (std::size_t i = 0; i < ak.size(); ++i) a.k[i] = static_cast<float>(ak[i]);
    return a;
  }
};

// |dev - host| <= 2 gamma(terms) A + 2 u |A| (the rounding of the coefficient c = g · w).
void check_grad_bound(const char* what, const std::vector<float>& dev, const std::vector<float>& host,
                      const std::vector<float>& abs_sum, index_t terms) {
  REQUIRE(dev.size() == host.size());
  const double u = std::ldexp(1.0, -24);
  const double nu = static_cast<double>(terms + 3) * u;
  const double gamma = nu / (1.0 - nu);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < dev.size(); ++i) {
    const double bound = 2.0 * gamma * abs_sum[i] * (1.0 + 1e-6);
    if (!(std::abs(static_cast<double>(dev[i]) - host[i]) <= bound) && ++bad <= 5) {
      MESSAGE(what << "[" << i << "]: " << dev[i] << " vs " << host[i] << " (bound " << bound << ")");
    }
  }
  INFO(what << ": " << bad << " elements outside the bound");
  CHECK(bad == 0);
}

void check_backward(index_t m, index_t heads, index_t d, index_t n, std::uint64_t seed, bool exact) {
  CAPTURE(m);
  CAPTURE(heads);
  CAPTURE(d);
  CAPTURE(n);
  CAPTURE(exact);
  const bwd_problem p(m, heads, d, n, seed, exact);
  const auto host = p.cpu();
  const auto dev = p.cuda(true, true, true);
  if (exact) {
    dsa_test::check_bits_equal("grad_q", dev.q, host.q);
    dsa_test::check_bits_equal("grad_w", dev.w, host.w);
    dsa_test::check_bits_equal("grad_k", dev.k, host.k);
  } else {
    const auto a = p.abs_sums();
    check_grad_bound("grad_q", dev.q, host.q, a.q, n);
    check_grad_bound("grad_w", dev.w, host.w, a.w, n + d);
    check_grad_bound("grad_k", dev.k, host.k, a.k, m * heads);
  }
}

}  // namespace

TEST_CASE("cuda lightning_indexer_backward: bit-identical on exact data, within the bound otherwise") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  std::uint64_t seed = 800;
  for (const bool exact : {true, false}) {
    check_backward(1, 1, 1, 1, ++seed, exact);
    check_backward(3, 7, 40, 300, ++seed, exact);    // partial head block, column round and key tile
    check_backward(9, 65, 136, 129, ++seed, exact);  // two head blocks, two column blocks
    // V3.2's indexer head shape (8 rows under the sanitizers).
    check_backward(dsa_test::full_or_sanitizer<index_t>(64, 8), 64, 128, 256, ++seed, exact);
  }
  // A training-sized causal problem (rows = keys), with the bound; the sanitizers skip it (the
  // case above runs its kernels at its head shape).
  if (dsa_test::under_sanitizer()) return;
  bwd_problem causal(512, 64, 128, 512, 850, false);
  causal.set_ranges(causal_ranges(512, 512));
  const auto host = causal.cpu();
  const auto dev = causal.cuda(true, true, true);
  const auto a = causal.abs_sums();
  check_grad_bound("grad_q", dev.q, host.q, a.q, 512);
  check_grad_bound("grad_w", dev.w, host.w, a.w, 512 + 128);
  check_grad_bound("grad_k", dev.k, host.k, a.k, 512 * 64);
}

TEST_CASE("cuda lightning_indexer_backward: each gradient absent in turn; absent outputs untouched") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  const bwd_problem p(7, 9, 40, 150, 900, true);
  const auto host = p.cpu();
  const std::vector<float> untouched_q(p.q.size(), sentinel), untouched_w(p.w.size(), sentinel),
      untouched_k(p.k.size(), sentinel);
  for (int absent = 0; absent < 3; ++absent) {
    CAPTURE(absent);
    const auto dev = p.cuda(absent != 0, absent != 1, absent != 2);
    dsa_test::check_bits_equal("grad_q", dev.q, absent == 0 ? untouched_q : host.q);
    dsa_test::check_bits_equal("grad_w", dev.w, absent == 1 ? untouched_w : host.w);
    dsa_test::check_bits_equal("grad_k", dev.k, absent == 2 ? untouched_k : host.k);
  }
  const auto only_k = p.cuda(false, false, true);
  dsa_test::check_bits_equal("grad_k", only_k.k, host.k);
  dsa_test::check_bits_equal("grad_q", only_k.q, untouched_q);
}

TEST_CASE("cuda lightning_indexer_backward: device-side ranges outside [0, n] are clamped") {
  DSA_TEST_REQUIRE_CUDA_DEVICE();
  bwd_problem p(4, 3, 16, 50, 950, true);
  p.set_ranges({0, 20, 10, 50, 30, 30, 0, 50});
  const auto host = p.cpu();
  bwd_problem bad = p;
  bad.ranges = {-7, 20, 10, 9999, 30, 2, std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()};
  const auto dev = bad.cuda(true, true, true);
  dsa_test::check_bits_equal("grad_q", dev.q, host.q);
  dsa_test::check_bits_equal("grad_w", dev.w, host.w);
  dsa_test::check_bits_equal("grad_k", dev.k, host.k);
}

// ---- front-end checks with device views (no GPU needed) -----------------------------------------

TEST_CASE("cuda lightning_indexer: front-end checks with device views (no GPU needed)") {
  const dsa::cuda_backend be{};
  auto q = dsa_test::fake_device_view<fp8_e4m3, 3>({4, 8, 128});
  auto w = dsa_test::fake_device_view<float, 2>({4, 8});
  auto k = dsa_test::fake_device_view<fp8_e4m3, 2>({100, 128});
  auto ks = dsa_test::fake_device_view<float, 1>({100});
  auto r = dsa_test::fake_device_view<std::int32_t, 2>({4, 2});
  auto scores = dsa_test::fake_device_view<float, 2>({4, 100});
  auto w_bad = dsa_test::fake_device_view<float, 2>({4, 7});
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(be, q, w_bad, k, ks, r, scores),
                       doctest::Contains("dsa::lightning_indexer_scores: w.extent(1) = 7; expected 8"), dsa::error);
  auto k_bad = dsa_test::fake_device_view<fp8_e4m3, 2>({100, 64});
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(be, q, w, k_bad, ks, r, scores),
                       doctest::Contains("dsa::lightning_indexer_scores: k.extent(1) = 64; expected 128"), dsa::error);
  auto ks_bad = dsa_test::fake_device_view<float, 1>({99});
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(be, q, w, k, ks_bad, r, scores),
                       doctest::Contains("dsa::lightning_indexer_scores: k_scale.extent(0) = 99; expected 100"),
                       dsa::error);
  auto r_bad = dsa_test::fake_device_view<std::int32_t, 2>({4, 3});
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(be, q, w, k, ks, r_bad, scores),
                       doctest::Contains("dsa::lightning_indexer_scores: ranges.extent(1) = 3; expected 2"), dsa::error);
  const dsa::device_view<float, 2> strided_scores(scores.data_handle(), {4, 100}, {200, 2});
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(be, q, w, k, ks, r, strided_scores),
                       doctest::Contains("dsa::lightning_indexer_scores: scores.stride(1) = 2; expected 1"), dsa::error);
  auto qf = dsa_test::fake_device_view<float, 3>({4, 8, 128});
  auto kf = dsa_test::fake_device_view<float, 2>({101, 128});
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores(be, qf, w, kf, ks, r, scores),
                       doctest::Contains("dsa::lightning_indexer_scores: k.extent(0) = 101; expected 100"), dsa::error);

  // Paged.
  auto cache = dsa_test::fake_device_view<std::uint8_t, 2>({256, 132});
  auto table = dsa_test::fake_device_view<std::int32_t, 2>({4, 2});
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores_paged(be, q, w, cache, table, 0, r, scores),
                       doctest::Contains("dsa::lightning_indexer_scores_paged: block_size = 0; expected >= 1"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores_paged(be, q, w, cache, table, 32, r, scores),
                       doctest::Contains("dsa::lightning_indexer_scores_paged: scores.extent(1) = 100; expected <= "
                                         "block_table.extent(1) * block_size = 2 * 32"),
                       dsa::error);
  auto cache_bad = dsa_test::fake_device_view<std::uint8_t, 2>({256, 128});
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores_paged(be, q, w, cache_bad, table, 64, r, scores),
                       doctest::Contains("dsa::lightning_indexer_scores_paged: cache.extent(1) = 128; expected 132"),
                       dsa::error);
  auto q64 = dsa_test::fake_device_view<fp8_e4m3, 3>({4, 8, 64});
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores_paged(be, q64, w, cache, table, 64, r, scores),
                       doctest::Contains("dsa::lightning_indexer_scores_paged: q.extent(2) = 64; expected 128"),
                       dsa::error);
  auto table_bad = dsa_test::fake_device_view<std::int32_t, 2>({3, 2});
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_scores_paged(be, q, w, cache, table_bad, 64, r, scores),
                       doctest::Contains("dsa::lightning_indexer_scores_paged: block_table.extent(0) = 3; expected 4"),
                       dsa::error);

  // Backward.
  auto g = dsa_test::fake_device_view<float, 2>({4, 100});
  auto kf100 = dsa_test::fake_device_view<float, 2>({100, 128});
  auto gq = dsa_test::fake_device_view<float, 3>({4, 8, 128});
  auto gw = dsa_test::fake_device_view<float, 2>({4, 8});
  auto gk = dsa_test::fake_device_view<float, 2>({100, 128});
  auto gq_bad = dsa_test::fake_device_view<float, 3>({4, 8, 127});
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_backward(be, qf, w, kf100, ks, r, g, gq_bad, gw, gk),
                       doctest::Contains("dsa::lightning_indexer_backward: grad_q.extent(2) = 127; expected 128"),
                       dsa::error);
  auto gk_bad = dsa_test::fake_device_view<float, 2>({99, 128});
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_backward(be, qf, w, kf100, ks, r, g, gq, gw, gk_bad),
                       doctest::Contains("dsa::lightning_indexer_backward: grad_k.extent(0) = 99; expected 100"),
                       dsa::error);
  auto g_bad = dsa_test::fake_device_view<float, 2>({5, 100});
  CHECK_THROWS_WITH_AS(dsa::lightning_indexer_backward(be, qf, w, kf100, ks, r, g_bad, gq, gw, gk),
                       doctest::Contains("dsa::lightning_indexer_backward: grad_scores.extent(0) = 5; expected 4"),
                       dsa::error);
  // An output aliasing an input is rejected.
  const dsa::device_view<float, 3> gq_alias(qf.data_handle(), {4, 8, 128});
  CHECK_THROWS_AS(dsa::lightning_indexer_backward(be, qf, w, kf100, ks, r, g, gq_alias, gw, gk), dsa::error);
}
