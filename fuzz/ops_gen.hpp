// The argument generator and the result invariants of the ops fuzzer, shared by its two
// translation units: fuzz_ops.cpp (the entry point and every op but one) and ops_fp8_linear.cpp
// (fp8_linear, whose vectorised kernels take as long to compile under the fuzzer's sanitizers as
// all the rest together: apart, the two compile in parallel).
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "dsa/core/backend.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/cpu/activation.hpp"
#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/cpu/hadamard.hpp"
#include "dsa/cpu/indexer_kl_loss.hpp"
#include "dsa/cpu/indexer_weights.hpp"
#include "dsa/cpu/kv_cache.hpp"
#include "dsa/cpu/lightning_indexer.hpp"
#include "dsa/cpu/linear.hpp"
#include "dsa/cpu/moe_combine.hpp"
#include "dsa/cpu/moe_routing.hpp"
#include "dsa/cpu/norm.hpp"
#include "dsa/cpu/rope.hpp"
#include "dsa/cpu/sparse_mha_attention.hpp"
#include "dsa/cpu/sparse_mla_attention.hpp"
#include "dsa/cpu/topk.hpp"
#include "dsa/ops/activation.hpp"
#include "dsa/ops/fp8_quant.hpp"
#include "dsa/ops/hadamard.hpp"
#include "dsa/ops/indexer_kl_loss.hpp"
#include "dsa/ops/indexer_weights.hpp"
#include "dsa/ops/kv_cache.hpp"
#include "dsa/ops/lightning_indexer.hpp"
#include "dsa/ops/linear.hpp"
#include "dsa/ops/moe_combine.hpp"
#include "dsa/ops/moe_routing.hpp"
#include "dsa/ops/norm.hpp"
#include "dsa/ops/rope.hpp"
#include "dsa/ops/sparse_mha_attention.hpp"
#include "dsa/ops/sparse_mla_attention.hpp"
#include "dsa/ops/topk.hpp"
#include "fuzz_common.hpp"

namespace dsa_fuzz_ops {

using dsa::bf16;
using dsa::fp8_e4m3;
using dsa::index_t;

constexpr std::int32_t i32_min = std::numeric_limits<std::int32_t>::min();
constexpr std::int32_t i32_max = std::numeric_limits<std::int32_t>::max();

/// A view over memory allocated to exactly its footprint.
template <class T, std::size_t R>
struct fz_tensor {
  std::vector<T> mem;
  dsa::host_view<T, R> view;
  index_t footprint = 0;
};

struct gen {
  FuzzedDataProvider& p;

  index_t small(index_t hi = 6) { return p.ConsumeIntegralInRange<index_t>(0, hi); }

  /// Mostly the extent the op expects; sometimes another.
  index_t dim(index_t want) {
    const int c = p.ConsumeIntegralInRange(0, 15);
    if (c < 13) return want;
    if (c == 13) return want + 1;
    if (c == 14) return want > 0 ? want - 1 : 0;
    return small(9);
  }

  float value() {
    switch (p.ConsumeIntegralInRange(0, 15)) {
      case 0: return std::numeric_limits<float>::quiet_NaN();
      case 1: return std::numeric_limits<float>::infinity();
      case 2: return -std::numeric_limits<float>::infinity();
      case 3: return -0.0f;
      case 4: return 0.0f;
      case 5: return p.ConsumeBool() ? 3.0e38f : -3.0e38f;
      case 6: return p.ConsumeBool() ? 1.0e-40f : -1.0e-40f;
      case 7: {
        const std::uint32_t bits = p.ConsumeIntegral<std::uint32_t>();
        float f;
        std::memcpy(&f, &bits, sizeof f);
        return f;
      }
      default: return p.ConsumeFloatingPointInRange<float>(-8.0f, 8.0f);
    }
  }

  template <class T>
  T element() {
    if constexpr (std::is_same_v<T, float>) {
      return value();
    } else if constexpr (std::is_same_v<T, bf16>) {
      return p.ConsumeBool() ? bf16::from_bits(p.ConsumeIntegral<std::uint16_t>()) : dsa::from_float<bf16>(value());
    } else if constexpr (std::is_same_v<T, fp8_e4m3>) {
      return fp8_e4m3::from_bits(p.ConsumeIntegral<std::uint8_t>());
    } else if constexpr (std::is_same_v<T, std::uint8_t>) {
      return p.ConsumeIntegral<std::uint8_t>();
    } else {
      static_assert(std::is_same_v<T, std::int32_t>);
      return p.ConsumeIntegral<std::int32_t>();
    }
  }

  /// An index into [0, n): mostly valid, sometimes -1, out of range or extreme.
  std::int32_t index(index_t n) {
    const int c = p.ConsumeIntegralInRange(0, 15);
    const auto clamp32 = [](index_t v) {
      return static_cast<std::int32_t>(std::min<index_t>(std::max<index_t>(v, i32_min), i32_max));
    };
    switch (c) {
      case 0: return -1;
      case 1: return -2;
      case 2: return clamp32(n);
      case 3: return clamp32(n + 1);
      case 4: return i32_min;
      case 5: return i32_max;
      default: return n > 0 ? clamp32(p.ConsumeIntegralInRange<index_t>(0, n - 1)) : -1;
    }
  }

  /// A tensor with extents near `want` and a fuzzed layout; filled by `fill(i)` per element.
  template <class T, std::size_t R, class Fill>
  fz_tensor<T, R> tensor(std::array<index_t, R> want, Fill&& fill, bool allow_absent = true) {
    fz_tensor<T, R> t;
    std::array<index_t, R> e{}, s{};
    for (std::size_t r = 0; r < R; ++r) e[r] = dim(want[r]);
    const int layout = p.ConsumeIntegralInRange(0, 15);
    // Row-major, then perturbed: padded outer strides, a broadcast dimension, a non-unit inner
    // stride, or an absent (null) view.
    index_t acc = 1;
    for (std::size_t r = R; r-- > 0;) {
      s[r] = acc;
      acc *= std::max<index_t>(e[r], 1);
      if (layout == 1 && r > 0) acc += small(3);
    }
    if (layout == 2) s[0] = 0;
    if (layout == 3) s[R - 1] = 2;
    if (layout == 4 && R > 1) s[R - 2] = 0;
    const bool absent = allow_absent && layout == 5;
    bool empty = false;
    index_t fp = 1;
    for (std::size_t r = 0; r < R; ++r) {
      if (e[r] <= 0) empty = true;  // a negative extent (from a bad config) must be refused, never allocated
      fp += (e[r] - 1) * s[r];
    }
    t.footprint = empty ? 0 : fp;
    if (absent) {
      t.view = dsa::host_view<T, R>(nullptr, e, s);
      return t;
    }
    t.mem.resize(static_cast<std::size_t>(t.footprint));
    for (index_t i = 0; i < t.footprint; ++i) t.mem[static_cast<std::size_t>(i)] = fill(i);
    t.view = dsa::host_view<T, R>(t.footprint ? t.mem.data() : nullptr, e, s);
    return t;
  }

  template <class T, std::size_t R>
  fz_tensor<T, R> values(std::array<index_t, R> want) {
    return tensor<T, R>(want, [&](index_t) { return element<T>(); });
  }
  /// An output: zero-filled.
  template <class T, std::size_t R>
  fz_tensor<T, R> output(std::array<index_t, R> want) {
    return tensor<T, R>(want, [](index_t) { return T{}; });
  }
  template <std::size_t R>
  fz_tensor<std::int32_t, R> indices(std::array<index_t, R> want, index_t n) {
    return tensor<std::int32_t, R>(want, [&](index_t) { return index(n); });
  }
  /// ranges [m, 2]: mostly 0 <= start <= end <= n.
  fz_tensor<std::int32_t, 2> ranges(index_t m, index_t n) {
    auto t = tensor<std::int32_t, 2>({m, 2}, [](index_t) { return std::int32_t{0}; });
    if (t.view.data_handle() == nullptr || t.view.extent(1) < 2) {
      for (auto& v : t.mem) v = index(n + 1);
      return t;
    }
    for (index_t i = 0; i < t.view.extent(0); ++i) {
      if (p.ConsumeIntegralInRange(0, 7) == 0) {
        t.view(i, 0) = index(n + 1);
        t.view(i, 1) = index(n + 1);
      } else {
        const index_t end = n > 0 ? p.ConsumeIntegralInRange<index_t>(0, n) : 0;
        const index_t start = p.ConsumeBool() ? 0 : p.ConsumeIntegralInRange<index_t>(0, end);
        t.view(i, 0) = static_cast<std::int32_t>(start);
        t.view(i, 1) = static_cast<std::int32_t>(end);
      }
    }
    return t;
  }
  dsa::cpu_backend backend() { return dsa::cpu_backend{p.ConsumeIntegralInRange(1, 3)}; }
};

// ---- invariants of results ----------------------------------------------------------------------

/// The top-k invariants: ascending distinct positions of the row's range, then -1 padding; every
/// position of the range is selectable, so exactly min(k, range length) are selected; and a NaN
/// score ranks above every number, so if the range holds a NaN the selection does too.
inline void check_topk_result(const dsa::host_view<const float, 2>& scores,
                              const dsa::host_view<const std::int32_t, 2>& ranges,
                              const dsa::host_view<std::int32_t, 2>& out) {
  for (index_t t = 0; t < out.extent(0); ++t) {
    const index_t start = ranges(t, 0), end = ranges(t, 1), k = out.extent(1);
    bool padding = false, nan_in_range = false, nan_selected = false;
    index_t prev = -1, selected = 0;
    for (index_t j = start; j < end; ++j) nan_in_range = nan_in_range || scores(t, j) != scores(t, j);
    for (index_t j = 0; j < k; ++j) {
      const index_t v = out(t, j);
      if (v == -1) {
        padding = true;
        continue;
      }
      DSA_FUZZ_ASSERT(!padding);  // -1 only at the end
      DSA_FUZZ_ASSERT(v >= start && v < end);
      DSA_FUZZ_ASSERT(v > prev);  // ascending, distinct
      nan_selected = nan_selected || scores(t, v) != scores(t, v);
      prev = v;
      ++selected;
    }
    DSA_FUZZ_ASSERT(selected == std::min(k, end - start));
    DSA_FUZZ_ASSERT(!nan_in_range || k == 0 || nan_selected);
  }
}

// NaN propagation (docs/decisions.md, issue 14): a NaN that an attention row reads makes that
// row's outputs NaN, never "no attention". Checked only where each output element has its own
// memory (no zero stride) and the op accepted its arguments.
// nan_checks counts the rows checked so (the search for the nan_* seeds of corpus/ops uses it).
inline std::size_t nan_checks = 0;
inline bool is_nan(float x) { return x != x; }
inline bool is_nan(bf16 x) { return (x.bits & 0x7FFF) > 0x7F80; }

template <class T, std::size_t R>
bool own_elements(const dsa::host_view<T, R>& v) {
  if (v.data_handle() == nullptr) return false;
  for (std::size_t r = 0; r < R; ++r) {
    if (v.stride(r) == 0) return false;
  }
  return true;
}

template <class Out>
void check_attention_row_nan(index_t t, index_t hh, bool reads_nan, const dsa::host_view<Out, 3>& out,
                             const dsa::host_view<float, 2>& lse) {
  if (!reads_nan) return;
  ++nan_checks;
  if (own_elements(lse)) DSA_FUZZ_ASSERT(is_nan(lse(t, hh)));
  if (own_elements(out)) {
    for (index_t c = 0; c < out.extent(2); ++c) DSA_FUZZ_ASSERT(is_nan(out(t, hh, c)));
  }
}

/// fp8_linear on fuzzed arguments, `t` rows (ops_fp8_linear.cpp).
void fuzz_fp8_linear(gen& g, index_t t);

}  // namespace dsa_fuzz_ops
