// Secure aggregation over the network: tessera-hub and six tessera-edge agents (IST with replication 3:
// two groups; and FedAvg) end with tessera-sim's model bit for bit, and every upload the hub holds
// looks uniformly random, while the uploads of a run in the clear do not; dropouts at each step.
#include <array>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "fleet.hpp"
#include "tessera/core/io/file_io.hpp"
#include "tessera/core/math/mlp.hpp"

namespace tessera::testing {
namespace {

// Lines of an agent's log about a training round's protocol ("[edge …] round 3: …") that hold `what`
// (an evaluation's masked sum logs as "the evaluation of round 3: …").
std::size_t round_lines(const std::string& log, const std::string& what) {
  std::size_t n = 0;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) n += line.find("] round ") != std::string::npos && line.find(what) != std::string::npos ? 1 : 0;
  return n;
}

constexpr int k_devices = 6;
constexpr int k_rounds = 3;

// A small convolutional network: its channel groups are secure aggregation's segments as neurons are.
nlohmann::json small_cnn() {
  return nlohmann::json::parse(R"({"input_shape": [1, 28, 28], "outputs": 10, "layers": [
      {"conv2d": {"channels": 16, "kernel": 3}}, {"max_pool": 2}, {"conv2d": {"channels": 16, "kernel": 3, "stride": 2}},
      {"flatten": true}, {"dense": 16}]})");
}

nlohmann::json run_fields(bool secure, const std::string& strategy = "ist", int neighbors = 64, bool cnn = false) {
  nlohmann::json j = short_run(strategy, k_rounds, 11);
  if (cnn) j["model"] = small_cnn();
  if (secure) j["secure_aggregation"] = {{"replication", 3}, {"clip", 2.0}, {"neighbors", neighbors}};
  else if (strategy == "ist") j["groups"] = 2;  // the plan secure aggregation makes: two groups of three
  return j;
}

// Pearson's chi-square of the blob's byte histogram against the uniform one (255 degrees of freedom).
double chi_square_of_bytes(const std::vector<std::byte>& blob) {
  std::array<double, 256> counts{};
  for (std::byte b : blob) counts[std::to_integer<std::size_t>(b)] += 1;
  const double expected = static_cast<double>(blob.size()) / 256.0;
  double chi = 0;
  for (double c : counts) chi += (c - expected) * (c - expected) / expected;
  return chi;
}
// The chi-square's 1 − 1e-9 quantile at 255 degrees of freedom (Wilson–Hilferty): a uniform blob
// exceeds it once in a billion.
constexpr double k_chi_square_limit = 415.0;

// The devices' certificates, 6000 training and `test_examples` test examples of Fashion-MNIST, and the
// training examples dealt out to the devices as the secure runs' simulator deals them.
struct prepared {
  std::vector<std::string> ids;
  std::vector<nlohmann::json> data;
  nlohmann::json train, test;
};
prepared prepare(fleet& f, std::int64_t test_examples) {
  prepared p{f.make_device_pki(k_devices), {}, f.write_subset("train", 6000), f.write_subset("t10k", test_examples)};
  nlohmann::json shards_config = run_fields(true);
  shards_config["devices"] = k_devices;
  shards_config["data"] = {{"train", p.train}, {"test", p.test}};
  p.data = f.make_shards(shards_config);
  return p;
}

std::vector<std::vector<std::byte>> audited_uploads(const std::string& dir) {
  std::vector<std::vector<std::byte>> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    auto bytes = core::read_file_bounded(e.path(), 64u << 20);
    REQUIRE(bytes.ok());
    out.push_back(std::move(bytes).value());
  }
  return out;
}

}  // namespace

TEST_CASE("federation: secure aggregation — the hub holds only masked uploads and ends with tessera-sim's model (ist, fedavg, a CNN)") {
  fleet f("fed_secure");
  INFO(f.diagnostics());
  const auto [ids, data, train, test] = prepare(f, 1000);

  // secure-sparse: each device masks the output bias with 2 ring neighbours only (Bell et al.'s graphs).
  // secure-cnn: IST over a convolutional network's channels, its kernel blocks masked like neurons' rows.
  for (const std::string tag : {"clear", "secure", "secure-fedavg", "secure-sparse", "secure-cnn"}) {
    const bool secure = tag != "clear";
    const std::string strategy = tag == "secure-fedavg" ? "fedavg" : "ist";
    const int neighbors = tag == "secure-sparse" ? 2 : 64;
    const bool cnn = tag == "secure-cnn";
    const std::size_t groups = strategy == "ist" ? 2 : 1;
    CAPTURE(tag);
    nlohmann::json sim = run_fields(secure, strategy, neighbors, cnn);
    sim.update({{"devices", k_devices}, {"data", {{"train", train}, {"test", test}}}, {"output", f.file("sim-" + tag + ".safetensors")},
                {"metrics", f.file("sim-" + tag + ".jsonl")}});
    f.run_sim("sim-" + tag, sim);

    nlohmann::json hub_json = run_fields(secure, strategy, neighbors, cnn);
    hub_json.update({{"min_devices", k_devices}, {"max_devices", k_devices}, {"device_wait_s", 60}, {"round_deadline_s", 60},
                     {"output", f.file("hub-" + tag + ".safetensors")}, {"metrics", f.file("hub-" + tag + ".jsonl")},
                     {"audit_uploads", f.file("audit-" + tag)}});
    hub_handle hub = f.start_hub("hub-" + tag, hub_json);
    const auto agents = f.start_agents(ids, data, hub.port, k_rounds, "-" + tag);
    require_exit_0(hub.process, 180s);
    for (child_process* a : agents) {
      check_agent_left(*a, k_rounds);
      if (secure) CHECK(round_lines(a->err(), "unmasking shares sent") == k_rounds);
      // Everyone is everyone's neighbour, or (sparse) the 2 on the ring and the group's other 2 at most.
      if (tag == "secure" || tag == "secure-fedavg" || tag == "secure-cnn") CHECK(round_lines(a->err(), "a roster of 6 devices; keys of 5 neighbours") == k_rounds);
      if (tag == "secure-sparse") {
        CHECK(round_lines(a->err(), "a roster of 6 devices; keys of") == k_rounds);
        CHECK(round_lines(a->err(), "a roster of 6 devices; keys of 5 neighbours") == 0);
      }
      // The devices' scores of each round's model: one masked sum a round, never a score in the clear.
      if (secure) CHECK(count_of(a->err(), "masked and sent: the hub receives only the sum over the devices that unmask") == k_rounds);
    }

    // What the hub received: under secure aggregation every upload's bytes are uniform; in the clear
    // they are floats, far from it (the check can fail).
    const auto uploads = audited_uploads(f.file("audit-" + tag));
    REQUIRE(uploads.size() == static_cast<std::size_t>(k_devices * k_rounds));
    double worst = 0, best = INFINITY;
    for (const auto& u : uploads) {
      const double chi = chi_square_of_bytes(u);
      worst = std::max(worst, chi);
      best = std::min(best, chi);
    }
    MESSAGE(tag << ": chi-square of the " << uploads.size() << " uploads' bytes " << best << " .. " << worst << " (limit "
                << k_chi_square_limit << ")");
    if (secure) CHECK(worst < k_chi_square_limit);
    else CHECK(best > 10 * k_chi_square_limit);

    for (const auto& [h, s] : rounds_beside_sim(f.file("hub-" + tag + ".jsonl"), f.file("sim-" + tag + ".jsonl"), k_rounds, k_devices)) {
      CAPTURE(h.dump());
      CHECK(h.at("groups") == groups);
      CHECK(h.at("secure_aggregation") == secure);
      CHECK(h.at("train_loss") == s.at("train_loss"));
      if (secure) {
        CHECK(h.at("secagg_dropped") == 0);
        CHECK(h.at("secagg_withheld") == 0);
        // No device's loss or clipped count reached the hub: the masked sums are all it has.
        CHECK(h.at("train_loss").is_null());
        CHECK_FALSE(h.contains("secagg_clipped"));
      } else {
        CHECK(h.at("train_loss").is_number());
      }
    }
    // IST: each group's sum and the shared output bias's; FedAvg: the whole model's.
    if (secure)
      CHECK(count_of(hub.process.err(), strategy == "ist" ? "secure aggregation released 3 of 3 sums" : "secure aggregation released 1 of 1 sums") ==
            k_rounds);

    const core::stored_model from_hub = load_model_or_fail(f.file("hub-" + tag + ".safetensors"));
    const core::stored_model from_sim = load_model_or_fail(f.file("sim-" + tag + ".safetensors"));
    REQUIRE(from_hub.params.size() == from_sim.params.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < from_hub.params.size(); ++i) differ += from_hub.params[i] != from_sim.params[i] ? 1 : 0;
    CHECK(differ == 0);  // the masks cancel exactly: the hub's sums are the simulator's
    std::vector<float> initial(from_sim.params.size());
    core::initialize(from_sim.spec, initial);
    std::size_t moved = 0;
    for (std::size_t i = 0; i < initial.size(); ++i) moved += from_hub.params[i] != initial[i] ? 1 : 0;
    CHECK(moved > initial.size() / 2);
  }
}

}  // namespace tessera::testing

namespace tessera::testing {
namespace {

// One round of six agents under secure aggregation (replication 3, a group released from 2 devices):
// the agents in `slow` upload at 2 KiB/s, so a test can kill them after they shared their keys and
// before their masked update is in. Returns the hub and the agents.
struct dropout_run {
  hub_handle hub;
  std::vector<child_process*> agents;
  std::string metrics;  // the hub's metrics file

  // Waits for the hub to close the round and exit 0: the round's metrics line.
  nlohmann::json finish() const {
    require_exit_0(hub.process, 90s);
    return read_rounds(metrics, 1)[0];
  }
};

dropout_run start_dropout_run(fleet& f, const std::string& tag, const prepared& devices, const std::vector<std::size_t>& slow) {
  const auto& ids = devices.ids;
  const auto& data = devices.data;
  const std::string metrics = f.file("hub-" + tag + ".jsonl");
  nlohmann::json hub_json = run_fields(true);
  hub_json["rounds"] = 1;
  hub_json["secure_aggregation"]["threshold"] = 2;
  hub_json.update({{"min_devices", k_devices}, {"max_devices", k_devices}, {"device_wait_s", 60}, {"round_deadline_s", 12},
                   {"secure_step_s", 4}, {"output", f.file("hub-" + tag + ".safetensors")}, {"metrics", metrics}});
  dropout_run run{f.start_hub("hub-" + tag, hub_json), {}, metrics};
  for (std::size_t d = 0; d < ids.size(); ++d) {
    nlohmann::json a = f.agent_config(ids[d], data[d], run.hub.port);
    a["exit_after_rounds"] = 1;
    if (std::find(slow.begin(), slow.end(), d) != slow.end()) a["rate_limit"] = {{"upload_bytes_per_s", 2048}};
    run.agents.push_back(&f.start_agent(ids[d] + "-" + tag, a));
  }
  return run;
}

// Kills an agent once it is sending its masked update (it shared its keys; the hub has not got it).
void kill_while_uploading(child_process& a) {
  REQUIRE_MESSAGE(wait_for_log(a, "masked update", 60s), a.name() << " never began its masked upload");
  a.kill();
  CHECK(count_of(a.err(), "shares sent") == 1);
  CHECK(count_of(a.err(), "update accepted") == 0);
}

// Parameters equal to the seeded initial model's.
std::size_t unchanged(const core::stored_model& m) {
  std::vector<float> initial(m.params.size());
  core::initialize(m.spec, initial);
  std::size_t n = 0;
  for (std::size_t i = 0; i < initial.size(); ++i) n += m.params[i] == initial[i] ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("federation: secure aggregation with dropouts — after sharing keys, after the upload; a group below its threshold is withheld") {
  fleet f("fed_secure_drop");
  INFO(f.diagnostics());
  const prepared devices = prepare(f, 500);
  // Groups by natural order: device d trains group d mod 2. A group's own parameters (hidden 64: 32
  // neurons a layer): 784·32 + 32 + 32·32 + 32 + 32·10 (its layer norms add 4·32).
  constexpr std::size_t group_params = 784 * 32 + 32 + 32 * 32 + 32 + 32 * 10;

  SUBCASE("device-1 dies after sharing its keys, device-2 after its upload: every sum is released from the survivors") {
    dropout_run run = start_dropout_run(f, "drop", devices, {1});
    kill_while_uploading(*run.agents[1]);
    child_process& late = *run.agents[2];
    REQUIRE_MESSAGE(wait_for_log(late, "round 1: update accepted", 60s), "device-2's update was not accepted");
    late.kill();  // the unmasking waits for device-1's deadline: device-2 is gone before it
    const nlohmann::json m = run.finish();
    CHECK(count_of(late.err(), "unmasking shares sent") == 0);
    CAPTURE(m.dump());
    CHECK(m.at("stragglers") == 1);
    CHECK(m.at("secagg_dropped") == 1);
    CHECK(m.at("secagg_withheld") == 0);
    CHECK(count_of(run.hub.process.err(), "secure aggregation released 3 of 3 sums (1 device(s) dropped") == 1);
    for (std::size_t d : {0u, 3u, 4u, 5u})
      CHECK(count_of(run.agents[d]->err(), "unmasking shares sent (5 survivors, 1 dropped; sums released: segments 0,1,2)") == 1);
    const core::stored_model model = load_model_or_fail(f.file("hub-drop.safetensors"));
    CHECK(all_finite(model.params));
    CHECK(unchanged(model) < group_params);  // both groups moved
  }

  SUBCASE("two of group 1 die before their upload: its sum (one device's) is withheld, the others are released") {
    dropout_run run = start_dropout_run(f, "withheld", devices, {1, 3});
    kill_while_uploading(*run.agents[1]);
    kill_while_uploading(*run.agents[3]);
    const nlohmann::json m = run.finish();
    CAPTURE(m.dump());
    CHECK(m.at("stragglers") == 2);
    CHECK(m.at("secagg_dropped") == 2);
    CHECK(m.at("secagg_withheld") == 1);
    CHECK(count_of(run.hub.process.err(), "withheld: group 1: 1 contributor, below the threshold 2") == 1);
    // device-5, group 1's survivor: the unmasking never releases its group, so its self-mask seed for
    // that segment is never revealed and its input stays masked.
    CHECK(count_of(run.agents[5]->err(), "sums released: segments 0,2)") == 1);
    const core::stored_model model = load_model_or_fail(f.file("hub-withheld.safetensors"));
    CHECK(all_finite(model.params));
    CHECK(unchanged(model) >= group_params);  // group 1 kept its values
  }
}

}  // namespace tessera::testing
