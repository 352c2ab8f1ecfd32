// The bounded shuffle buffer over a stream: every example once per epoch, a seeded order that is really
// shuffled, capacities above the data size, and the errors of an empty or broken stream.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "tessera/core/data/dataset.hpp"
#include "tessera/core/train/train.hpp"
#include "test_files.hpp"

namespace core = tessera::core;

using namespace tessera::testing;

namespace {

// A CSV of n examples: label i, features 2·i and -i (so a copied example can be checked whole).
std::string write_examples(const temp_dir& dir, int n) {
  std::string text;
  for (int i = 0; i < n; ++i) text += std::to_string(i) + "," + std::to_string(2 * i) + "," + std::to_string(-i) + "\n";
  const std::string path = dir.file("examples-" + std::to_string(n) + ".csv");
  write_bytes(path, text);
  return path;
}

std::unique_ptr<core::example_stream> open(const std::string& path) {
  auto s = core::open_csv(path, {});
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message));
  return std::move(s).value();
}

// The targets of the next `total` examples, drawn in batches whose sizes cycle through `batches`.
std::vector<float> draw(core::batch_source& source, std::size_t total, const std::vector<std::size_t>& batches) {
  const auto f = static_cast<std::size_t>(source.feature_count());
  std::vector<float> out;
  std::size_t b = 0;
  while (out.size() < total) {
    const std::size_t n = std::min(batches[b++ % batches.size()], total - out.size());
    std::vector<float> x(n * f);
    std::vector<float> y(n);
    auto r = source.next(x, y);
    REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
    for (std::size_t k = 0; k < n; ++k) {
      CHECK(x[k * f] == 2 * y[k]);
      CHECK(x[k * f + 1] == -y[k]);
      out.push_back(y[k]);
    }
  }
  return out;
}

std::vector<float> iota_floats(int n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

// Each consecutive block of n targets (one epoch) holds every example 0..n-1 exactly once.
void check_epochs(const std::vector<float>& targets, int n) {
  const auto per_epoch = static_cast<std::size_t>(n);
  REQUIRE(targets.size() % per_epoch == 0);
  for (std::size_t e = 0; e < targets.size() / per_epoch; ++e) {
    CAPTURE(e);
    std::vector<float> epoch(targets.begin() + static_cast<std::ptrdiff_t>(e * per_epoch),
                             targets.begin() + static_cast<std::ptrdiff_t>((e + 1) * per_epoch));
    std::sort(epoch.begin(), epoch.end());
    CHECK(epoch == iota_floats(n));
  }
}

}  // namespace

TEST_CASE("shuffled_stream_batches: each example exactly once per epoch over several epochs") {
  temp_dir dir;
  auto stream = open(write_examples(dir, 50));
  core::shuffled_stream_batches source(*stream, 7, 42);
  CHECK(source.feature_count() == 2);
  CHECK(contains(source.describe(), "examples-50.csv"));
  // Batch sizes 9, 13 and 4 do not divide 50: batches straddle the epoch boundaries.
  const auto targets = draw(source, 5 * 50, {9, 13, 4});
  check_epochs(targets, 50);
}

TEST_CASE("shuffled_stream_batches: the same seed gives the same order, another seed another order") {
  temp_dir dir;
  const std::string path = write_examples(dir, 50);
  auto s1 = open(path);
  auto s2 = open(path);
  auto s3 = open(path);
  core::shuffled_stream_batches a(*s1, 7, 1234);
  core::shuffled_stream_batches b(*s2, 7, 1234);
  core::shuffled_stream_batches c(*s3, 7, 1235);
  const auto ta = draw(a, 150, {8});
  const auto tb = draw(b, 150, {5, 11});  // the batch sizes do not change the order
  const auto tc = draw(c, 150, {8});
  CHECK(ta == tb);
  CHECK(ta != tc);
  check_epochs(tc, 50);
}

TEST_CASE("shuffled_stream_batches: the order is shuffled, not the file order") {
  temp_dir dir;
  auto stream = open(write_examples(dir, 50));
  core::shuffled_stream_batches source(*stream, 7, 7);
  const auto targets = draw(source, 100, {10});
  const std::vector<float> first(targets.begin(), targets.begin() + 50);
  const std::vector<float> second(targets.begin() + 50, targets.end());
  CHECK(first != iota_floats(50));
  CHECK(first != second);  // each epoch is shuffled afresh
  // Not merely a few swaps: most examples leave their file position.
  int moved = 0;
  for (std::size_t i = 0; i < first.size(); ++i) moved += first[i] != static_cast<float>(i) ? 1 : 0;
  CHECK(moved > 25);
}

TEST_CASE("shuffled_stream_batches: a capacity larger than the data holds the whole dataset") {
  temp_dir dir;
  auto stream = open(write_examples(dir, 10));
  core::shuffled_stream_batches source(*stream, 100, 3);
  CHECK(source.buffer_bytes() == 100 * (2 + 1) * sizeof(float));
  const auto targets = draw(source, 4 * 10, {3});
  check_epochs(targets, 10);
  CHECK(std::vector<float>(targets.begin(), targets.begin() + 10) != iota_floats(10));

  // Capacity 1 is no shuffle at all, but still every example once per epoch.
  auto one_stream = open(write_examples(dir, 10));
  core::shuffled_stream_batches one(*one_stream, 1, 3);
  CHECK(one.buffer_bytes() == 3 * sizeof(float));
  const auto in_order = draw(one, 20, {6});
  check_epochs(in_order, 10);
  CHECK(std::vector<float>(in_order.begin(), in_order.begin() + 10) == iota_floats(10));
}

TEST_CASE("shuffled_stream_batches: an empty stream is an error, not an endless loop") {
  temp_dir dir;
  const std::string images = dir.file("empty-images.idx");
  const std::string labels = dir.file("empty-labels.idx");
  REQUIRE(core::write_idx_images(images, 2, 2, std::vector<std::uint8_t>{}).ok());
  REQUIRE(core::write_idx_labels(labels, std::vector<std::uint8_t>{}).ok());
  auto stream = core::open_idx(images, labels, {});
  REQUIRE_MESSAGE(stream.ok(), (stream.ok() ? "" : stream.error().message));
  core::shuffled_stream_batches source(*stream.value(), 4, 1);
  std::vector<float> x(2 * 4);
  std::vector<float> y(2);
  auto r = source.next(x, y);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::errc::bad_format);
  CHECK(contains(r.error().message, "empty-images.idx"));
  CHECK(contains(r.error().message, "no examples"));
}

TEST_CASE("shuffled_stream_batches: errors of the stream propagate") {
  temp_dir dir;
  std::string text;
  for (int i = 0; i < 30; ++i) text += std::to_string(i) + "," + std::to_string(2 * i) + "," + std::to_string(-i) + "\n";
  text += "30,60,oops\n";
  const std::string path = dir.file("broken.csv");
  write_bytes(path, text);
  auto stream = open(path);
  core::shuffled_stream_batches source(*stream, 7, 5);
  std::vector<float> x(2 * 8);
  std::vector<float> y(8);
  core::result<void> r;
  for (int batch = 0; batch < 10 && r.ok(); ++batch) r = source.next(x, y);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::errc::bad_format);
  CHECK(contains(r.error().message, "broken.csv: line 31, column 3"));
}
