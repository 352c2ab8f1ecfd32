// The NumPy .npy reader and writers (dataset_npy.cpp): round trips, every dtype and byte order, header
// variants NumPy writes, random access, normalization, and one named case for every way the reader must
// refuse its input.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/dataset.hpp"
#include "test_files.hpp"

namespace core = tessera::core;
namespace fs = std::filesystem;

namespace {

using tessera::testing::be_bytes;
using tessera::testing::contains;
using tessera::testing::error_of;
using tessera::testing::gather_all;
using tessera::testing::le_bytes;
using tessera::testing::read_bytes;
using tessera::testing::read_table;
using tessera::testing::temp_dir;
using tessera::testing::write_bytes;

std::string le(std::uint64_t v, unsigned size) { return le_bytes(v, size); }
std::string be(std::uint64_t v, unsigned size) { return be_bytes(v, size); }
std::string f32_le(float v) { return le(std::bit_cast<std::uint32_t>(v), 4); }
std::string f32_be(float v) { return be(std::bit_cast<std::uint32_t>(v), 4); }
std::string f64_le(double v) { return le(std::bit_cast<std::uint64_t>(v), 8); }

std::string npy_dict(std::string_view descr, std::string_view shape, std::string_view fortran = "False") {
  return "{'descr': '" + std::string(descr) + "', 'fortran_order': " + std::string(fortran) +
         ", 'shape': " + std::string(shape) + ", }";
}

// A .npy file built by hand: magic, version major.0, the header length (u16 for version 1, u32 after),
// the dict padded with spaces and a final '\n' to a multiple of 64 bytes, then `data`.
std::string npy_bytes(std::string_view dict, std::string_view data, unsigned major = 1) {
  const std::size_t preamble = major == 1 ? 10 : 12;
  std::string header(dict);
  const std::size_t unpadded = preamble + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out(1, static_cast<char>(0x93));
  out += "NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  out += le(header.size(), major == 1 ? 2 : 4);
  return out + header + std::string(data);
}

// Five examples of three features, and their labels.
constexpr std::int64_t k_features = 3;
constexpr std::size_t k_count = 5;

std::vector<float> sample_features() {
  std::vector<float> x(k_count * k_features);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.75f - 4.0f;
  x[4] = 1e30f;  // a large but finite value
  return x;
}
std::vector<std::int32_t> sample_labels() { return {3, 1, 4, 1, 5}; }

struct npy_files {
  std::string features;
  std::string labels;
};

npy_files write_sample(const temp_dir& dir) {
  npy_files f{dir.file("x.npy"), dir.file("y.npy")};
  REQUIRE(core::write_npy_features(f.features, k_features, sample_features()).ok());
  REQUIRE(core::write_npy_labels(f.labels, sample_labels()).ok());
  return f;
}

// The error of opening a pair of .npy files and reading every example.
core::error npy_error(const std::string& features, const std::string& labels) {
  auto t = core::open_npy(features, labels, {});
  if (!t) return std::move(t).error();
  return error_of(gather_all(*t.value()));
}

std::vector<float> as_floats(const std::vector<std::int32_t>& v) { return {v.begin(), v.end()}; }

}  // namespace

// ---- reading what the writers write ---------------------------------------------------------------

TEST_CASE("npy: float32 features and int32 labels round trip through the writers") {
  temp_dir dir;
  const auto files = write_sample(dir);
  // The bytes NumPy writes for np.save of a float32 (5, 3) array: header length 118, data at offset 128.
  const std::string xb = read_bytes(files.features);
  REQUIRE(xb.size() == 128 + k_count * k_features * 4);
  CHECK(xb.substr(0, 10) == std::string("\x93NUMPY\x01\x00\x76\x00", 10));
  CHECK(xb.substr(10, 59) == "{'descr': '<f4', 'fortran_order': False, 'shape': (5, 3), }");
  CHECK(xb[127] == '\n');
  CHECK(xb.substr(10 + 59, 127 - 69) == std::string(127 - 69, ' '));
  const std::string yb = read_bytes(files.labels);
  REQUIRE(yb.size() == 128 + k_count * 4);
  CHECK(yb.substr(10, 57) == "{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }");
  CHECK(yb[127] == '\n');

  auto t = core::open_npy(files.features, files.labels, {});
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
  CHECK(t.value()->feature_count() == k_features);
  CHECK(t.value()->size() == 5);
  CHECK(contains(t.value()->describe(), "x.npy"));
  CHECK(contains(t.value()->describe(), "y.npy"));
  const auto all = read_table(*t.value());
  CHECK(all.x == sample_features());
  CHECK(all.y == as_floats(sample_labels()));
}

TEST_CASE("npy: hand-written uint8 features and int64 labels") {
  temp_dir dir;
  std::string pixels;
  for (int i = 0; i < 24; ++i) pixels.push_back(static_cast<char>(i * 11));
  pixels[5] = static_cast<char>(255);
  const std::string x = dir.file("images.npy");
  write_bytes(x, npy_bytes(npy_dict("|u1", "(4, 2, 3)"), pixels));
  const std::string y = dir.file("labels.npy");
  // -3 in two's complement and 2^24, the largest integer label that float32 holds exactly.
  write_bytes(y, npy_bytes(npy_dict("<i8", "(4,)"), le(0, 8) + le(7, 8) + le(static_cast<std::uint64_t>(-3), 8) +
                                                         le(std::uint64_t{1} << 24, 8)));
  auto t = core::open_npy(x, y, {});
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
  CHECK(t.value()->feature_count() == 6);
  CHECK(t.value()->size() == 4);
  const auto all = read_table(*t.value());
  for (std::size_t i = 0; i < 24; ++i) CHECK(all.x[i] == static_cast<float>(static_cast<std::uint8_t>(pixels[i])));
  CHECK(all.y == std::vector<float>{0, 7, -3, 16777216});

  auto scaled = core::open_npy(x, y, {core::normalization::scale_unit, {}});
  REQUIRE(scaled.ok());
  const auto unit = read_table(*scaled.value());
  CHECK(unit.x[5] == 1.0f);
  CHECK(unit.x[0] == 0.0f);
  CHECK(unit.x[1] == doctest::Approx(11.0 / 255.0));
}

TEST_CASE("npy: rank-1 features are one feature per example, uint8 labels") {
  temp_dir dir;
  const std::string x = dir.file("one.npy");
  write_bytes(x, npy_bytes(npy_dict("<f4", "(3,)"), f32_le(0.5f) + f32_le(-2.0f) + f32_le(8.0f)));
  const std::string y = dir.file("labels.npy");
  write_bytes(y, npy_bytes(npy_dict("|u1", "(3,)"), std::string("\x09\x00\xff", 3)));
  auto t = core::open_npy(x, y, {});
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
  CHECK(t.value()->feature_count() == 1);
  const auto all = read_table(*t.value());
  CHECK(all.x == std::vector<float>{0.5f, -2.0f, 8.0f});
  CHECK(all.y == std::vector<float>{9, 0, 255});
}

TEST_CASE("npy: every supported label dtype") {
  temp_dir dir;
  const auto files = write_sample(dir);
  struct label_case {
    std::string descr;
    std::string data;
    std::vector<float> expected;
  };
  const auto ints = [](unsigned size, bool big) {
    std::string out;
    for (const std::uint64_t v : {2u, 0u, 1u, 200u, 17u}) out += big ? be(v, size) : le(v, size);
    return out;
  };
  const std::vector<float> int_values = {2, 0, 1, 200, 17};
  const bool native_big = std::endian::native == std::endian::big;
  const std::vector<label_case> cases = {
      {"|u1", ints(1, false), int_values},
      {"|i1", le(2, 1) + le(0, 1) + le(1, 1) + le(0x80, 1) + le(0xff, 1), {2, 0, 1, -128, -1}},
      {"<i2", le(2, 2) + le(0, 2) + le(1, 2) + le(0x8000, 2) + le(0xfffe, 2), {2, 0, 1, -32768, -2}},
      {"<u2", ints(2, false), int_values},
      {"<i4", ints(4, false), int_values},
      {"<u4", ints(4, false), int_values},
      {"<i8", ints(8, false), int_values},
      {"<u8", ints(8, false), int_values},
      {">i4", ints(4, true), int_values},
      {">u2", ints(2, true), int_values},
      {"=i4", ints(4, native_big), int_values},
      {"<f4", f32_le(0.5f) + f32_le(-1.25f) + f32_le(3) + f32_le(1e-3f) + f32_le(-7), {0.5f, -1.25f, 3, 1e-3f, -7}},
      {"<f8", f64_le(0.5) + f64_le(-1.25) + f64_le(3) + f64_le(0.1) + f64_le(65536.5), {0.5f, -1.25f, 3, 0.1f, 65536.5f}},
      {">f8", be(std::bit_cast<std::uint64_t>(2.5), 8) + std::string(8 * 4, '\0'), {2.5f, 0, 0, 0, 0}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.descr);
    const std::string y = dir.file("labels.npy");
    write_bytes(y, npy_bytes(npy_dict(c.descr, "(5,)"), c.data));
    auto t = core::open_npy(files.features, y, {});
    REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
    CHECK(read_table(*t.value()).y == c.expected);
  }
}

TEST_CASE("npy: big-endian features are byte-swapped") {
  temp_dir dir;
  const std::string x = dir.file("big.npy");
  write_bytes(x, npy_bytes(npy_dict(">f4", "(2, 2)"), f32_be(1.5f) + f32_be(-2.0f) + f32_be(1e-20f) + f32_be(640.0f)));
  const std::string y = dir.file("labels.npy");
  write_bytes(y, npy_bytes(npy_dict(">i2", "(2,)"), be(7, 2) + be(0xfffe, 2)));
  auto t = core::open_npy(x, y, {});
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
  const auto all = read_table(*t.value());
  CHECK(all.x == std::vector<float>{1.5f, -2.0f, 1e-20f, 640.0f});
  CHECK(all.y == std::vector<float>{7, -2});
}

TEST_CASE("npy: version 2.0 and 3.0 headers") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string x_bytes = read_bytes(files.features);
  const std::string data = x_bytes.substr(128);
  for (const unsigned major : {2u, 3u}) {
    CAPTURE(major);
    const std::string x = dir.file("v" + std::to_string(major) + ".npy");
    const std::string bytes = npy_bytes(npy_dict("<f4", "(5, 3)"), data, major);
    CHECK(bytes.substr(8, 4) == le(116, 4));  // a u32 length; 12 + 116 = 128
    write_bytes(x, bytes);
    auto t = core::open_npy(x, files.labels, {});
    REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
    CHECK(read_table(*t.value()).x == sample_features());
  }
}

TEST_CASE("npy: labels of shape (N, 1)") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string y = dir.file("column.npy");
  write_bytes(y, npy_bytes(npy_dict("<i4", "(5, 1)"), le(3, 4) + le(1, 4) + le(4, 4) + le(1, 4) + le(5, 4)));
  auto t = core::open_npy(files.features, y, {});
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
  CHECK(read_table(*t.value()).y == as_floats(sample_labels()));
}

TEST_CASE("npy: header keys in any order, double quotes, no trailing comma, long suffix, blank padding") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string data = read_bytes(files.features).substr(128);
  const std::string x = dir.file("reordered.npy");
  write_bytes(x, npy_bytes("{\"shape\": (5L, 3L), 'fortran_order':False,\n 'descr' : \"<f4\"}  \t", data));
  auto t = core::open_npy(x, files.labels, {});
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
  CHECK(read_table(*t.value()).x == sample_features());
}

TEST_CASE("npy: empty arrays make an empty table") {
  temp_dir dir;
  const std::string x = dir.file("empty-x.npy");
  const std::string y = dir.file("empty-y.npy");
  REQUIRE(core::write_npy_features(x, 4, std::vector<float>{}).ok());
  REQUIRE(core::write_npy_labels(y, std::vector<std::int32_t>{}).ok());
  auto t = core::open_npy(x, y, {});
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
  CHECK(t.value()->size() == 0);
  CHECK(t.value()->feature_count() == 4);
}

TEST_CASE("npy: normalization none, scale_unit and standardize") {
  temp_dir dir;
  const std::string x = dir.file("x.npy");
  const std::string y = dir.file("y.npy");
  // Feature 0 takes 0, 2, 4, 6 (mean 3, population stddev sqrt(5)); feature 1 is constant 7.
  REQUIRE(core::write_npy_features(x, 2, std::vector<float>{0, 7, 2, 7, 4, 7, 6, 7}).ok());
  REQUIRE(core::write_npy_labels(y, std::vector<std::int32_t>{0, 1, 0, 1}).ok());

  auto none = core::open_npy(x, y, {});
  REQUIRE(none.ok());
  CHECK(read_table(*none.value()).x == std::vector<float>{0, 7, 2, 7, 4, 7, 6, 7});

  auto unit = core::open_npy(x, y, {core::normalization::scale_unit, {}});
  REQUIRE(unit.ok());
  const auto u = read_table(*unit.value());
  CHECK(u.x[2] == 2.0f / 255.0f);
  CHECK(u.x[1] == 7.0f / 255.0f);

  auto given = core::open_npy(x, y, {core::normalization::standardize, {{1.0f, 7.0f}, {2.0f, 0.0f}}});
  REQUIRE(given.ok());
  CHECK(read_table(*given.value()).x == std::vector<float>{-0.5f, 0, 0.5f, 0, 1.5f, 0, 2.5f, 0});

  auto measured = core::open_npy(x, y, {core::normalization::standardize, {}});
  REQUIRE_MESSAGE(measured.ok(), (measured.ok() ? "" : measured.error().message));
  const auto m = read_table(*measured.value());
  const double sd = std::sqrt(5.0);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(m.x[2 * i] == doctest::Approx((2.0 * static_cast<double>(i) - 3.0) / sd));
    CHECK(m.x[2 * i + 1] == 0.0f);  // constant: centred, not scaled
  }

  auto wrong = core::open_npy(x, y, {core::normalization::standardize, {{1.0f}, {1.0f}}});
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.error().code == core::errc::invalid_argument);
  CHECK(contains(wrong.error().message, "x.npy"));
}

TEST_CASE("npy: random access in any order, with repeats; an index out of range is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  auto t = core::open_npy(files.features, files.labels, {});
  REQUIRE(t.ok());
  const std::vector<std::uint32_t> order = {4, 0, 4, 2};
  std::vector<float> x(order.size() * k_features);
  std::vector<float> y(order.size());
  REQUIRE(t.value()->gather(order, x, y).ok());
  const auto all = sample_features();
  const auto stride = static_cast<std::size_t>(k_features);
  for (std::size_t k = 0; k < order.size(); ++k) {
    for (std::size_t j = 0; j < k_features; ++j) CHECK(x[k * stride + j] == all[order[k] * stride + j]);
    CHECK(y[k] == static_cast<float>(sample_labels()[order[k]]));
  }
  const std::vector<std::uint32_t> bad = {1, 5};
  const auto e = error_of(t.value()->gather(bad, x, y));
  CHECK(e.code == core::errc::invalid_argument);
  CHECK(contains(e.message, "x.npy"));
  CHECK(contains(e.message, "index 5 is out of range (size 5)"));
}

// ---- one case for every way the reader must refuse its input --------------------------------------

TEST_CASE("npy: wrong magic is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string bad = dir.file("zip.npy");
  write_bytes(bad, std::string_view("PK\x03\x04 a zip file, not a .npy file"));
  const auto e = npy_error(bad, files.labels);
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "zip.npy"));
  CHECK(contains(e.message, "magic is 50 4b 03 04"));
}

TEST_CASE("npy: file cut short in the preamble is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string cut = dir.file("cut.npy");
  write_bytes(cut, read_bytes(files.features).substr(0, 9));  // one of the two header length bytes
  const auto e = npy_error(cut, files.labels);
  CHECK(e.code == core::errc::truncated);
  CHECK(contains(e.message, "cut.npy"));
  CHECK(contains(e.message, "header length"));
}

TEST_CASE("npy: unsupported version is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  std::string bytes = read_bytes(files.features);
  bytes[6] = 4;
  const std::string v4 = dir.file("v4.npy");
  write_bytes(v4, bytes);
  const auto e = npy_error(v4, files.labels);
  CHECK(e.code == core::errc::unsupported);
  CHECK(contains(e.message, "v4.npy"));
  CHECK(contains(e.message, "version 4.0"));
}

TEST_CASE("npy: header length beyond the end of the file is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  std::string bytes = read_bytes(files.features).substr(0, 100);
  bytes[8] = static_cast<char>(0xe8);  // 1000 = 0x03e8
  bytes[9] = 0x03;
  const std::string long_header = dir.file("long-header.npy");
  write_bytes(long_header, bytes);
  const auto e = npy_error(long_header, files.labels);
  CHECK(e.code == core::errc::truncated);
  CHECK(contains(e.message, "long-header.npy"));
  CHECK(contains(e.message, "header length 1000 bytes runs past the end of the file (100 bytes"));
}

TEST_CASE("npy: header over the size limit is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  // Version 2.0 with a 70000-byte header; the file itself is small, the length alone is refused.
  std::string bytes(1, static_cast<char>(0x93));
  bytes += "NUMPY";
  bytes += std::string("\x02\x00", 2) + le(70000, 4) + npy_dict("<f4", "(5, 3)");
  const std::string huge = dir.file("huge-header.npy");
  write_bytes(huge, bytes);
  const auto e = npy_error(huge, files.labels);
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "huge-header.npy"));
  CHECK(contains(e.message, "header length 70000 bytes is over the limit of 65536"));
}

TEST_CASE("npy: header without the 'shape' key is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string x = dir.file("no-shape.npy");
  write_bytes(x, npy_bytes("{'descr': '<f4', 'fortran_order': False, }", std::string(60, '\0')));
  const auto e = npy_error(x, files.labels);
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "no-shape.npy"));
  CHECK(contains(e.message, "no 'shape' key"));
}

TEST_CASE("npy: header that is not a dict literal is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string x = dir.file("garbage.npy");
  write_bytes(x, npy_bytes("__import__('os').system('true')", ""));
  const auto e = npy_error(x, files.labels);
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "garbage.npy"));
  CHECK(contains(e.message, "malformed .npy header at byte 0"));
}

TEST_CASE("npy: header with text after the dict is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string x = dir.file("trailing.npy");
  const std::string dict = npy_dict("<f4", "(5, 3)");
  write_bytes(x, npy_bytes(dict + " x", read_bytes(files.features).substr(128)));
  const auto e = npy_error(x, files.labels);
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "trailing.npy"));
  CHECK(contains(e.message, "at byte " + std::to_string(dict.size() + 1) + ": unexpected text after the closing '}'"));
}

TEST_CASE("npy: header with an unknown key is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string x = dir.file("unknown-key.npy");
  write_bytes(x, npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (5, 3), 'extra': 1}",
                           read_bytes(files.features).substr(128)));
  const auto e = npy_error(x, files.labels);
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "unknown-key.npy"));
  CHECK(contains(e.message, "unknown key 'extra'"));
}

TEST_CASE("npy: header with a key twice is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string x = dir.file("twice.npy");
  write_bytes(x, npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (5, 3), 'descr': '|u1'}",
                           read_bytes(files.features).substr(128)));
  const auto e = npy_error(x, files.labels);
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "twice.npy"));
  CHECK(contains(e.message, "the key 'descr' appears twice"));
}

TEST_CASE("npy: shape that is not a tuple is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string x = dir.file("not-tuple.npy");
  write_bytes(x, npy_bytes(npy_dict("<f4", "(15)"), read_bytes(files.features).substr(128)));
  const auto e = npy_error(x, files.labels);
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "not-tuple.npy"));
  CHECK(contains(e.message, "'shape' (15) is not a tuple"));
}

TEST_CASE("npy: negative dimension in the shape is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string x = dir.file("negative.npy");
  write_bytes(x, npy_bytes(npy_dict("<f4", "(5, -3)"), read_bytes(files.features).substr(128)));
  const auto e = npy_error(x, files.labels);
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "negative.npy"));
  CHECK(contains(e.message, "'shape'"));
}

TEST_CASE("npy: scalar shape () is refused for features") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string x = dir.file("scalar.npy");
  write_bytes(x, npy_bytes(npy_dict("<f4", "()"), f32_le(1.0f)));
  const auto e = npy_error(x, files.labels);
  CHECK(e.code == core::errc::unsupported);
  CHECK(contains(e.message, "scalar.npy"));
  CHECK(contains(e.message, "'shape' ()"));
}

TEST_CASE("npy: fortran_order True is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string x = dir.file("fortran.npy");
  write_bytes(x, npy_bytes(npy_dict("<f4", "(5, 3)", "True"), read_bytes(files.features).substr(128)));
  const auto e = npy_error(x, files.labels);
  CHECK(e.code == core::errc::unsupported);
  CHECK(contains(e.message, "fortran.npy"));
  CHECK(contains(e.message, "'fortran_order' True"));
}

TEST_CASE("npy: complex dtype '<c8' is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string x = dir.file("complex.npy");
  write_bytes(x, npy_bytes(npy_dict("<c8", "(5, 3)"), std::string(5 * 3 * 8, '\0')));
  const auto e = npy_error(x, files.labels);
  CHECK(e.code == core::errc::unsupported);
  CHECK(contains(e.message, "complex.npy"));
  CHECK(contains(e.message, "'descr' '<c8' is not supported"));
}

TEST_CASE("npy: object dtype '|O' is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string y = dir.file("objects.npy");
  write_bytes(y, npy_bytes(npy_dict("|O", "(5,)"), std::string(40, '\0')));
  const auto e = npy_error(files.features, y);
  CHECK(e.code == core::errc::unsupported);
  CHECK(contains(e.message, "objects.npy"));
  CHECK(contains(e.message, "'descr' '|O' is not supported for labels"));
}

TEST_CASE("npy: float64 features are refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string x = dir.file("doubles.npy");
  write_bytes(x, npy_bytes(npy_dict("<f8", "(5, 3)"), std::string(5 * 3 * 8, '\0')));
  const auto e = npy_error(x, files.labels);
  CHECK(e.code == core::errc::unsupported);
  CHECK(contains(e.message, "doubles.npy"));
  CHECK(contains(e.message, "'descr' '<f8' is not supported for features"));
}

TEST_CASE("npy: structured dtype is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string x = dir.file("records.npy");
  write_bytes(x, npy_bytes("{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (5,), }",
                           std::string(40, '\0')));
  const auto e = npy_error(x, files.labels);
  CHECK(e.code == core::errc::unsupported);
  CHECK(contains(e.message, "records.npy"));
  CHECK(contains(e.message, "'descr' is a structured dtype"));
}

TEST_CASE("npy: labels of rank 2 with more than one column are refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string y = dir.file("two-columns.npy");
  write_bytes(y, npy_bytes(npy_dict("<i4", "(5, 2)"), std::string(5 * 2 * 4, '\0')));
  const auto e = npy_error(files.features, y);
  CHECK(e.code == core::errc::unsupported);
  CHECK(contains(e.message, "two-columns.npy"));
  CHECK(contains(e.message, "'shape' (N,) or (N, 1), the header has (5, 2)"));
}

TEST_CASE("npy: feature and label counts must agree") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string four = dir.file("four.npy");
  REQUIRE(core::write_npy_labels(four, std::vector<std::int32_t>{0, 1, 2, 3}).ok());
  const auto e = npy_error(files.features, four);
  CHECK(e.code == core::errc::invalid_argument);
  CHECK(contains(e.message, "x.npy has 5 examples"));
  CHECK(contains(e.message, "four.npy has 4 labels"));
}

TEST_CASE("npy: truncated features name the first missing record") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string cut = dir.file("cut-x.npy");
  write_bytes(cut, read_bytes(files.features).substr(0, 128 + 2 * 12 + 5));  // records 0, 1 and 5 bytes of 2
  const auto e = npy_error(cut, files.labels);
  CHECK(e.code == core::errc::truncated);
  CHECK(contains(e.message, "cut-x.npy: truncated at record 2 of 5 (offset 152)"));
}

TEST_CASE("npy: truncated labels name the first missing record") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string cut = dir.file("cut-y.npy");
  write_bytes(cut, read_bytes(files.labels).substr(0, 128 + 3 * 4));
  const auto e = npy_error(files.features, cut);
  CHECK(e.code == core::errc::truncated);
  CHECK(contains(e.message, "cut-y.npy: truncated at record 3 of 5 (offset 140)"));
}

TEST_CASE("npy: bytes after the last record are refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string longer = dir.file("longer.npy");
  write_bytes(longer, read_bytes(files.features) + "xy");
  const auto e = npy_error(longer, files.labels);
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "longer.npy: data continues after the 5 records"));
  CHECK(contains(e.message, "(2 more bytes)"));
}

TEST_CASE("npy: NaN in features names the record and feature") {
  temp_dir dir;
  const auto files = write_sample(dir);
  std::string bytes = read_bytes(files.features);
  bytes.replace(128 + (3 * 3 + 1) * 4, 4, f32_le(std::numeric_limits<float>::quiet_NaN()));
  const std::string nan = dir.file("nan.npy");
  write_bytes(nan, bytes);
  auto t = core::open_npy(nan, files.labels, {});
  REQUIRE(t.ok());  // refused when the record is read, not when the file is opened
  std::vector<float> x(k_features);
  std::vector<float> y(1);
  CHECK(t.value()->gather(std::vector<std::uint32_t>{2}, x, y).ok());
  const auto e = error_of(t.value()->gather(std::vector<std::uint32_t>{3}, x, y));
  CHECK(e.code == core::errc::not_finite);
  CHECK(contains(e.message, "nan.npy: record 3 of 5, feature 1 is not finite (nan)"));
}

TEST_CASE("npy: infinite float label names the record") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string y = dir.file("inf-labels.npy");
  write_bytes(y, npy_bytes(npy_dict("<f4", "(5,)"), f32_le(0) + f32_le(1) +
                                                       f32_le(std::numeric_limits<float>::infinity()) + f32_le(3) +
                                                       f32_le(4)));
  const auto e = npy_error(files.features, y);
  CHECK(e.code == core::errc::not_finite);
  CHECK(contains(e.message, "inf-labels.npy: record 2 of 5: label inf"));
}

TEST_CASE("npy: float64 label beyond the float32 range is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string y = dir.file("huge-labels.npy");
  write_bytes(y, npy_bytes(npy_dict("<f8", "(5,)"), f64_le(0) + f64_le(1e300) + std::string(24, '\0')));
  const auto e = npy_error(files.features, y);
  CHECK(e.code == core::errc::not_finite);
  CHECK(contains(e.message, "huge-labels.npy: record 1 of 5: label 1e+300"));
}

TEST_CASE("npy: integer label too large for float32 is refused") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string y = dir.file("big-labels.npy");
  write_bytes(y, npy_bytes(npy_dict("<i8", "(5,)"), le(0, 8) + le((std::uint64_t{1} << 24) + 1, 8) +
                                                       std::string(24, '\0')));
  const auto e = npy_error(files.features, y);
  CHECK(e.code == core::errc::unsupported);
  CHECK(contains(e.message, "big-labels.npy: record 1 of 5: label 16777217 has no exact float32 value"));
}

TEST_CASE("npy: missing file is an io error") {
  temp_dir dir;
  const auto files = write_sample(dir);
  const std::string missing = dir.file("missing.npy");
  const auto e = npy_error(missing, files.labels);
  CHECK(e.code == core::errc::io);
  CHECK(contains(e.message, "missing.npy: cannot open"));
}

TEST_CASE("npy: writer refuses values that are not whole examples") {
  temp_dir dir;
  const std::string x = dir.file("ragged.npy");
  const auto e = error_of(core::write_npy_features(x, 3, std::vector<float>{1, 2, 3, 4}));
  CHECK(e.code == core::errc::invalid_argument);
  CHECK(contains(e.message, "ragged.npy"));
  const auto z = error_of(core::write_npy_features(x, 0, std::vector<float>{}));
  CHECK(z.code == core::errc::invalid_argument);
  CHECK_FALSE(fs::exists(x));
  const auto io = error_of(core::write_npy_labels(dir.file("no-such-dir/y.npy"), std::vector<std::int32_t>{1}));
  CHECK(io.code == core::errc::io);
  CHECK(contains(io.message, "y.npy"));
}
