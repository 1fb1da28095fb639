// Editable copies of the golden tiny checkpoint (tests/data/tiny-dsv32) for tests that need a
// broken or hostile one: a temporary directory, the checkpoint's tensors as writer entries
// (borrowing the mapped source file) with replace / patch / remove, and the writer of a
// checkpoint directory with an optionally edited config.json.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "dsa/model/safetensors.hpp"

namespace dsa_test {

inline const std::filesystem::path tiny_dir = std::filesystem::path(DSA_TEST_DATA_DIR) / "tiny-dsv32";

/// A fresh directory under the system's temporary directory, removed with its contents.
struct temp_dir {
  std::filesystem::path path;
  explicit temp_dir(const std::string& tag = "dsa_test") {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           (tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_text(const std::filesystem::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(s.data(), static_cast<std::streamsize>(s.size()));
  REQUIRE(out.good());
}

/// The tiny checkpoint's tensors as writer entries, plus owned storage for the tensors a test
/// replaces or adds.
struct checkpoint_tensors {
  dsa::safetensors_file src = dsa::safetensors_file::open(tiny_dir / "model.safetensors");
  std::vector<dsa::safetensors_entry> entries;
  std::vector<std::vector<std::byte>> owned;

  checkpoint_tensors() {
    for (const dsa::tensor_info& t : src.tensors()) entries.push_back({t.name, t.type, t.shape, src.bytes(t)});
  }
  dsa::safetensors_entry* find(const std::string& name) {
    for (auto& e : entries) {
      if (e.name == name) return &e;
    }
    FAIL("no tensor " << name);
    return nullptr;
  }
  void remove(const std::string& name) {
    find(name);
    std::erase_if(entries, [&](const dsa::safetensors_entry& e) { return e.name == name; });
  }
  /// Replaces (or adds) a tensor with `bytes` filled with `fill`.
  void set(const std::string& name, dsa::dtype type, std::vector<dsa::index_t> shape, std::uint8_t fill = 0) {
    std::size_t n = dsa::dtype_size(type);
    for (dsa::index_t d : shape) n *= static_cast<std::size_t>(d);
    owned.emplace_back(n, static_cast<std::byte>(fill));
    const std::span<const std::byte> data(owned.back());
    for (auto& e : entries) {
      if (e.name == name) {
        e = {name, type, std::move(shape), data};
        return;
      }
    }
    entries.push_back({name, type, std::move(shape), data});
  }
  /// Replaces a tensor with a copy whose bytes at `offset` are `patch`.
  void patch(const std::string& name, std::size_t offset, std::span<const std::byte> patch_bytes) {
    dsa::safetensors_entry* e = find(name);
    owned.emplace_back(e->data.begin(), e->data.end());
    REQUIRE(offset + patch_bytes.size() <= owned.back().size());
    std::copy(patch_bytes.begin(), patch_bytes.end(), owned.back().begin() + static_cast<std::ptrdiff_t>(offset));
    e->data = std::span<const std::byte>(owned.back());
  }
  /// Replaces a tensor with a copy whose every element (of `elem` bytes) is `value`.
  void fill(const std::string& name, std::span<const std::byte> value) {
    dsa::safetensors_entry* e = find(name);
    REQUIRE(value.size() == dsa::dtype_size(e->type));
    owned.emplace_back(e->data.size());
    for (std::size_t i = 0; i < owned.back().size(); i += value.size()) {
      std::copy(value.begin(), value.end(), owned.back().begin() + static_cast<std::ptrdiff_t>(i));
    }
    e->data = std::span<const std::byte>(owned.back());
  }
};

/// A checkpoint directory: config.json (optionally edited) and model.safetensors from `t`.
inline void write_checkpoint(const std::filesystem::path& dir, const checkpoint_tensors& t,
                             const std::function<void(nlohmann::json&)>& edit_config = {}) {
  nlohmann::json cfg = nlohmann::json::parse(read_text(tiny_dir / "config.json"));
  if (edit_config) edit_config(cfg);
  write_text(dir / "config.json", cfg.dump(2));
  dsa::write_safetensors(dir / "model.safetensors", t.entries);
}

}  // namespace dsa_test
