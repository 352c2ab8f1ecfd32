// tessera-sim: a whole federation in one process, for research and the learning-quality benchmarks; under
// mpirun, spread over the ranks (src/ranks.hpp), rank 0 printing and writing.
#include <cstdio>
#include <cstring>
#include <string>

#include "tessera/core/config/command.hpp"
#include "tessera/rounds/sim/shards.hpp"
#include "tessera/rounds/sim/simulation.hpp"
#include "ranks.hpp"

namespace {

using namespace tessera;

const core::command k_command{
    .name = "tessera-sim",
    .usage = "tessera-sim [--config FILE] [KEY=VALUE ...]\n       tessera-sim shards --out DIR [--config FILE] [KEY=VALUE ...]",
    .about = R"(Runs a federation of virtual devices in one process, through the round engine the hub runs, and
prints one line per round (see examples/sim-*.json). Under mpirun (built with Open MPI), the devices
are spread over the ranks and the run ends with the one-process run's model: `mpirun -n 4 tessera-sim ...`.

shards: writes each device's shard of the training set (the same split and batch-order seed the
simulator uses) into DIR/device-<d>/ as IDX files, with the agent's "data" settings in data.json,
so a real fleet (tessera-hub and tessera-edge) can run exactly the simulated federation.)",
    .options = {{.flag = "--out", .value = "DIR", .doc = "shards: the folder to write the devices' folders into"}}};

core::result<int> write_shards(const core::command_line& line, const sim::sim_config& cfg) {
  if (!line.has("--out")) return core::make_error(core::errc::invalid_argument, "shards needs --out DIR");
  if (sim::ranks::world().size() > 1) return core::make_error(core::errc::invalid_argument, "shards writes one folder: run it in one process");
  TESSERA_ASSIGN_OR_RETURN(const auto folders, sim::write_shards(cfg, line.value("--out")));
  for (const auto& f : folders) std::printf("%s\n", f.c_str());
  return 0;
}

core::result<int> simulate(const core::command_line& line, const sim::sim_config& cfg) {
  if (line.has("--out")) return core::make_error(core::errc::invalid_argument, "--out goes with the shards command");
  TESSERA_ASSIGN_OR_RETURN(const sim::sim_data data, sim::load_sim_data(cfg));
  const sim::ranks& world = sim::ranks::world();
  const bool speaks = world.rank() == 0;  // the other ranks train and stay quiet
  TESSERA_ASSIGN_OR_RETURN(auto s, sim::simulation::create(cfg, *data.train, data.test.get(),
                                                           speaks ? core::stderr_log("sim", line.level) : core::log_sink{}));
  if (!speaks) {
    while (!s->done()) TESSERA_TRY(s->run_round());
    return 0;
  }
  if (world.size() > 1) std::printf("tessera-sim: %zu ranks, device d on rank d mod %zu\n", world.size(), world.size());
  std::printf("tessera-sim: %s, %zu device(s), model %s, compensation %s, %lld training examples, seed %llu\n",
              std::string(rounds::to_string(cfg.strategy)).c_str(), s->shards().size(), core::widths_text(cfg.model).c_str(),
              std::string(core::to_string(cfg.model.compensation)).c_str(), static_cast<long long>(data.train->size()),
              static_cast<unsigned long long>(cfg.seed));
  if (const std::string budgets = s->budget_summary(); !budgets.empty()) std::printf("tessera-sim: %s\n", budgets.c_str());
  std::fflush(stdout);
  for (const auto& note : rounds::plan_notes(cfg)) std::fprintf(stderr, "tessera-sim: warning: %s\n", note.c_str());
  s->on_round([](const rounds::round_metrics& m) {
    std::printf("%s\n", m.to_line().c_str());
    std::fflush(stdout);
  });
  while (!s->done()) TESSERA_TRY(s->run_round());
  TESSERA_TRY(s->finish());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::sim::rank_scope mpi(argc, argv);
  if (!mpi.problem().empty()) {
    std::fprintf(stderr, "tessera-sim: error: %s\n", mpi.problem().c_str());
    return 2;
  }
  const bool shards = argc > 1 && std::strcmp(argv[1], "shards") == 0;
  return mpi.end(core::run_configured(k_command, argc, argv, shards ? 2 : 1, sim::read_sim_config, shards ? write_shards : simulate));
}
