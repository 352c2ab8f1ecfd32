#include "tessera/rounds/sim/simulation.hpp"

#include <algorithm>
#include <optional>
#include <chrono>
#include <limits>

#include "tessera/core/base/seeds.hpp"
#include "tessera/core/data/stats_vector.hpp"
#include "tessera/core/data/targets.hpp"
#include "tessera/core/math/codec.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/train/device_round.hpp"
#include "tessera/core/train/training_block.hpp"
#include "tessera/rounds/sim/shards.hpp"
#include "tessera/rounds/secure_sum.hpp"
#include "tessera/rounds/statistics.hpp"
#include "ranks.hpp"

namespace tessera::sim {
namespace {

using core::errc;
using core::make_error;

// The table's examples fit the model: as many features as it has inputs, targets it can learn.
core::result<void> check_data(const core::memory_table& table, const sim_config& config) {
  if (table.feature_count() != config.model.inputs)
    return make_error(errc::invalid_spec, table.describe() + ": " + std::to_string(table.feature_count()) +
                                              " features per example, but model.inputs is " + std::to_string(config.model.inputs));
  core::target_summary targets;
  targets.add(table.targets());
  return core::check_targets(targets, config.model.task, config.model.outputs, [&table](std::int64_t i) {
    return table.describe() + ": example " + std::to_string(i) + " (counting from 0)";
  });
}

}  // namespace

simulation::simulation(const sim_config& config, core::memory_table* test, std::vector<float> params, rounds::recorder recorder,
                       core::log_sink log)
    : config_(config),
      test_(test),
      engine_(config, std::move(params), 0),
      recorder_(std::move(recorder)),
      log_(std::move(log)) {}

core::result<std::unique_ptr<simulation>> simulation::create(const sim_config& given, const core::memory_table& train,
                                                             core::memory_table* test, core::log_sink log) {
  TESSERA_ASSIGN_OR_RETURN(const sim_config config, for_this_rank(given));
  TESSERA_TRY(check_data(train, config));
  if (test) TESSERA_TRY(check_data(*test, config));
  TESSERA_ASSIGN_OR_RETURN(auto shards, make_shards(config, train));
  std::vector<float> params(core::param_count(config.model.full_arch()));
  core::initialize(config.model, params);
  TESSERA_ASSIGN_OR_RETURN(auto recorder, rounds::recorder::open(config, {.checkpoint = config.checkpoint, .seal_key = std::nullopt}, log));
  std::unique_ptr<simulation> sim(new simulation(config, test, std::move(params), std::move(recorder), std::move(log)));

  const std::size_t devices = device_count(config);
  // Differential privacy: the fleet is the population, and sampling and noise come from the seed.
  sim->engine_.set_population(devices);
  sim->engine_.use_seeded_draws();
  for (std::size_t d = 0; d < devices; ++d) {
    if (shards[d].empty()) return make_error(errc::invalid_spec, "device " + std::to_string(d) + " got no examples");
    sim->shards_.push_back(train.subset(shards[d], "device " + std::to_string(d)));
  }
  // After all shards exist: the batch sources keep references into shards_.
  for (std::size_t d = 0; d < devices; ++d) {
    const std::uint64_t order = core::device_order_seed(config.seed, d);
    core::memory_table& shard = sim->shards_[d];
    auto held = std::make_shared<const std::vector<std::uint32_t>>(
        core::held_out_rows(shard.size(), config.data.validation_fraction, core::validation_seed(order)));
    if (static_cast<std::int64_t>(held->size()) >= shard.size())
      return make_error(errc::invalid_spec, "device " + std::to_string(d) + " holds out all of its " + std::to_string(shard.size()) +
                                                " examples (data.validation_fraction)");
    device dev{.id = device_id(d),
               .shard = d,
               .training = core::make_subset_table(shard, held, /*listed=*/false),
               .validation = held->empty() ? nullptr : core::make_subset_table(shard, held, /*listed=*/true),
               .batches = nullptr,
               .capacity = !config.budgets_mib.empty() ? 0.0 : config.capacities.empty() ? 1.0 : config.capacities[d],
               .budget_bytes = device_budget_bytes(config, d)};
    dev.batches = std::make_unique<core::table_batches>(*dev.training, order, config.batch);
    sim->by_id_.emplace(dev.id, d);
    sim->registry_.push_back({.id = dev.id, .examples = static_cast<std::uint64_t>(dev.training->size())});
    sim->devices_.push_back(std::move(dev));
  }
  if (!config.checkpoint.empty()) TESSERA_TRY(sim->resume());
  TESSERA_TRY(sim->check_rounds_to_come());  // the rounds still to run
  if (sim->engine_.needs_statistics()) TESSERA_TRY(sim->measure_statistics());
  return sim;
}

// IST's last rounds train the whole model on the devices that hold it (whole_model_rounds); in a
// simulated fleet every device takes every round, so each must hold it, said before round 1 rather
// than when the first such round comes. Likewise an SLT stage that no device can train.
core::result<void> simulation::check_rounds_to_come() const {
  if (auto held = engine_.check_stages(offers()); !held) return make_error(errc::invalid_spec, held.error().message);  // SLT's, likewise
  if (config_.strategy != rounds::strategy_kind::ist || config_.whole_model_rounds == 0) return {};
  const std::size_t need = engine_.whole_model_bytes();
  const std::string rounds = "whole_model_rounds " + std::to_string(config_.whole_model_rounds) + " trains the whole model";
  const std::string fix = ": set whole_model_rounds to 0, or give every device room for the model (the hub would leave such a device "
                          "out of those rounds; the simulator runs every device every round)";
  // The engine's own test of who holds the whole model (capacity 1), on the offers the rounds will see.
  const auto all = offers();
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto c = engine_.capacity(all[i]);
    if (c && c.value() >= 1.0) continue;
    const device& d = devices_[i];
    if (d.capacity > 0)
      return make_error(errc::invalid_spec, rounds + ", but " + d.id + "'s capacity is " + std::to_string(d.capacity) + " (capacities)" + fix);
    return make_error(errc::invalid_spec, rounds + ", which needs " + core::mib_text(need) + "; " + d.id + "'s budget is " +
                                              core::mib_text(d.budget_bytes) + " (budgets_mib)" + fix);
  }
  return {};
}

std::string simulation::budget_summary() const {
  if (config_.budgets_mib.empty()) return {};
  const auto [low, high] = std::minmax_element(devices_.begin(), devices_.end(),
                                                [](const device& a, const device& b) { return a.budget_bytes < b.budget_bytes; });
  const std::string fleet = low->budget_bytes == high->budget_bytes
                                ? "each device: " + core::mib_text(low->budget_bytes)
                                : "devices: " + core::mib_text(low->budget_bytes) + " to " + core::mib_text(high->budget_bytes);
  std::string need = "; the model needs " + core::mib_text(engine_.whole_model_bytes(config_.batch)) + " to train at batch " +
                     std::to_string(config_.batch);
  if (config_.memory_rows() != config_.batch)
    need += ", " + core::mib_text(engine_.whole_model_bytes()) + " in micro-batches of " + std::to_string(config_.micro_batch);
  return fleet + need;
}

core::result<void> simulation::resume() {
  TESSERA_ASSIGN_OR_RETURN(auto loaded, rounds::load_latest_checkpoint(config_.checkpoint, config_.model, nullptr));
  if (!loaded) return {};
  const std::string file = loaded->file.string();
  std::vector<rounds::device_record> records = loaded->state.registry;
  const std::optional<std::int64_t> ledger_round = loaded->ledger_round;
  if (auto ok = engine_.restore(std::move(loaded->state)); !ok) return core::error{ok.error().code, file + ": " + ok.error().message};
  for (const auto& r : records) {
    const auto at = by_id_.find(r.id);
    if (at == by_id_.end())
      return make_error(errc::invalid_spec, file + ": written by a run with device " + r.id + ", which this fleet of " +
                                                std::to_string(devices_.size()) + " does not have");
    devices_[at->second].batches->skip(r.examples_drawn);
    registry_[at->second] = r;
  }
  if (log_) log_(core::log_level::info, "resumed from " + file + " after round " + std::to_string(engine_.completed()));
  if (ledger_round && log_)
    log_(core::log_level::warning, "the privacy ledger records rounds up to " + std::to_string(*ledger_round) + ", past " + file +
                                       "'s: ε stays at what they spent, " + std::to_string(engine_.epsilon()));
  return {};
}

void simulation::note_round() {
  for (const auto& a : engine_.assignments()) {
    const std::size_t d = by_id_.find(a.device)->second;
    rounds::device_record& r = registry_[d];
    ++(a.state == rounds::assignment_state::accepted ? r.rounds_done : r.rounds_missed);
    r.examples_drawn = devices_[d].batches->drawn();
  }
}

std::vector<rounds::device_offer> simulation::offers() const {
  std::vector<rounds::device_offer> out;
  out.reserve(devices_.size());
  // Every device speaks the run's codec and the one slt's frozen layers travel in.
  std::vector<core::codec_kind> codecs = {config_.codec};
  if (config_.slt.frozen_codec != config_.codec) codecs.push_back(config_.slt.frozen_codec);
  for (const auto& d : devices_)
    out.push_back({.id = d.id,
                   .budget_bytes = d.budget_bytes,
                   .examples = static_cast<std::uint64_t>(d.training->size()),
                   .codecs = codecs,
                   .capacity = d.capacity,
                   .validation_examples = d.validation ? static_cast<std::uint64_t>(d.validation->size()) : 0});
  return out;
}

// The fleet's statistics as the hub gathers them: the same devices asked, the same two passes over each
// shard in its order (an agent reads its shard's files in that order), added in the same order — or,
// under secure aggregation, each pass's vectors encoded as the agents encode them and summed unmasked
// (the masks cancel in the ring): the hub's released bits.
core::result<void> simulation::measure_statistics() {
  rounds::stats_gathering g(config_.model, config_.statistics.min_examples);
  if (config_.secure_aggregation.enabled) g.mask_with(config_.secure_aggregation);
  TESSERA_ASSIGN_OR_RETURN(auto asked, engine_.draw_cohort(offers(), "tessera statistics v1"));  // as the hub asks
  TESSERA_ASSIGN_OR_RETURN(const auto skipped, g.begin(std::move(asked)));
  for (const auto& e : skipped)
    if (log_) log_(core::log_level::warning, e.id + " is not asked for statistics: " + e.reason);
  const auto stream_of = [this](const std::string& id) { return core::make_table_stream(*devices_[by_id_.find(id)->second].training); };
  const auto& spec = config_.model;
  const auto pass1 = [&](const std::string& id) -> core::result<std::vector<float>> {
    const auto bounds = g.scale().bounds;  // a masked pass measures within them
    TESSERA_ASSIGN_OR_RETURN(const auto sums, core::measure_sums(*stream_of(id), spec.task, spec.outputs, bounds));
    if (!g.masked()) {
      TESSERA_TRY(g.add_sums(id, sums));
      return std::vector<float>{};
    }
    return core::sums_vector(sums, spec.task, g.scale());
  };
  const auto pass2 = [&](const std::string& id) -> core::result<std::vector<float>> {
    const auto bounds = g.scale().bounds;
    TESSERA_ASSIGN_OR_RETURN(const auto spread, core::measure_spread(*stream_of(id), g.mean(), g.target_mean(), bounds));
    if (!g.masked()) {
      TESSERA_TRY(g.add_spread(id, spread));
      return std::vector<float>{};
    }
    return core::spread_vector(spread, g.mean(), g.target_mean(), spec.task, g.scale());
  };
  TESSERA_TRY(statistics_pass(g, pass1));
  TESSERA_TRY(statistics_pass(g, pass2));
  TESSERA_ASSIGN_OR_RETURN(auto n, g.normalization());
  if (log_) log_(core::log_level::info, "the fleet's input statistics: " + g.summary().dump());
  return engine_.set_normalization(std::move(n), g.summary());
}

// One pass over the asked devices: `measure` adds a device's figures (plain) or returns its vector,
// which goes into the pass's secure sum.
core::result<void> simulation::statistics_pass(rounds::stats_gathering& g,
                                               const std::function<core::result<std::vector<float>>(const std::string&)>& measure) {
  if (!g.masked()) {
    for (const auto& id : g.asked()) TESSERA_TRY(measure(id));
    return g.finish_pass();
  }
  TESSERA_ASSIGN_OR_RETURN(auto sum, g.begin_masked_pass());
  for (const auto& id : g.asked()) {
    auto v = measure(id);
    if (!v) return core::error{v.error().code, "device " + id + "'s statistics: " + v.error().message};
    TESSERA_TRY(sum.add_plain(id, v.value()));
  }
  TESSERA_ASSIGN_OR_RETURN(const auto released, sum.finish());
  return g.add_released(released);
}

core::result<rounds::round_metrics> simulation::run_round() {
  const auto started = rounds::recorder::clock::now();
  TESSERA_ASSIGN_OR_RETURN(const auto excluded, engine_.begin_round(offers()));
  // The simulator's budgets are checked before round 1, so a device left out means a wrong specification
  // — unless a private round's sample left out a device that fits (beyond the cohort, too few for a sum).
  const auto all = excluded.empty() ? std::vector<rounds::device_offer>{} : offers();
  for (const auto& e : excluded)
    if (!engine_.private_rounds() || !engine_.capacity(all[by_id_.find(e.id)->second])) return make_error(errc::invalid_spec, e.id + " cannot take part: " + e.reason);
  for (const auto& note : engine_.take_notes()) if (log_) log_(core::log_level::warning, note);
  if (ranks::world().size() > 1) TESSERA_TRY(run_devices_over_ranks());
  else
    for (auto& a : engine_.assignments()) TESSERA_TRY(run_device(a, devices_[by_id_.find(a.device)->second]));

  TESSERA_ASSIGN_OR_RETURN(auto m, engine_.close_round(test_));
  if (const auto& f = engine_.last_faults(); f.untrained) {  // as the hub: the round does not count, and runs again
    note_round();                                            // its devices' records count it, as the hub's do
    if (log_) log_(core::log_level::warning, "round " + std::to_string(m.round) + ": no device's update reached the model (" + f.why_untrained +
                                                 "): it does not count, and runs again");
    return m;
  }
  // A fault-free round prints as it always has; a rejected (diverged) device is said so.
  if (const auto& f = engine_.last_faults(); f.rejected > 0) {
    m.stragglers = f.stragglers;
    m.refused = f.refused;
    m.rejected = f.rejected;
  }
  if (engine_.evaluation_due()) TESSERA_TRY(evaluate_on_devices(m));
  note_round();
  TESSERA_TRY(recorder_.record(engine_, m, started, registry_));
  if (!engine_.privacy_stop().empty() && log_) log_(core::log_level::info, "stopping: " + engine_.privacy_stop());
  return m;
}

core::result<void> simulation::evaluate_on_devices(rounds::round_metrics& m) {
  std::vector<rounds::excluded_device> excluded;  // with budgets_mib, devices too small to score the model
  TESSERA_ASSIGN_OR_RETURN(const auto evaluators, engine_.plan_evaluation(offers(), excluded));
  for (const auto& e : excluded) {
    device& d = devices_[by_id_.find(e.id)->second];
    if (!d.told_not_evaluating && log_) log_(core::log_level::warning, "device " + e.id + " does not evaluate the model: " + e.reason);
    d.told_not_evaluating = true;
  }
  if (evaluators.empty()) return {};
  const core::training_task task = engine_.evaluation_task();
  const core::network net(task.arch);
  rounds::federated_scores scores;
  // Under secure aggregation the scores are one masked sum, as the hub gathers them: each device's
  // vector encoded as its agent encodes it, added unmasked.
  std::optional<rounds::secure_sum> sum;
  const std::int64_t most = rounds::evaluation_max_examples(evaluators);
  const auto withheld = [this](const core::error& why) {
    if (log_) log_(core::log_level::warning, "the devices' evaluation is withheld: " + why.message);
    return core::result<void>{};
  };
  if (config_.secure_aggregation.enabled) {
    auto s = rounds::evaluation_sum(config_.secure_aggregation, evaluators, engine_.completed());
    if (!s) return withheld(s.error());
    sum = std::move(s).value();
  }
  std::uint64_t bytes = 0;
  for (const auto& e : evaluators) {
    bytes += e.blob_bytes;
    device& d = devices_[by_id_.find(e.id)->second];
    TESSERA_ASSIGN_OR_RETURN(auto block, core::training_block::allocate(core::plan_inference_memory(task.arch, task.batch, e.codec)));
    const std::span<std::byte> blob = core::blob_region(block, e.codec, e.blob_bytes);
    TESSERA_TRY(engine_.encode_model(e.codec, blob));
    if (auto ok = core::take_download(block, task.arch, e.codec, blob); !ok)
      return make_error(errc::not_finite, e.id + " evaluation download: " + ok.error().message);
    TESSERA_ASSIGN_OR_RETURN(const auto ev, core::evaluate_in(net, block.params(), *d.validation, block.buffers(), task.batch,
                                                              task.normalization.get()));
    if (!sum) {
      scores.add({.id = e.id, .examples = ev.examples, .loss_sum = ev.loss_sum, .correct = ev.correct});
      continue;
    }
    auto v = core::score_vector({.examples = ev.examples, .loss_sum = ev.loss_sum, .correct = ev.correct}, most, rounds::k_evaluation_loss_bound);
    if (!v) return core::error{v.error().code, "device " + e.id + "'s evaluation: " + v.error().message};
    TESSERA_TRY(sum->add_plain(e.id, v.value()));
  }
  if (sum) {
    auto released = sum->finish();
    if (!released) return withheld(released.error());
    TESSERA_TRY(rounds::add_released_scores(released.value(), most, scores));
  }
  engine_.note_federated(scores, m);
  m.fed.bytes_down = bytes;
  return {};
}

// A device's masked upload, without the masks: its weighted change encoded in the ring exactly as an
// agent's secagg_client encodes it (the masks it would add cancel in the sum).
core::result<void> simulation::secure_upload(rounds::assignment& a, std::span<const float> received, std::span<const float> trained,
                                             const core::local_training_report& report) {
  const crypto::secagg_params& p = engine_.secagg_params();
  const auto examples = static_cast<std::uint64_t>(report.examples);
  // Under differential privacy: the unweighted change and the device's share of the noise (seeded
  // here, from its rounding key; an agent draws its noise key and its self-sampling draw from its
  // CSPRNG).
  TESSERA_ASSIGN_OR_RETURN(const crypto::key256 coin_key, crypto::derive_key(a.rounding_key, "tessera sim device draw v1"));
  const bool drawn = crypto::secagg_draws_in(p, coin_key);
  auto input = p.noise > 0 ? crypto::secagg_change_input(received, trained, p, a.segments, !report.clipped, drawn)
                           : crypto::secagg_weighted_input(received, trained, rounds::engine::secure_weight(a, examples), p, a.segments);
  if (!input) {
    engine_.reject(a, core::make_error(errc::not_finite, input.error().message));
    if (log_) log_(core::log_level::warning, a.device + ": update rejected in round " + std::to_string(engine_.current_round()) + ": " +
                                                 a.reason.message);
    return {};
  }
  std::optional<crypto::key256> noise_key;
  if (p.noise > 0) {
    TESSERA_ASSIGN_OR_RETURN(noise_key, crypto::derive_key(a.rounding_key, "tessera sim device noise v1"));
  }
  TESSERA_ASSIGN_OR_RETURN(const auto encoded, crypto::secagg_encode(p, engine_.assignments().size(), a.segments, input.value(), a.rounding_key,
                                                                     noise_key ? &*noise_key : nullptr));
  TESSERA_TRY(engine_.announce(a, {.round = static_cast<std::uint64_t>(engine_.current_round()),
                                   .clipped = encoded.clipped,
                                   .examples = examples,
                                   .steps = static_cast<std::uint64_t>(report.steps),
                                   .loss = report.mean_loss,
                                   .size = a.upload_bytes,
                                   .codec = a.codec}));
  return engine_.receive_encoded(a, encoded);
}

// One in-process device's round, as an agent does it: the download lands in its training memory, is
// checked, trained on, and the upload goes back through the codec.
core::result<void> simulation::run_device(rounds::assignment& a, device& d) {
  TESSERA_ASSIGN_OR_RETURN(auto block, core::training_block::allocate(core::plan_training_memory(
                                           a.sub.arch, config_.memory_rows(), config_.momentum != 0.0f, a.codec)));
  const std::span<std::byte> blob = core::blob_region(block, a.codec, a.blob_bytes);
  TESSERA_TRY(engine_.encode_download(a, blob));
  TESSERA_TRY(engine_.sent(a));
  if (auto ok = core::take_download(block, a.sub.arch, a.codec, blob); !ok)
    return make_error(errc::not_finite, a.device + " download: " + ok.error().message);
  TESSERA_TRY(engine_.downloaded(a));
  if (config_.strategy != rounds::strategy_kind::central) {
    a.bytes_down = blob.size();
    a.bytes_up = a.upload_bytes;
  }
  // Secure aggregation, and clipping for differential privacy: the device's change is taken against
  // what it received.
  std::vector<float> received;
  if (engine_.secure() || a.task.clip_norm > 0) received.assign(block.params().begin(), block.params().end());

  const std::span<std::byte> upload = core::update_region(block, a.sub.arch, a.codec);  // the blob, less any frozen layers
  auto report = core::train_for_upload(block, a.task, a.codec, upload, *d.batches, nullptr, received);
  if (report && engine_.secure()) return secure_upload(a, received, block.params(), report.value());
  if (!report) {
    // Parameters that diverged cannot be encoded: the device's update is rejected, as the hub would.
    if (report.error().code != errc::not_finite) return std::move(report).error();
    engine_.reject(a, std::move(report).error());
  } else if (auto ok = engine_.announce(a, {.round = static_cast<std::uint64_t>(engine_.current_round()),
                                            .clipped = report.value().clipped ? 1u : 0u,
                                            .examples = static_cast<std::uint64_t>(report.value().examples),
                                            .steps = static_cast<std::uint64_t>(report.value().steps),
                                            .loss = report.value().mean_loss,
                                            .size = upload.size(),
                                            .codec = a.codec});
             ok) {
    (void)engine_.receive(a, upload);
  }
  if (a.state == rounds::assignment_state::rejected && log_)
    log_(core::log_level::warning, a.device + ": update rejected in round " + std::to_string(engine_.current_round()) + ": " +
                                       a.reason.message);
  return {};
}

}  // namespace tessera::sim
