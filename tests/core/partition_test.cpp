// Dealing a dataset out to devices (partition.cpp): IID shards and Dirichlet label skew each cover every
// example exactly once, are fixed by the seed, and refuse what they cannot do with a reason.
#include "tessera/core/data/partition.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "test_files.hpp"

namespace core = tessera::core;
using namespace tessera::testing;

namespace {

// Every index in [0, n) exactly once over all shards, and each shard sorted.
void check_covers_once(const core::shard_list& shards, std::size_t n) {
  std::vector<int> seen(n, 0);
  for (const auto& s : shards) {
    CHECK(std::is_sorted(s.begin(), s.end()));
    for (const std::uint32_t i : s) {
      REQUIRE(i < n);
      ++seen[i];
    }
  }
  CHECK(std::count(seen.begin(), seen.end(), 1) == static_cast<std::ptrdiff_t>(n));
}

// `per_class` examples of each of `classes` classes, interleaved: label i % classes.
std::vector<float> round_robin_labels(std::size_t per_class, std::int64_t classes) {
  std::vector<float> labels(per_class * static_cast<std::size_t>(classes));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<float>(i % static_cast<std::size_t>(classes));
  return labels;
}

// The share of a shard's examples that belong to its most common class.
double top_class_share(const std::vector<std::uint32_t>& shard, const std::vector<float>& labels, std::int64_t classes) {
  std::vector<std::size_t> count(static_cast<std::size_t>(classes), 0);
  for (const std::uint32_t i : shard) ++count[static_cast<std::size_t>(labels[i])];
  return static_cast<double>(*std::max_element(count.begin(), count.end())) / static_cast<double>(shard.size());
}

}  // namespace

TEST_CASE("shard_iid: every example once, sizes within one of each other, fixed by the seed") {
  for (const std::int64_t n : {0, 1, 7, 100, 1001}) {
    for (const std::size_t devices : {1u, 3u, 8u}) {
      CAPTURE(n);
      CAPTURE(devices);
      const auto shards = core::shard_iid(n, devices, 5);
      REQUIRE(shards.size() == devices);
      check_covers_once(shards, static_cast<std::size_t>(n));
      const auto [lo, hi] = std::minmax_element(shards.begin(), shards.end(),
                                                [](const auto& a, const auto& b) { return a.size() < b.size(); });
      CHECK(hi->size() - lo->size() <= 1);
      CHECK(core::shard_iid(n, devices, 5) == shards);
    }
  }
  // Shuffled, not dealt in order: shard 0 of 100 examples over 4 devices is not 0, 4, 8, ...
  const auto a = core::shard_iid(100, 4, 1);
  std::vector<std::uint32_t> in_order(25);
  for (std::uint32_t i = 0; i < 25; ++i) in_order[i] = 4 * i;
  CHECK(a[0] != in_order);
  CHECK(core::shard_iid(100, 4, 2) != a);
}

TEST_CASE("shard_dirichlet: every example once, each shard at least min_examples, fixed by the seed") {
  const std::int64_t classes = 10;
  const auto labels = round_robin_labels(200, classes);
  for (const double alpha : {0.1, 0.5, 5.0}) {
    CAPTURE(alpha);
    const auto shards = core::shard_dirichlet(labels, classes, 8, alpha, 3, 40);
    REQUIRE(shards.ok());
    REQUIRE(shards.value().size() == 8);
    check_covers_once(shards.value(), labels.size());
    for (const auto& s : shards.value()) CHECK(s.size() >= 40);
    CHECK(core::shard_dirichlet(labels, classes, 8, alpha, 3, 40).value() == shards.value());
    CHECK(core::shard_dirichlet(labels, classes, 8, alpha, 4, 40).value() != shards.value());
  }
}

TEST_CASE("shard_dirichlet: a small alpha skews the labels of each shard, a large one hardly does") {
  const std::int64_t classes = 10;
  const auto labels = round_robin_labels(500, classes);
  const auto mean_top_share = [&](double alpha) {
    const auto shards = core::shard_dirichlet(labels, classes, 10, alpha, 7, 1);
    REQUIRE(shards.ok());
    double total = 0;
    for (const auto& s : shards.value()) total += top_class_share(s, labels, classes);
    return total / 10.0;
  };
  // Equal classes give a top share of 0.1 plus noise; Dir(0.05) puts most of a shard in one class.
  CHECK(mean_top_share(1000.0) < 0.2);
  CHECK(mean_top_share(0.05) > 0.6);
}

TEST_CASE("shard_dirichlet: refuses impossible requests and labels that are not classes") {
  const auto labels = round_robin_labels(10, 2);
  struct refusal {
    core::result<core::shard_list> got;
    core::errc code;
    std::string says;
  };
  std::vector<float> fractional = labels;
  fractional[3] = 0.5f;
  std::vector<float> negative = labels;
  negative[4] = -1.0f;
  const std::vector<refusal> cases = {
      {core::shard_dirichlet(labels, 2, 0, 0.5, 1), core::errc::invalid_argument, "needs devices > 0"},
      {core::shard_dirichlet(labels, 0, 2, 0.5, 1), core::errc::invalid_argument, "classes > 0"},
      {core::shard_dirichlet(labels, 2, 2, 0.0, 1), core::errc::invalid_argument, "alpha > 0"},
      {core::shard_dirichlet(labels, 1, 2, 0.5, 1, 0), core::errc::bad_format,
       "example 1 has label 1.000000, not a class in [0, 1)"},
      {core::shard_dirichlet(fractional, 2, 2, 0.5, 1, 0), core::errc::bad_format, "example 3 has label 0.500000"},
      {core::shard_dirichlet(negative, 2, 2, 0.5, 1, 0), core::errc::bad_format, "example 4 has label -1.000000"},
      {core::shard_dirichlet(labels, 2, 4, 0.5, 1, 6), core::errc::invalid_argument,
       "no draw in 100 gave every device at least 6 examples"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.says);
    REQUIRE_FALSE(c.got.ok());
    CHECK(c.got.error().code == c.code);
    CHECK(contains(c.got.error().message, c.says));
  }
}
