// Fuzz target: the safetensors reader (dsa/model/safetensors.hpp) on arbitrary file contents.
//
// Any input must either open, with every tensor's bytes inside the file and every typed view
// consistent with its header, or be refused with dsa::error. A file that opens must also survive
// a round trip through the writer: write_safetensors of its tensors, reopened, gives the same
// names, dtypes, shapes, bytes and metadata.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "dsa/core/error.hpp"
#include "dsa/core/types.hpp"
#include "dsa/model/safetensors.hpp"
#include "fuzz_common.hpp"

namespace {

// Reads every element through a typed view of rank R when the header says the tensor has it.
template <class T, std::size_t R>
void touch_view(const dsa::safetensors_file& f, const dsa::tensor_info& t) {
  try {
    const auto v = f.view<T, R>(t);
    DSA_FUZZ_ASSERT(static_cast<std::uint64_t>(v.size()) == t.numel());
    const auto* p = reinterpret_cast<const unsigned char*>(v.data_handle());
    unsigned sum = 0;
    for (std::uint64_t i = 0; i < t.nbytes(); ++i) sum += p[i];
    (void)sum;
  } catch (const dsa::error& e) {
    dsa_fuzz::check_printable(e.what());
    // A rank, dtype or alignment the view refuses.
  }
}

template <class T>
void touch_views(const dsa::safetensors_file& f, const dsa::tensor_info& t) {
  switch (t.rank()) {
    case 1: touch_view<T, 1>(f, t); break;
    case 2: touch_view<T, 2>(f, t); break;
    case 3: touch_view<T, 3>(f, t); break;
    default: touch_view<T, 4>(f, t); break;  // any other rank must be refused
  }
}

void touch(const dsa::safetensors_file& f, const dsa::tensor_info& t) {
  DSA_FUZZ_ASSERT(t.begin <= t.end);
  DSA_FUZZ_ASSERT(f.data_offset() + t.end <= f.file_size());
  DSA_FUZZ_ASSERT(t.nbytes() == t.numel() * dsa::dtype_size(t.type));
  const auto b = f.bytes(t);
  unsigned sum = 0;
  for (std::byte x : b) sum += static_cast<unsigned>(x);
  (void)sum;
  switch (t.type) {
    case dsa::dtype::f8_e4m3: touch_views<dsa::fp8_e4m3>(f, t); break;
    case dsa::dtype::bf16: touch_views<dsa::bf16>(f, t); break;
    case dsa::dtype::f32: touch_views<float>(f, t); break;
    case dsa::dtype::f64: touch_views<double>(f, t); break;
    case dsa::dtype::i32: touch_views<std::int32_t>(f, t); break;
    case dsa::dtype::i64: touch_views<std::int64_t>(f, t); break;
    case dsa::dtype::u8: touch_views<std::uint8_t>(f, t); break;
    case dsa::dtype::boolean: touch_views<bool>(f, t); break;
    default: break;
  }
  // A view of the wrong dtype is refused, never reinterpreted.
  if (t.type != dsa::dtype::f32) {
    bool refused = false;
    try {
      (void)f.view<float, 1>(t);
    } catch (const dsa::error& e) {
      dsa_fuzz::check_printable(e.what());
      refused = true;
    }
    DSA_FUZZ_ASSERT(refused);
  }
}

void round_trip(const dsa::safetensors_file& f) {
  static const std::filesystem::path dir = [] {
    char tmpl[] = "/tmp/dsa_fuzz_safetensors_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) dsa_fuzz::invariant_failed("mkdtemp failed");
    return std::filesystem::path(tmpl);
  }();
  std::vector<dsa::safetensors_entry> entries;
  for (const dsa::tensor_info& t : f.tensors()) entries.push_back({t.name, t.type, t.shape, f.bytes(t)});
  const auto out = dir / "round_trip.safetensors";
  dsa::write_safetensors(out, entries, f.metadata());
  const auto g = dsa::safetensors_file::open(out);
  DSA_FUZZ_ASSERT(g.tensors().size() == f.tensors().size());
  DSA_FUZZ_ASSERT(g.metadata() == f.metadata());
  for (const dsa::tensor_info& t : f.tensors()) {
    const dsa::tensor_info* u = g.find(t.name);
    DSA_FUZZ_ASSERT(u != nullptr);
    DSA_FUZZ_ASSERT(u->type == t.type && u->shape == t.shape);
    const auto a = f.bytes(t), b = g.bytes(*u);
    DSA_FUZZ_ASSERT(a.size() == b.size());
    DSA_FUZZ_ASSERT(a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static dsa_fuzz::memfd_file file("dsa_fuzz_safetensors");
  const std::string& path = file.write(data, size);
  try {
    const auto f = dsa::safetensors_file::open(path);
    for (const dsa::tensor_info& t : f.tensors()) {
      touch(f, t);
      DSA_FUZZ_ASSERT(f.find(t.name) == &t);
    }
    DSA_FUZZ_ASSERT(!f.contains("__metadata__"));
    round_trip(f);
  } catch (const dsa::error& e) {
    dsa_fuzz::check_printable(e.what());
    // Refused with a message: the expected outcome for a malformed file.
  }
  return 0;
}
