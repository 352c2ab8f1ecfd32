#include "tessera/rounds/sim/shards.hpp"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tessera/core/base/seeds.hpp"
#include "tessera/core/data/targets.hpp"

namespace tessera::sim {

using core::errc;
using core::make_error;
using rounds::strategy_kind;

core::result<sim_data> load_sim_data(const sim_config& config) {
  const data_config& d = config.data;
  sim_data out;
  // Standardization is the model's, with the fleet's statistics (simulation.cpp): files are read as they are.
  if (d.train.norm == core::normalization::standardize || d.test.norm == core::normalization::standardize)
    return make_error(errc::invalid_spec, "data normalization standardize is the model's (model.input_normalization "
                                          "standardize, with the fleet's statistics): read the files with none");
  // Labels the model cannot learn are refused here, where the files are known: the message names the row.
  const auto checked = [&config](const core::memory_table& t, const core::data_source& source) {
    core::target_summary targets;
    targets.add(t.targets());
    return core::check_targets(targets, config.model.task, config.model.outputs, source);
  };
  TESSERA_ASSIGN_OR_RETURN(auto train, core::load_data(d.train, nullptr, d.examples));
  TESSERA_TRY(checked(train, d.train));
  out.train = std::make_unique<core::memory_table>(std::move(train));
  if (!d.test.features.empty()) {
    TESSERA_ASSIGN_OR_RETURN(auto test, core::load_data(d.test, nullptr));
    TESSERA_TRY(checked(test, d.test));
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

namespace {

// One device's shard as files the agent reads exactly as the simulator read them: IDX data as IDX (the
// raw bytes), anything else as float32 .npy (the values as read). Returns the agent's "data" fields.
core::result<nlohmann::json> write_shard(const sim_config& config, const core::memory_table& train,
                                         std::span<const std::uint32_t> idx, const std::filesystem::path& dir) {
  const auto features = static_cast<std::size_t>(train.feature_count());
  const core::data_source& source = config.data.train;
  // The reader's normalization as the simulator used it; with the model's standardization on top, the
  // agent is told standardize (read as it is, and refuse a model without the fleet's statistics).
  const bool standardize = config.model.input_normalization == core::input_normalization_kind::standardize;
  const std::string norm = standardize && source.norm == core::normalization::none
                               ? "standardize"
                               : std::string(core::k_normalization_names.name(source.norm));
  if (source.format == core::data_format::idx) {
    std::vector<std::uint8_t> pixels(idx.size() * features), labels(idx.size());
    for (std::size_t i = 0; i < idx.size(); ++i) {
      const float* x = train.features().data() + static_cast<std::size_t>(idx[i]) * features;
      for (std::size_t f = 0; f < features; ++f) pixels[i * features + f] = static_cast<std::uint8_t>(x[f]);
      labels[i] = static_cast<std::uint8_t>(train.targets()[idx[i]]);
    }
    const std::string images = (dir / "train-images-idx3-ubyte").string();
    const std::string labels_path = (dir / "train-labels-idx1-ubyte").string();
    TESSERA_TRY(core::write_idx_images(images, 1, static_cast<std::int64_t>(features), pixels));
    TESSERA_TRY(core::write_idx_labels(labels_path, labels));
    return nlohmann::json{{"format", "idx"}, {"features", images}, {"labels", labels_path}, {"normalization", norm}};
  }
  std::vector<float> x(idx.size() * features), targets(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i) {
    const auto row = train.features().subspan(static_cast<std::size_t>(idx[i]) * features, features);
    std::copy(row.begin(), row.end(), x.begin() + static_cast<std::ptrdiff_t>(i * features));
    targets[i] = train.targets()[idx[i]];
  }
  const std::string features_path = (dir / "train-features.npy").string();
  const std::string labels_path = (dir / "train-labels.npy").string();
  TESSERA_TRY(core::write_npy_features(features_path, static_cast<std::int64_t>(features), x));
  if (config.model.task == core::task_kind::classification) {
    std::vector<std::int32_t> labels(targets.begin(), targets.end());  // whole numbers: checked as the data loaded
    TESSERA_TRY(core::write_npy_labels(labels_path, labels));
  } else {
    TESSERA_TRY(core::write_npy_targets(labels_path, targets));
  }
  return nlohmann::json{{"format", "npy"}, {"features", features_path}, {"labels", labels_path}, {"normalization", norm}};
}

}  // namespace

core::result<std::vector<std::string>> write_shards(const sim_config& config, const std::string& out_dir) {
  sim_config raw = config;
  // IDX: the bytes of the files (the agent applies the reader's normalization as the simulator did);
  // other formats: the values as the simulator read them.
  if (raw.data.train.format == core::data_format::idx) raw.data.train.norm = core::normalization::none;
  raw.data.test.features.clear();
  TESSERA_ASSIGN_OR_RETURN(const sim_data loaded, load_sim_data(raw));
  const core::memory_table& train = *loaded.train;
  TESSERA_ASSIGN_OR_RETURN(const core::shard_list shards, make_shards(config, train));
  std::vector<std::string> folders;
  std::error_code ec;
  for (std::size_t d = 0; d < shards.size(); ++d) {
    if (shards[d].empty()) return make_error(errc::invalid_spec, "device " + std::to_string(d) + " got no examples");
    const std::filesystem::path dir = std::filesystem::absolute(std::filesystem::path(out_dir) / device_id(d));
    std::filesystem::create_directories(dir, ec);
    if (ec) return make_error(errc::io, dir.string() + ": cannot create: " + ec.message());
    TESSERA_ASSIGN_OR_RETURN(nlohmann::json data, write_shard(config, train, shards[d], dir));
    // The agent's "data" object: these files, and the batch order the simulator gives this device.
    data["seed"] = core::device_order_seed(config.seed, d);
    data["validation_fraction"] = config.data.validation_fraction;  // the same rows held out as in the simulator
    std::ofstream out(dir / "data.json");
    out << data.dump(2) << '\n';
    if (!out) return make_error(errc::io, (dir / "data.json").string() + ": cannot write");
    folders.push_back(dir.string());
  }
  return folders;
}

}  // namespace tessera::sim
