// tessera-sim: a whole federation in one process, for research and the learning-quality benchmarks.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tessera/core/log.hpp"
#include "tessera/sim/shards.hpp"
#include "tessera/sim/simulation.hpp"

namespace {

constexpr const char* k_usage = R"(usage: tessera-sim [--config FILE] [KEY=VALUE ...]
       tessera-sim shards --out DIR [--config FILE] [KEY=VALUE ...]

Runs a federation of virtual devices in one process (no network) and prints one line per round.

  --config FILE   JSON configuration (every field has a default; see examples/sim-*.json)
  KEY=VALUE       overrides a field of the configuration; values are JSON, dotted keys reach into
                  objects: rounds=100 strategy=fedavg model.hidden=[2048,2048] lr_schedule=cosine
  --help          this text

shards: writes each device's shard of the training set (the same split and batch-order seed the
simulator uses) into DIR/device-<d>/ as IDX files, with the agent's "data" settings in data.json, so
a real fleet (tessera-hub and tessera-edge) can run exactly the simulated federation.

Fields: model{inputs,hidden,outputs,task,init,compensation,seed}, strategy (ist|fedavg|central),
devices, groups (0: auto), min_width, capacities[], rounds, local_steps, batch, lr, lr_schedule
(constant|step|cosine), lr_warmup_rounds, lr_step_rounds, lr_gamma, lr_final_fraction, momentum,
weight_decay, nesterov, codec (f32|f16|q8), partition (iid|dirichlet), alpha, seed, eval_every, patience, metrics (JSON
lines file), output (safetensors file), data{format (idx|csv), train_images, train_labels,
test_images, test_labels, train_csv, test_csv, label_column, header, normalization, max_examples,
examples (use only the first N training examples)}.
The default data is Fashion-MNIST from Debian's dataset-fashion-mnist package.
)";

int fail(const std::string& message) {
  std::fprintf(stderr, "tessera-sim: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  std::string config_path, shards_dir;
  std::vector<std::string> overrides;
  const bool shards = argc > 1 && std::strcmp(argv[1], "shards") == 0;
  for (int i = shards ? 2 : 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(k_usage, stdout);
      return 0;
    }
    if (arg == "--config") {
      if (i + 1 >= argc) return fail("--config needs a file");
      config_path = argv[++i];
    } else if (shards && arg == "--out") {
      if (i + 1 >= argc) return fail("--out needs a folder");
      shards_dir = argv[++i];
    } else if (arg.find('=') != std::string::npos && arg.rfind("--", 0) != 0) {
      overrides.push_back(arg);
    } else {
      return fail("unknown argument '" + arg + "' (see --help)");
    }
  }
  auto config = sim::load_sim_config(config_path, overrides);
  if (!config) return fail(config.error().message);
  const sim::sim_config& cfg = config.value();
  if (shards) {
    if (shards_dir.empty()) return fail("shards needs --out DIR");
    auto folders = sim::write_shards(cfg, shards_dir);
    if (!folders) return fail(folders.error().message);
    for (const auto& f : folders.value()) std::printf("%s\n", f.c_str());
    return 0;
  }

  auto data = sim::load_sim_data(cfg.data);
  if (!data) return fail(data.error().message);
  auto created = sim::simulation::create(cfg, *data.value().train, data.value().test.get(), core::stderr_log("sim"));
  if (!created) return fail(created.error().message);
  sim::simulation& s = *created.value();
  std::printf("tessera-sim: %s, %zu device(s), model %lld", std::string(rounds::to_string(cfg.strategy)).c_str(),
              s.shards().size(), static_cast<long long>(cfg.model.inputs));
  for (auto h : cfg.model.hidden) std::printf("-%lld", static_cast<long long>(h));
  std::printf("-%lld, compensation %s, %lld training examples, seed %llu\n", static_cast<long long>(cfg.model.outputs),
              std::string(core::to_string(cfg.model.compensation)).c_str(), static_cast<long long>(data.value().train->size()),
              static_cast<unsigned long long>(cfg.seed));
  std::fflush(stdout);
  s.on_round([](const rounds::round_metrics& m) {
    std::printf("%s\n", m.to_line().c_str());
    std::fflush(stdout);
  });
  while (!s.done())
    if (auto m = s.run_round(); !m) return fail(m.error().message);
  if (auto done = s.finish(); !done) return fail(done.error().message);
  return 0;
}
