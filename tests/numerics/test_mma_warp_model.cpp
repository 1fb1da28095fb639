// The CPU warp model of the tensor-core kernels: every lane of a tile replayed on the host with
// the kernels' own layout functions (dsa/cuda/arch/mma.hpp,
// kernels/sparse_mla_attention_fast_layout.hpp, kernels/lightning_indexer_fast_layout.hpp),
// against a model of ldmatrix and mma.sync.m16n8k16 written here from the PTX ISA's text, not
// from those functions. The data are small integers, whose products and sums are exact in any
// order, so each replayed tile must equal a plain matrix product bit for bit: a wrong fragment
// layout, ldmatrix address, swizzle, FP8 pairing or accumulator mapping is a wrong number here,
// found without a GPU. The swizzles cannot change a product (a bijection used alike for stores and
// loads), so the model also checks what they are for: the addresses one ldmatrix matrix or one
// quarter-warp's 16-byte loads touch lie in distinct bank groups.
//
// Mirrors: sparse_mla_attention_fast_kernel.cuh (queries and rows into the swizzled tiles, the
// FP8 row decode's chunk placement, S = Q K^T, P to shared memory, O += P V, the output
// mapping) and lightning_indexer_fast_kernel.cuh (the key tile, the f16 query tile, the A
// fragments from FP8 pairs, the B fragments, the head sum and the store mapping).
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "dsa/core/types.hpp"
#include "dsa/cuda/arch/mma.hpp"
#include "dsa/cuda/kernels/lightning_indexer_fast_layout.hpp"
#include "dsa/cuda/kernels/sparse_mla_attention_fast_layout.hpp"
#include "dsa/numerics/kv_cache.hpp"
#include "dsa/numerics/lightning_indexer.hpp"

namespace {

namespace arch = dsa::cuda_arch;
namespace ck = dsa::cuda_kernels;

constexpr int kLanes = 32;

// ---- the hardware, from the PTX ISA ------------------------------------------------------------------
//
// "Matrix Fragments for mma.m16n8k16 with floating point type" (16-bit A and B, fp32 C and D):
//   A: a0..a7, row = groupID for a0, a1, a4, a5 and groupID + 8 for a2, a3, a6, a7;
//      col = threadID_in_group * 2 + (i & 1) for a0..a3, + 8 for a4..a7.
//   B: b0..b3, row = threadID_in_group * 2 + (i & 1) for b0, b1, + 8 for b2, b3; col = groupID.
//   C/D: c0..c3, row = groupID for c0, c1, groupID + 8 for c2, c3; col = threadID_in_group * 2
//      + (i & 1).
// Written out case by case, as the ISA's tables state them, not with arch/mma.hpp's arithmetic.
struct isa {
  static int group(int lane) { return lane / 4; }
  static int tig(int lane) { return lane % 4; }
  static int a_row(int lane, int i) {
    const bool low = i == 0 || i == 1 || i == 4 || i == 5;
    return low ? group(lane) : group(lane) + 8;
  }
  static int a_col(int lane, int i) { return tig(lane) * 2 + (i % 2) + (i >= 4 ? 8 : 0); }
  static int b_row(int lane, int i) { return tig(lane) * 2 + (i % 2) + (i >= 2 ? 8 : 0); }
  static int b_col(int lane, int) { return group(lane); }
  static int c_row(int lane, int i) { return i < 2 ? group(lane) : group(lane) + 8; }
  static int c_col(int lane, int i) { return tig(lane) * 2 + (i % 2); }
};

// 16-bit element formats of the operands.
enum class half_format { bf16, f16 };

float f16_to_float(std::uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    v = man == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp(static_cast<float>(man | 0x400), exp - 25);
  }
  return sign != 0 ? -v : v;
}

// An f16 encoding of a value f16 represents exactly (every e4m3 value is one): the model of
// cvt.rn.f16x2.e4m3x2, which is exact.
std::uint16_t float_to_f16_exact(float v) {
  if (std::isnan(v)) return 0x7E00;
  const std::uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const float a = std::fabs(v);
  if (a == 0.0f) return sign;
  int e = 0;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e + 14;                   // biased exponent of 1.x * 2^(e - 1)
  std::uint16_t bits;
  if (exp >= 1) {
    const float frac = (m * 2.0f - 1.0f) * 1024.0f;
    REQUIRE(frac == std::floor(frac));
    bits = static_cast<std::uint16_t>((exp << 10) | static_cast<int>(frac));
  } else {
    const float man = std::ldexp(a, 24);
    REQUIRE(man == std::floor(man));
    bits = static_cast<std::uint16_t>(man);
  }
  REQUIRE(f16_to_float(bits) == a);
  return static_cast<std::uint16_t>(sign | bits);
}

float element(std::uint16_t bits, half_format f) {
  return f == half_format::bf16 ? dsa::bf16::from_bits(bits).to_float() : f16_to_float(bits);
}
float lo_half(std::uint32_t r, half_format f) { return element(static_cast<std::uint16_t>(r & 0xFFFFu), f); }
float hi_half(std::uint32_t r, half_format f) { return element(static_cast<std::uint16_t>(r >> 16), f); }

using lane_regs4 = std::array<std::array<std::uint32_t, 4>, kLanes>;
using lane_regs2 = std::array<std::array<std::uint32_t, 2>, kLanes>;
using lane_acc = std::array<std::array<float, 4>, kLanes>;

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: d = a b + c over the warp's registers.
void mma_model(lane_acc& d, const lane_regs4& a, const lane_regs2& b, half_format f) {
  double A[16][16] = {}, B[16][8] = {};
  int seen_a[16][16] = {}, seen_b[16][8] = {};
  for (int l = 0; l < kLanes; ++l) {
    for (int i = 0; i < 8; ++i) {
      const std::uint32_t r = a[l][static_cast<std::size_t>(i / 2)];
      A[isa::a_row(l, i)][isa::a_col(l, i)] = i % 2 == 0 ? lo_half(r, f) : hi_half(r, f);
      ++seen_a[isa::a_row(l, i)][isa::a_col(l, i)];
    }
    for (int i = 0; i < 4; ++i) {
      const std::uint32_t r = b[l][static_cast<std::size_t>(i / 2)];
      B[isa::b_row(l, i)][isa::b_col(l, i)] = i % 2 == 0 ? lo_half(r, f) : hi_half(r, f);
      ++seen_b[isa::b_row(l, i)][isa::b_col(l, i)];
    }
  }
  for (int m = 0; m < 16; ++m) {
    for (int k = 0; k < 16; ++k) REQUIRE(seen_a[m][k] == 1);
  }
  for (int k = 0; k < 16; ++k) {
    for (int n = 0; n < 8; ++n) REQUIRE(seen_b[k][n] == 1);
  }
  for (int l = 0; l < kLanes; ++l) {
    for (int i = 0; i < 4; ++i) {
      const int m = isa::c_row(l, i), n = isa::c_col(l, i);
      double s = d[l][static_cast<std::size_t>(i)];
      for (int k = 0; k < 16; ++k) s += A[m][k] * B[k][n];
      d[l][static_cast<std::size_t>(i)] = static_cast<float>(s);
    }
  }
}

// Shared memory as bytes; 16-bit elements little-endian.
struct smem {
  std::vector<std::uint8_t> bytes;
  explicit smem(std::size_t n) : bytes(n, 0) {}
  std::uint16_t u16(std::size_t off) const { return static_cast<std::uint16_t>(bytes[off] | (bytes[off + 1] << 8)); }
  std::uint32_t u32(std::size_t off) const {
    std::uint32_t v;
    std::memcpy(&v, bytes.data() + off, 4);
    return v;
  }
  void put16(std::size_t off, std::uint16_t v) { std::memcpy(bytes.data() + off, &v, 2); }
  void put32(std::size_t off, std::uint32_t v) { std::memcpy(bytes.data() + off, &v, 4); }
};

// The 16-byte bank group (0..7) of a byte offset: 32 banks of 4 bytes.
int bank_group(int offset) { return (offset / 16) % 8; }

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: "threads 8j .. 8j+7 supply the addresses of
// the rows of matrix j"; "each thread receives, for matrix j, in register j, the two elements
// of row lane / 4 at columns 2 (lane % 4) and 2 (lane % 4) + 1" (.trans: the elements of rows
// 2 (lane % 4), 2 (lane % 4) + 1 at column lane / 4). Row addresses are 16-byte aligned; the
// model also requires the eight rows of each matrix to sit in distinct bank groups (no conflict).
lane_regs4 ldmatrix_model(const smem& s, const std::array<int, kLanes>& address, bool trans) {
  lane_regs4 r{};
  for (int j = 0; j < 4; ++j) {
    std::set<int> groups;
    for (int row = 0; row < 8; ++row) {
      REQUIRE(address[static_cast<std::size_t>(8 * j + row)] % 16 == 0);
      groups.insert(bank_group(address[static_cast<std::size_t>(8 * j + row)]));
    }
    CHECK_MESSAGE(groups.size() == 8, "ldmatrix matrix " << j << " reads rows in " << groups.size()
                                                          << " bank groups: a bank conflict");
    for (int l = 0; l < kLanes; ++l) {
      std::uint16_t e[2];
      for (int h = 0; h < 2; ++h) {
        const int row = trans ? 2 * (l % 4) + h : l / 4;
        const int col = trans ? l / 4 : 2 * (l % 4) + h;
        e[h] = s.u16(static_cast<std::size_t>(address[static_cast<std::size_t>(8 * j + row)] + 2 * col));
      }
      r[static_cast<std::size_t>(l)][static_cast<std::size_t>(j)] = static_cast<std::uint32_t>(e[0]) | (static_cast<std::uint32_t>(e[1]) << 16);
    }
  }
  return r;
}

// A quarter-warp's 16-byte loads (LDS.128 is served eight lanes at a time): distinct bank groups.
void check_lds128_conflict_free(const std::array<int, kLanes>& address, const std::string& what) {
  for (int q = 0; q < 4; ++q) {
    std::set<int> groups;
    for (int l = 8 * q; l < 8 * q + 8; ++l) {
      REQUIRE(address[static_cast<std::size_t>(l)] % 16 == 0);
      groups.insert(bank_group(address[static_cast<std::size_t>(l)]));
    }
    CHECK_MESSAGE(groups.size() == 8, what << ": lanes " << 8 * q << ".." << 8 * q + 7 << " load from "
                                           << groups.size() << " bank groups: a bank conflict");
  }
}

std::uint32_t pack2(std::uint16_t lo, std::uint16_t hi) { return static_cast<std::uint32_t>(lo) | (static_cast<std::uint32_t>(hi) << 16); }

// Small integers: exact in bf16, f16, e4m3 and in every product and sum here.
struct lcg {
  std::uint64_t s;
  int next(int lo, int hi) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return lo + static_cast<int>((s >> 33) % static_cast<std::uint64_t>(hi - lo + 1));
  }
};

}  // namespace

TEST_CASE("arch/mma.hpp fragment layouts are the PTX ISA's") {
  for (int lane = 0; lane < kLanes; ++lane) {
    for (int i = 0; i < 8; ++i) {
      CHECK(arch::mma_a_row(lane, i) == isa::a_row(lane, i));
      CHECK(arch::mma_a_col(lane, i) == isa::a_col(lane, i));
    }
    for (int i = 0; i < 4; ++i) {
      CHECK(arch::mma_b_row(lane, i) == isa::b_row(lane, i));
      CHECK(arch::mma_b_col(lane, i) == isa::b_col(lane, i));
      CHECK(arch::mma_c_row(lane, i) == isa::c_row(lane, i));
      CHECK(arch::mma_c_col(lane, i) == isa::c_col(lane, i));
    }
  }
  // The ldmatrix tilings hand each mma register the right matrix: A register j = ISA elements
  // 2j, 2j + 1, whose rows / columns the tiling's matrix j must cover.
  for (int lane = 0; lane < kLanes; ++lane) {
    const int j = arch::ldmatrix_matrix(lane);
    CHECK(arch::ldsm_a_row(lane) == arch::ldmatrix_row(lane) + 8 * (j % 2));
    CHECK(arch::ldsm_a_chunk(lane) == j / 2);
  }
  // FP8 slab columns: a permutation of 0..63 over (k-step, logical column).
  std::set<int> cols;
  for (int j = 0; j < 4; ++j) {
    for (int kk = 0; kk < 16; ++kk) cols.insert(arch::fp8_slab_column(j, kk));
  }
  CHECK(cols.size() == 64);
  CHECK(*cols.begin() == 0);
  CHECK(*cols.rbegin() == 63);
  // ... and the pairings read exactly those columns: A register r of k-step j of lane (g, t)
  // holds columns mma_a_col(lane, 2r), + 1, which fp8_a_pair takes from bytes 4j + 2 (r / 2) of
  // the lane's 16 (physical 16 t + 4 j + 2 (r / 2) + e).
  for (int lane = 0; lane < kLanes; ++lane) {
    const int t = arch::mma_thread_in_group(lane);
    for (int j = 0; j < 4; ++j) {
      for (int r = 0; r < 4; ++r) {
        for (int e = 0; e < 2; ++e) {
          const int kk = arch::mma_a_col(lane, 2 * r + e);
          CHECK(arch::fp8_slab_column(j, kk) == 16 * t + 4 * j + 2 * (r / 2) + e);
        }
      }
      for (int r = 0; r < 2; ++r) {
        for (int e = 0; e < 2; ++e) {
          const int kk = arch::mma_b_row(lane, 2 * r + e);
          CHECK(arch::fp8_slab_column(j, kk) == 16 * t + 2 * arch::f16_b_word(j, r) + e);
        }
      }
    }
  }
}

// ---- sparse MLA attention -----------------------------------------------------------------------

namespace {

struct mla_tile_case {
  int d_qk, d_v;
};

// One tile of the fast kernel, every warp and lane: S = Q K^T, then O = P V for a P derived from
// S (small integers), both against plain products.
void replay_mla_tile(const mla_tile_case& c, std::uint64_t seed) {
  CAPTURE(c.d_qk);
  CAPTURE(c.d_v);
  constexpr int H = ck::mla_fast_heads, T = ck::mla_fast_tile;
  const int rc = c.d_qk / 8;
  lcg g{seed};
  std::vector<int> q(static_cast<std::size_t>(H * c.d_qk)), k(static_cast<std::size_t>(T * c.d_qk));
  for (int& v : q) v = g.next(-3, 3);
  for (int& v : k) v = g.next(-3, 3);
  const auto bf = [](int v) { return dsa::bf16(static_cast<float>(v)).bits; };

  // The kernel's copies: chunk ch (8 values) of row r at mla_tile_offset(r, ch, rc).
  smem qs(static_cast<std::size_t>(H * c.d_qk * 2)), ks(static_cast<std::size_t>(T * c.d_qk * 2)),
      ps(static_cast<std::size_t>(H * T * 2));
  std::set<int> written;
  for (int r = 0; r < H; ++r) {
    for (int ch = 0; ch < rc; ++ch) {
      const int off = ck::mla_tile_offset(r, ch, rc);
      CHECK(written.insert(off).second);
      for (int e = 0; e < 8; ++e) qs.put16(static_cast<std::size_t>(off + 2 * e), bf(q[static_cast<std::size_t>(r * c.d_qk + 8 * ch + e)]));
      const int koff = ck::mla_tile_offset(r, ch, rc);
      for (int e = 0; e < 8; ++e) ks.put16(static_cast<std::size_t>(koff + 2 * e), bf(k[static_cast<std::size_t>(r * c.d_qk + 8 * ch + e)]));
    }
  }
  CHECK(static_cast<int>(written.size()) == H * rc);

  // S, by warps (head block, half), as the kernel's loops run.
  std::vector<double> s(static_cast<std::size_t>(H * T), NAN);
  for (int warp = 0; warp < ck::mla_fast_threads / 32; ++warp) {
    const int hb = ck::mla_fast_head_block(warp), half = ck::mla_fast_half(warp);
    lane_acc sacc[4] = {};
    for (int kg = 0; kg < c.d_qk / 64; ++kg) {
      for (int kstep = 0; kstep < 4; ++kstep) {
        std::array<int, kLanes> aaddr{};
        for (int l = 0; l < kLanes; ++l) {
          aaddr[static_cast<std::size_t>(l)] = ck::mla_qk_a_offset(l, hb, kstep, rc) + kg * ck::mla_kstep_group_bytes;
          // The kernel's shortcut (offsets of k-steps 0..3 plus 128 bytes a group) is the layout.
          CHECK(aaddr[static_cast<std::size_t>(l)] == ck::mla_qk_a_offset(l, hb, 4 * kg + kstep, rc));
        }
        const lane_regs4 a = ldmatrix_model(qs, aaddr, false);
        for (int np = 0; np < 2; ++np) {
          std::array<int, kLanes> baddr{};
          for (int l = 0; l < kLanes; ++l) {
            baddr[static_cast<std::size_t>(l)] = ck::mla_qk_b_offset(l, half, np, kstep, rc) + kg * ck::mla_kstep_group_bytes;
            CHECK(baddr[static_cast<std::size_t>(l)] == ck::mla_qk_b_offset(l, half, np, 4 * kg + kstep, rc));
          }
          const lane_regs4 b = ldmatrix_model(ks, baddr, false);
          lane_regs2 b0{}, b1{};
          for (int l = 0; l < kLanes; ++l) {
            b0[static_cast<std::size_t>(l)] = {b[static_cast<std::size_t>(l)][0], b[static_cast<std::size_t>(l)][1]};
            b1[static_cast<std::size_t>(l)] = {b[static_cast<std::size_t>(l)][2], b[static_cast<std::size_t>(l)][3]};
          }
          mma_model(sacc[2 * np], a, b0, half_format::bf16);
          mma_model(sacc[2 * np + 1], a, b1, half_format::bf16);
        }
      }
    }
    for (int nb = 0; nb < 4; ++nb) {
      for (int l = 0; l < kLanes; ++l) {
        for (int i = 0; i < 4; ++i) {
          const int head = ck::mla_s_head(l, hb, i), key = ck::mla_s_key(l, half, nb, i);
          double& dst = s[static_cast<std::size_t>(head * T + key)];
          CHECK(std::isnan(dst));  // each logit has one owner
          dst = sacc[nb][static_cast<std::size_t>(l)][static_cast<std::size_t>(i)];
        }
      }
    }
  }
  std::vector<int> pint(static_cast<std::size_t>(H * T));
  for (int h = 0; h < H; ++h) {
    for (int j = 0; j < T; ++j) {
      long ref = 0;
      for (int i = 0; i < c.d_qk; ++i) ref += static_cast<long>(q[static_cast<std::size_t>(h * c.d_qk + i)]) * k[static_cast<std::size_t>(j * c.d_qk + i)];
      const double got = s[static_cast<std::size_t>(h * T + j)];
      if (got != static_cast<double>(ref)) {
        FAIL_CHECK("S[" << h << "][" << j << "] = " << got << ", expected " << ref);
        return;
      }
      pint[static_cast<std::size_t>(h * T + j)] = static_cast<int>(((ref % 5) + 5) % 5) - 2;  // small, exact in bf16
    }
  }

  // P to shared memory: each warp its 32 keys' pairs, as the kernel stores them.
  std::set<int> pwritten;
  for (int warp = 0; warp < ck::mla_fast_threads / 32; ++warp) {
    const int hb = ck::mla_fast_head_block(warp), half = ck::mla_fast_half(warp);
    for (int nb = 0; nb < 4; ++nb) {
      for (int l = 0; l < kLanes; ++l) {
        for (int pr = 0; pr < 2; ++pr) {
          const int h = ck::mla_s_head(l, hb, 2 * pr);
          const int j0 = ck::mla_s_key(l, half, nb, 2 * pr), j1 = ck::mla_s_key(l, half, nb, 2 * pr + 1);
          const int off = ck::mla_p_store_offset(l, hb, half, nb, pr);
          CHECK(pwritten.insert(off).second);
          ps.put32(static_cast<std::size_t>(off), pack2(bf(pint[static_cast<std::size_t>(h * T + j0)]), bf(pint[static_cast<std::size_t>(h * T + j1)])));
        }
      }
    }
  }
  CHECK(static_cast<int>(pwritten.size()) == H * T / 2);

  // O = P V, V = K[:, :d_v].
  std::vector<double> o(static_cast<std::size_t>(H * c.d_v), NAN);
  const int out_blocks = c.d_v / 16;
  for (int warp = 0; warp < ck::mla_fast_threads / 32; ++warp) {
    const int hb = ck::mla_fast_head_block(warp), half = ck::mla_fast_half(warp);
    std::vector<lane_acc> acc(static_cast<std::size_t>(ck::mla_fast_max_out_blocks));
    const int col_base = ck::mla_out_col_base(half, c.d_v);
    for (int kstep = 0; kstep < T / 16; ++kstep) {
      std::array<int, kLanes> aaddr{};
      for (int l = 0; l < kLanes; ++l) aaddr[static_cast<std::size_t>(l)] = ck::mla_pv_a_offset(l, hb, kstep);
      const lane_regs4 a = ldmatrix_model(ps, aaddr, false);
      for (int np = 0; np < ck::mla_fast_max_out_blocks / 2; ++np) {
        if (2 * np >= out_blocks) continue;
        std::array<int, kLanes> baddr{};
        for (int l = 0; l < kLanes; ++l) baddr[static_cast<std::size_t>(l)] = ck::mla_pv_b_offset(l, kstep, col_base + 16 * np, rc);
        const lane_regs4 b = ldmatrix_model(ks, baddr, true);
        lane_regs2 b0{}, b1{};
        for (int l = 0; l < kLanes; ++l) {
          b0[static_cast<std::size_t>(l)] = {b[static_cast<std::size_t>(l)][0], b[static_cast<std::size_t>(l)][1]};
          b1[static_cast<std::size_t>(l)] = {b[static_cast<std::size_t>(l)][2], b[static_cast<std::size_t>(l)][3]};
        }
        mma_model(acc[static_cast<std::size_t>(2 * np)], a, b0, half_format::bf16);
        mma_model(acc[static_cast<std::size_t>(2 * np + 1)], a, b1, half_format::bf16);
      }
    }
    for (int nb = 0; nb < out_blocks; ++nb) {
      for (int l = 0; l < kLanes; ++l) {
        for (int i = 0; i < 4; ++i) {
          const int head = ck::mla_s_head(l, hb, i), col = ck::mla_out_col(l, half, c.d_v, nb, i);
          REQUIRE(col < c.d_v);
          double& dst = o[static_cast<std::size_t>(head * c.d_v + col)];
          CHECK(std::isnan(dst));
          dst = acc[static_cast<std::size_t>(nb)][static_cast<std::size_t>(l)][static_cast<std::size_t>(i)];
        }
      }
    }
  }
  for (int h = 0; h < H; ++h) {
    for (int col = 0; col < c.d_v; ++col) {
      long ref = 0;
      for (int j = 0; j < T; ++j) ref += static_cast<long>(pint[static_cast<std::size_t>(h * T + j)]) * k[static_cast<std::size_t>(j * c.d_qk + col)];
      const double got = o[static_cast<std::size_t>(h * c.d_v + col)];
      if (got != static_cast<double>(ref)) {
        FAIL_CHECK("O[" << h << "][" << col << "] = " << got << ", expected " << ref);
        return;
      }
    }
  }
}

}  // namespace

TEST_CASE("sparse MLA fast kernel: S = Q K^T and O = P V replayed lane by lane equal plain products") {
  replay_mla_tile({576, 512}, 1);  // V3.2
  replay_mla_tile({128, 64}, 2);
  replay_mla_tile({64, 32}, 3);
  replay_mla_tile({192, 96}, 4);   // a half's columns not a multiple of 64
}

TEST_CASE("sparse MLA fast kernel: the FP8 row decode places every value where the bf16 row has it") {
  // An encoded row decoded unit by unit as the kernel does (source chunk, scale group, the 16
  // values of a latent unit into two K-tile chunks, a RoPE unit's 16 bytes into one) must give
  // the K-tile row that the bf16 copy of kv_fp8_row_decode's values gives.
  lcg g{7};
  std::vector<dsa::bf16> kv(static_cast<std::size_t>(dsa::kv_dim));
  for (std::size_t i = 0; i < kv.size(); ++i) kv[i] = dsa::bf16(static_cast<float>(g.next(-300, 300)) / 16.0f);
  std::vector<std::uint8_t> row(static_cast<std::size_t>(dsa::kv_fp8_row_bytes));
  dsa::kv_fp8_row_encode(kv.data(), row.data());
  std::vector<dsa::bf16> decoded(static_cast<std::size_t>(dsa::kv_dim));
  dsa::kv_fp8_row_decode(row.data(), decoded.data());
  const int rc = static_cast<int>(dsa::kv_dim) / 8;
  smem expect(static_cast<std::size_t>(dsa::kv_dim * 2)), got(static_cast<std::size_t>(dsa::kv_dim * 2));
  for (int ch = 0; ch < rc; ++ch) {
    for (int e = 0; e < 8; ++e) expect.put16(static_cast<std::size_t>(ck::mla_tile_offset(0, ch, rc) + 2 * e), decoded[static_cast<std::size_t>(8 * ch + e)].bits);
  }
  std::set<int> chunks;
  for (int u = 0; u < ck::mla_fp8_units; ++u) {
    const std::uint8_t* src = row.data() + 16 * ck::mla_fp8_unit_source_chunk(u);
    if (ck::mla_fp8_unit_is_latent(u)) {
      const float scale = dsa::kv_fp8_row_scale(row.data(), ck::mla_fp8_unit_scale_group(u));
      for (int h = 0; h < 2; ++h) {
        const int dst = ck::mla_fp8_unit_dest_chunk(u, h);
        CHECK(chunks.insert(dst).second);
        for (int e = 0; e < 8; ++e) {
          const float v = dsa::fp8_e4m3::from_bits(src[8 * h + e]).to_float() * scale;
          got.put16(static_cast<std::size_t>(ck::mla_tile_offset(0, dst, rc) + 2 * e), dsa::bf16(v).bits);
        }
      }
    } else {
      const int dst = ck::mla_fp8_unit_dest_chunk(u, 0);
      CHECK(chunks.insert(dst).second);
      std::memcpy(got.bytes.data() + ck::mla_tile_offset(0, dst, rc), src, 16);
    }
  }
  CHECK(static_cast<int>(chunks.size()) == rc);
  CHECK(got.bytes == expect.bytes);
}

TEST_CASE("sparse MLA fast kernel: shared memory fits sm_90 with prefetching and sm_80 without") {
  constexpr int sm90 = 227 * 1024, sm80 = 163 * 1024;
  CHECK(ck::mla_fast_smem(576, false, true).bytes <= sm90);
  CHECK(ck::mla_fast_smem(576, true, true).bytes <= sm90);
  CHECK(ck::mla_fast_smem(576, false, false).bytes <= sm80);
  CHECK(ck::mla_fast_smem(576, true, false).bytes <= sm80);
  CHECK(ck::mla_fast_smem(576, false, true).bytes > sm80);
  // Every region 16-byte aligned (cp.async, uint4 stores, ldmatrix rows).
  for (const bool fp8 : {false, true}) {
    for (const bool pre : {false, true}) {
      const ck::mla_fast_smem_layout l = ck::mla_fast_smem(576, fp8, pre);
      for (const int off : {l.q, l.k0, l.k1, l.raw, l.p, l.red, l.rows, l.bytes}) CHECK(off % 16 == 0);
      CHECK(l.p >= l.k1 + ck::mla_fast_tile * 576 * 2);
    }
  }
}

// ---- lightning indexer --------------------------------------------------------------------------

namespace {

// One item of the fast indexer for one stage of rows, every warp and lane, against plain dot
// products and the plain weighted head sum. `heads` <= 64.
void replay_indexer_tile(int heads, std::uint64_t seed) {
  CAPTURE(heads);
  constexpr int NK = ck::indexer_fast_keys, D = ck::indexer_fast_dim, HM = ck::indexer_fast_max_heads;
  constexpr int SR = ck::indexer_fast_stage_rows;
  lcg g{seed};
  std::vector<std::uint8_t> kcodes(static_cast<std::size_t>(NK * D)), qcodes(static_cast<std::size_t>(SR * HM * D), 0);
  std::vector<float> kval(kcodes.size()), qval(qcodes.size(), 0.0f), w(static_cast<std::size_t>(SR * HM), 0.0f);
  for (std::size_t i = 0; i < kcodes.size(); ++i) {
    kcodes[i] = dsa::fp8_e4m3(static_cast<float>(g.next(-8, 8))).bits;
    kval[i] = dsa::fp8_e4m3::from_bits(kcodes[i]).to_float();
  }
  for (int r = 0; r < SR; ++r) {
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < D; ++i) {
        const std::size_t x = static_cast<std::size_t>((r * HM + h) * D + i);
        qcodes[x] = dsa::fp8_e4m3(static_cast<float>(g.next(-4, 4))).bits;
        qval[x] = dsa::fp8_e4m3::from_bits(qcodes[x]).to_float();
      }
      w[static_cast<std::size_t>(r * HM + h)] = static_cast<float>(g.next(-3, 3));
    }
  }

  // The key tile: chunk c of key j at indexer_key_offset (the 16-byte copies; the 4-byte copies
  // put word u of a row at indexer_key_offset(j, u / 4) + 4 (u % 4), the same bytes).
  smem kt(static_cast<std::size_t>(NK * ck::indexer_key_row_bytes));
  std::set<int> written;
  for (int j = 0; j < NK; ++j) {
    for (int c = 0; c < 8; ++c) {
      const int off = ck::indexer_key_offset(j, c);
      CHECK(written.insert(off).second);
      std::memcpy(kt.bytes.data() + off, kcodes.data() + j * D + 16 * c, 16);
    }
  }
  // The query tile (one buffer): unit (stage row · 64 + head, 16 codes c) converted pair by
  // pair (cvt.rn.f16x2.e4m3x2 of bytes 2i, 2i + 1) into chunks 2c and 2c + 1.
  smem qt(static_cast<std::size_t>(SR * HM * ck::indexer_query_row_bytes));
  std::set<int> qwritten;
  for (int row = 0; row < SR * HM; ++row) {
    for (int c = 0; c < 8; ++c) {
      for (int hh = 0; hh < 2; ++hh) {
        const int off = ck::indexer_query_offset(row, 2 * c + hh);
        CHECK(qwritten.insert(off).second);
        for (int e = 0; e < 8; ++e) {
          const float v = dsa::fp8_e4m3::from_bits(qcodes[static_cast<std::size_t>(row * D + 16 * c + 8 * hh + e)]).to_float();
          qt.put16(static_cast<std::size_t>(off + 2 * e), float_to_f16_exact(v));
        }
      }
    }
  }

  for (int sr = 0; sr < SR; ++sr) {
    std::vector<double> dots(static_cast<std::size_t>(NK * HM), NAN);
    std::vector<double> score(static_cast<std::size_t>(NK), NAN);
    for (int warp = 0; warp < ck::indexer_fast_threads / 32; ++warp) {
      // A fragments from the key tile: a[mb][slab][j][r], FP8 pairs converted exactly.
      std::uint32_t a[kLanes][2][ck::indexer_fast_slabs][4][4];
      for (int mb = 0; mb < 2; ++mb) {
        for (int slab = 0; slab < ck::indexer_fast_slabs; ++slab) {
          std::array<int, kLanes> addr0{}, addr1{};
          for (int l = 0; l < kLanes; ++l) {
            addr0[static_cast<std::size_t>(l)] = ck::indexer_key_offset(ck::indexer_a_key(warp, l, mb, 0), ck::indexer_a_chunk(l, slab));
            addr1[static_cast<std::size_t>(l)] = ck::indexer_key_offset(ck::indexer_a_key(warp, l, mb, 1), ck::indexer_a_chunk(l, slab));
          }
          check_lds128_conflict_free(addr0, "key tile, row groupID");
          check_lds128_conflict_free(addr1, "key tile, row groupID + 8");
          for (int l = 0; l < kLanes; ++l) {
            std::uint32_t ld0[4], ld1[4];
            for (int x = 0; x < 4; ++x) {
              ld0[x] = kt.u32(static_cast<std::size_t>(addr0[static_cast<std::size_t>(l)] + 4 * x));
              ld1[x] = kt.u32(static_cast<std::size_t>(addr1[static_cast<std::size_t>(l)] + 4 * x));
            }
            for (int j = 0; j < 4; ++j) {
              for (int r = 0; r < 4; ++r) {
                const std::uint32_t pair = arch::fp8_a_pair(ld0, ld1, j, r);
                const float lo = dsa::fp8_e4m3::from_bits(static_cast<std::uint8_t>(pair & 0xFF)).to_float();
                const float hi = dsa::fp8_e4m3::from_bits(static_cast<std::uint8_t>(pair >> 8)).to_float();
                a[l][mb][slab][j][r] = pack2(float_to_f16_exact(lo), float_to_f16_exact(hi));
              }
            }
          }
        }
      }
      std::array<std::array<double, 4>, kLanes> part{};  // [lane][mb * 2 + row half]
      for (int nb = 0; nb < HM / 8; ++nb) {
        if (8 * nb >= heads) break;
        std::uint32_t b[kLanes][ck::indexer_fast_slabs][4][2];
        for (int slab = 0; slab < ck::indexer_fast_slabs; ++slab) {
          for (int hh = 0; hh < 2; ++hh) {
            std::array<int, kLanes> addr{};
            for (int l = 0; l < kLanes; ++l) addr[static_cast<std::size_t>(l)] = ck::indexer_query_offset(ck::indexer_b_row(l, sr, nb), ck::indexer_b_chunk(l, slab, hh));
            check_lds128_conflict_free(addr, "query tile");
          }
          for (int l = 0; l < kLanes; ++l) {
            std::uint32_t words[8];
            for (int hh = 0; hh < 2; ++hh) {
              const int off = ck::indexer_query_offset(ck::indexer_b_row(l, sr, nb), ck::indexer_b_chunk(l, slab, hh));
              for (int x = 0; x < 4; ++x) words[4 * hh + x] = qt.u32(static_cast<std::size_t>(off + 4 * x));
            }
            for (int j = 0; j < 4; ++j) {
              for (int r = 0; r < 2; ++r) b[l][slab][j][r] = words[arch::f16_b_word(j, r)];
            }
          }
        }
        lane_acc acc[2][ck::indexer_fast_slabs] = {};
        for (int j = 0; j < 4; ++j) {
          for (int mb = 0; mb < 2; ++mb) {
            for (int slab = 0; slab < ck::indexer_fast_slabs; ++slab) {
              lane_regs4 ar{};
              lane_regs2 br{};
              for (int l = 0; l < kLanes; ++l) {
                for (int r = 0; r < 4; ++r) ar[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)] = a[l][mb][slab][j][r];
                for (int r = 0; r < 2; ++r) br[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)] = b[l][slab][j][r];
              }
              mma_model(acc[mb][slab], ar, br, half_format::f16);
            }
          }
        }
        for (int l = 0; l < kLanes; ++l) {
          for (int mb = 0; mb < 2; ++mb) {
            for (int i = 0; i < 4; ++i) {
              const double dot = static_cast<double>(acc[mb][0][static_cast<std::size_t>(l)][static_cast<std::size_t>(i)]) +
                                 acc[mb][1][static_cast<std::size_t>(l)][static_cast<std::size_t>(i)];
              const int key = ck::indexer_c_key(warp, l, mb, i), head = ck::indexer_c_head(l, nb, i);
              double& dst = dots[static_cast<std::size_t>(key * HM + head)];
              CHECK(std::isnan(dst));
              dst = dot;
              if (head < heads) {
                part[static_cast<std::size_t>(l)][static_cast<std::size_t>(2 * mb + i / 2)] +=
                    dsa::lightning_indexer_head_term(w[static_cast<std::size_t>(sr * HM + head)], static_cast<float>(dot));
              }
            }
          }
        }
      }
      // The two xor shuffles over a group's four lanes, then the store mapping.
      for (int x = 0; x < 4; ++x) {
        for (const int mask : {1, 2}) {
          std::array<double, kLanes> v{};
          for (int l = 0; l < kLanes; ++l) v[static_cast<std::size_t>(l)] = part[static_cast<std::size_t>(l)][static_cast<std::size_t>(x)] + part[static_cast<std::size_t>(l ^ mask)][static_cast<std::size_t>(x)];
          for (int l = 0; l < kLanes; ++l) part[static_cast<std::size_t>(l)][static_cast<std::size_t>(x)] = v[static_cast<std::size_t>(l)];
        }
      }
      for (int l = 0; l < kLanes; ++l) {
        const int key = ck::indexer_store_key(warp, l);
        double& dst = score[static_cast<std::size_t>(key)];
        CHECK(std::isnan(dst));
        dst = part[static_cast<std::size_t>(l)][static_cast<std::size_t>(2 * ck::indexer_store_mblock(l) + ck::indexer_store_half(l))];
        // The key the store writes is the key those accumulators held.
        CHECK(key == ck::indexer_c_key(warp, l & ~3, ck::indexer_store_mblock(l), 2 * ck::indexer_store_half(l)));
      }
    }
    for (int j = 0; j < NK; ++j) {
      double ref_score = 0.0;
      for (int h = 0; h < HM; ++h) {
        double ref = 0.0;
        for (int i = 0; i < D; ++i) ref += static_cast<double>(qval[static_cast<std::size_t>((sr * HM + h) * D + i)]) * kval[static_cast<std::size_t>(j * D + i)];
        if (8 * (h / 8) >= heads) continue;  // n-blocks past the heads are not computed
        const double got = dots[static_cast<std::size_t>(j * HM + h)];
        if (got != ref) {
          FAIL_CHECK("dot[key " << j << "][head " << h << "] (stage row " << sr << ") = " << got << ", expected " << ref);
          return;
        }
        if (h < heads) ref_score += w[static_cast<std::size_t>(sr * HM + h)] * (ref < 0 ? 0.0 : ref);
      }
      if (score[static_cast<std::size_t>(j)] != ref_score) {
        FAIL_CHECK("score[key " << j << "] (stage row " << sr << ") = " << score[static_cast<std::size_t>(j)] << ", expected " << ref_score);
        return;
      }
    }
  }
}

}  // namespace

TEST_CASE("lightning indexer fast kernel: q.k and the head sum replayed lane by lane equal plain products") {
  replay_indexer_tile(64, 11);  // V3.2
  replay_indexer_tile(7, 12);   // a partial n-block
  replay_indexer_tile(40, 13);
}

TEST_CASE("lightning indexer fast kernel: shared memory and the store mapping") {
  const ck::indexer_fast_smem_layout l = ck::indexer_fast_smem();
  for (const int off : {l.keys, l.queries, l.scale, l.slot, l.range, l.bytes}) CHECK(off % 16 == 0);
  CHECK(l.bytes <= 163 * 1024);  // sm_80's opt-in shared memory (sm_86 / sm_89's 99 KB: the exact kernel)
  // A warp's 32 stores cover its 32 keys once.
  for (int warp = 0; warp < ck::indexer_fast_threads / 32; ++warp) {
    std::set<int> keys;
    for (int lane = 0; lane < kLanes; ++lane) keys.insert(ck::indexer_store_key(warp, lane));
    CHECK(keys.size() == 32);
    CHECK(*keys.begin() == 32 * warp);
    CHECK(*keys.rbegin() == 32 * warp + 31);
  }
}
