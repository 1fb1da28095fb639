// dsa::pack_fp8_weight and fp8_linear with a packed weight: the same bits as the weight it was
// packed from (which tests/ops/test_linear.cpp checks against the specification), the layout's
// slow-code flags, and the argument checks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "dsa/cpu/linear.hpp"
#include "dsa/cpu/packed_fp8_weight.hpp"
#include "dsa/ops/linear.hpp"
#include "support/random.hpp"

namespace {

using dsa::bf16;
using dsa::fp8_e4m3;
using dsa::index_t;

// Every zero, subnormal and NaN code; the subnormals with mantissa >= 4 alone (those the packed
// form re-encodes for the fast decode, cpu/packed_fp8_weight.hpp).
const std::vector<std::uint8_t> all_specials = {0x00, 0x80, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x81,
                                                0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x7F, 0xFF};
const std::vector<std::uint8_t> fast_subnormals = {0x04, 0x05, 0x06, 0x07, 0x84, 0x85, 0x86, 0x87};

// Weight codes like a checkpoint's: normal values of both signs (the fast decode), with codes
// drawn from `specials` at a rate of `special_rate`.
std::vector<std::uint8_t> weight_codes(std::size_t n, double special_rate, std::uint64_t seed,
                                       const std::vector<std::uint8_t>& specials = all_specials) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::uint8_t> c(n);
  for (auto& v : c) {
    if (u(rng) < special_rate) {
      v = specials[rng() % specials.size()];
    } else {
      do {
        v = static_cast<std::uint8_t>(rng());
      } while ((v & 0x78) == 0 || (v & 0x7F) == 0x7F);
    }
  }
  return c;
}

struct problem {
  index_t t, in, out;
  std::vector<float> x;
  std::vector<std::uint8_t> w;
  std::vector<float> ws;
  dsa::host_view<const fp8_e4m3, 2> wv() const {
    return dsa::make_view(reinterpret_cast<const fp8_e4m3*>(w.data()), {out, in});
  }
  dsa::host_view<const float, 2> sv() const { return dsa::make_view(ws.data(), {(out + 127) / 128, in / 128}); }
};

problem make_problem(index_t t, index_t in, index_t out, double special_rate, std::uint64_t seed,
                     const std::vector<std::uint8_t>& specials = all_specials) {
  problem p{t, in, out, dsa_test::normal(static_cast<std::size_t>(t * in), seed, 2.0f),
            weight_codes(static_cast<std::size_t>(out * in), special_rate, seed + 1, specials),
            dsa_test::uniform(static_cast<std::size_t>(((out + 127) / 128) * (in / 128)), seed + 2, 1e-5f, 2e-4f)};
  return p;
}

template <class O>
std::vector<O> run(const problem& p, const dsa::cpu_backend& be, const dsa::packed_fp8_weight* packed) {
  const std::vector<bf16> x = dsa_test::convert<bf16>(p.x);
  std::vector<O> y(static_cast<std::size_t>(p.t * p.out));
  const auto xv = dsa::make_view(x.data(), {p.t, p.in});
  const auto yv = dsa::make_view(y.data(), {p.t, p.out});
  if (packed != nullptr) {
    dsa::fp8_linear(be, xv, *packed, p.sv(), yv);
  } else {
    dsa::fp8_linear(be, xv, p.wv(), p.sv(), yv);
  }
  return y;
}

// Bit for bit, except that a NaN matches any NaN: which of two NaN operands an addition
// returns (and so the sign of a NaN output fed by NaN codes of both signs) is the compiler's
// choice of operand order, which can differ between two instantiations of the same kernel.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const float fa = static_cast<float>(a[i]), fb = static_cast<float>(b[i]);
    if (std::isnan(fa) && std::isnan(fb)) continue;
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return false;
  }
  return true;
}

dsa::cpu_backend backend(int threads, dsa::fp8_dot mode) {
  dsa::cpu_backend be{threads};
  be.fp8_block_dot = mode;
  return be;
}

}  // namespace

TEST_CASE("fp8_linear with a packed weight gives the bits of the weight it was packed from") {
  struct shape {
    index_t t, in, out;
  };
  // GEMV (t <= 4: every row count through the register path's whole runs, and a short last run;
  // 5 to 8 rows over whole runs: the AVX-512 fp32 path's half runs, and 9 to 32 rows its parts of
  // 4 to 8 rows, against the row-major GEMM) and GEMM rows; in with whole and partial runs of 4
  // blocks (1, 3, 4, 5, 8, 9, 12 blocks); out ragged against the group (16), the GEMV panel and
  // the GEMM panel (64).
  const shape shapes[] = {{1, 128, 1},    {1, 640, 16},   {2, 384, 17},   {2, 1024, 40},  {3, 1152, 65},
                          {4, 512, 130},  {1, 1152, 300}, {5, 640, 64},   {5, 1024, 40},  {6, 512, 33},
                          {7, 1536, 17},  {8, 1024, 130}, {9, 512, 40},   {16, 1024, 17}, {21, 512, 65},
                          {32, 1536, 33}, {37, 384, 129}, {70, 1152, 33}};
  std::uint64_t seed = 500;
  for (const auto& s : shapes) {
    // No slow codes (the fast decode throughout), a few (mixed), and many (every group slow);
    // then subnormals that pack to fast codes only (the fast decode on re-encoded codes).
    for (double rate : {0.0, 0.002, 0.2, -0.05}) {
      const problem p = rate < 0 ? make_problem(s.t, s.in, s.out, -rate, seed += 10, fast_subnormals)
                                 : make_problem(s.t, s.in, s.out, rate, seed += 10);
      const dsa::packed_fp8_weight packed = dsa::pack_fp8_weight(dsa::cpu_backend{2}, p.wv());
      CHECK(packed.out_features() == s.out);
      CHECK(packed.in_features() == s.in);
      for (auto mode : {dsa::fp8_dot::exact, dsa::fp8_dot::fp32}) {
        for (int threads : {1, 2}) {
          CAPTURE(s.t);
          CAPTURE(s.in);
          CAPTURE(s.out);
          CAPTURE(rate);
          CAPTURE(static_cast<int>(mode));
          CAPTURE(threads);
          const dsa::cpu_backend be = backend(threads, mode);
          // fp32 outputs only: a bf16 y is the same fp32 accumulators rounded by the store both
          // paths share (fp8_out_rows::store_panel).
          const std::vector<float> want = run<float>(p, be, nullptr);
          CHECK(same_bits(run<float>(p, be, &packed), want));
          if (rate > 0.1) {
            std::size_t nans = 0;
            for (float v : want) nans += std::isnan(v) ? 1 : 0;
            CHECK(nans > 0);  // the NaN codes reached the outputs (and matched bit for bit above)
          }
        }
      }
    }
  }
}

TEST_CASE("the packed form re-encodes exactly the exponent-0 codes, invertibly, and those with m >= 4 exactly") {
  for (int c = 0; c < 256; ++c) {
    CAPTURE(c);
    const auto code = static_cast<std::uint8_t>(c);
    const std::uint8_t p = dsa::cpu_detail::packed_e4m3_code(code);
    CHECK(dsa::cpu_detail::unpacked_e4m3_code(p) == code);
    CHECK((p == code) == ((c & 0x78) != 0));
    CHECK((p & 0x80) == (c & 0x80));
    if ((c & 0x78) == 0 && (c & 7) >= 4) {
      // The fast decode's formula, 2^(e - 7) (1 + m / 8) with e = 0, at the packed mantissa.
      const double fast = std::ldexp(1.0 + (p & 7) / 8.0, -7) * ((c & 0x80) != 0 ? -1.0 : 1.0);
      CHECK(fast == static_cast<double>(static_cast<float>(dsa::fp8_e4m3::from_bits(code))));
    }
  }
}

TEST_CASE("the slow-code test finds every zero, subnormal with mantissa < 4 and NaN code in any byte, and nothing else") {
  const std::uint64_t normal = 0x3838383838383838ull;  // eight codes of 1.0
  for (int c = 0; c < 256; ++c) {
    const bool slow = (c & 0x7C) == 0 || (c & 0x7F) == 0x7F;
    for (int byte = 0; byte < 8; ++byte) {
      const std::uint64_t v = (normal & ~(std::uint64_t{0xFF} << (8 * byte))) | (std::uint64_t(c) << (8 * byte));
      CAPTURE(c);
      CAPTURE(byte);
      CHECK(dsa::cpu_detail::e4m3_any_slow_code(v) == slow);
    }
  }
}

TEST_CASE("pack_fp8_weight flags exactly the quad ranges that hold a slow code") {
  const index_t out = 40, in = 640;  // 3 groups with AVX-512 (the last one padded), 5 blocks
  constexpr index_t G = dsa::packed_fp8_group_rows;
  std::vector<std::uint8_t> w = weight_codes(static_cast<std::size_t>(out * in), 0.0, 3);
  struct spot {
    index_t row, col;
    std::uint8_t code;
  };
  // A zero, a slow subnormal and a NaN, in the first and last quad ranges, in a whole and the
  // partial run; a subnormal the packing makes fast flags nothing.
  const spot spots[] = {{0, 0, 0x00}, {G + 3, 128 * 2 + 127, 0x83}, {out - 1, 128 * 4 + 40, 0xFF}};
  for (const auto& s : spots) w[static_cast<std::size_t>(s.row * in + s.col)] = s.code;
  w[static_cast<std::size_t>(2 * in + 128 * 3 + 70)] = 0x86;
  const auto wv = dsa::make_view(reinterpret_cast<const fp8_e4m3*>(w.data()), {out, in});
  const dsa::packed_fp8_weight p = dsa::pack_fp8_weight(dsa::cpu_backend{1}, wv);
  CHECK(p.group_rows() == G);
  const index_t groups = (out + 63) / 64 * 64 / G;
  for (index_t g = 0; g < groups; ++g) {
    for (index_t kb = 0; kb < in / 128; ++kb) {
      unsigned expect = 0;
      for (const auto& s : spots) {
        if (s.row / G == g && s.col / 128 == kb) expect |= 1u << (s.col % 128 / 32);
      }
      CAPTURE(g);
      CAPTURE(kb);
      CHECK(p.special(g, kb) == expect);
      // Every code where the layout says it is, in the packed encoding (padding rows hold 1.0).
      for (index_t j = 0; j < G; ++j) {
        for (index_t k = 0; k < 128; ++k) {
          const index_t r = g * G + j;
          const std::uint8_t want =
              r < out ? dsa::cpu_detail::packed_e4m3_code(w[static_cast<std::size_t>(r * in + kb * 128 + k)]) : 0x38;
          const std::uint8_t got = p.block_codes(g, kb)[(k / 4) * p.quad_stride(kb) + j * 4 + k % 4];
          if (got != want) {
            CAPTURE(j);
            CAPTURE(k);
            CHECK(got == want);
          }
        }
      }
    }
  }
  CHECK(p.bytes() >= static_cast<std::size_t>(out * in));
}

TEST_CASE("pack_fp8_weight and fp8_linear with a packed weight reject bad arguments with a clear message") {
  std::vector<fp8_e4m3> w(130 * 256);
  CHECK_THROWS_WITH_AS(dsa::pack_fp8_weight(dsa::cpu, dsa::make_view(w.data(), {130, 200})),
                       doctest::Contains("dsa::pack_fp8_weight: w.extent(1) = 200; expected a multiple of 128"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::pack_fp8_weight(dsa::cpu, dsa::host_view<const fp8_e4m3, 2>(w.data(), {65, 128}, {256, 2})),
                       doctest::Contains("dsa::pack_fp8_weight: w.stride(1) = 2"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::pack_fp8_weight(dsa::cpu, dsa::host_view<const fp8_e4m3, 2>(nullptr, {130, 256})),
                       doctest::Contains("dsa::pack_fp8_weight: w.data = null"), dsa::error);
  const dsa::packed_fp8_weight packed = dsa::pack_fp8_weight(dsa::cpu, dsa::make_view(w.data(), {130, 256}));
  std::vector<bf16> x(4 * 256);
  std::vector<float> s(2 * 2), y(4 * 130);
  const auto xv = dsa::make_view(x.data(), {4, 256});
  const auto sv = dsa::make_view(s.data(), {2, 2});
  const auto yv = dsa::make_view(y.data(), {4, 130});
  CHECK_NOTHROW(dsa::fp8_linear(dsa::cpu, xv, packed, sv, yv));
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(dsa::cpu, dsa::make_view(x.data(), {2, 384}), packed, dsa::make_view(s.data(), {2, 3}),
                                       dsa::make_view(y.data(), {2, 130})),
                       doctest::Contains("dsa::fp8_linear: w.in_features() = 256; expected x.extent(1)"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(dsa::cpu, xv, packed, dsa::make_view(s.data(), {1, 2}), yv),
                       doctest::Contains("dsa::fp8_linear: w_scale.extent(0) = 1; expected 2"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(dsa::cpu, xv, packed, sv, dsa::make_view(y.data(), {4, 129})),
                       doctest::Contains("dsa::fp8_linear: y.extent(1) = 129; expected 130"), dsa::error);
  std::vector<float> xf(4 * 256);
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(dsa::cpu, dsa::make_view(xf.data(), {4, 256}), packed, sv,
                                       dsa::make_view(xf.data() + 8, {4, 130})),
                       doctest::Contains("dsa::fp8_linear: y = a view overlapping x"), dsa::error);
  // A default-constructed (empty) weight: out = in = 0.
  const dsa::packed_fp8_weight none;
  CHECK(none.empty());
  CHECK_THROWS_WITH_AS(dsa::fp8_linear(dsa::cpu, xv, none, dsa::make_view(s.data(), {0, 2}), dsa::make_view(y.data(), {4, 0})),
                       doctest::Contains("dsa::fp8_linear: w.in_features() = 0"), dsa::error);
}

TEST_CASE("pack_fp8_weight takes strided rows: the same packing as of the contiguous rows") {
  const index_t out = 20, in = 256, ld = 300;
  const std::vector<std::uint8_t> w = weight_codes(static_cast<std::size_t>(out * ld), 0.01, 9);
  std::vector<std::uint8_t> dense(static_cast<std::size_t>(out * in));
  for (index_t r = 0; r < out; ++r) std::memcpy(dense.data() + r * in, w.data() + r * ld, static_cast<std::size_t>(in));
  const auto* wc = reinterpret_cast<const fp8_e4m3*>(w.data());
  const dsa::packed_fp8_weight a = dsa::pack_fp8_weight(dsa::cpu, dsa::host_view<const fp8_e4m3, 2>(wc, {out, in}, {ld, 1}));
  const dsa::packed_fp8_weight b =
      dsa::pack_fp8_weight(dsa::cpu, dsa::make_view(reinterpret_cast<const fp8_e4m3*>(dense.data()), {out, in}));
  REQUIRE(a.bytes() == b.bytes());
  const index_t groups = 64 / dsa::packed_fp8_group_rows;
  for (index_t g = 0; g < groups; ++g) {
    for (index_t kb = 0; kb < in / 128; ++kb) {
      CHECK(a.special(g, kb) == b.special(g, kb));
      for (index_t q = 0; q < 32; ++q) {
        const std::size_t quad_bytes = 4 * static_cast<std::size_t>(dsa::packed_fp8_group_rows);
        CHECK(std::memcmp(a.block_codes(g, kb) + q * a.quad_stride(kb), b.block_codes(g, kb) + q * b.quad_stride(kb), quad_bytes) == 0);
      }
    }
  }
}

TEST_CASE("fp8_linear with a packed weight handles empty shapes as with the original") {
  std::vector<bf16> x0(1);
  std::vector<float> y0(3 * 5, 1.0f);
  std::vector<fp8_e4m3> w0(1);
  std::vector<float> s0(1);
  // in = 0: every output is +0.
  const dsa::packed_fp8_weight p0 = dsa::pack_fp8_weight(dsa::cpu, dsa::make_view(w0.data(), {5, 0}));
  dsa::fp8_linear(dsa::cpu, dsa::make_view(x0.data(), {3, 0}), p0, dsa::make_view(s0.data(), {1, 0}),
                  dsa::make_view(y0.data(), {3, 5}));
  for (float v : y0) CHECK((v == 0.0f && !std::signbit(v)));
  // out = 0: an empty weight, nothing written.
  const dsa::packed_fp8_weight p1 = dsa::pack_fp8_weight(dsa::cpu, dsa::make_view(w0.data(), {0, 128}));
  CHECK(p1.empty());
  std::vector<bf16> x1(2 * 128);
  dsa::fp8_linear(dsa::cpu, dsa::make_view(x1.data(), {2, 128}), p1, dsa::make_view(s0.data(), {0, 1}),
                  dsa::make_view(y0.data(), {2, 0}));
}
