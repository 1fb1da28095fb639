// Reading safetensors files (https://github.com/huggingface/safetensors): dsa::safetensors_file.
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
// Sharded checkpoints are dsa/model/safetensors_checkpoint.hpp, the writer
// dsa/model/safetensors_writer.hpp; dsa/model/safetensors.hpp includes all three.
//
// POSIX only (open/mmap). Part of the dsa::model target (needs nlohmann_json).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
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
#include "dsa/model/dtype.hpp"
#include "dsa/model/io_linkage.hpp"
#include "dsa/model/json_structure.hpp"

DSA_NAMESPACE_BEGIN

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

namespace detail {

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
  const ::dsa::detail::json_structure_result structure = ::dsa::detail::json_structure_problem(first, last);
  using problem = ::dsa::detail::json_structure_result::problem;
  if (structure.found == problem::duplicate_key) {
    st_fail(path, std::string(what) + " has the key " + quote_name(structure.key) + " twice in one object");
  }
  if (structure.found == problem::too_deep) {
    st_fail(path, std::string(what) + " nests objects and arrays deeper than " + std::to_string(::dsa::detail::json_max_depth) +
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


}  // namespace detail

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
    ::dsa::detail::st_fail(path_, "no tensor " + ::dsa::detail::quote_name(name));
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
    const std::string where = "tensor " + ::dsa::detail::quote_name(t.name) + ": ";
    const std::string requested = "view<" + std::string(dtype_name(want)) + ", " + std::to_string(Rank) + ">";
    if (t.type != want) {
      ::dsa::detail::st_fail(path_, where + "dtype = " + std::string(dtype_name(t.type)) + "; expected " +
                                             std::string(dtype_name(want)) + " (requested " + requested + ")");
    }
    if (t.rank() != Rank) {
      ::dsa::detail::st_fail(path_, where + "shape = " + format_shape(t.shape) + " (rank " +
                                             std::to_string(t.rank()) + "); expected rank " + std::to_string(Rank) +
                                             " (requested " + requested + ")");
    }
    const std::byte* p = map_.data() + data_offset_ + t.begin;
    if (reinterpret_cast<std::uintptr_t>(p) % alignof(T) != 0) {
      ::dsa::detail::st_fail(path_, where + "data at file offset " + std::to_string(data_offset_ + t.begin) +
                                             " is not aligned to " + std::to_string(alignof(T)) +
                                             " bytes; expected aligned " + std::string(dtype_name(want)) +
                                             " data (copy it out with bytes() instead)");
    }
    if constexpr (std::is_same_v<std::remove_cv_t<T>, bool>) {
      for (std::uint64_t i = 0; i < t.nbytes(); ++i) {
        const auto b = static_cast<unsigned>(p[i]);
        if (b > 1u) {
          ::dsa::detail::st_fail(
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

  [[noreturn]] void fail(std::string_view what) const { ::dsa::detail::st_fail(path_, what); }

  void parse_header();

  void parse_metadata(const nlohmann::json& m);

  tensor_info parse_entry(const std::string& name, const nlohmann::json& e, std::uint64_t data_size) const;

  std::filesystem::path path_;
  ::dsa::detail::file_mapping map_;
  std::uint64_t data_offset_ = 0;
  std::vector<tensor_info> tensors_;
  std::map<std::string, std::string> metadata_;
};

#if DSA_MODEL_IO_DEFINITIONS  // dsa/model/io_linkage.hpp
DSA_MODEL_IO safetensors_file safetensors_file::open(const std::filesystem::path& path) {
  safetensors_file f;
  f.path_ = path;
  f.map_ = ::dsa::detail::file_mapping::map(path);
  f.parse_header();
  return f;
}

DSA_MODEL_IO void safetensors_file::parse_header() {
  const std::uint64_t size = map_.size();
  if (size == 0) fail("file is empty; expected an 8-byte header length, a JSON header and the data");
  if (size < 8) {
    fail("file size = " + std::to_string(size) + " bytes; expected at least 8 (the header length)");
  }
  const std::uint64_t n = ::dsa::detail::read_le64(map_.data());
  if (n < 2) fail("header length = " + std::to_string(n) + "; expected at least 2 (a JSON object)");
  if (n > ::dsa::detail::safetensors_max_header) {
    fail("header length = " + std::to_string(n) + "; expected at most " +
         std::to_string(::dsa::detail::safetensors_max_header) + " bytes");
  }
  if (n > size - 8) {
    fail("header length = " + std::to_string(n) + "; expected at most " + std::to_string(size - 8) + " (file size " +
         std::to_string(size) + " - 8): the file is truncated or not safetensors");
  }
  data_offset_ = 8 + n;
  const std::uint64_t data_size = size - data_offset_;
  const char* text = reinterpret_cast<const char*>(map_.data() + 8);
  const nlohmann::json header = ::dsa::detail::parse_json_object(path_, "header", text, text + n);

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
      fail("tensor " + ::dsa::detail::quote_name(b.name) + ": data_offsets [" + std::to_string(b.begin) + ", " +
           std::to_string(b.end) + "] overlap tensor " + ::dsa::detail::quote_name(a.name) + " [" +
           std::to_string(a.begin) + ", " + std::to_string(a.end) + "]; expected disjoint byte ranges");
    }
  }
}

DSA_MODEL_IO void safetensors_file::parse_metadata(const nlohmann::json& m) {
  if (!m.is_object()) {
    fail(std::string("__metadata__ = ") + ::dsa::detail::json_excerpt(m) +
         "; expected a JSON object of string values");
  }
  for (const auto& [k, v] : m.items()) {
    if (!v.is_string()) {
      fail("__metadata__[" + ::dsa::detail::quote_name(k) + "] = " + ::dsa::detail::json_excerpt(v) +
           "; expected a string");
    }
    metadata_.emplace(k, v.get<std::string>());
  }
}

DSA_MODEL_IO tensor_info safetensors_file::parse_entry(const std::string& name, const nlohmann::json& e,
                                                       std::uint64_t data_size) const {
  const std::string where = "tensor " + ::dsa::detail::quote_name(name) + ": ";
  if (name.empty()) fail("tensor '': expected a non-empty tensor name");
  if (!e.is_object()) {
    fail(where + "entry = " + ::dsa::detail::json_excerpt(e) +
         "; expected an object with dtype, shape and data_offsets");
  }
  tensor_info t;
  t.name = name;

  const auto dt = e.find("dtype");
  if (dt == e.end()) fail(where + "missing \"dtype\"");
  if (!dt->is_string()) fail(where + "dtype = " + ::dsa::detail::json_excerpt(*dt) + "; expected a string");
  const auto parsed = parse_dtype(dt->get_ref<const std::string&>());
  if (!parsed) {
    fail(where + "dtype = " + ::dsa::detail::json_excerpt(*dt) +
         "; expected one of F8_E4M3, F8_E5M2, BF16, F16, F32, F64, I8, I16, I32, I64, U8, BOOL");
  }
  t.type = *parsed;

  const auto sh = e.find("shape");
  if (sh == e.end()) fail(where + "missing \"shape\"");
  if (!sh->is_array())
    fail(where + "shape = " + ::dsa::detail::json_excerpt(*sh) + "; expected an array of integers");
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned() ||
        d.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<index_t>::max())) {
      fail(where + "shape = " + ::dsa::detail::json_excerpt(*sh) + "; expected non-negative integer extents");
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
    fail(where + "data_offsets = " + ::dsa::detail::json_excerpt(*off) +
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
#endif  // DSA_MODEL_IO_DEFINITIONS

DSA_NAMESPACE_END
