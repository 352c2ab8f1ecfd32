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
#include "tessera/core/train.hpp"

namespace tessera::hub {

enum class strategy_kind { ist, fedavg, central };

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
  std::int64_t max_examples = 10'000'000;
};

struct sim_config {
  core::model_spec model;
  strategy_kind strategy = strategy_kind::ist;
  std::size_t devices = 8;
  std::size_t groups = 0;            // 0: one per device, as many as min_width allows
  std::int64_t min_width = 8;
  std::vector<double> capacities;    // per device, empty: all 1
  std::int64_t rounds = 50;
  std::int64_t local_steps = 50;
  std::int64_t batch = 32;
  core::lr_schedule lr;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  core::codec_kind codec = core::codec_kind::f32;  // parameters pass through it both ways
  std::string partition = "iid";     // "iid" or "dirichlet"
  double alpha = 0.5;
  std::uint64_t seed = 1;
  std::int64_t eval_every = 1;
  std::int64_t patience = 0;         // stop after this many evaluations without a new best (0: never)
  std::string metrics_path;          // JSON lines; empty: none
  std::string output_path;           // safetensors written at the end; empty: none
  data_config data;
};

[[nodiscard]] std::string_view to_string(strategy_kind s) noexcept;

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

  [[nodiscard]] nlohmann::json to_json() const;
  [[nodiscard]] std::string to_line() const;
};

// Loads the train and test tables a config names.
struct sim_data {
  std::unique_ptr<core::memory_table> train;
  std::unique_ptr<core::memory_table> test;
};
[[nodiscard]] core::result<sim_data> load_sim_data(const data_config& data);

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
