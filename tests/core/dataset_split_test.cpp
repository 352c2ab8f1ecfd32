// Validation splits without copies (dataset_split.cpp): the listed rows of a table or a stream, or all
// the others; and which rows a device holds out (core::held_out_rows).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "tessera/core/data/dataset.hpp"
#include "tessera/core/train/train.hpp"
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

// The rows below n whose index is a multiple of `every`, as a shared list.
std::shared_ptr<const std::vector<std::uint32_t>> multiples(std::int64_t n, std::int64_t every) {
  auto rows = std::make_shared<std::vector<std::uint32_t>>();
  for (std::int64_t i = 0; i < n; i += every) rows->push_back(static_cast<std::uint32_t>(i));
  return rows;
}

// The split of a CSV file: the records whose index is a multiple of `every` (validation) or the others.
std::unique_ptr<core::example_stream> split_csv(const std::string& csv, std::int64_t every, bool validation, std::int64_t n = 1000) {
  auto base = core::open_csv(csv, {});
  REQUIRE(base.ok());
  return core::make_split_stream(std::move(base).value(), multiples(n, every), validation);
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

// ---- listed rows of a table, and the others -------------------------------------------------------

TEST_CASE("subset_table: the listed rows, and all the others in order, mapped without copies") {
  auto base = ten_rows();
  const auto rows = std::make_shared<const std::vector<std::uint32_t>>(std::vector<std::uint32_t>{1, 4, 5});
  const auto listed = core::make_subset_table(base, rows, true);
  const auto others = core::make_subset_table(base, rows, false);
  CHECK(listed->size() == 3);
  CHECK(others->size() == 7);
  CHECK(listed->describe() == "ten rows (validation split, 3 examples)");
  CHECK(others->describe() == "ten rows (training split, 7 examples)");
  CHECK(read_table(*listed).y == std::vector<float>{101, 104, 105});
  CHECK(read_table(*others).y == std::vector<float>{100, 102, 103, 106, 107, 108, 109});
  const std::vector<std::uint32_t> indices = {6, 0, 2, 2};
  std::vector<float> x(8);
  std::vector<float> y(4);
  REQUIRE(others->gather(indices, x, y).ok());
  CHECK(y == std::vector<float>{109, 100, 103, 103});
  CHECK(x == std::vector<float>{9, -9, 0, 0, 3, -3, 3, -3});

  // More indices than one internal chunk.
  std::vector<std::uint32_t> many(600);
  for (std::size_t k = 0; k < many.size(); ++k) many[k] = static_cast<std::uint32_t>(k % 7);
  std::vector<float> mx(many.size() * 2);
  std::vector<float> my(many.size());
  REQUIRE(others->gather(many, mx, my).ok());
  const float expect[] = {100, 102, 103, 106, 107, 108, 109};
  for (std::size_t k = 0; k < many.size(); ++k) CHECK(my[k] == expect[k % 7]);

  // Nothing listed: the complement is the whole table; everything listed: it is empty.
  const auto none = std::make_shared<const std::vector<std::uint32_t>>();
  CHECK(read_table(*core::make_subset_table(base, none, false)).y.size() == 10);
  auto all = std::make_shared<std::vector<std::uint32_t>>(10);
  std::iota(all->begin(), all->end(), 0u);
  CHECK(core::make_subset_table(base, all, false)->size() == 0);
}

TEST_CASE("subset_table: an index past the view is refused") {
  auto base = ten_rows();
  const auto sorted = std::make_shared<const std::vector<std::uint32_t>>(std::vector<std::uint32_t>{0, 3, 9});
  const auto others = core::make_subset_table(base, sorted, false);
  // Row 7 exists in the base, not in the view of 7 rows.
  check_index_refused(*others, {1, 7}, "ten rows (training split, 7 examples): index 7 is out of range (size 7)");
}

TEST_CASE("subset_table: over a .npy table") {
  temp_dir dir;
  const std::string features = dir.file("x.npy");
  const std::string labels = dir.file("y.npy");
  std::vector<float> x(5 * 3);  // five examples of three features
  std::iota(x.begin(), x.end(), -4.0f);
  REQUIRE(core::write_npy_features(features, 3, x).ok());
  REQUIRE(core::write_npy_labels(labels, std::vector<std::int32_t>{3, 1, 4, 1, 5}).ok());
  auto t = core::open_npy(features, labels, {});
  REQUIRE(t.ok());
  const auto rows = std::make_shared<const std::vector<std::uint32_t>>(std::vector<std::uint32_t>{0, 4});
  const auto others = core::make_subset_table(*t.value(), rows, false);
  const auto all = read_table(*others);
  CHECK(all.y == std::vector<float>{1, 4, 1});
  CHECK(all.x == std::vector<float>(x.begin() + 3, x.begin() + 12));
  CHECK(contains(others->describe(), "x.npy"));
}

TEST_CASE("held_out_rows: the fraction's count, sorted and distinct, keyed by the seed, the same every time") {
  const auto a = core::held_out_rows(1000, 0.1, 7);
  CHECK(a.size() == 100);
  CHECK(std::is_sorted(a.begin(), a.end()));
  CHECK(std::adjacent_find(a.begin(), a.end()) == a.end());
  CHECK(a.back() < 1000);
  CHECK(core::held_out_rows(1000, 0.1, 7) == a);
  CHECK(core::held_out_rows(1000, 0.1, 8) != a);
  // Spread over the whole range, not a block at one end.
  CHECK(a.front() < 100);
  CHECK(a.back() > 900);
  CHECK(core::held_out_rows(1000, 0.0, 7).empty());
  CHECK(core::held_out_rows(9, 0.1, 7).empty());  // ⌊0.9⌋ = 0
  CHECK(core::held_out_rows(10, 0.5, 1).size() == 5);
}

// ---- split streams --------------------------------------------------------------------------------

TEST_CASE("split_stream: every 3rd of 10 records for validation, the other 6 for training, after rewind too") {
  temp_dir dir;
  const std::string csv = write_counting_csv(dir, 10);
  for (const bool validation : {true, false}) {
    CAPTURE(validation);
    auto split = split_csv(csv, 3, validation, 10);
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
    auto split = core::make_split_stream(std::move(base).value(), multiples(10, every), validation);
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
  auto split = split_csv(csv, 2, false, 4);
  std::vector<float> x(4);
  std::vector<float> y(4);
  const auto e = error_of(split->read(x, y));
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "bad.csv: line 3, column 2"));
}
