// safetensors: round trips, the byte layout Python expects, and one named case for every way the
// reader must refuse a file.
#include "tessera/core/safetensors.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace core = tessera::core;
namespace fs = std::filesystem;
using json = nlohmann::json;

#include "test_files.hpp"

namespace {

using tessera::testing::temp_dir;
using tessera::testing::write_bytes;


std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void put_u64_le(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xffu));
}

// A file with the given header text and `data_bytes` bytes of data; `length` overrides the length field.
void write_raw(const std::string& path, const std::string& header, std::size_t data_bytes,
               std::uint64_t length = std::numeric_limits<std::uint64_t>::max()) {
  std::string bytes;
  put_u64_le(bytes, length == std::numeric_limits<std::uint64_t>::max() ? header.size() : length);
  bytes += header;
  bytes.append(data_bytes, '\0');
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// One F32 tensor entry.
json entry(std::vector<std::int64_t> shape, std::uint64_t begin, std::uint64_t end, const std::string& dtype = "F32") {
  return {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
}

template <class T>
core::error error_of(core::result<T> r) {
  REQUIRE_FALSE(r.ok());
  return std::move(r).error();
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

std::vector<core::tensor_f32> sample_tensors() {
  return {
      {"layers.0.weight", {2, 3}, {1.0f, -2.5f, 3.25f, 0.0f, -0.0f, 1e-30f}},
      {"layers.0.bias", {3}, {0.125f, std::numeric_limits<float>::max(), -7.0f}},
      {"scalar", {}, {42.0f}},
      {"empty", {0, 4}, {}},
  };
}

}  // namespace

TEST_CASE("safetensors: round trip with metadata") {
  temp_dir dir;
  const std::string path = dir.file("model.safetensors");
  const auto tensors = sample_tensors();
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"tessera.round", "50"}, {"note", "ünïcode"}};
  REQUIRE(core::write_safetensors(path, tensors, metadata).ok());
  CHECK_FALSE(fs::exists(path + ".tmp"));

  auto f = core::read_safetensors(path);
  REQUIRE_MESSAGE(f.ok(), (f.ok() ? "" : f.error().message));
  CHECK(f.value().metadata == metadata);
  REQUIRE(f.value().tensors.size() == tensors.size());
  // Sorted by data offset; the zero-size tensor sits at the end of the data, tied with nothing.
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    CAPTURE(i);
    CHECK(f.value().tensors[i].name == tensors[i].name);
    CHECK(f.value().tensors[i].shape == tensors[i].shape);
    CHECK(f.value().tensors[i].data == tensors[i].data);
  }
  REQUIRE(f.value().find("scalar") != nullptr);
  CHECK(f.value().find("scalar")->data == std::vector<float>{42.0f});
  CHECK(f.value().find("nope") == nullptr);

  // Rewriting replaces the file; no metadata means no "__metadata__" key.
  const std::vector<core::tensor_f32> one = {{"w", {1}, {5.0f}}};
  REQUIRE(core::write_safetensors(path, one, {}).ok());
  auto g = core::read_safetensors(path);
  REQUIRE(g.ok());
  CHECK(g.value().metadata.empty());
  REQUIRE(g.value().tensors.size() == 1);
  CHECK(g.value().tensors[0].data == std::vector<float>{5.0f});
}

TEST_CASE("safetensors: the byte layout is what Python reads") {
  temp_dir dir;
  const std::string path = dir.file("layout.safetensors");
  const std::vector<core::tensor_f32> tensors = {{"a", {2}, {1.0f, -2.0f}}, {"b", {1}, {0.5f}}};
  REQUIRE(core::write_safetensors(path, tensors, {{"k", "v"}}).ok());
  const auto bytes = read_bytes(path);
  REQUIRE(bytes.size() >= 8);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t{bytes[static_cast<std::size_t>(i)]} << (8 * i);
  CHECK(n % 8 == 0);  // the data starts 8-aligned
  REQUIRE(bytes.size() == 8 + n + 12);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  const json h = json::parse(header);
  CHECK(h["a"] == entry({2}, 0, 8));
  CHECK(h["b"] == entry({1}, 8, 12));
  CHECK(h["__metadata__"] == json{{"k", "v"}});
  const std::vector<std::uint8_t> data(bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n), bytes.end());
  // 1.0f, -2.0f, 0.5f little-endian.
  CHECK(data == std::vector<std::uint8_t>{0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x00, 0x00, 0x3f});
}

TEST_CASE("safetensors: the writer refuses tensors that do not add up") {
  temp_dir dir;
  const std::string path = dir.file("bad.safetensors");
  const std::vector<core::tensor_f32> short_data = {{"w", {2, 2}, {1, 2, 3}}};
  auto e = error_of(core::write_safetensors(path, short_data, {}));
  CHECK(e.code == core::errc::invalid_argument);
  CHECK(contains(e.message, "bad.safetensors: tensor 'w' has shape [2, 2] but 3 values"));
  const std::vector<core::tensor_f32> twice = {{"w", {1}, {1}}, {"w", {1}, {2}}};
  CHECK(error_of(core::write_safetensors(path, twice, {})).code == core::errc::invalid_argument);
  const std::vector<core::tensor_f32> negative = {{"w", {-1}, {}}};
  CHECK(error_of(core::write_safetensors(path, negative, {})).code == core::errc::invalid_argument);
  CHECK_FALSE(fs::exists(path));
  auto io = error_of(core::write_safetensors(dir.file("no-such-dir/m.safetensors"), sample_tensors(), {}));
  CHECK(io.code == core::errc::io);
  CHECK(contains(io.message, "m.safetensors"));
}

TEST_CASE("safetensors: missing file is an io error") {
  temp_dir dir;
  auto e = error_of(core::read_safetensors(dir.file("missing.safetensors")));
  CHECK(e.code == core::errc::io);
  CHECK(contains(e.message, "missing.safetensors: cannot open"));
}

TEST_CASE("safetensors: file shorter than the length field") {
  temp_dir dir;
  const std::string path = dir.file("tiny.safetensors");
  std::ofstream(path, std::ios::binary) << "abc";
  auto e = error_of(core::read_safetensors(path));
  CHECK(e.code == core::errc::truncated);
  CHECK(contains(e.message, "tiny.safetensors"));
}

TEST_CASE("safetensors: header length beyond the file") {
  temp_dir dir;
  const std::string path = dir.file("long-header.safetensors");
  write_raw(path, "{}", 0, 1000);
  auto e = error_of(core::read_safetensors(path));
  CHECK(e.code == core::errc::truncated);
  CHECK(contains(e.message, "long-header.safetensors: header length 1000 runs past the end of the file"));
}

TEST_CASE("safetensors: header length over the limit") {
  temp_dir dir;
  const std::string path = dir.file("hostile.safetensors");
  write_raw(path, "{}", 0, std::uint64_t{1} << 62);
  auto e = error_of(core::read_safetensors(path));
  CHECK(e.code == core::errc::over_budget);
  CHECK(contains(e.message, "hostile.safetensors: header length 4611686018427387904 is over the limit"));
  write_raw(path, "{}", 0, core::k_safetensors_max_header + 1);
  CHECK(error_of(core::read_safetensors(path)).code == core::errc::over_budget);
}

TEST_CASE("safetensors: invalid JSON header") {
  temp_dir dir;
  const std::string path = dir.file("garbage.safetensors");
  write_raw(path, "{\"w\": {\"dtype\": \"F32\", ", 0);
  auto e = error_of(core::read_safetensors(path));
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "garbage.safetensors: the header is not valid JSON"));
  write_raw(path, "[1, 2]  ", 0);
  auto a = error_of(core::read_safetensors(path));
  CHECK(a.code == core::errc::bad_format);
  CHECK(contains(a.message, "garbage.safetensors: the header is not a JSON object"));
}

TEST_CASE("safetensors: unsupported dtype names the tensor") {
  temp_dir dir;
  const std::string path = dir.file("half.safetensors");
  write_raw(path, json{{"w", entry({2}, 0, 4, "BF16")}}.dump(), 4);
  auto e = error_of(core::read_safetensors(path));
  CHECK(e.code == core::errc::unsupported);
  CHECK(contains(e.message, "half.safetensors: tensor 'w' has dtype 'BF16'"));
}

TEST_CASE("safetensors: offsets out of range") {
  temp_dir dir;
  const std::string path = dir.file("offsets.safetensors");
  write_raw(path, json{{"w", entry({4}, 0, 16)}}.dump(), 8);
  auto e = error_of(core::read_safetensors(path));
  CHECK(e.code == core::errc::truncated);
  CHECK(contains(e.message, "offsets.safetensors: tensor 'w': data_offsets [0, 16] run past the end"));

  write_raw(path, json{{"w", entry({0}, 8, 4)}}.dump(), 8);
  auto backwards = error_of(core::read_safetensors(path));
  CHECK(backwards.code == core::errc::bad_format);
  CHECK(contains(backwards.message, "offsets.safetensors: tensor 'w': data_offsets [8, 4]"));

  write_raw(path, json{{"w", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {-4, 0}}}}}.dump(), 4);
  auto negative = error_of(core::read_safetensors(path));
  CHECK(negative.code == core::errc::bad_format);
  CHECK(contains(negative.message, "offsets.safetensors: tensor 'w': data_offsets[0] is negative"));
}

TEST_CASE("safetensors: size and shape mismatch") {
  temp_dir dir;
  const std::string path = dir.file("mismatch.safetensors");
  write_raw(path, json{{"w", entry({2, 3}, 0, 20)}}.dump(), 20);
  auto e = error_of(core::read_safetensors(path));
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "mismatch.safetensors: tensor 'w': shape [2, 3] does not match data_offsets [0, 20]"));

  // A product that overflows 64 bits must not wrap around to a plausible size.
  write_raw(path, json{{"w", entry({std::int64_t{1} << 32, std::int64_t{1} << 32, 4}, 0, 0)}}.dump(), 0);
  CHECK(error_of(core::read_safetensors(path)).code == core::errc::bad_format);
}

TEST_CASE("safetensors: negative or fractional shape entries") {
  temp_dir dir;
  const std::string path = dir.file("shape.safetensors");
  write_raw(path, json{{"w", entry({-1}, 0, 0)}}.dump(), 0);
  auto e = error_of(core::read_safetensors(path));
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "shape.safetensors: tensor 'w': shape[0] is negative"));
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4);
  CHECK(error_of(core::read_safetensors(path)).code == core::errc::bad_format);
}

TEST_CASE("safetensors: overlapping tensors") {
  temp_dir dir;
  const std::string path = dir.file("overlap.safetensors");
  write_raw(path, json{{"a", entry({2}, 0, 8)}, {"b", entry({2}, 4, 12)}}.dump(), 12);
  auto e = error_of(core::read_safetensors(path));
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "overlap.safetensors: tensor 'b'"));
  CHECK(contains(e.message, "overlaps tensor 'a'"));
}

TEST_CASE("safetensors: data bytes that belong to no tensor") {
  temp_dir dir;
  const std::string path = dir.file("gap.safetensors");
  write_raw(path, json{{"a", entry({1}, 0, 4)}, {"b", entry({1}, 8, 12)}}.dump(), 12);
  auto gap = error_of(core::read_safetensors(path));
  CHECK(gap.code == core::errc::bad_format);
  CHECK(contains(gap.message, "gap.safetensors: data bytes [4, 8) before tensor 'b' belong to no tensor"));
  write_raw(path, json{{"a", entry({1}, 0, 4)}}.dump(), 8);
  auto tail = error_of(core::read_safetensors(path));
  CHECK(tail.code == core::errc::bad_format);
  CHECK(contains(tail.message, "gap.safetensors: 4 data bytes after the last tensor"));
}

TEST_CASE("safetensors: metadata must map strings to strings") {
  temp_dir dir;
  const std::string path = dir.file("meta.safetensors");
  write_raw(path, json{{"__metadata__", {{"round", 5}}}}.dump(), 0);
  auto e = error_of(core::read_safetensors(path));
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "meta.safetensors: '__metadata__' entry 'round' is not a string"));
  write_raw(path, json{{"__metadata__", "text"}}.dump(), 0);
  CHECK(error_of(core::read_safetensors(path)).code == core::errc::bad_format);
}

TEST_CASE("safetensors: a tensor entry with fields missing") {
  temp_dir dir;
  const std::string path = dir.file("fields.safetensors");
  write_raw(path, R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 4);
  auto e = error_of(core::read_safetensors(path));
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "fields.safetensors: tensor 'w': 'dtype'"));
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [1]}})", 4);
  auto o = error_of(core::read_safetensors(path));
  CHECK(o.code == core::errc::bad_format);
  CHECK(contains(o.message, "fields.safetensors: tensor 'w': 'data_offsets'"));
}
