// IDX readers and writers (dataset_idx.cpp, dataset_idx_table.cpp, idx_format.hpp): round trips, plain
// and gzip files, random access against streaming, normalization, and one named case for every way the
// reader must refuse its input.
#include <doctest/doctest.h>
#include <zlib.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/data/dataset.hpp"
#include "test_files.hpp"

namespace core = tessera::core;

using namespace tessera::testing;

namespace {

// `bytes` compressed as a gzip file would hold them.
std::string gzip_bytes(std::string_view bytes) {
  z_stream z{};
  // 15 + 16: the largest window, with a gzip header and trailer instead of zlib's.
  REQUIRE(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, static_cast<uLong>(bytes.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int done = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  REQUIRE(done == Z_STREAM_END);
  return out;
}

void write_gzip(const std::string& path, std::string_view bytes) { write_bytes(path, gzip_bytes(bytes)); }

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

// Gzip-compressed copies of both files, beside them.
idx_files write_gzip_copy(const temp_dir& dir, const idx_files& plain) {
  const idx_files gz{dir.file("images.idx.gz"), dir.file("labels.idx.gz")};
  write_gzip(gz.images, read_bytes(plain.images));
  write_gzip(gz.labels, read_bytes(plain.labels));
  return gz;
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
  const auto gz = write_gzip_copy(dir, plain);
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
  const auto gz = write_gzip_copy(dir, plain);
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

// ---- every way the readers must refuse a pair of files: one enum, one generator, one table ---------

namespace {

// A way a pair of IDX files can be wrong. bad_idx_bytes() makes each from the valid pair
// write_sample_idx() writes (images: a 16-byte header, then five 6-byte records; labels: an 8-byte
// header, then five bytes); idx_rejections() says how the readers must refuse it.
enum class bad_idx {
  wrong_magic,              // a zip file
  float_elements,           // element type 0d (f32)
  magic_cut,                // 2 bytes
  dimensions_cut,           // 6 of the 12 bytes of dimensions
  zero_dimension,           // images of 2 x 0
  image_too_large,          // 65536 x 65536 bytes per image
  too_many_labels,          // 2^32 - 1 declared
  labels_as_images,         // rank 1 where images need 2 or more
  images_as_labels,         // rank 3 where labels need 1
  count_mismatch,           // 4 labels for 5 images
  records_cut,              // records 0..2 and 2 bytes of record 3
  records_cut_gzip,         // the same, compressed
  labels_cut,               // labels 0 and 1 of 5
  data_after_records,       // one byte more
  data_after_records_gzip,  // the same, compressed
  corrupt_gzip,             // the CRC-32 of the gzip trailer altered
  gzip_for_table,           // compressed labels: the table reads at byte offsets
  missing_images,
  missing_labels,
};
constexpr std::size_t k_bad_idx_kinds = static_cast<std::size_t>(bad_idx::missing_labels) + 1;

enum class idx_part { images, labels };  // which file of the pair is the malformed one
// The readers that must refuse it: open_idx (opening and reading to the end), open_idx_table, or both.
enum class idx_readers { stream, table, both };

struct idx_rejection {
  bad_idx kind;
  std::string file;               // the malformed file's name
  idx_part part;
  idx_readers readers;
  core::errc code;
  std::vector<std::string> says;  // what the message holds besides the path
};

// The malformed file of `kind`, made from the bytes of the valid images and labels files; nullopt when
// the file must not exist.
std::optional<std::string> bad_idx_bytes(bad_idx kind, const std::string& images, const std::string& labels) {
  std::string b = images;
  using enum bad_idx;
  switch (kind) {
    case wrong_magic: return std::string("PK\x03\x04 a zip file, not IDX");
    case float_elements: b[2] = 0x0d; return b;
    case magic_cut: return images.substr(0, 2);
    case dimensions_cut: return images.substr(0, 10);
    case zero_dimension: b.replace(12, 4, be_bytes(0, 4)); return b;
    case image_too_large: b.replace(8, 8, be_bytes(65536, 4) + be_bytes(65536, 4)); return b;
    case too_many_labels: b = labels; b.replace(4, 4, be_bytes(0xffffffff, 4)); return b;
    case labels_as_images: return labels;
    case images_as_labels: return images;
    case count_mismatch: b = labels.substr(0, 8 + 4); b.replace(4, 4, be_bytes(4, 4)); return b;
    case records_cut: return images.substr(0, 16 + 3 * k_pixels + 2);
    case records_cut_gzip: return gzip_bytes(images.substr(0, 16 + 3 * k_pixels + 2));
    case labels_cut: return labels.substr(0, 8 + 2);
    case data_after_records: return images + '\0';
    case data_after_records_gzip: return gzip_bytes(images + '\0');
    case corrupt_gzip:
      b = gzip_bytes(images);
      b[b.size() - 6] = static_cast<char>(b[b.size() - 6] ^ 0xff);  // inside the trailer's CRC-32
      return b;
    case gzip_for_table: return gzip_bytes(labels);
    case missing_images:
    case missing_labels: return std::nullopt;
  }
  return std::nullopt;
}

// How the readers must refuse each kind, in the order of the enum.
const std::vector<idx_rejection>& idx_rejections() {
  using core::errc;
  using enum bad_idx;
  constexpr idx_part images = idx_part::images;
  constexpr idx_part labels = idx_part::labels;
  constexpr idx_readers stream = idx_readers::stream;
  constexpr idx_readers table = idx_readers::table;
  constexpr idx_readers both = idx_readers::both;
  static const std::vector<idx_rejection> rows = {
      {wrong_magic, "not-idx.bin", images, both, errc::bad_format,
       {"not an IDX file: it starts with 50 4b 03 04, an IDX file starts with 00 00 08 NN"}},
      {float_elements, "floats.idx", images, both, errc::unsupported, {"IDX element type 0d is not supported"}},
      {magic_cut, "two-bytes.idx", images, both, errc::truncated, {"truncated in the header (2 of the 4 magic bytes)"}},
      {dimensions_cut, "cut-header.idx", images, both, errc::truncated,
       {"truncated in the header (6 of the 12 bytes of dimensions)"}},
      {zero_dimension, "zero.idx", images, both, errc::bad_format, {"zero.idx: dimension 2 is 0"}},
      {image_too_large, "huge.idx", images, both, errc::bad_format,
       {"dimensions 5 x 65536 x 65536... give more than 16777216 bytes per example"}},
      {too_many_labels, "many.idx", labels, both, errc::bad_format,
       {"the header declares 4294967295 examples, more than the limit of 2147483648"}},
      {labels_as_images, "rank-1.idx", images, both, errc::unsupported,
       {"IDX images need at least 2 dimensions", "the header has 1"}},
      {images_as_labels, "rank-3.idx", labels, both, errc::unsupported,
       {"IDX labels need exactly 1 dimension, the header has 3"}},
      {count_mismatch, "four-labels.idx", labels, both, errc::invalid_argument,
       {"images.idx has 5 images", "four-labels.idx has 4 labels"}},
      {records_cut, "cut-images.idx", images, both, errc::truncated,
       {"cut-images.idx: truncated at record 3 of 5 (offset 34)"}},
      {records_cut_gzip, "cut-images.idx.gz", images, stream, errc::truncated,
       {"cut-images.idx.gz: truncated at record 3 of 5 (offset 34)"}},
      {labels_cut, "cut-labels.idx", labels, both, errc::truncated,
       {"cut-labels.idx: truncated at record 2 of 5 (offset 10)"}},
      {data_after_records, "longer.idx", images, both, errc::bad_format,
       {"longer.idx: data continues after the 5 records its header (5 x 2 x 3) declares"}},
      {data_after_records_gzip, "longer.idx.gz", images, stream, errc::bad_format,
       {"longer.idx.gz: data continues after the 5 records its header (5 x 2 x 3) declares"}},
      // zlib inflates ahead of what is asked, so a small file fails while its header is read; a large one
      // would fail on a later read (or, past the last record, in the end-of-data check).
      {corrupt_gzip, "corrupt.idx.gz", images, stream, errc::bad_format, {"corrupt.idx.gz: corrupt gzip data"}},
      {gzip_for_table, "labels.idx.gz", labels, table, errc::unsupported,
       {"gzip-compressed; random access needs an uncompressed IDX file"}},
      {missing_images, "missing-images.idx", images, both, errc::io, {"cannot open: No such file"}},
      {missing_labels, "missing-labels.idx", labels, both, errc::io, {"cannot open: No such file"}},
  };
  return rows;
}

// The error of opening a pair of IDX files and reading them to the end: plain files are checked against
// their headers when opened, gzip ones as they are read.
core::error stream_error(const std::string& images, const std::string& labels) {
  auto s = core::open_idx(images, labels, {});
  return s.ok() ? read_until_error(*s.value()) : std::move(s).error();
}

}  // namespace

TEST_CASE("idx: every malformed file is refused with its code, naming the file and what is wrong") {
  temp_dir dir;
  const auto valid = write_sample_idx(dir);
  const std::string images = read_bytes(valid.images);
  const std::string labels = read_bytes(valid.labels);
  REQUIRE(images.size() == 16 + k_count * k_pixels);
  for_each_rejection(
      dir, idx_rejections(), k_bad_idx_kinds, [&](bad_idx kind) { return bad_idx_bytes(kind, images, labels); },
      [&](const idx_rejection& c, const std::string& bad) {
        const std::string& image_file = c.part == idx_part::images ? bad : valid.images;
        const std::string& label_file = c.part == idx_part::labels ? bad : valid.labels;
        if (c.readers != idx_readers::table) check_refusal(stream_error(image_file, label_file), c.code, bad, c.says);
        if (c.readers != idx_readers::stream)
          check_refusal(error_of(core::open_idx_table(image_file, label_file, {})), c.code, bad, c.says);
      });
}

TEST_CASE("idx: gather index out of range names index and size") {
  temp_dir dir;
  const auto files = write_sample_idx(dir);
  auto t = core::open_idx_table(files.images, files.labels, {});
  REQUIRE(t.ok());
  check_index_refused(*t.value(), {1, 5}, files.images + " + " + files.labels + ": index 5 is out of range (size 5)");
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
