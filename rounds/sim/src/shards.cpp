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
  auto load = [&](const std::string& images, const std::string& labels, const std::string& csv,
                  const core::feature_stats* stats, std::int64_t first) -> core::result<core::memory_table> {
    std::unique_ptr<core::example_stream> stream;
    if (d.format == "idx") {
      core::idx_options o;
      o.norm = d.norm;
      if (stats) o.stats = *stats;
      auto s = core::open_idx(images, labels, o);
      TESSERA_TRY(s);
      stream = std::move(s.value());
    } else {
      core::csv_options o;
      o.norm = d.norm;
      if (stats) o.stats = *stats;
      o.label_column = d.label_column;
      o.header = d.header;
      auto s = core::open_csv(csv, o);
      TESSERA_TRY(s);
      stream = std::move(s.value());
    }
    if (first > 0) return core::load_first(*stream, std::min(first, d.max_examples));
    return core::load_all(*stream, d.max_examples);
  };
  // Standardisation statistics come from the training set only, and are applied to the test set too.
  std::optional<core::feature_stats> stats;
  if (d.norm == core::normalization::standardize) {
    std::unique_ptr<core::example_stream> raw;
    if (d.format == "idx") {
      auto s = core::open_idx(d.train_images, d.train_labels, {.norm = core::normalization::none, .stats = {}});
      TESSERA_TRY(s);
      raw = std::move(s.value());
    } else {
      core::csv_options o;
      o.label_column = d.label_column;
      o.header = d.header;
      auto s = core::open_csv(d.train_csv, o);
      TESSERA_TRY(s);
      raw = std::move(s.value());
    }
    auto st = core::compute_stats(*raw);
    TESSERA_TRY(st);
    stats = std::move(st.value());
  }
  auto train = load(d.train_images, d.train_labels, d.train_csv, stats ? &*stats : nullptr, d.examples);
  TESSERA_TRY(train);
  out.train = std::make_unique<core::memory_table>(std::move(train.value()));
  const bool has_test = d.format == "idx" ? !d.test_images.empty() : !d.test_csv.empty();
  if (has_test) {
    auto test = load(d.test_images, d.test_labels, d.test_csv, stats ? &*stats : nullptr, 0);
    TESSERA_TRY(test);
    out.test = std::make_unique<core::memory_table>(std::move(test.value()));
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
  if (config.partition == "iid") return core::shard_iid(train.size(), devices, core::shard_seed(config.seed));
  if (config.model.task != core::task_kind::classification)
    return make_error(errc::invalid_spec, "partition 'dirichlet' needs a classification task");
  return core::shard_dirichlet(train.targets(), config.model.outputs, devices, config.alpha,
                               core::shard_seed(config.seed));
}

core::result<std::vector<std::string>> write_shards(const sim_config& config, const std::string& out_dir) {
  if (config.data.format != "idx")
    return make_error(errc::unsupported, "shards are written as IDX files: the data must be IDX (data.format), not " + config.data.format);
  data_config raw = config.data;
  raw.norm = core::normalization::none;  // the bytes of the files, so a device reads what the simulator reads
  raw.test_images.clear();
  auto loaded = load_sim_data(raw);
  TESSERA_TRY(loaded);
  const core::memory_table& train = *loaded.value().train;
  auto shards = make_shards(config, train);
  TESSERA_TRY(shards);
  const auto features = static_cast<std::size_t>(train.feature_count());
  std::vector<std::string> folders;
  std::error_code ec;
  for (std::size_t d = 0; d < shards.value().size(); ++d) {
    const auto& idx = shards.value()[d];
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
