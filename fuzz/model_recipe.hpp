// The input format of fuzz_model: a recipe of edits to a base checkpoint, and its encoder (for the
// seed corpus). A recipe is a sequence of records, each an op byte and its fields (integers
// little-endian); decoding stops at the first incomplete record:
//
//   0 set a config key:   key (u8 length + bytes), kind u8: 0 int (i64), 1 number (f64),
//                         2 bool (u8), 3 string (u16 length + bytes), 4 remove the key
//   1 fill a tensor:      index u16 (mod the tensor count), value (4 bytes: the first
//                         dtype_size of them are every element)
//   2 patch a tensor:     index u16, offset u32 (mod its size), u8 length + bytes
//   3 remove a tensor:    index u16
//   4 add a tensor:       name (u8 length + bytes), dtype u8, rank u8 (0..3), dims u8 each
//                         (0..63), fill byte
//   5 rename a tensor:    index u16, name (u8 length + bytes)
//
// Sizes stay small (each added tensor at most 63^3 elements) so one run is milliseconds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "dsa/core/error.hpp"
#include "dsa/model/safetensors.hpp"

namespace dsa_fuzz {

/// The checkpoint a recipe edits: its config.json and tensors, read once.
struct model_base {
  nlohmann::json config;
  dsa::safetensors_file file;
  explicit model_base(const std::filesystem::path& dir)
      : config(nlohmann::json::parse(std::ifstream(dir / "config.json"))),
        file(dsa::safetensors_file::open(dir / "model.safetensors")) {}
};

enum class recipe_op : std::uint8_t { set_key = 0, fill = 1, patch = 2, remove = 3, add = 4, rename = 5 };

class recipe_reader {
 public:
  explicit recipe_reader(std::span<const std::uint8_t> in) : in_(in) {}
  bool done() const { return pos_ >= in_.size(); }
  bool ok() const { return ok_; }
  std::uint64_t uint(int bytes) {
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(byte()) << (8 * i);
    return v;
  }
  std::uint8_t byte() {
    if (pos_ >= in_.size()) {
      ok_ = false;
      return 0;
    }
    return in_[pos_++];
  }
  std::string text(int length_bytes) {
    const std::size_t n = static_cast<std::size_t>(uint(length_bytes));
    if (!ok_ || in_.size() - pos_ < n) {
      ok_ = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  std::span<const std::uint8_t> in_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

/// Writes `base` edited by `recipe` to dir/config.json and dir/model.safetensors; false when the
/// edited tensors cannot be written (a duplicate name after a rename, say).
inline bool write_recipe_checkpoint(const model_base& base, std::span<const std::uint8_t> recipe,
                                    const std::filesystem::path& dir) {
  nlohmann::json cfg = base.config;
  std::vector<dsa::safetensors_entry> entries;
  for (const dsa::tensor_info& t : base.file.tensors()) entries.push_back({t.name, t.type, t.shape, base.file.bytes(t)});
  std::vector<std::vector<std::byte>> owned;
  recipe_reader r(recipe);
  auto owned_copy = [&](dsa::safetensors_entry& e) -> std::vector<std::byte>& {
    owned.emplace_back(e.data.begin(), e.data.end());
    e.data = std::span<const std::byte>(owned.back());
    return owned.back();
  };
  auto pick = [&]() -> dsa::safetensors_entry* {
    const auto i = r.uint(2);
    return entries.empty() || !r.ok() ? nullptr : &entries[i % entries.size()];
  };
  while (!r.done() && r.ok()) {
    switch (static_cast<recipe_op>(r.byte() % 6)) {
      case recipe_op::set_key: {
        const std::string key = r.text(1);
        const int kind = r.byte() % 5;
        if (!r.ok()) break;
        if (kind == 0) cfg[key] = static_cast<std::int64_t>(r.uint(8));
        if (kind == 1) {
          const std::uint64_t bits = r.uint(8);
          double v;
          std::memcpy(&v, &bits, 8);
          cfg[key] = v;  // nlohmann writes NaN/inf as null
        }
        if (kind == 2) cfg[key] = (r.byte() & 1) != 0;
        if (kind == 3) cfg[key] = r.text(2);
        if (kind == 4) cfg.erase(key);
        break;
      }
      case recipe_op::fill: {
        dsa::safetensors_entry* e = pick();
        std::uint8_t v[4] = {r.byte(), r.byte(), r.byte(), r.byte()};
        if (!e || !r.ok()) break;
        std::vector<std::byte>& b = owned_copy(*e);
        const std::size_t es = dsa::dtype_size(e->type);
        for (std::size_t i = 0; i + es <= b.size(); i += es) std::memcpy(b.data() + i, v, std::min<std::size_t>(es, 4));
        break;
      }
      case recipe_op::patch: {
        dsa::safetensors_entry* e = pick();
        const auto offset = r.uint(4);
        const std::string bytes = r.text(1);
        if (!e || !r.ok() || e->data.empty()) break;
        std::vector<std::byte>& b = owned_copy(*e);
        for (std::size_t i = 0; i < bytes.size(); ++i) b[(offset + i) % b.size()] = static_cast<std::byte>(bytes[i]);
        break;
      }
      case recipe_op::remove: {
        dsa::safetensors_entry* e = pick();
        if (e) entries.erase(entries.begin() + (e - entries.data()));
        break;
      }
      case recipe_op::add: {
        const std::string name = r.text(1);
        const auto type = static_cast<dsa::dtype>(r.byte() % 12);
        const int rank = r.byte() % 4;
        std::vector<dsa::index_t> shape;
        std::size_t n = 1;
        for (int d = 0; d < rank; ++d) {
          shape.push_back(r.byte() % 64);
          n *= static_cast<std::size_t>(shape.back());
        }
        const auto fill = static_cast<std::byte>(r.byte());
        if (!r.ok()) break;
        owned.emplace_back(n * dsa::dtype_size(type), fill);
        entries.push_back({name, type, shape, std::span<const std::byte>(owned.back())});
        break;
      }
      case recipe_op::rename: {
        dsa::safetensors_entry* e = pick();
        const std::string name = r.text(1);
        if (e && r.ok()) e->name = name;
        break;
      }
    }
  }
  try {
    // Invalid UTF-8 in a key or string becomes U+FFFD (JSON cannot hold it); control characters
    // are written as \u escapes, which the loader decodes back to the raw bytes.
    std::ofstream(dir / "config.json", std::ios::binary | std::ios::trunc)
        << cfg.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
    dsa::write_safetensors(dir / "model.safetensors", entries);
  } catch (const dsa::error&) {
    return false;
  }
  return true;
}

/// Builds recipes (the seed corpus).
class recipe_writer {
 public:
  recipe_writer& set_int(const std::string& key, std::int64_t v) {
    op(recipe_op::set_key).text(key, 1).u(0, 1).u(static_cast<std::uint64_t>(v), 8);
    return *this;
  }
  recipe_writer& set_bool(const std::string& key, bool v) {
    op(recipe_op::set_key).text(key, 1).u(2, 1).u(v ? 1 : 0, 1);
    return *this;
  }
  recipe_writer& set_string(const std::string& key, const std::string& v) {
    op(recipe_op::set_key).text(key, 1).u(3, 1).text(v, 2);
    return *this;
  }
  /// Fills tensor `index` (in the base file's order) with the element bytes `value`.
  recipe_writer& fill(std::uint16_t index, std::uint32_t value) {
    op(recipe_op::fill).u(index, 2).u(value, 4);
    return *this;
  }
  recipe_writer& add(const std::string& name, dsa::dtype type, std::vector<std::uint8_t> dims, std::uint8_t fill) {
    op(recipe_op::add).text(name, 1).u(static_cast<std::uint8_t>(type), 1).u(dims.size(), 1);
    for (const auto d : dims) u(d, 1);
    return u(fill, 1);
  }
  recipe_writer& remove(std::uint16_t index) {
    op(recipe_op::remove).u(index, 2);
    return *this;
  }
  const std::vector<std::uint8_t>& bytes() const { return out_; }

 private:
  recipe_writer& op(recipe_op o) { return u(static_cast<std::uint8_t>(o), 1); }
  recipe_writer& u(std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    return *this;
  }
  recipe_writer& text(const std::string& s, int length_bytes) {
    u(s.size(), length_bytes);
    out_.insert(out_.end(), s.begin(), s.end());
    return *this;
  }
  std::vector<std::uint8_t> out_;
};

}  // namespace dsa_fuzz
