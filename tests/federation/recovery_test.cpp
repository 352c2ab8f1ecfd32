// Crashes in the middle of a round: a hub killed with SIGKILL resumes from its checkpoint while the
// agents reconnect on their own; a hub whose newest checkpoint is damaged resumes from the previous one;
// an agent killed with SIGKILL becomes a straggler whose neurons keep their values, and is taken back
// once it returns.
#include <cmath>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "fleet.hpp"
#include "tessera/core/math/ist.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/hub/hub_config.hpp"
#include "tessera/rounds/checkpoint.hpp"

namespace tessera::testing {
namespace {

constexpr int k_devices = 3;

// 1000 local steps take a few tenths of a second per round: long enough that a kill timed from the
// agent's "round N: subnet" line lands while the round is still open (the tests check that it did).
// The fields tessera-sim shares with the hub (rounds/run_config.hpp): with them the simulator replays the
// run as it would have gone uninterrupted.
nlohmann::json run_fields(int rounds) {
  return {{"model", {{"inputs", 784}, {"hidden", {64, 64}}, {"outputs", 10}}},
          {"strategy", "ist"},
          {"rounds", rounds},
          {"local_steps", 1000},
          {"batch", 32},
          {"lr", 0.02},
          {"seed", 11}};
}

// The hub's configuration: the run, its files in the folder, and rounds that wait for all the devices
// (a minute to join, a minute to report). `local_steps` shortens the rounds of a case about restarts.
nlohmann::json hub_config(fleet& f, const nlohmann::json& validation, int rounds, int local_steps = 1000) {
  nlohmann::json j = run_fields(rounds);
  j.update({{"local_steps", local_steps},
            {"validation", validation},
            {"checkpoint_dir", f.file("checkpoints")},
            {"metrics", f.file("metrics.jsonl")},
            {"output", f.file("model.safetensors")},
            {"min_devices", k_devices},
            {"max_devices", k_devices},
            {"device_wait_s", 60},
            {"round_deadline_s", 60}});
  return j;
}

// Certificates for the devices, a training and a validation subset of Fashion-MNIST, and each device's
// shard (the simulator's split, seed 11): the device ids, their "data" objects, the hub's validation
// set, and the training subset.
struct prepared {
  std::vector<std::string> ids;
  std::vector<nlohmann::json> data;
  nlohmann::json validation;
  nlohmann::json train;
};
prepared prepare(fleet& f) {
  auto ids = f.make_device_pki(k_devices);
  const nlohmann::json train = f.write_subset("train", 3000), validation = f.write_subset("t10k", 1000);
  return {std::move(ids), f.make_shards({{"devices", k_devices}, {"seed", 11}, {"data", {{"train", train}}}}), validation, train};
}

// The L2 distance between two parameter vectors of one model (infinite if their sizes differ).
double distance(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  return std::sqrt(d);
}

void check_round_figures(const nlohmann::json& m) {
  CAPTURE(m.dump());
  CHECK(std::isfinite(m.at("train_loss").get<double>()));
  REQUIRE(m.at("test_accuracy").is_number());
  const double accuracy = m.at("test_accuracy").get<double>();
  CHECK(accuracy >= 0.0);
  CHECK(accuracy <= 1.0);
}

}  // namespace

TEST_CASE("federation: a hub killed mid-round resumes from its checkpoint; the agents reconnect by themselves") {
  constexpr int rounds = 5;
  fleet f("fed_hub_crash");
  INFO(f.diagnostics());
  const auto [ids, data, validation, train] = prepare(f);

  nlohmann::json config = hub_config(f, validation, rounds);
  hub_handle first = f.start_hub("hub-1", config);
  const auto agents = f.start_agents(ids, data, first.port);

  // Round 2 done and checkpointed, round 3 dispatched: every agent holds its round-3 assignment.
  REQUIRE_MESSAGE(eventually([&] { return read_metrics(f.file("metrics.jsonl")).size() >= 2 || !first.process.running(); }, 90s),
                  "round 2 did not complete within 90 s");
  for (child_process* a : agents)
    REQUIRE_MESSAGE(wait_for_log(*a, "round 3: subnet of", 30s), a->name() << " got no round-3 assignment");
  first.process.kill();
  CHECK(first.process.exit_code() == 128 + SIGKILL);
  REQUIRE_MESSAGE(read_metrics(f.file("metrics.jsonl")).size() == 2, "the hub was not killed inside round 3");

  // The same configuration on the same port: the agents, never restarted, find it again.
  config["listen"] = "127.0.0.1:" + std::to_string(first.port);
  hub_handle second = f.start_hub("hub-2", config);
  CHECK(second.port == first.port);
  CHECK(count_of(second.process.out(), "rounds 5 (from 2)") == 1);
  CHECK(wait_for_log(second.process, "resumed from checkpoint after round 2", 10s));
  require_exit_0(second.process, 120s);
  CHECK(count_of(second.process.out(), "tessera-hub: done after 5 rounds") == 1);

  const std::string hub_log = second.process.err();
  for (std::size_t d = 0; d < agents.size(); ++d) {
    child_process& a = *agents[d];
    CAPTURE(a.name());
    CHECK(a.running());  // the same process all along
    CHECK(count_of(hub_log, "device " + ids[d] + " reconnected") >= 1);  // known from the checkpoint's registry
    const std::string log = a.err();
    CHECK(count_of(log, "link to the hub lost") >= 1);
    CHECK(count_of(log, "connected to the hub") >= 2);
    for (int r = 1; r <= rounds; ++r) CHECK(count_of(log, "round " + std::to_string(r) + ": update accepted") >= 1);
  }

  // One line per round, the rounds after the resume point contiguous, all of the fleet in each.
  const auto metrics = check_every_round(f.file("metrics.jsonl"), rounds, k_devices, {});
  for (const auto& m : metrics) check_round_figures(m);
  const core::stored_model model = load_model_or_fail(f.file("model.safetensors"));
  CHECK(model.metadata.at("tessera.rounds") == std::to_string(rounds));
  CHECK(all_finite(model.params));

  // The same command once more: the run is finished, so the hub says so and exits at once (it used to
  // write the model and then wait for a signal).
  config["listen"] = "127.0.0.1:0";
  const auto again_started = std::chrono::steady_clock::now();
  hub_handle again = f.start_hub("hub-3", config);
  require_exit_0(again.process, 5s);
  const double again_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - again_started).count();
  MESSAGE("a finished run's hub exited 0 after " << again_s << " s");
  CHECK(again_s < 2.0);
  CHECK(count_of(again.process.err(), "is finished already (5 of 5 rounds): writing " + f.file("model.safetensors") +
                                          " again and exiting. Raise rounds to train further, or give another checkpoint_dir for a new run") == 1);
  CHECK(count_of(again.process.out(), "tessera-hub: done after 5 rounds") == 1);

  // The crash cost nothing: the run went on from round 2's model and ends as the same run without a
  // crash does, which tessera-sim replays from the same fields and shards (the network run and the
  // simulated one agree to the bit: equivalence_test). Not to the bit here: each agent's data stream
  // goes on from where the killed round left it, so round 3 trains on other batches. Measured: round
  // 3's loss within 2% of the uninterrupted run's, each accuracy within 2.3 points. A hub resuming from
  // a fresh model trains round 3 at round 1's loss (0.38 against 0.20) and scores 5 points lower.
  nlohmann::json sim = run_fields(rounds);
  sim.update({{"devices", k_devices},
              {"data", {{"train", train}, {"test", validation}}},
              {"metrics", f.file("sim.jsonl")},
              {"output", f.file("sim.safetensors")}});
  f.run_sim("sim", sim);
  const auto uninterrupted = read_rounds(f.file("sim.jsonl"), rounds);
  for (int r = 0; r < rounds; ++r) {
    const auto& resumed = metrics[static_cast<std::size_t>(r)];
    const auto& replay = uninterrupted[static_cast<std::size_t>(r)];
    CAPTURE(resumed.dump());
    CAPTURE(replay.dump());
    const double loss = resumed.at("train_loss").get<double>(), replay_loss = replay.at("train_loss").get<double>();
    const double accuracy = resumed.at("test_accuracy").get<double>(), replay_accuracy = replay.at("test_accuracy").get<double>();
    MESSAGE("round " << r + 1 << ": loss " << loss << ", test accuracy " << accuracy << " across the crash; uninterrupted "
                     << replay_loss << ", " << replay_accuracy);
    CHECK(resumed.at("plan_seed") == replay.at("plan_seed"));
    if (r < 2) CHECK(loss == replay_loss);  // before the crash: the same run, to the bit
    else if (r == 2) CHECK(std::fabs(loss - replay_loss) <= 0.1 * replay_loss);
    CHECK(std::fabs(accuracy - replay_accuracy) <= 0.04);
  }
  CHECK(metrics.back().at("test_accuracy").get<double>() >= 0.75);  // chance is 0.1
}

TEST_CASE("federation: a hub whose newest checkpoint is cut short resumes from the previous one and completes the run") {
  constexpr int rounds = 3;
  fleet f("fed_ckpt_fallback");
  INFO(f.diagnostics());
  const auto [ids, data, validation, train] = prepare(f);

  // Short rounds: this case is about the restart, not the training.
  nlohmann::json config = hub_config(f, validation, rounds, /*local_steps=*/20);
  hub_handle first = f.start_hub("hub-1", config);
  f.start_agents(ids, data, first.port);
  require_exit_0(first.process, 60s);
  // The first run's model, after its round 3: what the resumed round 3 must give again.
  const core::stored_model first_model = load_model_or_fail(f.file("model.safetensors"));

  // The last checkpoint loses its second half, as a disk can lose a write; round 2's is kept beside it.
  const std::string checkpoint = f.file("checkpoints/hub.ckpt");
  REQUIRE(std::filesystem::exists(checkpoint + ".prev"));
  const auto first_cfg = core::load_config(f.file("hub-1.json"), {}, hub::read_hub_config);
  REQUIRE(first_cfg.ok());
  auto round2 = rounds::load_checkpoint(checkpoint + ".prev", first_cfg.value().model, nullptr);
  REQUIRE(round2.ok());
  REQUIRE(round2.value().has_value());
  const std::vector<float> round2_model = round2.value()->params;
  std::filesystem::resize_file(checkpoint, std::filesystem::file_size(checkpoint) / 2);

  // Restarted on the same port, the agents (still running) find it again.
  config["listen"] = "127.0.0.1:" + std::to_string(first.port);
  hub_handle second = f.start_hub("hub-2", config);
  CHECK(count_of(second.process.out(), "rounds 3 (from 2)") == 1);
  CHECK(wait_for_log(second.process, "checkpoint " + checkpoint + " is truncated (", 10s));
  CHECK(count_of(second.process.err(), "; resumed from the previous one (" + checkpoint + ".prev), after round 2") == 1);
  require_exit_0(second.process, 60s);
  CHECK(count_of(second.process.out(), "tessera-hub: done after 3 rounds") == 1);

  // Round 3 twice in the metrics: once before the damage, once after the resume.
  const auto metrics = read_metrics(f.file("metrics.jsonl"));
  REQUIRE(metrics.size() == 4);
  CHECK(metrics[2].at("round") == 3);
  CHECK(metrics[3].at("round") == 3);
  check_round_figures(metrics[3]);
  // Round 3 again from round 2's checkpoint: the same plan, and the first time's figures and model but
  // for the batches (each agent's data stream went on from where round 3 left it). Measured: losses
  // 0.1% apart, accuracy 2 points, the models 0.87 apart where round 3 moved the first one 2.44. A hub
  // resuming from a fresh model: losses 19% apart, accuracy 23 points, the models 4.8 apart.
  const double loss = metrics[3].at("train_loss").get<double>(), first_loss = metrics[2].at("train_loss").get<double>();
  const double accuracy = metrics[3].at("test_accuracy").get<double>(), first_accuracy = metrics[2].at("test_accuracy").get<double>();
  const core::stored_model model = load_model_or_fail(f.file("model.safetensors"));
  CHECK(model.metadata.at("tessera.rounds") == std::to_string(rounds));
  const double apart = distance(model.params, first_model.params);
  const double moved = distance(first_model.params, round2_model);
  MESSAGE("round 3 resumed: loss " << loss << ", test accuracy " << accuracy << "; the first time " << first_loss << ", "
                                   << first_accuracy << "; models " << apart << " apart, round 3 moved the first one " << moved);
  CHECK(metrics[3].at("plan_seed") == metrics[2].at("plan_seed"));
  CHECK(std::fabs(loss - first_loss) <= 0.02 * first_loss);
  CHECK(std::fabs(accuracy - first_accuracy) <= 0.05);
  CHECK(apart <= 0.5 * moved);
  // The new round-3 checkpoint replaced the damaged file; round 2's stayed the previous one.
  const auto hub_cfg = core::load_config(f.file("hub-2.json"), {}, hub::read_hub_config);
  REQUIRE(hub_cfg.ok());
  const core::model_spec& spec = hub_cfg.value().model;
  auto last = rounds::load_latest_checkpoint(checkpoint, spec, nullptr);
  REQUIRE_MESSAGE(last.ok(), (last.ok() ? "" : last.error().message));
  REQUIRE(last.value().has_value());
  CHECK(last.value()->state.round == 3);
  CHECK_FALSE(last.value()->fell_back_from.has_value());
  auto previous = rounds::load_checkpoint(checkpoint + ".prev", spec, nullptr);
  REQUIRE(previous.ok());
  REQUIRE(previous.value().has_value());
  CHECK(previous.value()->round == 2);
}

TEST_CASE("federation: an agent killed mid-round is a straggler, its neurons keep their values, and it is taken back") {
  constexpr int rounds = 4;
  constexpr double deadline_s = 6;  // ample for the two healthy agents even under a sanitizer
  fleet f("fed_agent_crash");
  INFO(f.diagnostics());
  const auto [ids, data, validation, train] = prepare(f);

  nlohmann::json config = hub_config(f, validation, rounds);
  // A round goes ahead with two devices once the third has been missing for device_wait_s.
  config.update({{"min_devices", 2}, {"max_devices", k_devices}, {"device_wait_s", 1}, {"round_deadline_s", deadline_s}});
  hub_handle hub = f.start_hub("hub", config);
  const auto agents = f.start_agents(ids, data, hub.port);
  const std::size_t victim = 1;
  child_process& doomed = *agents[victim];

  // Round 1 with everyone; then the victim dies holding its round-2 assignment. Killing it exactly
  // mid-upload cannot be timed from outside (a subnet this size crosses loopback in well under a
  // millisecond), so it dies between its assignment and its upload: from the hub's side the same
  // straggler, and the check below proves it never uploaded.
  REQUIRE_MESSAGE(eventually([&] { return !read_metrics(f.file("metrics.jsonl")).empty() || !hub.process.running(); }, 60s),
                  "round 1 did not complete within 60 s");
  REQUIRE_MESSAGE(wait_for_log(doomed, "round 2: subnet of", 30s), "the victim got no round-2 assignment");
  doomed.kill();
  REQUIRE_MESSAGE(count_of(doomed.err(), "round 2: trained") == 0, "the victim finished training before it was killed");
  REQUIRE(read_metrics(f.file("metrics.jsonl")).size() == 1);

  const auto hub_cfg = core::load_config(f.file("hub.json"), {}, hub::read_hub_config);
  REQUIRE(hub_cfg.ok());
  const core::model_spec& spec = hub_cfg.value().model;
  const std::string checkpoint_path = f.file("checkpoints/hub.ckpt");
  auto before = rounds::load_checkpoint(checkpoint_path, spec, nullptr);
  REQUIRE(before.ok());
  REQUIRE(before.value().has_value());
  REQUIRE(before.value()->round == 1);

  // The round waits for the deadline, then closes without it.
  REQUIRE_MESSAGE(eventually([&] { return read_metrics(f.file("metrics.jsonl")).size() >= 2 || !hub.process.running(); },
                             std::chrono::milliseconds(static_cast<int>(deadline_s * 1000)) + 30s),
                  "round 2 did not close");
  auto after = rounds::load_checkpoint(checkpoint_path, spec, nullptr);
  REQUIRE(after.ok());
  REQUIRE(after.value().has_value());
  REQUIRE_MESSAGE(after.value()->round == 2, "round 3 closed before round 2's checkpoint was read");
  const nlohmann::json round2 = read_metrics(f.file("metrics.jsonl"))[1];
  {
    CAPTURE(round2.dump());
    CHECK(round2.at("round") == 2);
    CHECK(round2.at("devices") == k_devices);
    CHECK(round2.at("stragglers") == 1);
    CHECK(round2.at("rejected") == 0);
    CHECK(round2.at("refused") == 0);
    CHECK(round2.at("seconds").get<double>() >= deadline_s - 0.05);
    check_round_figures(round2);
  }
  CHECK(wait_for_log(hub.process, "device " + ids[victim] + " missed the deadline of round 2", 5s));

  // The victim's subnet in round 2 (the plan from the round's seed, as the hub made it: devices in id
  // order, every budget holding the whole model) is exactly as before the round, but for the output
  // bias all subnets share; the subnets of the two devices that reported did change.
  const core::mlp_arch full = spec.full_arch();
  const std::vector<double> capacities(k_devices, 1.0);
  const std::size_t groups = hub_cfg.value().groups > 0 ? std::min<std::size_t>(hub_cfg.value().groups, k_devices)
                                                          : core::default_group_count(full, k_devices, hub_cfg.value().min_width);
  auto plan = core::make_plan(full, capacities, groups, {.min_width = hub_cfg.value().min_width},
                              round2.at("plan_seed").get<std::uint64_t>());
  REQUIRE(plan.ok());
  REQUIRE(plan.value().groups == k_devices);  // one device per group: the victim's block is its own
  for (std::size_t d = 0; d < k_devices; ++d) {
    const core::subnet sub = core::make_subnet(full, spec.compensation, plan.value(), plan.value().device_group[d]);
    std::vector<float> old_values(core::param_count(sub.arch)), new_values(old_values.size());
    core::gather(full, sub, before.value()->params, old_values);
    core::gather(full, sub, after.value()->params, new_values);
    const core::layer_slots out = core::param_slots(sub.arch).back();
    std::size_t changed = 0;
    for (std::size_t i = 0; i < old_values.size(); ++i) {
      const bool shared_bias = i >= out.bias && i < out.bias + static_cast<std::size_t>(out.rows);
      if (!shared_bias && old_values[i] != new_values[i]) ++changed;
    }
    CAPTURE(d);
    if (d == victim) CHECK(changed == 0);
    else CHECK(changed > old_values.size() / 2);
  }

  // Back after its round closed, with no state from its previous life: accepted in a later round.
  child_process& back = f.start_agent(ids[victim] + "-restarted", f.agent_config(ids[victim], data[victim], hub.port));
  require_exit_0(hub.process, 90s);
  CHECK(count_of(hub.process.err(), "device " + ids[victim] + " reconnected") >= 1);
  CHECK(count_of(back.err(), "update accepted") >= 1);
  CHECK(count_of(back.err(), "refusing") == 0);

  const auto metrics = read_rounds(f.file("metrics.jsonl"), rounds);
  bool whole_fleet_again = false;
  for (std::size_t r = 2; r < metrics.size(); ++r) {
    const auto& m = metrics[r];
    CAPTURE(m.dump());
    CHECK(m.at("round") == r + 1);
    CHECK(m.at("stragglers") == 0);
    CHECK(m.at("rejected") == 0);
    check_round_figures(m);
    if (m.at("devices") == k_devices) whole_fleet_again = true;
  }
  CHECK(whole_fleet_again);
  CHECK(all_finite(load_model_or_fail(f.file("model.safetensors")).params));
}

}  // namespace tessera::testing
