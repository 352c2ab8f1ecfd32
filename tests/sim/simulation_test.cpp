#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/data/fed_stats.hpp"
#include "tessera/core/math/ist.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/rounds/sim/shards.hpp"
#include "tessera/rounds/sim/simulation.hpp"
#include "../core/test_files.hpp"

using namespace tessera;

namespace {

// Three classes, each a noisy prototype in 12 dimensions: learnable in a few rounds.
core::memory_table prototypes(std::int64_t n, std::uint64_t seed) {
  core::rng r(seed);
  std::vector<float> x, y;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto cls = static_cast<int>(r.below(3));
    for (int f = 0; f < 12; ++f) x.push_back((f % 3 == cls ? 1.0f : 0.0f) + 0.6f * (r.uniform() - 0.5f));
    y.push_back(static_cast<float>(cls));
  }
  return core::memory_table(12, std::move(x), std::move(y), "prototypes");
}

sim::sim_config config_for(const std::string& strategy) {
  nlohmann::json j = {{"model", {{"inputs", 12}, {"hidden", {32, 32}}, {"outputs", 3}}},
                      {"strategy", strategy}, {"devices", 4}, {"rounds", 6}, {"local_steps", 20},
                      {"batch", 8}, {"lr", 0.05}, {"min_width", 4}};
  auto c = sim::parse_sim_config(j, "test.json");
  REQUIRE(c.ok());
  return c.value();
}

std::string config_error(const nlohmann::json& j) { return testing::error_of(sim::parse_sim_config(j, "sim.json")).message; }

}  // namespace

TEST_CASE("simulation: every strategy learns the toy problem and reports its rounds") {
  auto train = prototypes(800, 1);
  auto test = prototypes(300, 2);
  for (const char* strategy : {"ist", "fedavg", "central"}) {
    INFO(strategy);
    auto sim = sim::simulation::create(config_for(strategy), train, &test);
    REQUIRE(sim.ok());
    std::vector<rounds::round_metrics> rounds;
    while (!sim.value()->done()) {
      auto m = sim.value()->run_round();
      REQUIRE(m.ok());
      rounds.push_back(m.value());
    }
    REQUIRE(rounds.size() == 6);
    CHECK(rounds.back().test_accuracy.value() > 0.9);
    CHECK(rounds.back().strategy == strategy);
    const auto json = rounds.back().to_json();
    for (const char* key : {"round", "strategy", "devices", "bytes_down", "bytes_up", "train_loss", "test_accuracy", "seconds"})
      CHECK(json.contains(key));
  }
}

TEST_CASE("simulation: same seed, same model; another seed, another model") {
  auto train = prototypes(400, 3);
  auto a = sim::simulation::create(config_for("ist"), train, nullptr);
  auto b = sim::simulation::create(config_for("ist"), train, nullptr);
  auto cfg = config_for("ist");
  cfg.seed = 2;
  auto c = sim::simulation::create(cfg, train, nullptr);
  REQUIRE((a.ok() && b.ok() && c.ok()));
  for (int i = 0; i < 3; ++i) {
    REQUIRE(a.value()->run_round().ok());
    REQUIRE(b.value()->run_round().ok());
    REQUIRE(c.value()->run_round().ok());
  }
  const auto pa = a.value()->params(), pb = b.value()->params(), pc = c.value()->params();
  CHECK(std::equal(pa.begin(), pa.end(), pb.begin()));
  CHECK_FALSE(std::equal(pa.begin(), pa.end(), pc.begin()));
}

TEST_CASE("simulation: IST bytes per device are at most 20% of FedAvg's with 8 devices") {
  auto train = prototypes(64, 4);
  auto cfg = config_for("ist");
  cfg.model.inputs = 12;
  cfg.devices = 8;
  cfg.local_steps = 1;
  auto ist = sim::simulation::create(cfg, train, nullptr);
  cfg.strategy = rounds::strategy_kind::fedavg;
  auto fedavg = sim::simulation::create(cfg, train, nullptr);
  REQUIRE((ist.ok() && fedavg.ok()));
  auto mi = ist.value()->run_round();
  auto mf = fedavg.value()->run_round();
  REQUIRE((mi.ok() && mf.ok()));
  CHECK(mf.value().bytes_down == 8 * 4 * core::param_count(cfg.model.full_arch()));
  CHECK(static_cast<double>(mi.value().bytes_down) <= 0.2 * static_cast<double>(mf.value().bytes_down));
  CHECK(mi.value().bytes_up == mi.value().bytes_down);

  // And on the benchmark model, 784-512-512-10, from the plan alone.
  const core::model_spec big = testing::spec_of(784, {512, 512}, 10);
  const std::vector<double> caps(8, 1.0);
  auto plan = core::make_plan(big.full_arch(), caps, 8, {}, 1);
  REQUIRE(plan.ok());
  const auto sub = core::make_subnet(big.full_arch(), big.compensation, plan.value(), 0);
  const double ratio = static_cast<double>(core::param_count(sub.arch)) / static_cast<double>(core::param_count(big.full_arch()));
  CHECK(ratio <= 0.20);
  MESSAGE("784-512-512-10, 8 devices: an IST device moves " << 100 * ratio << "% of what a FedAvg device moves");
}

TEST_CASE("simulation: non-IID Dirichlet shards skew the labels and still cover every example once") {
  auto train = prototypes(900, 5);
  auto cfg = config_for("ist");
  cfg.partition = sim::partition_kind::dirichlet;
  cfg.alpha = 0.3;
  auto sim = sim::simulation::create(cfg, train, nullptr);
  REQUIRE(sim.ok());
  std::int64_t total = 0;
  double max_share = 0;
  for (const auto& shard : sim.value()->shards()) {
    total += shard.size();
    std::vector<int> count(3, 0);
    for (float y : shard.targets()) ++count[static_cast<std::size_t>(y)];
    max_share = std::max(max_share, static_cast<double>(*std::max_element(count.begin(), count.end())) / static_cast<double>(shard.size()));
  }
  CHECK(total == 900);
  CHECK(max_share > 0.5);  // with alpha 0.3 some device is dominated by one class
}

TEST_CASE("sim config: errors name the field") {
  CHECK(config_error({{"strategy", "gossip"}}).find("'strategy'") != std::string::npos);
  CHECK(config_error({{"rounds", 0}}).find("'rounds'") != std::string::npos);
  CHECK(config_error({{"devices", 2}, {"capacities", {1.0, 0.5, 0.5}}}).find("'capacities'") != std::string::npos);
  CHECK(config_error({{"model", {{"hidden", {0}}}}}).find("hidden[0]") != std::string::npos);
  CHECK(config_error({{"data", {{"train", {{"format", "csv"}, {"features", ""}}}}}}).find("'data.train.features'") != std::string::npos);
  CHECK(config_error({{"data", {{"train_images", "x"}}}}).find("renamed: use 'data.train.features'") != std::string::npos);
  CHECK(config_error({{"lr_shedule", "cosine"}}).find("'lr_shedule'") != std::string::npos);
  // The shipped examples' groups 2 with strategy=central: the fix is named (it used to be '2 groups for 1 devices').
  CHECK(config_error({{"strategy", "central"}, {"groups", 2}}).find("2 groups for 1 devices (central training is one device: set groups to 0 or 1)") !=
        std::string::npos);
}

TEST_CASE("sim config: overrides reach dotted fields and parse JSON values") {
  auto c = core::load_config("", {"rounds=3", "model.hidden=[64,32]", "strategy=fedavg", "metrics=out/m.jsonl"}, sim::read_sim_config);
  REQUIRE(c.ok());
  CHECK(c.value().rounds == 3);
  CHECK(c.value().model.hidden == std::vector<std::int64_t>{64, 32});
  CHECK(c.value().model.inputs == 784);  // the rest of the model keeps its defaults
  CHECK(c.value().strategy == rounds::strategy_kind::fedavg);
  CHECK(c.value().metrics_path == "out/m.jsonl");
  auto bad = core::load_config("", {"rounds"}, sim::read_sim_config);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("key=value") != std::string::npos);
}

namespace {

// The rate of every round of a 7-round IST run of the toy problem at lr 0.1 with `schedule` (the
// lr_* keys), and the model after each round.
struct scheduled_run {
  std::vector<double> rates;
  std::vector<std::vector<float>> params;
};

scheduled_run run_schedule(const nlohmann::json& schedule) {
  nlohmann::json j = {{"model", {{"inputs", 12}, {"hidden", {32, 32}}, {"outputs", 3}}},
                      {"strategy", "ist"}, {"devices", 4}, {"rounds", 7}, {"local_steps", 10},
                      {"batch", 8}, {"lr", 0.1}, {"min_width", 4}};
  for (const auto& [key, value] : schedule.items()) j[key] = value;
  auto c = sim::parse_sim_config(j, "test.json");
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.error().message));
  auto train = prototypes(400, 9);
  auto sim = sim::simulation::create(c.value(), train, nullptr);
  REQUIRE(sim.ok());
  scheduled_run out;
  while (!sim.value()->done()) {
    auto m = sim.value()->run_round();
    REQUIRE(m.ok());
    out.rates.push_back(m.value().learning_rate);
    const auto p = sim.value()->params();
    out.params.emplace_back(p.begin(), p.end());
  }
  REQUIRE(out.rates.size() == 7);
  return out;
}

double largest_change(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return d;
}

}  // namespace

TEST_CASE("sim config: the lr schedule keys set each round's rate, written out by hand") {
  SUBCASE("default: constant at lr") {
    for (double r : run_schedule({}).rates) CHECK(r == doctest::Approx(0.1));
  }
  SUBCASE("lr_warmup_rounds: a linear climb to lr first") {
    const auto rates = run_schedule({{"lr_warmup_rounds", 2}}).rates;
    CHECK(rates[0] == doctest::Approx(0.1 / 3));
    CHECK(rates[1] == doctest::Approx(0.2 / 3));
    for (std::size_t r = 2; r < rates.size(); ++r) CHECK(rates[r] == doctest::Approx(0.1));
  }
  SUBCASE("step: lr_gamma every lr_step_rounds") {
    const auto rates = run_schedule({{"lr_schedule", "step"}, {"lr_step_rounds", 2}, {"lr_gamma", 0.5}}).rates;
    const double expected[] = {0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.0125};
    for (std::size_t r = 0; r < rates.size(); ++r) CHECK(rates[r] == doctest::Approx(expected[r]));
  }
  SUBCASE("cosine: after a warm-up round, from lr towards lr·lr_final_fraction over the rounds left") {
    const auto rates = run_schedule({{"lr_schedule", "cosine"}, {"lr_warmup_rounds", 1}, {"lr_final_fraction", 0.2}}).rates;
    CHECK(rates[0] == doctest::Approx(0.05));
    // Rounds 2..7 are steps 0..5 of a 6-round decay from 0.1 to 0.02.
    for (std::size_t r = 1; r < rates.size(); ++r) {
      const double t = static_cast<double>(r - 1) / 6.0;
      CAPTURE(r);
      CHECK(rates[r] == doctest::Approx(0.02 + 0.08 * 0.5 * (1.0 + std::cos(std::numbers::pi * t))));
    }
    CHECK(rates[4] == doctest::Approx(0.06));  // halfway: the mean of 0.1 and 0.02
  }
}

TEST_CASE("sim config: the scheduled rate is the one devices train with: at rate 0 the model stands still") {
  // lr_gamma 0 every round: the first round trains at 0.1, every later one at 0.
  const auto still = run_schedule({{"lr_schedule", "step"}, {"lr_step_rounds", 1}, {"lr_gamma", 0.0}});
  const auto moving = run_schedule({});
  CHECK(still.rates[1] == 0.0);
  CHECK(largest_change(still.params[0], moving.params[0]) == 0.0);  // round 1 alike
  for (std::size_t r = 1; r < still.params.size(); ++r) {
    CAPTURE(r);
    // The output bias every subnet shares is averaged back: equal values, to a rounding.
    CHECK(largest_change(still.params[r], still.params[0]) <= 1e-6);
    CHECK(largest_change(moving.params[r], moving.params[r - 1]) > 1e-3);
  }
}

TEST_CASE("sim config: lr schedule keys out of range or unknown are refused, naming the key") {
  CHECK(config_error({{"lr_schedule", "linear"}}).find("'lr_schedule'") != std::string::npos);
  CHECK(config_error({{"lr_final_fraction", 1.5}}).find("'lr_final_fraction'") != std::string::npos);
  CHECK(config_error({{"lr_gamma", -0.5}}).find("'lr_gamma'") != std::string::npos);
  CHECK(config_error({{"lr_step_rounds", 0}}).find("'lr_step_rounds'") != std::string::npos);
  CHECK(config_error({{"lr_warmup_rounds", -1}}).find("'lr_warmup_rounds'") != std::string::npos);
}

TEST_CASE("simulation: labels the model cannot learn are refused as the data loads, naming the data and the example") {
  auto train = prototypes(50, 6);  // classes 0..2
  auto cfg = config_for("ist");
  cfg.model.outputs = 2;
  auto sim = sim::simulation::create(cfg, train, nullptr);
  REQUIRE_FALSE(sim.ok());
  CHECK(sim.error().message.find("prototypes: example ") == 0);
  CHECK(sim.error().message.find(" (counting from 0): label 2, but the model has 2 classes (labels 0 to 1)") != std::string::npos);
}

TEST_CASE("simulation: data of the wrong width is refused, naming the data") {
  auto train = prototypes(50, 6);
  auto cfg = config_for("ist");
  cfg.model.inputs = 13;
  auto sim = sim::simulation::create(cfg, train, nullptr);
  REQUIRE_FALSE(sim.ok());
  CHECK(sim.error().message.find("prototypes") != std::string::npos);
}

TEST_CASE("simulation: parameters pass through the codec both ways, and bytes count the encoded size") {
  auto train = prototypes(400, 7);
  auto test = prototypes(200, 8);
  std::uint64_t bytes[3] = {};
  double accuracy[3] = {};
  int i = 0;
  for (auto codec : {core::codec_kind::f32, core::codec_kind::f16, core::codec_kind::q8}) {
    auto cfg = config_for("ist");
    cfg.codec = codec;
    auto sim = sim::simulation::create(cfg, train, &test);
    REQUIRE(sim.ok());
    rounds::round_metrics last;
    while (!sim.value()->done()) {
      auto m = sim.value()->run_round();
      REQUIRE(m.ok());
      last = m.value();
    }
    bytes[i] = last.bytes_down;
    accuracy[i] = *last.test_accuracy;
    ++i;
  }
  CHECK(bytes[1] * 2 == bytes[0]);
  CHECK(bytes[2] < bytes[1]);
  CHECK(accuracy[1] > 0.9);
  CHECK(accuracy[2] > 0.9);
  auto bad = sim::parse_sim_config({{"codec", "f8"}}, "sim.json");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("'codec'") != std::string::npos);
}

TEST_CASE("simulation: standardize measures the fleet's statistics on the shards, as the hub does, and trains with them") {
  // The prototypes shifted and scaled per feature, as readings in different units.
  auto raw = prototypes(800, 1);
  std::vector<float> x(raw.features().begin(), raw.features().end());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = x[i] * std::pow(10.0f, static_cast<float>(i % 12) - 4.0f) + 50.0f;
  core::memory_table train(12, x, std::vector<float>(raw.targets().begin(), raw.targets().end()), "readings");
  auto cfg = config_for("ist");
  cfg.model.input_normalization = core::input_normalization_kind::standardize;
  cfg.data.validation_fraction = 0;  // every example trains, so the statistics are the whole set's
  auto sim = sim::simulation::create(cfg, train, nullptr);
  REQUIRE_MESSAGE(sim.ok(), (sim.ok() ? "" : sim.error().message));
  const core::input_normalization& n = sim.value()->engine().normalization();
  REQUIRE(n.size() == 12);
  // Every device was asked (200 examples each): the statistics are the whole training set's.
  core::fleet_stats whole(12, core::task_kind::classification, 3);
  REQUIRE(whole.add_sums(core::measure_sums(*core::make_table_stream(train), core::task_kind::classification, 3).value(), "all").ok());
  REQUIRE(whole.add_spread(core::measure_spread(*core::make_table_stream(train), whole.mean(), 0).value(), 800, "all").ok());
  const auto expected = whole.normalization().value();
  for (std::size_t j = 0; j < 12; ++j) {
    CAPTURE(j);
    CHECK(n.mean[j] == doctest::Approx(expected.mean[j]).epsilon(1e-6));
    CHECK(n.std[j] == doctest::Approx(expected.std[j]).epsilon(1e-5));
  }
  CHECK(sim.value()->engine().statistics().at("examples") == 800);
  // Every assignment carries the normalization to its device.
  REQUIRE(sim.value()->run_round().ok());

  // In the configuration: the training set's normalization standardize turns it on; a model that says
  // none explicitly contradicts it.
  const nlohmann::json csv = {{"format", "csv"}, {"features", "train.csv"}, {"label_column", 12}};
  auto on = sim::parse_sim_config({{"data", {{"train", csv}}}, {"model", {{"inputs", 12}, {"hidden", {8}}, {"outputs", 3}}}}, "sim.json");
  REQUIRE(on.ok());
  CHECK(on.value().model.input_normalization == core::input_normalization_kind::standardize);  // CSV's default
  CHECK(on.value().data.train.norm == core::normalization::none);  // the files are read as they are
  nlohmann::json explicit_std = csv;
  explicit_std["normalization"] = "standardize";
  CHECK(config_error({{"data", {{"train", explicit_std}}},
                      {"model", {{"inputs", 12}, {"hidden", {8}}, {"outputs", 3}, {"input_normalization", "none"}}}}) ==
        "sim.json: field 'data.train.normalization': standardize uses the fleet's statistics, but model.input_normalization is none");
  auto off = sim::parse_sim_config({{"data", {{"train", csv}}},
                                    {"model", {{"inputs", 12}, {"hidden", {8}}, {"outputs", 3}, {"input_normalization", "none"}}}},
                                   "sim.json");
  REQUIRE(off.ok());
  CHECK(off.value().data.train.norm == core::normalization::none);  // CSV's default follows the model

  // Under differential privacy the fleet's exact statistics would leave in the model beside ε: refused
  // by name (CSV's default standardize included), unless dp.publish_exact says the data is not private.
  const nlohmann::json model = {{"inputs", 12}, {"hidden", {8}}, {"outputs", 3}};
  const std::string refused = config_error({{"data", {{"train", csv}}}, {"model", model}, {"dp", {{"sample_rate", 0.5}}}});
  CHECK(testing::contains(refused, "field 'dp'"));
  CHECK(testing::contains(refused, "feature statistics are measured exactly"));
  CHECK(sim::parse_sim_config({{"data", {{"train", csv}}}, {"model", model}, {"dp", {{"sample_rate", 0.5}, {"publish_exact", true}}}},
                              "sim.json")
            .ok());
  nlohmann::json fixed = model;
  fixed["input_normalization"] = "none";
  CHECK(sim::parse_sim_config({{"data", {{"train", csv}}}, {"model", fixed}, {"dp", {{"sample_rate", 0.5}}}}, "sim.json").ok());
}

TEST_CASE("simulation: each device holds out data.validation_fraction of its shard and scores the model every eval_every rounds") {
  auto train = prototypes(800, 1);
  auto test = prototypes(300, 2);
  auto cfg = config_for("ist");
  cfg.evaluation.every = 4;  // after round 4, and after the last (6)
  auto sim = sim::simulation::create(cfg, train, &test);
  REQUIRE(sim.ok());
  std::vector<rounds::round_metrics> rounds;
  while (!sim.value()->done()) rounds.push_back(sim.value()->run_round().value());
  REQUIRE(rounds.size() == 6);
  for (std::size_t r = 0; r < rounds.size(); ++r) {
    CAPTURE(r);
    const bool due = r == 3 || r == 5;
    CHECK(rounds[r].fed.accuracy.has_value() == due);
    if (!due) continue;
    CHECK(*rounds[r].fed.devices == 4);
    CHECK(*rounds[r].fed.examples == 80);  // 20 of each device's 200: never trained on
    CHECK(*rounds[r].fed.bytes_down == 4 * core::encoded_bytes(cfg.model.full_arch(), cfg.codec));
    CHECK(*rounds[r].fed.accuracy_min <= *rounds[r].fed.accuracy_median);
    CHECK(*rounds[r].fed.accuracy_median <= *rounds[r].fed.accuracy_max);
  }
  // The held-out examples come from the same distribution: the devices agree with the test set.
  CHECK(*rounds.back().fed.accuracy > 0.85);
  CHECK(std::abs(*rounds.back().fed.accuracy - *rounds.back().test_accuracy) < 0.1);

  // validation_fraction 0: every example trains, and no device scores.
  cfg.data.validation_fraction = 0;
  auto all = sim::simulation::create(cfg, train, &test);
  REQUIRE(all.ok());
  auto m = all.value()->run_round();
  REQUIRE(m.ok());
  CHECK_FALSE(m.value().fed.devices.has_value());
  CHECK(config_error({{"data", {{"validation_fraction", 0.6}}}}).find("validation_fraction") != std::string::npos);
}

TEST_CASE("simulation: secure aggregation learns with replicated groups, and one round equals the plain mean within the quantization") {
  auto train = prototypes(1200, 11);
  auto test = prototypes(300, 12);
  for (const char* strategy : {"ist", "fedavg"}) {
    INFO(strategy);
    auto plain_cfg = config_for(strategy);
    plain_cfg.devices = 6;
    plain_cfg.data.validation_fraction = 0;
    auto secure_cfg = plain_cfg;
    secure_cfg.secure_aggregation = {.enabled = true, .replication = 3, .threshold = 0, .clip = 16.0, .bits = 32};
    auto plain = sim::simulation::create(plain_cfg, train, &test);
    auto secure = sim::simulation::create(secure_cfg, train, &test);
    REQUIRE((plain.ok() && secure.ok()));
    // IST under secure aggregation plans 6 / 3 = 2 groups; without it, one per device. Compare the
    // plain engine on the same plan: groups fixed to 2.
    if (std::string(strategy) == "ist") {
      plain_cfg.groups = 2;
      plain = sim::simulation::create(plain_cfg, train, &test);
      REQUIRE(plain.ok());
    }
    const std::vector<float> start(secure.value()->params().begin(), secure.value()->params().end());
    auto mp = plain.value()->run_round();
    auto ms = secure.value()->run_round();
    REQUIRE((mp.ok() && ms.ok()));
    CHECK(ms.value().groups == (std::string(strategy) == "ist" ? 2u : 1u));
    CHECK(ms.value().secagg.dropped == 0u);
    CHECK(ms.value().secagg.withheld == 0u);
    CHECK(secure.value()->engine().last_secure().clipped == 0u);
    CHECK(ms.value().to_json()["secure_aggregation"] == true);
    CHECK(mp.value().to_json()["secure_aggregation"] == false);
    // Every device trained the same floats in both runs; the secure model is the received one plus the
    // mean of the fixed-point changes: off by less than one step of the ring (clip 16, 6 summands, 32
    // bits: 4.5e-8) plus float rounding.
    const auto a = plain.value()->params(), b = secure.value()->params();
    double worst = 0;
    std::size_t moved = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
      moved += a[i] != start[i] ? 1 : 0;
    }
    CHECK(moved > a.size() / 2);
    CHECK(worst < 1e-6);
    rounds::round_metrics last;
    while (!secure.value()->done()) {
      auto m = secure.value()->run_round();
      REQUIRE(m.ok());
      last = m.value();
    }
    CHECK(secure.value()->engine().completed() == 6);
    CHECK(last.test_accuracy.value() > 0.9);
  }
}

TEST_CASE("simulation: secure aggregation with the same seed gives the same model; a fleet too small is refused") {
  auto train = prototypes(600, 13);
  auto cfg = config_for("ist");
  cfg.devices = 4;
  cfg.secure_aggregation = {.enabled = true, .replication = 2, .threshold = 0, .clip = 0.5, .bits = 24};
  auto a = sim::simulation::create(cfg, train, nullptr);
  auto b = sim::simulation::create(cfg, train, nullptr);
  REQUIRE((a.ok() && b.ok()));
  for (int i = 0; i < 2; ++i) {
    REQUIRE(a.value()->run_round().ok());
    REQUIRE(b.value()->run_round().ok());
  }
  const auto pa = a.value()->params(), pb = b.value()->params();
  CHECK(std::equal(pa.begin(), pa.end(), pb.begin()));

  cfg.devices = 1;
  cfg.strategy = rounds::strategy_kind::fedavg;
  auto c = sim::simulation::create(cfg, train, nullptr);
  REQUIRE(c.ok());
  auto r = c.value()->run_round();
  REQUIRE(!r.ok());
  CHECK(r.error().message.find("secure aggregation releases no sum from fewer than 2 devices") != std::string::npos);
}

TEST_CASE("sim config: examples/sim-fashion-ist.json loads as shipped and as the README's FedAvg run") {
  const std::string file = std::string(TESSERA_EXAMPLES_DIR) + "/sim-fashion-ist.json";
  for (const std::vector<std::string>& overrides : std::vector<std::vector<std::string>>{
           {}, {"rounds=50", "strategy=fedavg", "repartition_every=1", "whole_model_rounds=0"}, {"groups=4"}}) {
    const auto c = core::load_config(file, overrides, sim::read_sim_config);
    const std::string what = (overrides.empty() ? std::string("as shipped") : overrides.front()) + ": " +
                             (c.ok() ? std::string() : c.error().message);
    CHECK_MESSAGE(c.ok(), what);
  }
}

TEST_CASE("sim config: the convolutional examples load: sim-fashion-cnn.json (2-D) and sim-fashion-seq.json (1-D over the rows)") {
  for (const auto& [name, input] : std::vector<std::pair<std::string, std::vector<std::int64_t>>>{{"sim-fashion-cnn.json", {1, 28, 28}},
                                                                                                   {"sim-fashion-seq.json", {28, 28}}}) {
    CAPTURE(name);
    const auto c = core::load_config(std::string(TESSERA_EXAMPLES_DIR) + "/" + name, {}, sim::read_sim_config);
    REQUIRE_MESSAGE(c.ok(), (c.ok() ? std::string() : c.error().message));
    const core::model_spec& m = c.value().model;
    CHECK(m.input_shape == input);
    CHECK(m.inputs == 784);
    REQUIRE(m.layers.size() == 6);
    CHECK(m.layers[0].kind == (input.size() == 3 ? core::layer_kind::conv2d : core::layer_kind::conv1d));
    CHECK(m.hidden == (input.size() == 3 ? std::vector<std::int64_t>{32, 64, 128} : std::vector<std::int64_t>{64, 128, 128}));
    CHECK(core::validate(m, name).ok());
  }
}

TEST_CASE("sim config: the constrained examples share one budget: FedAvg's model is the widest it holds at batch 32, micro-batches "
          "hold one twice as wide, SLT trains one eight times as wide a stage at a time") {
  const auto load = [](const std::string& name) {
    auto c = core::load_config(std::string(TESSERA_EXAMPLES_DIR) + "/" + name, {}, sim::read_sim_config);
    REQUIRE_MESSAGE(c.ok(), (c.ok() ? std::string() : c.error().message));
    return c.value();
  };
  const sim::sim_config slt = load("sim-fashion-budget.json"), micro = load("sim-fashion-budget-micro.json"),
                        small = load("sim-fashion-budget-fedavg.json");
  REQUIRE(slt.budgets_mib == small.budgets_mib);
  REQUIRE(micro.budgets_mib == small.budgets_mib);
  const std::uint64_t budget = sim::device_budget_bytes(small, 0);
  const auto need = [](const sim::sim_config& c, std::int64_t width, std::int64_t rows) {
    core::mlp_arch a = c.model.full_arch();
    for (std::size_t l = 1; l + 1 < a.widths.size(); ++l) a.widths[l] = width;
    return core::bytes_needed(a, rows, c.momentum != 0.0f, c.codec);
  };
  // FedAvg's model: the widest of its family the budget holds at batch 32.
  CHECK(small.micro_batch == 0);
  CHECK(need(small, small.model.hidden.front(), small.batch) <= budget);
  CHECK(need(small, small.model.hidden.front() + 1, small.batch) > budget);
  // Micro-batched FedAvg's: twice as wide, over the budget at batch 32, within it in parts.
  CHECK(micro.model.hidden.front() == 2 * small.model.hidden.front());
  CHECK(need(micro, micro.model.hidden.front(), micro.batch) > budget);
  CHECK(need(micro, micro.model.hidden.front(), micro.micro_batch) <= budget);
  CHECK(micro.strategy == small.strategy);
  // SLT's: eight times as wide, over the budget whole even in micro-batches; every stage holds on every
  // device (the simulator checks each stage's plan against the budgets before round 1).
  CHECK(slt.strategy == rounds::strategy_kind::slt);
  CHECK(slt.slt.frozen_codec == core::codec_kind::q8);
  CHECK(slt.model.hidden.front() == 8 * small.model.hidden.front());
  CHECK(need(slt, slt.model.hidden.front(), slt.micro_batch) > budget);
  std::vector<float> x(16 * 784, 0.5f), y(16);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(i % 10);
  sim::sim_config few = slt;
  few.local_steps = 1;
  const auto created = sim::simulation::create(few, core::memory_table(784, std::move(x), std::move(y), "few"), nullptr);
  CHECK_MESSAGE(created.ok(), (created.ok() ? std::string() : created.error().message));
  for (const auto* c : {&slt, &micro, &small}) {
    CHECK(c->whole_model_rounds == 0);
    CHECK(c->devices == 8);
    CHECK(c->rounds == 60);
    CHECK(c->local_steps == small.local_steps);
    CHECK(c->lr.base == small.lr.base);
  }
}

// ---- resume

namespace {

// Runs `config` (with config.checkpoint set or not) to its end; the rounds it ran, in order.
std::vector<std::int64_t> run_to_end(const sim::sim_config& config, const core::memory_table& train, std::vector<float>& params) {
  auto sim = sim::simulation::create(config, train, nullptr);
  REQUIRE(sim.ok());
  std::vector<std::int64_t> ran;
  while (!sim.value()->done()) {
    auto m = sim.value()->run_round();
    REQUIRE_MESSAGE(m.ok(), (m.ok() ? std::string() : m.error().message));
    ran.push_back(m.value().round);
  }
  params.assign(sim.value()->params().begin(), sim.value()->params().end());
  return ran;
}

}  // namespace

TEST_CASE("simulation: a run resumed from its checkpoint ends with the model an uninterrupted run does, to the bit") {
  auto train = prototypes(500, 7);
  struct variant {
    const char* name;
    nlohmann::json fields;
  };
  const std::vector<variant> variants = {
      // A kept cut spans the interruption: the resumed rounds must cut with the span's seed.
      {"ist, kept cut", {{"strategy", "ist"}, {"repartition_every", 2}}},
      // The server optimizer's moments and steps come back from the checkpoint.
      {"fedavg, adam", {{"strategy", "fedavg"}, {"server_optimizer", {{"kind", "adam"}, {"lr", 0.01}}}}},
      // The accountant and the clip adaptive clipping moved come back; sampling and noise follow the round.
      {"ist, dp", {{"strategy", "ist"}, {"dp", {{"clip", 1.0}, {"noise_multiplier", 0.5}, {"sample_rate", 0.75}, {"adaptive_clip", {{"target_quantile", 0.5}, {"count_noise", 1.0}}}}}}},
  };
  for (const auto& v : variants) {
    INFO(std::string(v.name));
    nlohmann::json j = {{"model", {{"inputs", 12}, {"hidden", {32, 32}}, {"outputs", 3}}}, {"devices", 4}, {"rounds", 5},
                        {"local_steps", 7}, {"batch", 8}, {"lr", 0.05}, {"min_width", 4}};
    j.update(v.fields);
    auto parsed = sim::parse_sim_config(j, "sim.json");
    REQUIRE(parsed.ok());
    sim::sim_config whole = parsed.value();
    std::vector<float> uninterrupted, first, resumed;
    REQUIRE(run_to_end(whole, train, uninterrupted).size() == 5);

    testing::temp_dir dir("sim-resume");
    sim::sim_config part = whole;
    part.checkpoint = dir.file("sim.ckpt");
    part.rounds = 2;
    CHECK(run_to_end(part, train, first) == std::vector<std::int64_t>{1, 2});
    part.rounds = 5;
    CHECK(run_to_end(part, train, resumed) == std::vector<std::int64_t>{3, 4, 5});
    CHECK(first != uninterrupted);
    CHECK(resumed == uninterrupted);
    if (whole.dp.enabled) {
      // The second run's ε counts all five rounds, not the three it ran.
      auto again = sim::simulation::create(part, train, nullptr);
      REQUIRE(again.ok());
      auto fresh = sim::simulation::create(whole, train, nullptr);
      REQUIRE(fresh.ok());
      while (!fresh.value()->done()) REQUIRE(fresh.value()->run_round().ok());
      CHECK(again.value()->engine().epsilon() == doctest::Approx(fresh.value()->engine().epsilon()).epsilon(1e-12));
      CHECK(again.value()->engine().epsilon() > 0);
    }
  }
}

TEST_CASE("simulation: a checkpoint of another run is refused, naming the file and what differs") {
  auto train = prototypes(300, 8);
  testing::temp_dir dir("sim-resume-other");
  auto config = config_for("ist");
  config.checkpoint = dir.file("sim.ckpt");
  config.rounds = 1;
  std::vector<float> params;
  REQUIRE(run_to_end(config, train, params).size() == 1);
  config.seed = 99;
  const auto other_seed = sim::simulation::create(config, train, nullptr);
  REQUIRE_FALSE(other_seed.ok());
  CHECK(other_seed.error().code == rounds::errc::checkpoint_mismatch);
  CHECK(other_seed.error().message.find(config.checkpoint) != std::string::npos);
  CHECK(other_seed.error().message.find("seed 1") != std::string::npos);
  config.seed = 1;
  config.devices = 3;
  config.rounds = 2;
  const auto smaller_fleet = sim::simulation::create(config, train, nullptr);
  REQUIRE_FALSE(smaller_fleet.ok());
  CHECK(smaller_fleet.error().message.find("device-3") != std::string::npos);
}

TEST_CASE("simulator config: --help states the defaults the parser uses (help defaults)") {
  // The simulator standardizes CSV with the fleet's statistics.
  CHECK(testing::help_default(sim::read_sim_config, "data.train.normalization") == "scale_unit (csv: standardize)");
}

namespace {

// The toy run with budgets_mib and further fields.
sim::sim_config budgeted(const std::string& strategy, const nlohmann::json& budgets, const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::json j = {{"model", {{"inputs", 12}, {"hidden", {32, 32}}, {"outputs", 3}}},
                      {"strategy", strategy}, {"devices", 4}, {"groups", 2}, {"rounds", 3}, {"local_steps", 20},
                      {"batch", 8}, {"lr", 0.05}, {"min_width", 4}, {"budgets_mib", budgets}};
  j.update(extra);
  auto c = sim::parse_sim_config(j, "test.json");
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? std::string() : c.error().message));
  return c.value();
}

core::result<std::vector<rounds::round_metrics>> run_all(const sim::sim_config& c, const core::memory_table& train, core::memory_table* test) {
  TESSERA_ASSIGN_OR_RETURN(auto s, sim::simulation::create(c, train, test));
  std::vector<rounds::round_metrics> out;
  while (!s->done()) {
    TESSERA_ASSIGN_OR_RETURN(auto m, s->run_round());
    out.push_back(m);
  }
  return out;
}

}  // namespace

TEST_CASE("simulation: budgets_mib plans each device's subnet within its budget, as the hub plans an agent's, and names a device it cannot fit") {
  auto train = prototypes(800, 1);
  auto test = prototypes(300, 2);
  const double mib = 1024.0 * 1024.0;
  // The whole 12-32-32-3 model at batch 8, and a budget between what widths 10 and 12 need, below
  // half of every layer (each of the 2 groups' share).
  const sim::sim_config unbounded = config_for("ist");
  const core::mlp_arch whole = unbounded.model.full_arch();
  const auto need = [&](std::int64_t width) {
    core::mlp_arch a = whole;
    a.widths[1] = a.widths[2] = width;
    return static_cast<double>(core::bytes_needed(a, 8, unbounded.momentum != 0.0f, core::codec_kind::f32));
  };
  const double between = (need(10) + need(12)) / 2 / mib;

  auto plain = run_all(budgeted("ist", nlohmann::json::array()), train, &test);
  auto tight = run_all(budgeted("ist", {between}), train, &test);
  REQUIRE(plain.ok());
  REQUIRE_MESSAGE(tight.ok(), (tight.ok() ? std::string() : tight.error().message));
  // Half of each layer (16 neurons) without budgets; 10 of them within the budget: fewer bytes sent.
  const auto bytes = [](const std::vector<rounds::round_metrics>& r) { return r.front().bytes_down; };
  CHECK(bytes(tight.value()) < bytes(plain.value()));
  core::mlp_arch ten = whole;
  ten.widths[1] = ten.widths[2] = 10;
  CHECK(bytes(tight.value()) == 4 * core::encoded_bytes(ten, core::codec_kind::f32));

  // The summary the simulator prints, with the whole model's need.
  auto s = sim::simulation::create(budgeted("ist", {between}), train, &test);
  REQUIRE(s.ok());
  const std::string summary = s.value()->budget_summary();
  CHECK(summary.find("each device: ") == 0);
  CHECK(summary.find("; the model needs " + core::mib_text(s.value()->engine().whole_model_bytes()) + " to train at batch 8") != std::string::npos);
  CHECK(s.value()->engine().whole_model_bytes() == static_cast<std::size_t>(need(32)));
  auto mixed = sim::simulation::create(budgeted("ist", {1.0, 2.0, 1.0, 1.0}), train, &test);
  REQUIRE(mixed.ok());
  CHECK(mixed.value()->budget_summary().find("devices: 1.00 MiB to 2.00 MiB; ") == 0);
  // In micro-batches: what the whole batch needs, and what the parts need.
  auto parts = sim::simulation::create(budgeted("ist", {1.0}, {{"micro_batch", 2}}), train, &test);
  REQUIRE(parts.ok());
  const rounds::engine& e = parts.value()->engine();
  CHECK(e.whole_model_bytes() == core::bytes_needed(whole, 2, unbounded.momentum != 0.0f, core::codec_kind::f32));
  CHECK(e.whole_model_bytes() < e.whole_model_bytes(8));
  CHECK(parts.value()->budget_summary() == "each device: 1.00 MiB; the model needs " + core::mib_text(e.whole_model_bytes(8)) +
                                               " to train at batch 8, " + core::mib_text(e.whole_model_bytes()) + " in micro-batches of 2");

  // Refusals, by name: FedAvg on a model a device cannot hold, a device too small for the narrowest
  // subnet, whole-model rounds the fleet cannot run, a list of the wrong length.
  const auto fedavg = run_all(budgeted("fedavg", {1.0, 1.0, need(31) / mib, 1.0}), train, &test);
  REQUIRE(!fedavg.ok());
  CHECK(fedavg.error().message.find("device-2 cannot take part: FedAvg trains the whole model, which needs") != std::string::npos);
  const auto narrow = run_all(budgeted("ist", {need(3) / mib}), train, &test);
  REQUIRE(!narrow.ok());
  INFO(narrow.error().message);
  CHECK(narrow.error().message.find("no device can take part in this round (device-0: the narrowest subnet (min_width 4) needs") != std::string::npos);
  const auto whole_rounds = sim::simulation::create(budgeted("ist", {between}, {{"whole_model_rounds", 1}}), train, &test);
  REQUIRE(!whole_rounds.ok());
  CHECK(whole_rounds.error().message.find("whole_model_rounds 1 trains the whole model, which needs") != std::string::npos);
  CHECK(whole_rounds.error().message.find("device-0's budget is") != std::string::npos);
  // A capacity below 1 cannot hold the whole model either: said before round 1 too.
  nlohmann::json partial = {{"model", {{"inputs", 12}, {"hidden", {32, 32}}, {"outputs", 3}}}, {"strategy", "ist"}, {"devices", 2},
                            {"rounds", 3}, {"whole_model_rounds", 1}, {"capacities", {1.0, 0.5}}};
  const auto partial_config = sim::parse_sim_config(partial, "test.json");
  REQUIRE(partial_config.ok());
  const auto by_capacity = sim::simulation::create(partial_config.value(), train, &test);
  REQUIRE(!by_capacity.ok());
  CHECK(by_capacity.error().message.find("whole_model_rounds 1 trains the whole model, but device-1's capacity is 0.5") != std::string::npos);
  CHECK(config_error({{"devices", 4}, {"budgets_mib", {1.0, 2.0}}}).find("'budgets_mib': 2 entries for 4 devices") != std::string::npos);
  CHECK(config_error({{"devices", 2}, {"budgets_mib", {1.0}}, {"capacities", {1.0, 0.5}}}).find("'budgets_mib'") != std::string::npos);
}

TEST_CASE("simulation: slt trains stage by stage within the budgets, and a stage a device cannot train is refused before round 1") {
  auto train = prototypes(800, 1);
  auto test = prototypes(300, 2);
  const double mib = 1024.0 * 1024.0;
  // groups 0: as few as cover the stage's layer within the budgets.
  const nlohmann::json stages = {{"slt", {{"stage_rounds", {2, 2}}, {"head_fraction", 0.5}}}, {"rounds", 4}, {"groups", 0}};
  // Budgets that hold every stage, and one too small for stage 2 (hidden layer 1 frozen whole beside it).
  const core::mlp_arch whole = budgeted("slt", nlohmann::json::array(), stages).model.full_arch();
  const auto stage_need = [&](std::size_t k, double share) {
    const core::mlp_arch a = core::stage_arch(whole, {.stage = k, .head_fraction = 0.5}, share, 4);
    return static_cast<double>(core::bytes_needed(a, 8, true, core::codec_kind::f32)) / mib;
  };
  auto run = run_all(budgeted("slt", {stage_need(1, 1.0)}, stages), train, &test);
  REQUIRE_MESSAGE(run.ok(), (run.ok() ? std::string() : run.error().message));
  REQUIRE(run.value().size() == 4);
  // Stage 2 sends every device the model whole (hidden layer 2 fits it) and takes back layers 2 and 3 only.
  const core::mlp_arch second = core::stage_arch(whole, {.stage = 1, .head_fraction = 0.5}, 1.0, 4);
  CHECK(second.widths == whole.widths);
  CHECK(run.value()[2].bytes_down == 4 * core::encoded_bytes(second, core::codec_kind::f32));
  CHECK(run.value()[2].bytes_up == 4 * core::update_bytes(second, core::codec_kind::f32));
  CHECK(core::update_bytes(second, core::codec_kind::f32) < core::encoded_bytes(second, core::codec_kind::f32));
  CHECK(run.value().back().test_accuracy.value_or(0) > 0.6);  // three prototypes: it learns them
  const double small = stage_need(1, 0.0) * 0.99;
  REQUIRE(small > stage_need(0, 0.0));  // stage 1's narrowest subnet fits it, stage 2's does not
  const auto refused = sim::simulation::create(budgeted("slt", {1.0, 1.0, small, 1.0}, stages), train, &test);
  REQUIRE(!refused.ok());
  CHECK(refused.error().message.find("device-2 cannot take part in every stage: stage 2 of 2 (successive layer training) needs") !=
        std::string::npos);
}

TEST_CASE("simulation: devices_per_round trains a cohort drawn from the seed each round: the same seed, the same model") {
  auto train = prototypes(800, 5);
  auto cfg = config_for("fedavg");
  cfg.devices = 8;
  cfg.devices_per_round = 3;
  auto run = [&](std::uint64_t seed) {
    auto c = cfg;
    c.seed = seed;
    auto sim = sim::simulation::create(c, train, nullptr);
    REQUIRE(sim.ok());
    while (!sim.value()->done()) {
      auto m = sim.value()->run_round();
      REQUIRE(m.ok());
      CHECK(m.value().devices == (c.devices_per_round > 0 ? 3u : 8u));
      CHECK(m.value().ready == (c.devices_per_round > 0 ? std::optional<std::size_t>(8) : std::nullopt));
    }
    auto p = sim.value()->params();
    return std::vector<float>(p.begin(), p.end());
  };
  const auto a = run(1);
  CHECK(run(1) == a);
  CHECK(run(2) != a);
  // All eight devices take part in one round each when the cohort is the fleet: another model.
  cfg.devices_per_round = 0;
  CHECK(run(1) != a);
}
