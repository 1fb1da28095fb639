// Hugging Face checkpoints of safetensors files: dsa::safetensors_checkpoint, a directory with
// model.safetensors.index.json (a weight map from tensor name to shard) or one model.safetensors.
// Shard names cannot leave the index's directory, and every file found in the directory must
// resolve inside it (dsa/model/checkpoint_files.hpp). Part of the dsa::model target.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/model/checkpoint_files.hpp"
#include "dsa/model/io_linkage.hpp"
#include "dsa/model/safetensors_file.hpp"

DSA_NAMESPACE_BEGIN

/// A Hugging Face checkpoint: a directory with `model.safetensors.index.json` (a weight_map from
/// tensor name to shard file) or a single `model.safetensors`; also opens an index file or a
/// single .safetensors file given directly. Lookups go through the weight map to the shard.
class safetensors_checkpoint {
 public:
  static constexpr std::string_view index_name = "model.safetensors.index.json";
  static constexpr std::string_view single_name = "model.safetensors";

  static safetensors_checkpoint open(const std::filesystem::path& path);

  safetensors_checkpoint(safetensors_checkpoint&&) noexcept = default;
  safetensors_checkpoint& operator=(safetensors_checkpoint&&) noexcept = default;
  safetensors_checkpoint(const safetensors_checkpoint&) = delete;
  safetensors_checkpoint& operator=(const safetensors_checkpoint&) = delete;

  /// The path it was opened from (the index file or the single .safetensors file).
  const std::filesystem::path& path() const { return path_; }
  std::span<const safetensors_file> shards() const { return shards_; }
  /// Every tensor name of the checkpoint, sorted.
  std::vector<std::string_view> names() const {
    std::vector<std::string_view> v;
    v.reserve(where_.size());
    for (const auto& [name, shard] : where_) v.push_back(name);
    return v;
  }
  std::size_t size() const { return where_.size(); }
  /// The index's "metadata" (values that are not strings, such as total_size, are kept as their
  /// JSON text), or the single file's "__metadata__".
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  const tensor_info* find(std::string_view name) const {
    auto it = where_.find(name);
    return it == where_.end() ? nullptr : shards_[it->second].find(name);
  }
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  const tensor_info& at(std::string_view name) const { return shard_of(name).at(name); }
  /// The shard holding `name`; throws naming the checkpoint and the tensor if there is none.
  const safetensors_file& shard_of(std::string_view name) const {
    auto it = where_.find(name);
    if (it == where_.end()) ::dsa::detail::st_fail(path_, "no tensor " + ::dsa::detail::quote_name(name));
    return shards_[it->second];
  }
  std::span<const std::byte> bytes(std::string_view name) const { return shard_of(name).bytes(name); }
  template <class T, std::size_t Rank>
  host_view<const T, Rank> view(std::string_view name) const {
    return shard_of(name).template view<T, Rank>(name);
  }

 private:
  safetensors_checkpoint() = default;

  static safetensors_checkpoint open_single(const std::filesystem::path& file);

  static safetensors_checkpoint open_index(const std::filesystem::path& index);

  std::filesystem::path path_;
  std::vector<safetensors_file> shards_;
  std::map<std::string, std::size_t, std::less<>> where_;
  std::map<std::string, std::string> metadata_;
};

#if DSA_MODEL_IO_DEFINITIONS  // dsa/model/io_linkage.hpp
DSA_MODEL_IO safetensors_checkpoint safetensors_checkpoint::open(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) ::dsa::detail::st_fail(path, "no such file or directory");
  if (fs::is_directory(st)) {
    // Files found in the directory must stay in it (a dangling link counts as absent here).
    if (fs::exists(path / index_name, ec)) {
      ::dsa::detail::check_containment(path / index_name, "", path, path / index_name);
      return open_index(path / index_name);
    }
    if (fs::exists(path / single_name, ec)) {
      ::dsa::detail::check_containment(path / single_name, "", path, path / single_name);
      return open_single(path / single_name);
    }
    ::dsa::detail::st_fail(path, "directory has neither " + std::string(index_name) + " nor " +
                                          std::string(single_name) +
                                          "; expected a Hugging Face checkpoint directory");
  }
  const std::string name = path.filename().string();
  if (name.size() >= 5 && name.ends_with(".json")) return open_index(path);
  return open_single(path);
}

DSA_MODEL_IO safetensors_checkpoint safetensors_checkpoint::open_single(const std::filesystem::path& file) {
  safetensors_checkpoint c;
  c.path_ = file;
  c.shards_.push_back(safetensors_file::open(file));
  for (const tensor_info& t : c.shards_[0].tensors()) c.where_.emplace(t.name, 0);
  c.metadata_ = c.shards_[0].metadata();
  return c;
}

DSA_MODEL_IO safetensors_checkpoint safetensors_checkpoint::open_index(const std::filesystem::path& index) {
  namespace fs = std::filesystem;
  safetensors_checkpoint c;
  c.path_ = index;
  std::error_code ec;
  if (fs::is_directory(index, ec)) ::dsa::detail::st_fail(index, "is a directory; expected a JSON index file");
  if (!fs::exists(index, ec)) ::dsa::detail::st_fail(index, "cannot open: no such file");
  if (!fs::is_regular_file(index, ec)) ::dsa::detail::st_fail(index, "is not a regular file; expected a JSON index file");
  std::ifstream in(index, std::ios::binary);
  if (!in) ::dsa::detail::st_fail(index, "cannot open: " + std::generic_category().message(errno));
  const auto size = fs::file_size(index, ec);
  if (ec) ::dsa::detail::st_fail(index, "cannot stat: " + ec.message());
  if (size > ::dsa::detail::safetensors_max_header) {
    ::dsa::detail::st_fail(index, "index size = " + std::to_string(size) + " bytes; expected at most " +
                                           std::to_string(::dsa::detail::safetensors_max_header));
  }
  std::string text(static_cast<std::size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uint64_t>(in.gcount()) != size) ::dsa::detail::st_fail(index, "short read");
  const nlohmann::json j =
      ::dsa::detail::parse_json_object(index, "index", text.data(), text.data() + text.size());

  if (auto m = j.find("metadata"); m != j.end() && !m->is_null()) {
    if (!m->is_object())
      ::dsa::detail::st_fail(index,
                                  "metadata = " + ::dsa::detail::json_excerpt(*m) + "; expected a JSON object");
    for (const auto& [k, v] : m->items()) c.metadata_.emplace(k, v.is_string() ? v.get<std::string>() : v.dump());
  }
  const auto wm = j.find("weight_map");
  if (wm == j.end()) ::dsa::detail::st_fail(index, "missing \"weight_map\"");
  if (!wm->is_object()) {
    ::dsa::detail::st_fail(
        index, "weight_map = " + ::dsa::detail::json_excerpt(*wm) + "; expected an object of tensor -> shard");
  }

  const fs::path dir = index.parent_path();
  std::map<std::string, std::size_t, std::less<>> shard_index;
  for (const auto& [name, shard] : wm->items()) {
    const std::string where = "weight_map[" + ::dsa::detail::quote_name(name) + "] = ";
    if (!shard.is_string())
      ::dsa::detail::st_fail(index, where + ::dsa::detail::json_excerpt(shard) + "; expected a file name");
    const std::string& file = shard.get_ref<const std::string&>();
    // Shards are plain names beside the index: a path could reach outside the checkpoint, and an
    // embedded NUL would name another file once the name reaches the OS.
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
        file.find('\\') != std::string::npos || file.find('\0') != std::string::npos) {
      ::dsa::detail::st_fail(index, where + ::dsa::detail::quote_name(file) +
                                             "; expected a plain file name in the index's directory");
    }
    auto it = shard_index.find(file);
    if (it == shard_index.end()) {
      const fs::path p = dir / file;
      if (!fs::exists(p, ec)) {
        // The directory, not dir / file: the name is the file's text, quoted (and cut) above.
        ::dsa::detail::st_fail(index, where + ::dsa::detail::quote_name(file) +
                                               "; expected an existing shard file in " +
                                               detail::quoted_path(dir.empty() ? fs::path(".") : dir) +
                                               (ec ? " (" + ec.message() + ")" : std::string()));
      }
      ::dsa::detail::check_containment(index, where + ::dsa::detail::quote_name(file) + ": ", dir, p);
      c.shards_.push_back(safetensors_file::open(p));
      it = shard_index.emplace(file, c.shards_.size() - 1).first;
    }
    if (!c.shards_[it->second].contains(name)) {
      ::dsa::detail::st_fail(index, where + ::dsa::detail::quote_name(file) +
                                             "; but that shard has no tensor " +
                                             ::dsa::detail::quote_name(name));
    }
    c.where_.emplace(name, it->second);
  }
  return c;
}
#endif  // DSA_MODEL_IO_DEFINITIONS

DSA_NAMESPACE_END
