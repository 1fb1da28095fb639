// dsa::safetensors_file, dsa::safetensors_checkpoint and dsa::write_safetensors: round trips, the
// golden files, and hostile files built byte by byte (every one must be a clear dsa::error).
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "dsa/core/types.hpp"
#include "dsa/model/safetensors.hpp"

namespace fs = std::filesystem;
using dsa::dtype;
using dsa::index_t;

namespace {

/// A fresh directory under the system temp dir, removed with its contents at scope exit.
struct temp_dir {
  fs::path path;
  temp_dir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("dsa_test_safetensors_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path operator/(const std::string& name) const { return path / name; }
};

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::string le64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

/// A file with the given JSON header and `data_size` zero bytes of data.
std::string file_with_header(const std::string& json, std::size_t data_size) {
  return le64(json.size()) + json + std::string(data_size, '\0');
}

/// Writes a file with `json` as header and expects open() to throw a message containing all of
/// `needles` (and the file's path).
void expect_open_error(const temp_dir& dir, const std::string& json, std::size_t data_size,
                       std::initializer_list<const char*> needles) {
  const fs::path p = dir / "hostile.safetensors";
  write_bytes(p, file_with_header(json, data_size));
  CAPTURE(json);
  try {
    (void)dsa::safetensors_file::open(p);
    FAIL("expected dsa::error");
  } catch (const dsa::error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("dsa::safetensors: ") == 0);
    CHECK(what.find(p.string()) != std::string::npos);
    for (const char* n : needles) CHECK_MESSAGE(what.find(n) != std::string::npos, "missing: ", n);
  }
}

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

}  // namespace

TEST_CASE("dtype names, sizes and C++ types") {
  for (dtype t : {dtype::f8_e4m3, dtype::f8_e5m2, dtype::bf16, dtype::f16, dtype::f32, dtype::f64, dtype::i8,
                  dtype::i16, dtype::i32, dtype::i64, dtype::u8, dtype::boolean}) {
    CHECK(dsa::parse_dtype(dsa::dtype_name(t)) == t);
  }
  CHECK_FALSE(dsa::parse_dtype("F7").has_value());
  CHECK_FALSE(dsa::parse_dtype("f32").has_value());
  CHECK(dsa::dtype_size(dtype::f8_e4m3) == 1);
  CHECK(dsa::dtype_size(dtype::bf16) == 2);
  CHECK(dsa::dtype_size(dtype::f32) == 4);
  CHECK(dsa::dtype_size(dtype::i64) == 8);
  static_assert(dsa::dtype_of<float>() == dtype::f32);
  static_assert(dsa::dtype_of<const dsa::bf16>() == dtype::bf16);
  static_assert(dsa::dtype_of<dsa::fp8_e4m3>() == dtype::f8_e4m3);
  static_assert(dsa::dtype_of<std::int32_t>() == dtype::i32);
  static_assert(dsa::dtype_of<bool>() == dtype::boolean);
}

TEST_CASE("write_safetensors then open: every dtype, shape, byte and metadata entry survives") {
  temp_dir dir;
  const std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
  const std::vector<dsa::bf16> b16 = {dsa::bf16(1.0f), dsa::bf16(-3.5f), dsa::bf16(0.125f), dsa::bf16(7.0f)};
  const std::vector<dsa::fp8_e4m3> f8 = {dsa::fp8_e4m3(448.0f), dsa::fp8_e4m3(-0.5f), dsa::fp8_e4m3(0.001953125f)};
  const std::vector<std::int32_t> i32 = {1, -2, 3, 2147483647};
  const std::vector<std::int64_t> i64 = {-1, 1LL << 40, 7};
  const std::vector<std::uint8_t> u8 = {};
  const std::vector<std::uint8_t> flags = {1, 0, 1};
  const std::vector<double> scalar = {2.718281828459045};
  const std::vector<dsa::safetensors_entry> entries = {
      {"w.f32", dtype::f32, {2, 3}, bytes_of(f32)},    {"w.bf16", dtype::bf16, {4}, bytes_of(b16)},
      {"z.f8", dtype::f8_e4m3, {1, 3}, bytes_of(f8)},  {"a.i32", dtype::i32, {2, 2}, bytes_of(i32)},
      {"a.i64", dtype::i64, {3}, bytes_of(i64)},       {"empty", dtype::u8, {0, 5}, bytes_of(u8)},
      {"flags", dtype::boolean, {3}, bytes_of(flags)}, {"scalar", dtype::f64, {}, bytes_of(scalar)},
  };
  const fs::path p = dir / "round.safetensors";
  dsa::write_safetensors(p, entries, {{"format", "pt"}, {"note", "round trip"}});
  CHECK_FALSE(fs::exists(dir / "round.safetensors.tmp"));

  auto f = dsa::safetensors_file::open(p);
  CHECK(f.path() == p);
  CHECK(f.file_size() == fs::file_size(p));
  CHECK(f.data_offset() % 8 == 0);
  REQUIRE(f.tensors().size() == entries.size());
  for (std::size_t i = 1; i < f.tensors().size(); ++i) CHECK(f.tensors()[i - 1].name < f.tensors()[i].name);
  for (const auto& e : entries) {
    CAPTURE(e.name);
    const dsa::tensor_info& t = f.at(e.name);
    CHECK(t.type == e.type);
    CHECK(t.shape == e.shape);
    const auto b = f.bytes(e.name);
    REQUIRE(b.size() == e.data.size());
    CHECK(std::equal(b.begin(), b.end(), e.data.begin(), e.data.end()));
    // The writer orders by element size, so every tensor is aligned for its type.
    CHECK((f.data_offset() + t.begin) % dsa::dtype_size(t.type) == 0);
  }
  CHECK(f.metadata().size() == 2);
  CHECK(f.metadata().at("note") == "round trip");

  const auto v = f.view<float, 2>("w.f32");
  CHECK(v.extent(0) == 2);
  CHECK(v.extent(1) == 3);
  CHECK(v(1, 2) == 1e-30f);
  CHECK(f.view<dsa::bf16, 1>("w.bf16")(1).to_float() == -3.5f);
  CHECK(f.view<dsa::fp8_e4m3, 2>("z.f8")(0, 0).to_float() == 448.0f);
  CHECK(f.view<std::int64_t, 1>("a.i64")(1) == (1LL << 40));
  CHECK(f.view<std::uint8_t, 2>("empty").size() == 0);
  CHECK(f.view<bool, 1>("flags")(2) == true);
  CHECK(f.at("scalar").rank() == 0);
  CHECK(f.at("scalar").numel() == 1);
  CHECK(f.find("nope") == nullptr);
  CHECK_FALSE(f.contains("nope"));
  CHECK_THROWS_WITH_AS((void)f.at("nope"), doctest::Contains("tensor 'nope'"), dsa::error);

  // Moving the file keeps the mapping, so earlier views stay valid.
  auto moved = std::move(f);
  CHECK(v(0, 0) == 1.5f);
  CHECK(moved.view<float, 2>("w.f32")(0, 1) == -2.0f);
}

TEST_CASE("make_safetensors_entry from views") {
  temp_dir dir;
  std::vector<float> data = {1, 2, 3, 4, 5, 6};
  const auto v = dsa::make_view(data.data(), {2, 3});
  const std::vector<dsa::safetensors_entry> entries = {dsa::make_safetensors_entry("x", v)};
  dsa::write_safetensors(dir / "v.safetensors", entries);
  const auto f = dsa::safetensors_file::open(dir / "v.safetensors");
  CHECK(f.view<float, 2>("x")(1, 0) == 4.0f);
  // A strided (column) view is not contiguous.
  const dsa::host_view<float, 2> strided(data.data(), {3, 1}, {2, 1});
  CHECK_THROWS_WITH_AS((void)dsa::make_safetensors_entry("col", strided), doctest::Contains("contiguous"), dsa::error);
}

TEST_CASE("write_safetensors rejects bad entries") {
  temp_dir dir;
  const std::vector<float> three = {1, 2, 3};
  const fs::path p = dir / "bad.safetensors";
  CHECK_THROWS_WITH_AS(
      dsa::write_safetensors(p, std::vector<dsa::safetensors_entry>{{"a", dtype::f32, {4}, bytes_of(three)}}),
      doctest::Contains("tensor 'a': data = 12 bytes; expected 16 bytes (F32 [4])"), dsa::error);
  CHECK_THROWS_WITH_AS(
      dsa::write_safetensors(p, std::vector<dsa::safetensors_entry>{{"a", dtype::f32, {3}, bytes_of(three)},
                                                                    {"a", dtype::f32, {3}, bytes_of(three)}}),
      doctest::Contains("tensor 'a' is given twice"), dsa::error);
  CHECK_THROWS_WITH_AS(dsa::write_safetensors(
                           p, std::vector<dsa::safetensors_entry>{{"__metadata__", dtype::f32, {3}, bytes_of(three)}}),
                       doctest::Contains("other than __metadata__"), dsa::error);
  CHECK_THROWS_WITH_AS(
      dsa::write_safetensors(p, std::vector<dsa::safetensors_entry>{{"a", dtype::f32, {-3}, bytes_of(three)}}),
      doctest::Contains("non-negative"), dsa::error);
  CHECK_FALSE(fs::exists(p));
}

TEST_CASE("the golden files open and list the expected tensors") {
  const fs::path data = DSA_TEST_DATA_DIR;
  const auto f = dsa::safetensors_file::open(data / "primitives.safetensors");
  CHECK(f.tensors().size() == 36);
  CHECK(f.metadata().at("seed") == "7");
  for (const char* name : {"hadamard.x", "hadamard.y", "hadamard_f32.x", "act_quant.ue8m0.q", "act_quant.fp32.s",
                           "weight_quant.w", "indexer.q", "indexer.k_scale", "topk.score", "topk.k", "sparse_mla.kv",
                           "sparse_mla.lse", "kl_dense.attn", "kl_sparse.topk"}) {
    CHECK_MESSAGE(f.contains(name), name);
  }
  CHECK(f.at("sparse_mla.q").description() == "BF16 [4, 16, 576]");
  CHECK(f.at("indexer.q").description() == "F8_E4M3 [16, 64, 128]");
  CHECK(f.view<std::int32_t, 1>("topk.k")(0) == 64);
  const auto score = f.view<float, 2>("indexer.score");
  CHECK(score.extent(0) == 16);
  CHECK(score.extent(1) == 300);

  // A checkpoint directory with a single model.safetensors.
  const auto ckpt = dsa::safetensors_checkpoint::open(data / "tiny-dsv32");
  CHECK(ckpt.shards().size() == 1);
  CHECK(ckpt.size() == ckpt.shards()[0].tensors().size());
  CHECK(ckpt.at("model.layers.0.mlp.down_proj.weight").description() == "F8_E4M3 [256, 512]");
  CHECK(ckpt.view<float, 2>("model.layers.0.mlp.down_proj.weight_scale_inv").extent(0) == 2);
  CHECK(ckpt.view<dsa::bf16, 2>("lm_head.weight").extent(0) == 512);

  const auto expected = dsa::safetensors_file::open(data / "tiny-dsv32" / "expected.safetensors");
  CHECK(expected.at("prompt").description() == "I64 [1, 80]");
  CHECK(expected.metadata().at("decode_steps") == "8");
}

TEST_CASE("missing, directory, empty and truncated files") {
  temp_dir dir;
  CHECK_THROWS_WITH_AS((void)dsa::safetensors_file::open(dir / "missing.safetensors"),
                       doctest::Contains("missing.safetensors': cannot open: No such file or directory"), dsa::error);
  CHECK_THROWS_WITH_AS((void)dsa::safetensors_file::open(dir.path), doctest::Contains("is a directory"), dsa::error);

  // A FIFO without a writer must be refused, not block the reader.
  REQUIRE(::mkfifo((dir / "fifo.safetensors").c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS((void)dsa::safetensors_file::open(dir / "fifo.safetensors"),
                       doctest::Contains("fifo.safetensors': is not a regular file"), dsa::error);

  write_bytes(dir / "empty.safetensors", "");
  CHECK_THROWS_WITH_AS((void)dsa::safetensors_file::open(dir / "empty.safetensors"),
                       doctest::Contains("empty.safetensors': file is empty"), dsa::error);

  write_bytes(dir / "short.safetensors", std::string("\x10\x00\x00", 3));
  CHECK_THROWS_WITH_AS((void)dsa::safetensors_file::open(dir / "short.safetensors"),
                       doctest::Contains("file size = 3 bytes; expected at least 8"), dsa::error);

  // A valid file cut short inside the data section.
  const std::vector<float> v(16, 1.0f);
  dsa::write_safetensors(dir / "full.safetensors",
                         std::vector<dsa::safetensors_entry>{{"x", dtype::f32, {16}, bytes_of(v)}});
  std::ifstream in(dir / "full.safetensors", std::ios::binary);
  std::string full((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write_bytes(dir / "cut.safetensors", full.substr(0, full.size() - 5));
  CHECK_THROWS_WITH_AS((void)dsa::safetensors_file::open(dir / "cut.safetensors"),
                       doctest::Contains("tensor 'x': data_offsets [0, 64]; expected end <= 59"), dsa::error);
  // ... and cut inside the header.
  write_bytes(dir / "cut_header.safetensors", full.substr(0, 20));
  CHECK_THROWS_WITH_AS((void)dsa::safetensors_file::open(dir / "cut_header.safetensors"),
                       doctest::Contains("expected at most 12 (file size 20 - 8)"), dsa::error);
}

TEST_CASE("hostile header lengths") {
  temp_dir dir;
  const fs::path p = dir / "h.safetensors";
  write_bytes(p, le64(1000) + "{}");
  CHECK_THROWS_WITH_AS((void)dsa::safetensors_file::open(p),
                       doctest::Contains("header length = 1000; expected at most 2"), dsa::error);
  write_bytes(p, le64(1) + "{}");
  CHECK_THROWS_WITH_AS((void)dsa::safetensors_file::open(p),
                       doctest::Contains("header length = 1; expected at least 2"), dsa::error);
  write_bytes(p, le64(std::uint64_t{1} << 40) + "{}");
  CHECK_THROWS_WITH_AS((void)dsa::safetensors_file::open(p),
                       doctest::Contains("header length = 1099511627776; expected at most 104857600"), dsa::error);
  write_bytes(p, le64(~std::uint64_t{0}) + "{}");
  CHECK_THROWS_WITH_AS((void)dsa::safetensors_file::open(p), doctest::Contains("header length = 18446744073709551615"),
                       dsa::error);
  // The smallest valid file: an empty object.
  write_bytes(p, le64(2) + "{}");
  CHECK(dsa::safetensors_file::open(p).tensors().empty());
}

TEST_CASE("hostile JSON headers") {
  temp_dir dir;
  const std::string ok_meta = R"("__metadata__":{"a":"b"})";
  expect_open_error(dir, "not json at all", 0, {"header is not valid JSON"});
  expect_open_error(dir, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", 4, {"not valid JSON"});
  expect_open_error(dir, "[1, 2, 3]", 0, {"header is a JSON array; expected a JSON object"});
  expect_open_error(dir, "\"str\"", 0, {"header is a JSON string; expected a JSON object"});
  expect_open_error(dir, R"({"a":[1,2]})", 0, {"tensor 'a': entry = [1,2]; expected an object"});
  expect_open_error(dir, R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4, {"tensor 'a': missing \"dtype\""});
  expect_open_error(dir, R"({"a":{"dtype":"F7","shape":[1],"data_offsets":[0,4]}})", 4,
                    {"tensor 'a': dtype = 'F7'; expected one of F8_E4M3,"});
  expect_open_error(dir, R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4, {"dtype = 4; expected a string"});
  expect_open_error(dir, R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4, {"tensor 'a': missing \"shape\""});
  expect_open_error(dir, R"({"a":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,4]}})", 4,
                    {"tensor 'a': shape = [2,-1]; expected non-negative integer extents"});
  expect_open_error(dir, R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,4]}})", 4,
                    {"shape = [2.5]; expected non-negative integer extents"});
  expect_open_error(dir, R"({"a":{"dtype":"F32","shape":3,"data_offsets":[0,4]}})", 4,
                    {"shape = 3; expected an array of integers"});
  expect_open_error(dir, R"({"a":{"dtype":"F32","shape":[1]}})", 4, {"tensor 'a': missing \"data_offsets\""});
  expect_open_error(dir, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4,
                    {"data_offsets = [0]; expected [begin, end]"});
  expect_open_error(dir, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4,
                    {"data_offsets = [-4,0]; expected [begin, end], non-negative integers"});
  expect_open_error(dir, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8,
                    {"tensor 'a': data_offsets [8, 4]; expected begin <= end"});
  expect_open_error(dir, R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", 8,
                    {"tensor 'a': data_offsets [0, 12]; expected end <= 8 (the data section's size)"});
  expect_open_error(dir, R"({"a.b":{"dtype":"F32","shape":[3],"data_offsets":[0,10]}})", 16,
                    {"tensor 'a.b': data_offsets [0, 10] = 10 bytes; expected 12 bytes (F32 [3])"});
  expect_open_error(dir,
                    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"I32","shape":[2],"data_offsets":[4,12]}})",
                    12, {"tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]; expected disjoint"});
  expect_open_error(dir, R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0,
                    {"tensor 'a': shape = [4294967296, 4294967296]; expected a shape whose byte size fits in 64 bits"});
  expect_open_error(dir, R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0,
                    {"fits in 64 bits"});
  expect_open_error(dir, R"({"a":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,0]}})", 0,
                    {"expected non-negative integer extents"});
  expect_open_error(dir, R"({"__metadata__":[1]})", 0, {"__metadata__ = [1]; expected a JSON object of string values"});
  expect_open_error(dir, R"({"__metadata__":{"k":1}})", 0, {"__metadata__['k'] = 1; expected a string"});
  expect_open_error(dir,
                    R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                    R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                    4, {"header has the key 'a' twice"});
  expect_open_error(dir, R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4,
                    {"expected a non-empty tensor name"});
  expect_open_error(dir, R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4,
                    {"header has the key 'dtype' twice in one object"});
  // A tensor name carrying a terminal escape sequence and a line feed is quoted escaped.
  expect_open_error(dir, R"({"a\u001b[2J\nb":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4,
                    {"tensor 'a\\x1b[2J\\x0ab': data_offsets [0, 4] = 4 bytes"});
  // Deep nesting anywhere (here a metadata value and a tensor's shape) is refused while parsing:
  // an error naming the bound, never a stack overflow when the value is printed or destroyed.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_open_error(dir, R"({"__metadata__":{"k":)" + deep + "}}", 0,
                    {"header nests objects and arrays deeper than 64 levels; expected at most that"});
  expect_open_error(dir, R"({"a":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,4]}})", 4,
                    {"deeper than 64 levels"});

  // Zero-size tensors overlap nothing; holes in the data section and trailing spaces are fine.
  const temp_dir dir2;
  write_bytes(dir2 / "ok.safetensors", file_with_header(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                                                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                                        R"("c":{"dtype":"I32","shape":[1],"data_offsets":[8,12]},)" +
                                                            ok_meta + "}    ",
                                                        12));
  const auto f = dsa::safetensors_file::open(dir2 / "ok.safetensors");
  CHECK(f.tensors().size() == 3);
  CHECK(f.metadata().at("a") == "b");
}

TEST_CASE("opening a header is linear in its number of tensors") {
  // A time bound as a ratio, not an absolute time: 16x the tensors may cost at most 64x the time
  // (linear: about 16x; the quadratic parse this replaces: about 256x). Best of three each.
  const temp_dir dir;
  const auto header_of = [](int n) {
    std::string h = "{";
    for (int i = 0; i < n; ++i) {
      if (i) h.push_back(',');
      h.append(R"("layers.)").append(std::to_string(i));
      h.append(R"(.weight":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})");
    }
    h.push_back('}');
    return h;
  };
  const auto best_open_seconds = [&](int n) {
    const fs::path p = dir / ("n" + std::to_string(n) + ".safetensors");
    write_bytes(p, file_with_header(header_of(n), 0));
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto f = dsa::safetensors_file::open(p);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      CHECK(f.tensors().size() == static_cast<std::size_t>(n));
      best = std::min(best, s);
    }
    return best;
  };
  const double small = best_open_seconds(2000), large = best_open_seconds(32000);
  MESSAGE("2000 tensors: " << small << " s, 32000 tensors: " << large << " s");
  CHECK(large <= 64.0 * small);
}

TEST_CASE("view<T, R> checks dtype, rank, alignment and BOOL values") {
  temp_dir dir;
  // The header is padded to a multiple of 8, so data offset 1 is misaligned for float both in the
  // file and in the page-aligned mapping, and offset 8 is aligned.
  std::string json = R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                     R"("m":{"dtype":"F32","shape":[1],"data_offsets":[1,5]},)"
                     R"("f":{"dtype":"F32","shape":[2,1],"data_offsets":[8,16]},)"
                     R"("t":{"dtype":"BOOL","shape":[2],"data_offsets":[16,18]}})";
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string data(18, '\0');
  data[17] = 2;  // not a valid bool
  const fs::path p = dir / "v.safetensors";
  write_bytes(p, le64(json.size()) + json + data);
  const auto f = dsa::safetensors_file::open(p);

  CHECK_THROWS_WITH_AS((void)(f.view<dsa::bf16, 2>("f")),
                       doctest::Contains("tensor 'f': dtype = F32; expected BF16 (requested view<BF16, 2>)"),
                       dsa::error);
  CHECK_THROWS_WITH_AS((void)(f.view<float, 3>("f")),
                       doctest::Contains("tensor 'f': shape = [2, 1] (rank 2); expected rank 3"), dsa::error);
  CHECK(f.view<float, 2>("f").extent(0) == 2);
  CHECK_THROWS_WITH_AS((void)(f.view<float, 1>("m")), doctest::Contains("tensor 'm': data at file offset"), dsa::error);
  CHECK_THROWS_WITH_AS((void)(f.view<float, 1>("m")), doctest::Contains("is not aligned to 4 bytes"), dsa::error);
  CHECK(f.bytes("m").size() == 4);  // the bytes remain reachable
  CHECK_THROWS_WITH_AS((void)(f.view<bool, 1>("t")), doctest::Contains("tensor 't': element 1 = 2; expected 0 or 1"),
                       dsa::error);
  CHECK_THROWS_WITH_AS((void)(f.view<float, 1>("nope")), doctest::Contains("no tensor 'nope'"), dsa::error);
}

TEST_CASE("sharded checkpoints") {
  temp_dir dir;
  const std::vector<float> a = {1, 2, 3, 4};
  const std::vector<std::int32_t> b = {7, 8};
  const std::vector<dsa::bf16> c = {dsa::bf16(0.5f), dsa::bf16(-1.0f), dsa::bf16(2.0f)};
  dsa::write_safetensors(dir / "model-00001-of-00002.safetensors",
                         std::vector<dsa::safetensors_entry>{{"layer.a", dtype::f32, {2, 2}, bytes_of(a)},
                                                             {"layer.b", dtype::i32, {2}, bytes_of(b)}});
  dsa::write_safetensors(dir / "model-00002-of-00002.safetensors",
                         std::vector<dsa::safetensors_entry>{{"head.c", dtype::bf16, {3}, bytes_of(c)}});
  const auto write_index = [&](const std::string& weight_map) {
    write_bytes(dir / "model.safetensors.index.json",
                R"({"metadata": {"total_size": 30, "format": "pt"}, "weight_map": )" + weight_map + "}");
  };
  write_index(R"({"layer.a": "model-00001-of-00002.safetensors", "layer.b": "model-00001-of-00002.safetensors",
                  "head.c": "model-00002-of-00002.safetensors"})");

  for (const fs::path& p : {dir.path, dir / "model.safetensors.index.json"}) {
    CAPTURE(p);
    const auto ck = dsa::safetensors_checkpoint::open(p);
    CHECK(ck.shards().size() == 2);
    CHECK(ck.size() == 3);
    CHECK(ck.names() == std::vector<std::string_view>{"head.c", "layer.a", "layer.b"});
    CHECK(ck.metadata().at("total_size") == "30");
    CHECK(ck.metadata().at("format") == "pt");
    CHECK(ck.view<float, 2>("layer.a")(1, 1) == 4.0f);
    CHECK(ck.view<std::int32_t, 1>("layer.b")(0) == 7);
    CHECK(ck.view<dsa::bf16, 1>("head.c")(1).to_float() == -1.0f);
    CHECK(ck.shard_of("head.c").path().filename() == "model-00002-of-00002.safetensors");
    CHECK(ck.bytes("layer.b").size() == 8);
    CHECK(ck.find("nope") == nullptr);
    CHECK_THROWS_WITH_AS((void)ck.at("nope"), doctest::Contains("model.safetensors.index.json': no tensor 'nope'"),
                         dsa::error);
    CHECK_THROWS_WITH_AS((void)(ck.view<float, 1>("head.c")), doctest::Contains("dtype = BF16; expected F32"),
                         dsa::error);
  }

  SUBCASE("a missing shard") {
    write_index(R"({"layer.a": "model-00001-of-00002.safetensors", "head.c": "model-00003-of-00003.safetensors"})");
    CHECK_THROWS_WITH_AS((void)dsa::safetensors_checkpoint::open(dir.path),
                         doctest::Contains("weight_map['head.c'] = 'model-00003-of-00003.safetensors'; expected an "
                                           "existing shard file"),
                         dsa::error);
  }
  SUBCASE("a tensor missing from its shard") {
    write_index(R"({"layer.a": "model-00001-of-00002.safetensors", "head.c": "model-00001-of-00002.safetensors"})");
    CHECK_THROWS_WITH_AS((void)dsa::safetensors_checkpoint::open(dir.path),
                         doctest::Contains("weight_map['head.c'] = 'model-00001-of-00002.safetensors'; but that shard "
                                           "has no tensor 'head.c'"),
                         dsa::error);
  }
  SUBCASE("a shard path outside the directory") {
    write_index(R"({"layer.a": "../model-00001-of-00002.safetensors"})");
    CHECK_THROWS_WITH_AS((void)dsa::safetensors_checkpoint::open(dir.path),
                         doctest::Contains("expected a plain file name"), dsa::error);
  }
  SUBCASE("a shard name with an embedded NUL") {
    write_bytes(dir / "model.safetensors.index.json",
                std::string(R"({"weight_map": {"layer.a": "model-00001-of-00002.safetensors\u0000.x"}})"));
    CHECK_THROWS_WITH_AS((void)dsa::safetensors_checkpoint::open(dir.path),
                         doctest::Contains("expected a plain file name"), dsa::error);
  }
  SUBCASE("a shard symlinked outside the checkpoint is refused; the Hugging Face cache layout is not") {
    // A link to a file elsewhere: refused before the file is opened.
    const temp_dir elsewhere;
    write_bytes(elsewhere / "secret.txt", std::string("root:x:0:0:root:/root:/bin/bash\n"));
    fs::create_symlink(elsewhere / "secret.txt", dir / "model-00003-of-00003.safetensors");
    write_index(R"({"layer.a": "model-00003-of-00003.safetensors"})");
    try {
      (void)dsa::safetensors_checkpoint::open(dir.path);
      FAIL("a shard outside the checkpoint was opened");
    } catch (const dsa::error& e) {
      const std::string m = e.what();
      CHECK(m.find("expected a file inside the checkpoint directory") != std::string::npos);
      CHECK(m.find("root:x") == std::string::npos);  // none of the file's bytes
    }
    // model.safetensors of a plain directory likewise.
    const temp_dir single;
    fs::create_symlink(elsewhere / "secret.txt", single / "model.safetensors");
    CHECK_THROWS_WITH_AS((void)dsa::safetensors_checkpoint::open(single.path),
                         doctest::Contains("expected a file inside the checkpoint directory"), dsa::error);
    // <repo>/snapshots/<revision>/<shard> -> ../../blobs/<hash>: the hub cache, accepted.
    const temp_dir repo;
    fs::create_directories(repo / "blobs");
    fs::create_directories(repo / "snapshots" / "abc123");
    fs::copy_file(dir / "model-00001-of-00002.safetensors", repo / "blobs" / "0f1e2d");
    fs::create_symlink("../../blobs/0f1e2d", repo / "snapshots" / "abc123" / "model-00001-of-00002.safetensors");
    write_bytes(repo / "snapshots" / "abc123" / "model.safetensors.index.json",
                R"({"weight_map": {"layer.a": "model-00001-of-00002.safetensors"}})");
    const auto ck = dsa::safetensors_checkpoint::open(repo / "snapshots" / "abc123");
    CHECK(ck.contains("layer.a"));
  }
  SUBCASE("the index symlinked outside the checkpoint is refused before it is read (issue 33)") {
    const temp_dir elsewhere;
    write_bytes(elsewhere / "index.json", R"({"weight_map": {"SECRET-NAME": "x.safetensors"}})");
    fs::remove(dir / "model.safetensors.index.json");
    fs::create_symlink(elsewhere / "index.json", dir / "model.safetensors.index.json");
    try {
      (void)dsa::safetensors_checkpoint::open(dir.path);
      FAIL("an index outside the checkpoint was read");
    } catch (const dsa::error& e) {
      const std::string m = e.what();
      CAPTURE(m);
      CHECK(m.find("dsa::safetensors: '" + (dir / "model.safetensors.index.json").string() + "': real path = '" +
                   (elsewhere / "index.json").string() + "'; expected a file inside the checkpoint directory") == 0);
      CHECK(m.find("SECRET") == std::string::npos);
    }
    // Named by the caller, the same file is opened as named (and then its shard is not found).
    CHECK_THROWS_WITH_AS((void)dsa::safetensors_checkpoint::open(dir / "model.safetensors.index.json"),
                         doctest::Contains("weight_map['SECRET-NAME'] = 'x.safetensors'; expected an existing shard"),
                         dsa::error);
    // The hub cache's index is a link into blobs/ too.
    const temp_dir repo;
    fs::create_directories(repo / "blobs");
    fs::create_directories(repo / "snapshots" / "abc123");
    fs::copy_file(dir / "model-00001-of-00002.safetensors", repo / "blobs" / "0f1e2d");
    write_bytes(repo / "blobs" / "77aa", R"({"weight_map": {"layer.a": "model-00001-of-00002.safetensors"}})");
    fs::create_symlink("../../blobs/0f1e2d", repo / "snapshots" / "abc123" / "model-00001-of-00002.safetensors");
    fs::create_symlink("../../blobs/77aa", repo / "snapshots" / "abc123" / "model.safetensors.index.json");
    CHECK(dsa::safetensors_checkpoint::open(repo / "snapshots" / "abc123").contains("layer.a"));
  }
  SUBCASE("a 5,000-character shard name is quoted and cut in the message (issue 33)") {
    write_index(R"({"layer.a": ")" + std::string(5000, 'z') + R"("})");
    try {
      (void)dsa::safetensors_checkpoint::open(dir.path);
      FAIL("a 5,000-character shard name was accepted");
    } catch (const dsa::error& e) {
      const std::string m = e.what();
      CHECK(m.size() < 1024);
      CHECK(m.find("weight_map['layer.a'] = 'zzzz") != std::string::npos);
      CHECK(m.find("'... (5000 bytes in all); expected an existing shard file in '" + dir.path.string() + "'") !=
            std::string::npos);
    }
  }
  SUBCASE("malformed indices") {
    write_bytes(dir / "model.safetensors.index.json", R"({"metadata": {}})");
    CHECK_THROWS_WITH_AS((void)dsa::safetensors_checkpoint::open(dir.path), doctest::Contains("missing \"weight_map\""),
                         dsa::error);
    write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": ["a"]})");
    CHECK_THROWS_WITH_AS((void)dsa::safetensors_checkpoint::open(dir.path),
                         doctest::Contains("weight_map = '[\"a\"]'; expected an object"), dsa::error);
    write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {"a": 3}})");
    CHECK_THROWS_WITH_AS((void)dsa::safetensors_checkpoint::open(dir.path),
                         doctest::Contains("weight_map['a'] = 3; expected a file name"), dsa::error);
    write_bytes(dir / "model.safetensors.index.json", "{not json");
    CHECK_THROWS_WITH_AS((void)dsa::safetensors_checkpoint::open(dir.path),
                         doctest::Contains("index is not valid JSON"), dsa::error);
    // Non-string metadata nested 100,000 deep: refused while parsing, not printed recursively.
    write_bytes(dir / "model.safetensors.index.json",
                R"({"metadata": {"total_size": )" + std::string(100000, '[') + std::string(100000, ']') +
                    R"(}, "weight_map": {}})");
    CHECK_THROWS_WITH_AS((void)dsa::safetensors_checkpoint::open(dir.path),
                         doctest::Contains("index nests objects and arrays deeper than 64 levels"), dsa::error);
  }
  SUBCASE("a directory that is not a checkpoint") {
    const temp_dir empty;
    CHECK_THROWS_WITH_AS((void)dsa::safetensors_checkpoint::open(empty.path),
                         doctest::Contains("directory has neither model.safetensors.index.json nor model.safetensors"),
                         dsa::error);
    CHECK_THROWS_WITH_AS((void)dsa::safetensors_checkpoint::open(empty / "nothing"),
                         doctest::Contains("no such file or directory"), dsa::error);
  }
}

TEST_CASE("write_safetensors refuses names and metadata that JSON cannot hold (found by fuzz_model)") {
  // A tensor name or metadata string that is not valid UTF-8 made nlohmann::json throw its own
  // type_error out of the writer instead of a dsa::error.
  const temp_dir dir;
  const float v = 1.0f;
  const auto data = std::as_bytes(std::span<const float>(&v, 1));
  std::vector<dsa::safetensors_entry> entries = {{std::string("w\x80\xff", 3), dsa::dtype::f32, {1}, data}};
  CHECK_THROWS_WITH_AS(dsa::write_safetensors(dir / "a.safetensors", entries),
                       doctest::Contains("expected a name in valid UTF-8"), dsa::error);
  entries[0].name = "w";
  CHECK_THROWS_WITH_AS(dsa::write_safetensors(dir / "a.safetensors", entries, {{"k", std::string("\xc0\xaf", 2)}}),
                       doctest::Contains("expected a key and value in valid UTF-8"), dsa::error);
  CHECK_FALSE(fs::exists(dir / "a.safetensors"));
  // Valid UTF-8, control characters included, is written (and echoed escaped when it is refused).
  entries[0].name = "w\x1b\xc2\x9b\xe6\xbc\xa2";
  CHECK_NOTHROW(dsa::write_safetensors(dir / "a.safetensors", entries));
}
