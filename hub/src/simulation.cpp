#include "tessera/hub/simulation.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "tessera/core/codec.hpp"
#include "tessera/core/json_config.hpp"
#include "tessera/core/mlp.hpp"
#include "tessera/core/partition.hpp"
#include "tessera/core/rng.hpp"

namespace tessera::hub {
namespace {

using core::errc;
using core::make_error;

// Seeds of the sub-streams of a run, derived from the run's seed so one number reproduces it all.
constexpr std::uint64_t k_stream_plan = 0x504c414e;    // per round
constexpr std::uint64_t k_stream_shard = 0x53485244;
constexpr std::uint64_t k_stream_order = 0x4f524452;   // per device

// Applies "a.b=value" to a JSON object; value is parsed as JSON, or taken as a string if it is not.
core::result<void> apply_override(nlohmann::json& root, const std::string& item) {
  const auto eq = item.find('=');
  if (eq == std::string::npos || eq == 0)
    return make_error(errc::invalid_spec, "override '" + item + "': expected key=value");
  const std::string key = item.substr(0, eq);
  const std::string text = item.substr(eq + 1);
  nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
  if (value.is_discarded()) value = text;
  nlohmann::json* node = &root;
  std::size_t start = 0;
  for (;;) {
    const auto dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty()) return make_error(errc::invalid_spec, "override '" + item + "': empty field name");
    if (!node->is_object()) return make_error(errc::invalid_spec, "override '" + item + "': '" + part + "' is inside a non-object");
    if (dot == std::string::npos) {
      (*node)[part] = value;
      return {};
    }
    node = &(*node)[part];
    if (node->is_null()) *node = nlohmann::json::object();
    start = dot + 1;
  }
}

}  // namespace

std::string_view to_string(strategy_kind s) noexcept {
  switch (s) {
    case strategy_kind::ist: return "ist";
    case strategy_kind::fedavg: return "fedavg";
    case strategy_kind::central: return "central";
  }
  return "?";
}

core::result<sim_config> parse_sim_config(const nlohmann::json& json, const std::string& source) {
  core::config_reader r(json, source);
  sim_config c;
  // The model defaults to the Fashion-MNIST MLP of the benchmarks; given fields replace the defaults.
  nlohmann::json model = {{"inputs", 784}, {"hidden", {512, 512}}, {"outputs", 10}};
  if (const auto* m = r.object("model")) model.update(*m);
  auto spec = core::parse_model_spec(model.dump(), source + ": field 'model'");
  TESSERA_TRY(spec);
  c.model = spec.value();
  const std::string strategy = r.choice("strategy", "ist", {"ist", "fedavg", "central"});
  c.strategy = strategy == "fedavg" ? strategy_kind::fedavg : strategy == "central" ? strategy_kind::central : strategy_kind::ist;
  c.devices = static_cast<std::size_t>(r.integer("devices", 8, 1, 4096));
  c.groups = static_cast<std::size_t>(r.integer("groups", 0, 0, 4096));
  c.min_width = r.integer("min_width", 8, 1, core::k_max_width);
  c.rounds = r.integer("rounds", 50, 1, 10'000'000);
  c.local_steps = r.integer("local_steps", 50, 1, 100'000'000);
  c.batch = r.integer("batch", 32, 1, 65536);
  c.momentum = static_cast<float>(r.number("momentum", 0.9, 0.0, 0.9999));
  c.weight_decay = static_cast<float>(r.number("weight_decay", 0.0, 0.0, 1.0));
  c.nesterov = r.boolean("nesterov", false);
  c.lr.base = static_cast<float>(r.number("lr", 0.05, 0.0, 100.0));
  auto kind = core::parse_schedule_kind(r.choice("lr_schedule", "constant", {"constant", "step", "cosine"}));
  c.lr.kind = kind.ok() ? kind.value() : core::schedule_kind::constant;
  c.lr.warmup_rounds = r.integer("lr_warmup_rounds", 0, 0, 10'000'000);
  c.lr.step_rounds = r.integer("lr_step_rounds", 10, 1, 10'000'000);
  c.lr.gamma = static_cast<float>(r.number("lr_gamma", 0.5, 0.0, 1.0));
  c.lr.final_fraction = static_cast<float>(r.number("lr_final_fraction", 0.0, 0.0, 1.0));
  c.codec = core::parse_codec(r.choice("codec", "f32", {"f32", "f16", "q8"})).value();
  c.partition = r.choice("partition", "iid", {"iid", "dirichlet"});
  c.alpha = r.number("alpha", 0.5, 1e-3, 1e6);
  c.seed = static_cast<std::uint64_t>(r.integer("seed", 1, 0, INT64_MAX));
  c.eval_every = r.integer("eval_every", 1, 1, 10'000'000);
  c.patience = r.integer("patience", 0, 0, 10'000'000);
  c.metrics_path = r.string("metrics", "");
  c.output_path = r.string("output", "");
  c.lr.total_rounds = c.rounds;
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
  nlohmann::json json = nlohmann::json::object();
  if (!path.empty()) {
    auto loaded = core::load_json_file(path);
    TESSERA_TRY(loaded);
    json = std::move(loaded.value());
  }
  for (const auto& o : overrides) TESSERA_TRY(apply_override(json, o));
  return parse_sim_config(json, path.empty() ? "command line" : path);
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
  return j;
}

std::string round_metrics::to_line() const {
  char buf[256];
  const std::string acc = test_accuracy ? std::to_string(*test_accuracy * 100.0).substr(0, 5) + "%" : "  -  ";
  std::snprintf(buf, sizeof buf, "round %5lld  %-7s devices %3zu  down %9.2f MB  up %9.2f MB  loss %.4f  test %s  lr %.4g  %.2fs",
                static_cast<long long>(round), strategy.c_str(), devices, static_cast<double>(bytes_down) / 1e6,
                static_cast<double>(bytes_up) / 1e6, train_loss, acc.c_str(), learning_rate, seconds);
  return buf;
}

core::result<sim_data> load_sim_data(const data_config& d) {
  sim_data out;
  auto load = [&](const std::string& images, const std::string& labels, const std::string& csv,
                  const core::feature_stats* stats) -> core::result<core::memory_table> {
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
  auto train = load(d.train_images, d.train_labels, d.train_csv, stats ? &*stats : nullptr);
  TESSERA_TRY(train);
  out.train = std::make_unique<core::memory_table>(std::move(train.value()));
  const bool has_test = d.format == "idx" ? !d.test_images.empty() : !d.test_csv.empty();
  if (has_test) {
    auto test = load(d.test_images, d.test_labels, d.test_csv, stats ? &*stats : nullptr);
    TESSERA_TRY(test);
    out.test = std::make_unique<core::memory_table>(std::move(test.value()));
  }
  return out;
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
  core::shard_list shards;
  if (devices == 1) {
    shards = core::shard_iid(train.size(), 1, 0);
  } else if (config.partition == "iid") {
    shards = core::shard_iid(train.size(), devices, core::mix_seed(config.seed, k_stream_shard));
  } else {
    if (config.model.task != core::task_kind::classification)
      return make_error(errc::invalid_spec, "partition 'dirichlet' needs a classification task");
    auto s = core::shard_dirichlet(train.targets(), config.model.outputs, devices, config.alpha,
                                   core::mix_seed(config.seed, k_stream_shard));
    TESSERA_TRY(s);
    shards = std::move(s.value());
  }
  for (std::size_t d = 0; d < devices; ++d) {
    if (shards[d].empty()) return make_error(errc::invalid_spec, "device " + std::to_string(d) + " got no examples");
    sim->shards_.push_back(train.subset(shards[d], "device " + std::to_string(d)));
  }
  // After all shards exist: the batch sources keep references into shards_.
  for (std::size_t d = 0; d < devices; ++d)
    sim->batches_.push_back(std::make_unique<core::table_batches>(sim->shards_[d], core::mix_seed(config.seed, k_stream_order + d),
                                                                  config.batch));
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
    std::vector<float> local(core::param_count(sub.arch));
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
    core::local_trainer trainer(sub.arch, config_.batch);
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
