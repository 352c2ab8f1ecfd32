// tessera/rounds/sim/shards.hpp — the simulator's data: the tables it loads and the devices' shards of them.
//
// The training set is split among the virtual devices (IID, or Dirichlet label skew) from the run's
// seed, and each device reads its shard in its own batch order (core/base/seeds.hpp). write_shards() puts
// the same split on disk, one folder per device with the agent's "data" settings, so that a real fleet
// (tessera-hub and tessera-edge) can run exactly the simulated federation.
//
//   TESSERA_ASSIGN_OR_RETURN(auto data, sim::load_sim_data(cfg));
//   TESSERA_ASSIGN_OR_RETURN(auto shards, sim::make_shards(cfg, *data.train));   // indices per device
//   TESSERA_ASSIGN_OR_RETURN(auto folders, sim::write_shards(cfg, "run/shards")); // device-0, device-1, ...
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/core/data/dataset.hpp"
#include "tessera/core/data/partition.hpp"
#include "tessera/rounds/sim/sim_config.hpp"

namespace tessera::sim {

// The train and test tables a config names (test may be absent), their targets checked against the
// config's model (an error names the file and row).
struct sim_data {
  std::unique_ptr<core::memory_table> train;
  std::unique_ptr<core::memory_table> test;
};
[[nodiscard]] core::result<sim_data> load_sim_data(const sim_config& config);

// The number of devices a run has: 1 for `central`.
[[nodiscard]] std::size_t device_count(const sim_config& config) noexcept;
// The device's id, as the simulator's fleet and write_shards() name it.
[[nodiscard]] std::string device_id(std::size_t device);
// The devices' shards of the training set (IID or Dirichlet, from the run's seed).
[[nodiscard]] core::result<core::shard_list> make_shards(const sim_config& config, const core::memory_table& train);
// Writes each device's shard into out_dir/device-<d>/ (IDX data as uncompressed IDX files, other formats
// as float32 .npy), with a data.json holding the agent's "data" settings (files, normalization and
// batch-order seed), so that an agent reads exactly what the simulated device reads. Returns the folders.
[[nodiscard]] core::result<std::vector<std::string>> write_shards(const sim_config& config, const std::string& out_dir);

}  // namespace tessera::sim
