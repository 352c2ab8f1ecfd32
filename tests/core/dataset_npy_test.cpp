// The NumPy .npy reader and writers (dataset_npy.cpp, npy_header.cpp): round trips, every dtype and byte
// order, header variants NumPy writes, random access, normalization, and one named case for every way the
// reader must refuse its input.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/data/dataset.hpp"
#include "test_files.hpp"

namespace core = tessera::core;
namespace fs = std::filesystem;

using namespace tessera::testing;

namespace {

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
  check_index_refused(*t.value(), {1, 5}, files.features + " + " + files.labels + ": index 5 is out of range (size 5)");
}

// ---- every way the reader must refuse its input: one enum, one generator, one table ---------------

namespace {

// A way a pair of .npy files can be wrong. bad_npy_bytes() makes each from the valid pair write_sample()
// writes; npy_rejections() says how the reader must refuse it.
enum class bad_npy {
  wrong_magic,           // a zip file
  cut_in_preamble,       // 9 bytes: one of the two header-length bytes
  unsupported_version,   // 4.0
  unsupported_minor,     // 1.1
  header_past_end,       // a header length of 1000 in a 100-byte file
  header_over_limit,     // version 2.0 declaring a 70000-byte header
  header_not_a_dict,     // Python code
  unterminated_string,
  text_after_dict,
  unknown_key,
  key_twice,
  no_shape_key,
  fortran_not_bool,      // 'fortran_order': 0
  shape_not_tuple,       // (15) is an int in Python, not a 1-tuple
  negative_dimension,
  dimension_too_large,   // beyond 2^40, refused before it could overflow
  too_many_dimensions,   // 65
  too_many_examples,     // 2^31 + 1
  too_many_features,     // 4096 x 4097 per example, over 2^24
  empty_examples,        // (5, 0)
  scalar_features,       // shape ()
  fortran_order,         // True: column-major
  complex_dtype,         // '<c8'
  float64_features,      // '<f8'
  structured_dtype,      // a list of fields
  object_labels,         // '|O'
  half_labels,           // '<f2'
  unordered_multibyte,   // '|i4': no byte order on a 4-byte type
  two_column_labels,     // (5, 2)
  count_mismatch,        // 4 labels for 5 examples
  features_cut_short,    // records 0, 1 and 5 bytes of record 2
  labels_cut_short,      // records 0..2
  bytes_after_records,
  nan_feature,           // record 3, feature 1
  infinite_label,        // record 2
  label_beyond_float32,  // float64 1e300 at record 1
  label_not_exact,       // int64 2^24 + 1 at record 1
  missing_file,
};
constexpr std::size_t k_bad_npy_kinds = static_cast<std::size_t>(bad_npy::missing_file) + 1;

enum class npy_part { features, labels };  // which file of the pair is the malformed one

struct npy_rejection {
  bad_npy kind;
  std::string file;               // the malformed file's name
  npy_part part;
  core::errc code;
  refused_by when;                // by open_npy, or by the gather that reaches the record
  std::vector<std::string> says;  // what the message holds besides the path: field, offset, record
};

// The header of the valid features file is 128 bytes; its records follow.
constexpr std::size_t k_sample_data_offset = 128;

// The malformed file of `kind`, made from the bytes of the valid features (x) and labels (y) files;
// nullopt when the file must not exist.
std::optional<std::string> bad_npy_bytes(bad_npy kind, const std::string& x, const std::string& y) {
  const std::string x_records = x.substr(k_sample_data_offset);
  const std::string y_records = y.substr(k_sample_data_offset);
  const std::string magic = std::string(1, static_cast<char>(0x93)) + "NUMPY";
  std::string b = x;
  switch (kind) {
    case bad_npy::wrong_magic: return std::string("PK\x03\x04 a zip file, not a .npy file");
    case bad_npy::cut_in_preamble: return x.substr(0, 9);
    case bad_npy::unsupported_version: b[6] = 4; return b;
    case bad_npy::unsupported_minor: b[7] = 1; return b;
    case bad_npy::header_past_end:
      b = x.substr(0, 100);
      b.replace(8, 2, le(1000, 2));
      return b;
    case bad_npy::header_over_limit: return magic + std::string("\x02\x00", 2) + le(70000, 4) + npy_dict("<f4", "(5, 3)");
    case bad_npy::header_not_a_dict: return npy_bytes("__import__('os').system('true')", "");
    case bad_npy::unterminated_string:  // no padding after it: the header ends inside the string
      return magic + std::string("\x01\x00", 2) + le(14, 2) + "{'descr': '<f4";
    case bad_npy::text_after_dict: return npy_bytes(npy_dict("<f4", "(5, 3)") + " x", x_records);
    case bad_npy::unknown_key:
      return npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (5, 3), 'extra': 1}", x_records);
    case bad_npy::key_twice:
      return npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (5, 3), 'descr': '|u1'}", x_records);
    case bad_npy::no_shape_key: return npy_bytes("{'descr': '<f4', 'fortran_order': False, }", x_records);
    case bad_npy::fortran_not_bool: return npy_bytes(npy_dict("<f4", "(5, 3)", "0"), x_records);
    case bad_npy::shape_not_tuple: return npy_bytes(npy_dict("<f4", "(15)"), x_records);
    case bad_npy::negative_dimension: return npy_bytes(npy_dict("<f4", "(5, -3)"), x_records);
    case bad_npy::dimension_too_large: return npy_bytes(npy_dict("<f4", "(5, 99999999999999)"), x_records);
    case bad_npy::too_many_dimensions: {
      std::string shape = "(5";
      for (int d = 1; d < 65; ++d) shape += ", 1";
      return npy_bytes(npy_dict("<f4", shape + ")"), x_records);
    }
    case bad_npy::too_many_examples: return npy_bytes(npy_dict("<f4", "(2147483649, 3)"), x_records);
    case bad_npy::too_many_features: return npy_bytes(npy_dict("<f4", "(5, 4096, 4097)"), x_records);
    case bad_npy::empty_examples: return npy_bytes(npy_dict("<f4", "(5, 0)"), "");
    case bad_npy::scalar_features: return npy_bytes(npy_dict("<f4", "()"), f32_le(1.0f));
    case bad_npy::fortran_order: return npy_bytes(npy_dict("<f4", "(5, 3)", "True"), x_records);
    case bad_npy::complex_dtype: return npy_bytes(npy_dict("<c8", "(5, 3)"), x_records + x_records);
    case bad_npy::float64_features: return npy_bytes(npy_dict("<f8", "(5, 3)"), x_records + x_records);
    case bad_npy::structured_dtype:
      return npy_bytes("{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (5,), }",
                       x_records.substr(0, 40));
    case bad_npy::object_labels: return npy_bytes(npy_dict("|O", "(5,)"), y_records + y_records);
    case bad_npy::half_labels: return npy_bytes(npy_dict("<f2", "(5,)"), y_records.substr(0, 10));
    case bad_npy::unordered_multibyte: return npy_bytes(npy_dict("|i4", "(5,)"), y_records);
    case bad_npy::two_column_labels: return npy_bytes(npy_dict("<i4", "(5, 2)"), y_records + y_records);
    case bad_npy::count_mismatch: return npy_bytes(npy_dict("<i4", "(4,)"), y_records.substr(0, 4 * 4));
    case bad_npy::features_cut_short: return x.substr(0, k_sample_data_offset + 2 * 12 + 5);
    case bad_npy::labels_cut_short: return y.substr(0, k_sample_data_offset + 3 * 4);
    case bad_npy::bytes_after_records: return x + "xy";
    case bad_npy::nan_feature:
      b.replace(k_sample_data_offset + (3 * 3 + 1) * 4, 4, f32_le(std::numeric_limits<float>::quiet_NaN()));
      return b;
    case bad_npy::infinite_label:
      return npy_bytes(npy_dict("<f4", "(5,)"), f32_le(0) + f32_le(1) + f32_le(std::numeric_limits<float>::infinity()) +
                                                    f32_le(3) + f32_le(4));
    case bad_npy::label_beyond_float32:
      return npy_bytes(npy_dict("<f8", "(5,)"), f64_le(0) + f64_le(1e300) + std::string(24, '\0'));
    case bad_npy::label_not_exact:
      return npy_bytes(npy_dict("<i8", "(5,)"), le(0, 8) + le((std::uint64_t{1} << 24) + 1, 8) + std::string(24, '\0'));
    case bad_npy::missing_file: return std::nullopt;
  }
  return std::nullopt;
}

// How the reader must refuse each kind, in the order of the enum.
const std::vector<npy_rejection>& npy_rejections() {
  using core::errc;
  using enum bad_npy;
  constexpr npy_part x = npy_part::features;
  constexpr npy_part y = npy_part::labels;
  using enum refused_by;
  // Offsets in the header where the parser stops, as its messages give them.
  const auto at_byte = [](std::string_view dict, std::string_view at) {
    return "malformed .npy header at byte " + std::to_string(dict.find(at)) + ": ";
  };
  static const std::vector<npy_rejection> table = {
      {wrong_magic, "zip.npy", x, errc::bad_format, open, {"magic is 50 4b 03 04"}},
      {cut_in_preamble, "cut.npy", x, errc::truncated, open, {"the header length needs 2 bytes at offset 8"}},
      {unsupported_version, "v4.npy", x, errc::unsupported, open, {"version 4.0"}},
      {unsupported_minor, "v1-1.npy", x, errc::unsupported, open, {"version 1.1"}},
      {header_past_end, "long-header.npy", x, errc::truncated, open,
       {"header length 1000 bytes runs past the end of the file (100 bytes"}},
      {header_over_limit, "huge-header.npy", x, errc::bad_format, open,
       {"header length 70000 bytes is over the limit of 65536"}},
      {header_not_a_dict, "garbage.npy", x, errc::bad_format, open, {"malformed .npy header at byte 0"}},
      {unterminated_string, "unterminated.npy", x, errc::bad_format, open, {"unterminated string"}},
      {text_after_dict, "trailing.npy", x, errc::bad_format, open,
       {"at byte " + std::to_string(npy_dict("<f4", "(5, 3)").size() + 1) + ": unexpected text after the closing '}'"}},
      {unknown_key, "unknown-key.npy", x, errc::bad_format, open, {"unknown key 'extra'"}},
      {key_twice, "twice.npy", x, errc::bad_format, open, {"the key 'descr' appears twice"}},
      {no_shape_key, "no-shape.npy", x, errc::bad_format, open, {"no 'shape' key"}},
      {fortran_not_bool, "fortran-int.npy", x, errc::bad_format, open,
       {"expected True or False as the value of 'fortran_order'"}},
      {shape_not_tuple, "not-tuple.npy", x, errc::bad_format, open, {"'shape' (15) is not a tuple"}},
      {negative_dimension, "negative.npy", x, errc::bad_format, open,
       {at_byte(npy_dict("<f4", "(5, -3)"), "-") + "expected a non-negative integer in the 'shape' tuple"}},
      {dimension_too_large, "large-dim.npy", x, errc::bad_format, open, {"dimension 1 of 'shape' is too large"}},
      {too_many_dimensions, "rank-65.npy", x, errc::unsupported, open, {"'shape' has more than 64 dimensions"}},
      {too_many_examples, "many.npy", x, errc::bad_format, open,
       {"'shape' (2147483649, 3) declares 2147483649 examples, more than the limit of 2147483648"}},
      {too_many_features, "wide.npy", x, errc::unsupported, open,
       {"'shape' (5, 4096, 4097) gives more than 16777216 elements per example"}},
      {empty_examples, "empty-rows.npy", x, errc::unsupported, open, {"'shape' (5, 0) gives examples with no elements"}},
      {scalar_features, "scalar.npy", x, errc::unsupported, open, {"'shape' ()"}},
      {fortran_order, "fortran.npy", x, errc::unsupported, open, {"'fortran_order' True"}},
      {complex_dtype, "complex.npy", x, errc::unsupported, open, {"'descr' '<c8' is not supported"}},
      {float64_features, "doubles.npy", x, errc::unsupported, open, {"'descr' '<f8' is not supported for features"}},
      {structured_dtype, "records.npy", x, errc::unsupported, open, {"'descr' is a structured dtype"}},
      {object_labels, "objects.npy", y, errc::unsupported, open, {"'descr' '|O' is not supported for labels"}},
      {half_labels, "half.npy", y, errc::unsupported, open, {"'descr' '<f2' is not supported for labels"}},
      {unordered_multibyte, "no-order.npy", y, errc::unsupported, open, {"'descr' '|i4' is not supported for labels"}},
      {two_column_labels, "two-columns.npy", y, errc::unsupported, open,
       {"'shape' (N,) or (N, 1), the header has (5, 2)"}},
      {count_mismatch, "four.npy", y, errc::invalid_argument, open, {"x.npy has 5 examples", "four.npy has 4 labels"}},
      {features_cut_short, "cut-x.npy", x, errc::truncated, open, {"cut-x.npy: truncated at record 2 of 5 (offset 152)"}},
      {labels_cut_short, "cut-y.npy", y, errc::truncated, open, {"cut-y.npy: truncated at record 3 of 5 (offset 140)"}},
      {bytes_after_records, "longer.npy", x, errc::bad_format, open,
       {"longer.npy: data continues after the 5 records", "(2 more bytes)"}},
      {nan_feature, "nan.npy", x, errc::not_finite, read, {"nan.npy: record 3 of 5, feature 1 is not finite (nan)"}},
      {infinite_label, "inf-labels.npy", y, errc::not_finite, read, {"inf-labels.npy: record 2 of 5: label inf"}},
      {label_beyond_float32, "huge-labels.npy", y, errc::not_finite, read,
       {"huge-labels.npy: record 1 of 5: label 1e+300"}},
      {label_not_exact, "big-labels.npy", y, errc::unsupported, read,
       {"big-labels.npy: record 1 of 5: label 16777217 has no exact float32 value"}},
      {missing_file, "missing.npy", x, errc::io, open, {"missing.npy: cannot open"}},
  };
  return table;
}

}  // namespace

TEST_CASE("npy: every malformed file is refused with its code, naming the file and what is wrong") {
  temp_dir dir;
  const auto valid = write_sample(dir);
  const std::string x = read_bytes(valid.features);
  const std::string y = read_bytes(valid.labels);
  REQUIRE(x.size() == k_sample_data_offset + k_count * k_features * 4);
  for_each_rejection(
      dir, npy_rejections(), k_bad_npy_kinds, [&](bad_npy kind) { return bad_npy_bytes(kind, x, y); },
      [&](const npy_rejection& c, const std::string& bad) {
        auto t = c.part == npy_part::features ? core::open_npy(bad, valid.labels, {})
                                              : core::open_npy(valid.features, bad, {});
        // Whatever the header or the file size shows is refused on opening; a bad value when it is read.
        CHECK(t.ok() == (c.when == refused_by::read));
        check_refusal(t.ok() ? error_of(gather_all(*t.value())) : std::move(t).error(), c.code, bad, c.says);
      });
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
