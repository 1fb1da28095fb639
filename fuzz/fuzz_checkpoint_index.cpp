// Fuzz target: sharded-checkpoint indexes (model.safetensors.index.json) read by
// dsa::safetensors_checkpoint, beside two valid shards. Any index must either open, with every
// name of its weight map resolving to a tensor of a shard in the same directory, or be refused
// with dsa::error (in particular, no shard name may reach outside the directory) whose message is
// bounded: names and values from the index reach it dsa::quoted, at most 256 bytes each (issue 33).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "dsa/core/error.hpp"
#include "dsa/model/safetensors.hpp"
#include "fuzz_common.hpp"

namespace {

std::filesystem::path make_dir() {
  char tmpl[] = "/tmp/dsa_fuzz_index_XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) dsa_fuzz::invariant_failed("mkdtemp failed");
  const std::filesystem::path dir(tmpl);
  const std::vector<float> a = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  const std::vector<std::int32_t> b = {7, 8};
  const dsa::safetensors_entry e1{"a", dsa::dtype::f32, {2, 3}, std::as_bytes(std::span(a))};
  const dsa::safetensors_entry e2{"b", dsa::dtype::i32, {2}, std::as_bytes(std::span(b))};
  dsa::write_safetensors(dir / "model-00001-of-00002.safetensors", std::vector{e1});
  dsa::write_safetensors(dir / "model-00002-of-00002.safetensors", std::vector{e2});
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path dir = make_dir();
  const auto index = dir / "model.safetensors.index.json";
  {
    std::ofstream out(index, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) dsa_fuzz::invariant_failed("cannot write the index");
  }
  try {
    const auto c = dsa::safetensors_checkpoint::open(dir);
    DSA_FUZZ_ASSERT(c.shards().size() <= 2);
    for (std::string_view name : c.names()) {
      const dsa::tensor_info& t = c.at(name);
      DSA_FUZZ_ASSERT(t.name == name);
      DSA_FUZZ_ASSERT(c.bytes(name).size() == t.nbytes());
    }
  } catch (const dsa::error& e) {
    dsa_fuzz::check_printable(e.what());
    DSA_FUZZ_ASSERT(std::strlen(e.what()) <= 2048);
  }
  return 0;
}
