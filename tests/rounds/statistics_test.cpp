#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../core/test_files.hpp"
#include "tessera/core/base/rng.hpp"
#include "tessera/rounds/error.hpp"
#include "tessera/rounds/statistics.hpp"

using namespace tessera;
using tessera::testing::error_of;

namespace {

core::model_spec spec() {
  core::model_spec s = testing::spec_of(3, {8}, 2);
  s.input_normalization = core::input_normalization_kind::standardize;
  return s;
}

// Device d's examples: features around 10^d, labels 0/1.
core::memory_table device_data(std::size_t d, std::int64_t n) {
  core::rng r(d + 11);
  std::vector<float> x, y;
  for (std::int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j) x.push_back(static_cast<float>(std::pow(10.0, j) * (1.0 + r.uniform()) + static_cast<double>(d)));
    y.push_back(static_cast<float>(r.below(2)));
  }
  return core::memory_table(3, std::move(x), std::move(y), "device " + std::to_string(d));
}

rounds::device_offer offer(const std::string& id, std::uint64_t examples) {
  return {.id = id, .budget_bytes = 0, .examples = examples, .codecs = {}, .capacity = 0};
}

// Runs both passes, devices answering in `order` (indices into the natural order).
core::input_normalization gather(std::vector<core::memory_table>& data, const std::vector<std::size_t>& order) {
  rounds::stats_gathering g(spec(), 10);
  std::vector<rounds::device_offer> offers;
  for (std::size_t d = 0; d < data.size(); ++d) offers.push_back(offer("device-" + std::to_string(d), static_cast<std::uint64_t>(data[d].size())));
  REQUIRE(g.begin(offers).ok());
  for (std::size_t d : order) {
    auto s = core::measure_sums(*core::make_table_stream(data[d]), core::task_kind::classification, 2);
    REQUIRE(g.add_sums("device-" + std::to_string(d), s.value()).ok());
  }
  REQUIRE(g.pass_complete());
  REQUIRE(g.finish_pass().ok());
  for (std::size_t d : order) {
    auto s = core::measure_spread(*core::make_table_stream(data[d]), g.mean(), g.target_mean());
    REQUIRE(g.add_spread("device-" + std::to_string(d), s.value()).ok());
  }
  REQUIRE(g.finish_pass().ok());
  CHECK(g.at() == rounds::stats_gathering::phase::done);
  CHECK(g.summary().at("examples") == 40 + 300 + 25 + 1000 + 60 + 70 + 80 + 90 + 100 + 110 + 120 + 130);
  return g.normalization().value();
}

}  // namespace

TEST_CASE("statistics: the order answers arrive in does not change a bit of the result") {
  std::vector<core::memory_table> data;
  const std::int64_t sizes[] = {40, 300, 25, 1000, 60, 70, 80, 90, 100, 110, 120, 130};
  for (std::size_t d = 0; d < std::size(sizes); ++d) data.push_back(device_data(d, sizes[d]));
  std::vector<std::size_t> forward(data.size()), backward;
  for (std::size_t d = 0; d < data.size(); ++d) forward[d] = d;
  backward.assign(forward.rbegin(), forward.rend());
  const auto a = gather(data, forward);
  const auto b = gather(data, backward);
  // Bit for bit: the sums are taken in natural order of the ids (device-2 before device-10).
  CHECK(std::memcmp(a.mean.data(), b.mean.data(), a.mean.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(a.std.data(), b.std.data(), a.std.size() * sizeof(float)) == 0);
  CHECK(a.std[2] > 20.0f);  // 100 · (1 + U(0,1)), shifted by the device index
}

TEST_CASE("statistics: small devices are not asked; strangers, repeats and dropouts are handled") {
  rounds::stats_gathering g(spec(), 10);
  const auto skipped = g.begin({offer("device-1", 500), offer("device-0", 9), offer("device-2", 200)});
  REQUIRE(skipped.ok());
  REQUIRE(skipped.value().size() == 1);
  CHECK(skipped.value()[0].id == "device-0");
  CHECK(skipped.value()[0].reason == "it holds 9 examples, fewer than min_stats_examples (10)");
  CHECK(g.asked() == std::vector<std::string>{"device-1", "device-2"});

  core::memory_table one = device_data(1, 500), two = device_data(2, 200);
  const auto sums1 = core::measure_sums(*core::make_table_stream(one), core::task_kind::classification, 2).value();
  CHECK(error_of(g.add_sums("device-0", sums1)).code == rounds::errc::bad_statistics);  // not asked
  REQUIRE(g.add_sums("device-1", sums1).ok());
  CHECK(error_of(g.add_sums("device-1", sums1)).message == "device device-1 sent its statistics (pass 1) twice");
  CHECK_FALSE(g.pass_complete());
  g.drop("device-2", "it disconnected");
  REQUIRE(g.pass_complete());
  REQUIRE(g.finish_pass().ok());
  CHECK(g.asked() == std::vector<std::string>{"device-1"});  // pass 2 asks who answered pass 1

  // A device of pass 1 that is lost in pass 2: the mean counts examples the spread cannot: start again.
  rounds::stats_gathering h(spec(), 10);
  REQUIRE(h.begin({offer("device-1", 500), offer("device-2", 200)}).ok());
  REQUIRE(h.add_sums("device-1", sums1).ok());
  REQUIRE(h.add_sums("device-2", core::measure_sums(*core::make_table_stream(two), core::task_kind::classification, 2).value()).ok());
  REQUIRE(h.finish_pass().ok());
  REQUIRE(h.add_spread("device-1", core::measure_spread(*core::make_table_stream(one), h.mean(), h.target_mean()).value()).ok());
  h.drop("device-2", "no answer within round_deadline_s");
  const auto e = error_of(h.finish_pass());
  CHECK(e.code == rounds::errc::stats_incomplete);
  CHECK(e.message == "device device-2 counted in the fleet's mean did not answer the second pass");
  CHECK_FALSE(h.normalization().ok());
  CHECK(h.begin({offer("device-1", 500)}).ok());  // and it can start again
  CHECK(h.pass() == 1);

  rounds::stats_gathering none(spec(), 10);
  CHECK(error_of(none.begin({offer("device-0", 3)})).code == rounds::errc::no_devices);

  // Masked, two devices where a sum is released from 3 (secure_aggregation's replication): the
  // gathering does not start, rather than have every pass withheld.
  rounds::stats_gathering few(spec(), 10);
  few.mask_with({.enabled = true});
  const auto e2 = error_of(few.begin({offer("device-1", 500), offer("device-2", 200)}));
  CHECK(e2.code == rounds::errc::fleet_too_small);
  CHECK(e2.message == "2 device(s) to ask, and their statistics' masked sum is released from 3 or more: waiting for more");
}

namespace {

// Both passes as masked sums (the simulator's plain sum of the agents' encodings: the same bits as the
// hub's unmasked sum), devices that `fail` in pass 2 left out of it.
core::result<core::input_normalization> gather_masked(std::vector<core::memory_table>& data, double bound,
                                                      const std::vector<std::size_t>& fail = {}, std::int64_t* clipped = nullptr) {
  rounds::stats_gathering g(spec(), 10);
  g.mask_with({.enabled = true, .replication = 3, .threshold = 3, .statistics_bounds = {bound}});
  std::vector<rounds::device_offer> offers;
  for (std::size_t d = 0; d < data.size(); ++d) offers.push_back(offer("device-" + std::to_string(d), static_cast<std::uint64_t>(data[d].size())));
  REQUIRE(g.begin(offers).ok());
  CHECK(g.scale().max_examples == static_cast<std::int64_t>(std::max_element(data.begin(), data.end(), [](const auto& a, const auto& b) {
                                    return a.size() < b.size();
                                  })->size()));
  auto one = g.begin_masked_pass().value();
  CHECK(one.params().bits == 64);
  CHECK(one.params().segments.at(0).length == 1 + 3 + 2 + 1);  // the count, the sums, the histogram, the clipped count
  const auto bounds = g.scale().bounds;
  REQUIRE(bounds.size() == 3 + 1);
  for (std::size_t d = 0; d < data.size(); ++d) {
    const auto s = core::measure_sums(*core::make_table_stream(data[d]), core::task_kind::classification, 2, bounds).value();
    auto v = core::sums_vector(s, core::task_kind::classification, g.scale());
    if (!v) return v.error();
    REQUIRE(one.add_plain("device-" + std::to_string(d), v.value()).ok());
  }
  REQUIRE(g.add_released(one.finish().value()).ok());
  auto two = g.begin_masked_pass().value();
  for (std::size_t d = 0; d < data.size(); ++d) {
    if (std::find(fail.begin(), fail.end(), d) != fail.end()) continue;
    const auto s = core::measure_spread(*core::make_table_stream(data[d]), g.mean(), g.target_mean(), bounds).value();
    REQUIRE(two.add_plain("device-" + std::to_string(d), core::spread_vector(s, g.mean(), g.target_mean(), core::task_kind::classification, g.scale()).value()).ok());
  }
  TESSERA_TRY(g.add_released(two.finish().value()));
  CHECK(g.summary().at("label_counts").get<std::vector<std::uint64_t>>() == g.fleet().sums().label_counts);
  if (clipped != nullptr) *clipped = g.summary().at("clipped_examples").get<std::int64_t>();
  return g.normalization();
}

}  // namespace

TEST_CASE("statistics: as masked sums, within the encoding's rounding of the plain figures, with exact counts") {
  std::vector<core::memory_table> data;
  const std::int64_t sizes[] = {40, 300, 25, 1000, 60, 70, 80, 90, 100, 110, 120, 130};
  for (std::size_t d = 0; d < std::size(sizes); ++d) data.push_back(device_data(d, sizes[d]));
  std::vector<std::size_t> order(data.size());
  for (std::size_t d = 0; d < data.size(); ++d) order[d] = d;
  const auto plain = gather(data, order);
  std::int64_t clipped = -1;
  const auto masked = gather_masked(data, 1e4, {}, &clipped);
  REQUIRE(masked.ok());
  CHECK(clipped == 0);
  for (std::size_t j = 0; j < 3; ++j) {
    // float32 inputs to the ring: each device's value carries 2^-24 of its scale at most; the mean's
    // error is at most 12 of those over the examples, far inside float32's own rounding of the result.
    CHECK(masked.value().mean[j] == doctest::Approx(plain.mean[j]).epsilon(1e-6));
    CHECK(masked.value().std[j] == doctest::Approx(plain.std[j]).epsilon(1e-4));
  }
  // The same vectors give the same bits, whoever adds them up.
  const auto again = gather_masked(data, 1e4).value();
  CHECK(std::memcmp(again.mean.data(), masked.value().mean.data(), again.mean.size() * sizeof(float)) == 0);

  // A device of pass 1 missing from pass 2's sum: start again, as with plain figures.
  const auto lost = gather_masked(data, 1e4, {4});
  REQUIRE_FALSE(lost.ok());
  CHECK(lost.error().code == rounds::errc::stats_incomplete);
  CHECK(lost.error().message == "device device-4 counted in the fleet's mean is not in the second pass's sum");

  // Feature 2 (100 to 200 and more) beyond a bound of 50: every device clips it there and counts the
  // examples it clipped; the fleet learns the count, not who, and the clipped feature's mean is the bound.
  const auto beyond = gather_masked(data, 50.0, {}, &clipped);
  REQUIRE(beyond.ok());
  CHECK(clipped == 40 + 300 + 25 + 1000 + 60 + 70 + 80 + 90 + 100 + 110 + 120 + 130);
  CHECK(beyond.value().mean[2] == doctest::Approx(50.0).epsilon(1e-6));
  CHECK(beyond.value().std[2] == 1.0f);  // constant once clipped
}

TEST_CASE("statistics: a constant feature stays constant through the masked sum's rounding") {
  std::vector<core::memory_table> data;
  for (std::size_t d = 0; d < 4; ++d) {
    std::vector<float> x, y;
    for (int i = 0; i < 50; ++i) {
      x.insert(x.end(), {123.25f, static_cast<float>(i), -7.0f});
      y.push_back(static_cast<float>(i % 2));
    }
    data.emplace_back(3, std::move(x), std::move(y), "device " + std::to_string(d));
  }
  const auto n = gather_masked(data, 1e4).value();
  CHECK(n.mean[0] == doctest::Approx(123.25).epsilon(1e-7));  // float32's rounding of each device's sum
  CHECK(n.std[0] == 1.0f);  // constant: passes through centred
  CHECK(n.std[2] == 1.0f);
  CHECK(n.std[1] == doctest::Approx(std::sqrt((50.0 * 50.0 - 1.0) / 12.0)).epsilon(1e-5));
}

TEST_CASE("evaluation: the devices' scores as one masked sum equal their plain sum (counts exact, loss within float32)") {
  std::vector<rounds::evaluator> evaluators;
  rounds::federated_scores plain, masked;
  const std::int64_t examples[] = {80, 77, 120, 5, 64};
  const double losses[] = {41.25, 60.5, 200.125, 9.0, 0.75};
  const std::int64_t correct[] = {70, 31, 119, 0, 64};
  for (std::size_t d = 0; d < std::size(examples); ++d) {
    evaluators.push_back({.id = "device-" + std::to_string(d), .codec = core::codec_kind::f32, .blob_bytes = 0,
                          .examples = static_cast<std::uint64_t>(examples[d])});
    plain.add({.id = evaluators.back().id, .examples = examples[d], .loss_sum = losses[d], .correct = correct[d]});
  }
  const std::int64_t most = rounds::evaluation_max_examples(evaluators);
  CHECK(most == 120);
  auto sum = rounds::evaluation_sum({.enabled = true, .replication = 3, .threshold = 3}, evaluators, 7).value();
  for (std::size_t d = 0; d < std::size(examples); ++d) {
    bool clipped = true;
    const auto v = core::score_vector({.examples = examples[d], .loss_sum = losses[d], .correct = correct[d]}, most,
                                      rounds::k_evaluation_loss_bound, &clipped).value();
    CHECK_FALSE(clipped);
    REQUIRE(sum.add_plain(evaluators[d].id, v).ok());
  }
  const auto released = sum.finish().value();
  CHECK(released.survivors.size() == std::size(examples));
  REQUIRE(rounds::add_released_scores(released, most, masked).ok());
  rounds::round_metrics a, b;
  plain.fill(a, true);
  masked.fill(b, true);
  CHECK(*b.fed.examples == *a.fed.examples);
  CHECK(*b.fed.accuracy == *a.fed.accuracy);  // counts come back exact
  CHECK(*b.fed.loss == doctest::Approx(*a.fed.loss).epsilon(1e-6));
  CHECK(*b.fed.devices == 5);
  CHECK_FALSE(b.fed.accuracy_min.has_value());  // no device's own accuracy
  CHECK(a.fed.accuracy_min.has_value());
}
