// tessera/hub/simulation.hpp — a whole federation in one process, without a network.
//
// `tessera-sim` runs N virtual devices, each owning a shard of the training set (IID or Dirichlet label
// skew), through the same round logic the hub runs over the network: plan, gather, local training with
// the core trainer, weighted aggregation, validation. Strategies: `ist`, `fedavg`, and `central` (one
// device with all the data: the reference). It is the tool for research on the algorithm and the
// engine of the learning-quality benchmark.
//
//   auto cfg = hub::load_sim_config("sim.json", overrides);
//   hub::simulation sim(cfg.value(), train, test);           // tables loaded by the caller
//   while (!sim.done()) { auto m = sim.run_round(); print(m.value()); }
//   core::save_model(path, cfg.value().model, sim.params());
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/dataset.hpp"
#include "tessera/core/ist.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/core/model_spec.hpp"
#include "tessera/core/optimizer.hpp"
#include "tessera/core/partition.hpp"
#include "tessera/core/train.hpp"
#include "tessera/hub/run_config.hpp"

namespace tessera::hub {

struct data_config {
  std::string format = "idx";  // "idx" or "csv"
  std::string train_images = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
  std::string train_labels = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz";
  std::string test_images = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
  std::string test_labels = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
  std::string train_csv, test_csv;  // for "csv"
  std::size_t label_column = 0;
  bool header = false;
  core::normalization norm = core::normalization::scale_unit;
  std::int64_t max_examples = 10'000'000;  // a bound: a larger training set is refused
  std::int64_t examples = 0;               // use only the first this many training examples (0: all)
};

// The simulator's run: the shared fields plus its virtual fleet and the data it shards.
struct sim_config : run_config {
  std::size_t devices = 8;
  std::vector<double> capacities;    // per device, empty: all 1
  std::string partition = "iid";     // "iid" or "dirichlet"
  double alpha = 0.5;
  data_config data;
};


// Reads a config file (empty path: all defaults) and applies `key=value` overrides whose keys are
// top-level or dotted fields of the same JSON ("rounds=100", "model.hidden=[2048,2048]").
[[nodiscard]] core::result<sim_config> load_sim_config(const std::string& path, const std::vector<std::string>& overrides);
[[nodiscard]] core::result<sim_config> parse_sim_config(const nlohmann::json& json, const std::string& source);

// One round's figures, as printed and written to the metrics file.
struct round_metrics {
  std::int64_t round = 0;
  std::string strategy;
  std::size_t devices = 0;
  std::size_t groups = 0;
  std::uint64_t bytes_down = 0;  // what the devices would receive this round, summed
  std::uint64_t bytes_up = 0;    // what they would send
  double train_loss = 0;         // example-weighted mean of the devices' local losses
  std::optional<double> test_accuracy;
  std::optional<double> test_loss;
  std::int64_t examples = 0;     // examples processed this round, all devices
  double learning_rate = 0;
  double seconds = 0;
  // Over the network only (the hub): devices whose update did not arrive by the deadline, devices that
  // refused their assignment, updates rejected, and blob bytes sent again after broken links.
  std::optional<std::size_t> stragglers, refused, rejected;
  std::optional<std::uint64_t> resent_bytes;
  std::uint64_t plan_seed = 0;

  [[nodiscard]] nlohmann::json to_json() const;
  [[nodiscard]] std::string to_line() const;
};

// Loads the train and test tables a config names.
struct sim_data {
  std::unique_ptr<core::memory_table> train;
  std::unique_ptr<core::memory_table> test;
};
[[nodiscard]] core::result<sim_data> load_sim_data(const data_config& data);

// The devices' shards of the training set (IID or Dirichlet, from the run's seed) and each device's
// batch-order seed: what a real fleet must hold to reproduce a simulated run.
[[nodiscard]] core::result<core::shard_list> make_shards(const sim_config& config, const core::memory_table& train);
[[nodiscard]] std::uint64_t device_order_seed(const sim_config& config, std::size_t device) noexcept;
// Writes each device's shard as uncompressed IDX files into out_dir/device-<d>/, with a data.json
// holding the agent's "data" settings (files and batch-order seed). Returns the folders.
[[nodiscard]] core::result<std::vector<std::string>> write_shards(const sim_config& config, const std::string& out_dir);

class simulation {
 public:
  // Validates the config against the data and builds the shards; errors name the field.
  [[nodiscard]] static core::result<std::unique_ptr<simulation>> create(const sim_config& config, const core::memory_table& train,
                                                                        core::memory_table* test);

  [[nodiscard]] core::result<round_metrics> run_round();
  [[nodiscard]] bool done() const noexcept;
  [[nodiscard]] std::int64_t round() const noexcept { return round_; }
  [[nodiscard]] std::span<const float> params() const noexcept { return params_; }
  [[nodiscard]] double best_accuracy() const noexcept { return best_accuracy_; }
  [[nodiscard]] const std::vector<core::memory_table>& shards() const noexcept { return shards_; }

 private:
  simulation(const sim_config& config, core::memory_table* test);

  sim_config config_;
  core::mlp_arch full_;
  std::vector<float> params_;
  std::vector<core::memory_table> shards_;
  std::vector<std::unique_ptr<core::table_batches>> batches_;  // per device, persists across rounds
  std::vector<double> capacities_;
  core::memory_table* test_;
  core::aggregator aggregator_;
  std::int64_t round_ = 0;
  double best_accuracy_ = 0;
  std::int64_t evals_since_best_ = 0;
  bool stopped_early_ = false;
};

}  // namespace tessera::hub
