#include "tessera/sim/sim_config.hpp"

#include "tessera/core/json_config.hpp"

namespace tessera::sim {

using core::errc;
using core::make_error;
using rounds::strategy_kind;

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

}  // namespace tessera::sim
