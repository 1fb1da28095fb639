// Backends are values; ops are dispatched on their type through op_impl<Backend, OpTag>.
//
// A backend type names its memory space (views of other spaces do not convert, so mixing host
// and device memory is a compile error) and carries its execution resources: a thread count for
// the CPU, a stream for CUDA (include/dsa/cuda/backend.hpp). It holds no Eigen and no CUDA
// runtime state, so this header compiles everywhere.
#pragma once

#include <concepts>
#include <cstddef>
#include <type_traits>

#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"

DSA_NAMESPACE_BEGIN

/// How fp8_linear sums the e4m3 x e4m3 products of a 128-wide k-block (dsa/numerics/linear.hpp):
///  - exact: the exact sum (in double), rounded once to fp32. Independent of any evaluation
///    order, so bit-identical on every backend (the CUDA backend computes only this);
///  - fp32: accumulated in fp32 in ascending k from +0, each sum rounded (the products are exact
///    in fp32), as the reference's fp32 GEMM accumulator does within a block. About twice the
///    prefill throughput of exact on the CPU (fp32 instead of double lanes); still bit-identical
///    run to run, across thread counts and batch sizes, and on every CPU ISA (the order is fixed,
///    not the kernel's), but not equal to exact.
enum class fp8_dot { exact, fp32 };

/// The CPU backend. `num_threads` = 0 uses every hardware thread. Results are bit-identical for
/// every thread count: work is split over independent output rows, never over a reduction.
struct cpu_backend {
  using memory_space = host_space;
  static constexpr const char* name = "cpu";
  int num_threads = 0;
  /// Outputs of at least this many bytes are written with non-temporal stores by the kernels
  /// that support them (cpu/arch/streaming_stores.hpp): they bypass the caches, which such an
  /// output would not fit anyway, and save reading every line before writing it. 0 = the size of
  /// the last-level cache; SIZE_MAX = never. Results are the same bits either way.
  std::size_t streaming_store_bytes = 0;
  /// The k-block sum of fp8_linear (see fp8_dot). docs/decisions.md says why exact is the default.
  fp8_dot fp8_block_dot = fp8_dot::exact;
  /// Whether dsa::model::transformer packs its FP8 weights for the CPU kernels when it is built
  /// (dsa/cpu/packed_fp8_weight.hpp): the same results, a decode GEMV up to 1.4x faster, and a
  /// second copy of the FP8 weights in memory (docs/decisions.md). The ops themselves take a
  /// packed weight only when given one.
  bool pack_fp8_weights = true;
};

/// The default CPU backend value: dsa::op(dsa::cpu, ...); dsa::cpu_backend{2} for two threads.
inline constexpr cpu_backend cpu{};

/// What every backend provides.
template <class B>
concept backend = requires {
  typename B::memory_space;
  { B::name } -> std::convertible_to<const char*>;
};

/// An op's input on backend B: a view of const T in B's memory space. Written as a non-deduced
/// context so that a view of mutable T converts to it at the call.
template <class B, class T, std::size_t Rank>
using in_view = std::type_identity_t<tensor_view<const T, Rank, typename B::memory_space>>;

/// An op's output on backend B.
template <class B, class T, std::size_t Rank>
using out_view = tensor_view<T, Rank, typename B::memory_space>;

/// Implementation of op `Op` on backend `Backend`: specialised in dsa/cpu and dsa/cuda with a
/// static `run(const Backend&, ...)`. The primary template is left undefined on purpose.
template <class Backend, class Op>
struct op_impl;

/// True when op_impl<Backend, Op> is defined in this translation unit.
template <class Backend, class Op>
concept has_op_impl = requires { sizeof(op_impl<Backend, Op>); };

DSA_NAMESPACE_END
