#include "tessera/rounds/run_config.hpp"

namespace tessera::rounds {

std::string_view to_string(strategy_kind s) noexcept {
  switch (s) {
    case strategy_kind::ist: return "ist";
    case strategy_kind::fedavg: return "fedavg";
    case strategy_kind::central: return "central";
  }
  return "?";
}

core::result<void> read_run_fields(core::config_reader& r, const std::string& source, run_config& c, bool allow_central) {
  // The model defaults to the Fashion-MNIST MLP of the benchmarks; given fields replace the defaults.
  nlohmann::json model = {{"inputs", 784}, {"hidden", {512, 512}}, {"outputs", 10}};
  if (const auto* m = r.object("model")) model.update(*m);
  auto spec = core::parse_model_spec(model.dump(), source + ": field 'model'");
  TESSERA_TRY(spec);
  c.model = spec.value();
  const std::string strategy = allow_central ? r.choice("strategy", "ist", {"ist", "fedavg", "central"})
                                             : r.choice("strategy", "ist", {"ist", "fedavg"});
  c.strategy = strategy == "fedavg" ? strategy_kind::fedavg : strategy == "central" ? strategy_kind::central : strategy_kind::ist;
  c.groups = static_cast<std::size_t>(r.integer("groups", 0, 0, 4096));
  c.min_width = r.integer("min_width", 8, 1, core::k_max_width);
  c.rounds = r.integer("rounds", 50, 1, 10'000'000);
  c.local_steps = r.integer("local_steps", 50, 1, 100'000'000);
  c.batch = r.integer("batch", 32, 1, 4096);
  c.momentum = static_cast<float>(r.number("momentum", 0.9, 0.0, 0.9999));
  c.weight_decay = static_cast<float>(r.number("weight_decay", 0.0, 0.0, 1.0));
  c.nesterov = r.boolean("nesterov", false);
  // A device's arena holds the velocity and no separate gradient buffer (core/memory.hpp), which
  // Nesterov's update needs: devices do not offer it, so neither does a run.
  if (c.nesterov) r.fail("nesterov", "Nesterov momentum is not offered on devices (their arena has no gradient buffer)");
  c.lr.base = static_cast<float>(r.number("lr", 0.05, 0.0, 100.0));
  auto kind = core::parse_schedule_kind(r.choice("lr_schedule", "constant", {"constant", "step", "cosine"}));
  c.lr.kind = kind.ok() ? kind.value() : core::schedule_kind::constant;
  c.lr.warmup_rounds = r.integer("lr_warmup_rounds", 0, 0, 10'000'000);
  c.lr.step_rounds = r.integer("lr_step_rounds", 10, 1, 10'000'000);
  c.lr.gamma = static_cast<float>(r.number("lr_gamma", 0.5, 0.0, 1.0));
  c.lr.final_fraction = static_cast<float>(r.number("lr_final_fraction", 0.0, 0.0, 1.0));
  c.codec = core::parse_codec(r.choice("codec", "f32", {"f32", "f16", "q8"})).value();
  c.seed = static_cast<std::uint64_t>(r.integer("seed", 1, 0, INT64_MAX));
  c.eval_every = r.integer("eval_every", 1, 1, 10'000'000);
  c.patience = r.integer("patience", 0, 0, 10'000'000);
  c.metrics_path = r.string("metrics", "");
  c.output_path = r.string("output", "");
  c.lr.total_rounds = c.rounds;
  return {};
}

}  // namespace tessera::rounds
