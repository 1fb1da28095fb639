// Reading and writing safetensors files (https://github.com/huggingface/safetensors).
//
// Format: an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// then the data section; offsets are relative to its start (byte 8 + N).
//
// Files are memory-mapped, never read whole: a 700 GB checkpoint costs address space, not RAM.
// Everything in the header is validated before any of it is trusted (lengths, dtypes, shapes,
// offsets, overlaps), so a truncated or hostile file is a dsa::error naming the file and the
// tensor, never an out-of-bounds read. The one hazard a reader cannot exclude is another process
// truncating the file while it is mapped (POSIX then raises SIGBUS on access).
//
// POSIX only (open/mmap). Part of the dsa::model target (needs nlohmann_json).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/model/checkpoint_files.hpp"
#include "dsa/model/io_linkage.hpp"
#include "dsa/model/json_structure.hpp"

DSA_NAMESPACE_BEGIN

// ---- element types ------------------------------------------------------------------------

/// The element types of the safetensors format that dsa reads and writes.
enum class dtype : std::uint8_t { f8_e4m3, f8_e5m2, bf16, f16, f32, f64, i8, i16, i32, i64, u8, boolean };

/// Bytes per element.
constexpr std::size_t dtype_size(dtype t) {
  switch (t) {
    case dtype::f8_e4m3:
    case dtype::f8_e5m2:
    case dtype::i8:
    case dtype::u8:
    case dtype::boolean:
      return 1;
    case dtype::bf16:
    case dtype::f16:
    case dtype::i16:
      return 2;
    case dtype::f32:
    case dtype::i32:
      return 4;
    case dtype::f64:
    case dtype::i64:
      return 8;
  }
  return 0;
}

/// The name the safetensors header uses: "F8_E4M3", "BF16", "F32", ...
constexpr std::string_view dtype_name(dtype t) {
  switch (t) {
    case dtype::f8_e4m3:
      return "F8_E4M3";
    case dtype::f8_e5m2:
      return "F8_E5M2";
    case dtype::bf16:
      return "BF16";
    case dtype::f16:
      return "F16";
    case dtype::f32:
      return "F32";
    case dtype::f64:
      return "F64";
    case dtype::i8:
      return "I8";
    case dtype::i16:
      return "I16";
    case dtype::i32:
      return "I32";
    case dtype::i64:
      return "I64";
    case dtype::u8:
      return "U8";
    case dtype::boolean:
      return "BOOL";
  }
  return "?";
}

/// The dtype named `name` in a safetensors header, or nothing if dsa does not know it.
inline std::optional<dtype> parse_dtype(std::string_view name) {
  static constexpr std::array all = {dtype::f8_e4m3, dtype::f8_e5m2, dtype::bf16, dtype::f16,
                                     dtype::f32,     dtype::f64,     dtype::i8,   dtype::i16,
                                     dtype::i32,     dtype::i64,     dtype::u8,   dtype::boolean};
  for (dtype t : all) {
    if (dtype_name(t) == name) return t;
  }
  return std::nullopt;
}

namespace safetensors_detail {
template <class T>
inline constexpr bool always_false = false;
}  // namespace safetensors_detail

/// The dtype whose elements are stored as C++ type T (float -> F32, dsa::bf16 -> BF16, ...).
/// F16 has no C++ element type in dsa; read it with bytes().
template <class T>
constexpr dtype dtype_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, fp8_e4m3>)
    return dtype::f8_e4m3;
  else if constexpr (std::is_same_v<U, fp8_e5m2>)
    return dtype::f8_e5m2;
  else if constexpr (std::is_same_v<U, bf16>)
    return dtype::bf16;
  else if constexpr (std::is_same_v<U, float>)
    return dtype::f32;
  else if constexpr (std::is_same_v<U, double>)
    return dtype::f64;
  else if constexpr (std::is_same_v<U, std::int8_t>)
    return dtype::i8;
  else if constexpr (std::is_same_v<U, std::int16_t>)
    return dtype::i16;
  else if constexpr (std::is_same_v<U, std::int32_t>)
    return dtype::i32;
  else if constexpr (std::is_same_v<U, std::int64_t>)
    return dtype::i64;
  else if constexpr (std::is_same_v<U, std::uint8_t>)
    return dtype::u8;
  else if constexpr (std::is_same_v<U, bool>)
    return dtype::boolean;
  else
    static_assert(safetensors_detail::always_false<U>, "dsa::dtype_of: no safetensors dtype stores this C++ type");
}

static_assert(sizeof(bool) == 1, "dsa::safetensors: BOOL tensors need a one-byte bool");

/// "[2, 3]"
inline std::string format_shape(std::span<const index_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// ---- the reader ---------------------------------------------------------------------------

/// One tensor of a safetensors file, as validated from its header.
struct tensor_info {
  std::string name;
  dtype type = dtype::f32;
  std::vector<index_t> shape;
  /// Byte range of the data, relative to the start of the data section.
  std::uint64_t begin = 0;
  std::uint64_t end = 0;

  std::size_t rank() const { return shape.size(); }
  /// Number of elements (1 for a rank-0 scalar).
  std::uint64_t numel() const {
    std::uint64_t n = 1;
    for (index_t d : shape) n *= static_cast<std::uint64_t>(d);
    return n;
  }
  std::uint64_t nbytes() const { return end - begin; }
  /// "F32 [3, 4]"
  std::string description() const { return std::string(dtype_name(type)) + " " + format_shape(shape); }
};

namespace safetensors_detail {

/// Header lengths beyond this are refused before anything is allocated (the official reader's
/// limit is 100 MB; real V3.2 shards have headers of a few hundred KB).
inline constexpr std::uint64_t safetensors_max_header = std::uint64_t{100} << 20;

inline std::string st_prefix(const std::filesystem::path& path) {
  return "dsa::safetensors: " + detail::quoted_path(path) + ": ";
}

[[noreturn]] inline void st_fail(const std::filesystem::path& path, std::string_view what) {
  throw error(st_prefix(path) + std::string(what));
}

/// A tensor, shard or key name from a file (or a caller) for a message: dsa::quoted, so a
/// 5,000-character or escape-laden name prints as at most quote_max_bytes of inert text.
inline std::string quote_name(std::string_view name) { return ::dsa::quoted(name); }

/// Read-only private mapping of a whole file; move-only.
class file_mapping {
 public:
  file_mapping() = default;
  static file_mapping map(const std::filesystem::path& path) {
    // O_NONBLOCK: opening a FIFO without a writer must not hang (it is then refused below).
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      const int e = errno;
      st_fail(path, "cannot open: " + std::generic_category().message(e));
    }
    struct closer {
      int fd;
      ~closer() { ::close(fd); }
    } close_on_exit{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int e = errno;
      st_fail(path, "cannot stat: " + std::generic_category().message(e));
    }
    if (S_ISDIR(st.st_mode)) st_fail(path, "is a directory; expected a .safetensors file");
    if (!S_ISREG(st.st_mode)) st_fail(path, "is not a regular file; expected a .safetensors file");
    file_mapping m;
    m.size_ = static_cast<std::size_t>(st.st_size);
    if (m.size_ == 0) return m;  // mmap refuses length 0; the caller reports the empty file
    void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      st_fail(path, "cannot mmap " + std::to_string(m.size_) + " bytes: " + std::generic_category().message(e));
    }
    m.data_ = static_cast<const std::byte*>(p);
    return m;
  }
  file_mapping(file_mapping&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  file_mapping& operator=(file_mapping&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  file_mapping(const file_mapping&) = delete;
  file_mapping& operator=(const file_mapping&) = delete;
  ~file_mapping() { reset(); }

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  void reset() {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
  }
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

inline std::uint64_t read_le64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint64_t>(p[i]);
  return v;
}

/// Parses JSON text after json_structure_problem's checks: a key twice in one object (nlohmann
/// would silently keep one of them, which would let two headers describe the same file
/// differently) or nesting deeper than json_max_depth is an error, and parsing stays linear.
inline nlohmann::json parse_json_object(const std::filesystem::path& path, std::string_view what, const char* first,
                                        const char* last) {
  const detail::json_structure_result structure = detail::json_structure_problem(first, last);
  using problem = detail::json_structure_result::problem;
  if (structure.found == problem::duplicate_key) {
    st_fail(path, std::string(what) + " has the key " + quote_name(structure.key) + " twice in one object");
  }
  if (structure.found == problem::too_deep) {
    st_fail(path, std::string(what) + " nests objects and arrays deeper than " + std::to_string(detail::json_max_depth) +
                      " levels; expected at most that");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(first, last);
  } catch (const nlohmann::json::exception& e) {
    st_fail(path, std::string(what) + " is not valid JSON (" + detail::json_parse_error(e.what()) + ")");
  }
  if (!j.is_object()) st_fail(path, std::string(what) + " is a JSON " + j.type_name() + "; expected a JSON object");
  return j;
}

/// A file the loader found in the checkpoint directory `dir` (a shard, the index, model.safetensors)
/// must resolve inside it, or inside the Hugging Face cache's blobs/ (dsa/model/checkpoint_files.hpp);
/// else a dsa::error about `reported` (the index naming the shard, or the file itself) after
/// `where`, raised before the file is opened, so none of its bytes reach a message.
inline void check_containment(const std::filesystem::path& reported, const std::string& where,
                              const std::filesystem::path& dir, const std::filesystem::path& file) {
  const detail::containment c = detail::contained_file(dir, file);
  if (!c) st_fail(reported, where + "real path = " + c.value + "; expected " + c.expected);
}

inline std::string json_excerpt(const nlohmann::json& j) { return detail::json_excerpt(j); }

}  // namespace safetensors_detail

/// A memory-mapped, validated safetensors file. Move-only; views and spans it hands out stay
/// valid until the file object (or the object it was moved into) is destroyed.
class safetensors_file {
 public:
  /// Maps and validates `path`. Throws dsa::error naming the file (and the tensor) on any
  /// problem: missing, unreadable, a directory, empty, truncated, malformed header.
  static safetensors_file open(const std::filesystem::path& path);

  safetensors_file(safetensors_file&&) noexcept = default;
  safetensors_file& operator=(safetensors_file&&) noexcept = default;
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;

  const std::filesystem::path& path() const { return path_; }
  /// Size of the whole file in bytes.
  std::uint64_t file_size() const { return map_.size(); }
  /// Offset of the data section in the file (8 + header length).
  std::uint64_t data_offset() const { return data_offset_; }

  /// Every tensor, sorted by name.
  std::span<const tensor_info> tensors() const { return tensors_; }
  /// The "__metadata__" entries (empty if the header has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  /// The tensor called `name`, or nullptr.
  const tensor_info* find(std::string_view name) const {
    auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                               [](const tensor_info& t, std::string_view n) { return t.name < n; });
    return it != tensors_.end() && it->name == name ? &*it : nullptr;
  }
  bool contains(std::string_view name) const { return find(name) != nullptr; }

  /// The tensor called `name`; throws dsa::error naming the file and the tensor if absent.
  const tensor_info& at(std::string_view name) const {
    if (const tensor_info* t = find(name)) return *t;
    safetensors_detail::st_fail(path_, "no tensor " + safetensors_detail::quote_name(name));
  }

  /// The raw little-endian bytes of a tensor.
  std::span<const std::byte> bytes(const tensor_info& t) const {
    return {map_.data() + data_offset_ + t.begin, static_cast<std::size_t>(t.nbytes())};
  }
  std::span<const std::byte> bytes(std::string_view name) const { return bytes(at(name)); }

  /// A row-major view of tensor `name` as elements of type T and rank Rank. Throws unless the
  /// tensor's dtype is dtype_of<T>(), its rank is Rank and its data is aligned for T (the format
  /// does not guarantee alignment; files from write_safetensors and from the official writer
  /// are aligned). BOOL tensors are checked to hold only 0 and 1.
  template <class T, std::size_t Rank>
  host_view<const T, Rank> view(std::string_view name) const {
    return view<T, Rank>(at(name));
  }
  template <class T, std::size_t Rank>
  host_view<const T, Rank> view(const tensor_info& t) const {
    constexpr dtype want = dtype_of<T>();
    const std::string where = "tensor " + safetensors_detail::quote_name(t.name) + ": ";
    const std::string requested = "view<" + std::string(dtype_name(want)) + ", " + std::to_string(Rank) + ">";
    if (t.type != want) {
      safetensors_detail::st_fail(path_, where + "dtype = " + std::string(dtype_name(t.type)) + "; expected " +
                                             std::string(dtype_name(want)) + " (requested " + requested + ")");
    }
    if (t.rank() != Rank) {
      safetensors_detail::st_fail(path_, where + "shape = " + format_shape(t.shape) + " (rank " +
                                             std::to_string(t.rank()) + "); expected rank " + std::to_string(Rank) +
                                             " (requested " + requested + ")");
    }
    const std::byte* p = map_.data() + data_offset_ + t.begin;
    if (reinterpret_cast<std::uintptr_t>(p) % alignof(T) != 0) {
      safetensors_detail::st_fail(path_, where + "data at file offset " + std::to_string(data_offset_ + t.begin) +
                                             " is not aligned to " + std::to_string(alignof(T)) +
                                             " bytes; expected aligned " + std::string(dtype_name(want)) +
                                             " data (copy it out with bytes() instead)");
    }
    if constexpr (std::is_same_v<std::remove_cv_t<T>, bool>) {
      for (std::uint64_t i = 0; i < t.nbytes(); ++i) {
        const auto b = static_cast<unsigned>(p[i]);
        if (b > 1u) {
          safetensors_detail::st_fail(
              path_, where + "element " + std::to_string(i) + " = " + std::to_string(b) + "; expected 0 or 1 (BOOL)");
        }
      }
    }
    std::array<index_t, Rank> e{};
    for (std::size_t r = 0; r < Rank; ++r) e[r] = t.shape[r];
    // The mapping is PROT_READ and the bytes are T's object representation (checked above).
    return host_view<const T, Rank>(reinterpret_cast<const T*>(p), e);
  }

 private:
  safetensors_file() = default;

  [[noreturn]] void fail(std::string_view what) const { safetensors_detail::st_fail(path_, what); }

  void parse_header();

  void parse_metadata(const nlohmann::json& m);

  tensor_info parse_entry(const std::string& name, const nlohmann::json& e, std::uint64_t data_size) const;

  std::filesystem::path path_;
  safetensors_detail::file_mapping map_;
  std::uint64_t data_offset_ = 0;
  std::vector<tensor_info> tensors_;
  std::map<std::string, std::string> metadata_;
};

// ---- sharded checkpoints ------------------------------------------------------------------

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
    if (it == where_.end()) safetensors_detail::st_fail(path_, "no tensor " + safetensors_detail::quote_name(name));
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

// ---- the writer ---------------------------------------------------------------------------

namespace safetensors_detail {

inline std::string errno_message(int e) { return std::generic_category().message(e); }

/// What a file of mode `mode` is, for messages: "a character device", "a FIFO", ...
inline const char* file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symlink";
  return "a special file";
}

/// What is at `path` if the writer may not replace it, else nullptr (nothing there, a regular
/// file, or a symlink that dangles or leads to a regular file: the rename replaces the link, its
/// target untouched). A directory is "a directory", anything else that is not a regular file
/// (device, FIFO, socket, or a symlink to one) is named: renaming onto it would put a regular
/// file in place of, say, /dev/null. A symlink to such a file is refused too, though the rename
/// would replace only the link: whoever named it meant the file behind it, which is no place for
/// a dump.
inline std::optional<std::string> unreplaceable(const std::filesystem::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return std::nullopt;
  if (!S_ISLNK(st.st_mode)) return std::string(file_kind(st.st_mode));
  struct stat to {};
  if (::stat(path.c_str(), &to) != 0 || S_ISREG(to.st_mode)) return std::nullopt;  // dangling, or to a file
  return std::string("a symlink to ") + file_kind(to.st_mode);
}

/// Refuses a `path` the writer may not replace: no file name, an existing directory (a symlink
/// to one included), or anything else that is not a regular file (unreplaceable). Checked before
/// anything is created, and by temp_file::commit again right before the rename.
inline void check_write_target(const std::filesystem::path& path) {
  if (path.empty() || !path.has_filename()) st_fail(path, "expected the name of a file to write, not a directory path");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    st_fail(path, "is a directory; expected the name of a file to write");
  if (const auto what = unreplaceable(path)) {
    st_fail(path, "is " + *what +
                      "; expected a regular file or a new name (the writer renames a new file onto the name, which "
                      "would replace it)");
  }
}

/// A 16-hex-digit name part that no other writer (thread or process) is likely to pick: the
/// exclusive create makes a clash safe, this only makes it rare.
inline std::string random_name_part() {
  static std::atomic<std::uint64_t> counter{0};
  std::uint64_t x = counter.fetch_add(1, std::memory_order_relaxed) * 0x9E3779B97F4A7C15ull;
  x ^= static_cast<std::uint64_t>(::getpid()) << 32;
  x ^= static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  try {
    std::random_device rd;
    x ^= (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  } catch (const std::exception&) {  // no entropy source: the mix above still differs per call
  }
  x ^= x >> 30;  // splitmix64's finalizer
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  static constexpr char hex[] = "0123456789abcdef";
  std::string s(16, '0');
  for (std::size_t i = 0; i < 16; ++i) s[i] = hex[(x >> (4 * i)) & 0xFu];
  return s;
}

/// The writer's temporary file: created in `target`'s directory with O_CREAT | O_EXCL | O_NOFOLLOW
/// under a fresh name ("<name>.<random>.tmp"), so it is always a new file of its own. commit()
/// renames it onto `target`; until then the destructor removes it (and only it).
class temp_file {
 public:
  explicit temp_file(std::filesystem::path target) : target_(std::move(target)) {
    const std::filesystem::path dir = target_.has_parent_path() ? target_.parent_path() : std::filesystem::path(".");
    std::string stem = target_.filename().string();
    if (stem.size() > 200) stem.resize(200);  // keep "<stem>.<16 hex>.tmp" within NAME_MAX
    for (int attempt = 0; attempt < 64; ++attempt) {
      std::filesystem::path p = dir / (stem + "." + random_name_part() + ".tmp");
      const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
      if (fd >= 0) {
        fd_ = fd;
        path_ = std::move(p);
        return;
      }
      const int e = errno;
      if (e != EEXIST && e != EINTR) {
        st_fail(target_, "cannot create a temporary file in " + detail::quoted_path(dir) + ": " + errno_message(e));
      }
    }
    st_fail(target_,
            "cannot create a temporary file in " + detail::quoted_path(dir) + ": every name tried already exists");
  }
  temp_file(const temp_file&) = delete;
  temp_file& operator=(const temp_file&) = delete;
  ~temp_file() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }

  const std::filesystem::path& path() const { return path_; }

  void write(const char* p, std::size_t n) {
    while (n > 0) {
      const ::ssize_t w = ::write(fd_, p, std::min<std::size_t>(n, std::size_t{1} << 30));
      if (w < 0) {
        const int e = errno;
        if (e == EINTR) continue;
        st_fail(target_, "cannot write " + detail::quoted_path(path_) + ": " + errno_message(e));
      }
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }

  /// Flushes, closes and renames onto the target; on any failure the temporary file is removed
  /// and the target is left as it was.
  void commit() {
    if (::fsync(fd_) != 0) {
      const int e = errno;
      if (e != EINVAL && e != EROFS)  // a file system without fsync: nothing to flush to
        st_fail(target_, "cannot write " + detail::quoted_path(path_) + ": " + errno_message(e));
    }
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) {
      const int e = errno;
      st_fail(target_, "cannot write " + detail::quoted_path(path_) + ": " + errno_message(e));
    }
    // Again right before the rename: the target may have been replaced by a device or FIFO since
    // write_safetensors first looked (a failure here removes the temporary file, nothing else).
    // What is left is the window between this lstat and rename(2), which POSIX cannot close: no
    // rename replaces only a regular file.
    check_write_target(target_);
    if (::rename(path_.c_str(), target_.c_str()) != 0) {
      const int e = errno;  // before anything else can overwrite it
      st_fail(target_, "cannot rename " + detail::quoted_path(path_) + " into place: " + errno_message(e));
    }
    path_.clear();  // it is the target now: nothing to remove
  }

 private:
  std::filesystem::path target_;
  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace safetensors_detail

/// One tensor to write: name, dtype, shape and its little-endian bytes (borrowed).
struct safetensors_entry {
  std::string name;
  dtype type = dtype::f32;
  std::vector<index_t> shape;
  std::span<const std::byte> data;
};

/// An entry for a contiguous host view (it borrows the view's memory).
template <class T, std::size_t Rank>
safetensors_entry make_safetensors_entry(std::string name, host_view<const T, Rank> v) {
  if (!v.is_contiguous()) {
    fail("safetensors", "tensor " + safetensors_detail::quote_name(name) + " view strides",
         format_shape(std::span(v.strides())), "a contiguous row-major view");
  }
  if (v.data_handle() == nullptr && v.size() != 0)
    fail("safetensors", "tensor " + safetensors_detail::quote_name(name) + " data", "null", "a non-null pointer");
  safetensors_entry e;
  e.name = std::move(name);
  e.type = dtype_of<T>();
  e.shape.assign(v.extents().begin(), v.extents().end());
  e.data = std::as_bytes(std::span<const T>(v.data_handle(), static_cast<std::size_t>(v.size())));
  return e;
}
template <class T, std::size_t Rank>
safetensors_entry make_safetensors_entry(std::string name, host_view<T, Rank> v) {
  return make_safetensors_entry<T, Rank>(std::move(name), host_view<const T, Rank>(v));
}

/// Writes a safetensors file: the official layout (header padded with spaces to a multiple of 8,
/// tensors packed without gaps, widest dtypes first so that every tensor is aligned to its element
/// size). Validates names (non-empty, unique, not "__metadata__"), shapes and byte counts.
/// Writes to a fresh temporary file beside `path` (created exclusively under a random name, so
/// it never follows a planted symlink nor truncates an existing file, in particular one still
/// memory-mapped as an input) and renames it onto `path` only once everything is written: a
/// failed write never leaves a half-written `path` and removes nothing but that temporary file.
/// An existing regular file `path` is replaced, never written through (a symlink `path` to a
/// regular file, or a dangling one, is replaced by the new file, its target untouched); a
/// directory, device, FIFO or socket `path`, or a symlink to one, is refused with a dsa::error
/// naming what it is, both before anything is written and right before the rename.
DSA_MODEL_IO void write_safetensors(const std::filesystem::path& path, std::span<const safetensors_entry> entries,
                                    const std::map<std::string, std::string>& metadata = {});

inline void write_safetensors(const std::filesystem::path& path, const std::vector<safetensors_entry>& entries,
                              const std::map<std::string, std::string>& metadata = {}) {
  write_safetensors(path, std::span<const safetensors_entry>(entries), metadata);
}

#if DSA_MODEL_IO_DEFINITIONS  // dsa/model/io_linkage.hpp
DSA_MODEL_IO safetensors_file safetensors_file::open(const std::filesystem::path& path) {
  safetensors_file f;
  f.path_ = path;
  f.map_ = safetensors_detail::file_mapping::map(path);
  f.parse_header();
  return f;
}

DSA_MODEL_IO void safetensors_file::parse_header() {
  const std::uint64_t size = map_.size();
  if (size == 0) fail("file is empty; expected an 8-byte header length, a JSON header and the data");
  if (size < 8) {
    fail("file size = " + std::to_string(size) + " bytes; expected at least 8 (the header length)");
  }
  const std::uint64_t n = safetensors_detail::read_le64(map_.data());
  if (n < 2) fail("header length = " + std::to_string(n) + "; expected at least 2 (a JSON object)");
  if (n > safetensors_detail::safetensors_max_header) {
    fail("header length = " + std::to_string(n) + "; expected at most " +
         std::to_string(safetensors_detail::safetensors_max_header) + " bytes");
  }
  if (n > size - 8) {
    fail("header length = " + std::to_string(n) + "; expected at most " + std::to_string(size - 8) + " (file size " +
         std::to_string(size) + " - 8): the file is truncated or not safetensors");
  }
  data_offset_ = 8 + n;
  const std::uint64_t data_size = size - data_offset_;
  const char* text = reinterpret_cast<const char*>(map_.data() + 8);
  const nlohmann::json header = safetensors_detail::parse_json_object(path_, "header", text, text + n);

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      parse_metadata(entry);
      continue;
    }
    tensors_.push_back(parse_entry(name, entry, data_size));
  }
  // nlohmann's object is a std::map, so items() came sorted by name already; sort anyway so
  // find()'s binary search never depends on that.
  std::sort(tensors_.begin(), tensors_.end(),
            [](const tensor_info& a, const tensor_info& b) { return a.name < b.name; });

  // No two tensors may share bytes (zero-size tensors occupy none).
  std::vector<const tensor_info*> by_offset;
  for (const tensor_info& t : tensors_) {
    if (t.nbytes() > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const tensor_info* a, const tensor_info* b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const tensor_info& a = *by_offset[i - 1];
    const tensor_info& b = *by_offset[i];
    if (b.begin < a.end) {
      fail("tensor " + safetensors_detail::quote_name(b.name) + ": data_offsets [" + std::to_string(b.begin) + ", " +
           std::to_string(b.end) + "] overlap tensor " + safetensors_detail::quote_name(a.name) + " [" +
           std::to_string(a.begin) + ", " + std::to_string(a.end) + "]; expected disjoint byte ranges");
    }
  }
}

DSA_MODEL_IO void safetensors_file::parse_metadata(const nlohmann::json& m) {
  if (!m.is_object()) {
    fail(std::string("__metadata__ = ") + safetensors_detail::json_excerpt(m) +
         "; expected a JSON object of string values");
  }
  for (const auto& [k, v] : m.items()) {
    if (!v.is_string()) {
      fail("__metadata__[" + safetensors_detail::quote_name(k) + "] = " + safetensors_detail::json_excerpt(v) +
           "; expected a string");
    }
    metadata_.emplace(k, v.get<std::string>());
  }
}

DSA_MODEL_IO tensor_info safetensors_file::parse_entry(const std::string& name, const nlohmann::json& e,
                                                       std::uint64_t data_size) const {
  const std::string where = "tensor " + safetensors_detail::quote_name(name) + ": ";
  if (name.empty()) fail("tensor '': expected a non-empty tensor name");
  if (!e.is_object()) {
    fail(where + "entry = " + safetensors_detail::json_excerpt(e) +
         "; expected an object with dtype, shape and data_offsets");
  }
  tensor_info t;
  t.name = name;

  const auto dt = e.find("dtype");
  if (dt == e.end()) fail(where + "missing \"dtype\"");
  if (!dt->is_string()) fail(where + "dtype = " + safetensors_detail::json_excerpt(*dt) + "; expected a string");
  const auto parsed = parse_dtype(dt->get_ref<const std::string&>());
  if (!parsed) {
    fail(where + "dtype = " + safetensors_detail::json_excerpt(*dt) +
         "; expected one of F8_E4M3, F8_E5M2, BF16, F16, F32, F64, I8, I16, I32, I64, U8, BOOL");
  }
  t.type = *parsed;

  const auto sh = e.find("shape");
  if (sh == e.end()) fail(where + "missing \"shape\"");
  if (!sh->is_array())
    fail(where + "shape = " + safetensors_detail::json_excerpt(*sh) + "; expected an array of integers");
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned() ||
        d.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<index_t>::max())) {
      fail(where + "shape = " + safetensors_detail::json_excerpt(*sh) + "; expected non-negative integer extents");
    }
    t.shape.push_back(static_cast<index_t>(d.get<std::uint64_t>()));
  }
  // Element and byte counts, refusing overflow (a zero extent makes the product 0 whatever
  // the others are).
  std::uint64_t numel = 1;
  bool overflow = false;
  if (std::find(t.shape.begin(), t.shape.end(), index_t{0}) != t.shape.end()) {
    numel = 0;
  } else {
    for (index_t d : t.shape) overflow |= __builtin_mul_overflow(numel, static_cast<std::uint64_t>(d), &numel);
  }
  std::uint64_t nbytes = 0;
  overflow |= __builtin_mul_overflow(numel, static_cast<std::uint64_t>(dtype_size(t.type)), &nbytes);
  if (overflow)
    fail(where + "shape = " + format_shape(t.shape) + "; expected a shape whose byte size fits in 64 bits");

  const auto off = e.find("data_offsets");
  if (off == e.end()) fail(where + "missing \"data_offsets\"");
  if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) {
    fail(where + "data_offsets = " + safetensors_detail::json_excerpt(*off) +
         "; expected [begin, end], non-negative integers");
  }
  t.begin = (*off)[0].get<std::uint64_t>();
  t.end = (*off)[1].get<std::uint64_t>();
  const std::string range = "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
  if (t.begin > t.end) fail(where + range + "; expected begin <= end");
  if (t.end > data_size) {
    fail(where + range + "; expected end <= " + std::to_string(data_size) +
         " (the data section's size): the file is truncated or the header is wrong");
  }
  if (t.end - t.begin != nbytes) {
    fail(where + range + " = " + std::to_string(t.end - t.begin) + " bytes; expected " + std::to_string(nbytes) +
         " bytes (" + t.description() + ")");
  }
  return t;
}

DSA_MODEL_IO safetensors_checkpoint safetensors_checkpoint::open(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) safetensors_detail::st_fail(path, "no such file or directory");
  if (fs::is_directory(st)) {
    // Files found in the directory must stay in it (a dangling link counts as absent here).
    if (fs::exists(path / index_name, ec)) {
      safetensors_detail::check_containment(path / index_name, "", path, path / index_name);
      return open_index(path / index_name);
    }
    if (fs::exists(path / single_name, ec)) {
      safetensors_detail::check_containment(path / single_name, "", path, path / single_name);
      return open_single(path / single_name);
    }
    safetensors_detail::st_fail(path, "directory has neither " + std::string(index_name) + " nor " +
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
  if (fs::is_directory(index, ec)) safetensors_detail::st_fail(index, "is a directory; expected a JSON index file");
  if (!fs::exists(index, ec)) safetensors_detail::st_fail(index, "cannot open: no such file");
  if (!fs::is_regular_file(index, ec)) safetensors_detail::st_fail(index, "is not a regular file; expected a JSON index file");
  std::ifstream in(index, std::ios::binary);
  if (!in) safetensors_detail::st_fail(index, "cannot open: " + std::generic_category().message(errno));
  const auto size = fs::file_size(index, ec);
  if (ec) safetensors_detail::st_fail(index, "cannot stat: " + ec.message());
  if (size > safetensors_detail::safetensors_max_header) {
    safetensors_detail::st_fail(index, "index size = " + std::to_string(size) + " bytes; expected at most " +
                                           std::to_string(safetensors_detail::safetensors_max_header));
  }
  std::string text(static_cast<std::size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uint64_t>(in.gcount()) != size) safetensors_detail::st_fail(index, "short read");
  const nlohmann::json j =
      safetensors_detail::parse_json_object(index, "index", text.data(), text.data() + text.size());

  if (auto m = j.find("metadata"); m != j.end() && !m->is_null()) {
    if (!m->is_object())
      safetensors_detail::st_fail(index,
                                  "metadata = " + safetensors_detail::json_excerpt(*m) + "; expected a JSON object");
    for (const auto& [k, v] : m->items()) c.metadata_.emplace(k, v.is_string() ? v.get<std::string>() : v.dump());
  }
  const auto wm = j.find("weight_map");
  if (wm == j.end()) safetensors_detail::st_fail(index, "missing \"weight_map\"");
  if (!wm->is_object()) {
    safetensors_detail::st_fail(
        index, "weight_map = " + safetensors_detail::json_excerpt(*wm) + "; expected an object of tensor -> shard");
  }

  const fs::path dir = index.parent_path();
  std::map<std::string, std::size_t, std::less<>> shard_index;
  for (const auto& [name, shard] : wm->items()) {
    const std::string where = "weight_map[" + safetensors_detail::quote_name(name) + "] = ";
    if (!shard.is_string())
      safetensors_detail::st_fail(index, where + safetensors_detail::json_excerpt(shard) + "; expected a file name");
    const std::string& file = shard.get_ref<const std::string&>();
    // Shards are plain names beside the index: a path could reach outside the checkpoint, and an
    // embedded NUL would name another file once the name reaches the OS.
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
        file.find('\\') != std::string::npos || file.find('\0') != std::string::npos) {
      safetensors_detail::st_fail(index, where + safetensors_detail::quote_name(file) +
                                             "; expected a plain file name in the index's directory");
    }
    auto it = shard_index.find(file);
    if (it == shard_index.end()) {
      const fs::path p = dir / file;
      if (!fs::exists(p, ec)) {
        // The directory, not dir / file: the name is the file's text, quoted (and cut) above.
        safetensors_detail::st_fail(index, where + safetensors_detail::quote_name(file) +
                                               "; expected an existing shard file in " +
                                               detail::quoted_path(dir.empty() ? fs::path(".") : dir) +
                                               (ec ? " (" + ec.message() + ")" : std::string()));
      }
      safetensors_detail::check_containment(index, where + safetensors_detail::quote_name(file) + ": ", dir, p);
      c.shards_.push_back(safetensors_file::open(p));
      it = shard_index.emplace(file, c.shards_.size() - 1).first;
    }
    if (!c.shards_[it->second].contains(name)) {
      safetensors_detail::st_fail(index, where + safetensors_detail::quote_name(file) +
                                             "; but that shard has no tensor " +
                                             safetensors_detail::quote_name(name));
    }
    c.where_.emplace(name, it->second);
  }
  return c;
}

DSA_MODEL_IO void write_safetensors(const std::filesystem::path& path, std::span<const safetensors_entry> entries,
                                    const std::map<std::string, std::string>& metadata) {
std::vector<const safetensors_entry*> order;
std::set<std::string_view> names;
for (const safetensors_entry& e : entries) {
  if (e.name.empty() || e.name == "__metadata__") {
    safetensors_detail::st_fail(path, "tensor " + safetensors_detail::quote_name(e.name) +
                                          ": expected a non-empty name other than __metadata__");
  }
  if (!names.insert(e.name).second)
    safetensors_detail::st_fail(path, "tensor " + safetensors_detail::quote_name(e.name) + " is given twice");
  if (!is_valid_utf8(e.name)) {
    safetensors_detail::st_fail(path, "tensor " + safetensors_detail::quote_name(e.name) +
                                          ": expected a name in valid UTF-8 (a safetensors header is JSON)");
  }
  const std::string where = "tensor " + safetensors_detail::quote_name(e.name) + ": ";
  std::uint64_t nbytes = dtype_size(e.type);
  for (index_t d : e.shape) {
    if (d < 0)
      safetensors_detail::st_fail(path,
                                  where + "shape = " + format_shape(e.shape) + "; expected non-negative extents");
    if (__builtin_mul_overflow(nbytes, static_cast<std::uint64_t>(d), &nbytes)) {
      safetensors_detail::st_fail(
          path, where + "shape = " + format_shape(e.shape) + "; expected a byte size that fits in 64 bits");
    }
  }
  if (nbytes != e.data.size()) {
    safetensors_detail::st_fail(path, where + "data = " + std::to_string(e.data.size()) + " bytes; expected " +
                                          std::to_string(nbytes) + " bytes (" + std::string(dtype_name(e.type)) +
                                          " " + format_shape(e.shape) + ")");
  }
  order.push_back(&e);
}
std::stable_sort(order.begin(), order.end(), [](const safetensors_entry* a, const safetensors_entry* b) {
  if (dtype_size(a->type) != dtype_size(b->type)) return dtype_size(a->type) > dtype_size(b->type);
  return a->name < b->name;
});

nlohmann::json header = nlohmann::json::object();
std::uint64_t offset = 0;
for (const safetensors_entry* e : order) {
  header[e->name] = {{"dtype", std::string(dtype_name(e->type))},
                     {"shape", e->shape},
                     {"data_offsets", {offset, offset + e->data.size()}}};
  offset += e->data.size();
}
for (const auto& [key, value] : metadata) {
  if (!is_valid_utf8(key) || !is_valid_utf8(value)) {
    safetensors_detail::st_fail(path, "metadata " + safetensors_detail::quote_name(key) +
                                          ": expected a key and value in valid UTF-8 (a safetensors header is JSON)");
  }
}
if (!metadata.empty()) header["__metadata__"] = metadata;
std::string text = header.dump();
text.append((8 - text.size() % 8) % 8, ' ');

safetensors_detail::check_write_target(path);
std::array<char, 8> len{};
for (int i = 0; i < 8; ++i) len[static_cast<std::size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xFFu);
safetensors_detail::temp_file tmp(path);
tmp.write(len.data(), len.size());
tmp.write(text.data(), text.size());
for (const safetensors_entry* e : order) {
  if (e->data.empty()) continue;  // an empty span may hold a null pointer
  tmp.write(reinterpret_cast<const char*>(e->data.data()), e->data.size());
}
tmp.commit();
}
#endif  // DSA_MODEL_IO_DEFINITIONS

DSA_NAMESPACE_END
