#include "tessera/rounds/run_config.hpp"

namespace tessera::rounds {

namespace {

// SLT's head and schedule (the slt object), refused for any other strategy.
void read_slt(core::config_reader& r, run_config& c) {
  const auto* s = r.object("slt", "successive layer training: the head's share and the rounds of each stage");
  if (s == nullptr) return;
  if (c.strategy != strategy_kind::slt) r.fail("slt", "only strategy slt trains in stages (leave slt out)");
  core::config_reader sr = r.child("slt", *s);
  c.slt.head_fraction = sr.number("head_fraction", 0.25, 1e-6, 1.0, "the share of each hidden layer above the stage that trains with it "
                                                                    "(its first units)");
  c.slt.stage_rounds = sr.integers("stage_rounds", {}, 1, 10'000'000, "the rounds of each stage, one per hidden layer, adding up to rounds "
                                                                      "(empty: rounds split evenly)");
  c.slt.frozen_codec = sr.choice("frozen_codec", core::codec_kind::f32, core::k_codec_names,
                                 "how the frozen layers travel and are held on the devices: f32, f16 or q8 (the hub rounds its own "
                                 "copy of them so when their stage begins)");
  const std::size_t stages = c.model.hidden.size();  // a convolutional model's too: its parametric hidden layers
  if (!c.slt.stage_rounds.empty()) {
    std::int64_t total = 0;
    for (const auto n : c.slt.stage_rounds) total += n;
    if (c.slt.stage_rounds.size() != stages)
      sr.fail("stage_rounds", std::to_string(c.slt.stage_rounds.size()) + " entries for a model of " + std::to_string(stages) +
                                  " hidden layers (one stage each)");
    else if (total != c.rounds)
      sr.fail("stage_rounds", "the stages add up to " + std::to_string(total) + " rounds; the run has " + std::to_string(c.rounds));
  }
  if (auto done = sr.finish(); !done) r.fail(std::move(done).error());
}

// The model and how it is cut: strategy, groups, rounds, IST's partition schedule.
core::result<void> read_plan_fields(core::config_reader& r, run_config& c, bool allow_central) {
  // The model defaults to the Fashion-MNIST MLP of the benchmarks; given fields replace the defaults.
  core::model_spec model_defaults;
  model_defaults.inputs = 784;
  model_defaults.hidden = {512, 512};
  model_defaults.outputs = 10;
  c.model = model_defaults;
  if (const auto* m = r.object("model", "the global model: an MLP")) {
    core::config_reader mr = r.child("model", *m);
    c.model = core::read_model_spec(mr, model_defaults);
    c.statistics.normalization_given = mr.has("input_normalization");
    TESSERA_TRY(mr.finish());
  }
  c.strategy = allow_central ? r.choice("strategy", strategy_kind::ist, k_strategy_names,
                                        "ist (subnets), fedavg (the whole model everywhere), slt (successive layer training) or "
                                        "central (one device with all data)")
                             : r.choice("strategy", strategy_kind::ist, k_fleet_strategy_names,
                                        "ist (subnets), fedavg (the whole model on every device) or slt (successive layer training)");
  c.groups = static_cast<std::size_t>(r.integer("groups", 0, 0, 4096, "IST groups per round (0: one per device, as min_width allows)"));
  c.min_width = r.integer("min_width", 8, 1, core::k_max_width, "no group gets fewer neurons of a hidden layer than this");
  c.rounds = r.integer("rounds", 50, 1, 10'000'000, "rounds to run");
  c.devices_per_round = static_cast<std::size_t>(r.integer("devices_per_round", 0, 0, 1'000'000,
                                                          "each round's cohort: this many of the ready devices, drawn at random (0: all)"));
  c.repartition_every = r.integer("repartition_every", 1, 1, 10'000'000, "IST: rounds one partition is kept (1: a fresh cut every round)");
  c.cut = r.choice("cut", core::cut_kind::random, core::k_cut_names,
                   "IST: how each cut orders a layer's neurons: random (from the cut's seed) or rolling (FedRolex: windows that "
                   "move by one neuron per cut)");
  c.whole_model_rounds = r.integer("whole_model_rounds", 0, 0, 10'000'000,
                                   "IST: the last rounds train the whole model on the devices whose budget holds it");
  // Refused only where they would change something, so that an IST file runs as FedAvg with
  // strategy=fedavg repartition_every=1 whole_model_rounds=0.
  const bool cuts = c.strategy == strategy_kind::ist || c.strategy == strategy_kind::slt;
  if (!cuts) {
    if (c.repartition_every != 1) r.fail("repartition_every", "only IST and SLT partition the model (set it to 1 or leave it out)");
    if (c.cut != core::cut_kind::random) r.fail("cut", "only IST and SLT cut the model (leave it out)");
  }
  if (c.strategy != strategy_kind::ist && c.whole_model_rounds != 0)
    r.fail("whole_model_rounds", "only IST ends with whole-model rounds (set it to 0 or leave it out)");
  read_slt(r, c);
  if (c.strategy == strategy_kind::slt && c.model.hidden.empty())
    r.fail("strategy", "slt trains the hidden layers a stage at a time, and this model has none");
  else if (c.strategy == strategy_kind::slt && c.rounds < static_cast<std::int64_t>(c.model.hidden.size()))
    r.fail("rounds", std::to_string(c.rounds) + " rounds for " + std::to_string(c.model.hidden.size()) +
                         " stages of successive layer training (one per hidden layer): at least one round each");
  return {};
}

// Each device's training and what the hub holds its update to.
void read_training_fields(core::config_reader& r, run_config& c) {
  c.local_steps = r.integer("local_steps", 50, 1, 100'000'000, "SGD steps each device takes per round");
  c.batch = r.integer("batch", 32, 1, 4096, "examples per step");
  c.micro_batch = r.integer("micro_batch", 0, 0, 4096,
                            "> 0: each step's batch in parts of this many examples, the same step in their memory (0: whole)");
  if (c.micro_batch > c.batch)
    r.fail("micro_batch", std::to_string(c.micro_batch) + " is larger than batch " + std::to_string(c.batch) + ": a part of a batch is at most the batch");
  if (c.micro_batch == c.batch) c.micro_batch = 0;  // one part of the whole batch is the whole batch
  c.momentum = static_cast<float>(r.number("momentum", 0.9, 0.0, 0.9999, "SGD momentum (0: plain SGD)"));
  c.weight_decay = static_cast<float>(r.number("weight_decay", 0.0, 0.0, 1.0, "L2 weight decay"));
  c.lr.base = static_cast<float>(r.number("lr", 0.05, 0.0, 100.0, "learning rate of local SGD at the schedule's start"));
  c.lr.kind = r.choice("lr_schedule", core::schedule_kind::constant, core::k_schedule_names, "how the learning rate changes over rounds");
  c.lr.warmup_rounds = r.integer("lr_warmup_rounds", 0, 0, 10'000'000, "rounds of linear warm-up");
  c.lr.step_rounds = r.integer("lr_step_rounds", 10, 1, 10'000'000, "step: rounds between decays");
  c.lr.gamma = static_cast<float>(r.number("lr_gamma", 0.5, 0.0, 1.0, "step: decay factor"));
  c.lr.final_fraction = static_cast<float>(r.number("lr_final_fraction", 0.0, 0.0, 1.0, "cosine: the last rate, as a fraction of lr"));
  c.codec = r.choice("codec", core::codec_kind::f32, core::k_codec_names, "how subnets travel: f32, f16 or q8 (int8, a scale per row)");
  c.seed = static_cast<std::uint64_t>(r.integer("seed", 1, 0, INT64_MAX, "the run's seed: plans, shards and batch orders derive from it"));
  c.evaluation.every = r.integer("eval_every", 1, 1, 10'000'000, "rounds between evaluations (and the last round)");
  c.evaluation.patience = r.integer("patience", 0, 0, 10'000'000, "stop after this many evaluations without a new best (0: never)");
  c.evaluation.patience_on = r.choice("patience_on", patience_kind::automatic, k_patience_names,
                           "the figure patience watches: the hub's validation set, the devices' evaluation, or auto (the "
                           "hub's when it has one)");
  c.statistics.min_examples = r.integer("min_stats_examples", 10, 1, INT64_MAX,
                                   "model.input_normalization standardize: devices with fewer examples are not asked for statistics");
  c.update_bounds.max_norm = r.number("max_update_norm", 0.0, 0.0, 1e12,
                               "an update's change may have at most this L2 norm (0: k·max(4, the sent subnet's norm), k = 4·max(1, lr / (1 − momentum) / 0.5))");
  c.update_bounds.max_abs = r.number("max_update_abs", 0.0, 0.0, 1e12,
                              "no value of an update may change by more than this (0: k·max(1, the sent subnet's largest value))");
  c.update_bounds.action = r.choice("update_bound", update_bound_kind::reject, k_update_bound_names,
                            "an update past the bounds: reject it, clip it into them, or off (no bounds)");
}

void read_secure_aggregation(core::config_reader& r, run_config& c) {
  if (const auto* sa = r.object("secure_aggregation", "masked uploads: the hub learns only sums over several devices")) {
    core::config_reader sr = r.child("secure_aggregation", *sa);
    secure_aggregation_config& s = c.secure_aggregation;
    s.enabled = sr.boolean("enabled", true, "mask every upload (secure aggregation)");
    s.replication = static_cast<std::size_t>(sr.integer("replication", 3, 2, 64, "IST: devices that train each group"));
    s.threshold = static_cast<std::size_t>(sr.integer("threshold", static_cast<std::int64_t>(s.replication), 2, 64,
                                                      "a group's sum is released only from this many devices or more"));
    if (s.threshold > s.replication && c.strategy == strategy_kind::ist)
      sr.fail("threshold", "a group has " + std::to_string(s.replication) + " devices (replication): a threshold of " +
                               std::to_string(s.threshold) + " would never release it");
    s.clip = sr.number("clip", 1.0, 1e-6, 1e6, "each value of a device's change (trained − received) is clipped to ±clip");
    s.bits = static_cast<int>(sr.integer("bits", 32, 16, 64, "the ring Z_2^bits the masked values live in"));
    s.neighbors = static_cast<std::size_t>(sr.integer("neighbors", 64, 0, 4096,
                                                      "with more devices than neighbors + 1, each masks with and shares its "
                                                      "secrets with this many on the parameters many devices train (0: with all)"));
    if (s.neighbors == 1) sr.fail("neighbors", "one neighbour cannot connect the devices: 0 (all) or at least 2");
    s.statistics_bounds = sr.numbers("statistics_bounds", {1e4}, 1e-9, 1e12,
                                     "standardize: the largest magnitude of the input features and the regression target, one for "
                                     "all or one per feature and then the target's; the fleet's statistics travel as masked sums "
                                     "scaled by them, and a device with a value beyond its bound refuses them");
    const auto given = s.statistics_bounds.size();
    if (given != 1 && given != static_cast<std::size_t>(c.model.inputs) + 1)
      sr.fail("statistics_bounds", std::to_string(given) + " bounds: one for all, or one per input (" + std::to_string(c.model.inputs) +
                                       ") and then the target's");
    if (auto done = sr.finish(); !done) r.fail(std::move(done).error());
  }
}

void read_dp(core::config_reader& r, run_config& c) {
  if (const auto* dp = r.object("dp", "client-level differential privacy: sampled devices, clipped changes, noised sums, an accountant")) {
    core::config_reader dr = r.child("dp", *dp);
    dp_config& d = c.dp;
    d.enabled = dr.boolean("enabled", true, "add noise and account for ε (DP-FedAvg)");
    d.sample_rate = dr.number("sample_rate", 1.0, 1e-6, 1.0, "each round samples every registered device with this probability (Poisson)");
    d.noise_multiplier = dr.number("noise_multiplier", 1.0, 1e-3, 1e3, "the noise's deviation over the clip (σ)");
    d.clip = dr.number("clip", 1.0, 1e-9, 1e9, "a device's change (trained − received) is clipped to this L2 norm (C)");
    d.delta = dr.number("delta", 1e-5, 1e-300, 0.1, "the δ of the (ε, δ) guarantee");
    d.target_epsilon = dr.number("target_epsilon", 0.0, 0.0, 1e6, "stop before the round that would take ε past it (0: never)");
    d.target_observer = dr.choice("target_observer", dp_observer::hub, k_dp_observer_names,
                                  "with the devices' noise, whose ε target_epsilon bounds: the hub's (it knows who was sampled: no "
                                  "amplification) or the model's users'");
    d.population = static_cast<std::size_t>(dr.integer("population", 0, 0, INT64_MAX,
                                                       "the registered devices (0: the hub's registry, the simulator's devices)"));
    d.self_sampling = dr.boolean("self_sampling", false,
                                 "with secure aggregation: every ready device takes part and draws itself into the sample from its "
                                 "own CSPRNG, so the hub cannot tell who trained (ε against the hub amplified too)");
    d.expected_dropout = dr.number("expected_dropout", 0.3, 0.0, 1.0,
                                   "with the devices' noise: the share of a round's devices expected not to finish; each device's "
                                   "noise is sized for the rest, and a sum with fewer survivors is withheld");
    d.publish_exact = dr.boolean("publish_exact", false,
                                 "also publish the figures that are exact functions of the devices' data (training loss, examples, "
                                 "change norms, clipped counts, the devices' scores): they are not private");
    if (const auto* ac = dr.object("adaptive_clip", "move the clip toward a quantile of the devices' change norms, privately")) {
      core::config_reader ar = dr.child("adaptive_clip", *ac);
      d.adaptive_clip = ar.boolean("enabled", true, "adapt the clip each round");
      d.target_quantile = ar.number("target_quantile", 0.5, 0.0, 1.0, "the share of devices whose change should fit within the clip");
      d.clip_learning_rate = ar.number("learning_rate", 0.2, 0.0, 10.0, "the clip moves by exp(−rate · (fitting share − target)) a round");
      d.count_noise = ar.number("count_noise", 0.0, 0.0, 1e7,
                                  "the deviation of the noise on the count of fitting changes (0: expected devices / 20)");
      if (auto done = ar.finish(); !done) dr.fail(std::move(done).error());
    }
    if (d.enabled && c.strategy == strategy_kind::central) dr.fail("enabled", "central training has no devices to protect");
    if (auto done = dr.finish(); !done) r.fail(std::move(done).error());
  }
}

// How reports combine, and the combinations of modes that cannot work, refused in one place.
void read_aggregate_and_check(core::config_reader& r, run_config& c) {
  c.aggregate.kind = r.choice("aggregate", core::aggregate_kind::mean, core::k_aggregate_names,
                         "how a parameter's reports combine: their example-weighted mean, or (replicated groups, 3 reports or "
                         "more) their median or trimmed mean");
  c.aggregate.trim_fraction = r.number("trim_fraction", 0.2, 0.0, 0.49, "aggregate trimmed_mean: the share of reports dropped at each end");
  if (c.aggregate.kind != core::aggregate_kind::mean) {
    if (c.secure_aggregation.enabled)
      r.fail("aggregate", "a robust aggregate needs each device's update; under secure aggregation the hub sees only sums");
    else if (c.dp.enabled)
      r.fail("aggregate", "differential privacy bounds the mean of clipped changes; a robust aggregate is not accounted for");
    else if (c.strategy == strategy_kind::central)
      r.fail("aggregate", "central training has no reports to combine");
  }
  if (c.dp.enabled && c.dp.self_sampling && !c.secure_aggregation.enabled)
    r.fail("dp", "self_sampling needs secure_aggregation: without it the hub sees who uploaded a change");
  // A private round draws each device's group from its own key (plan_private), never from a shared cut.
  if (c.dp.enabled && c.repartition_every != 1)
    r.fail("repartition_every", "a private round draws each device's group from its own key, so there is no cut to keep (set it to 1)");
  // Secure aggregation's segments and DP's sensitivity assume disjoint groups that send every layer.
  if (c.strategy == strategy_kind::slt && (c.secure_aggregation.enabled || c.dp.enabled))
    r.fail(c.secure_aggregation.enabled ? "secure_aggregation" : "dp",
           "strategy slt sends its frozen layers whole and trains its head on every device: secure aggregation and differential "
           "privacy are planned for IST's disjoint groups and FedAvg (use strategy ist or fedavg)");
  if (c.whole_model_rounds > 0) {
    if (c.secure_aggregation.enabled)
      r.fail("whole_model_rounds",
             "secure aggregation plans its groups by replication; whole-model rounds are for plain rounds (set it to 0)");
    else if (c.dp.enabled)
      r.fail("whole_model_rounds",
             "a private round trains the groups its sample was accounted for; whole-model rounds are for plain rounds (set it to 0)");
  }
}

void read_server_optimizer(core::config_reader& r, run_config& c) {
  if (const auto* so = r.object("server_optimizer", "the hub's step after assembly: (assembled − previous) as a pseudo-gradient "
                                                   "(FedAvgM, FedAdam, FedYogi; Reddi et al. 2021)")) {
    core::config_reader sr = r.child("server_optimizer", *so);
    core::server_optimizer_options& o = c.server_optimizer;
    o.kind = sr.choice("kind", core::server_optimizer_kind::none, core::k_server_optimizer_names,
                       "none (the assembled model, moved by lr), momentum (FedAvgM), adam (FedAdam) or yogi (FedYogi)");
    // adam and yogi step by about lr on every coordinate trained (m / √v is near ±1 while the change is
    // steady): a rate of 1 would throw the model far, so theirs starts lower.
    const bool adaptive = o.kind == core::server_optimizer_kind::adam || o.kind == core::server_optimizer_kind::yogi;
    o.lr = sr.number("lr", adaptive ? 0.01 : 1.0, 1e-6, 100.0,
                     "the server learning rate η (default 1, the plain assembly with kind none; 0.01 for adam and yogi)");
    o.beta1 = sr.number("beta1", 0.9, 0.0, 0.9999, "momentum, adam, yogi: the first moment's decay β1");
    o.beta2 = sr.number("beta2", 0.99, 0.0, 0.99999, "adam, yogi: the second moment's decay β2");
    o.epsilon = sr.number("epsilon", 1e-3, 1e-9, 10.0, "adam, yogi: τ, added to √v (v starts at τ²; no bias correction)");
    if (c.strategy == strategy_kind::central && !o.identity())
      sr.fail(o.kind != core::server_optimizer_kind::none ? "kind" : "lr",
              "central training has no assembly to step from: only kind none with lr 1");
    if (auto done = sr.finish(); !done) r.fail(std::move(done).error());
  }
}

}  // namespace

core::result<void> read_run_fields(core::config_reader& r, run_config& c, bool allow_central) {
  TESSERA_TRY(read_plan_fields(r, c, allow_central));
  read_training_fields(r, c);
  read_secure_aggregation(r, c);
  read_dp(r, c);
  read_aggregate_and_check(r, c);
  read_server_optimizer(r, c);
  c.metrics_path = r.string("metrics", "", "JSON-lines file, one line per round (empty: none)");
  c.output_path = r.string("output", "", "safetensors file of the model, written at the end (empty: none)");
  c.lr.total_rounds = c.rounds;
  return {};
}

void check_private_inputs(core::config_reader& r, const run_config& c) {
  if (c.dp.publishes_exact() || c.model.input_normalization != core::input_normalization_kind::standardize) return;
  r.fail("dp", "with model.input_normalization standardize the fleet's feature statistics are measured exactly and leave in the "
               "model, which no ε covers: give the inputs a fixed scale (input_normalization none, the data's normalization "
               "scale_unit or none), or set dp.publish_exact for data that is not private");
}

void standardize_with_fleet(core::config_reader& source_reader, core::data_source& source, run_config& c) {
  if (source.norm != core::normalization::standardize) return;
  if (c.statistics.normalization_given && c.model.input_normalization != core::input_normalization_kind::standardize)
    source_reader.fail("normalization", "standardize uses the fleet's statistics, but model.input_normalization is none");
  c.model.input_normalization = core::input_normalization_kind::standardize;
  source.norm = core::normalization::none;
}

std::size_t run_config::slt_stage(std::int64_t completed) const noexcept {
  const std::size_t stages = model.hidden.size();
  if (stages == 0) return 0;
  if (!slt.stage_rounds.empty()) {
    std::int64_t end = 0;
    for (std::size_t k = 0; k < slt.stage_rounds.size(); ++k)
      if (completed < (end += slt.stage_rounds[k])) return k;
    return slt.stage_rounds.size() - 1;
  }
  // Evenly: stage k runs ⌊rounds / S⌋ rounds, one more for the first rounds mod S stages.
  const auto n = static_cast<std::int64_t>(stages);
  const std::int64_t base = rounds / n, extra = rounds % n;
  const std::int64_t long_part = extra * (base + 1);
  const std::int64_t k = completed < long_part ? completed / (base + 1) : extra + (base > 0 ? (completed - long_part) / base : 0);
  return static_cast<std::size_t>(std::min(k, n - 1));
}

std::vector<std::string> plan_notes(const run_config& c) {
  std::vector<std::string> notes;
  if (c.strategy != strategy_kind::ist) return notes;
  if (c.whole_model_rounds >= c.rounds)
    notes.push_back("every round of this run trains the whole model (whole_model_rounds " + std::to_string(c.whole_model_rounds) +
                    " covers its " + std::to_string(c.rounds) + " rounds): it is FedAvg on the devices that hold the model, not IST; "
                    "lower whole_model_rounds below rounds to train subnets");
  else if (c.groups == 1)
    notes.push_back("IST with groups 1 gives its one group the whole model: every round is a FedAvg round; set groups to 0 (one per "
                    "device) or 2 or more to train subnets");
  return notes;
}

}  // namespace tessera::rounds
