// Format-independent parts of the dataset module (dataset.cpp): statistics, in-memory tables, a table
// read as a stream, and reading a whole stream into memory within a bound.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/data/dataset.hpp"
#include "test_files.hpp"

namespace core = tessera::core;

using namespace tessera::testing;

namespace {

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

// A table whose example i has features (i, -i) and target i. It counts its gather() calls, fails the
// one that reaches `fail_at`, and sets *destroyed when it is destroyed.
class counting_table final : public core::example_table {
 public:
  explicit counting_table(std::int64_t rows, bool* destroyed = nullptr, std::int64_t fail_at = -1)
      : rows_(rows), destroyed_(destroyed), fail_at_(fail_at) {}
  counting_table(const counting_table&) = delete;
  counting_table& operator=(const counting_table&) = delete;
  ~counting_table() override {
    if (destroyed_ != nullptr) *destroyed_ = true;
  }
  std::int64_t feature_count() const noexcept override { return 2; }
  std::int64_t size() const noexcept override { return rows_; }
  std::string describe() const override { return "counting table"; }
  core::result<void> gather(std::span<const std::uint32_t> indices, std::span<float> features,
                            std::span<float> targets) override {
    ++gathers_;
    for (std::size_t k = 0; k < indices.size(); ++k) {
      const std::int64_t i = indices[k];
      if (i >= rows_ || i == fail_at_)
        return core::make_error(core::errc::io, "counting table: cannot read " + std::to_string(i));
      features[2 * k] = static_cast<float>(i);
      features[2 * k + 1] = -static_cast<float>(i);
      targets[k] = static_cast<float>(i);
    }
    return {};
  }
  [[nodiscard]] std::size_t gathers() const noexcept { return gathers_; }

 private:
  std::int64_t rows_;
  bool* destroyed_;
  std::int64_t fail_at_;
  std::size_t gathers_ = 0;
};

// What a counting_table of `rows` examples holds, in order.
all_examples counting_examples(std::int64_t rows) {
  all_examples out;
  for (std::int64_t i = 0; i < rows; ++i) {
    out.x.push_back(static_cast<float>(i));
    out.x.push_back(-static_cast<float>(i));
    out.y.push_back(static_cast<float>(i));
  }
  return out;
}

struct idx_files {
  std::string images;
  std::string labels;
};

// Five 2x3 images labelled 0..4, as IDX files: a stream whose header states its count.
idx_files write_five_images(const temp_dir& dir) {
  idx_files f{dir.file("images.idx"), dir.file("labels.idx")};
  REQUIRE(core::write_idx_images(f.images, 2, 3, std::vector<std::uint8_t>(5 * 6, 7)).ok());
  REQUIRE(core::write_idx_labels(f.labels, std::vector<std::uint8_t>{0, 1, 2, 3, 4}).ok());
  return f;
}

std::vector<float> targets_of(const core::memory_table& t) { return {t.targets().begin(), t.targets().end()}; }

// The five images as a stream that has already handed out its first example: the loaders must start
// again from the beginning.
std::unique_ptr<core::example_stream> five_images_after_one_read(const idx_files& files) {
  auto s = core::open_idx(files.images, files.labels, {});
  REQUIRE(s.ok());
  std::vector<float> x(6);
  std::vector<float> y(1);
  REQUIRE(s.value()->read(x, y).value() == 1);
  return std::move(s).value();
}

// Three CSV rows, label first and one feature (0,1 / 1,2 / 2,3), as dir/rows.csv: a stream with no
// count up front.
std::unique_ptr<core::example_stream> three_csv_rows(const temp_dir& dir) {
  write_bytes(dir.file("rows.csv"), "0,1\n1,2\n2,3\n");
  auto c = core::open_csv(dir.file("rows.csv"), {});
  REQUIRE(c.ok());
  return std::move(c).value();
}

}  // namespace

TEST_CASE("compute_stats: hand-computed mean and standard deviation") {
  // Feature 0: 1, 3, 5 -> mean 3, population variance (4 + 0 + 4) / 3. Feature 1 is constant: std 1.
  vector_stream s(2, {1, 10, 3, 10, 5, 10}, {0, 1, 2});
  auto stats = core::compute_stats(s);
  REQUIRE(stats.ok());
  CHECK(stats.value().mean[0] == doctest::Approx(3.0));
  CHECK(stats.value().mean[1] == doctest::Approx(10.0));
  CHECK(stats.value().std[0] == doctest::Approx(std::sqrt(8.0 / 3.0)));
  CHECK(stats.value().std[1] == 1.0f);
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

  check_index_refused(t, {3}, "three rows: index 3 is out of range (size 3)");
}

TEST_CASE("load_all: reads a whole stream and refuses more than max_examples") {
  temp_dir dir;
  const auto files = write_five_images(dir);
  auto s = five_images_after_one_read(files);
  auto all = core::load_all(*s, 5);
  REQUIRE(all.ok());
  CHECK(all.value().size() == 5);
  CHECK(all.value().feature_count() == 6);
  CHECK(std::vector<float>(all.value().targets().begin(), all.value().targets().end()) ==
        std::vector<float>{0, 1, 2, 3, 4});

  auto over = core::load_all(*s, 4);  // refused from the header's count
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().code == core::errc::over_budget);
  CHECK(contains(over.error().message, "images.idx"));

  // CSV has no count up front: the bound is found while reading.
  const auto csv = three_csv_rows(dir);
  auto csv_over = core::load_all(*csv, 2);
  REQUIRE_FALSE(csv_over.ok());
  CHECK(csv_over.error().code == core::errc::over_budget);
  CHECK(contains(csv_over.error().message, "rows.csv: more than 2 examples"));
  auto csv_all = core::load_all(*csv, 3);
  REQUIRE(csv_all.ok());
  CHECK(csv_all.value().size() == 3);
}

TEST_CASE("load_first: the first examples, all of them when there are fewer, from the start of the stream") {
  temp_dir dir;
  const auto files = write_five_images(dir);
  auto s = five_images_after_one_read(files);
  auto three = core::load_first(*s, 3);  // the header says 5: cut, not refused
  REQUIRE(three.ok());
  CHECK(targets_of(three.value()) == std::vector<float>{0, 1, 2});
  CHECK(three.value().feature_count() == 6);
  CHECK(three.value().features().size() == 3 * 6);
  auto none = core::load_first(*s, 0);
  REQUIRE(none.ok());
  CHECK(none.value().size() == 0);

  // Without a count up front (CSV) the stream is cut while it is read; fewer rows than asked is not an error.
  const auto csv = three_csv_rows(dir);
  auto two = core::load_first(*csv, 2);
  REQUIRE(two.ok());
  CHECK(targets_of(two.value()) == std::vector<float>{0, 1});
  CHECK(std::vector<float>(two.value().features().begin(), two.value().features().end()) == std::vector<float>{1, 2});
  auto all = core::load_first(*csv, 10);
  REQUIRE(all.ok());
  CHECK(targets_of(all.value()) == std::vector<float>{0, 1, 2});
  CHECK(all.value().describe() == dir.file("rows.csv"));
}

TEST_CASE("load_examples: refuse_more chooses between load_all and load_first") {
  vector_stream s(1, {10, 11, 12}, {0, 1, 2});
  CHECK(core::load_examples(s, 2, /*refuse_more=*/false).value().size() == 2);
  const auto e = tessera::testing::error_of(core::load_examples(s, 2, /*refuse_more=*/true));
  CHECK(e.code == core::errc::over_budget);
  CHECK(contains(e.message, "vector_stream: more than 2 examples"));
  CHECK(core::load_examples(s, 3, /*refuse_more=*/true).value().size() == 3);
}

TEST_CASE("make_table_stream: every example in order across gather chunks, rewound, borrowed or owned") {
  constexpr std::int64_t rows = 1000;  // several of the stream's fixed index chunks
  const all_examples expected = counting_examples(rows);

  counting_table t(rows);
  auto s = core::make_table_stream(t);
  CHECK(s->feature_count() == 2);
  CHECK(s->size_hint() == rows);
  CHECK(s->describe() == "counting table");
  // Reads of 300 do not line up with the chunks; the last one is short, then the stream ends.
  const all_examples all = read_stream(*s, 300);
  CHECK(all.x == expected.x);
  CHECK(all.y == expected.y);
  CHECK(t.gathers() > 4);  // the 4 reads were split into bounded gathers

  REQUIRE(s->rewind().ok());
  std::vector<float> x(2 * 3);
  std::vector<float> y(3);
  REQUIRE(s->read(x, y).value() == 3);
  CHECK(y == std::vector<float>{0, 1, 2});
  CHECK(x == std::vector<float>{0, 0, 1, -1, 2, -2});

  // The owning form: the stream holds the only pointer to the table and destroys it with itself.
  bool destroyed = false;
  {
    auto owned = core::make_table_stream(std::make_unique<counting_table>(rows, &destroyed));
    const all_examples again = read_stream(*owned, 64);
    CHECK(again.y == expected.y);
    REQUIRE(owned->rewind().ok());
    CHECK(read_stream(*owned, 1000).x == expected.x);
    CHECK_FALSE(destroyed);
  }
  CHECK(destroyed);

  // A table's error comes through unchanged.
  counting_table failing(rows, nullptr, 700);
  auto f = core::make_table_stream(failing);
  const core::error e = read_until_error(*f);
  CHECK(e.code == core::errc::io);
  CHECK(e.message == "counting table: cannot read 700");
}
