#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/math/ist.hpp"
#include "tessera/core/math/mlp.hpp"
#include "test_files.hpp"

using namespace tessera::core;
using namespace tessera::testing;

namespace {

std::vector<float> random_params(const mlp_arch& a, std::uint64_t seed) {
  std::vector<float> p(param_count(a));
  rng r(seed);
  for (auto& v : p) v = r.uniform() - 0.5f;
  return p;
}

// A plan for `groups` devices that can each train the whole model, one group each (min_width 2).
round_plan equal_plan(const mlp_arch& full, std::size_t groups, std::uint64_t seed) {
  const std::vector<double> caps(groups, 1.0);
  auto plan = make_plan(full, caps, groups, {.min_width = 2}, seed);
  REQUIRE(plan.ok());
  return std::move(plan).value();
}

}  // namespace

// FedRolex's rolling windows: group s holds a contiguous window of each layer (mod its width), the
// windows of the next cut start one neuron on, and the run's seed plays no part.
TEST_CASE("plan: a rolling cut gives each group a window that moves by one neuron per cut") {
  const auto full = arch_of({10, 12, 9, 3}, false);
  const std::vector<double> caps(3, 1.0);
  const auto cut = [&](std::uint64_t roll, std::uint64_t seed) {
    auto plan = make_plan(full, caps, 3, {.min_width = 2, .cut = cut_kind::rolling, .roll = roll}, seed);
    REQUIRE(plan.ok());
    return std::move(plan).value();
  };
  const auto window = [](std::int32_t start, std::int32_t size, std::int32_t n) {
    std::vector<std::int32_t> w;
    for (std::int32_t i = 0; i < size; ++i) w.push_back((start + i) % n);
    std::sort(w.begin(), w.end());
    return w;
  };
  for (const std::uint64_t roll : {0u, 1u, 5u, 13u}) {
    const round_plan p = cut(roll, 3);
    CHECK(p.members == cut(roll, 99).members);  // the seed does not matter
    for (std::size_t h = 0; h < 2; ++h) {
      const auto n = static_cast<std::int32_t>(full.widths[h + 1]);
      const std::int32_t size = n / 3;
      for (std::size_t s = 0; s < 3; ++s) {
        const auto start = static_cast<std::int32_t>((roll + s * static_cast<std::uint64_t>(size)) % static_cast<std::uint64_t>(n));
        CHECK(p.members[h][s] == window(start, size, n));
      }
    }
  }
  // A random cut of the same layers is another partition, and changes with the seed.
  auto random = make_plan(full, caps, 3, {.min_width = 2}, 3);
  REQUIRE(random.ok());
  CHECK(random.value().members != cut(0, 3).members);
}

TEST_CASE("plan: every neuron of every layer is in at most one group, and all of them when capacity allows") {
  const auto full = arch_of({10, 64, 48, 3}, false);
  const std::vector<double> caps(4, 1.0);
  auto plan = make_plan(full, caps, 4, {.min_width = 4}, 77);
  REQUIRE(plan.ok());
  for (std::size_t h = 0; h < 2; ++h) {
    std::vector<int> seen(static_cast<std::size_t>(full.widths[h + 1]), 0);
    for (const auto& g : plan.value().members[h]) {
      CHECK(std::is_sorted(g.begin(), g.end()));
      for (auto n : g) ++seen[static_cast<std::size_t>(n)];
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
    for (const auto& g : plan.value().members[h]) CHECK(static_cast<std::int64_t>(g.size()) == full.widths[h + 1] / 4);
  }
}

TEST_CASE("plan: group sizes follow capacities") {
  const auto full = arch_of({10, 100, 3}, false);
  const std::vector<double> caps = {1.0, 0.5, 0.5};  // shares 1/2, 1/4, 1/4
  auto plan = make_plan(full, caps, 3, {.min_width = 4}, 1);
  REQUIRE(plan.ok());
  CHECK(plan.value().members[0][0].size() == 50);
  CHECK(plan.value().members[0][1].size() == 25);
  CHECK(plan.value().members[0][2].size() == 25);
}

TEST_CASE("plan: a fleet too small for the layer leaves neurons out and never exceeds a capacity") {
  const auto full = arch_of({10, 100, 3}, false);
  const std::vector<double> caps = {0.2, 0.3};
  auto plan = make_plan(full, caps, 2, {.min_width = 4}, 1);
  REQUIRE(plan.ok());
  CHECK(plan.value().members[0][0].size() == 20);
  CHECK(plan.value().members[0][1].size() == 30);
  std::set<std::int32_t> all;
  for (const auto& g : plan.value().members[0]) all.insert(g.begin(), g.end());
  CHECK(all.size() == 50);
}

TEST_CASE("plan: same seed gives the same plan, another seed another") {
  const auto full = arch_of({10, 64, 64, 3}, false);
  const std::vector<double> caps(8, 1.0);
  auto a = make_plan(full, caps, 8, {}, 5);
  auto b = make_plan(full, caps, 8, {}, 5);
  auto c = make_plan(full, caps, 8, {}, 6);
  REQUIRE((a.ok() && b.ok() && c.ok()));
  CHECK(a.value().members == b.value().members);
  CHECK(a.value().members != c.value().members);
}

TEST_CASE("plan: replication when there are fewer groups than devices") {
  const auto full = arch_of({10, 40, 3}, false);
  const std::vector<double> caps = {1.0, 1.0, 0.5, 1.0};
  auto plan = make_plan(full, caps, 2, {.min_width = 4}, 3);
  REQUIRE(plan.ok());
  CHECK(plan.value().device_group == std::vector<std::size_t>{0, 1, 0, 1});
  // Group 0 holds device 2 (capacity 0.5): the group is sized for its smallest device.
  CHECK(plan.value().members[0][0].size() <= 20);
}

TEST_CASE("plan: min_width refused with the layer and group named") {
  const auto full = arch_of({10, 16, 3}, false);
  const std::vector<double> caps(4, 1.0);
  auto plan = make_plan(full, caps, 4, {.min_width = 8}, 1);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().message.find("hidden layer 1") != std::string::npos);
  CHECK(plan.error().message.find("min_width") != std::string::npos);
  CHECK(default_group_count(full, 4, 8) == 2);
}

TEST_CASE("plan: bad capacities and group counts refused") {
  const auto full = arch_of({10, 16, 3}, false);
  const std::vector<double> zero = {1.0, 0.0};
  CHECK_FALSE(make_plan(full, zero, 2, {}, 1).ok());
  const std::vector<double> two = {1.0, 1.0};
  CHECK_FALSE(make_plan(full, two, 3, {}, 1).ok());
  CHECK_FALSE(make_plan(full, std::span<const double>{}, 1, {}, 1).ok());
}

TEST_CASE("gather then scatter is the identity, and subnets are disjoint") {
  for (bool ln : {false, true}) {
    const auto full = arch_of({7, 24, 16, 12, 5}, ln);
    const auto params = random_params(full, 11);
    const round_plan plan = equal_plan(full, 4, 9);
    std::vector<float> rebuilt(params.size(), 0.0f);
    for (std::size_t g = 0; g < 4; ++g) {
      const subnet sub = make_subnet(full, compensation_kind::scale, plan, g);
      std::vector<float> local(param_count(sub.arch));
      gather(full, sub, params, local);
      std::vector<float> copy = params;
      scatter(full, sub, local, copy);
      CHECK(copy == params);
      scatter(full, sub, local, rebuilt);
    }
    // The output bias is in every subnet; all other parameters a subnet holds come from its own block.
    const auto slots = param_slots(full);
    for (std::int64_t i = 0; i < full.outputs(); ++i)
      CHECK(rebuilt[slots.back().bias + static_cast<std::size_t>(i)] == params[slots.back().bias + static_cast<std::size_t>(i)]);
  }
}

TEST_CASE("a gathered subnet is a valid smaller MLP: it computes the full model with the other neurons removed") {
  const auto full = arch_of({5, 12, 8, 3}, false);
  auto params = random_params(full, 3);
  const round_plan plan = equal_plan(full, 2, 4);
  const subnet sub = make_subnet(full, compensation_kind::none, plan, 1);
  std::vector<float> local(param_count(sub.arch));
  gather(full, sub, params, local);
  // Remove the other group's neurons from the full model: zero their incoming rows, biases and outputs.
  const auto slots = param_slots(full);
  for (std::size_t h = 0; h < 2; ++h) {
    for (std::int64_t n = 0; n < full.widths[h + 1]; ++n) {
      const auto& keep = sub.neurons[h];
      if (std::binary_search(keep.begin(), keep.end(), static_cast<std::int32_t>(n))) continue;
      const auto& s = slots[h];
      std::fill_n(params.begin() + static_cast<std::ptrdiff_t>(s.weight + static_cast<std::size_t>(n * s.cols)), s.cols, 0.0f);
      params[s.bias + static_cast<std::size_t>(n)] = 0.0f;
    }
  }
  network big(full), small(sub.arch);
  const std::vector<float> x = {0.5f, -1.0f, 0.25f, 2.0f, -0.5f};
  std::vector<float> ws_big(big.workspace_floats(1)), ws_small(small.workspace_floats(1));
  big.forward(params, x.data(), 1, ws_big);
  small.forward(local, x.data(), 1, ws_small);
  for (std::size_t k = 0; k < 3; ++k) CHECK(small.outputs(ws_small, 1)[k] == doctest::Approx(big.outputs(ws_big, 1)[k]).epsilon(1e-5));
}

TEST_CASE("scale compensation: input scales are n / |G| beyond the first layer") {
  const auto full = arch_of({5, 12, 8, 3}, false);
  const round_plan plan = equal_plan(full, 4, 4);
  const subnet sub = make_subnet(full, compensation_kind::scale, plan, 0);
  CHECK(sub.arch.widths == std::vector<std::int64_t>{5, 3, 2, 3});
  CHECK(sub.arch.input_scale == std::vector<float>{1.0f, 4.0f, 4.0f});
  const subnet plain = make_subnet(full, compensation_kind::none, plan, 0);
  CHECK(plain.arch.input_scale == std::vector<float>{1.0f, 1.0f, 1.0f});
}

TEST_CASE("aggregation: hand-computed weighted means, shared bias, untouched parameters") {
  // One hidden layer of 4 neurons, 1 input, 1 output: W1 4x1, b1 4, W2 1x4, b2 1 => 4+4+4+1 = 13.
  const auto full = arch_of({1, 4, 2}, false);
  // widths {1,4,2}: W1 4, b1 4, W2 8, b2 2 => 18 parameters.
  std::vector<float> params(param_count(full));
  std::iota(params.begin(), params.end(), 100.0f);
  round_plan plan;
  plan.groups = 2;
  plan.members = {{{0, 1}, {2}}};  // neuron 3 is in no group this round
  plan.device_group = {0, 1, 0};   // devices 0 and 2 replicate group 0
  const subnet g0 = make_subnet(full, compensation_kind::none, plan, 0);
  const subnet g1 = make_subnet(full, compensation_kind::none, plan, 1);
  // Subnet g0: W1 rows {0,1} (2), b1 (2), W2 cols {0,1} (2x2=4), b2 (2) => 10 values.
  REQUIRE(param_count(g0.arch) == 10);
  REQUIRE(param_count(g1.arch) == 1 + 1 + 2 + 2);
  std::vector<float> d0(10, 1.0f), d2(10, 4.0f), d1(6, 10.0f);
  aggregator agg(full);
  agg.add(g0, d0, 1.0);   // device 0: 1 example
  agg.add(g1, d1, 2.0);   // device 1: 2 examples
  agg.add(g0, d2, 3.0);   // device 2: 3 examples
  const std::size_t touched = agg.finish(params);
  // Group 0's parameters: (1*1 + 3*4) / 4 = 3.25.
  CHECK(params[0] == 3.25f);            // W1[0]
  CHECK(params[1] == 3.25f);            // W1[1]
  CHECK(params[2] == 10.0f);            // W1[2], group 1 alone
  CHECK(params[3] == 103.0f);           // W1[3], neuron 3 untouched
  CHECK(params[4 + 3] == 107.0f);       // b1[3] untouched
  // W2 is 2x4 row-major at offset 8: column 3 untouched, column 2 from group 1.
  CHECK(params[8 + 0] == 3.25f);
  CHECK(params[8 + 2] == 10.0f);
  CHECK(params[8 + 3] == 111.0f);
  CHECK(params[8 + 4 + 3] == 115.0f);
  // The output bias is shared by all three: (1*1 + 2*10 + 3*4) / 6 = 5.5.
  CHECK(params[16] == 5.5f);
  CHECK(params[17] == 5.5f);
  CHECK(touched == 18 - 4);  // W1[3], b1[3], W2[0][3], W2[1][3]
}

TEST_CASE("aggregation: median and trimmed mean per parameter from three reports up; fewer keep the weighted mean") {
  const auto full = arch_of({1, 4, 2}, false);
  round_plan plan;
  plan.groups = 2;
  plan.members = {{{0, 1}, {2, 3}}};
  plan.device_group = {0, 0, 0, 1, 1};  // group 0 on three devices, group 1 on two
  const subnet g0 = make_subnet(full, compensation_kind::none, plan, 0);
  const subnet g1 = make_subnet(full, compensation_kind::none, plan, 1);
  const std::size_t b2 = param_count(full) - 2;  // the shared output bias: reported by all five
  const auto fill = [](const subnet& g, float v) { return std::vector<float>(param_count(g.arch), v); };
  const auto run = [&](aggregate_kind kind, double trim) {
    std::vector<float> params(param_count(full), -1.0f);
    aggregator agg(full, kind, trim);
    agg.add(g0, fill(g0, 1.0f), 1.0);
    agg.add(g0, fill(g0, 1000.0f), 1.0);  // the rogue of group 0
    agg.add(g0, fill(g0, 3.0f), 2.0);
    agg.add(g1, fill(g1, 10.0f), 1.0);
    agg.add(g1, fill(g1, 20.0f), 3.0);
    CHECK(agg.finish(params) == params.size());
    return params;
  };
  SUBCASE("mean: weighted, the rogue pulls group 0 far") {
    const auto p = run(aggregate_kind::mean, 0.2);
    CHECK(p[0] == doctest::Approx((1.0 + 1000.0 + 6.0) / 4.0));
    CHECK(p[2] == doctest::Approx(17.5));
    CHECK(p[b2] == doctest::Approx((1.0 + 1000.0 + 6.0 + 10.0 + 60.0) / 8.0));
  }
  SUBCASE("median: the middle report where there are three or more, unweighted") {
    const auto p = run(aggregate_kind::median, 0.2);
    CHECK(p[0] == 3.0f);                                    // median of 1, 1000, 3
    CHECK(p[1] == 3.0f);
    CHECK(p[2] == doctest::Approx(17.5));                   // two reports: their weighted mean
    CHECK(p[b2] == 10.0f);                                  // median of 1, 1000, 3, 10, 20
  }
  SUBCASE("trimmed mean: floor(trim·n) dropped at each end") {
    const auto p = run(aggregate_kind::trimmed_mean, 0.2);
    CHECK(p[0] == doctest::Approx((1.0 + 3.0 + 1000.0) / 3.0));  // floor(0.6) = 0: nothing dropped of three
    CHECK(p[b2] == doctest::Approx((3.0 + 10.0 + 20.0) / 3.0));  // floor(1.0) = 1 of five: 1 and 1000 go
    const auto q = run(aggregate_kind::trimmed_mean, 0.34);
    CHECK(q[0] == 3.0f);                                          // floor(1.02) = 1 of three: the middle one
  }
  std::vector<float> even{4.0f, 1.0f, 3.0f, 2.0f};
  CHECK(robust_value(even, aggregate_kind::median, 0) == 2.5);
}

TEST_CASE("aggregation of a single device's disjoint block reproduces it exactly") {
  const auto full = arch_of({6, 16, 16, 4}, true);
  auto params = random_params(full, 1);
  const round_plan plan = equal_plan(full, 4, 2);
  aggregator agg(full);
  std::vector<std::vector<float>> locals;
  for (std::size_t g = 0; g < 4; ++g) {
    const subnet sub = make_subnet(full, compensation_kind::none, plan, g);
    locals.emplace_back(param_count(sub.arch));
    gather(full, sub, params, locals.back());
    for (auto& v : locals.back()) v *= 3.0f;
    agg.add(sub, locals.back(), 17.0);
  }
  agg.finish(params);
  for (std::size_t g = 0; g < 4; ++g) {
    const subnet sub = make_subnet(full, compensation_kind::none, plan, g);
    std::vector<float> back(param_count(sub.arch));
    gather(full, sub, params, back);
    // The shared output bias is averaged over 4 equal copies: still equal. Everything else is exact.
    CHECK(back == locals[g]);
  }
}

TEST_CASE("FedAvg plan: one group with every neuron, replicated to every device") {
  const auto full = arch_of({3, 5, 4, 2}, false);
  const round_plan plan = make_full_plan(full, 3);
  CHECK(plan.groups == 1);
  CHECK(plan.device_group == std::vector<std::size_t>{0, 0, 0});
  const subnet sub = make_subnet(full, compensation_kind::scale, plan, 0);
  CHECK(sub.arch.widths == full.widths);
  CHECK(sub.arch.input_scale == std::vector<float>{1, 1, 1});
}
