#include "tessera/hub/simulation.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tessera/core/codec.hpp"
#include "tessera/core/json_config.hpp"
#include "tessera/core/mlp.hpp"
#include "tessera/core/partition.hpp"
#include "tessera/core/rng.hpp"
#include "tessera/core/training_block.hpp"

namespace tessera::hub {
namespace {

using core::errc;
using core::make_error;

}  // namespace

core::result<sim_config> parse_sim_config(const nlohmann::json& json, const std::string& source) {
  core::config_reader r(json, source);
  sim_config c;
  TESSERA_TRY(read_run_fields(r, source, c, /*allow_central=*/true));
  c.devices = static_cast<std::size_t>(r.integer("devices", 8, 1, 4096));
  c.partition = r.choice("partition", "iid", {"iid", "dirichlet"});
  c.alpha = r.number("alpha", 0.5, 1e-3, 1e6);
  c.capacities = r.numbers("capacities", {}, 1e-6, 1.0);
  if (!c.capacities.empty() && c.capacities.size() != c.devices)
    r.fail("capacities", std::to_string(c.capacities.size()) + " entries for " + std::to_string(c.devices) + " devices");
  if (const auto* d = r.object("data")) {
    core::config_reader dr = r.child("data", *d);
    data_config& data = c.data;
    data.format = dr.choice("format", data.format, {"idx", "csv"});
    data.train_images = dr.string("train_images", data.train_images);
    data.train_labels = dr.string("train_labels", data.train_labels);
    data.test_images = dr.string("test_images", data.test_images);
    data.test_labels = dr.string("test_labels", data.test_labels);
    data.train_csv = dr.string("train_csv", "");
    data.test_csv = dr.string("test_csv", "");
    data.label_column = static_cast<std::size_t>(dr.integer("label_column", 0, 0, 1 << 20));
    data.header = dr.boolean("header", false);
    const std::string norm = dr.choice("normalization", data.format == "csv" ? "standardize" : "scale_unit",
                                       {"none", "scale_unit", "standardize"});
    data.norm = norm == "none" ? core::normalization::none
                : norm == "standardize" ? core::normalization::standardize
                                        : core::normalization::scale_unit;
    data.max_examples = dr.integer("max_examples", data.max_examples, 1, 1LL << 31);
    data.examples = dr.integer("examples", 0, 0, 1LL << 31);
    if (data.format == "csv" && data.train_csv.empty()) dr.fail("train_csv", "required when format is csv");
    TESSERA_TRY(dr.finish());
  }
  TESSERA_TRY(r.finish());
  if (c.strategy == strategy_kind::central) c.devices = 1;
  if (c.groups > c.devices)
    return make_error(errc::invalid_spec, source + ": field 'groups': " + std::to_string(c.groups) + " groups for " +
                                              std::to_string(c.devices) + " devices");
  return c;
}

core::result<sim_config> load_sim_config(const std::string& path, const std::vector<std::string>& overrides) {
  auto json = core::load_config(path, overrides);
  TESSERA_TRY(json);
  return parse_sim_config(json.value(), path.empty() ? "command line" : path);
}

nlohmann::json round_metrics::to_json() const {
  nlohmann::json j;
  j["round"] = round;
  j["strategy"] = strategy;
  j["devices"] = devices;
  j["groups"] = groups;
  j["bytes_down"] = bytes_down;
  j["bytes_up"] = bytes_up;
  j["train_loss"] = train_loss;
  j["test_accuracy"] = test_accuracy ? nlohmann::json(*test_accuracy) : nlohmann::json(nullptr);
  j["test_loss"] = test_loss ? nlohmann::json(*test_loss) : nlohmann::json(nullptr);
  j["examples"] = examples;
  j["lr"] = learning_rate;
  j["seconds"] = seconds;
  j["plan_seed"] = plan_seed;
  if (stragglers) j["stragglers"] = *stragglers;
  if (refused) j["refused"] = *refused;
  if (rejected) j["rejected"] = *rejected;
  if (resent_bytes) j["resent_bytes"] = *resent_bytes;
  return j;
}

std::string round_metrics::to_line() const {
  char buf[256];
  const std::string acc = test_accuracy ? std::to_string(*test_accuracy * 100.0).substr(0, 5) + "%" : "  -  ";
  std::snprintf(buf, sizeof buf, "round %5lld  %-7s devices %3zu  down %9.2f MB  up %9.2f MB  loss %.4f  test %s  lr %.4g  %.2fs",
                static_cast<long long>(round), strategy.c_str(), devices, static_cast<double>(bytes_down) / 1e6,
                static_cast<double>(bytes_up) / 1e6, train_loss, acc.c_str(), learning_rate, seconds);
  std::string line = buf;
  if (stragglers || refused || rejected) {
    std::snprintf(buf, sizeof buf, "  stragglers %zu  refused %zu  rejected %zu", stragglers.value_or(0),
                  refused.value_or(0), rejected.value_or(0));
    line += buf;
  }
  return line;
}

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

core::result<core::shard_list> make_shards(const sim_config& config, const core::memory_table& train) {
  const std::size_t devices = config.strategy == strategy_kind::central ? 1 : config.devices;
  if (devices == 1) return core::shard_iid(train.size(), 1, 0);
  if (config.partition == "iid") return core::shard_iid(train.size(), devices, core::mix_seed(config.seed, k_stream_shard));
  if (config.model.task != core::task_kind::classification)
    return make_error(errc::invalid_spec, "partition 'dirichlet' needs a classification task");
  return core::shard_dirichlet(train.targets(), config.model.outputs, devices, config.alpha,
                               core::mix_seed(config.seed, k_stream_shard));
}

std::uint64_t device_order_seed(const sim_config& config, std::size_t device) noexcept {
  return core::mix_seed(config.seed, k_stream_order + device);
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
    const std::filesystem::path dir = std::filesystem::absolute(std::filesystem::path(out_dir) / ("device-" + std::to_string(d)));
    std::filesystem::create_directories(dir, ec);
    if (ec) return make_error(errc::io, dir.string() + ": cannot create: " + ec.message());
    const std::string images = (dir / "train-images-idx3-ubyte").string();
    const std::string labels_path = (dir / "train-labels-idx1-ubyte").string();
    TESSERA_TRY(core::write_idx_images(images, 1, static_cast<std::int64_t>(features), pixels));
    TESSERA_TRY(core::write_idx_labels(labels_path, labels));
    // The agent's "data" object: these files, and the batch order the simulator gives this device.
    const nlohmann::json data = {{"format", "idx"}, {"features", images}, {"labels", labels_path},
                                 {"seed", device_order_seed(config, d)}};
    std::ofstream out(dir / "data.json");
    out << data.dump(2) << '\n';
    if (!out) return make_error(errc::io, (dir / "data.json").string() + ": cannot write");
    folders.push_back(dir.string());
  }
  return folders;
}

simulation::simulation(const sim_config& config, core::memory_table* test)
    : config_(config), full_(config.model.full_arch()), test_(test), aggregator_(full_) {}

core::result<std::unique_ptr<simulation>> simulation::create(const sim_config& config, const core::memory_table& train,
                                                             core::memory_table* test) {
  if (train.feature_count() != config.model.inputs)
    return make_error(errc::invalid_spec, train.describe() + ": " + std::to_string(train.feature_count()) +
                                              " features per example, but model.inputs is " + std::to_string(config.model.inputs));
  if (test && test->feature_count() != config.model.inputs)
    return make_error(errc::invalid_spec, test->describe() + ": " + std::to_string(test->feature_count()) +
                                              " features per example, but model.inputs is " + std::to_string(config.model.inputs));
  std::unique_ptr<simulation> sim(new simulation(config, test));
  sim->params_.resize(core::param_count(sim->full_));
  core::initialize(config.model, sim->params_);

  const std::size_t devices = config.strategy == strategy_kind::central ? 1 : config.devices;
  auto made = make_shards(config, train);
  TESSERA_TRY(made);
  const core::shard_list& shards = made.value();
  for (std::size_t d = 0; d < devices; ++d) {
    if (shards[d].empty()) return make_error(errc::invalid_spec, "device " + std::to_string(d) + " got no examples");
    sim->shards_.push_back(train.subset(shards[d], "device " + std::to_string(d)));
  }
  // After all shards exist: the batch sources keep references into shards_.
  for (std::size_t d = 0; d < devices; ++d)
    sim->batches_.push_back(std::make_unique<core::table_batches>(sim->shards_[d], device_order_seed(config, d), config.batch));
  sim->capacities_ = config.capacities.empty() ? std::vector<double>(devices, 1.0) : config.capacities;
  return sim;
}

bool simulation::done() const noexcept { return round_ >= config_.rounds || stopped_early_; }

core::result<round_metrics> simulation::run_round() {
  const auto start = std::chrono::steady_clock::now();
  const std::size_t devices = shards_.size();
  round_metrics m;
  m.round = round_ + 1;
  m.strategy = std::string(to_string(config_.strategy));
  m.devices = devices;
  m.learning_rate = core::learning_rate_at(config_.lr, round_);

  core::round_plan plan;
  if (config_.strategy == strategy_kind::ist) {
    const std::size_t groups = config_.groups > 0 ? config_.groups : core::default_group_count(full_, devices, config_.min_width);
    auto p = core::make_plan(full_, capacities_, groups, {.min_width = config_.min_width},
                             core::mix_seed(config_.seed, k_stream_plan + static_cast<std::uint64_t>(round_)));
    TESSERA_TRY(p);
    plan = std::move(p.value());
  } else {
    plan = core::make_full_plan(full_, devices);
  }
  m.groups = plan.groups;
  m.plan_seed = plan.seed;

  const core::local_training_options opt{
      .steps = config_.local_steps,
      .sgd = {.learning_rate = static_cast<float>(m.learning_rate), .momentum = config_.momentum,
              .weight_decay = config_.weight_decay, .nesterov = config_.nesterov}};
  aggregator_.reset();
  double loss_weighted = 0;
  std::vector<core::subnet> subnets;
  for (std::size_t g = 0; g < plan.groups; ++g)
    subnets.push_back(core::make_subnet(full_, config_.model.compensation, plan, g));
  for (std::size_t d = 0; d < devices; ++d) {
    const core::subnet& sub = subnets[plan.device_group[d]];
    // The device's own memory layout (core/training_block.hpp), so the floats are the device's too.
    auto block = core::training_block::allocate(core::plan_training_memory(sub.arch, config_.batch, config_.momentum != 0.0f, config_.codec));
    TESSERA_TRY(block);
    std::span<float> local = block.value().params();
    core::gather(full_, sub, params_, local);
    // What the device receives and sends has been through the codec, as on the wire.
    std::vector<std::byte> blob(core::encoded_bytes(sub.arch, config_.codec));
    auto wire = [&](const char* direction) -> core::result<void> {
      if (config_.codec == core::codec_kind::f32) return {};
      auto e = core::encode(sub.arch, config_.codec, local, blob);
      if (!e) return make_error(errc::not_finite, "device " + std::to_string(d) + " " + direction + ": " + e.error().message);
      return core::decode(sub.arch, config_.codec, blob, local);
    };
    TESSERA_TRY(wire("download"));
    core::local_trainer trainer(sub.arch, config_.batch, block.value().buffers());
    auto report = trainer.run(local, *batches_[d], opt);
    TESSERA_TRY(report);
    TESSERA_TRY(wire("upload"));
    aggregator_.add(sub, local, static_cast<double>(report.value().examples));
    loss_weighted += report.value().mean_loss * static_cast<double>(report.value().examples);
    m.examples += report.value().examples;
    if (config_.strategy != strategy_kind::central) {
      m.bytes_down += blob.size();
      m.bytes_up += blob.size();
    }
  }
  aggregator_.finish(params_);
  m.train_loss = m.examples > 0 ? loss_weighted / static_cast<double>(m.examples) : 0.0;
  ++round_;

  const bool evaluate_now = test_ != nullptr && (round_ % config_.eval_every == 0 || round_ == config_.rounds);
  if (evaluate_now) {
    core::network net(full_);
    auto ev = core::evaluate(net, params_, *test_);
    TESSERA_TRY(ev);
    m.test_loss = ev.value().loss;
    if (config_.model.task == core::task_kind::classification) m.test_accuracy = ev.value().accuracy;
    const double score = m.test_accuracy ? *m.test_accuracy : -ev.value().loss;
    if (round_ == config_.eval_every || score > best_accuracy_) {
      best_accuracy_ = score;
      evals_since_best_ = 0;
    } else if (config_.patience > 0 && ++evals_since_best_ >= config_.patience) {
      stopped_early_ = true;
    }
  }
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return m;
}

}  // namespace tessera::hub
