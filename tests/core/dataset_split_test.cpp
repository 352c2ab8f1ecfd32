// Validation splits without copies (dataset_split.cpp): a row range of a table, and every n-th record of
// a stream, for validation or for training.
#include <doctest/doctest.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "tessera/core/dataset.hpp"
#include "test_files.hpp"

namespace core = tessera::core;

using namespace tessera::testing;

namespace {

// Ten examples of two features: example i is (i, -i) with target 100 + i.
core::memory_table ten_rows() {
  std::vector<float> x;
  std::vector<float> y;
  for (int i = 0; i < 10; ++i) {
    x.push_back(static_cast<float>(i));
    x.push_back(static_cast<float>(-i));
    y.push_back(static_cast<float>(100 + i));
  }
  return core::memory_table(2, std::move(x), std::move(y), "ten rows");
}

// A CSV of n records "label,feature" with label i and feature 10·i.
std::string write_counting_csv(const temp_dir& dir, int n) {
  std::string text;
  for (int i = 0; i < n; ++i) text += std::to_string(i) + "," + std::to_string(10 * i) + "\n";
  const std::string path = dir.file("count-" + std::to_string(n) + ".csv");
  write_bytes(path, text);
  return path;
}

// The split of a CSV file: the records whose index is a multiple of `every` (validation) or the others.
std::unique_ptr<core::example_stream> split_csv(const std::string& csv, std::int64_t every, bool validation) {
  auto base = core::open_csv(csv, {});
  REQUIRE(base.ok());
  return core::make_split_stream(std::move(base).value(), every, validation);
}

// The targets of a stream read to the end with reads of `batch`; each feature must be 10 × its target.
std::vector<float> read_targets(core::example_stream& s, std::size_t batch) {
  std::vector<float> x(batch);
  std::vector<float> y(batch);
  std::vector<float> out;
  while (true) {
    auto n = s.read(x, y);
    REQUIRE_MESSAGE(n.ok(), (n.ok() ? "" : n.error().message));
    if (n.value() == 0) break;
    REQUIRE(n.value() <= batch);
    for (std::size_t k = 0; k < n.value(); ++k) {
      CHECK(x[k] == 10 * y[k]);
      out.push_back(y[k]);
    }
  }
  return out;
}

}  // namespace

// ---- row ranges of a table ------------------------------------------------------------------------

TEST_CASE("range_table: gather maps indices by the start of the range") {
  auto base = ten_rows();
  const auto range = core::make_range_table(base, 3, 8);
  CHECK(range->size() == 5);
  CHECK(range->feature_count() == 2);
  CHECK(range->describe() == "ten rows rows [3, 8)");
  const std::vector<std::uint32_t> indices = {0, 4, 2, 2};
  std::vector<float> x(8);
  std::vector<float> y(4);
  REQUIRE(range->gather(indices, x, y).ok());
  CHECK(y == std::vector<float>{103, 107, 105, 105});
  CHECK(x == std::vector<float>{3, -3, 7, -7, 5, -5, 5, -5});

  // More indices than one internal chunk.
  std::vector<std::uint32_t> many(600);
  for (std::size_t k = 0; k < many.size(); ++k) many[k] = static_cast<std::uint32_t>(k % 5);
  std::vector<float> mx(many.size() * 2);
  std::vector<float> my(many.size());
  REQUIRE(range->gather(many, mx, my).ok());
  for (std::size_t k = 0; k < many.size(); ++k) CHECK(my[k] == static_cast<float>(103 + k % 5));

  const auto empty = core::make_range_table(base, 10, 10);
  CHECK(empty->size() == 0);
}

TEST_CASE("range_table: an index past the range is refused") {
  auto base = ten_rows();
  const auto range = core::make_range_table(base, 3, 8);
  // Row 3 + 5 = 8 exists in the base, not in the range.
  check_index_refused(*range, {1, 5}, "ten rows rows [3, 8): index 5 is out of range (size 5)");
}

TEST_CASE("range_table: over a .npy table") {
  temp_dir dir;
  const std::string features = dir.file("x.npy");
  const std::string labels = dir.file("y.npy");
  std::vector<float> x(5 * 3);  // five examples of three features
  std::iota(x.begin(), x.end(), -4.0f);
  REQUIRE(core::write_npy_features(features, 3, x).ok());
  REQUIRE(core::write_npy_labels(labels, std::vector<std::int32_t>{3, 1, 4, 1, 5}).ok());
  auto t = core::open_npy(features, labels, {});
  REQUIRE(t.ok());
  const auto range = core::make_range_table(*t.value(), 1, 4);
  const auto all = read_table(*range);
  CHECK(all.y == std::vector<float>{1, 4, 1});
  CHECK(all.x == std::vector<float>(x.begin() + 3, x.begin() + 12));
  CHECK(contains(range->describe(), "x.npy"));
}

// ---- split streams --------------------------------------------------------------------------------

TEST_CASE("split_stream: every 3rd of 10 records for validation, the other 6 for training, after rewind too") {
  temp_dir dir;
  const std::string csv = write_counting_csv(dir, 10);
  for (const bool validation : {true, false}) {
    CAPTURE(validation);
    auto split = split_csv(csv, 3, validation);
    CHECK(split->feature_count() == 1);
    CHECK(split->size_hint() == -1);  // CSV knows its size only at the end
    CHECK(contains(split->describe(), "count-10.csv"));
    CHECK(contains(split->describe(), validation ? "validation" : "training"));
    const std::vector<float> expected =
        validation ? std::vector<float>{0, 3, 6, 9} : std::vector<float>{1, 2, 4, 5, 7, 8};
    for (const std::size_t batch : std::initializer_list<std::size_t>{1, 2, 4, 100}) {
      CAPTURE(batch);
      CHECK(read_targets(*split, batch) == expected);
      REQUIRE(split->rewind().ok());
    }
    // A rewind in the middle starts again from record 0.
    std::vector<float> x(1);
    std::vector<float> y(1);
    REQUIRE(split->read(x, y).value() == 1);
    REQUIRE(split->rewind().ok());
    CHECK(read_targets(*split, 3) == expected);
  }
}

TEST_CASE("split_stream: size_hint from a base that knows its size") {
  temp_dir dir;
  const std::string images = dir.file("images.idx");
  const std::string labels = dir.file("labels.idx");
  std::vector<std::uint8_t> pixels(10);
  std::iota(pixels.begin(), pixels.end(), std::uint8_t{0});
  REQUIRE(core::write_idx_images(images, 1, 1, pixels).ok());
  REQUIRE(core::write_idx_labels(labels, pixels).ok());
  for (const auto& [every, validation, expected] :
       {std::tuple{3, true, 4}, std::tuple{3, false, 6}, std::tuple{2, true, 5}, std::tuple{10, true, 1},
        std::tuple{11, false, 9}}) {
    auto base = core::open_idx(images, labels, {core::normalization::none, {}});
    REQUIRE(base.ok());
    auto split = core::make_split_stream(std::move(base).value(), every, validation);
    CHECK(split->size_hint() == expected);
    std::vector<float> x(16);
    std::vector<float> y(16);
    auto n = split->read(x, y);
    REQUIRE(n.ok());
    CHECK(n.value() == static_cast<std::size_t>(expected));
  }
}

TEST_CASE("split_stream: reads fill the caller's span across the internal buffer") {
  temp_dir dir;
  const std::string csv = write_counting_csv(dir, 1000);
  for (const bool validation : {true, false}) {
    CAPTURE(validation);
    auto split = split_csv(csv, 2, validation);
    std::vector<float> x(300);
    std::vector<float> y(300);
    std::vector<float> all;
    for (const std::size_t expected : std::initializer_list<std::size_t>{300, 200, 0}) {
      auto n = split->read(x, y);
      REQUIRE(n.ok());
      CHECK(n.value() == expected);
      all.insert(all.end(), y.begin(), y.begin() + static_cast<std::ptrdiff_t>(n.value()));
    }
    REQUIRE(all.size() == 500);
    for (std::size_t k = 0; k < all.size(); ++k) CHECK(all[k] == static_cast<float>(2 * k + (validation ? 0 : 1)));
  }
}

TEST_CASE("split_stream: errors of the base propagate") {
  temp_dir dir;
  const std::string csv = dir.file("bad.csv");
  write_bytes(csv, "0,0\n1,10\n2,abc\n3,30\n");
  auto split = split_csv(csv, 2, false);
  std::vector<float> x(4);
  std::vector<float> y(4);
  const auto e = error_of(split->read(x, y));
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "bad.csv: line 3, column 2"));
}
