#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "test_files.hpp"
#include "tessera/core/base/rng.hpp"
#include "tessera/core/config/base64.hpp"
#include "tessera/core/data/fed_stats.hpp"
#include "tessera/core/data/stats_vector.hpp"

using namespace tessera;
using tessera::testing::error_of;

namespace {

// `n` examples of 3 features on very different scales (about 1e-3, 1 and 1e4, far from 0) and a label
// in 0..3, with a constant fourth feature.
core::memory_table table(std::int64_t n, std::uint64_t seed) {
  core::rng r(seed);
  std::vector<float> x, y;
  for (std::int64_t i = 0; i < n; ++i) {
    x.push_back(static_cast<float>(0.005 + 1e-3 * r.uniform()));
    x.push_back(static_cast<float>(3.0 + r.uniform()));
    x.push_back(static_cast<float>(2e4 + 1e4 * r.uniform()));
    x.push_back(7.0f);
    y.push_back(static_cast<float>(r.below(4)));
  }
  return core::memory_table(4, std::move(x), std::move(y), "table");
}

core::stats_sums sums_of(core::memory_table& t) {
  auto s = core::measure_sums(*core::make_table_stream(t), core::task_kind::classification, 4);
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message));
  return std::move(s).value();
}

core::stats_spread spread_of(core::memory_table& t, const core::fleet_stats& f) {
  auto s = core::measure_spread(*core::make_table_stream(t), f.mean(), f.target_mean());
  REQUIRE(s.ok());
  return std::move(s).value();
}

}  // namespace

TEST_CASE("fleet statistics: three devices' sums give the whole set's mean and deviation") {
  core::memory_table a = table(300, 1), b = table(50, 2), c = table(1000, 3);
  // The whole set, in the devices' order, measured directly in long double as the reference.
  std::vector<const core::memory_table*> parts{&a, &b, &c};
  const std::size_t f = 4;
  std::vector<long double> sum(f, 0), sq(f, 0);
  std::int64_t n = 0;
  for (const auto* p : parts) {
    for (std::int64_t i = 0; i < p->size(); ++i)
      for (std::size_t j = 0; j < f; ++j) sum[j] += p->features()[static_cast<std::size_t>(i) * f + j];
    n += p->size();
  }
  for (const auto* p : parts)
    for (std::int64_t i = 0; i < p->size(); ++i)
      for (std::size_t j = 0; j < f; ++j) {
        const long double d = p->features()[static_cast<std::size_t>(i) * f + j] - sum[j] / n;
        sq[j] += d * d;
      }

  core::fleet_stats fleet(4, core::task_kind::classification, 4);
  REQUIRE(fleet.add_sums(sums_of(a), "a").ok());
  REQUIRE(fleet.add_sums(sums_of(b), "b").ok());
  REQUIRE(fleet.add_sums(sums_of(c), "c").ok());
  CHECK(fleet.devices() == 3);
  CHECK(fleet.sums().examples == 1350);
  std::uint64_t labels = 0;
  for (auto k : fleet.sums().label_counts) labels += k;
  CHECK(labels == 1350);
  REQUIRE(fleet.add_spread(spread_of(a, fleet), 300, "a").ok());
  REQUIRE(fleet.add_spread(spread_of(b, fleet), 50, "b").ok());
  REQUIRE(fleet.add_spread(spread_of(c, fleet), 1000, "c").ok());
  const auto sd = fleet.stddev();
  for (std::size_t j = 0; j < 3; ++j) {
    CAPTURE(j);
    const double mean = static_cast<double>(sum[j] / n);
    const double dev = std::sqrt(static_cast<double>(sq[j] / n));
    CHECK(std::abs(fleet.mean()[j] - mean) <= 1e-12 * std::abs(mean));
    CHECK(std::abs(sd[j] - dev) <= 1e-9 * dev);  // centred sums: no cancellation even at 2e4 ± 3e3
  }
  CHECK(fleet.mean()[3] == 7.0);
  CHECK(sd[3] == 0.0);

  const auto norm = fleet.normalization();
  REQUIRE(norm.ok());
  CHECK(norm.value().mean[2] == static_cast<float>(fleet.mean()[2]));
  CHECK(norm.value().std[2] == static_cast<float>(sd[2]));
  CHECK(norm.value().std[3] == 1.0f);  // a constant feature passes through centred, not divided by 0
  // Applied, every feature is centred with unit deviation (the constant one at 0).
  std::vector<float> x(c.features().begin(), c.features().end());
  core::normalize_rows(x, norm.value());
  double m2 = 0;
  for (std::size_t i = 2; i < x.size(); i += f) m2 += static_cast<double>(x[i]) * x[i];
  CHECK(std::abs(std::sqrt(m2 / static_cast<double>(c.size())) - 1.0) < 0.1);
  CHECK(x[3] == 0.0f);
}

TEST_CASE("fleet statistics: a device's figures that no data could give are refused, naming it") {
  core::memory_table a = table(40, 4);
  const core::stats_sums good = sums_of(a);
  core::fleet_stats fleet(4, core::task_kind::classification, 4);

  auto counts = good;
  counts.label_counts[0] += 1;  // the histogram does not add up to the examples
  CHECK(error_of(fleet.add_sums(counts, "device rogue")).message ==
        "device rogue's statistics: its label histogram counts 41 examples, not 40");
  auto wide = good;
  wide.sum.push_back(1.0);
  CHECK(error_of(fleet.add_sums(wide, "device rogue")).message.find("5 features, the model has 4") != std::string::npos);
  auto outside = good;
  outside.sum[1] = 1e9;  // a mean far above the feature's max
  CHECK(error_of(fleet.add_sums(outside, "device rogue")).message.find("feature 1's mean lies outside") != std::string::npos);
  auto nan = good;
  nan.min[0] = std::numeric_limits<double>::quiet_NaN();
  CHECK(error_of(fleet.add_sums(nan, "device rogue")).message.find("not finite") != std::string::npos);
  auto none = good;
  none.examples = 0;
  CHECK(error_of(fleet.add_sums(none, "device rogue")).message == "device rogue's statistics: no examples");
  CHECK(fleet.devices() == 0);  // nothing of the refused figures was added

  REQUIRE(fleet.add_sums(good, "a").ok());
  auto spread = spread_of(a, fleet);
  CHECK(error_of(fleet.add_spread(spread, 39, "a")).message.find("40 examples, but 39 in pass 1") != std::string::npos);
  spread.sq_dev[0] = -1;
  CHECK(error_of(fleet.add_spread(spread, 40, "a")).message.find("negative") != std::string::npos);
  CHECK_FALSE(fleet.normalization().ok());  // pass 2 never completed
}

TEST_CASE("fleet statistics: a device measures only data that suits the model") {
  core::memory_table a = table(20, 5);
  const auto e = error_of(core::measure_sums(*core::make_table_stream(a), core::task_kind::classification, 3));
  CHECK(e.message.find("is not a class index below 3") != std::string::npos);
  // Regression: targets are summed, no histogram.
  auto r = core::measure_sums(*core::make_table_stream(a), core::task_kind::regression, 1);
  REQUIRE(r.ok());
  CHECK(r.value().label_counts.empty());
  double targets = 0;
  for (float v : a.targets()) targets += v;
  CHECK(r.value().target_sum == targets);
}

TEST_CASE("base64: values survive exactly; text of the wrong length or alphabet is refused") {
  const std::vector<double> d{0.0, -0.0, 1.5, 1e-300, -3.25e17, std::numeric_limits<double>::denorm_min()};
  const auto back = core::decode_doubles(core::encode_doubles(d), d.size(), "mean");
  REQUIRE(back.ok());
  for (std::size_t i = 0; i < d.size(); ++i) CHECK(std::signbit(back.value()[i]) == std::signbit(d[i]));
  CHECK(back.value() == d);
  const std::vector<float> f{1.0f, 0.1f, -7.0f};
  CHECK(core::decode_floats(core::encode_floats(f), 3, "std").value() == f);
  CHECK(core::base64_encode(std::as_bytes(std::span("foob", 4))) == "Zm9vYg==");
  CHECK(error_of(core::decode_floats(core::encode_floats(f), 4, "std")).message ==
        "std: 16 base64 characters, expected 24 for 16 bytes");
  std::string bad = core::encode_floats(f);
  bad[3] = '*';
  CHECK(error_of(core::decode_floats(bad, 3, "std")).message == "std: not base64 at character 3");
}

TEST_CASE("fed_stats: a pass as a vector in [-1, 1] for masking, and back, counts exact") {
  const core::stats_scale scale{.max_examples = 1000, .bounds = {100.0}};
  core::stats_sums s{.examples = 999, .sum = {-150.5, 2e4}, .min = {-3, 0}, .max = {2, 99.5}, .label_counts = {333, 666}, .target_sum = 0};
  const auto v = core::sums_vector(s, core::task_kind::classification, scale).value();
  REQUIRE(v.size() == core::sums_vector_length(2, core::task_kind::classification, 2));
  for (const float x : v) CHECK(std::abs(x) <= 1.0f);
  // Three devices' vectors summed: counts come back exact, sums within float32's rounding.
  std::vector<double> sum(v.size());
  for (int d = 0; d < 3; ++d)
    for (std::size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
  const auto back = core::sums_from_vector(sum, 2, core::task_kind::classification, 2, scale).value();
  CHECK(back.examples == 3 * 999);
  CHECK(back.label_counts == std::vector<std::uint64_t>{999, 1998});
  CHECK(back.sum[0] == doctest::Approx(-451.5).epsilon(1e-7));
  CHECK(back.sum[1] == doctest::Approx(6e4).epsilon(1e-7));
  CHECK(back.min.empty());

  // What a device refuses: more examples than the request was scaled for (the hub knows its count), and
  // figures not measured within the bounds (a value beyond one never names itself in a refusal).
  s.examples = 1001;
  CHECK(error_of(core::sums_vector(s, core::task_kind::classification, scale)).message ==
        "this device holds 1001 examples, more than the 1000 the request was scaled for");
  s.examples = 999;
  s.sum[1] = 1.5e5;
  CHECK(error_of(core::sums_vector(s, core::task_kind::classification, scale)).message == "the statistics were not measured within their bounds");
  s.sum[1] = 2e4;
  // Measured within bounds: each value clipped to its own, the examples clipped counted (the target's
  // bound, last, clips a regression target).
  {
    core::memory_table t(2, {1.0f, -7.0f, 3.0f, 0.5f, -2.0f, 9.0f}, {0.0f, 5.0f, -1.0f}, "bounded");
    const std::vector<double> b{2.0, 8.0, 4.0};
    const auto m = core::measure_sums(*core::make_table_stream(t), core::task_kind::regression, 1, b).value();
    CHECK(m.sum == std::vector<double>{1.0 + 2.0 - 2.0, -7.0 + 0.5 + 8.0});
    CHECK(m.target_sum == 0.0 + 4.0 - 1.0);
    CHECK(m.clipped == 2);  // the second example (3 > 2, 5 > 4) and the third (9 > 8)
    const auto q = core::measure_spread(*core::make_table_stream(t), std::vector<double>{0.0, 0.0}, 0.0, b).value();
    CHECK(q.sq_dev == std::vector<double>{1.0 + 4.0 + 4.0, 49.0 + 0.25 + 64.0});
    CHECK(q.target_sq_dev == 0.0 + 16.0 + 1.0);
  }
  // What the hub refuses: a count no devices could sum to, a histogram that does not add up.
  sum[0] += 0.3 / 1024;
  CHECK(error_of(core::sums_from_vector(sum, 2, core::task_kind::classification, 2, scale)).code == core::errc::bad_format);
  sum[0] -= 0.3 / 1024;
  sum[3] += 1.0 / 1024;
  CHECK(error_of(core::sums_from_vector(sum, 2, core::task_kind::classification, 2, scale)).message ==
        "the released label histogram counts 2998 examples, not 2997");

  // Pass 2 of a regression: the squares' scale grows with the mean; rounding below zero comes back as 0.
  const std::vector<double> mean{10.0};
  const core::stats_spread q{.examples = 10, .sq_dev = {0.0}, .target_sq_dev = 40.0};
  auto w = core::spread_vector(q, mean, 1.0, core::task_kind::regression, scale).value();
  REQUIRE(w.size() == 3);
  std::vector<double> ws(w.begin(), w.end());
  ws[1] = -1e-12;
  std::vector<double> floor;
  const auto spread = core::spread_from_vector(ws, mean, 1.0, core::task_kind::regression, scale, 1e-11, &floor).value();
  CHECK(spread.examples == 10);
  CHECK(spread.sq_dev[0] == 0.0);
  CHECK(floor.at(0) == doctest::Approx(1e-11 * 1024 * 110 * 110));
  CHECK(spread.target_sq_dev == doctest::Approx(40.0).epsilon(1e-7));
  ws[1] = -1e-10;
  CHECK(error_of(core::spread_from_vector(ws, mean, 1.0, core::task_kind::regression, scale, 1e-11)).message ==
        "the released sum's squared deviation 0 is negative");
}
