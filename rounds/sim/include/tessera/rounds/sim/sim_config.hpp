// tessera/rounds/sim/sim_config.hpp — tessera-sim's configuration: the run's fields plus its virtual fleet and data.
//
// The shared run fields (rounds/run_config.hpp) mean the same as on tessera-hub; the simulator adds how
// many devices there are, their capacities, how the training set is split among them, and where the
// data is. A JSON file (every field has a default; an error names the file and the field) and
// KEY=VALUE overrides ("rounds=100", "model.hidden=[2048,2048]").
//
//   TESSERA_ASSIGN_OR_RETURN(auto cfg, core::load_config("examples/sim-fashion-ist.json", {"rounds=10"}, sim::read_sim_config));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/config/json_config.hpp"
#include "tessera/core/data/data_source.hpp"
#include "tessera/core/data/dataset.hpp"
#include "tessera/rounds/run_config.hpp"

namespace tessera::sim {

// The simulator's data: a training set it deals out to its devices and an optional test set. The
// default is Fashion-MNIST from Debian's dataset-fashion-mnist package.
struct data_config {
  core::data_source train{.format = core::data_format::idx,
                          .features = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
                          .labels = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz"};
  core::data_source test{.format = core::data_format::idx,
                         .features = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz",
                         .labels = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"};  // features "": none
  std::int64_t examples = 0;  // use only the first this many training examples (0: all)
  // Each device holds out this share of its shard, never trained on, and scores the model on it every
  // eval_every rounds, as an agent with data.validation_fraction does (the same rows: core::held_out_rows).
  double validation_fraction = 0.1;
};

enum class partition_kind { iid, dirichlet };
inline constexpr auto k_partition_names = core::names_in_order<partition_kind>({"iid", "dirichlet"});

// The simulator's run: the shared fields plus its virtual fleet and the data it shards.
struct sim_config : rounds::run_config {
  std::size_t devices = 8;
  std::vector<double> capacities;    // per device, empty: all 1
  // Per device, the memory it offers for training in MiB, as an agent's HELLO does (its
  // memory_budget_mib less its data reader's buffers): one entry for every device, or one per device;
  // empty: unbounded. The engine plans subnets within it and refuses a device it cannot fit, as the hub does.
  std::vector<double> budgets_mib;
  partition_kind partition = partition_kind::iid;
  double alpha = 0.5;
  data_config data;
  // A file the run saves after every round and resumes from when it exists (rounds/checkpoint.hpp;
  // its ".prev" too): a resumed run ends with the model an uninterrupted one does. Empty: none.
  std::string checkpoint;
};

// The device's training budget in bytes (unbounded without budgets_mib).
[[nodiscard]] std::uint64_t device_budget_bytes(const sim_config& c, std::size_t device) noexcept;

// Reads the fields from `r` (a describing reader lists them; see core/config/json_config.hpp).
[[nodiscard]] core::result<sim_config> read_sim_config(core::config_reader& r);
[[nodiscard]] core::result<sim_config> parse_sim_config(const nlohmann::json& json, const std::string& source);

}  // namespace tessera::sim
