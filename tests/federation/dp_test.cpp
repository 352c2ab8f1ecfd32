// Differential privacy over the network: tessera-hub and six tessera-edge agents with dp on (the hub
// adds the noise) report, round by round, the ε of tessera-sim with the same settings; a hub killed
// between rounds and restarted resumes with the ε it had; the run stops before the round that would
// pass dp.target_epsilon, and the exported model says which guarantee it carries. The clip adapts
// (Andrew et al.) without changing ε. Under secure aggregation the agents add the noise (each its
// Skellam share in the ring, and its count value for adaptive clipping) and the hub's ε is still the
// simulator's.
#include <csignal>
#include <string>
#include <vector>

#include "fleet.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/privacy/rdp.hpp"
#include "tessera/rounds/metrics.hpp"

namespace tessera::testing {
namespace {

constexpr int k_devices = 6;
constexpr double k_q = 0.5, k_sigma = 0.9, k_delta = 1e-5;

// The devices' certificates, 3000 training and 500 test examples of Fashion-MNIST, and the training
// examples dealt out to the devices with `seed`.
struct prepared {
  std::vector<std::string> ids;
  std::vector<nlohmann::json> data;
  nlohmann::json train, test;
};
prepared prepare(fleet& f, int seed) {
  prepared p{f.make_device_pki(k_devices), {}, f.write_subset("train", 3000), f.write_subset("t10k", 500)};
  p.data = f.make_shards({{"devices", k_devices}, {"seed", seed}, {"data", {{"train", p.train}}}});
  return p;
}

// tessera-sim's run of `run` on the same devices' data and test set: its metrics, `rounds` lines.
std::vector<nlohmann::json> simulate(fleet& f, nlohmann::json run, const prepared& p, int rounds) {
  run.update({{"devices", k_devices}, {"data", {{"train", p.train}, {"test", p.test}}}, {"metrics", f.file("sim.jsonl")}});
  f.run_sim("sim", run);
  return read_rounds(f.file("sim.jsonl"), rounds);
}

}  // namespace

TEST_CASE("federation: differential privacy — the hub's ε is tessera-sim's, survives a restart, and stops the run at its target") {
  fleet f("fed_dp");
  INFO(f.diagnostics());
  const prepared devices = prepare(f, 5);

  // Room for exactly four rounds.
  core::rdp_accountant a;
  const core::discrete_gaussian_mechanism noise{.sigma = k_sigma};  // the hub's
  a.compose(k_q, noise, 4);
  const double after4 = a.epsilon(k_delta).epsilon;
  a.compose(k_q, noise, 1);
  const double target = 0.5 * (after4 + a.epsilon(k_delta).epsilon);
  const nlohmann::json run = {{"model", {{"inputs", 784}, {"hidden", {32}}, {"outputs", 10}}},
                              {"strategy", "ist"},
                              {"groups", 2},
                              {"rounds", 10},
                              {"local_steps", 20},
                              {"batch", 16},
                              {"lr", 0.05},
                              {"seed", 5},
                              {"dp", {{"sample_rate", k_q}, {"noise_multiplier", k_sigma}, {"clip", 0.5}, {"delta", k_delta},
                                      {"target_epsilon", target}, {"adaptive_clip", {{"count_noise", 1.0}}}}}};

  const auto sim_metrics = simulate(f, run, devices, 4);

  nlohmann::json hub_json = run;
  hub_json.update({{"min_devices", k_devices}, {"max_devices", k_devices}, {"device_wait_s", 60}, {"round_deadline_s", 60},
                   {"checkpoint_dir", f.file("checkpoints")}, {"metrics", f.file("hub.jsonl")}, {"output", f.file("hub.safetensors")}});
  hub_handle first = f.start_hub("hub-1", hub_json);
  f.start_agents(devices.ids, devices.data, first.port);
  CHECK(wait_for_log(first.process, "differential privacy: the hub adds the noise", 10s));
  REQUIRE_MESSAGE(eventually([&] { return read_metrics(f.file("hub.jsonl")).size() >= 2 || !first.process.running(); }, 90s),
                  "round 2 did not complete within 90 s");
  first.process.kill();
  const std::size_t before_kill = read_metrics(f.file("hub.jsonl")).size();
  REQUIRE(before_kill >= 2);

  hub_json["listen"] = "127.0.0.1:" + std::to_string(first.port);
  hub_handle second = f.start_hub("hub-2", hub_json);
  if (before_kill < 4) CHECK(wait_for_log(second.process, "ε " , 10s));
  const auto code = second.process.wait_exit(120s);
  REQUIRE_MESSAGE(code.has_value(), "the restarted hub did not finish within 120 s");
  CHECK(*code == 0);
  CHECK(count_of(second.process.err() + first.process.err(), "stopping: round 5 would take ε from") == 1);

  // Four rounds in all, each with the simulator's ε (it depends on q, σ and the round only), the noise
  // added by the hub, and none of the figures that are exact functions of the devices' data (the
  // sampled and clipped counts, the training loss, the examples) published: dp.publish_exact is off. A kill between a round's
  // checkpoint and its metrics line loses that line (the round is not redone): every line there is
  // must agree, and the last is round 4.
  const auto hub_metrics = read_metrics(f.file("hub.jsonl"));
  REQUIRE(hub_metrics.size() >= 3);
  REQUIRE(hub_metrics.back().at("round") == 4);
  int moved = 0;
  for (std::size_t i = 0; i < hub_metrics.size(); ++i) {
    const auto& h = hub_metrics[i];
    CAPTURE(h.dump());
    const auto r = h.at("round").get<std::size_t>();
    REQUIRE(r >= 1);
    REQUIRE(r <= 4);
    CHECK(h.at("epsilon").get<double>() == sim_metrics[r - 1].at("epsilon").get<double>());
    CHECK(h.at("dp_noise") == "hub");
    for (const char* exact : {"dp_sampled", "dp_clipped", "train_loss", "examples", "update_norm_max"}) CHECK_FALSE(h.contains(exact));
    CHECK(h.at("withheld").size() == rounds::withheld_figures().size());
    // Adaptive clipping: it starts at dp.clip and moves from round to round, across the restart too. The
    // noised count is a whole number of halves (the hub's noise is discrete), so a round may land on
    // the target share exactly and leave the clip where it was: one round's standing still is no fault,
    // never moving is.
    if (r == 1) CHECK(h.at("dp_clip").get<double>() == 0.5);
    else if (i > 0 && hub_metrics[i - 1].at("round") == r - 1)
      moved += h.at("dp_clip").get<double>() != hub_metrics[i - 1].at("dp_clip").get<double>() ? 1 : 0;
    CHECK(h.at("dp_clip").get<double>() > 0);
  }
  CHECK(moved >= 1);
  CHECK(hub_metrics.back().at("epsilon").get<double>() <= target);
  const core::stored_model model = load_model_or_fail(f.file("hub.safetensors"));
  CHECK(model.metadata.at("tessera.rounds") == "4");
  CHECK(std::stod(model.metadata.at("tessera.dp.epsilon")) == doctest::Approx(hub_metrics.back().at("epsilon").get<double>()).epsilon(1e-5));
  const auto dp = nlohmann::json::parse(model.metadata.at("tessera.dp"));
  CHECK(dp.at("noise_multiplier") == k_sigma);
  CHECK(all_finite(model.params));
}

}  // namespace tessera::testing

namespace tessera::testing {

TEST_CASE("federation: differential privacy under secure aggregation — the devices add the noise, the hub's ε is tessera-sim's (an MLP, a CNN)") {
  // The CNN: the clip and the devices' noise over a convolutional subnet's channel blocks.
  const nlohmann::json cnn = nlohmann::json::parse(R"({"input_shape": [1, 28, 28], "outputs": 10, "layers": [
      {"conv2d": {"channels": 16, "kernel": 3}}, {"max_pool": 2}, {"conv2d": {"channels": 16, "kernel": 3, "stride": 2}},
      {"flatten": true}, {"dense": 16}]})");
  const nlohmann::json mlp = {{"inputs", 784}, {"hidden", {32}}, {"outputs", 10}};
  for (const bool with_cnn : {false, true}) {
    fleet f(with_cnn ? "fed_dp_secure_cnn" : "fed_dp_secure");
    INFO(f.diagnostics());
    CAPTURE(with_cnn);
    const prepared devices = prepare(f, 7);
    const nlohmann::json run = {{"model", with_cnn ? cnn : mlp},
                                {"strategy", "ist"},
                                {"groups", 2},
                                {"rounds", 3},
                                {"local_steps", 20},
                                {"batch", 16},
                                {"lr", 0.05},
                                {"seed", 7},
                                {"secure_aggregation", {{"replication", 3}, {"threshold", 2}}},
                                {"dp", {{"sample_rate", 0.8}, {"noise_multiplier", k_sigma}, {"clip", 0.5}, {"delta", k_delta},
                                        {"adaptive_clip", {{"count_noise", 1.0}}}}}};

    const auto sim_metrics = simulate(f, run, devices, 3);

    nlohmann::json hub_json = run;
    hub_json.update({{"min_devices", k_devices}, {"max_devices", k_devices}, {"device_wait_s", 60}, {"round_deadline_s", 60},
                     {"metrics", f.file("hub.jsonl")}, {"output", f.file("hub.safetensors")}});
    hub_handle hub = f.start_hub("hub", hub_json);
    const auto agents = f.start_agents(devices.ids, devices.data, hub.port);
    CHECK(wait_for_log(hub.process, "differential privacy: each device adds its share of the noise under secure aggregation", 10s));
    const auto code = hub.process.wait_exit(180s);
    REQUIRE_MESSAGE(code.has_value(), "the hub did not finish within 180 s");
    CHECK(*code == 0);

    // The same ε round by round as the simulator (it depends on q, σ, the clip, the ring and the
    // population only), the noise the devices', and each uploading agent saying it added its share.
    const auto hub_metrics = read_metrics(f.file("hub.jsonl"));
    REQUIRE(hub_metrics.size() == 3);
    std::size_t released = 0;
    for (std::size_t r = 0; r < 3; ++r) {
      CAPTURE(hub_metrics[r].dump());
      CHECK(hub_metrics[r].at("epsilon").get<double>() == sim_metrics[r].at("epsilon").get<double>());
      CHECK(hub_metrics[r].at("epsilon").get<double>() > 0);
      CHECK(hub_metrics[r].at("dp_noise") == "devices");
      CHECK(sim_metrics[r].at("dp_noise") == "devices");
      if (hub_metrics[r].at("devices").get<std::size_t>() >= 2) released += 3 - hub_metrics[r].at("secagg_withheld").get<std::size_t>();
    }
    CHECK(released > 0);
    // Adaptive clipping with the count in the ring: the clip starts at dp.clip and moves, as the
    // simulator's does (the noise differs: the agents draw theirs from their CSPRNG).
    CHECK(hub_metrics[0].at("dp_clip").get<double>() == 0.5);
    CHECK(hub_metrics[2].at("dp_clip").get<double>() != 0.5);
    std::size_t carried = 0;
    for (auto* a : agents) carried += count_of(a->err(), "share of the privacy noise");
    CHECK(carried > 0);
    const core::stored_model model = load_model_or_fail(f.file("hub.safetensors"));
    CHECK(std::stod(model.metadata.at("tessera.dp.epsilon")) == doctest::Approx(hub_metrics.back().at("epsilon").get<double>()).epsilon(1e-5));
    CHECK(all_finite(model.params));
    if (with_cnn) {  // the convolutional model, trained away from its seeded start under the devices' noise
      CHECK(model.spec.layers.size() == 5);
      std::vector<float> initial(model.params.size());
      core::initialize(model.spec, initial);
      CHECK(model.params != initial);
    }
  }
}

}  // namespace tessera::testing
