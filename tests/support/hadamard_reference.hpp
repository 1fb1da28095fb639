// Test oracle for dsa::hadamard_transform: the transform as an explicit O(n^2) matrix product in
// double precision, with the base matrices written out as sign tables. The tables are the ones
// of N. J. A. Sloane's library of Hadamard matrices (had.20.will, had.28.will, had.40.tpal) and
// Wikipedia's Paley construction II example for order 12, as used by Tri Dao's
// fast-hadamard-transform: matching them entry by entry is what makes our 12N/20N/28N/40N
// transforms interchangeable with that library. They are independent of the library's
// constructions in dsa/numerics/hadamard.hpp.
#pragma once

#include <bit>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace dsa_test {

inline constexpr const char* hadamard_12_rows[12] = {
    "+-++++++++++",
    "--+-+-+-+-+-",
    "+++-++----++",
    "+---+--+-++-",
    "+++++-++----",
    "+-+---+--+-+",
    "++--+++-++--",
    "+--++---+--+",
    "++----+++-++",
    "+--+-++---+-",
    "++++----+++-",
    "+-+--+-++---",
};
inline constexpr const char* hadamard_20_rows[20] = {
    "+----+----++--++-++-",
    "-+----+---+++---+-++",
    "--+----+---+++-+-+-+",
    "---+----+---+++++-+-",
    "----+----++--++-++-+",
    "-+++++-----+--+++--+",
    "+-+++-+---+-+--+++--",
    "++-++--+---+-+--+++-",
    "+++-+---+---+-+--+++",
    "++++-----++--+-+--++",
    "--++-+-++-+-----++++",
    "---++-+-++-+---+-+++",
    "+---++-+-+--+--++-++",
    "++---++-+----+-+++-+",
    "-++---++-+----+++++-",
    "-+--+--++-+----+----",
    "+-+-----++-+----+---",
    "-+-+-+---+--+----+--",
    "--+-+++------+----+-",
    "+--+--++------+----+",
};
inline constexpr const char* hadamard_28_rows[28] = {
    "+------++----++-+--+-+--++--",
    "-+-----+++-----+-+--+-+--++-",
    "--+-----+++---+-+-+----+--++",
    "---+-----+++---+-+-+-+--+--+",
    "----+-----+++---+-+-+++--+--",
    "-----+-----++++--+-+--++--+-",
    "------++----++-+--+-+--++--+",
    "--++++-+-------++--+++-+--+-",
    "---++++-+-----+-++--+-+-+--+",
    "+---+++--+----++-++--+-+-+--",
    "++---++---+----++-++--+-+-+-",
    "+++---+----+----++-++--+-+-+",
    "++++--------+-+--++-++--+-+-",
    "-++++--------+++--++--+--+-+",
    "-+-++-++--++--+--------++++-",
    "+-+-++--+--++--+--------++++",
    "-+-+-++--+--++--+----+---+++",
    "+-+-+-++--+--+---+---++---++",
    "++-+-+-++--+------+--+++---+",
    "-++-+-+-++--+------+-++++---",
    "+-++-+---++--+------+-++++--",
    "-++--++-+-++-+++----++------",
    "+-++--++-+-++-+++-----+-----",
    "++-++---+-+-++-+++-----+----",
    "-++-++-+-+-+-+--+++-----+---",
    "--++-++++-+-+----+++-----+--",
    "+--++-+-++-+-+----+++-----+-",
    "++--++-+-++-+-+----++------+",
};
inline constexpr const char* hadamard_40_rows[40] = {
    "+-------------------+-------------------",
    "++-++----+-+-++++--+++-++----+-+-++++--+",
    "+++-++----+-+-++++--+++-++----+-+-++++--",
    "+-++-++----+-+-++++-+-++-++----+-+-++++-",
    "+--++-++----+-+-+++++--++-++----+-+-++++",
    "++--++-++----+-+-+++++--++-++----+-+-+++",
    "+++--++-++----+-+-+++++--++-++----+-+-++",
    "++++--++-++----+-+-+++++--++-++----+-+-+",
    "+++++--++-++----+-+-+++++--++-++----+-+-",
    "+-++++--++-++----+-++-++++--++-++----+-+",
    "++-++++--++-++----+-++-++++--++-++----+-",
    "+-+-++++--++-++----++-+-++++--++-++----+",
    "++-+-++++--++-++----++-+-++++--++-++----",
    "+-+-+-++++--++-++---+-+-+-++++--++-++---",
    "+--+-+-++++--++-++--+--+-+-++++--++-++--",
    "+---+-+-++++--++-++-+---+-+-++++--++-++-",
    "+----+-+-++++--++-+++----+-+-++++--++-++",
    "++----+-+-++++--++-+++----+-+-++++--++-+",
    "+++----+-+-++++--++-+++----+-+-++++--++-",
    "+-++----+-+-++++--+++-++----+-+-++++--++",
    "+--------------------+++++++++++++++++++",
    "++-++----+-+-++++--+--+--++++-+-+----++-",
    "+++-++----+-+-++++-----+--++++-+-+----++",
    "+-++-++----+-+-++++--+--+--++++-+-+----+",
    "+--++-++----+-+-++++-++--+--++++-+-+----",
    "++--++-++----+-+-+++--++--+--++++-+-+---",
    "+++--++-++----+-+-++---++--+--++++-+-+--",
    "++++--++-++----+-+-+----++--+--++++-+-+-",
    "+++++--++-++----+-+------++--+--++++-+-+",
    "+-++++--++-++----+-+-+----++--+--++++-+-",
    "++-++++--++-++----+---+----++--+--++++-+",
    "+-+-++++--++-++----+-+-+----++--+--++++-",
    "++-+-++++--++-++------+-+----++--+--++++",
    "+-+-+-++++--++-++----+-+-+----++--+--+++",
    "+--+-+-++++--++-++---++-+-+----++--+--++",
    "+---+-+-++++--++-++--+++-+-+----++--+--+",
    "+----+-+-++++--++-++-++++-+-+----++--+--",
    "++----+-+-++++--++-+--++++-+-+----++--+-",
    "+++----+-+-++++--++----++++-+-+----++--+",
    "+-++----+-+-++++--++-+--++++-+-+----++--",
};

/// Entry (i, j) of the base matrix H_c (c in {1, 12, 20, 28, 40}).
inline int hadamard_base_sign(int c, int i, int j) {
  const char* const* rows = nullptr;
  switch (c) {
    case 1: return 1;
    case 12: rows = hadamard_12_rows; break;
    case 20: rows = hadamard_20_rows; break;
    case 28: rows = hadamard_28_rows; break;
    case 40: rows = hadamard_40_rows; break;
    default: throw std::invalid_argument("hadamard_base_sign: bad c");
  }
  return rows[i][j] == '+' ? 1 : -1;
}

/// Splits n into (c, 2^m) as documented for dsa::hadamard_transform (40 preferred over 20).
inline void hadamard_split(std::int64_t n, int& c, std::int64_t& p) {
  for (int cand : {1, 12, 28, 40, 20}) {
    if (n % cand != 0) continue;
    const std::int64_t q = n / cand;
    if (std::has_single_bit(static_cast<std::uint64_t>(q)) && q <= 32768) {
      c = cand;
      p = q;
      return;
    }
  }
  throw std::invalid_argument("hadamard_split: unsupported n");
}

/// Entry (i, j) of H_n: with i = (ci, ri), j = (cj, rj) split as [c, 2^m],
/// H_n[i][j] = H_c[cj][ci] * (-1)^popcount(ri & rj), i.e. Y = H_c * X * H_{2^m} on a row X.
inline int hadamard_entry(std::int64_t n, std::int64_t i, std::int64_t j) {
  int c = 0;
  std::int64_t p = 0;
  hadamard_split(n, c, p);
  const int sylvester = (std::popcount(static_cast<std::uint64_t>((i % p) & (j % p))) & 1) ? -1 : 1;
  return hadamard_base_sign(c, static_cast<int>(j / p), static_cast<int>(i / p)) * sylvester;
}

/// y = (x * H_n) * scale for each of `rows` rows of length n, in double.
inline std::vector<double> hadamard_reference(const std::vector<double>& x, std::int64_t rows, std::int64_t n,
                                              double scale) {
  std::vector<int> h(static_cast<std::size_t>(n * n));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < n; ++j) h[static_cast<std::size_t>(i * n + j)] = hadamard_entry(n, i, j);
  std::vector<double> y(static_cast<std::size_t>(rows * n), 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < n; ++i) {
      const double xi = x[static_cast<std::size_t>(r * n + i)];
      for (std::int64_t j = 0; j < n; ++j) y[static_cast<std::size_t>(r * n + j)] += xi * h[static_cast<std::size_t>(i * n + j)];
    }
    for (std::int64_t j = 0; j < n; ++j) y[static_cast<std::size_t>(r * n + j)] *= scale;
  }
  return y;
}

/// Column j of the transform of one row x[0, n), scale 1, in double: O(n), for sizes too large for
/// the full O(n^2) product.
inline double hadamard_reference_column(const std::vector<double>& x, std::int64_t n, std::int64_t j) {
  int c = 0;
  std::int64_t p = 0;
  hadamard_split(n, c, p);
  double acc = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const int sylvester = (std::popcount(static_cast<std::uint64_t>((i % p) & (j % p))) & 1) ? -1 : 1;
    acc += x[static_cast<std::size_t>(i)] * hadamard_base_sign(c, static_cast<int>(j / p), static_cast<int>(i / p)) * sylvester;
  }
  return acc;
}

}  // namespace dsa_test
