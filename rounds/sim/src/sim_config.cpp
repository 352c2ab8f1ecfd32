#include "tessera/rounds/sim/sim_config.hpp"

#include <limits>

namespace tessera::sim {

using rounds::strategy_kind;

namespace {

void read_data_fields(core::config_reader& r, sim_config& c) {
  data_config& data = c.data;
  // The fields before sources were one object each, named so an old configuration says what to write.
  for (const char* old : {"format", "label_column", "header", "normalization", "max_examples"})
    r.renamed(old, std::string("data.train.") + old + " (and data.test." + old + ")");
  r.renamed("train_images", "data.train.features");
  r.renamed("train_labels", "data.train.labels");
  r.renamed("train_csv", "data.train.features");
  r.renamed("test_images", "data.test.features");
  r.renamed("test_labels", "data.test.labels");
  r.renamed("test_csv", "data.test.features");
  // CSV without units in common gets standardized by default, with the fleet's statistics as a real
  // federation would (rounds/statistics.hpp), unless the model says none.
  const auto csv_default = c.statistics.normalization_given && c.model.input_normalization == core::input_normalization_kind::none
                               ? core::normalization::none
                               : core::normalization::standardize;
  const core::data_source_rules rules{.required = true, .allow_standardize = true, .csv_default = csv_default};
  core::normalization train_norm = data.train.norm;
  if (const auto* t = r.object("train", "the training set, dealt out to the devices")) {
    core::config_reader tr = r.child("train", *t);
    data.train = core::read_data_source(tr, data.train, rules);
    train_norm = data.train.norm;
    // standardize: the model standardizes its inputs with statistics measured on the shards.
    rounds::standardize_with_fleet(tr, data.train, c);
    if (auto done = tr.finish(); !done) r.fail(std::move(done).error());
  }
  if (const auto* t = r.object("test", "the test set the model is evaluated on (features \"\": none)")) {
    core::config_reader tr = r.child("test", *t);
    data.test = core::read_data_source(tr, data.test, {.required = false, .allow_standardize = true, .csv_default = csv_default});
    // The model sees its inputs one way: the test set is normalized as the training set is.
    if (tr.has("normalization") && data.test.norm != train_norm)
      tr.fail("normalization", "the test set is normalized as the training set (data.train.normalization): leave it out");
    if (auto done = tr.finish(); !done) r.fail(std::move(done).error());
  }
  data.test.norm = data.train.norm;
  data.examples = r.integer("examples", 0, 0, std::int64_t{1} << 31, "use only the first this many training examples (0: all)");
  data.validation_fraction = r.number("validation_fraction", 0.1, 0.0, 0.5,
                                      "each device holds out this share of its shard for evaluation on the devices "
                                      "(an agent's data.validation_fraction)");
}

}  // namespace

core::result<sim_config> read_sim_config(core::config_reader& r) {
  sim_config c;
  TESSERA_TRY(rounds::read_run_fields(r, c, /*allow_central=*/true));
  c.devices = static_cast<std::size_t>(r.integer("devices", 8, 1, 4096, "virtual devices, each with its own shard"));
  c.partition = r.choice("partition", partition_kind::iid, k_partition_names, "how the training set is split among devices");
  c.alpha = r.number("alpha", 0.5, 1e-3, 1e6, "dirichlet: label skew (small: strong skew)");
  c.checkpoint = r.string("checkpoint", "", "file saved after every round and resumed from when it exists (empty: none)");
  c.capacities = r.numbers("capacities", {}, 1e-6, 1.0, "per device, the share of every hidden layer it can train (empty: all 1)");
  if (!c.capacities.empty() && c.capacities.size() != c.devices)
    r.fail("capacities", std::to_string(c.capacities.size()) + " entries for " + std::to_string(c.devices) + " devices");
  c.budgets_mib = r.numbers("budgets_mib", {}, 1.0 / 1024, 1 << 20,
                            "the memory each device offers for training, in MiB: one entry for all or one per device (empty: unbounded)");
  if (c.budgets_mib.size() > 1 && c.budgets_mib.size() != c.devices)
    r.fail("budgets_mib", std::to_string(c.budgets_mib.size()) + " entries for " + std::to_string(c.devices) + " devices (one entry: all of them)");
  if (!c.budgets_mib.empty() && !c.capacities.empty())
    r.fail("budgets_mib", "capacities fix each device's share already: give one or the other");
  if (const auto* d = r.object("data", "the examples: a training set and a test set")) {
    core::config_reader dr = r.child("data", *d);
    read_data_fields(dr, c);
    TESSERA_TRY(dr.finish());
  }
  if (c.strategy == strategy_kind::central) c.devices = 1;
  if (c.groups > c.devices)
    r.fail("groups", std::to_string(c.groups) + " groups for " + std::to_string(c.devices) + " devices" +
                         (c.strategy == strategy_kind::central ? " (central training is one device: set groups to 0 or 1)" : ""));
  rounds::check_private_inputs(r, c);
  TESSERA_TRY(r.finish());
  return c;
}

std::uint64_t device_budget_bytes(const sim_config& c, std::size_t device) noexcept {
  if (c.budgets_mib.empty()) return std::numeric_limits<std::uint64_t>::max();
  const double mib = c.budgets_mib.size() == 1 ? c.budgets_mib.front() : c.budgets_mib[device];
  return static_cast<std::uint64_t>(mib * 1024.0 * 1024.0);
}

core::result<sim_config> parse_sim_config(const nlohmann::json& json, const std::string& source) {
  return core::parse_config(json, source, read_sim_config);
}

}  // namespace tessera::sim
