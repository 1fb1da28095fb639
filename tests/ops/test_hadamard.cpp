// dsa::hadamard_transform: front-end checks and CPU results against an O(n^2) double oracle.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "dsa/cpu/hadamard.hpp"
#include "dsa/ops/hadamard.hpp"
#include "support/hadamard_reference.hpp"
#include "support/random.hpp"

namespace {

using dsa::bf16;
using dsa::index_t;

// Every supported size up to `limit`, in increasing order.
std::vector<index_t> supported_sizes(index_t limit) {
  std::vector<index_t> v;
  for (index_t n = 1; n <= limit; ++n) {
    if (dsa::is_hadamard_size(n)) v.push_back(n);
  }
  return v;
}

// Bound on the fp32 error of one output: each of the log2(p) butterfly levels and c - 1 mixing
// additions rounds a partial sum bounded by sum|x|, plus the final product by the scale.
double error_bound(index_t n, const float* x, double scale) {
  int c = 0;
  std::int64_t p = 0;
  dsa_test::hadamard_split(n, c, p);
  double l1 = 0.0;
  for (index_t i = 0; i < n; ++i) l1 += std::fabs(static_cast<double>(x[i]));
  const double levels = std::log2(static_cast<double>(p)) + c + 1;
  return levels * std::ldexp(1.0, -24) * l1 * std::fabs(scale) + 1e-30;
}

template <class T>
std::vector<std::uint16_t> bits16(const std::vector<T>& v) {
  std::vector<std::uint16_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(T));
  return b;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("is_hadamard_size accepts 2^m <= 32768 and 12, 20, 28, 40 times such a power of two") {
  static_assert(dsa::is_hadamard_size(1) && dsa::is_hadamard_size(128) && dsa::is_hadamard_size(32768));
  static_assert(!dsa::is_hadamard_size(0) && !dsa::is_hadamard_size(-4) && !dsa::is_hadamard_size(65536));
  CHECK(dsa::is_hadamard_size(12));
  CHECK(dsa::is_hadamard_size(20));
  CHECK(dsa::is_hadamard_size(28));
  CHECK(dsa::is_hadamard_size(40));
  CHECK(dsa::is_hadamard_size(12 * 32768));
  CHECK(dsa::is_hadamard_size(40 * 32768));
  CHECK(dsa::is_hadamard_size(20 * 32768));  // = 40 * 16384
  CHECK_FALSE(dsa::is_hadamard_size(12 * 65536));
  CHECK_FALSE(dsa::is_hadamard_size(28 * 65536));
  CHECK_FALSE(dsa::is_hadamard_size(40 * 65536));
  for (index_t bad : {3, 5, 6, 7, 10, 14, 36, 44, 56 * 3, 100, 4095, 60}) {
    CAPTURE(bad);
    CHECK_FALSE(dsa::is_hadamard_size(bad));
  }
  // The split: 40 wins over 20 where both apply, as in QuaRot.
  CHECK(dsa::hadamard_factorize(40).base == 40);
  CHECK(dsa::hadamard_factorize(20).base == 20);
  CHECK(dsa::hadamard_factorize(80).base == 40);
  CHECK(dsa::hadamard_factorize(80).pow2 == 2);
  CHECK(dsa::hadamard_factorize(12 * 4).base == 12);
  CHECK(dsa::hadamard_factorize(28 * 1024).pow2 == 1024);
  CHECK(dsa::hadamard_factorize(4096).base == 1);
}

TEST_CASE("the base matrices are the fast-hadamard-transform ones and are Hadamard") {
  for (int c : {12, 20, 28, 40}) {
    CAPTURE(c);
    const dsa::hadamard_plan plan = dsa::make_hadamard_plan(c);
    REQUIRE(plan.base == c);
    for (int i = 0; i < c; ++i) {
      for (int j = 0; j < c; ++j) {
        const int e = ((plan.negative[i] >> j) & 1u) ? -1 : 1;
        CHECK(e == dsa_test::hadamard_base_sign(c, i, j));
        CHECK(dsa::hadamard_base_entry(c, i, j) == e);
      }
    }
    for (int i = 0; i < c; ++i) {
      for (int k = 0; k < c; ++k) {
        int dot = 0;
        for (int j = 0; j < c; ++j) dot += dsa::hadamard_base_entry(c, i, j) * dsa::hadamard_base_entry(c, k, j);
        CHECK(dot == (i == k ? c : 0));
      }
    }
  }
  CHECK(dsa::hadamard_base_entry(20, 20, 0) == 0);
  CHECK(dsa::hadamard_base_entry(7, 0, 0) == 0);
}

TEST_CASE("transforming the identity gives H_n, and H_n * H_n^T = n I") {
  for (index_t n : {1, 2, 4, 8, 16, 64, 12, 20, 28, 40, 24, 48, 56, 80, 160}) {
    CAPTURE(n);
    std::vector<float> eye(static_cast<std::size_t>(n * n), 0.0f);
    for (index_t i = 0; i < n; ++i) eye[static_cast<std::size_t>(i * n + i)] = 1.0f;
    std::vector<float> h(eye.size());
    dsa::hadamard_transform(dsa::cpu, dsa::make_view(eye.data(), {n, n}), dsa::make_view(h.data(), {n, n}), 1.0f);
    for (index_t i = 0; i < n; ++i) {
      for (index_t j = 0; j < n; ++j) {
        REQUIRE(h[static_cast<std::size_t>(i * n + j)] == static_cast<float>(dsa_test::hadamard_entry(n, i, j)));
      }
    }
    for (index_t i = 0; i < n; ++i) {
      for (index_t k = 0; k < n; ++k) {
        double dot = 0.0;
        for (index_t j = 0; j < n; ++j) dot += h[static_cast<std::size_t>(i * n + j)] * h[static_cast<std::size_t>(k * n + j)];
        REQUIRE(dot == (i == k ? static_cast<double>(n) : 0.0));
      }
    }
    if (std::has_single_bit(static_cast<std::uint64_t>(n))) {
      // Sylvester matrices are symmetric: H * H = n I as well.
      for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < n; ++j)
          REQUIRE(h[static_cast<std::size_t>(i * n + j)] == h[static_cast<std::size_t>(j * n + i)]);
    }
  }
}

TEST_CASE("a symmetric transform applied twice is n x (scale 1) and x (scale 1/n)") {
  // Small integers: every sum is exact, so the double transform is exactly n x.
  for (index_t n : {1, 2, 32, 128, 1024, 4096, 12, 48, 768}) {
    CAPTURE(n);
    const index_t rows = 5;
    std::vector<float> x(static_cast<std::size_t>(rows * n));
    const auto u = dsa_test::uniform(x.size(), 11 + static_cast<std::uint64_t>(n), -8.0f, 8.0f);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::round(u[i]);
    std::vector<float> y(x.size()), z(x.size());
    auto xv = dsa::make_view(x.data(), {rows, n});
    auto yv = dsa::make_view(y.data(), {rows, n});
    auto zv = dsa::make_view(z.data(), {rows, n});
    dsa::hadamard_transform(dsa::cpu, xv, yv, 1.0f);
    dsa::hadamard_transform(dsa::cpu, yv, zv, 1.0f);
    for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(z[i] == x[i] * static_cast<float>(n));

    const auto r = dsa_test::normal(x.size(), 12 + static_cast<std::uint64_t>(n));
    dsa::hadamard_transform(dsa::cpu, dsa::make_view(r.data(), {rows, n}), yv, 1.0f);
    dsa::hadamard_transform(dsa::cpu, yv, zv, 1.0f / static_cast<float>(n));
    for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(z[i] == doctest::Approx(r[i]).epsilon(1e-5).scale(1.0));
  }
}

TEST_CASE("float transform matches the O(n^2) double oracle for every supported size up to 4096") {
  for (index_t n : supported_sizes(4096)) {
    CAPTURE(n);
    const index_t rows = n <= 256 ? 11 : 2;  // 11 = one 8-row block plus 3 single rows
    const float scale = 1.0f / std::sqrt(static_cast<float>(n));
    const auto x = dsa_test::normal(static_cast<std::size_t>(rows * n), 100 + static_cast<std::uint64_t>(n));
    std::vector<float> y(x.size());
    dsa::hadamard_transform(dsa::cpu, dsa::make_view(x.data(), {rows, n}), dsa::make_view(y.data(), {rows, n}), scale);
    const std::vector<double> xd(x.begin(), x.end());
    const auto ref = dsa_test::hadamard_reference(xd, rows, n, scale);
    for (index_t r = 0; r < rows; ++r) {
      const double tol = error_bound(n, x.data() + r * n, scale);
      for (index_t j = 0; j < n; ++j) {
        const auto k = static_cast<std::size_t>(r * n + j);
        REQUIRE(std::fabs(y[k] - ref[k]) <= tol);
      }
    }
  }
}

TEST_CASE("large sizes match the oracle on sampled columns") {
  for (index_t n : {index_t{8192}, index_t{32768}, index_t{28 * 2048}, index_t{12 * 32768}, index_t{40 * 32768}}) {
    CAPTURE(n);
    const auto x = dsa_test::uniform(static_cast<std::size_t>(n), 200 + static_cast<std::uint64_t>(n));
    std::vector<float> y(x.size());
    dsa::hadamard_transform(dsa::cpu, dsa::make_view(x.data(), {1, n}), dsa::make_view(y.data(), {1, n}), 0.5f);
    const std::vector<double> xd(x.begin(), x.end());
    const double tol = error_bound(n, x.data(), 0.5);
    for (index_t j = 0; j < n; j += n / 16 + 7) {
      CAPTURE(j);
      REQUIRE(std::fabs(y[static_cast<std::size_t>(j)] - 0.5 * dsa_test::hadamard_reference_column(xd, n, j)) <= tol);
    }
    CHECK(std::fabs(y[static_cast<std::size_t>(n - 1)] - 0.5 * dsa_test::hadamard_reference_column(xd, n, n - 1)) <= tol);
  }
}

TEST_CASE("the CPU paths reproduce the shared numerics bit for bit") {
  for (index_t n : {8, 128, 40, 1024, 20 * 64, 2048, 12 * 256}) {
    CAPTURE(n);
    const index_t rows = 19;
    const float scale = 0.0883883476f;
    const auto x = dsa_test::normal(static_cast<std::size_t>(rows * n), 300 + static_cast<std::uint64_t>(n), 3.0f);
    std::vector<float> y(x.size());
    dsa::hadamard_transform(dsa::cpu_backend{1}, dsa::make_view(x.data(), {rows, n}), dsa::make_view(y.data(), {rows, n}),
                            scale);
    const dsa::hadamard_plan plan = dsa::make_hadamard_plan(n);
    std::vector<float> row(static_cast<std::size_t>(n));
    for (index_t r = 0; r < rows; ++r) {
      std::memcpy(row.data(), x.data() + r * n, static_cast<std::size_t>(n) * sizeof(float));
      dsa::hadamard_apply(plan, row.data());
      for (index_t j = 0; j < n; ++j) {
        const float expect = row[static_cast<std::size_t>(j)] * scale;
        REQUIRE(std::bit_cast<std::uint32_t>(y[static_cast<std::size_t>(r * n + j)]) == std::bit_cast<std::uint32_t>(expect));
      }
    }
  }
}

TEST_CASE("every power of two 16..32768 (the AVX-512 register path) reproduces the shared numerics") {
  // Strides below 16 permute lanes of one register and use an FMA by +-1; longer rows go through
  // radix-8/4/2 passes. Special values check that each output sees exactly the scalar adds and
  // subtracts: signed zeros, infinities (inf - inf = NaN), overflow to inf, subnormals.
  const float inf = std::numeric_limits<float>::infinity();
  for (index_t n = 16; n <= 32768; n *= 2) {
    CAPTURE(n);
    const index_t rows = n >= 8192 ? 3 : 5;
    auto x = dsa_test::normal(static_cast<std::size_t>(rows * n), 900 + static_cast<std::uint64_t>(n), 2.0f);
    // Row 1: signed zeros and subnormals; row 2: a few infinities and huge values.
    for (index_t j = 0; j < n; ++j) {
      float& v = x[static_cast<std::size_t>(n + j)];
      v = (j % 3 == 0) ? -0.0f : (j % 3 == 1) ? 0.0f : std::ldexp(v, -140);
      float& w = x[static_cast<std::size_t>(2 * n + j)];
      if (j % 97 == 5) w = (j % 2) ? inf : -inf;
      if (j % 89 == 7) w = 3e38f;
    }
    for (float scale : {1.0f, 1.0f / std::sqrt(static_cast<float>(n))}) {
      CAPTURE(scale);
      std::vector<float> y(x.size());
      dsa::hadamard_transform(dsa::cpu_backend{1}, dsa::make_view(x.data(), {rows, n}), dsa::make_view(y.data(), {rows, n}),
                              scale);
      const auto xb = dsa_test::convert<bf16>(x);
      std::vector<bf16> yb(xb.size());
      dsa::hadamard_transform(dsa::cpu_backend{1}, dsa::make_view(xb.data(), {rows, n}), dsa::make_view(yb.data(), {rows, n}),
                              scale);
      const dsa::hadamard_plan plan = dsa::make_hadamard_plan(n);
      std::vector<float> row(static_cast<std::size_t>(n)), rowb(static_cast<std::size_t>(n));
      for (index_t r = 0; r < rows; ++r) {
        for (index_t j = 0; j < n; ++j) {
          row[static_cast<std::size_t>(j)] = x[static_cast<std::size_t>(r * n + j)];
          rowb[static_cast<std::size_t>(j)] = xb[static_cast<std::size_t>(r * n + j)].to_float();
        }
        dsa::hadamard_apply(plan, row.data());
        dsa::hadamard_apply(plan, rowb.data());
        for (index_t j = 0; j < n; ++j) {
          const float want = row[static_cast<std::size_t>(j)] * scale;
          const float got = y[static_cast<std::size_t>(r * n + j)];
          const bf16 want_b(rowb[static_cast<std::size_t>(j)] * scale);
          const bf16 got_b = yb[static_cast<std::size_t>(r * n + j)];
          if (std::isnan(want)) {
            // Which NaN an operation on two NaNs returns is up to the compiler's operand order.
            REQUIRE(std::isnan(got));
          } else {
            REQUIRE(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want));
          }
          if (std::isnan(want_b.to_float())) {
            REQUIRE(std::isnan(got_b.to_float()));
          } else {
            REQUIRE(got_b.bits == want_b.bits);
          }
        }
      }
    }
  }
}

TEST_CASE("rows holding a NaN give the same bits in place and out of place") {
  // Such rows leave the vector path (which may already have used an fp32 output row as its
  // scratch) for the scalar loops. Every output of such a row is NaN, so what can differ is
  // only which input NaN's payload each output carries: in place and out of place must agree.
  for (index_t n : {128, 256, 4096}) {
    CAPTURE(n);
    const index_t rows = 4;
    auto x = dsa_test::normal(static_cast<std::size_t>(rows * n), 1200 + static_cast<std::uint64_t>(n));
    // Two NaNs with different payloads in one 128-block (which of them reaches an output depends
    // on the order of the operations), and one in the last block of another row.
    x[static_cast<std::size_t>(n + 3)] = std::bit_cast<float>(0x7FC00001u);
    x[static_cast<std::size_t>(n + 70)] = std::bit_cast<float>(0xFFC12345u);
    x[static_cast<std::size_t>(3 * n + n - 5)] = -std::numeric_limits<float>::quiet_NaN();
    std::vector<float> y(x.size());
    dsa::hadamard_transform(dsa::cpu_backend{1}, dsa::make_view(x.data(), {rows, n}), dsa::make_view(y.data(), {rows, n}), 0.5f);
    std::vector<float> inplace = x;
    auto v = dsa::make_view(inplace.data(), {rows, n});
    dsa::hadamard_transform(dsa::cpu_backend{1}, v, v, 0.5f);
    CHECK(same_bits(inplace, y));
    for (index_t j = 0; j < n; ++j) CHECK(std::isnan(y[static_cast<std::size_t>(n + j)]));  // a NaN reaches every output
  }
}

TEST_CASE("bf16 output is the fp32 result rounded once") {
  for (index_t n : {128, 64, 2048, 28 * 4}) {
    CAPTURE(n);
    const index_t rows = 21;
    const float scale = 1.0f / std::sqrt(static_cast<float>(n));
    const auto xb = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(rows * n), 400 + static_cast<std::uint64_t>(n)));
    const auto xf = dsa_test::to_floats(xb);
    std::vector<bf16> yb(xb.size());
    std::vector<float> yf(xb.size());
    dsa::hadamard_transform(dsa::cpu, dsa::make_view(xb.data(), {rows, n}), dsa::make_view(yb.data(), {rows, n}), scale);
    dsa::hadamard_transform(dsa::cpu, dsa::make_view(xf.data(), {rows, n}), dsa::make_view(yf.data(), {rows, n}), scale);
    const std::vector<double> xd(xf.begin(), xf.end());
    const auto ref = dsa_test::hadamard_reference(xd, rows, n, scale);
    for (std::size_t i = 0; i < yb.size(); ++i) {
      REQUIRE(yb[i].bits == bf16(yf[i]).bits);
      // Within half a bf16 ulp of the exact value, plus the fp32 error.
      const double half_ulp = std::ldexp(1.0, std::ilogb(ref[i] == 0.0 ? 1e-30 : ref[i]) - 8);
      REQUIRE(std::fabs(yb[i].to_float() - ref[i]) <= half_ulp + 1e-5);
    }
  }
}

TEST_CASE("bf16 narrowing rounds every kind of fp32 value like bf16(float)") {
  // x = e_0 + 0.5 e_16 makes every output 1.5 or 0.5 (exact), in alternating blocks of 16, so
  // with scale t the outputs are bf16(1.5 t) and bf16(0.5 t): the narrowing sees chosen fp32
  // values, with 16-lane registers of either value side by side. The values: every low half that
  // decides a rounding (ties to even either way, just below and above a tie) under high halves
  // spanning subnormals, normals and the largest finite values (which round to infinity), so the
  // AVX-512 path's one-instruction conversion and its subnormal fallback both meet them.
  const std::uint32_t lows[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
  std::vector<std::uint32_t> highs = {0x0000, 0x0001, 0x0002, 0x003F, 0x007F, 0x0080, 0x0081, 0x3F80, 0x3F81, 0x7F00, 0x7F7F};
  std::uint32_t lcg = 12345;
  for (int i = 0; i < 64; ++i) {
    lcg = lcg * 1664525u + 1013904223u;
    highs.push_back(lcg >> 16);
  }
  for (index_t n : {32, 256, 4096}) {
    CAPTURE(n);
    std::vector<bf16> x(static_cast<std::size_t>(n), bf16(0.0f));
    x[0] = bf16(1.0f);
    x[16] = bf16(0.5f);
    std::vector<float> pattern(static_cast<std::size_t>(n), 0.0f);
    pattern[0] = 1.0f;
    pattern[16] = 0.5f;
    dsa::hadamard_apply(dsa::make_hadamard_plan(n), pattern.data());
    std::vector<bf16> y(x.size());
    for (std::uint32_t high : highs) {
      for (std::uint32_t sign : {0u, 0x80000000u}) {
        for (std::uint32_t low : lows) {
          const std::uint32_t bits = sign | ((high & 0x7FFFu) << 16) | low;
          if (((bits >> 23) & 0xFFu) == 0xFFu) continue;  // scale must be finite
          const float t = std::bit_cast<float>(bits);
          CAPTURE(bits);
          dsa::hadamard_transform(dsa::cpu_backend{1}, dsa::make_view(x.data(), {1, n}), dsa::make_view(y.data(), {1, n}), t);
          for (index_t j = 0; j < n; ++j) REQUIRE(y[static_cast<std::size_t>(j)].bits == bf16(pattern[static_cast<std::size_t>(j)] * t).bits);
        }
      }
    }
  }
}

TEST_CASE("in place equals out of place, and strided rows equal contiguous ones") {
  for (index_t n : {128, 4096, 12 * 16}) {
    CAPTURE(n);
    const index_t rows = 13;
    const auto x = dsa_test::normal(static_cast<std::size_t>(rows * n), 500 + static_cast<std::uint64_t>(n));
    std::vector<float> out(x.size());
    dsa::hadamard_transform(dsa::cpu, dsa::make_view(x.data(), {rows, n}), dsa::make_view(out.data(), {rows, n}), 0.25f);

    std::vector<float> inplace = x;
    auto v = dsa::make_view(inplace.data(), {rows, n});
    dsa::hadamard_transform(dsa::cpu, v, v, 0.25f);
    CHECK(same_bits(inplace, out));

    // Rows padded to a stride of n + 5 in both input and output.
    const index_t ld = n + 5;
    std::vector<float> xs(static_cast<std::size_t>(rows * ld), -7.0f), ys(static_cast<std::size_t>(rows * ld), 42.0f);
    for (index_t r = 0; r < rows; ++r)
      std::memcpy(xs.data() + r * ld, x.data() + r * n, static_cast<std::size_t>(n) * sizeof(float));
    dsa::tensor_view<float, 2> xsv(xs.data(), {rows, n}, {ld, 1});
    dsa::tensor_view<float, 2> ysv(ys.data(), {rows, n}, {ld, 1});
    dsa::hadamard_transform(dsa::cpu, xsv, ysv, 0.25f);
    for (index_t r = 0; r < rows; ++r) {
      for (index_t j = 0; j < n; ++j) REQUIRE(ys[static_cast<std::size_t>(r * ld + j)] == out[static_cast<std::size_t>(r * n + j)]);
      for (index_t j = n; j < ld; ++j) REQUIRE(ys[static_cast<std::size_t>(r * ld + j)] == 42.0f);  // padding untouched
    }
    // Strided and in place.
    dsa::hadamard_transform(dsa::cpu, xsv, xsv, 0.25f);
    for (index_t r = 0; r < rows; ++r)
      for (index_t j = 0; j < n; ++j) REQUIRE(xs[static_cast<std::size_t>(r * ld + j)] == out[static_cast<std::size_t>(r * n + j)]);
  }
}

TEST_CASE("streaming stores give the bits of cached stores, on aligned and unaligned rows") {
  // Row stride n + 8 bf16 (16 bytes more per row) from a 64-byte-aligned start: rows 0, 4 and 8
  // can stream, the others take cached stores. Row 4 is tiny enough for subnormal outputs (the
  // integer narrowing), row 8 holds a NaN (the scalar loops), row 5 an infinity.
  const dsa::cpu_backend stream_everything{1, 1}, stream_on_two_threads{2, 1};
  const dsa::cpu_backend never{1, std::numeric_limits<std::size_t>::max()};
  for (index_t n = 256; n <= 32768; n *= 2) {
    CAPTURE(n);
    const index_t rows = 9, ld = n + 8;
    auto values = dsa_test::normal(static_cast<std::size_t>(rows * ld), 1300 + static_cast<std::uint64_t>(n));
    for (index_t j = 0; j < ld; ++j) values[static_cast<std::size_t>(4 * ld + j)] *= 1e-38f;
    values[static_cast<std::size_t>(5 * ld + 3)] = std::numeric_limits<float>::infinity();
    values[static_cast<std::size_t>(8 * ld + n / 2)] = std::numeric_limits<float>::quiet_NaN();
    const auto x = dsa_test::convert<bf16>(values);

    // Buffers of rows * ld + 32 bf16, used from their first 64-byte boundary.
    const auto aligned = [&](std::vector<bf16>& buffer) {
      buffer.assign(static_cast<std::size_t>(rows * ld + 32), bf16(-3.0f));
      void* p = buffer.data();
      std::size_t space = buffer.size() * sizeof(bf16);
      return static_cast<bf16*>(std::align(64, static_cast<std::size_t>(rows * ld) * sizeof(bf16), p, space));
    };
    std::vector<bf16> want_buffer, got_buffer;
    bf16* want = aligned(want_buffer);
    bf16* got = aligned(got_buffer);
    REQUIRE(dsa::cpu_detail::streaming_aligned(got));
    REQUIRE(dsa::cpu_detail::streaming_aligned(got + 4 * ld));
    REQUIRE_FALSE(dsa::cpu_detail::streaming_aligned(got + ld));
    REQUIRE(dsa::cpu_detail::streaming_stores(stream_everything, 1));
    REQUIRE_FALSE(dsa::cpu_detail::streaming_stores(never, std::size_t{1} << 40));

    const dsa::tensor_view<const bf16, 2> xv(x.data(), {rows, n}, {ld, 1});
    const dsa::tensor_view<bf16, 2> want_view(want, {rows, n}, {ld, 1}), got_view(got, {rows, n}, {ld, 1});
    dsa::hadamard_transform(never, xv, want_view, 0.0625f);
    const auto same_rows = [&] {
      return std::memcmp(want, got, static_cast<std::size_t>(rows * ld) * sizeof(bf16)) == 0;  // padding too
    };
    dsa::hadamard_transform(stream_everything, xv, got_view, 0.0625f);
    CHECK(same_rows());
    std::fill(got_buffer.begin(), got_buffer.end(), bf16(-3.0f));
    dsa::hadamard_transform(stream_on_two_threads, xv, got_view, 0.0625f);
    CHECK(same_rows());

    // In place: the input rows are read before the streamed ones are written.
    for (index_t r = 0; r < rows; ++r) std::memcpy(got + r * ld, x.data() + r * ld, static_cast<std::size_t>(n) * sizeof(bf16));
    dsa::hadamard_transform(stream_everything, got_view, got_view, 0.0625f);
    for (index_t r = 0; r < rows; ++r) {
      CAPTURE(r);
      CHECK(std::memcmp(want + r * ld, got + r * ld, static_cast<std::size_t>(n) * sizeof(bf16)) == 0);
    }
  }
}

TEST_CASE("results are bit-identical for every thread count") {
  for (index_t n : {128, 40, 8192}) {
    CAPTURE(n);
    const index_t rows = n >= 8192 ? 9 : 1000;
    const auto x = dsa_test::convert<bf16>(dsa_test::normal(static_cast<std::size_t>(rows * n), 600 + static_cast<std::uint64_t>(n)));
    std::vector<bf16> y1(x.size()), y2(x.size()), y3(x.size());
    auto xv = dsa::make_view(x.data(), {rows, n});
    dsa::hadamard_transform(dsa::cpu_backend{1}, xv, dsa::make_view(y1.data(), {rows, n}), 0.125f);
    dsa::hadamard_transform(dsa::cpu_backend{2}, xv, dsa::make_view(y2.data(), {rows, n}), 0.125f);
    dsa::hadamard_transform(dsa::cpu_backend{3}, xv, dsa::make_view(y3.data(), {rows, n}), 0.125f);
    CHECK(bits16(y1) == bits16(y2));
    CHECK(bits16(y1) == bits16(y3));
  }
}

TEST_CASE("empty batches are a no-op") {
  std::vector<float> y(4, 1.0f);
  dsa::hadamard_transform(dsa::cpu, dsa::make_view(y.data(), {0, 128}), dsa::make_view(y.data(), {0, 128}), 1.0f);
  CHECK(y[0] == 1.0f);
}

TEST_CASE("bad arguments are rejected with a clear dsa::error") {
  std::vector<float> a(4096, 1.0f), b(4096, 1.0f);
  using V = dsa::tensor_view<float, 2>;
  auto run = [](V x, V y) { dsa::hadamard_transform(dsa::cpu, x, y, 1.0f); };

  CHECK_THROWS_WITH_AS(run(dsa::make_view(a.data(), {4, 100}), dsa::make_view(b.data(), {4, 100})),
                       doctest::Contains("dsa::hadamard_transform: x.extent(1) = 100; expected a power of two <= 32768, "
                                         "or 12, 20, 28 or 40 times one"),
                       dsa::error);
  CHECK_THROWS_WITH_AS(run(dsa::make_view(a.data(), {4, 0}), dsa::make_view(b.data(), {4, 0})),
                       doctest::Contains("x.extent(1) = 0"), dsa::error);
  CHECK_THROWS_WITH_AS(run(dsa::make_view(a.data(), {1, 36}), dsa::make_view(b.data(), {1, 36})),
                       doctest::Contains("x.extent(1) = 36"), dsa::error);
  CHECK_THROWS_WITH_AS(run(dsa::make_view(a.data(), {4, 64}), dsa::make_view(b.data(), {5, 64})),
                       doctest::Contains("dsa::hadamard_transform: y.extent(0) = 5; expected 4"), dsa::error);
  CHECK_THROWS_WITH_AS(run(dsa::make_view(a.data(), {4, 64}), dsa::make_view(b.data(), {4, 32})),
                       doctest::Contains("dsa::hadamard_transform: y.extent(1) = 32; expected 64"), dsa::error);
  CHECK_THROWS_WITH_AS(run(V(a.data(), {4, 64}, {128, 2}), dsa::make_view(b.data(), {4, 64})),
                       doctest::Contains("dsa::hadamard_transform: x.stride(1) = 2; expected 1"), dsa::error);
  CHECK_THROWS_WITH_AS(run(dsa::make_view(a.data(), {4, 64}), V(b.data(), {4, 64}, {64, 3})),
                       doctest::Contains("dsa::hadamard_transform: y.stride(1) = 3"), dsa::error);
  CHECK_THROWS_WITH_AS(run(V(nullptr, {4, 64}, {64, 1}), dsa::make_view(b.data(), {4, 64})),
                       doctest::Contains("dsa::hadamard_transform: x.data = null"), dsa::error);
  CHECK_THROWS_WITH_AS(run(dsa::make_view(a.data(), {4, 64}), V(nullptr, {4, 64}, {64, 1})),
                       doctest::Contains("dsa::hadamard_transform: y.data = null"), dsa::error);
  // Output rows that alias each other (a broadcast output) would race.
  CHECK_THROWS_WITH_AS(run(dsa::make_view(a.data(), {4, 64}), V(b.data(), {4, 64}, {0, 1})),
                       doctest::Contains("dsa::hadamard_transform: y.stride(0) = 0"), dsa::error);
  // Partial overlap: y shifted by one element, or the same start with another row stride.
  CHECK_THROWS_WITH_AS(run(dsa::make_view(a.data(), {4, 64}), dsa::make_view(a.data() + 1, {4, 64})),
                       doctest::Contains("dsa::hadamard_transform: y = a view overlapping x"), dsa::error);
  CHECK_THROWS_WITH_AS(run(V(a.data(), {4, 64}, {64, 1}), V(a.data(), {4, 64}, {128, 1})),
                       doctest::Contains("overlapping x"), dsa::error);
  // Disjoint halves of one buffer are fine.
  CHECK_NOTHROW(run(dsa::make_view(a.data(), {4, 64}), dsa::make_view(a.data() + 256, {4, 64})));
}

TEST_CASE("a non-finite scale is a clear dsa::error, on any batch (issue 33, class 7)") {
  // It used to return NaN (or inf) rows without an error, although docs/robustness.md lists
  // non-finite scales among the errors.
  std::vector<float> a(4 * 64, 1.0f), b(4 * 64, 7.0f);
  std::vector<bf16> ab(4 * 64, bf16(1.0f)), bb(4 * 64, bf16(7.0f));
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const float scale : {nan, inf, -inf}) {
    CAPTURE(scale);
    CHECK_THROWS_WITH_AS(dsa::hadamard_transform(dsa::cpu, dsa::make_view(static_cast<const float*>(a.data()), {4, 64}),
                                                 dsa::make_view(b.data(), {4, 64}), scale),
                         doctest::Contains("dsa::hadamard_transform: scale = "), dsa::error);
    CHECK_THROWS_WITH_AS(dsa::hadamard_transform(dsa::cpu, dsa::make_view(static_cast<const bf16*>(ab.data()), {4, 64}),
                                                 dsa::make_view(bb.data(), {4, 64}), scale),
                         doctest::Contains("; expected a finite number"), dsa::error);
    // Nothing was written.
    CHECK(b[0] == 7.0f);
    CHECK(static_cast<float>(bb[0]) == 7.0f);
    // An empty batch refuses it too: the argument is wrong whatever the data.
    CHECK_THROWS_AS(dsa::hadamard_transform(dsa::cpu, dsa::make_view(static_cast<const float*>(a.data()), {0, 64}),
                                            dsa::make_view(b.data(), {0, 64}), scale),
                    dsa::error);
  }
  CHECK_THROWS_WITH_AS(dsa::hadamard_transform(dsa::cpu, dsa::make_view(static_cast<const float*>(a.data()), {4, 64}),
                                               dsa::make_view(b.data(), {4, 64}), nan),
                       doctest::Contains("dsa::hadamard_transform: scale = nan; expected a finite number"), dsa::error);
  // Finite scales of any sign, zero and the largest float stay transforms.
  for (const float scale : {0.0f, -1.0f, std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min()}) {
    CAPTURE(scale);
    CHECK_NOTHROW(dsa::hadamard_transform(dsa::cpu, dsa::make_view(static_cast<const float*>(a.data()), {4, 64}),
                                          dsa::make_view(b.data(), {4, 64}), scale));
  }
}
