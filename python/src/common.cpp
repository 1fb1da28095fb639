// The array conversions and places of common.hpp.
#include "common.hpp"

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#ifdef DSA_PY_CUDA
#include "dsa/cuda/error.hpp"
#endif

namespace dsa_py {

std::string dtype_name(nb::dlpack::dtype d) {
  using c = nb::dlpack::dtype_code;
  std::string base;
  switch (static_cast<c>(d.code)) {
    case c::Int: base = "int"; break;
    case c::UInt: base = "uint"; break;
    case c::Float: base = "float"; break;
    case c::Bfloat: base = "bfloat"; break;
    case c::Complex: base = "complex"; break;
    case c::Bool: return "bool";
    case c::Float8_E4M3FN: return "float8_e4m3fn";
    case c::Float8_E5M2: return "float8_e5m2";
    case c::Float8_E4M3FNUZ: return "float8_e4m3fnuz";
    case c::Float8_E5M2FNUZ: return "float8_e5m2fnuz";
    case c::Float8_E8M0FNU: return "float8_e8m0fnu";
    default: base = "dtype" + std::to_string(d.code) + "_"; break;
  }
  std::string s = base + std::to_string(d.bits);
  if (d.lanes != 1) s += "x" + std::to_string(d.lanes);
  return s;
}

namespace {

constexpr const char* any_array = "an array (NumPy, PyTorch or another DLPack producer, or an object with __cuda_array_interface__)";

/// The dtype of a __cuda_array_interface__ typestr ("<f4", "|u1", ...).
std::optional<nb::dlpack::dtype> typestr_dtype(std::string_view t) {
  if (t.size() < 3 || (t[0] != '<' && t[0] != '|' && t[0] != '=')) return std::nullopt;
  using c = nb::dlpack::dtype_code;
  c code;
  switch (t[1]) {
    case 'f': code = c::Float; break;
    case 'u': code = c::UInt; break;
    case 'i': code = c::Int; break;
    case 'b': code = c::Bool; break;
    default: return std::nullopt;
  }
  int bytes = 0;
  for (char ch : t.substr(2)) {
    if (ch < '0' || ch > '9' || bytes > 64) return std::nullopt;
    bytes = bytes * 10 + (ch - '0');
  }
  if (bytes <= 0) return std::nullopt;
  nb::dlpack::dtype d;
  d.code = static_cast<std::uint8_t>(code);
  d.bits = static_cast<std::uint8_t>(8 * bytes);
  d.lanes = 1;
  return d;
}

/// The device owning a pointer of a __cuda_array_interface__ (0 where it cannot be told).
int pointer_device(const void* ptr) {
#ifdef DSA_PY_CUDA
  if (ptr != nullptr && cuda_device_count() > 0) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, ptr) == cudaSuccess && attr.device >= 0) return attr.device;
    (void)cudaGetLastError();
  }
#else
  (void)ptr;
#endif
  return 0;
}

/// An object exposing __cuda_array_interface__ (version 2 or 3: Numba, CuPy, ...) as a nanobind
/// array over its memory, kept alive by the object; nullopt when it has none. With a `stream`
/// entry (v3), the producer's work on that stream is waited for (the stream is synchronized)
/// before the op is enqueued, as the protocol asks of a consumer.
template <class Array>
std::optional<Array> from_cuda_array_interface(nb::handle h, std::string_view op, std::string_view name,
                                               bool writable) {
  nb::object cai;
  if (PyObject* o = PyObject_GetAttrString(h.ptr(), "__cuda_array_interface__")) {
    cai = nb::steal(o);
  } else {
    PyErr_Clear();
    return std::nullopt;
  }
  const std::string n(name);
  auto bad = [&](const std::string& what) -> void {
    dsa::fail(op, n + ".__cuda_array_interface__", what, "a version 2 or 3 interface dict without a mask");
  };
  if (!nb::isinstance<nb::dict>(cai)) bad("an object of type " + std::string(nb::type_name(cai.type()).c_str()));
  const nb::dict d = nb::borrow<nb::dict>(cai);
  if (!d.contains("shape") || !d.contains("typestr") || !d.contains("data")) bad("a dict without shape, typestr or data");
  if (d.contains("mask") && !d["mask"].is_none()) bad("a masked array");
  std::vector<std::size_t> shape;
  std::vector<std::int64_t> strides;
  std::string typestr;
  std::uintptr_t ptr = 0;
  bool readonly = false;
  try {
    for (nb::handle e : nb::borrow<nb::tuple>(d["shape"])) shape.push_back(nb::cast<std::size_t>(e));
    typestr = nb::cast<std::string>(d["typestr"]);
    const nb::tuple data = nb::borrow<nb::tuple>(d["data"]);
    ptr = nb::cast<std::uintptr_t>(data[0]);
    readonly = nb::cast<bool>(data[1]);
  } catch (const std::exception&) {
    bad("a dict whose shape, typestr or data are not of the protocol's types");
  }
  const auto dtype = typestr_dtype(typestr);
  if (!dtype) {
    dsa::fail(op, n + ".dtype", "typestr " + dsa::quoted(typestr), "a little-endian int, uint, float or bool typestr");
  }
  const std::int64_t item = dtype->bits / 8;
  if (d.contains("strides") && !d["strides"].is_none()) {
    std::vector<std::int64_t> bytes;
    try {
      for (nb::handle e : nb::borrow<nb::tuple>(d["strides"])) bytes.push_back(nb::cast<std::int64_t>(e));
    } catch (const std::exception&) {
      bad("a dict whose strides are not a tuple of integers");
    }
    if (bytes.size() != shape.size()) bad("a dict whose strides and shape differ in length");
    for (std::int64_t b : bytes) {
      if (b % item != 0) {
        dsa::fail(op, n + ".strides", std::to_string(b) + " bytes", "multiples of the element size");
      }
      strides.push_back(b / item);
    }
  } else {
    strides.resize(shape.size());
    std::int64_t s = 1;
    for (std::size_t r = shape.size(); r-- > 0;) {
      strides[r] = s;
      s *= static_cast<std::int64_t>(shape[r]);
    }
  }
  if (writable && readonly) dsa::fail(op, name, "a read-only array", "a writable array (it is an output)");
  if (d.contains("stream") && !d["stream"].is_none()) {
    std::uintptr_t stream = 0;
    try {
      stream = nb::cast<std::uintptr_t>(d["stream"]);
    } catch (const std::exception&) {
      bad("a dict whose stream is not an integer");
    }
    if (stream == 0) bad("stream 0 (the protocol reserves it)");
#ifdef DSA_PY_CUDA
    if (cuda_device_count() > 0) {
      nogil release;
      DSA_CUDA_CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)));
    }
#endif
  }
  using Ptr = std::conditional_t<std::is_same_v<Array, ro_array>, const void*, void*>;
  return Array(reinterpret_cast<Ptr>(ptr), shape.size(), shape.data(), h, strides.data(), *dtype,
               nb::device::cuda::value, pointer_device(reinterpret_cast<const void*>(ptr)));
}

/// What an argument that is not an importable array is, for the message: its type, and for an
/// object that offers __dlpack__ (a NumPy array of dtype object, a torch tensor that requires
/// grad, a producer whose export fails) why the export failed, in the producer's words (quoted:
/// dsa did not write them).
std::string not_an_array(nb::handle h) {
  std::string what = "an object of type " + std::string(nb::type_name(h.type()).c_str());
  PyObject* fn = PyObject_GetAttrString(h.ptr(), "__dlpack__");
  if (fn == nullptr) {
    PyErr_Clear();
    return what;
  }
  const nb::object f = nb::steal(fn);
  try {
    // The export is retried only to say why it failed; a capsule it returns is never consumed,
    // and its destructor frees the tensor as DLPack prescribes.
    const nb::object capsule = f();
    return what + " whose __dlpack__() export dsa cannot import (dtype, device or DLPack version)";
  } catch (const nb::python_error& e) {
    std::string why = nb::type_name(e.type()).c_str();
    try {
      why += ": " + dsa::quoted(nb::str(e.value()).c_str());
    } catch (const std::exception&) {
      // str() of a hostile exception may fail in turn: its type alone is said.
    }
    return what + " whose __dlpack__() raised " + why;
  }
}

}  // namespace

ro_array input_array(nb::handle h, std::string_view op, std::string_view name) {
  ro_array a;
  if (!h.is_valid() || h.is_none()) dsa::fail(op, name, "None", any_array);
  if (nb::try_cast(h, a, false)) return a;
  if (auto c = from_cuda_array_interface<ro_array>(h, op, name, false)) return *c;
  dsa::fail(op, name, not_an_array(h), any_array);
}

rw_array output_array(nb::handle h, std::string_view op, std::string_view name) {
  rw_array a;
  if (!h.is_valid() || h.is_none()) {
    dsa::fail(op, name, "None", "a writable array (NumPy, PyTorch or another DLPack producer)");
  }
  if (nb::try_cast(h, a, false)) return a;
  ro_array ro;
  if (nb::try_cast(h, ro, false)) dsa::fail(op, name, "a read-only array", "a writable array (it is an output)");
  if (auto c = from_cuda_array_interface<rw_array>(h, op, name, true)) return *c;
  dsa::fail(op, name, not_an_array(h), "a writable array (NumPy, PyTorch or another DLPack producer)");
}

device_kind device_of(int device_type, std::string_view op, std::string_view name) {
  if (device_type == nb::device::cpu::value) return device_kind::cpu;
  if (device_type == nb::device::cuda::value || device_type == nb::device::cuda_managed::value) {
    return device_kind::cuda;
  }
  dsa::fail(op, std::string(name) + ".device", "DLPack device type " + std::to_string(device_type),
            "cpu or cuda memory");
}

std::pair<device_kind, int> device_hint(nb::handle h, std::string_view op, std::string_view name) {
  if (!h.is_valid() || h.is_none()) return {device_kind::cpu, 0};
  if (PyObject* f = PyObject_GetAttrString(h.ptr(), "__dlpack_device__")) {
    const nb::object fn = nb::steal(f);
    int type = 0, id = 0;
    try {
      const nb::tuple t = nb::borrow<nb::tuple>(fn());
      type = nb::cast<int>(t[0]);
      id = nb::cast<int>(t[1]);
    } catch (const std::exception&) {
      return {device_kind::cpu, 0};  // the import reports what is wrong with it
    }
    return {device_of(type, op, name), id};
  }
  PyErr_Clear();
  if (PyObject* c = PyObject_GetAttrString(h.ptr(), "__cuda_array_interface__")) {
    Py_DECREF(c);
    // The device of the pointer; import it once here (the body imports it again, cheaply).
    const ro_array a = input_array(h, op, name);
    return {device_kind::cuda, a.device_id()};
  }
  PyErr_Clear();
  return {device_kind::cpu, 0};
}

void check_device(std::string_view op, std::string_view name, int device_type, int device_id, bool want_cuda,
                  int want_id) {
  const std::string n = std::string(name) + ".device";
  const device_kind k = device_of(device_type, op, name);
  const std::string same = " memory, like the call's first array (every array of one call on the same device)";
  if (!want_cuda) {
    if (k == device_kind::cpu) return;
#ifdef DSA_PY_CUDA
    dsa::fail(op, n, "cuda:" + std::to_string(device_id), "cpu" + same);
#else
    dsa::fail(op, n, "cuda:" + std::to_string(device_id),
              "cpu memory (this build of dsa's Python binding runs the CPU backend only: copy with .cpu(), or "
              "build it with DSA_ENABLE_CUDA=ON)");
#endif
  }
  if (k != device_kind::cuda) dsa::fail(op, n, "cpu", "cuda:" + std::to_string(want_id) + same);
  if (device_id != want_id) {
    dsa::fail(op, n, "cuda:" + std::to_string(device_id), "cuda:" + std::to_string(want_id) + same);
  }
}

void check_array(std::string_view op, std::string_view name, std::size_t ndim, const std::int64_t* shape,
                 const std::int64_t* strides, const void* data, nb::dlpack::dtype dtype, std::size_t rank,
                 bool dtype_ok, const char* expected, std::size_t align, layout lay) {
  const std::string n(name);
  if (ndim != rank) {
    dsa::fail(op, n + ".ndim", ndim, std::to_string(rank) + " (an array of rank " + std::to_string(rank) + ")");
  }
  if (!dtype_ok) dsa::fail(op, n + ".dtype", dtype_name(dtype), expected);
  std::int64_t count = 1;
  for (std::size_t r = 0; r < ndim; ++r) count *= shape[r];
  if (count == 0) return;  // no element is read or written: any strides and pointer will do
  auto shape_text = [&] {
    std::string s = "(";
    for (std::size_t r = 0; r < ndim; ++r) s += (r ? ", " : "") + std::to_string(strides[r]);
    return s + ")";
  };
  if (lay == layout::contiguous) {
    std::int64_t expect = 1;
    for (std::size_t r = ndim; r-- > 0;) {
      if (shape[r] != 1 && strides[r] != expect) {
        dsa::fail(op, n + ".strides", shape_text() + " elements",
                  "a C-contiguous (row-major, dense) array: pass np.ascontiguousarray(a) or a.contiguous()");
      }
      expect *= shape[r];
    }
  } else {
    if (shape[ndim - 1] > 1 && strides[ndim - 1] != 1) {
      dsa::fail(op, n + ".strides", shape_text() + " elements", "unit-stride rows (the last stride 1)");
    }
    for (std::size_t r = 0; r < ndim; ++r) {
      if (strides[r] < 0) dsa::fail(op, n + ".strides", shape_text() + " elements", "non-negative strides");
    }
  }
  if (reinterpret_cast<std::uintptr_t>(data) % align != 0) {
    dsa::fail(op, n + ".data", "an address not a multiple of " + std::to_string(align),
              "an array aligned for its element type");
  }
}

void check_kernels(std::string_view op, std::string_view kernels) {
  if (kernels != "fast" && kernels != "exact") {
    dsa::fail(op, "kernels", dsa::quoted(kernels),
              "None, 'fast' (tensor cores where the GPU has them) or 'exact' (the SIMT kernels, the CPU's bits)");
  }
}

dsa::cpu_backend cpu_backend(int threads, std::string_view op) {
  if (threads < 0 || threads > max_threads) {
    dsa::fail(op, "threads", threads,
              "0 (every hardware thread) or a thread count in [1, " + std::to_string(max_threads) + "]");
  }
  return dsa::cpu_backend{threads};
}

nb::tuple array_info(nb::handle h, std::string_view op, std::string_view name, std::size_t rank, bool strided) {
  const ro_array a = input_array(h, op, name);
  check_array(a, op, name, rank, true, "", 1, strided ? layout::outer_strided : layout::contiguous);
  nb::list shape;
  for (std::size_t r = 0; r < a.ndim(); ++r) shape.append(static_cast<std::int64_t>(a.shape(r)));
  return nb::make_tuple(nb::tuple(shape), dtype_name(a.dtype()));
}

}  // namespace dsa_py
