// tessera/sim/sim_config.hpp — tessera-sim's configuration: the run's fields plus its virtual fleet and data.
//
// The shared run fields (rounds/run_config.hpp) mean the same as on tessera-hub; the simulator adds how
// many devices there are, their capacities, how the training set is split among them, and where the
// data is. A JSON file (every field has a default; an error names the file and the field) and
// KEY=VALUE overrides ("rounds=100", "model.hidden=[2048,2048]").
//
//   TESSERA_ASSIGN_OR_RETURN(auto cfg, sim::load_sim_config("examples/sim-fashion-ist.json", {"rounds=10"}));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/dataset.hpp"
#include "tessera/rounds/run_config.hpp"

namespace tessera::sim {

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
struct sim_config : rounds::run_config {
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

}  // namespace tessera::sim
