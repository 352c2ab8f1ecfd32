// IDX readers and writers (dataset_idx.cpp): round trips, plain and gzip files, random access against
// streaming, normalization, and one named case for every way the reader must refuse its input.
#include <doctest/doctest.h>
#include <zlib.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/dataset.hpp"
#include "test_files.hpp"

namespace core = tessera::core;

namespace {

using tessera::testing::contains;
using tessera::testing::error_of;
using tessera::testing::read_bytes;
using tessera::testing::read_stream;
using tessera::testing::read_until_error;
using tessera::testing::temp_dir;
using tessera::testing::write_bytes;

void write_gzip(const std::string& path, std::string_view bytes) {
  gzFile gz = gzopen(path.c_str(), "wb");
  REQUIRE(gz != nullptr);
  if (!bytes.empty()) REQUIRE(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(gz) == Z_OK);
}

// Five 2x3 images with distinct pixels (including 0 and 255) and labels 0..4 (label i for image i).
constexpr std::int64_t k_rows = 2;
constexpr std::int64_t k_cols = 3;
constexpr std::size_t k_count = 5;
constexpr std::size_t k_pixels = 6;

std::vector<std::uint8_t> sample_pixels() {
  std::vector<std::uint8_t> p(k_count * k_pixels);
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::uint8_t>((i * 37) % 256);
  p[7] = 255;
  return p;
}
std::vector<std::uint8_t> sample_labels() { return {0, 1, 2, 3, 4}; }

struct idx_files {
  std::string images;
  std::string labels;
};

idx_files write_sample_idx(const temp_dir& dir) {
  idx_files f{dir.file("images.idx"), dir.file("labels.idx")};
  REQUIRE(core::write_idx_images(f.images, k_rows, k_cols, sample_pixels()).ok());
  REQUIRE(core::write_idx_labels(f.labels, sample_labels()).ok());
  return f;
}

// The error of opening a pair of IDX files and reading them to the end: plain files are checked against
// their headers when opened, gzip ones as they are read.
core::error idx_error(const std::string& images, const std::string& labels) {
  auto s = core::open_idx(images, labels, {});
  return s.ok() ? read_until_error(*s.value()) : std::move(s).error();
}

}  // namespace

TEST_CASE("idx: plain files stream every example, scaled to [0, 1] by default") {
  temp_dir dir;
  const auto files = write_sample_idx(dir);
  auto s = core::open_idx(files.images, files.labels, {});
  REQUIRE(s.ok());
  CHECK(s.value()->feature_count() == 6);
  CHECK(s.value()->size_hint() == 5);
  CHECK(contains(s.value()->describe(), "images.idx"));
  const auto all = read_stream(*s.value(), 2);  // 2 + 2 + 1: a short last batch
  const auto pixels = sample_pixels();
  REQUIRE(all.x.size() == pixels.size());
  for (std::size_t i = 0; i < pixels.size(); ++i) CHECK(all.x[i] == static_cast<float>(pixels[i]) / 255.0f);
  CHECK(all.x[7] == 1.0f);
  CHECK(all.y == std::vector<float>{0, 1, 2, 3, 4});
}

TEST_CASE("idx: gzip files read the same as plain files") {
  temp_dir dir;
  const auto plain = write_sample_idx(dir);
  const idx_files gz{dir.file("images.idx.gz"), dir.file("labels.idx.gz")};
  write_gzip(gz.images, read_bytes(plain.images));
  write_gzip(gz.labels, read_bytes(plain.labels));
  REQUIRE(read_bytes(gz.images).at(0) == 0x1f);

  core::idx_options none;
  none.norm = core::normalization::none;
  auto a = core::open_idx(plain.images, plain.labels, none);
  auto b = core::open_idx(gz.images, gz.labels, none);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const auto from_plain = read_stream(*a.value(), 3);
  const auto from_gzip = read_stream(*b.value(), 1);
  CHECK(from_gzip.x == from_plain.x);
  CHECK(from_gzip.y == from_plain.y);
  CHECK(from_plain.x[7] == 255.0f);
}

TEST_CASE("idx: rewind starts again from the first example") {
  temp_dir dir;
  const auto plain = write_sample_idx(dir);
  const idx_files gz{dir.file("images.idx.gz"), dir.file("labels.idx.gz")};
  write_gzip(gz.images, read_bytes(plain.images));
  write_gzip(gz.labels, read_bytes(plain.labels));
  for (const auto& files : {plain, gz}) {
    CAPTURE(files.images);
    auto s = core::open_idx(files.images, files.labels, {});
    REQUIRE(s.ok());
    const auto first = read_stream(*s.value(), 2);
    REQUIRE(s.value()->rewind().ok());
    const auto second = read_stream(*s.value(), 4);
    CHECK(second.x == first.x);
    CHECK(second.y == first.y);
    // Rewinding mid-way too.
    std::vector<float> x(6);
    std::vector<float> y(1);
    REQUIRE(s.value()->rewind().ok());
    REQUIRE(s.value()->read(x, y).value() == 1);
    REQUIRE(s.value()->rewind().ok());
    CHECK(read_stream(*s.value(), 5).y == first.y);
  }
}

TEST_CASE("idx: random access through the table matches streaming") {
  temp_dir dir;
  const auto files = write_sample_idx(dir);
  auto s = core::open_idx(files.images, files.labels, {});
  auto t = core::open_idx_table(files.images, files.labels, {});
  REQUIRE(s.ok());
  REQUIRE(t.ok());
  CHECK(t.value()->size() == 5);
  CHECK(t.value()->feature_count() == 6);
  const auto streamed = read_stream(*s.value(), 5);
  const std::vector<std::uint32_t> indices = {4, 0, 2, 2, 1, 3};
  std::vector<float> x(indices.size() * 6);
  std::vector<float> y(indices.size());
  REQUIRE(t.value()->gather(indices, x, y).ok());
  for (std::size_t k = 0; k < indices.size(); ++k) {
    CAPTURE(k);
    CHECK(y[k] == streamed.y[indices[k]]);
    for (std::size_t j = 0; j < 6; ++j) CHECK(x[k * 6 + j] == streamed.x[indices[k] * 6 + j]);
  }
}

TEST_CASE("idx: open_idx on uncompressed files is also a table") {
  temp_dir dir;
  const auto plain = write_sample_idx(dir);
  const std::string gz = dir.file("labels.idx.gz");
  write_gzip(gz, read_bytes(plain.labels));
  auto s = core::open_idx(plain.images, plain.labels, {});
  REQUIRE(s.ok());
  auto* table = dynamic_cast<core::example_table*>(s.value().get());
  REQUIRE(table != nullptr);
  CHECK(table->size() == 5);
  CHECK(table->feature_count() == 6);
  CHECK(table->describe() == s.value()->describe());
  std::vector<float> x(6);
  std::vector<float> y(1);
  REQUIRE(table->gather(std::vector<std::uint32_t>{3}, x, y).ok());
  const auto streamed = read_stream(*s.value(), 5);  // gather did not move the stream
  REQUIRE(streamed.y.size() == 5);
  CHECK(y[0] == 3.0f);
  CHECK(std::vector<float>(streamed.x.begin() + 18, streamed.x.begin() + 24) == x);

  auto mixed = core::open_idx(plain.images, gz, {});
  REQUIRE(mixed.ok());
  CHECK(dynamic_cast<core::example_table*>(mixed.value().get()) == nullptr);
}

TEST_CASE("idx: normalization none, scale_unit and standardize") {
  temp_dir dir;
  // Two 1x2 images: feature 0 takes 0 and 4 (mean 2, std 2), feature 1 is always 10 (std 0, taken as 1).
  const std::string images = dir.file("i.idx");
  const std::string labels = dir.file("l.idx");
  REQUIRE(core::write_idx_images(images, 1, 2, std::vector<std::uint8_t>{0, 10, 4, 10}).ok());
  REQUIRE(core::write_idx_labels(labels, std::vector<std::uint8_t>{7, 9}).ok());

  core::idx_options opt;
  opt.norm = core::normalization::none;
  CHECK(read_stream(*core::open_idx(images, labels, opt).value(), 2).x == std::vector<float>{0, 10, 4, 10});
  opt.norm = core::normalization::scale_unit;
  CHECK(read_stream(*core::open_idx(images, labels, opt).value(), 2).x ==
        std::vector<float>{0, 10 / 255.0f, 4 / 255.0f, 10 / 255.0f});

  opt.norm = core::normalization::standardize;  // statistics measured in a first pass
  const auto measured = read_stream(*core::open_idx(images, labels, opt).value(), 2);
  REQUIRE(measured.x.size() == 4);
  CHECK(measured.x[0] == doctest::Approx(-1.0));
  CHECK(measured.x[1] == doctest::Approx(0.0));
  CHECK(measured.x[2] == doctest::Approx(1.0));
  CHECK(measured.x[3] == doctest::Approx(0.0));
  CHECK(measured.y == std::vector<float>{7, 9});  // labels are class indices, never normalized

  opt.stats = {{1.0f, 5.0f}, {0.5f, 0.0f}};  // given statistics
  const auto given = read_stream(*core::open_idx(images, labels, opt).value(), 2);
  CHECK(given.x == std::vector<float>{-2.0f, 5.0f, 6.0f, 5.0f});
  auto t = core::open_idx_table(images, labels, opt);
  REQUIRE(t.ok());
  std::vector<float> x(2);
  std::vector<float> y(1);
  REQUIRE(t.value()->gather(std::vector<std::uint32_t>{1}, x, y).ok());
  CHECK(x == std::vector<float>{6.0f, 5.0f});
  auto st = core::open_idx(images, labels, opt);  // the stream's own table normalizes the same way
  REQUIRE(st.ok());
  auto* as_table = dynamic_cast<core::example_table*>(st.value().get());
  REQUIRE(as_table != nullptr);
  x.assign(2, 0.0f);
  REQUIRE(as_table->gather(std::vector<std::uint32_t>{1}, x, y).ok());
  CHECK(x == std::vector<float>{6.0f, 5.0f});

  opt.stats = {{1.0f}, {1.0f}};  // one feature's worth for two features
  auto wrong = core::open_idx(images, labels, opt);
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.error().code == core::errc::invalid_argument);
  CHECK(contains(wrong.error().message, "i.idx"));
}

TEST_CASE("idx: wrong magic is refused") {
  temp_dir dir;
  const auto files = write_sample_idx(dir);
  const std::string bad = dir.file("not-idx.bin");
  write_bytes(bad, std::string_view("PK\x03\x04 a zip file, not IDX"));
  for (const auto& r : {error_of(core::open_idx(bad, files.labels, {})),
                        error_of(core::open_idx_table(bad, files.labels, {}))}) {
    CHECK(r.code == core::errc::bad_format);
    CHECK(contains(r.message, "not-idx.bin"));
    CHECK(contains(r.message, "50 4b 03 04"));
  }
}

TEST_CASE("idx: unsupported element type is refused") {
  temp_dir dir;
  const auto files = write_sample_idx(dir);
  const std::string floats = dir.file("floats.idx");
  // Type 0x0D (f32), rank 3, one 1x1 image.
  write_bytes(floats, std::vector<std::uint8_t>{0, 0, 0x0d, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0x80, 0x3f});
  auto r = core::open_idx(floats, files.labels, {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::errc::unsupported);
  CHECK(contains(r.error().message, "floats.idx"));
  CHECK(contains(r.error().message, "0d"));
}

TEST_CASE("idx: truncated header is refused") {
  temp_dir dir;
  const auto files = write_sample_idx(dir);
  const std::string cut = dir.file("cut-header.idx");
  write_bytes(cut, std::vector<std::uint8_t>{0, 0, 8, 3, 0, 0, 0, 5, 0, 0});  // 6 of 12 dimension bytes
  auto r = core::open_idx(cut, files.labels, {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::errc::truncated);
  CHECK(contains(r.error().message, "cut-header.idx"));
  CHECK(contains(r.error().message, "header"));
  const std::string two = dir.file("two-bytes.idx");
  write_bytes(two, std::vector<std::uint8_t>{0, 0});
  auto t = core::open_idx_table(two, files.labels, {});
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().code == core::errc::truncated);
  CHECK(contains(t.error().message, "two-bytes.idx"));
}

TEST_CASE("idx: truncated data names the record") {
  temp_dir dir;
  const auto files = write_sample_idx(dir);
  // Keep the 16-byte header, records 0..2 and 2 bytes of record 3.
  auto bytes = read_bytes(files.images);
  bytes.resize(16 + 3 * k_pixels + 2);
  const std::string cut = dir.file("cut-images.idx");
  const std::string cut_gz = dir.file("cut-images.idx.gz");
  write_bytes(cut, bytes);
  write_gzip(cut_gz, bytes);
  for (const auto& path : {cut, cut_gz}) {
    CAPTURE(path);
    const auto e = idx_error(path, files.labels);
    CHECK(e.code == core::errc::truncated);
    CHECK(contains(e.message, path));
    CHECK(contains(e.message, "truncated at record 3 of 5 (offset 34)"));
  }
  auto t = core::open_idx_table(cut, files.labels, {});
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().code == core::errc::truncated);
  CHECK(contains(t.error().message, "cut-images.idx: truncated at record 3 of 5"));

  // A labels file cut short names its own record.
  const std::string cut_labels = dir.file("cut-labels.idx");
  write_bytes(cut_labels, std::vector<std::uint8_t>{0, 0, 8, 1, 0, 0, 0, 5, 0, 1});
  const auto le = idx_error(files.images, cut_labels);
  CHECK(le.code == core::errc::truncated);
  CHECK(contains(le.message, "cut-labels.idx: truncated at record 2 of 5"));
}

TEST_CASE("idx: corrupt gzip data is refused") {
  temp_dir dir;
  const auto files = write_sample_idx(dir);
  const std::string gz = dir.file("corrupt.idx.gz");
  write_gzip(gz, read_bytes(files.images));
  auto bytes = read_bytes(gz);
  REQUIRE(bytes.size() > 20);
  bytes[bytes.size() - 6] = static_cast<char>(bytes[bytes.size() - 6] ^ 0xff);  // inside the CRC-32 of the gzip trailer
  write_bytes(gz, bytes);
  // zlib inflates ahead of what is asked, so a small file fails while its header is read; a large one
  // would fail on a later read (or, past the last record, in the end-of-data check).
  const auto e = idx_error(gz, files.labels);
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "corrupt.idx.gz: corrupt gzip data"));
}

TEST_CASE("idx: data after the last record is refused") {
  temp_dir dir;
  const auto files = write_sample_idx(dir);
  auto bytes = read_bytes(files.images);
  bytes.push_back(0);
  const std::string longer = dir.file("longer.idx");
  write_bytes(longer, bytes);
  const std::string longer_gz = dir.file("longer.idx.gz");
  write_gzip(longer_gz, bytes);
  for (const auto& path : {longer, longer_gz}) {
    CAPTURE(path);
    const auto e = idx_error(path, files.labels);
    CHECK(e.code == core::errc::bad_format);
    CHECK(contains(e.message, path + ": data continues after the 5 records"));
  }
  auto t = core::open_idx_table(longer, files.labels, {});
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().code == core::errc::bad_format);
  CHECK(contains(t.error().message, "longer.idx"));
}

TEST_CASE("idx: image and label counts must agree") {
  temp_dir dir;
  const auto files = write_sample_idx(dir);
  const std::string four = dir.file("four-labels.idx");
  REQUIRE(core::write_idx_labels(four, std::vector<std::uint8_t>{0, 1, 2, 3}).ok());
  for (const auto& e : {error_of(core::open_idx(files.images, four, {})),
                        error_of(core::open_idx_table(files.images, four, {}))}) {
    CHECK(e.code == core::errc::invalid_argument);
    CHECK(contains(e.message, "images.idx has 5 images"));
    CHECK(contains(e.message, "four-labels.idx has 4 labels"));
  }
}

TEST_CASE("idx: missing file is an io error") {
  temp_dir dir;
  const auto files = write_sample_idx(dir);
  const std::string missing = dir.file("missing.idx");
  for (const auto& e : {error_of(core::open_idx(missing, files.labels, {})),
                        error_of(core::open_idx(files.images, missing, {})),
                        error_of(core::open_idx_table(missing, files.labels, {}))}) {
    CHECK(e.code == core::errc::io);
    CHECK(contains(e.message, "missing.idx"));
    CHECK(contains(e.message, "No such file"));
  }
}

TEST_CASE("idx: open_idx_table refuses a compressed file") {
  temp_dir dir;
  const auto plain = write_sample_idx(dir);
  const std::string gz = dir.file("labels.idx.gz");
  write_gzip(gz, read_bytes(plain.labels));
  auto t = core::open_idx_table(plain.images, gz, {});
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().code == core::errc::unsupported);
  CHECK(contains(t.error().message, "labels.idx.gz"));
  CHECK(contains(t.error().message, "gzip"));
  CHECK(core::open_idx(plain.images, gz, {}).ok());  // the stream reads it
}

TEST_CASE("idx: absurd dimensions are refused") {
  temp_dir dir;
  const auto files = write_sample_idx(dir);
  const std::string huge = dir.file("huge.idx");  // 65536 x 65536 bytes per image
  write_bytes(huge, std::vector<std::uint8_t>{0, 0, 8, 3, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 0});
  auto r = core::open_idx(huge, files.labels, {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::errc::bad_format);
  CHECK(contains(r.error().message, "huge.idx"));

  const std::string many = dir.file("many.idx");  // 2^32 - 1 labels
  write_bytes(many, std::vector<std::uint8_t>{0, 0, 8, 1, 0xff, 0xff, 0xff, 0xff});
  auto m = core::open_idx(files.images, many, {});
  REQUIRE_FALSE(m.ok());
  CHECK(m.error().code == core::errc::bad_format);
  CHECK(contains(m.error().message, "many.idx"));

  const std::string zero = dir.file("zero.idx");  // 0-column images
  write_bytes(zero, std::vector<std::uint8_t>{0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0});
  auto z = core::open_idx(zero, files.labels, {});
  REQUIRE_FALSE(z.ok());
  CHECK(z.error().code == core::errc::bad_format);
  CHECK(contains(z.error().message, "zero.idx: dimension 2 is 0"));
}

TEST_CASE("idx: wrong rank for images or labels is refused") {
  temp_dir dir;
  const auto files = write_sample_idx(dir);
  auto swapped = core::open_idx(files.labels, files.images, {});
  REQUIRE_FALSE(swapped.ok());
  CHECK(swapped.error().code == core::errc::unsupported);
  CHECK(contains(swapped.error().message, "labels.idx"));
}

TEST_CASE("idx: gather index out of range names index and size") {
  temp_dir dir;
  const auto files = write_sample_idx(dir);
  auto t = core::open_idx_table(files.images, files.labels, {});
  REQUIRE(t.ok());
  std::vector<float> x(12);
  std::vector<float> y(2);
  auto r = t.value()->gather(std::vector<std::uint32_t>{1, 5}, x, y);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::errc::invalid_argument);
  CHECK(contains(r.error().message, "index 5 is out of range (size 5)"));
  CHECK(contains(r.error().message, "images.idx"));
}

TEST_CASE("idx: writers refuse pixels that are not whole images") {
  temp_dir dir;
  const std::string path = dir.file("odd.idx");
  auto r = core::write_idx_images(path, 2, 3, std::vector<std::uint8_t>(7));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::errc::invalid_argument);
  CHECK(contains(r.error().message, "odd.idx"));
  auto io = core::write_idx_labels(dir.file("no-such-dir/labels.idx"), std::vector<std::uint8_t>{1});
  REQUIRE_FALSE(io.ok());
  CHECK(io.error().code == core::errc::io);
  CHECK(contains(io.error().message, "labels.idx"));
}
