#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tessera/core/ist.hpp"
#include "tessera/core/mlp.hpp"
#include "tessera/core/rng.hpp"
#include "tessera/sim/shards.hpp"
#include "tessera/sim/simulation.hpp"
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
  core::model_spec big;
  big.inputs = 784;
  big.hidden = {512, 512};
  big.outputs = 10;
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
