// What the checkpoint loader (config.json, safetensors checkpoints, weights::load) does with the
// files and text of a checkpoint directory before it trusts them:
//
//   contained_file()  every file the loader finds inside a checkpoint directory (config.json,
//                     model.safetensors.index.json, model.safetensors, the shards an index names)
//                     must, once symlinks are resolved, lie inside that directory, or, for the
//                     Hugging Face hub cache (<repo>/snapshots/<revision>/<file> linking to
//                     <repo>/blobs/<hash>), inside that repository's blobs/. A checkpoint is
//                     often downloaded from a stranger: a config.json linking to ~/.ssh/id_rsa
//                     would otherwise be read and its first bytes echoed in the parse error. The
//                     check runs before the file is opened, so none of an outside file's bytes
//                     reach a message. A file the caller names itself (config::load("x.json"),
//                     safetensors_checkpoint::open("y.safetensors")) is opened as named: the
//                     caller chose it, as `cat` would.
//   quoted_path()     a path in a message: dsa::quoted with room for any path the OS accepts.
//   json_excerpt()    a JSON value from a file in a message: strings quoted, everything bounded;
//   json_parse_error() likewise for the JSON parser's message, which quotes the file's last token.
//
// Part of the dsa::model target.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

#include "dsa/core/config.hpp"
#include "dsa/core/quote.hpp"

DSA_NAMESPACE_BEGIN
namespace detail {

/// Bytes of a path quoted_path() shows: PATH_MAX on Linux, so a path that names an existing file
/// is never cut (its file name, the useful end, would be lost); a longer one came from a file.
inline constexpr std::size_t path_quote_max_bytes = 4096;

/// `p` for a message: quoted, escaped, at most path_quote_max_bytes.
inline std::string quoted_path(const std::filesystem::path& p) {
  return ::dsa::quoted(p.native(), path_quote_max_bytes);
}

/// Bytes of a JSON value's text json_excerpt() shows.
inline constexpr std::size_t json_excerpt_max_bytes = 80;

/// A JSON value read from a file, for a message: a string through dsa::quoted, anything else as
/// its JSON text (numbers, arrays, objects) quoted when it is longer than a number can be and cut
/// at json_excerpt_max_bytes. The text is built from the parsed value; invalid UTF-8 (which the
/// parser refuses anyway) would be replaced, never thrown on.
inline std::string json_excerpt(const nlohmann::json& j) {
  if (j.is_string()) return ::dsa::quoted(j.get_ref<const std::string&>());
  const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // No string inside: numbers, true, false, null, brackets and commas, rendered by nlohmann from
  // the parsed values (ASCII, nothing of the file's own text), so shown as they are, e.g.
  // `shape = [2,-1]`; only the length is bounded.
  if (text.find('"') == std::string::npos) {
    if (text.size() <= json_excerpt_max_bytes) return text;
    return text.substr(0, json_excerpt_max_bytes - 3) + "...";
  }
  return ::dsa::quoted(text, json_excerpt_max_bytes);
}

/// Bytes of a JSON parser's message json_parse_error() shows.
inline constexpr std::size_t json_parse_error_max_bytes = 256;

/// nlohmann's parse error `what` for a message: without its "[json.exception...] " tag, "; "
/// turned into ", " (so that it cannot read as the "; expected" of dsa's format), and quoted: it
/// carries the last token read from the file, which may be megabytes of an unterminated string.
inline std::string json_parse_error(std::string what) {
  if (const auto tag = what.find("] "); what.rfind("[json.exception.", 0) == 0 && tag != std::string::npos) {
    what.erase(0, tag + 2);
  }
  for (std::size_t p = what.find("; "); p != std::string::npos; p = what.find("; ", p)) what.replace(p, 2, ", ");
  return ::dsa::quoted(what, json_parse_error_max_bytes);
}

/// Whether `p` lies strictly below `root` (both canonical).
inline bool path_is_below(const std::filesystem::path& p, const std::filesystem::path& root) {
  auto r = root.begin(), q = p.begin();
  for (; r != root.end(); ++r, ++q) {
    if (q == p.end() || *q != *r) return false;
  }
  return q != p.end();
}

/// The outcome of contained_file(): `expected` empty when the file may be opened; otherwise the
/// "real path = <value>; expected <expected>" of the message (naming no byte of the file).
struct containment {
  std::filesystem::path real;  ///< the file with every symlink resolved (when it exists)
  std::string value;
  std::string expected;
  explicit operator bool() const { return expected.empty(); }
};

/// Checks that `file`, found by the loader in the checkpoint directory `dir`, resolves inside
/// `dir` or, for the Hugging Face hub cache, inside <repo>/blobs/ (see the top of this file).
/// Reads no byte of `file`: only the file system's names and links.
inline containment contained_file(const std::filesystem::path& dir, const std::filesystem::path& file) {
  namespace fs = std::filesystem;
  containment c;
  std::error_code ec;
  c.real = fs::canonical(file, ec);
  if (ec) {
    c.value = "<cannot resolve: " + ec.message() + ">";
    c.expected = "a readable file in the checkpoint directory";
    return c;
  }
  const fs::path base = fs::canonical(dir.empty() ? fs::path(".") : dir, ec);
  if (ec) {
    c.value = "<cannot resolve the directory " + quoted_path(dir) + ": " + ec.message() + ">";
    c.expected = "a readable checkpoint directory";
    return c;
  }
  if (path_is_below(c.real, base)) return c;
  const fs::path revision_dir = base.parent_path();
  if (revision_dir.filename() == "snapshots" && path_is_below(c.real, revision_dir.parent_path() / "blobs")) return c;
  c.value = quoted_path(c.real);
  c.expected = "a file inside the checkpoint directory " + quoted_path(base) +
               " (or its Hugging Face cache's blobs/): a checkpoint's files may not link outside it";
  return c;
}

}  // namespace detail
DSA_NAMESPACE_END
