// Dataset readers: round trips, random access against streaming, normalization, statistics, and one
// named case for every way a reader must refuse its input.
#include "tessera/core/dataset.hpp"

#include <doctest/doctest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace core = tessera::core;
namespace fs = std::filesystem;

#include "test_files.hpp"

namespace {

using tessera::testing::temp_dir;
using tessera::testing::write_bytes;




std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_gzip(const std::string& path, const std::vector<std::uint8_t>& bytes) {
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

struct all_examples {
  std::vector<float> x;
  std::vector<float> y;
};

// Reads a stream to the end in batches of `batch`, checking each batch size is as promised.
all_examples read_all(core::example_stream& s, std::size_t batch) {
  all_examples out;
  const auto f = static_cast<std::size_t>(s.feature_count());
  std::vector<float> x(batch * f);
  std::vector<float> y(batch);
  while (true) {
    auto n = s.read(x, y);
    REQUIRE_MESSAGE(n.ok(), (n.ok() ? "" : n.error().message));
    if (n.value() == 0) break;
    REQUIRE(n.value() <= batch);
    out.x.insert(out.x.end(), x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n.value() * f));
    out.y.insert(out.y.end(), y.begin(), y.begin() + static_cast<std::ptrdiff_t>(n.value()));
  }
  return out;
}

// Reads until an error and returns it; fails the test if the stream ends cleanly.
core::error read_until_error(core::example_stream& s) {
  const auto f = static_cast<std::size_t>(s.feature_count());
  std::vector<float> x(4 * f);
  std::vector<float> y(4);
  while (true) {
    auto n = s.read(x, y);
    if (!n) return n.error();
    REQUIRE_MESSAGE(n.value() != 0, "the stream ended without the expected error");
  }
}

// The error of opening a pair of IDX files and reading them to the end: plain files are checked against
// their headers when opened, gzip ones as they are read.
core::error idx_error(const std::string& images, const std::string& labels) {
  auto s = core::open_idx(images, labels, {});
  return s.ok() ? read_until_error(*s.value()) : std::move(s).error();
}

// The error of a result that must have failed (fails the test, instead of asserting, if it did not).
template <class T>
core::error error_of(core::result<T> r) {
  REQUIRE_FALSE(r.ok());
  return std::move(r).error();
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

// An in-memory stream with hand-picked values, for compute_stats and load_all.
class vector_stream final : public core::example_stream {
 public:
  vector_stream(std::int64_t features, std::vector<float> x, std::vector<float> y)
      : features_(features), x_(std::move(x)), y_(std::move(y)) {}
  std::int64_t feature_count() const noexcept override { return features_; }
  std::int64_t size_hint() const noexcept override { return -1; }
  core::result<std::size_t> read(std::span<float> features, std::span<float> targets) override {
    const auto f = static_cast<std::size_t>(features_);
    std::size_t n = 0;
    while (n < targets.size() && next_ < y_.size()) {
      std::copy_n(x_.begin() + static_cast<std::ptrdiff_t>(next_ * f), f, features.begin() + static_cast<std::ptrdiff_t>(n * f));
      targets[n++] = y_[next_++];
    }
    return n;
  }
  core::result<void> rewind() override {
    next_ = 0;
    return {};
  }
  std::string describe() const override { return "vector_stream"; }

 private:
  std::int64_t features_;
  std::vector<float> x_;
  std::vector<float> y_;
  std::size_t next_ = 0;
};

}  // namespace

// ---- IDX ----------------------------------------------------------------------------------------

TEST_CASE("idx: plain files stream every example, scaled to [0, 1] by default") {
  temp_dir dir;
  const auto files = write_sample_idx(dir);
  auto s = core::open_idx(files.images, files.labels, {});
  REQUIRE(s.ok());
  CHECK(s.value()->feature_count() == 6);
  CHECK(s.value()->size_hint() == 5);
  CHECK(contains(s.value()->describe(), "images.idx"));
  const auto all = read_all(*s.value(), 2);  // 2 + 2 + 1: a short last batch
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
  const auto from_plain = read_all(*a.value(), 3);
  const auto from_gzip = read_all(*b.value(), 1);
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
    const auto first = read_all(*s.value(), 2);
    REQUIRE(s.value()->rewind().ok());
    const auto second = read_all(*s.value(), 4);
    CHECK(second.x == first.x);
    CHECK(second.y == first.y);
    // Rewinding mid-way too.
    std::vector<float> x(6);
    std::vector<float> y(1);
    REQUIRE(s.value()->rewind().ok());
    REQUIRE(s.value()->read(x, y).value() == 1);
    REQUIRE(s.value()->rewind().ok());
    CHECK(read_all(*s.value(), 5).y == first.y);
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
  const auto streamed = read_all(*s.value(), 5);
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
  const auto streamed = read_all(*s.value(), 5);  // gather did not move the stream
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
  CHECK(read_all(*core::open_idx(images, labels, opt).value(), 2).x == std::vector<float>{0, 10, 4, 10});
  opt.norm = core::normalization::scale_unit;
  CHECK(read_all(*core::open_idx(images, labels, opt).value(), 2).x ==
        std::vector<float>{0, 10 / 255.0f, 4 / 255.0f, 10 / 255.0f});

  opt.norm = core::normalization::standardize;  // statistics measured in a first pass
  const auto measured = read_all(*core::open_idx(images, labels, opt).value(), 2);
  REQUIRE(measured.x.size() == 4);
  CHECK(measured.x[0] == doctest::Approx(-1.0));
  CHECK(measured.x[1] == doctest::Approx(0.0));
  CHECK(measured.x[2] == doctest::Approx(1.0));
  CHECK(measured.x[3] == doctest::Approx(0.0));
  CHECK(measured.y == std::vector<float>{7, 9});  // labels are class indices, never normalized

  opt.stats = {{1.0f, 5.0f}, {0.5f, 0.0f}};  // given statistics
  const auto given = read_all(*core::open_idx(images, labels, opt).value(), 2);
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
  bytes[bytes.size() - 6] ^= 0xff;  // inside the CRC-32 of the gzip trailer
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

// ---- CSV ----------------------------------------------------------------------------------------

TEST_CASE("csv: header line, label in the first column") {
  temp_dir dir;
  const std::string path = dir.file("data.csv");
  write_bytes(path, "label,a,b\n1,0.5,2\n0, -1.25 ,+3\n\n2,1e2,-0\n");
  core::csv_options opt;
  opt.header = true;
  auto s = core::open_csv(path, opt);
  REQUIRE(s.ok());
  CHECK(s.value()->feature_count() == 2);
  CHECK(s.value()->size_hint() == -1);
  CHECK(s.value()->describe() == path);
  const auto all = read_all(*s.value(), 2);
  CHECK(all.x == std::vector<float>{0.5f, 2.0f, -1.25f, 3.0f, 100.0f, -0.0f});
  CHECK(all.y == std::vector<float>{1, 0, 2});
  REQUIRE(s.value()->rewind().ok());
  CHECK(read_all(*s.value(), 10).y == all.y);
}

TEST_CASE("csv: no header, label in the last column, other delimiter, CRLF, no final newline") {
  temp_dir dir;
  const std::string path = dir.file("data.csv");
  write_bytes(path, "1;2;3;7\r\n4;5;6;8\r\n0.25;.5;5.;9");
  core::csv_options opt;
  opt.label_column = 3;
  opt.delimiter = ';';
  auto s = core::open_csv(path, opt);
  REQUIRE(s.ok());
  CHECK(s.value()->feature_count() == 3);
  const auto all = read_all(*s.value(), 1);
  CHECK(all.x == std::vector<float>{1, 2, 3, 4, 5, 6, 0.25f, 0.5f, 5.0f});
  CHECK(all.y == std::vector<float>{7, 8, 9});
}

TEST_CASE("csv: scale_unit and standardize") {
  temp_dir dir;
  const std::string path = dir.file("data.csv");
  write_bytes(path, "0,0,255\n1,4,255\n");
  core::csv_options opt;
  opt.norm = core::normalization::scale_unit;
  CHECK(read_all(*core::open_csv(path, opt).value(), 4).x == std::vector<float>{0, 1, 4 / 255.0f, 1});
  opt.norm = core::normalization::standardize;
  const auto measured = read_all(*core::open_csv(path, opt).value(), 4);
  REQUIRE(measured.x.size() == 4);
  CHECK(measured.x[0] == doctest::Approx(-1.0));
  CHECK(measured.x[1] == doctest::Approx(0.0));
  CHECK(measured.x[2] == doctest::Approx(1.0));
  CHECK(measured.x[3] == doctest::Approx(0.0));
  CHECK(measured.y == std::vector<float>{0, 1});
}

TEST_CASE("csv: non-numeric cell names line and column") {
  temp_dir dir;
  const std::string path = dir.file("data.csv");
  write_bytes(path, "y,a,b,c\n1,2,3,4\n1,2,3,abc\n");
  core::csv_options opt;
  opt.header = true;
  auto s = core::open_csv(path, opt);
  REQUIRE(s.ok());
  const auto e = read_until_error(*s.value());
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "data.csv: line 3, column 4: 'abc' is not a number"));
  // The error stays until rewind, and the stream does not skip past the bad line.
  std::vector<float> x(3);
  std::vector<float> y(1);
  CHECK_FALSE(s.value()->read(x, y).ok());
  REQUIRE(s.value()->rewind().ok());
  CHECK(s.value()->read(x, y).value() == 1);

  const std::string empty_cell = dir.file("empty-cell.csv");
  write_bytes(empty_cell, "1,,3\n");
  auto ec = core::open_csv(empty_cell, {});
  REQUIRE(ec.ok());
  const auto ee = read_until_error(*ec.value());
  CHECK(ee.code == core::errc::bad_format);
  CHECK(contains(ee.message, "empty-cell.csv: line 1, column 2: '' is not a number"));

  const std::string unexpected_header = dir.file("header.csv");  // a header, but header = false
  write_bytes(unexpected_header, "label,x\n1,2\n");
  auto uh = core::open_csv(unexpected_header, {});
  REQUIRE(uh.ok());
  const auto he = read_until_error(*uh.value());
  CHECK(he.code == core::errc::bad_format);
  CHECK(contains(he.message, "header.csv: line 1, column 1: 'label' is not a number (a header line? set header)"));
}

TEST_CASE("csv: ragged row is refused") {
  temp_dir dir;
  const std::string path = dir.file("ragged.csv");
  write_bytes(path, "1,2,3\n4,5,6\n7,8\n");
  auto s = core::open_csv(path, {});
  REQUIRE(s.ok());
  const auto e = read_until_error(*s.value());
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "ragged.csv: line 3 has 2 columns, expected 3"));
}

TEST_CASE("csv: over-long line is refused") {
  temp_dir dir;
  const std::string path = dir.file("long.csv");
  // The second line spans several 64 KiB reads: the bound must hold across buffer refills.
  std::string text = "1,2\n1,";
  text.append(200000, '5');
  text += "\n";
  write_bytes(path, text);
  core::csv_options opt;
  opt.max_line_bytes = 100000;
  auto s = core::open_csv(path, opt);
  REQUIRE(s.ok());
  const auto e = read_until_error(*s.value());
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "long.csv: line 2 is longer than max_line_bytes (100000)"));

  opt.max_line_bytes = 2;  // even the first line is too long: found while opening
  auto first = core::open_csv(path, opt);
  REQUIRE_FALSE(first.ok());
  CHECK(first.error().code == core::errc::bad_format);
  CHECK(contains(first.error().message, "long.csv: line 1 is longer"));
}

TEST_CASE("csv: NaN and infinite cells are refused") {
  temp_dir dir;
  for (const std::string cell : {"nan", "NaN", "inf", "-infinity", "1e999", "1e39"}) {
    CAPTURE(cell);
    const std::string path = dir.file("nan.csv");
    write_bytes(path, "0,1,2\n1,2," + cell + "\n");
    auto s = core::open_csv(path, {});
    REQUIRE(s.ok());
    const auto e = read_until_error(*s.value());
    CHECK(e.code == core::errc::not_finite);
    CHECK(contains(e.message, "nan.csv: line 2, column 3: '" + cell + "'"));
  }
  // Too small for a float is not an error: it is 0.
  const std::string tiny = dir.file("tiny.csv");
  write_bytes(tiny, "0,1e-400\n");
  CHECK(read_all(*core::open_csv(tiny, {}).value(), 1).x == std::vector<float>{0.0f});
}

TEST_CASE("csv: empty file is refused") {
  temp_dir dir;
  const std::string empty = dir.file("empty.csv");
  write_bytes(empty, "");
  auto e = core::open_csv(empty, {});
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().code == core::errc::bad_format);
  CHECK(contains(e.error().message, "empty.csv: no data lines"));

  const std::string header_only = dir.file("header-only.csv");
  write_bytes(header_only, "label,a\n\n");
  core::csv_options opt;
  opt.header = true;
  auto h = core::open_csv(header_only, opt);
  REQUIRE_FALSE(h.ok());
  CHECK(h.error().code == core::errc::bad_format);
  CHECK(contains(h.error().message, "header-only.csv: no data lines after the header"));
}

TEST_CASE("csv: a label column past the last column is refused") {
  temp_dir dir;
  const std::string path = dir.file("narrow.csv");
  write_bytes(path, "1,2\n");
  core::csv_options opt;
  opt.label_column = 2;
  auto r = core::open_csv(path, opt);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::errc::invalid_argument);
  CHECK(contains(r.error().message, "narrow.csv"));

  const std::string single = dir.file("single.csv");
  write_bytes(single, "1\n2\n");
  auto one = core::open_csv(single, {});
  REQUIRE_FALSE(one.ok());
  CHECK(one.error().code == core::errc::bad_format);
  CHECK(contains(one.error().message, "single.csv: line 1 has 1 column"));
}

TEST_CASE("csv: missing file is an io error") {
  temp_dir dir;
  auto r = core::open_csv(dir.file("missing.csv"), {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::errc::io);
  CHECK(contains(r.error().message, "missing.csv: cannot open: No such file"));
}

// ---- statistics, memory tables, load_all ---------------------------------------------------------

TEST_CASE("compute_stats: hand-computed mean and standard deviation") {
  // Feature 0: 1, 3, 5 -> mean 3, population variance (4 + 0 + 4) / 3. Feature 1 is constant: std 1.
  vector_stream s(2, {1, 10, 3, 10, 5, 10}, {0, 1, 2});
  auto stats = core::compute_stats(s);
  REQUIRE(stats.ok());
  CHECK(stats.value().mean[0] == doctest::Approx(3.0));
  CHECK(stats.value().mean[1] == doctest::Approx(10.0));
  CHECK(stats.value().stddev[0] == doctest::Approx(std::sqrt(8.0 / 3.0)));
  CHECK(stats.value().stddev[1] == 1.0f);
  // The stream was rewound.
  std::vector<float> x(2);
  std::vector<float> y(1);
  REQUIRE(s.read(x, y).value() == 1);
  CHECK(x == std::vector<float>{1, 10});

  vector_stream empty(2, {}, {});
  auto none = core::compute_stats(empty);
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().code == core::errc::invalid_argument);
  CHECK(contains(none.error().message, "vector_stream"));
}

TEST_CASE("memory_table: gather, subset and an index out of range") {
  core::memory_table t(2, {0, 1, 10, 11, 20, 21}, {5, 6, 7}, "three rows");
  CHECK(t.size() == 3);
  CHECK(t.feature_count() == 2);
  std::vector<float> x(4);
  std::vector<float> y(2);
  REQUIRE(t.gather(std::vector<std::uint32_t>{2, 0}, x, y).ok());
  CHECK(x == std::vector<float>{20, 21, 0, 1});
  CHECK(y == std::vector<float>{7, 5});

  const auto sub = t.subset(std::vector<std::uint32_t>{1, 1, 2}, "sub");
  CHECK(sub.describe() == "sub");
  CHECK(std::vector<float>(sub.features().begin(), sub.features().end()) == std::vector<float>{10, 11, 10, 11, 20, 21});
  CHECK(std::vector<float>(sub.targets().begin(), sub.targets().end()) == std::vector<float>{6, 6, 7});

  auto r = t.gather(std::vector<std::uint32_t>{3}, x, y);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::errc::invalid_argument);
  CHECK(contains(r.error().message, "three rows: index 3 is out of range (size 3)"));
}

TEST_CASE("load_all: reads a whole stream and refuses more than max_examples") {
  temp_dir dir;
  const auto files = write_sample_idx(dir);
  auto s = core::open_idx(files.images, files.labels, {});
  REQUIRE(s.ok());
  std::vector<float> x(6);
  std::vector<float> y(1);
  REQUIRE(s.value()->read(x, y).value() == 1);  // load_all still takes the whole stream
  auto all = core::load_all(*s.value(), 5);
  REQUIRE(all.ok());
  CHECK(all.value().size() == 5);
  CHECK(all.value().feature_count() == 6);
  CHECK(std::vector<float>(all.value().targets().begin(), all.value().targets().end()) ==
        std::vector<float>{0, 1, 2, 3, 4});

  auto over = core::load_all(*s.value(), 4);  // refused from the header's count
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().code == core::errc::over_budget);
  CHECK(contains(over.error().message, "images.idx"));

  // CSV has no count up front: the bound is found while reading.
  const std::string path = dir.file("rows.csv");
  write_bytes(path, "0,1\n1,2\n2,3\n");
  auto c = core::open_csv(path, {});
  REQUIRE(c.ok());
  auto csv_over = core::load_all(*c.value(), 2);
  REQUIRE_FALSE(csv_over.ok());
  CHECK(csv_over.error().code == core::errc::over_budget);
  CHECK(contains(csv_over.error().message, "rows.csv: more than 2 examples"));
  auto csv_all = core::load_all(*c.value(), 3);
  REQUIRE(csv_all.ok());
  CHECK(csv_all.value().size() == 3);
}
