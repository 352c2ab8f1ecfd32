// Tabular data whose features are measured in very different units: the federation standardizes them
// with statistics it measures itself (core/data/fed_stats.hpp), as tessera-sim does from its shards, and the
// result is the simulator's, bit for bit. Without standardization the same run learns far less.
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "fleet.hpp"
#include "tessera/core/base/rng.hpp"

namespace tessera::testing {
namespace {

constexpr int k_devices = 4;
constexpr int k_rounds = 25;
constexpr int k_features = 8;

// Sensor-like readings: feature j is a latent standard normal z_j, shifted and scaled by 10^(j-3) (from
// 1e-3 to 1e4). The class depends nonlinearly on the smallest and the largest feature and on a middle
// one: inside a circle in (z0, z7) is class 0, outside it the sign of z3 decides between 1 and 2.
void write_tabular(const std::string& path, std::int64_t n, std::uint64_t seed) {
  core::rng r(seed);
  const auto normal = [&r] {
    const double u = 1.0 - r.uniform_double(), v = r.uniform_double();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  };
  std::FILE* f = std::fopen(path.c_str(), "w");
  REQUIRE(f != nullptr);
  for (int j = 0; j < k_features; ++j) std::fprintf(f, "sensor_%d,", j);
  std::fprintf(f, "label\n");
  for (std::int64_t i = 0; i < n; ++i) {
    double z[k_features];
    for (double& v : z) v = normal();
    const int label = z[0] * z[0] + z[7] * z[7] < 1.0 ? 0 : (z[3] > 0 ? 1 : 2);
    for (int j = 0; j < k_features; ++j) std::fprintf(f, "%.9g,", std::pow(10.0, j - 3) * (z[j] + 3.0));
    std::fprintf(f, "%d\n", label);
  }
  REQUIRE(std::fclose(f) == 0);
}

nlohmann::json run_fields() {
  return {{"model", {{"inputs", k_features}, {"hidden", {64, 64}}, {"outputs", 3}}},
          {"strategy", "ist"},
          {"rounds", k_rounds},
          {"local_steps", 40},
          {"batch", 32},
          {"lr", 0.05},
          {"seed", 5}};
}

nlohmann::json csv_source(const std::string& path, const std::string& normalization) {
  return {{"format", "csv"}, {"features", path}, {"header", true}, {"label_column", k_features}, {"normalization", normalization}};
}

double final_accuracy(const std::string& metrics_path) {
  return read_rounds(metrics_path, k_rounds).back().at("test_accuracy").get<double>();
}

// The hub of these runs: all four devices, its test set standardized by the fleet's statistics, its model
// and metrics in the fleet's folder; `extra` on top.
nlohmann::json hub_fields(fleet& f, const std::string& test, const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::json j = run_fields();
  j.update({{"min_devices", k_devices},
            {"max_devices", k_devices},
            {"device_wait_s", 60},
            {"round_deadline_s", 60},
            {"validation", csv_source(test, "standardize")},
            {"output", f.file("hub.safetensors")},
            {"metrics", f.file("hub.jsonl")}});
  j.update(extra);
  return j;
}

// The devices' scores in the hub's metrics, round by round, against the simulator's: every device scored
// its held-out 10% (80 examples each), and the figures are the same to the bit. With `masked` the scores
// were one masked sum: no device's own accuracy.
void check_fed_scores(const std::string& hub_metrics, const std::string& sim_metrics, bool masked) {
  const auto hub_rounds = read_metrics(hub_metrics);
  const auto sim_rounds = read_metrics(sim_metrics);
  REQUIRE(!hub_rounds.empty());
  REQUIRE(hub_rounds.size() == sim_rounds.size());
  for (std::size_t r = 0; r < hub_rounds.size(); ++r) {
    CAPTURE(r);
    REQUIRE(hub_rounds[r].contains("fed_accuracy"));
    CHECK(hub_rounds[r].at("fed_devices") == k_devices);
    CHECK(hub_rounds[r].at("fed_examples") == 320);
    CHECK(hub_rounds[r].at("fed_accuracy").get<double>() == sim_rounds[r].at("fed_accuracy").get<double>());
    CHECK(hub_rounds[r].at("fed_loss").get<double>() == sim_rounds[r].at("fed_loss").get<double>());
    CHECK(hub_rounds[r].at("fed_accuracy_min").is_null() == masked);
  }
}

// The devices' certificates, 3200 training examples and 800 test examples; returns the device ids.
std::vector<std::string> set_up(fleet& f, const std::string& train, const std::string& test) {
  auto ids = f.make_device_pki(k_devices);
  write_tabular(train, 3200, 1);
  write_tabular(test, 800, 2);
  return ids;
}

}  // namespace

TEST_CASE("federation: tabular data in mixed units, standardized with the fleet's own statistics, equals tessera-sim") {
  fleet f("fed_tabular");
  INFO(f.diagnostics());
  const std::string train = f.file("train.csv"), test = f.file("test.csv");
  const std::vector<std::string> ids = set_up(f, train, test);

  // The simulator, standardized (its shards' statistics) and not.
  const auto sim = [&](const std::string& name, const std::string& normalization) {
    nlohmann::json s = run_fields();
    s["devices"] = k_devices;
    s["data"] = {{"train", csv_source(train, normalization)}, {"test", csv_source(test, normalization)}};
    s["output"] = f.file(name + ".safetensors");
    s["metrics"] = f.file(name + ".jsonl");
    return s;
  };
  f.run_sim("sim-standardize", sim("sim-standardize", "standardize"));
  f.run_sim("sim-none", sim("sim-none", "none"));
  const double sim_std = final_accuracy(f.file("sim-standardize.jsonl"));
  const double sim_none = final_accuracy(f.file("sim-none.jsonl"));
  MESSAGE("tessera-sim: standardize " << 100 * sim_std << "%, none " << 100 * sim_none << "%");
  CHECK(sim_std >= sim_none + 0.15);

  // The same shards on a real fleet: the hub has no training data, only its test set, read as it is
  // and standardized by the model with the statistics the fleet measured.
  const std::vector<nlohmann::json> data = f.make_shards(sim("shards", "standardize"));
  for (const auto& d : data) CHECK(d.at("normalization") == "standardize");
  hub_handle hub = f.start_hub("hub", hub_fields(f, test));
  const auto agents = f.start_agents(ids, data, hub.port, k_rounds);
  require_exit_0(hub.process, 120s);
  CHECK(count_of(hub.process.err(), "measuring the fleet's input statistics on 4 device(s)") == 1);
  for (child_process* a : agents) {
    REQUIRE(a->wait_exit(30s).has_value());
    CHECK(count_of(a->err(), "statistics (pass 1) of 720 examples sent") == 1);
    CHECK(count_of(a->err(), "statistics (pass 2) of 720 examples sent") == 1);
    CHECK(count_of(a->err(), "refusing") == 0);
  }
  const double fleet_acc = final_accuracy(f.file("hub.jsonl"));
  MESSAGE("hub and 4 agents over TLS: standardize " << 100 * fleet_acc << "%");
  CHECK(std::abs(fleet_acc - sim_std) <= 0.01);
  CHECK(fleet_acc >= sim_none + 0.15);

  // Every round the devices scored the model on their held-out 10%, as the simulator's devices did:
  // the same figures to the bit.
  check_fed_scores(f.file("hub.jsonl"), f.file("sim-standardize.jsonl"), false);
  const auto hub_rounds = read_metrics(f.file("hub.jsonl"));
  MESSAGE("federated validation accuracy after round " << k_rounds << ": " << 100 * hub_rounds.back().at("fed_accuracy").get<double>()
                                                       << "% (hub's test set: " << 100 * fleet_acc << "%)");

  // The statistics are the simulator's to the bit, and so is the model.
  const core::stored_model from_hub = load_model_or_fail(f.file("hub.safetensors"));
  const core::stored_model from_sim = load_model_or_fail(f.file("sim-standardize.safetensors"));
  CHECK(from_hub.spec.input_normalization == core::input_normalization_kind::standardize);
  REQUIRE(from_hub.normalization.size() == static_cast<std::size_t>(k_features));
  CHECK(from_hub.normalization == from_sim.normalization);
  CHECK(from_hub.params == from_sim.params);
  // A sanity check of what was measured: feature 7 is 1e4 · (z + 3), so about 3e4 ± 1e4.
  CHECK(std::abs(from_hub.normalization.mean[7] - 3e4f) < 1.5e3f);
  CHECK(std::abs(from_hub.normalization.std[7] - 1e4f) < 1e3f);
  CHECK(std::abs(from_hub.normalization.mean[0] - 3e-3f) < 2e-4f);

  // The exported file alone, in numpy: the hub's accuracy.
  const std::string out = f.run_tool("load-model", {"/usr/bin/python3", std::string(TESSERA_SOURCE_DIR) + "/examples/load_model.py",
                                                    f.file("hub.safetensors"), "--csv", test, "--header", "--label-column",
                                                    std::to_string(k_features)});
  char expected[64];
  std::snprintf(expected, sizeof expected, "test accuracy (numpy): %.2f%% on 800 examples", 100 * fleet_acc);
  CHECK_MESSAGE(out.find(expected) != std::string::npos, out);
}

TEST_CASE("federation: under secure aggregation the fleet's statistics and scores are masked sums, tessera-sim's to the bit") {
  fleet f("fed_tabular_masked");
  INFO(f.diagnostics());
  const std::string train = f.file("train.csv"), test = f.file("test.csv");
  const std::vector<std::string> ids = set_up(f, train, test);
  constexpr int rounds = 4;
  // Feature j is 10^(j-3)·(z + 3): each its own bound (and the target's, unused), or the smallest
  // features' squares would be lost in a 64-bit ring scaled for the largest.
  std::vector<double> bounds;
  for (int j = 0; j < k_features; ++j) bounds.push_back(10 * std::pow(10.0, j - 3));
  bounds.push_back(1.0);
  const nlohmann::json bounded = {{"replication", 2}, {"statistics_bounds", bounds}};
  const auto sim = [&](const std::string& name, bool secure) {
    nlohmann::json s = run_fields();
    s["rounds"] = rounds;
    s["devices"] = k_devices;
    if (secure) s["secure_aggregation"] = bounded;
    s["data"] = {{"train", csv_source(train, "standardize")}, {"test", csv_source(test, "standardize")}};
    s["output"] = f.file(name + ".safetensors");
    s["metrics"] = f.file(name + ".jsonl");
    return s;
  };
  f.run_sim("sim-masked", sim("sim-masked", true));
  f.run_sim("sim-plain", sim("sim-plain", false));

  const std::vector<nlohmann::json> data = f.make_shards(sim("shards", true));
  hub_handle hub = f.start_hub("hub", hub_fields(f, test, {{"rounds", rounds}, {"secure_aggregation", bounded}}));
  const auto agents = f.start_agents(ids, data, hub.port, rounds);
  require_exit_0(hub.process, 120s);
  CHECK(count_of(hub.process.err(), "the statistics' pass 1 as a masked sum over 4 device(s) (threshold 3)") == 1);
  CHECK(count_of(hub.process.err(), "the statistics' pass 2 as a masked sum over 4 device(s) (threshold 3)") == 1);
  for (child_process* a : agents) {
    REQUIRE(a->wait_exit(30s).has_value());
    CHECK(count_of(a->err(), "statistics (pass 1) masked and sent") == 1);
    CHECK(count_of(a->err(), "statistics (pass 2) masked and sent") == 1);
    CHECK(count_of(a->err(), "examples sent") == 0);  // nothing in the clear
    for (int r = 1; r <= rounds; ++r) CHECK(count_of(a->err(), "the evaluation of round " + std::to_string(r) + " masked and sent") == 1);
    CHECK(count_of(a->err(), "refusing") == 0);
  }
  // The devices' scores, one masked sum a round: the fleet's accuracy and loss, the simulator's to the
  // bit, and no device's own (no spread of the devices' accuracies).
  REQUIRE(read_metrics(f.file("hub.jsonl")).size() == static_cast<std::size_t>(rounds));
  check_fed_scores(f.file("hub.jsonl"), f.file("sim-masked.jsonl"), true);
  // The released sums are the simulator's plain sum of the same encodings: the same statistics and the
  // same model, to the bit.
  const core::stored_model from_hub = load_model_or_fail(f.file("hub.safetensors"));
  const core::stored_model from_sim = load_model_or_fail(f.file("sim-masked.safetensors"));
  REQUIRE(from_hub.normalization.size() == static_cast<std::size_t>(k_features));
  CHECK(from_hub.normalization == from_sim.normalization);
  CHECK(from_hub.params == from_sim.params);
  // And the plain statistics, within float32's rounding of each device's sums (2^-24 of each): the
  // masked sums lose nothing a float32 model would keep.
  const core::stored_model plain = load_model_or_fail(f.file("sim-plain.safetensors"));
  for (std::size_t j = 0; j < static_cast<std::size_t>(k_features); ++j) {
    CAPTURE(j);
    CHECK(from_hub.normalization.mean[j] == doctest::Approx(plain.normalization.mean[j]).epsilon(4 * 0x1p-24));
    CHECK(from_hub.normalization.std[j] == doctest::Approx(plain.normalization.std[j]).epsilon(1e-5));
  }
}

TEST_CASE("federation: the devices' evaluation equals the hub's when their validation examples are its test set") {
  fleet f("fed_eval");
  INFO(f.diagnostics());
  const std::string train = f.file("train.csv"), test = f.file("test.csv");
  const std::vector<std::string> ids = set_up(f, train, test);
  // The test set dealt out: device d's validation file holds rows 200d to 200d+199 (with the header).
  const std::vector<std::string> lines = [&] {
    std::vector<std::string> out;
    std::istringstream in(read_text(test));
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }();
  REQUIRE(lines.size() == 801);
  nlohmann::json sim = run_fields();
  sim["devices"] = k_devices;
  sim["data"] = {{"train", csv_source(train, "standardize")}};
  const std::vector<nlohmann::json> shards = f.make_shards(sim);

  const auto federate = [&](const std::string& name, nlohmann::json hub_extra, int rounds) {
    nlohmann::json hub_json = run_fields();
    hub_json.update({{"rounds", rounds},
                     {"min_devices", k_devices},
                     {"max_devices", k_devices},
                     {"device_wait_s", 60},
                     {"round_deadline_s", 60},
                     {"metrics", f.file(name + ".jsonl")}});
    hub_json.update(hub_extra);
    hub_handle hub = f.start_hub(name, hub_json);
    std::vector<child_process*> agents;
    for (int d = 0; d < k_devices; ++d) {
      const std::string part = f.file(name + "-validation-" + std::to_string(d) + ".csv");
      std::string text = lines[0] + "\n";
      for (int i = 0; i < 200; ++i) text += lines[static_cast<std::size_t>(1 + 200 * d + i)] + "\n";
      write_bytes(part, text);
      nlohmann::json data = shards[static_cast<std::size_t>(d)];
      data["validation"] = csv_source(part, "none");
      nlohmann::json a = f.agent_config(ids[static_cast<std::size_t>(d)], data, hub.port);
      a["exit_after_rounds"] = rounds;
      agents.push_back(&f.start_agent(name + "-" + ids[static_cast<std::size_t>(d)], a));
    }
    require_exit_0(hub.process, 120s);
    for (child_process* a : agents) {
      REQUIRE(a->wait_exit(30s).has_value());
      CHECK(count_of(a->err(), "validation examples") >= 1);
    }
    return read_metrics(f.file(name + ".jsonl"));
  };

  // The hub holds the whole test set; the devices hold it between them.
  const auto both = federate("hub", {{"validation", csv_source(test, "standardize")}}, 6);
  REQUIRE(both.size() == 6);
  for (const auto& m : both) {
    CAPTURE(m.dump());
    REQUIRE(m.contains("fed_accuracy"));
    CHECK(m.at("fed_devices") == k_devices);
    CHECK(m.at("fed_examples") == 800);
    CHECK(m.at("fed_accuracy").get<double>() == m.at("test_accuracy").get<double>());
    // Sums in another order (per device, then across devices): equal to rounding.
    CHECK(m.at("fed_loss").get<double>() == doctest::Approx(m.at("test_loss").get<double>()).epsilon(1e-6));
    CHECK(m.at("fed_accuracy_min").get<double>() <= m.at("fed_accuracy").get<double>());
    CHECK(m.at("fed_accuracy_max").get<double>() >= m.at("fed_accuracy").get<double>());
  }
  MESSAGE("after 6 rounds: the hub's test accuracy " << 100 * both.back().at("test_accuracy").get<double>() << "%, the devices' "
                                                     << 100 * both.back().at("fed_accuracy").get<double>() << "%");

  // No data at the hub: the devices' figure is the run's, and patience watches it.
  nlohmann::json model = run_fields().at("model");
  model["input_normalization"] = "standardize";  // the fleet's statistics, as the agents' data asks
  const auto fleet_only = federate("no-data", {{"model", model}, {"eval_every", 2}, {"patience", 50}}, 4);
  REQUIRE(fleet_only.size() == 4);
  for (std::size_t r = 0; r < fleet_only.size(); ++r) {
    CAPTURE(r);
    CHECK(fleet_only[r].value("test_accuracy", nlohmann::json()).is_null());  // the hub has no test set
    CHECK(fleet_only[r].contains("fed_accuracy") == (r % 2 == 1));  // after rounds 2 and 4
  }
  CHECK(fleet_only.back().at("fed_accuracy").get<double>() > 0.5);
}

}  // namespace tessera::testing
