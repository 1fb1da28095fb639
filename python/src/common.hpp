// What every file of the Python binding shares: turning the Python objects an op receives
// (DLPack-capable arrays: NumPy, PyTorch, ...; objects with __cuda_array_interface__) into
// dsa::tensor_view values with clear errors, the place an op runs (the CPU backend with its
// thread count, or, in a build with DSA_ENABLE_CUDA, the CUDA backend on a device and a stream),
// and the dtype dispatch of the ops whose element type is a template parameter.
//
// The binding's C++ functions (module `dsa._core`) take every output as an argument: the Python
// layer (python/dsa/) allocates outputs in the inputs' framework and device, handles `out=`,
// picks the stream, and maps dtypes (ml_dtypes / torch float8) onto what is checked here. Every
// error raised here is a dsa::error, which the module maps to dsa.Error (a ValueError), with the
// message format of the C++ library: "dsa::<op>: <argument> = <value>; expected <what>".
//
// An op is written once for both places: on_device_of() picks the place from the first array
// argument and calls the op's body with it (a generic lambda); the body builds its views in the
// place's memory space (in/out/view_of check every array against the place), then
// `p.run([&](const auto& be) { dsa::op(be, views...); })` releases the GIL and calls dsa::<op> on
// the backend. On the CPU the op compiles here (dsa/cpu/*.hpp); on CUDA the call goes to the
// instance nvcc compiled into the module (instances/cuda_ops_<family>.cu), which dsa/cuda/ops.hpp
// declares extern (dsa/core/op_instances.hpp): an argument type no instance list names fails to
// compile, not to import.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "dsa/core/backend.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/quote.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"

#ifdef DSA_PY_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "dsa/cuda/backend.hpp"
#include "dsa/cuda/ops.hpp"
#endif

namespace dsa_py {

namespace nb = nanobind;

/// A path argument of `op`, refused when it holds a NUL: a Python str may hold one, which would
/// cut the path the C library opens (another file or directory).
inline std::filesystem::path path_arg(std::string_view op, std::string_view arg, const std::string& s) {
  if (s.find('\0') != std::string::npos) dsa::fail(op, arg, dsa::quoted(s), "a path without NUL characters");
  return std::filesystem::path(s);
}

/// An array argument as the binding holds it while an op runs: the DLPack tensor (which keeps
/// the producer's memory alive), read-only or writable.
using ro_array = nb::ndarray<nb::ro>;
using rw_array = nb::ndarray<>;

/// An element of N bytes whatever its dtype, for the dtype check of view_of: gather_rows copies
/// rows bit for bit, so the binding gathers every dtype as the unsigned integer of its size
/// (raw_uint<N>, a type gather_rows' instance list names, dsa/ops/topk.hpp).
template <std::size_t N>
struct raw_element {};
template <class T>
inline constexpr std::size_t raw_element_bytes = 0;
template <std::size_t N>
inline constexpr std::size_t raw_element_bytes<raw_element<N>> = N;
template <std::size_t N>
using raw_uint = std::conditional_t<N == 1, std::uint8_t,
                                    std::conditional_t<N == 2, std::uint16_t,
                                                       std::conditional_t<N == 4, std::uint32_t, std::uint64_t>>>;

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
  else if constexpr (raw_element_bytes<T> > 0) return d.bits == 8 * raw_element_bytes<T> && d.lanes == 1;
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

// ---- places -----------------------------------------------------------------------------------

/// Where one call runs: on the CPU backend (host memory)...
struct host_place {
  using space = dsa::host_space;
  std::string_view op;
  dsa::cpu_backend be;

  /// f(backend) with the GIL released (the views hold no Python state).
  template <class F>
  void run(F&& f) const {
    const nb::gil_scoped_release release;
    f(be);
  }
  /// The same for the ops that need a cuBLAS handle on the CUDA backend.
  template <class F>
  void run_blas(F&& f) const {
    run(std::forward<F>(f));
  }
};

#ifdef DSA_PY_CUDA
/// Makes `device` the current CUDA device for its lifetime (restoring the previous one), or
/// throws dsa::error when the process sees no such device (none at all: no GPU, no driver).
class device_scope {
 public:
  device_scope(std::string_view op, int device);
  ~device_scope();
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;

 private:
  int previous_ = -1;
};

/// This thread's cuBLAS handle for `device` (the current device), created on first use. Handles
/// are never destroyed: a thread that ends returns its handles to a per-device pool, which the
/// next thread reuses (cuBLAS allows one handle in one thread at a time, and destroying handles
/// at interpreter exit races the CUDA runtime's own teardown).
cublasHandle_t thread_cublas_handle(int device);

/// ... or on the CUDA backend: `device` (the arrays' DLPack device id) and `stream` (the
/// Python layer's choice: `stream=`, else torch's current stream for torch tensors, else the
/// legacy default stream 0). Launches are asynchronous, like any CUDA op.
struct cuda_place {
  using space = dsa::device_space;
  std::string_view op;
  int device;
  cudaStream_t stream;
  /// The kernels of the ops that have two (the Python layer's `kernels=`; with_kernels).
  dsa::cuda_kernel_path kernels = dsa::default_cuda_kernel_path;

  template <class F>
  void run(F&& f) const {
    const nb::gil_scoped_release release;
    const device_scope scope(op, device);
    f(dsa::cuda_backend{stream, nullptr, dsa::cuda_linear_path::cublas, kernels});
  }
  template <class F>
  void run_blas(F&& f) const {
    const nb::gil_scoped_release release;
    const device_scope scope(op, device);
    f(dsa::cuda_backend{stream, thread_cublas_handle(device), dsa::cuda_linear_path::cublas, kernels});
  }
};

/// The number of CUDA devices this process sees (0 without a GPU or driver; never throws).
int cuda_device_count() noexcept;
#endif

template <class P>
inline constexpr bool is_cuda_place = !std::is_same_v<typename P::space, dsa::host_space>;

/// Checks a `kernels` argument of the ops with two CUDA kernels ("fast" or "exact"; the Python
/// layer checked it already, with the same message).
void check_kernels(std::string_view op, std::string_view kernels);

#ifdef DSA_PY_CUDA
/// The CUDA kernels a `kernels` argument names (checked as check_kernels does).
inline dsa::cuda_kernel_path kernel_path(std::string_view op, std::string_view kernels) {
  check_kernels(op, kernels);
  return kernels == "exact" ? dsa::cuda_kernel_path::exact : dsa::cuda_kernel_path::fast;
}
#endif

/// `p` running the kernels `kernels` names ("fast" or "exact"; checked): a CUDA place with its
/// backend's kernels set, a host place as it is (the CPU has one set of kernels).
template <class P>
P with_kernels(const P& p, std::string_view kernels) {
  P c = p;
#ifdef DSA_PY_CUDA
  if constexpr (is_cuda_place<P>) {
    c.kernels = kernel_path(p.op, kernels);
    return c;
  }
#endif
  check_kernels(p.op, kernels);
  return c;
}

// ---- arrays ---------------------------------------------------------------------------------

/// `h` as an array (any DLPack producer, buffer, or object with __cuda_array_interface__), or
/// dsa::error naming op and argument.
ro_array input_array(nb::handle h, std::string_view op, std::string_view name);
/// `h` as a writable array; a read-only one is an error.
rw_array output_array(nb::handle h, std::string_view op, std::string_view name);

/// The DLPack device type of an array as a device_kind: cpu, or cuda (CUDA and CUDA managed
/// memory); anything else (ROCm, Metal, CUDA host-pinned, ...) is an error.
device_kind device_of(int device_type, std::string_view op, std::string_view name);

/// The device of an argument without importing it (its __dlpack_device__, or
/// __cuda_array_interface__; anything else counts as cpu and is checked when it is imported):
/// the kind and the device id.
std::pair<device_kind, int> device_hint(nb::handle h, std::string_view op, std::string_view name);

/// The most CPU threads one call may ask for (as the tools' --threads): a larger count is a typo
/// or an attack, not a machine. The Python layer refuses it already at dsa.set_num_threads().
inline constexpr int max_threads = 4096;

/// The CPU backend of a `threads` argument: 0 = every hardware thread, else 1..max_threads.
dsa::cpu_backend cpu_backend(int threads, std::string_view op);

/// What the Python layer may know of an array argument before it allocates anything from its
/// shape: `h` imported exactly as an op imports it (input_array), its rank checked (`rank`) and
/// its layout (contiguous, or outer_strided when `strided`), as view_of does, with the same
/// messages. Returns (shape, dtype name). The shape of an object that is not a NumPy array or a
/// torch tensor is only trusted through this import: its own `.shape` may say anything.
nb::tuple array_info(nb::handle h, std::string_view op, std::string_view name, std::size_t rank, bool strided);

/// Calls f(place) with the place of the call: the CUDA backend on the device of `first` (the
/// op's first array argument) and `stream` when `first` is CUDA memory in a build with CUDA,
/// else the CPU backend with `threads` (then `stream` must be 0). Every other array is checked
/// against that place when its view is made.
template <class F>
void on_device_of(nb::handle first, std::string_view op, std::string_view first_name, int threads,
                  std::uintptr_t stream, F&& f) {
  const dsa::cpu_backend be = cpu_backend(threads, op);
  const auto [kind, device] = device_hint(first, op, first_name);
#ifdef DSA_PY_CUDA
  if (kind == device_kind::cuda) {
    f(cuda_place{op, device, reinterpret_cast<cudaStream_t>(stream)});
    return;
  }
#else
  (void)device;
#endif
  if (kind == device_kind::cpu && stream != 0) {
    dsa::fail(op, "stream", stream, "None: " + std::string(first_name) + " is in CPU memory (streams are for CUDA arrays)");
  }
  f(host_place{op, be});
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

/// That an array of DLPack device (`device_type`, `device_id`) is where place `p` runs.
void check_device(std::string_view op, std::string_view name, int device_type, int device_id, bool want_cuda,
                  int want_id);

/// A dsa view of T over array `a` in the memory space of place `p`: checks the rank, the dtype
/// (dtype_accepts<Accept>: T's, or raw_element<N>'s for a bit-for-bit view), the device (the
/// place's), the layout and the alignment.
template <class T, std::size_t R, class Accept = std::remove_const_t<T>, class P, class A>
dsa::tensor_view<T, R, typename P::space> view_of(const P& p, const A& a, std::string_view name,
                                                  layout lay = layout::contiguous) {
  using Space = typename P::space;
  check_array(a, p.op, name, R, dtype_accepts<Accept>(a.dtype()), dtype_expected<Accept>(), alignof(T), lay);
  if constexpr (is_cuda_place<P>) {
    check_device(p.op, name, a.device_type(), a.device_id(), true, p.device);
  } else {
    check_device(p.op, name, a.device_type(), a.device_id(), false, 0);
  }
  std::array<dsa::index_t, R> extents{}, strides{};
  for (std::size_t r = 0; r < R; ++r) {
    extents[r] = static_cast<dsa::index_t>(a.shape(r));
    strides[r] = a.stride(r);
  }
  using Ptr = std::conditional_t<std::is_const_v<T>, const void*, void*>;
  T* data = static_cast<T*>(const_cast<Ptr>(static_cast<const void*>(a.data())));
  if (lay == layout::contiguous) return dsa::tensor_view<T, R, Space>(data, extents);
  return dsa::tensor_view<T, R, Space>(data, extents, strides);
}

/// An input argument: the array (kept alive for the call) and its view of const T.
template <class T, std::size_t R, class Space>
struct input {
  ro_array array;
  dsa::tensor_view<const T, R, Space> view;
};

template <class T, std::size_t R, class Space>
struct output {
  rw_array array;
  dsa::tensor_view<T, R, Space> view;
};

/// Input argument `name` (Python object `h`) of an op running at place `p`.
template <class T, std::size_t R, class P>
input<T, R, typename P::space> in(const P& p, nb::handle h, std::string_view name, layout lay = layout::contiguous) {
  ro_array a = input_array(h, p.op, name);
  const auto v = view_of<const T, R>(p, a, name, lay);
  return {std::move(a), v};
}

template <class T, std::size_t R, class P>
output<T, R, typename P::space> out(const P& p, nb::handle h, std::string_view name, layout lay = layout::contiguous) {
  rw_array a = output_array(h, p.op, name);
  const auto v = view_of<T, R>(p, a, name, lay);
  return {std::move(a), v};
}

/// An optional input: an absent (default) view for None; `keep` holds the array.
template <class T, std::size_t R, class P>
dsa::tensor_view<const T, R, typename P::space> optional_in(const P& p, nb::handle h, ro_array& keep,
                                                            std::string_view name, layout lay = layout::contiguous) {
  if (h.is_none()) return {};
  keep = input_array(h, p.op, name);
  return view_of<const T, R>(p, keep, name, lay);
}

template <class T, std::size_t R, class P>
dsa::tensor_view<T, R, typename P::space> optional_out(const P& p, nb::handle h, rw_array& keep, std::string_view name,
                                                       layout lay = layout::contiguous) {
  if (h.is_none()) return {};
  keep = output_array(h, p.op, name);
  return view_of<T, R>(p, keep, name, lay);
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

/// A scope with the GIL released (the views hold no Python state).
using nogil = nb::gil_scoped_release;

// ---- registration -----------------------------------------------------------------------------

/// An array argument of a bound function: None is let through to input_array / output_array,
/// which refuse it (or, for an optional one, take it) with the op's message, where nanobind would
/// raise a TypeError naming no argument.
inline auto array(const char* name) { return nb::arg(name).none(); }

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
