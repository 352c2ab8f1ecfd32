#include "tessera/sim/shards.hpp"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tessera/core/seeds.hpp"

namespace tessera::sim {

using core::errc;
using core::make_error;
using rounds::strategy_kind;

core::result<sim_data> load_sim_data(const data_config& d) {
  sim_data out;
  // Standardisation statistics come from the training set only (all of it), and apply to the test set too.
  std::optional<core::feature_stats> stats;
  if (d.train.norm == core::normalization::standardize) {
    TESSERA_ASSIGN_OR_RETURN(stats, core::measure_stats(d.train));
  }
  TESSERA_ASSIGN_OR_RETURN(auto train, core::load_data(d.train, stats ? &*stats : nullptr, d.examples));
  out.train = std::make_unique<core::memory_table>(std::move(train));
  if (!d.test.features.empty()) {
    TESSERA_ASSIGN_OR_RETURN(auto test, core::load_data(d.test, stats ? &*stats : nullptr));
    out.test = std::make_unique<core::memory_table>(std::move(test));
  }
  return out;
}

std::size_t device_count(const sim_config& config) noexcept {
  return config.strategy == strategy_kind::central ? 1 : config.devices;
}

std::string device_id(std::size_t device) { return "device-" + std::to_string(device); }

core::result<core::shard_list> make_shards(const sim_config& config, const core::memory_table& train) {
  const std::size_t devices = device_count(config);
  if (devices == 1) return core::shard_iid(train.size(), 1, 0);
  if (config.partition == partition_kind::iid) return core::shard_iid(train.size(), devices, core::shard_seed(config.seed));
  if (config.model.task != core::task_kind::classification)
    return make_error(errc::invalid_spec, "partition 'dirichlet' needs a classification task");
  return core::shard_dirichlet(train.targets(), config.model.outputs, devices, config.alpha,
                               core::shard_seed(config.seed));
}

core::result<std::vector<std::string>> write_shards(const sim_config& config, const std::string& out_dir) {
  if (config.data.train.format != core::data_format::idx)
    return make_error(errc::unsupported, "shards are written as IDX files: the data must be IDX (data.train.format), not " +
                                             std::string(core::k_data_format_names.name(config.data.train.format)));
  data_config raw = config.data;
  raw.train.norm = core::normalization::none;  // the bytes of the files, so a device reads what the simulator reads
  raw.test.features.clear();
  TESSERA_ASSIGN_OR_RETURN(const sim_data loaded, load_sim_data(raw));
  const core::memory_table& train = *loaded.train;
  TESSERA_ASSIGN_OR_RETURN(const core::shard_list shards, make_shards(config, train));
  const auto features = static_cast<std::size_t>(train.feature_count());
  std::vector<std::string> folders;
  std::error_code ec;
  for (std::size_t d = 0; d < shards.size(); ++d) {
    const auto& idx = shards[d];
    if (idx.empty()) return make_error(errc::invalid_spec, "device " + std::to_string(d) + " got no examples");
    std::vector<std::uint8_t> pixels(idx.size() * features), labels(idx.size());
    for (std::size_t i = 0; i < idx.size(); ++i) {
      const float* x = train.features().data() + static_cast<std::size_t>(idx[i]) * features;
      for (std::size_t f = 0; f < features; ++f) pixels[i * features + f] = static_cast<std::uint8_t>(x[f]);
      labels[i] = static_cast<std::uint8_t>(train.targets()[idx[i]]);
    }
    const std::filesystem::path dir = std::filesystem::absolute(std::filesystem::path(out_dir) / device_id(d));
    std::filesystem::create_directories(dir, ec);
    if (ec) return make_error(errc::io, dir.string() + ": cannot create: " + ec.message());
    const std::string images = (dir / "train-images-idx3-ubyte").string();
    const std::string labels_path = (dir / "train-labels-idx1-ubyte").string();
    TESSERA_TRY(core::write_idx_images(images, 1, static_cast<std::int64_t>(features), pixels));
    TESSERA_TRY(core::write_idx_labels(labels_path, labels));
    // The agent's "data" object: these files, and the batch order the simulator gives this device.
    const nlohmann::json data = {{"format", "idx"}, {"features", images}, {"labels", labels_path},
                                 {"seed", core::device_order_seed(config.seed, d)}};
    std::ofstream out(dir / "data.json");
    out << data.dump(2) << '\n';
    if (!out) return make_error(errc::io, (dir / "data.json").string() + ": cannot write");
    folders.push_back(dir.string());
  }
  return folders;
}

}  // namespace tessera::sim
