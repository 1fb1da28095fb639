// Writing safetensors files: dsa::write_safetensors. The file is written to a fresh, exclusively
// created temporary file beside the target and renamed over it only on success; a target that
// is not a regular file (a device, a FIFO, a directory) is refused, never replaced.
// Part of the dsa::model target.
#pragma once

#include <fcntl.h>
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
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "dsa/core/config.hpp"
#include "dsa/core/error.hpp"
#include "dsa/core/quote.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/model/dtype.hpp"
#include "dsa/model/io_linkage.hpp"
#include "dsa/model/safetensors_file.hpp"

DSA_NAMESPACE_BEGIN

namespace detail {

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

}  // namespace detail

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
    fail("safetensors", "tensor " + ::dsa::detail::quote_name(name) + " view strides",
         format_shape(std::span(v.strides())), "a contiguous row-major view");
  }
  if (v.data_handle() == nullptr && v.size() != 0)
    fail("safetensors", "tensor " + ::dsa::detail::quote_name(name) + " data", "null", "a non-null pointer");
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
DSA_MODEL_IO void write_safetensors(const std::filesystem::path& path, std::span<const safetensors_entry> entries,
                                    const std::map<std::string, std::string>& metadata) {
std::vector<const safetensors_entry*> order;
std::set<std::string_view> names;
for (const safetensors_entry& e : entries) {
  if (e.name.empty() || e.name == "__metadata__") {
    ::dsa::detail::st_fail(path, "tensor " + ::dsa::detail::quote_name(e.name) +
                                          ": expected a non-empty name other than __metadata__");
  }
  if (!names.insert(e.name).second)
    ::dsa::detail::st_fail(path, "tensor " + ::dsa::detail::quote_name(e.name) + " is given twice");
  if (!is_valid_utf8(e.name)) {
    ::dsa::detail::st_fail(path, "tensor " + ::dsa::detail::quote_name(e.name) +
                                          ": expected a name in valid UTF-8 (a safetensors header is JSON)");
  }
  const std::string where = "tensor " + ::dsa::detail::quote_name(e.name) + ": ";
  std::uint64_t nbytes = dtype_size(e.type);
  for (index_t d : e.shape) {
    if (d < 0)
      ::dsa::detail::st_fail(path,
                                  where + "shape = " + format_shape(e.shape) + "; expected non-negative extents");
    if (__builtin_mul_overflow(nbytes, static_cast<std::uint64_t>(d), &nbytes)) {
      ::dsa::detail::st_fail(
          path, where + "shape = " + format_shape(e.shape) + "; expected a byte size that fits in 64 bits");
    }
  }
  if (nbytes != e.data.size()) {
    ::dsa::detail::st_fail(path, where + "data = " + std::to_string(e.data.size()) + " bytes; expected " +
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
    ::dsa::detail::st_fail(path, "metadata " + ::dsa::detail::quote_name(key) +
                                          ": expected a key and value in valid UTF-8 (a safetensors header is JSON)");
  }
}
if (!metadata.empty()) header["__metadata__"] = metadata;
std::string text = header.dump();
text.append((8 - text.size() % 8) % 8, ' ');

::dsa::detail::check_write_target(path);
std::array<char, 8> len{};
for (int i = 0; i < 8; ++i) len[static_cast<std::size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xFFu);
::dsa::detail::temp_file tmp(path);
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
