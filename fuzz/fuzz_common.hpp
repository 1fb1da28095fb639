// Shared pieces of the libFuzzer targets (fuzz/README.md).
//
// The readers under test take file paths (they mmap or stream files), so each input is written
// to an anonymous in-memory file (memfd) and handed over as /proc/self/fd/<fd>: no disk I/O, and
// the file has exactly the input's size, so a read past its end is a real out-of-bounds access.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dsa/core/quote.hpp"

namespace dsa_fuzz {

/// Stops the run with a message: a broken invariant that is not a sanitizer report.
[[noreturn]] inline void invariant_failed(const char* what) {
  std::fprintf(stderr, "dsa fuzz invariant failed: %s\n", what);
  std::abort();
}

#define DSA_FUZZ_ASSERT(cond)                                    \
  do {                                                           \
    if (!(cond)) ::dsa_fuzz::invariant_failed(#cond);            \
  } while (0)

/// A message dsa printed (an error's what(), a note) is inert and bounded: valid UTF-8 without
/// C0/C1 controls, DEL or bidirectional overrides (dsa/core/quote.hpp), and at most
/// error_message_max_bytes plus the length note. Every target checks every error it catches, so
/// the fuzzers reach escaping with whatever file content they make up (issue 33, class 6).
inline void check_printable(std::string_view message) {
  DSA_FUZZ_ASSERT(message.size() <= dsa::error_message_max_bytes + 64);
  DSA_FUZZ_ASSERT(dsa::escape_for_terminal(message) == message);
}

/// One anonymous in-memory file, rewritten with every input.
class memfd_file {
 public:
  explicit memfd_file(const char* name) : fd_(::memfd_create(name, MFD_CLOEXEC)) {
    if (fd_ < 0) invariant_failed("memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  memfd_file(const memfd_file&) = delete;
  memfd_file& operator=(const memfd_file&) = delete;
  ~memfd_file() { ::close(fd_); }

  /// Replaces the contents with `size` bytes at `data`; returns the path that opens them.
  const std::string& write(const std::uint8_t* data, std::size_t size) {
    if (::ftruncate(fd_, 0) != 0) invariant_failed("ftruncate failed");
    std::size_t done = 0;
    while (done < size) {
      const ssize_t w = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (w <= 0) invariant_failed("pwrite failed");
      done += static_cast<std::size_t>(w);
    }
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

}  // namespace dsa_fuzz
