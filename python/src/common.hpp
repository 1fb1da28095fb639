// What every file of the Python binding shares: turning the Python objects an op receives
// (DLPack-capable arrays: NumPy, PyTorch, ...) into dsa::tensor_view values with clear errors,
// the CPU backend of a `threads` argument, and the dtype dispatch of the ops whose element type
// is a template parameter.
//
// The binding's C++ functions (module `dsa._core`) take every output as an argument: the Python
// layer (python/dsa/) allocates outputs in the inputs' framework and device, handles `out=`, and
// maps dtypes (ml_dtypes / torch float8) onto what is checked here. Every error raised here is a
// dsa::error, which the module maps to dsa.Error (a ValueError), with the message format of the
// C++ library: "dsa::<op>: <argument> = <value>; expected <what>".
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "dsa/core/backend.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"

namespace dsa_py {

namespace nb = nanobind;

/// An array argument as the binding holds it while an op runs: the DLPack tensor (which keeps
/// the producer's memory alive), read-only or writable.
using ro_array = nb::ndarray<nb::ro>;
using rw_array = nb::ndarray<>;

/// What kind of memory an array lives in; every array of one call must agree.
enum class device_kind { cpu, cuda };

/// How a view may be laid out: row-major and dense (the default), or with arbitrary non-negative
/// strides on the outer dimensions and unit-stride rows (rope_apply's slices, the broadcast heads
/// of sparse_mha_attention).
enum class layout { contiguous, outer_strided };

// ---- dtypes ---------------------------------------------------------------------------------

namespace dt {
using nb::dlpack::dtype_code;
inline bool is(nb::dlpack::dtype d, dtype_code code, int bits) {
  return d.code == static_cast<std::uint8_t>(code) && d.bits == bits && d.lanes == 1;
}
inline bool f32(nb::dlpack::dtype d) { return is(d, dtype_code::Float, 32); }
/// bfloat16, or uint16 holding bfloat16 bit patterns (NumPy without ml_dtypes).
inline bool bf16(nb::dlpack::dtype d) { return is(d, dtype_code::Bfloat, 16) || is(d, dtype_code::UInt, 16); }
/// float8_e4m3fn, or uint8 holding its codes.
inline bool e4m3(nb::dlpack::dtype d) { return is(d, dtype_code::Float8_E4M3FN, 8) || is(d, dtype_code::UInt, 8); }
inline bool u8(nb::dlpack::dtype d) { return is(d, dtype_code::UInt, 8); }
inline bool i32(nb::dlpack::dtype d) { return is(d, dtype_code::Int, 32); }
inline bool i64(nb::dlpack::dtype d) { return is(d, dtype_code::Int, 64); }
}  // namespace dt

/// "float32", "bfloat16", "uint8", ... for messages.
std::string dtype_name(nb::dlpack::dtype d);

/// An element of N bytes whatever its type: gather_rows copies rows bit for bit, so it gathers
/// any dtype as the raw_element of its size.
template <std::size_t N>
struct raw_element {
  alignas(N) unsigned char bytes[N];
};
template <class T>
inline constexpr bool is_raw_element = false;
template <std::size_t N>
inline constexpr bool is_raw_element<raw_element<N>> = true;

/// Whether an element of dtype `d` can be viewed as T, and what T accepts (for the message).
template <class T>
constexpr bool dtype_accepts(nb::dlpack::dtype d) {
  if constexpr (std::is_same_v<T, float>) return dt::f32(d);
  else if constexpr (std::is_same_v<T, dsa::bf16>) return dt::bf16(d);
  else if constexpr (std::is_same_v<T, dsa::fp8_e4m3>) return dt::e4m3(d);
  else if constexpr (std::is_same_v<T, std::uint8_t>) return dt::u8(d);
  else if constexpr (std::is_same_v<T, std::int32_t>) return dt::i32(d);
  else if constexpr (std::is_same_v<T, std::int64_t>) return dt::i64(d);
  else if constexpr (std::is_same_v<T, std::byte>) return dt::u8(d) || dt::is(d, dt::dtype_code::Int, 8);
  else if constexpr (is_raw_element<T>) return d.bits == 8 * sizeof(T) && d.lanes == 1;
  else return false;
}

template <class T>
constexpr const char* dtype_expected() {
  if constexpr (std::is_same_v<T, float>) return "float32";
  else if constexpr (std::is_same_v<T, dsa::bf16>) return "bfloat16 (or uint16 bfloat16 bit patterns)";
  else if constexpr (std::is_same_v<T, dsa::fp8_e4m3>) return "float8_e4m3fn (or uint8 e4m3 codes)";
  else if constexpr (std::is_same_v<T, std::uint8_t>) return "uint8";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  else if constexpr (std::is_same_v<T, std::byte>) return "uint8 (bytes)";
  else return "an element of the same size";
}

// ---- arrays ---------------------------------------------------------------------------------

/// `h` as an array (any DLPack producer or buffer), or dsa::error naming op and argument.
ro_array input_array(nb::handle h, std::string_view op, std::string_view name);
/// `h` as a writable array; a read-only one is an error.
rw_array output_array(nb::handle h, std::string_view op, std::string_view name);

/// The DLPack device type of an array as a device_kind: cpu, or cuda (CUDA and CUDA host-pinned
/// memory count as their device); anything else (ROCm, Metal, ...) is an error.
device_kind device_of(int device_type, std::string_view op, std::string_view name);
template <class A>
device_kind device_of(const A& a, std::string_view op, std::string_view name) {
  return device_of(a.device_type(), op, name);
}

/// The checks of view_of that do not depend on T: rank, dtype (`dtype_ok`, `expected`), layout
/// and the alignment of the data pointer.
void check_array(std::string_view op, std::string_view name, std::size_t ndim, const std::int64_t* shape,
                 const std::int64_t* strides, const void* data, nb::dlpack::dtype dtype, std::size_t rank,
                 bool dtype_ok, const char* expected, std::size_t align, layout lay);
template <class A>
void check_array(const A& a, std::string_view op, std::string_view name, std::size_t rank, bool dtype_ok,
                 const char* expected, std::size_t align, layout lay) {
  check_array(op, name, a.ndim(), a.shape_ptr(), a.stride_ptr(), a.data(), a.dtype(), rank, dtype_ok, expected, align,
              lay);
}

/// A dsa view of T over array `a` in memory space Space: checks the rank, the dtype (dtype_accepts),
/// the device, the layout and the alignment.
template <class T, std::size_t R, class Space = dsa::host_space, class A>
dsa::tensor_view<T, R, Space> view_of(const A& a, std::string_view op, std::string_view name,
                                      layout lay = layout::contiguous) {
  check_array(a, op, name, R, dtype_accepts<std::remove_const_t<T>>(a.dtype()),
              dtype_expected<std::remove_const_t<T>>(), alignof(T), lay);
  const device_kind want = std::is_same_v<Space, dsa::host_space> ? device_kind::cpu : device_kind::cuda;
  if (device_of(a, op, name) != want) {
    dsa::fail(op, std::string(name) + ".device", want == device_kind::cpu ? "cuda" : "cpu",
              want == device_kind::cpu
                  ? "cpu memory (this build of dsa's Python binding runs the CPU backend: copy with .cpu())"
                  : "cuda (every array of one call on the same device)");
  }
  std::array<dsa::index_t, R> extents{}, strides{};
  for (std::size_t r = 0; r < R; ++r) {
    extents[r] = static_cast<dsa::index_t>(a.shape(r));
    strides[r] = a.stride(r);
  }
  using P = std::conditional_t<std::is_const_v<T>, const void*, void*>;
  T* data = static_cast<T*>(const_cast<P>(static_cast<const void*>(a.data())));
  if (lay == layout::contiguous) return dsa::tensor_view<T, R, Space>(data, extents);
  return dsa::tensor_view<T, R, Space>(data, extents, strides);
}

/// Input view of const T (a Python object converted on the spot, kept alive by its caller's
/// reference for the duration of the call).
template <class T, std::size_t R, class Space = dsa::host_space>
struct input {
  ro_array array;
  dsa::tensor_view<const T, R, Space> view;
  input(nb::handle h, std::string_view op, std::string_view name, layout lay = layout::contiguous)
      : array(input_array(h, op, name)), view(view_of<const T, R, Space>(array, op, name, lay)) {}
};

template <class T, std::size_t R, class Space = dsa::host_space>
struct output {
  rw_array array;
  dsa::tensor_view<T, R, Space> view;
  output(nb::handle h, std::string_view op, std::string_view name, layout lay = layout::contiguous)
      : array(output_array(h, op, name)), view(view_of<T, R, Space>(array, op, name, lay)) {}
};

/// An optional input: an absent (default) view for None.
template <class T, std::size_t R, class Space = dsa::host_space>
dsa::tensor_view<const T, R, Space> optional_input(nb::handle h, ro_array& keep, std::string_view op,
                                                   std::string_view name, layout lay = layout::contiguous) {
  if (h.is_none()) return {};
  keep = input_array(h, op, name);
  return view_of<const T, R, Space>(keep, op, name, lay);
}

template <class T, std::size_t R, class Space = dsa::host_space>
dsa::tensor_view<T, R, Space> optional_output(nb::handle h, rw_array& keep, std::string_view op,
                                              std::string_view name, layout lay = layout::contiguous) {
  if (h.is_none()) return {};
  keep = output_array(h, op, name);
  return view_of<T, R, Space>(keep, op, name, lay);
}

// ---- element-type dispatch --------------------------------------------------------------------

/// Calls f(std::type_identity<float>{}) or f(std::type_identity<dsa::bf16>{}) by the dtype of
/// `a`; any other dtype is an error naming the argument.
template <class A, class F>
decltype(auto) with_float_or_bf16(const A& a, std::string_view op, std::string_view name, F&& f) {
  if (dt::f32(a.dtype())) return f(std::type_identity<float>{});
  if (dt::bf16(a.dtype())) return f(std::type_identity<dsa::bf16>{});
  dsa::fail(op, std::string(name) + ".dtype", dtype_name(a.dtype()), "float32 or bfloat16");
}

// ---- backends -------------------------------------------------------------------------------

/// The CPU backend of a `threads` argument: 0 = every hardware thread.
dsa::cpu_backend cpu_backend(int threads, std::string_view op);

/// The scope of an op's computation: the GIL is released (the views hold no Python state).
using nogil = nb::gil_scoped_release;

// ---- registration -----------------------------------------------------------------------------

void bind_hadamard(nb::module_& m);
void bind_quant(nb::module_& m);
void bind_kv_cache(nb::module_& m);
void bind_indexer(nb::module_& m);
void bind_topk(nb::module_& m);
void bind_attention(nb::module_& m);
void bind_kl_loss(nb::module_& m);
void bind_moe(nb::module_& m);
void bind_dense(nb::module_& m);
void bind_model(nb::module_& m);
void bind_validate(nb::module_& m);

}  // namespace dsa_py
