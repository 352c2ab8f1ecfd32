// safetensors (safetensors.cpp): round trips, the byte layout Python expects, what the writer refuses,
// and one table for every way the reader must refuse a file.
#include "tessera/core/io/safetensors.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "test_files.hpp"

namespace core = tessera::core;
namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace tessera::testing;

namespace {

// One tensor entry of a header.
json entry(std::vector<std::int64_t> shape, std::uint64_t begin, std::uint64_t end, const std::string& dtype = "F32") {
  return {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
}

// The u64 little-endian header length a file starts with.
std::uint64_t length_field(const std::string& bytes) {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < 8; ++i) n |= std::uint64_t{static_cast<std::uint8_t>(bytes[i])} << (8 * i);
  return n;
}

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
  const std::string bytes = read_bytes(path);
  REQUIRE(bytes.size() >= 8);
  const std::uint64_t n = length_field(bytes);
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
  const std::vector<core::tensor_f32> unnamed = {{"", {1}, {1}}};
  CHECK(contains(error_of(core::write_safetensors(path, unnamed, {})).message, "a tensor has an empty name"));
  const std::vector<core::tensor_f32> reserved = {{"__metadata__", {1}, {1}}};
  CHECK(contains(error_of(core::write_safetensors(path, reserved, {})).message, "cannot be called '__metadata__'"));
  const auto latin1 = error_of(core::write_safetensors(path, sample_tensors(), {{"note", "caf\xe9"}}));
  CHECK(latin1.code == core::errc::invalid_argument);
  CHECK(contains(latin1.message, "bad.safetensors: a tensor name or metadata string is not valid UTF-8"));
  CHECK_FALSE(fs::exists(path));
  CHECK_FALSE(fs::exists(path + ".tmp"));
  auto io = error_of(core::write_safetensors(dir.file("no-such-dir/m.safetensors"), sample_tensors(), {}));
  CHECK(io.code == core::errc::io);
  CHECK(contains(io.message, "m.safetensors"));
}


// ---- every way the reader must refuse a file: one enum, one generator, one table ------------------

namespace {

// A way a safetensors file can be wrong. bad_safetensors_bytes() makes each from the valid file
// write_valid() writes: tensors "w" (2 x 2, data bytes [0, 16)) and "b" (2, [16, 24)) and metadata;
// safetensors_rejections() says how the reader must refuse it.
enum class bad_safetensors {
  shorter_than_length,     // 3 bytes: not even the header length
  header_past_end,         // the file cut 10 bytes into its header
  header_over_limit,       // a length of 2^62
  header_just_over_limit,  // k_safetensors_max_header + 1
  header_not_json,         // the header cut short (and padded back to its length)
  header_not_object,       // [1, 2]
  entry_not_object,        // "w": 5
  dtype_missing,
  dtype_unsupported,       // BF16
  long_name,               // a 1000-character name (with BF16): the message quotes 80 of them
  shape_missing,
  shape_negative,          // [-1, 4]
  shape_fractional,        // [1.5, 2]
  shape_too_large,         // 2^63, beyond int64
  offsets_missing,
  offsets_not_a_pair,      // [0]
  offset_negative,         // b at [-8, 24]
  offsets_backwards,       // b at [24, 16]
  offsets_past_end,        // b: 4 values at [16, 32] of 24 bytes
  shape_mismatch,          // w: [2, 3] in 16 bytes
  shape_overflow,          // w: [2^32, 2^32, 4] at [0, 0]: 2^66 elements, 0 if the product wrapped
  overlap,                 // b at [8, 16], inside w
  gap,                     // w: 3 values at [0, 12], and b from 16
  bytes_after_last,        // 4 bytes no tensor owns at the end
  metadata_not_object,     // "__metadata__": "text"
  metadata_not_string,     // "__metadata__": {"round": 5}
  missing_file,
};
constexpr std::size_t k_bad_safetensors_kinds = static_cast<std::size_t>(bad_safetensors::missing_file) + 1;

struct safetensors_rejection {
  bad_safetensors kind;
  std::string file;               // the malformed file's name
  core::errc code;
  std::vector<std::string> says;  // what the message holds after "<path>: ": tensor, field, offsets
};

void write_valid(const std::string& path) {
  const std::vector<core::tensor_f32> tensors = {{"w", {2, 2}, {1.0f, -2.0f, 0.5f, 4.0f}}, {"b", {2}, {0.25f, -1.0f}}};
  REQUIRE(core::write_safetensors(path, tensors, {{"format", "pt"}}).ok());
}

// The malformed file of `kind`, made from the bytes of the valid one; nullopt when it must not exist.
std::optional<std::string> bad_safetensors_bytes(bad_safetensors kind, const std::string& valid) {
  const std::uint64_t length = length_field(valid);
  const std::string text = valid.substr(8, length);
  const std::string data = valid.substr(8 + length);
  json header = json::parse(text);
  // A file of `h`'s text (`length` overrides its length field), then `bytes` of data.
  const auto file = [](const std::string& h, const std::string& bytes, std::optional<std::uint64_t> length_override = {}) {
    return le_bytes(length_override.value_or(h.size()), 8) + h + bytes;
  };
  using enum bad_safetensors;
  switch (kind) {
    case shorter_than_length: return valid.substr(0, 3);
    case header_past_end: return valid.substr(0, 8 + 10);
    case header_over_limit: return file(text, data, std::uint64_t{1} << 62);
    case header_just_over_limit: return file(text, data, core::k_safetensors_max_header + 1);
    case header_not_json: return file(text.substr(0, text.size() / 2) + std::string(text.size() - text.size() / 2, ' '), data);
    case header_not_object: return file("[1, 2]", data);
    case entry_not_object: header["w"] = 5; break;
    case dtype_missing: header["w"].erase("dtype"); break;
    case dtype_unsupported: header["w"]["dtype"] = "BF16"; break;
    case long_name:
      header[std::string(1000, 'x')] = header["w"];
      header[std::string(1000, 'x')]["dtype"] = "BF16";
      header.erase("w");
      break;
    case shape_missing: header["w"].erase("shape"); break;
    case shape_negative: header["w"]["shape"] = {-1, 4}; break;
    case shape_fractional: header["w"]["shape"] = {1.5, 2}; break;
    case shape_too_large: header["w"]["shape"] = {std::uint64_t{1} << 63}; break;
    case offsets_missing: header["w"].erase("data_offsets"); break;
    case offsets_not_a_pair: header["w"]["data_offsets"] = {0}; break;
    case offset_negative: header["b"]["data_offsets"] = {-8, 24}; break;
    case offsets_backwards: header["b"]["data_offsets"] = {24, 16}; break;
    case offsets_past_end: header["b"] = entry({4}, 16, 32); break;
    case shape_mismatch: header["w"]["shape"] = {2, 3}; break;
    case shape_overflow: header["w"] = entry({std::int64_t{1} << 32, std::int64_t{1} << 32, 4}, 0, 0); break;
    case overlap: header["b"]["data_offsets"] = {8, 16}; break;
    case gap: header["w"] = entry({3}, 0, 12); break;
    case bytes_after_last: return valid + std::string(4, '\0');
    case metadata_not_object: header["__metadata__"] = "text"; break;
    case metadata_not_string: header["__metadata__"] = {{"round", 5}}; break;
    case missing_file: return std::nullopt;
  }
  return file(header.dump(), data);
}

// How the reader must refuse each kind, in the order of the enum.
const std::vector<safetensors_rejection>& safetensors_rejections() {
  using core::errc;
  using enum bad_safetensors;
  static const std::vector<safetensors_rejection> table = {
      {shorter_than_length, "tiny.safetensors", errc::truncated, {"3 bytes, too short for the 8-byte header length"}},
      {header_past_end, "long-header.safetensors", errc::truncated,
       {"header length", "runs past the end of the file (10 bytes follow it)"}},
      {header_over_limit, "hostile.safetensors", errc::over_budget,
       {"header length 4611686018427387904 is over the limit of 16777216 bytes"}},
      {header_just_over_limit, "over.safetensors", errc::over_budget,
       {"header length 16777217 is over the limit of 16777216 bytes"}},
      {header_not_json, "garbage.safetensors", errc::bad_format, {"the header is not valid JSON"}},
      {header_not_object, "array.safetensors", errc::bad_format, {"the header is not a JSON object"}},
      {entry_not_object, "entry.safetensors", errc::bad_format, {"tensor 'w': the entry is not a JSON object"}},
      {dtype_missing, "no-dtype.safetensors", errc::bad_format, {"tensor 'w': 'dtype' is missing or not a string"}},
      {dtype_unsupported, "half.safetensors", errc::unsupported, {"tensor 'w' has dtype 'BF16'; only F32 is supported"}},
      {long_name, "long-name.safetensors", errc::unsupported, {"tensor '" + std::string(80, 'x') + "...' has dtype"}},
      {shape_missing, "no-shape.safetensors", errc::bad_format, {"tensor 'w': 'shape' is missing or not an array"}},
      {shape_negative, "negative.safetensors", errc::bad_format, {"tensor 'w': shape[0] is negative (-1)"}},
      {shape_fractional, "fraction.safetensors", errc::bad_format, {"tensor 'w': shape[0] is not a non-negative integer"}},
      {shape_too_large, "large.safetensors", errc::bad_format, {"tensor 'w': shape[0] is too large"}},
      {offsets_missing, "no-offsets.safetensors", errc::bad_format,
       {"tensor 'w': 'data_offsets' is missing or not an array of two offsets"}},
      {offsets_not_a_pair, "one-offset.safetensors", errc::bad_format,
       {"tensor 'w': 'data_offsets' is missing or not an array of two offsets"}},
      {offset_negative, "negative-offset.safetensors", errc::bad_format, {"tensor 'b': data_offsets[0] is negative (-8)"}},
      {offsets_backwards, "backwards.safetensors", errc::bad_format,
       {"tensor 'b': data_offsets [24, 16] end before they begin"}},
      {offsets_past_end, "offsets.safetensors", errc::truncated,
       {"tensor 'b': data_offsets [16, 32] run past the end of the 24-byte data section"}},
      {shape_mismatch, "mismatch.safetensors", errc::bad_format,
       {"tensor 'w': shape [2, 3] does not match data_offsets [0, 16] (16 bytes, 4 per F32 value)"}},
      {shape_overflow, "overflow.safetensors", errc::bad_format,
       {"tensor 'w': shape [4294967296, 4294967296, 4] does not match data_offsets [0, 0]"}},
      {overlap, "overlap.safetensors", errc::bad_format,
       {"tensor 'b' at data offset 8 overlaps tensor 'w', which ends at 16"}},
      {gap, "gap.safetensors", errc::bad_format, {"data bytes [12, 16) before tensor 'b' belong to no tensor"}},
      {bytes_after_last, "tail.safetensors", errc::bad_format, {"4 data bytes after the last tensor belong to no tensor"}},
      {metadata_not_object, "meta-text.safetensors", errc::bad_format, {"'__metadata__' is not a JSON object"}},
      {metadata_not_string, "meta.safetensors", errc::bad_format, {"'__metadata__' entry 'round' is not a string"}},
      {missing_file, "missing.safetensors", errc::io, {"cannot open"}},
  };
  return table;
}

}  // namespace

TEST_CASE("safetensors: every malformed file is refused with its code, naming the file and what is wrong") {
  temp_dir dir;
  const std::string valid_path = dir.file("valid.safetensors");
  write_valid(valid_path);
  const std::string valid = read_bytes(valid_path);
  REQUIRE(core::read_safetensors(valid_path).ok());
  for_each_rejection(
      dir, safetensors_rejections(), k_bad_safetensors_kinds,
      [&](bad_safetensors kind) { return bad_safetensors_bytes(kind, valid); },
      [](const safetensors_rejection& c, const std::string& bad) {
        check_refusal(error_of(core::read_safetensors(bad)), c.code, bad + ": ", c.says);
      });
}
