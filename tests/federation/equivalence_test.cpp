// The network run equals the simulated one: tessera-hub with three tessera-edge agents holding the
// simulator's shards ends with tessera-sim's model, parameter by parameter, for IST and for FedAvg, and
// for IST with a server optimizer (FedAdam) stepping after assembly, for agents whose budgets bind,
// the simulator's devices given (budgets_mib) what each agent offered, and for successive layer training
// within such budgets; with the hub serving its connections on one thread and on two, by turns.
#include <cmath>
#include <string>
#include <vector>

#include "fleet.hpp"
#include "tessera/core/math/mlp.hpp"

namespace tessera::testing {
namespace {

constexpr int k_devices = 3;
constexpr int k_rounds = 3;

// One run of the test: its name (files, processes), strategy and further shared fields.
struct variant {
  std::string name;
  std::string strategy;
  nlohmann::json extra = nlohmann::json::object();
  std::vector<double> agent_budgets_mib = {};  // each agent's memory_budget_mib (empty: the fleet's 16)
};

// What an agent offers for training, from its first line: "offering 0.19 MiB (199680 bytes) for training".
std::uint64_t offered_bytes(const std::string& log) {
  const auto at = log.find(" MiB (");
  const auto bytes_at = log.find(" bytes) for training");
  REQUIRE_MESSAGE((at != std::string::npos && bytes_at != std::string::npos), "no offer in:\n" << log);
  return std::stoull(log.substr(at + 6, bytes_at - at - 6));
}

// The fields tessera-sim and tessera-hub share (rounds/run_config.hpp): same values, same run.
nlohmann::json run_fields(const std::string& strategy, const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::json j = short_run(strategy, k_rounds, 7);
  j.update(extra);
  return j;
}

// A small slice of Fashion-MNIST for training and for the simulator's evaluation.
nlohmann::json sim_config(const std::string& strategy, const nlohmann::json& train, const nlohmann::json& test,
                          const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::json s = run_fields(strategy, extra);
  s["devices"] = k_devices;
  s["data"] = {{"train", train}, {"test", test}};
  return s;
}

struct difference {
  double max_abs = 0;
  std::size_t at = 0;
};

difference compare(const std::vector<float>& a, const std::vector<float>& b) {
  difference d;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double e = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (!(e <= d.max_abs)) {  // NaN counts as the largest difference
      d.max_abs = std::isnan(e) ? INFINITY : e;
      d.at = i;
    }
  }
  return d;
}

}  // namespace

TEST_CASE("federation: hub and agents over TLS end with tessera-sim's model (ist, fedavg, ist with FedAdam, a kept cut, a whole-model round, a CNN, micro-batches, budgets that bind, slt within them, in f32 and with q8 frozen layers)") {
  fleet f("fed_equal");
  INFO(f.diagnostics());
  const auto ids = f.make_device_pki(k_devices);
  const nlohmann::json train = f.write_subset("train", 4000), test = f.write_subset("t10k", 1000);
  const std::vector<nlohmann::json> data = f.make_shards(sim_config("ist", train, test));  // the same for both strategies

  // FedAdam at the server: β1 0.9, β2 0.99, τ 1e-3 (the defaults) and η 0.01. Its moments are the
  // engine's, so both drivers must carry them alike, IST-aware (untrained coordinates stand still).
  // The same run keeps its first cut for rounds 1 and 2 (repartition_every) and ends with one round of
  // the whole model on every device (whole_model_rounds: the agents' budgets hold it).
  const nlohmann::json fedadam = {{"server_optimizer", {{"kind", "adam"}, {"lr", 0.01}}}, {"repartition_every", 2}, {"whole_model_rounds", 1}};
  // A convolutional network: the channels of its two convolutions and the dense layer's neurons are cut
  // into the devices' groups, its layers travel in ASSIGN, and the agents train it in their arenas.
  const nlohmann::json cnn = {{"model", nlohmann::json::parse(R"({"input_shape": [1, 28, 28], "outputs": 10, "layers": [
      {"conv2d": {"channels": 8, "kernel": 3}}, {"max_pool": 2}, {"conv2d": {"channels": 8, "kernel": 3, "stride": 2}},
      {"flatten": true}, {"dense": 32}]})")}};
  // Steps taken in micro-batches (run_config.micro_batch): the agents' arenas hold a part of a batch at a
  // time, and the floats are the simulator's.
  const nlohmann::json micro = {{"micro_batch", 5}};
  // Budgets that bind: agents of 0.25 and 0.28 MiB hold subnets narrower than their equal share, and the
  // 16 MiB agent a wider one; the simulator is given what each agent offered (budgets_mib) and plans alike.
  // Successive layer training: stage 1 (round 1) trains hidden layer 1 with a head of 32 units, stage 2
  // (rounds 2 and 3) hidden layer 2 with layer 1 frozen and left out of the updates; the two small
  // agents' budgets cut each stage's layer into groups.
  const nlohmann::json slt = {{"slt", {{"stage_rounds", {1, 2}}, {"head_fraction", 0.5}}}};
  // The same with layer 1 frozen in q8 (slt.frozen_codec): sent and held so, the hub's copy rounded alike.
  const nlohmann::json slt_q8 = {{"slt", {{"stage_rounds", {1, 2}}, {"head_fraction", 0.5}, {"frozen_codec", "q8"}}}};
  const variant variants[] = {{"ist", "ist"}, {"fedavg", "fedavg"}, {"ist-adam", "ist", fedadam}, {"ist-cnn", "ist", cnn},
                              {"ist-micro", "ist", micro}, {"ist-budgets", "ist", nlohmann::json::object(), {0.25, 0.28, 16}},
                              {"slt-budgets", "slt", slt, {0.43, 0.45, 16}}, {"slt-q8", "slt", slt_q8, {0.43, 0.45, 16}}};
  std::size_t io_threads = 0;
  for (const variant& v : variants) {
    const std::string& name = v.name;
    const std::string& strategy = v.strategy;
    // The hub's connections on one thread, then on two, by turns: the model is the same either way.
    io_threads = io_threads % 2 + 1;
    CAPTURE(name);
    CAPTURE(io_threads);
    // The run over the network.
    nlohmann::json hub_json = run_fields(strategy, v.extra);
    hub_json.update({{"io_threads", io_threads},
                     {"min_devices", k_devices},
                     {"max_devices", k_devices},
                     {"device_wait_s", 60},
                     {"round_deadline_s", 60},
                     {"output", f.file("hub-" + name + ".safetensors")},
                     {"metrics", f.file("hub-" + name + ".jsonl")}});
    hub_handle hub = f.start_hub("hub-" + name, hub_json);
    // exit_after_rounds: each agent leaves after its k_rounds-th accepted update.
    std::vector<child_process*> agents;
    for (std::size_t d = 0; d < ids.size(); ++d) {
      nlohmann::json config = f.agent_config(ids[d], data[d], hub.port);
      config["exit_after_rounds"] = k_rounds;
      if (!v.agent_budgets_mib.empty()) config["memory_budget_mib"] = v.agent_budgets_mib[d];
      agents.push_back(&f.start_agent(ids[d] + "-" + name, config));
    }
    require_exit_0(hub.process, 120s);
    CHECK(count_of(hub.process.out(), "tessera-hub: done after 3 rounds") == 1);
    CHECK(count_of(hub.process.out(), ", " + std::to_string(io_threads) + " io threads") == 1);
    for (child_process* a : agents) check_agent_left(*a, k_rounds);

    // The simulator's run, its devices offering what the agents offered.
    nlohmann::json sim = sim_config(strategy, train, test, v.extra);
    sim["output"] = f.file("sim-" + name + ".safetensors");
    sim["metrics"] = f.file("sim-" + name + ".jsonl");
    if (!v.agent_budgets_mib.empty()) {
      std::vector<double> offered;
      for (child_process* a : agents) offered.push_back(static_cast<double>(offered_bytes(a->err())) / (1024.0 * 1024.0));
      sim["budgets_mib"] = offered;
    }
    f.run_sim("sim-" + name, sim);

    const auto rounds = rounds_beside_sim(f.file("hub-" + name + ".jsonl"), f.file("sim-" + name + ".jsonl"), k_rounds, k_devices);
    for (std::size_t r = 0; r < rounds.size(); ++r) {
      const auto& [h, s] = rounds[r];
      CAPTURE(h.dump());
      CHECK(h.at("plan_seed") == s.at("plan_seed"));
      CHECK(h.at("groups") == s.at("groups"));
      if (name == "ist-adam") {
        if (r == 1) CHECK(h.at("plan_seed") == rounds[0].hub.at("plan_seed"));  // rounds 1 and 2 cut alike
        if (r == k_rounds - 1) CHECK(h.at("groups") == 1);            // the whole model
        else CHECK(h.at("groups") == k_devices);
      }
      // The agents' reported losses, summed as the engine sums them for the simulator's devices.
      CHECK(h.at("train_loss").get<double>() == s.at("train_loss").get<double>());
    }

    const core::stored_model from_hub = load_model_or_fail(f.file("hub-" + name + ".safetensors"));
    const core::stored_model from_sim = load_model_or_fail(f.file("sim-" + name + ".safetensors"));
    REQUIRE(from_hub.params.size() == core::param_count(from_sim.spec.full_arch()));
    REQUIRE(from_hub.params.size() == from_sim.params.size());
    CHECK(from_hub.metadata.at("tessera.rounds") == std::to_string(k_rounds));
    const difference d = compare(from_hub.params, from_sim.params);
    INFO("largest difference " << d.max_abs << " at parameter " << d.at);
    CHECK(d.max_abs == 0.0f);  // one engine, the device's very training step: the same floats

    // Not a vacuous equality: both trained away from the seeded initial model.
    std::vector<float> initial(from_sim.params.size());
    core::initialize(from_sim.spec, initial);
    CHECK(compare(from_hub.params, initial).max_abs > 1e-3);
    // With the server optimizer on, a model of its own: not the plain IST run's.
    if (v.name == "ist-adam") {
      const core::stored_model plain = load_model_or_fail(f.file("hub-ist.safetensors"));
      const difference from_plain = compare(from_hub.params, plain.params);
      INFO("largest difference from the plain IST run " << from_plain.max_abs);
      CHECK(from_plain.max_abs > 1e-3);
    }
    // Each stage said as it began; the budgets cut both stages' layers into groups, and stage 2's
    // updates left layer 1 out.
    if (v.name == "slt-budgets" || v.name == "slt-q8") {
      CHECK(count_of(hub.process.out(), "round 1 trains stage 1 of 2") + count_of(hub.process.err(), "round 1 trains stage 1 of 2") == 1);
      CHECK(count_of(hub.process.out(), "round 2 trains stage 2 of 2") + count_of(hub.process.err(), "round 2 trains stage 2 of 2") == 1);
      if (v.name == "slt-budgets")
        for (const auto& [h, s] : rounds) CHECK(h.at("groups").get<int>() >= 2);
      CHECK(rounds[1].hub.at("bytes_up").get<double>() < rounds[0].hub.at("bytes_up").get<double>());
    }
    // The budgets bound: the smallest agent trained fewer than its equal share of each hidden layer
    // (64 / 3 neurons), the largest more.
    if (v.name == "ist-budgets") {
      const auto subnet_params = [](const std::string& log) {
        const auto at = log.find("round 1: subnet of ");
        REQUIRE_MESSAGE(at != std::string::npos, "no round-1 assignment in:\n" << log);
        return std::stoull(log.substr(at + 19));
      };
      core::mlp_arch share;
      share.widths = {784, 21, 21, 10};
      CHECK(subnet_params(agents[0]->err()) < core::param_count(share));
      CHECK(subnet_params(agents[1]->err()) < core::param_count(share));
      CHECK(subnet_params(agents.back()->err()) > core::param_count(share));
    }
  }
}

}  // namespace tessera::testing
