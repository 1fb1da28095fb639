// The structural checks every JSON file dsa reads (config.json, safetensors headers, sharded
// checkpoint indexes) passes before it becomes an nlohmann::json: nesting depth at most
// json_max_depth, and no key twice in one object (nlohmann would silently keep one of them).
//
// Why a separate SAX pass: nlohmann's callback parser, the obvious place for these checks,
// rescans the parent object after every child object it closes, so a header of n tensor entries
// costs O(n^2); and a value nested 100,000 deep is parsed fine but later destroyed and printed
// recursively (json_excerpt), which overflows the stack. The SAX pass is iterative and linear;
// the DOM parse that follows uses no callback, so it is linear too, and it never sees a document
// deeper than the bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsa/core/config.hpp"

DSA_NAMESPACE_BEGIN
namespace detail {

/// Deepest nesting of objects and arrays accepted. dsa's files nest 3 levels; 64 leaves room for
/// any metadata a tool adds while keeping recursive printing and destruction shallow.
inline constexpr int json_max_depth = 64;

/// What json_structure_problem found. `none` also when the text is not valid JSON at all: the DOM
/// parse then reports that, with nlohmann's position and reason.
struct json_structure_result {
  enum class problem { none, too_deep, duplicate_key };
  problem found = problem::none;
  std::string key;  ///< duplicate_key: the key (raw bytes from the file: escape before printing)
};


class checker {
 public:
  using json = nlohmann::json;
  explicit checker(int max_depth) : max_depth_(max_depth) {}

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(json::number_integer_t) { return true; }
  bool number_unsigned(json::number_unsigned_t) { return true; }
  bool number_float(json::number_float_t, const json::string_t&) { return true; }
  bool string(json::string_t&) { return true; }
  bool binary(json::binary_t&) { return true; }
  bool start_object(std::size_t) {
    keys_.emplace_back();
    return enter();
  }
  bool key(json::string_t& k) {
    if (!keys_.back().insert(k).second) {
      result.found = json_structure_result::problem::duplicate_key;
      result.key = k;
      return false;
    }
    return true;
  }
  bool end_object() {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) {
    keys_.emplace_back();  // unused: keeps keys_ aligned with the nesting
    return enter();
  }
  bool end_array() {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;  // the DOM parse reports it, with nlohmann's position and reason
  }

  json_structure_result result;

 private:
  bool enter() {
    if (++depth_ > max_depth_) {
      result.found = json_structure_result::problem::too_deep;
      return false;
    }
    return true;
  }
  int max_depth_;
  int depth_ = 0;
  std::vector<std::set<std::string>> keys_;
};


/// Checks depth and duplicate keys of the JSON text [first, last) in one linear pass.
inline json_structure_result json_structure_problem(const char* first, const char* last,
                                                    int max_depth = json_max_depth) {
  checker c(max_depth);
  nlohmann::json::sax_parse(first, last, &c, nlohmann::json::input_format_t::json, /*strict=*/true);
  return c.result;
}

}  // namespace detail
DSA_NAMESPACE_END
