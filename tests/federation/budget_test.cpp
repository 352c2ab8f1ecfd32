// Memory budgets bind: on a model far larger than any of them, agents offering 4, 8 and 16 MiB each get
// a subnet whose training arena fits their budget, larger budgets get larger subnets, nobody refuses;
// none of them can hold the whole model to score it, and the hub says so once per device.
#include <cstdio>
#include <string>
#include <vector>

#include "fleet.hpp"

namespace tessera::testing {
namespace {

// What an agent logs when it accepts an assignment:
//   "round 1: subnet of P parameters (S MiB f32), arena A MiB of B MiB, N steps of M"
struct assignment_line {
  std::size_t parameters = 0;
  double arena_mib = 0;
  double budget_mib = 0;
};

assignment_line parse_assignment(const std::string& log) {
  const auto lines = lines_with(log, "round 1: subnet of ");
  REQUIRE_MESSAGE(lines.size() == 1, "expected one round-1 assignment line in:\n" << log);
  const std::string& line = lines.front();
  assignment_line a;
  const auto subnet = line.find("subnet of ");
  const auto arena = line.find("arena ");
  REQUIRE(arena != std::string::npos);
  REQUIRE(std::sscanf(line.c_str() + subnet, "subnet of %zu parameters", &a.parameters) == 1);
  REQUIRE(std::sscanf(line.c_str() + arena, "arena %lf MiB of %lf MiB", &a.arena_mib, &a.budget_mib) == 2);
  return a;
}

}  // namespace

TEST_CASE("federation: agents with 4, 8 and 16 MiB get subnets that fit their budgets") {
  const std::vector<int> budgets_mib{4, 8, 16};  // in id order, which is the hub's device order
  fleet f("fed_budget");
  INFO(f.diagnostics());
  const auto ids = f.make_device_pki(3);
  const auto data = f.make_training_shards(3000, 3, 5);

  // 784-2048-2048-10 with momentum needs about 46 MiB to train whole: every budget binds.
  const nlohmann::json model = {{"inputs", 784}, {"hidden", {2048, 2048}}, {"outputs", 10}};
  hub_handle hub = f.start_hub("hub", {{"model", model},
                                       {"strategy", "ist"},
                                       {"rounds", 2},
                                       {"local_steps", 3},
                                       {"batch", 8},
                                       {"lr", 0.01},
                                       {"seed", 5},
                                       {"min_devices", 3},
                                       {"max_devices", 3},
                                       {"device_wait_s", 60},
                                       {"round_deadline_s", 60},
                                       {"metrics", f.file("metrics.jsonl")},
                                       {"output", f.file("model.safetensors")}});
  std::vector<child_process*> agents;
  for (std::size_t d = 0; d < ids.size(); ++d) {
    nlohmann::json a = f.agent_config(ids[d], data[d], hub.port);
    a["memory_budget_mib"] = budgets_mib[d];
    agents.push_back(&f.start_agent(ids[d], a));
  }
  require_exit_0(hub.process, 120s);

  const std::string hub_log = hub.process.err();
  CHECK(count_of(hub_log, "left out") == 0);
  CHECK(count_of(hub_log, "refused") == 0);
  // The whole model (about 23 MiB of parameters) fits no budget for scoring it: each device is named
  // once, not every round, and the rounds go on without the devices' evaluation.
  for (const auto& id : ids) CHECK(count_of(hub_log, "device " + id + " does not evaluate the model: scoring the whole model needs") == 1);
  const auto metrics = read_metrics(f.file("metrics.jsonl"));
  REQUIRE(metrics.size() == 2);
  CHECK_FALSE(metrics[1].contains("fed_accuracy"));
  CHECK(metrics[0].at("devices") == 3);
  CHECK(metrics[0].at("refused") == 0);
  CHECK(metrics[0].at("rejected") == 0);
  CHECK(metrics[0].at("stragglers") == 0);

  std::vector<assignment_line> got;
  for (std::size_t d = 0; d < agents.size(); ++d) {
    CAPTURE(ids[d]);
    const std::string log = agents[d]->err();
    CHECK(count_of(log, "refusing") == 0);
    CHECK(count_of(log, "round 1: update accepted") == 1);
    got.push_back(parse_assignment(log));
    // The arena the agent reserved fits in what it offered, which is within its budget.
    CHECK(got[d].arena_mib <= got[d].budget_mib);
    CHECK(got[d].budget_mib <= budgets_mib[d]);
    CHECK(got[d].arena_mib >= 0.5 * got[d].budget_mib);  // sized from the budget, not merely under it
  }
  const core::stored_model trained = load_model_or_fail(f.file("model.safetensors"));
  CHECK(all_finite(trained.params));
  const std::size_t whole = trained.params.size();
  CHECK(got[0].parameters < got[1].parameters);
  CHECK(got[1].parameters < got[2].parameters);
  CHECK(got[2].parameters < whole / 2);  // the largest budget holds well under half of the model
  CHECK(got[0].arena_mib < got[1].arena_mib);
  CHECK(got[1].arena_mib < got[2].arena_mib);
}

}  // namespace tessera::testing
