// The array conversions of common.hpp.
#include "common.hpp"

#include <string>

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

ro_array input_array(nb::handle h, std::string_view op, std::string_view name) {
  ro_array a;
  if (!h.is_valid() || h.is_none()) {
    dsa::fail(op, name, "None", "an array (NumPy, PyTorch or another DLPack producer)");
  }
  if (!nb::try_cast(h, a, false)) {
    dsa::fail(op, name, "an object of type " + std::string(nb::type_name(h.type()).c_str()),
              "an array (NumPy, PyTorch or another DLPack producer)");
  }
  return a;
}

rw_array output_array(nb::handle h, std::string_view op, std::string_view name) {
  rw_array a;
  if (!h.is_valid() || h.is_none()) {
    dsa::fail(op, name, "None", "a writable array (NumPy, PyTorch or another DLPack producer)");
  }
  if (!nb::try_cast(h, a, false)) {
    ro_array ro;
    if (nb::try_cast(h, ro, false)) dsa::fail(op, name, "a read-only array", "a writable array (it is an output)");
    dsa::fail(op, name, "an object of type " + std::string(nb::type_name(h.type()).c_str()),
              "a writable array (NumPy, PyTorch or another DLPack producer)");
  }
  return a;
}

device_kind device_of(int device_type, std::string_view op, std::string_view name) {
  if (device_type == nb::device::cpu::value) return device_kind::cpu;
  if (device_type == nb::device::cuda::value || device_type == nb::device::cuda_managed::value) {
    return device_kind::cuda;
  }
  dsa::fail(op, std::string(name) + ".device", "DLPack device type " + std::to_string(device_type),
            "cpu or cuda memory");
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

dsa::cpu_backend cpu_backend(int threads, std::string_view op) {
  if (threads < 0 || threads > 4096) {
    dsa::fail(op, "threads", threads, "0 (every hardware thread) or a thread count in [1, 4096]");
  }
  return dsa::cpu_backend{threads};
}

}  // namespace dsa_py
