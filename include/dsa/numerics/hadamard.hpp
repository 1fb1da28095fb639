// The arithmetic of the Walsh-Hadamard transform, shared by the CPU and CUDA backends.
//
// Sizes. n = 2^m (1 <= n <= 32768) uses the Sylvester matrix in natural order,
// H[i][j] = (-1)^popcount(i & j). n = c * 2^m with c in {12, 20, 28, 40} and 2^m <= 32768 uses
// the Kronecker product of a fixed Hadamard matrix H_c with the Sylvester H_{2^m}, in the
// convention of Tri Dao's fast-hadamard-transform (hadamard_transform_{12,20,28,40}N), so that
// results match that library and the rotations built on it (QuaRot, SpinQuant):
//
//   view a row as X [c, 2^m] (row-major, c outer);  Y = H_c * X * H_{2^m}.
//
// When n has both forms (n = 40 * 2^m = 20 * 2^(m+1)) the 40 form is used, as QuaRot does;
// 20 * 2^m therefore only means c = 20 for n = 20 itself.
//
// Rounding. The transform is computed in fp32 in a fixed order that both backends follow, so
// their results are bit-identical: butterflies within each 2^m block with strides 1, 2, 4, ...
// (a, b) -> (a + b, a - b); then, for the c-form, each output block i is
// ((+-x_0) +- x_1) +- ... +- x_{c-1} summed in index order. Scaling and the one rounding to the
// output type happen after (see the op).
#pragma once

#include <cstdint>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"

DSA_NAMESPACE_BEGIN

/// Largest power-of-two factor of a supported Hadamard size.
inline constexpr index_t hadamard_max_pow2 = 32768;

namespace detail {

// Legendre symbol (a / q) for an odd prime q: 0, +1 (non-zero square) or -1.
DSA_HOST_DEVICE constexpr int quadratic_character(int a, int q) {
  a %= q;
  if (a < 0) a += q;
  if (a == 0) return 0;
  for (int x = 1; x < q; ++x) {
    if ((x * x) % q == a) return 1;
  }
  return -1;
}

// Entry (i, j) of the right-shift circulant whose first row has bit k set where it is -1.
DSA_HOST_DEVICE constexpr int circulant_entry(std::uint32_t negmask, int order, int i, int j) {
  const int k = ((j - i) % order + order) % order;
  return ((negmask >> k) & 1u) ? -1 : 1;
}

// Paley construction II for q = 5 (q = 1 mod 4), order 2(q + 1) = 12:
// H = I_6 (x) [[1, -1], [-1, -1]] + C (x) [[1, 1], [1, -1]], with the symmetric conference matrix
// C = [[0, 1^T], [1, Q]] and the Jacobsthal matrix Q[a][b] = chi(b - a) over GF(5).
DSA_HOST_DEVICE constexpr int hadamard12_entry(int i, int j) {
  const int bi = i / 2, bj = j / 2, ii = i % 2, jj = j % 2;
  int conference = 0;
  if (bi == 0 && bj == 0) {
    conference = 0;
  } else if (bi == 0 || bj == 0) {
    conference = 1;
  } else {
    conference = quadratic_character(bj - bi, 5);
  }
  const int diag = (bi == bj) ? ((ii == 0 && jj == 0) ? 1 : -1) : 0;
  const int kron = (ii == 1 && jj == 1) ? -conference : conference;
  return diag + kron;
}

// Williamson array [[A, B, C, D], [-B, A, -D, C], [-C, D, A, -B], [-D, -C, B, A]] of symmetric
// circulant blocks of the given order; the masks mark the -1 entries of each block's first row.
DSA_HOST_DEVICE constexpr int williamson_entry(int order, const std::uint32_t (&blocks)[4], int i, int j) {
  // Which block (A = 0 .. D = 3) and sign sits at block position (bi, bj).
  constexpr int which[4][4] = {{0, 1, 2, 3}, {1, 0, 3, 2}, {2, 3, 0, 1}, {3, 2, 1, 0}};
  constexpr int sign[4][4] = {{1, 1, 1, 1}, {-1, 1, -1, 1}, {-1, 1, 1, -1}, {-1, -1, 1, 1}};
  const int bi = i / order, bj = j / order;
  return sign[bi][bj] * circulant_entry(blocks[which[bi][bj]], order, i % order, j % order);
}

// Paley construction I for q = 19 (q = 3 mod 4), order q + 1 = 20, in the sign convention of
// N. J. A. Sloane's "had.40.tpal": P = I + [[0, -1^T], [1, Q]] with Q[a][b] = chi(a - b).
DSA_HOST_DEVICE constexpr int paley19_entry(int i, int j) {
  if (i == j) return 1;
  if (i == 0) return -1;
  if (j == 0) return 1;
  return quadratic_character((i - 1) - (j - 1), 19);
}

}  // namespace detail

/// Entry (i, j) (+1 or -1) of the fixed Hadamard matrix H_c used for the c-form sizes;
/// c = 1 gives [1]. Constructions (identical, entry by entry, to fast-hadamard-transform's):
///   H_12: Paley II over GF(5);
///   H_20: Williamson, A = B = circ(+----), C = circ(++--+), D = circ(+-++-);
///   H_28: Williamson, A = circ(+------), B = circ(++----+), C = circ(+-+--+-), D = circ(+--++--);
///   H_40: [[P, P], [P, -P]] with P the order-20 Paley I matrix over GF(19).
/// Returns 0 for an unsupported c or out-of-range indices.
DSA_HOST_DEVICE constexpr int hadamard_base_entry(int c, int i, int j) {
  if (i < 0 || j < 0 || i >= c || j >= c) return 0;
  switch (c) {
    case 1:
      return 1;
    case 12:
      return detail::hadamard12_entry(i, j);
    case 20: {
      constexpr std::uint32_t blocks[4] = {0x1Eu /* +---- */, 0x1Eu /* +---- */, 0x0Cu /* ++--+ */,
                                           0x12u /* +-++- */};
      return detail::williamson_entry(5, blocks, i, j);
    }
    case 28: {
      constexpr std::uint32_t blocks[4] = {0x7Eu /* +------ */, 0x3Cu /* ++----+ */, 0x5Au /* +-+--+- */,
                                           0x66u /* +--++-- */};
      return detail::williamson_entry(7, blocks, i, j);
    }
    case 40: {
      const int p = detail::paley19_entry(i % 20, j % 20);
      return (i >= 20 && j >= 20) ? -p : p;
    }
    default:
      return 0;
  }
}

/// A supported transform size n = base * pow2 (base 1, 12, 20, 28 or 40); base = 0 when n is not
/// supported.
struct hadamard_size {
  int base = 0;
  index_t pow2 = 0;
};

/// Splits n into base * 2^m (see the file comment for the rule when two splits exist).
DSA_HOST_DEVICE constexpr hadamard_size hadamard_factorize(index_t n) {
  if (n <= 0) return {};
  index_t pow2 = 1;
  index_t odd = n;
  while ((odd & 1) == 0) {
    odd >>= 1;
    pow2 <<= 1;
  }
  hadamard_size r{};
  if (odd == 1) {
    r = {1, pow2};
  } else if (odd == 3 && pow2 >= 4) {
    r = {12, pow2 / 4};
  } else if (odd == 7 && pow2 >= 4) {
    r = {28, pow2 / 4};
  } else if (odd == 5 && pow2 >= 8) {
    r = {40, pow2 / 8};
  } else if (odd == 5 && pow2 == 4) {
    r = {20, 1};
  }
  if (r.base == 0 || r.pow2 > hadamard_max_pow2) return {};
  return r;
}

/// True for the sizes hadamard_transform accepts: 2^m <= 32768, or 12, 20, 28 or 40 times such
/// a power of two.
DSA_HOST_DEVICE constexpr bool is_hadamard_size(index_t n) { return hadamard_factorize(n).base != 0; }

/// Everything a kernel needs to transform rows of one size: the split of n and, for each row i
/// of H_base, the mask of its -1 entries (bit j).
struct hadamard_plan {
  int base = 0;
  index_t pow2 = 0;
  index_t n = 0;
  std::uint64_t negative[40] = {};
};

/// The plan for a supported size n (base = 0 in the result otherwise).
DSA_HOST_DEVICE constexpr hadamard_plan make_hadamard_plan(index_t n) {
  hadamard_plan p{};
  const hadamard_size s = hadamard_factorize(n);
  if (s.base == 0) return p;
  p.base = s.base;
  p.pow2 = s.pow2;
  p.n = n;
  for (int i = 0; i < s.base; ++i) {
    std::uint64_t m = 0;
    for (int j = 0; j < s.base; ++j) {
      if (hadamard_base_entry(s.base, i, j) < 0) m |= std::uint64_t{1} << j;
    }
    p.negative[i] = m;
  }
  return p;
}

/// In-place unnormalised Sylvester transform of x[0, len), len a power of two: butterflies with
/// strides 1, 2, 4, ... (the order every backend uses).
DSA_HOST_DEVICE inline void hadamard_butterflies(float* x, index_t len) {
  for (index_t h = 1; h < len; h <<= 1) {
    for (index_t i = 0; i < len; i += 2 * h) {
      for (index_t j = i; j < i + h; ++j) {
        const float a = x[j];
        const float b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
}

/// Output block i of the base mixing at offset r: sum over j in index order of
/// H_base[i][j] * x[j * stride + r]. The shared definition of that sum's rounding.
DSA_HOST_DEVICE DSA_FORCEINLINE float hadamard_base_dot(std::uint64_t negative, int base, const float* x,
                                                       index_t stride) {
  float acc = (negative & 1u) ? -x[0] : x[0];
  for (int j = 1; j < base; ++j) {
    const float v = x[j * stride];
    acc = ((negative >> j) & 1u) ? acc - v : acc + v;
  }
  return acc;
}

/// Y = H_base * X on x viewed as [base, pow2] (in place); a no-op for base 1.
DSA_HOST_DEVICE inline void hadamard_base_mix(const hadamard_plan& p, float* x) {
  if (p.base <= 1) return;
  float t[40];
  for (index_t r = 0; r < p.pow2; ++r) {
    for (int i = 0; i < p.base; ++i) t[i] = hadamard_base_dot(p.negative[i], p.base, x + r, p.pow2);
    for (int i = 0; i < p.base; ++i) x[i * p.pow2 + r] = t[i];
  }
}

/// In-place unnormalised transform of one row x[0, p.n): x <- x * H_n in fp32.
DSA_HOST_DEVICE inline void hadamard_apply(const hadamard_plan& p, float* x) {
  for (int c = 0; c < p.base; ++c) hadamard_butterflies(x + c * p.pow2, p.pow2);
  hadamard_base_mix(p, x);
}

DSA_NAMESPACE_END
