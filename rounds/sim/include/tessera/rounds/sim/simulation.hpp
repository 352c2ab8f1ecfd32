// tessera/rounds/sim/simulation.hpp — a whole federation in one process: the round engine with in-process devices.
//
// `tessera-sim` runs N virtual devices, each owning a shard of the training set (IID or Dirichlet label
// skew), through the round engine (tessera/rounds/engine.hpp) the hub runs over the network: the same
// plan, checks and sums. Each device trains exactly as an agent does (core/train/device_round.hpp, in a
// training_block laid out like the agent's arena), so the simulator computes the fleet's very floats.
// Strategies: `ist`, `fedavg`, and `central` (one device with all the data: the reference). It is the
// tool for research on the algorithm and the engine of the learning-quality benchmarks.
//
//   TESSERA_ASSIGN_OR_RETURN(auto cfg, core::load_config("sim.json", overrides, sim::read_sim_config));
//   TESSERA_ASSIGN_OR_RETURN(auto data, sim::load_sim_data(cfg));
//   TESSERA_ASSIGN_OR_RETURN(auto s, sim::simulation::create(cfg, *data.train, data.test.get(), log));
//   s->on_round([](const rounds::round_metrics& m) { std::puts(m.to_line().c_str()); });
//   while (!s->done()) TESSERA_TRY(s->run_round());
//   TESSERA_TRY(s->finish());                                  // writes the model, if configured
//
// With `checkpoint` set, every round is saved, and a run that finds the file resumes after its round:
// the engine's state (rounds/engine.hpp, restore) and each device's place in its batch order, so the
// resumed run ends with the very model an uninterrupted one does.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/config/log.hpp"
#include "tessera/core/data/dataset.hpp"
#include "tessera/core/train/train.hpp"
#include "tessera/rounds/engine.hpp"
#include "tessera/rounds/recorder.hpp"
#include "tessera/rounds/sim/sim_config.hpp"

namespace tessera::rounds {
class stats_gathering;
}

namespace tessera::sim {

class simulation {
 public:
  // Validates the config against the data and builds the shards; errors name the field.
  [[nodiscard]] static core::result<std::unique_ptr<simulation>> create(const sim_config& config, const core::memory_table& train,
                                                                        core::memory_table* test, core::log_sink log = {});
  simulation(const simulation&) = delete;
  simulation& operator=(const simulation&) = delete;

  void on_round(std::function<void(const rounds::round_metrics&)> f) { recorder_.on_round(std::move(f)); }
  // Runs and records one round; a device whose update the engine rejects (a diverged loss, say) is
  // logged and left out, as on a real fleet; a round none reached does not count (the engine's
  // last_faults().untrained) and runs again.
  [[nodiscard]] core::result<rounds::round_metrics> run_round();
  // Writes the model (config.output_path), if configured.
  [[nodiscard]] core::result<void> finish() { return recorder_.finish(engine_); }

  [[nodiscard]] bool done() const noexcept { return engine_.finished(); }
  [[nodiscard]] std::int64_t round() const noexcept { return engine_.completed(); }
  [[nodiscard]] std::span<const float> params() const noexcept { return engine_.params(); }
  [[nodiscard]] const rounds::engine& engine() const noexcept { return engine_; }
  [[nodiscard]] const std::vector<core::memory_table>& shards() const noexcept { return shards_; }
  // With budgets_mib: "each device: 0.256 MiB; the model needs 0.387 MiB to train at batch 32, 0.254 MiB
  // in micro-batches of 4" (the second part with micro_batch only); else empty.
  [[nodiscard]] std::string budget_summary() const;

 private:
  struct device {
    std::string id;
    std::size_t shard = 0;
    // The shard's validation split (data.validation_fraction) and the rest, views without copies.
    std::unique_ptr<core::example_table> training, validation;
    std::unique_ptr<core::table_batches> batches;  // persists across rounds: the order carries over
    double capacity = 1.0;  // 0: planned from budget_bytes, as the hub plans an agent's
    std::uint64_t budget_bytes = 0;
    bool told_not_evaluating = false;  // left out of the devices' evaluation (its budget): said once, as the hub does
  };
  simulation(const sim_config& config, core::memory_table* test, std::vector<float> params, rounds::recorder recorder,
             core::log_sink log);
  [[nodiscard]] core::result<void> run_device(rounds::assignment& a, device& d);
  // Under mpirun (src/ranks.hpp): the round's devices spread over the ranks, every report to every engine.
  [[nodiscard]] core::result<void> run_devices_over_ranks();
  [[nodiscard]] core::result<void> train_owned(rounds::assignment& a, device& d, std::size_t index, std::vector<std::byte>& out);
  [[nodiscard]] core::result<void> secure_upload(rounds::assignment& a, std::span<const float> received, std::span<const float> trained,
                                                 const core::local_training_report& report);
  [[nodiscard]] std::vector<rounds::device_offer> offers() const;
  // Before round 1 of a model that standardizes its inputs (rounds/statistics.hpp).
  [[nodiscard]] core::result<void> measure_statistics();
  [[nodiscard]] core::result<void> statistics_pass(rounds::stats_gathering& g,
                                                   const std::function<core::result<std::vector<float>>(const std::string&)>& measure);
  // After a round that evaluates: every device with validation examples scores the model as an agent
  // does (the model through its codec into inference memory, core::evaluate_in).
  [[nodiscard]] core::result<void> evaluate_on_devices(rounds::round_metrics& m);
  // config.checkpoint exists: the engine continues from it, each device's batch order where it was.
  [[nodiscard]] core::result<void> resume();
  // Before round 1 (or after a resume): whole-model rounds and SLT stages every device must be able to run.
  [[nodiscard]] core::result<void> check_rounds_to_come() const;
  // Each device's record after a round (rounds done or missed, examples drawn): what a checkpoint keeps.
  void note_round();

  sim_config config_;
  core::memory_table* test_;
  rounds::engine engine_;
  rounds::recorder recorder_;
  core::log_sink log_;
  std::vector<core::memory_table> shards_;
  std::vector<device> devices_;
  std::vector<rounds::device_record> registry_;  // one per device, in devices_' order
  std::map<std::string, std::size_t, std::less<>> by_id_;
};

}  // namespace tessera::sim
