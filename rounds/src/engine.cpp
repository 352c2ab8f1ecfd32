#include "tessera/rounds/engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include "tessera/core/codec.hpp"
#include "tessera/core/mlp.hpp"
#include "tessera/core/seeds.hpp"
#include "tessera/core/train.hpp"
#include "tessera/rounds/error.hpp"
#include "engine_secure.hpp"

namespace tessera::rounds {
namespace {

std::string mib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

engine::engine(const run_config& config, std::vector<float> params, std::int64_t completed, early_stop stopping)
    : config_(config),
      full_(config.model.full_arch()),
      params_(std::move(params)),
      completed_(completed),
      server_opt_(config.server_optimizer, params_.size()),
      server_state_pending_(completed > 0 && server_opt_.stateful()),
      aggregator_(full_, config.aggregate, config.trim_fraction),
      stopping_(stopping) {
  TESSERA_ASSERT(params_.size() == core::param_count(full_));
}

core::result<void> engine::restore_server_optimizer(std::optional<core::server_optimizer_state> s) {
  TESSERA_ASSERT(!in_round_);
  const std::string kind(core::to_string(config_.server_optimizer.kind));
  if (!s) {
    if (server_state_pending_)
      return make_error(errc::server_state, "resumed after round " + std::to_string(completed_) + " with server_optimizer.kind " + kind +
                                                ", but the checkpoint holds no server optimizer state (written by a run without one): "
                                                "its moments cannot be rebuilt");
    return {};
  }
  if (auto ok = server_opt_.restore(std::move(*s)); !ok) return make_error(errc::server_state, ok.error().message);
  server_state_pending_ = false;
  return {};
}

void engine::mark_trained(const core::subnet& sub, std::size_t leading) {
  if (server_opt_.identity()) return;
  std::vector<float> local(core::param_count(sub.arch));
  core::gather(full_, sub, trained_, local);
  std::fill_n(local.begin(), std::min(leading, local.size()), 1.0f);
  core::scatter(full_, sub, local, trained_);
}

core::codec_kind engine::codec_for(const device_offer& offer) const noexcept {
  const bool speaks = std::find(offer.codecs.begin(), offer.codecs.end(), config_.codec) != offer.codecs.end();
  return speaks ? config_.codec : core::codec_kind::f32;
}

core::result<double> engine::capacity(const device_offer& offer) const {
  if (offer.examples == 0) return core::make_error(core::errc::invalid_argument, "it holds no examples");
  if (config_.strategy != strategy_kind::ist) {
    if (offer.capacity > 0) return 1.0;
    const std::size_t need = core::bytes_needed(full_, config_.batch, config_.momentum != 0.0f, codec_for(offer)) + beside_arena(full_);
    if (offer.budget_bytes < need)
      return core::make_error(core::errc::over_budget, "FedAvg trains the whole model, which needs " + mib(need) +
                                                           "; the budget is " + mib(offer.budget_bytes));
    return 1.0;
  }
  if (offer.capacity > 0) return std::min(offer.capacity, 1.0);
  const bool momentum = config_.momentum != 0.0f;
  const core::codec_kind codec = codec_for(offer);
  const double c = core::capacity_for_budget(full_, config_.batch, momentum, codec,
                                             static_cast<std::size_t>(offer.budget_bytes), config_.min_width,
                                             secure() ? secure_segments() : 0, private_rounds());
  if (c <= 0) {
    core::mlp_arch narrow = full_;
    for (std::size_t l = 1; l + 1 < narrow.widths.size(); ++l) narrow.widths[l] = std::min(narrow.widths[l], config_.min_width);
    return core::make_error(core::errc::over_budget, "the narrowest subnet (min_width " + std::to_string(config_.min_width) +
                                                         ") needs " + mib(core::bytes_needed(narrow, config_.batch, momentum, codec) + beside_arena(narrow)) +
                                                         "; the budget is " + mib(offer.budget_bytes));
  }
  return c;
}

bool engine::whole_model_round(std::vector<device_offer>& taking, std::span<const double> capacities,
                               std::vector<excluded_device>& excluded) const {
  if (completed_ < config_.rounds - config_.whole_model_rounds) return false;
  const auto holds = [](double c) { return c >= 1.0; };
  if (std::none_of(capacities.begin(), capacities.end(), holds)) return false;  // nobody holds it: an IST round
  std::vector<device_offer> whole;
  for (std::size_t i = 0; i < taking.size(); ++i) {
    if (holds(capacities[i])) {
      whole.push_back(std::move(taking[i]));
      continue;
    }
    excluded.push_back({taking[i].id, "round " + std::to_string(completed_ + 1) +
                                          " trains the whole model (whole_model_rounds); the budget holds " +
                                          std::to_string(static_cast<int>(capacities[i] * 100.0)) + "% of each hidden layer"});
  }
  taking = std::move(whole);
  return true;
}

core::result<void> engine::set_normalization(core::input_normalization n, nlohmann::json statistics) {
  TESSERA_ASSERT(!in_round_);
  const auto inputs = static_cast<std::size_t>(config_.model.inputs);
  if (n.mean.size() != inputs || n.std.size() != inputs)
    return make_error(errc::bad_statistics, "an input normalization of " + std::to_string(n.mean.size()) + " means and " +
                                                std::to_string(n.std.size()) + " deviations for a model of " +
                                                std::to_string(inputs) + " inputs");
  for (std::size_t i = 0; i < inputs; ++i)
    if (!std::isfinite(n.mean[i]) || !std::isfinite(n.std[i]) || !(n.std[i] > 0))
      return make_error(errc::bad_statistics, "input " + std::to_string(i) + "'s normalization is not finite with a positive deviation");
  normalization_ = std::make_shared<const core::input_normalization>(std::move(n));
  statistics_ = std::move(statistics);
  return {};
}

core::result<std::vector<excluded_device>> engine::begin_round(std::vector<device_offer> offers) {
  TESSERA_ASSERT(!in_round_ && !finished());
  if (needs_statistics())
    return make_error(errc::stats_incomplete, "the model standardizes its inputs: the fleet's statistics come before round 1");
  if (server_state_pending_)
    return make_error(errc::server_state, "resumed after round " + std::to_string(completed_) + " with server_optimizer.kind " +
                                              std::string(core::to_string(config_.server_optimizer.kind)) +
                                              ", whose moments were not restored from the checkpoint");
  std::sort(offers.begin(), offers.end(), [](const auto& a, const auto& b) { return natural_less(a.id, b.id); });
  if (private_rounds()) {  // the privacy budget first, then the round's sample (engine_dp.cpp)
    TESSERA_TRY(check_privacy_budget());
    if (secure()) TESSERA_TRY(private_ring_for(dp_population(offers.size())));  // a ring that cannot hold the noised sums: say so now
    TESSERA_ASSIGN_OR_RETURN(offers, sample_private(std::move(offers)));
  }
  std::vector<excluded_device> excluded;
  std::vector<device_offer> taking;
  std::vector<double> capacities;
  for (auto& o : offers) {
    auto c = capacity(o);
    if (!c) {
      excluded.push_back({o.id, c.error().message});
      continue;
    }
    capacities.push_back(c.value());
    taking.push_back(std::move(o));
  }
  // A private round runs with whoever was sampled, nobody included: its noise is released all the same
  // (skipping it would make the sample depend on the devices).
  if (taking.empty() && !private_rounds()) return make_error(errc::no_devices, "no device can take part in this round");

  const auto& sa = config_.secure_aggregation;
  // A private secure round with fewer devices sampled than a sum needs could release nothing: they are
  // not asked to train (the round still counts for the accountant).
  if (sa.enabled && private_rounds() && taking.size() < sa.min_aggregate()) {
    for (const auto& o : taking)
      excluded.push_back({o.id, std::to_string(taking.size()) + " device(s) sampled, below the " + std::to_string(sa.min_aggregate()) +
                                    " a secure sum needs: nothing could be released"});
    taking.clear();
    capacities.clear();
  }
  // With secure aggregation every group has `replication` devices or more: fewer groups than devices.
  const std::size_t group_devices = sa.enabled && config_.strategy == strategy_kind::ist ? taking.size() / sa.replication : taking.size();
  if (sa.enabled && !private_rounds() && (group_devices == 0 || taking.size() < sa.min_aggregate()))
    return make_error(errc::fleet_too_small,
                      "secure aggregation releases no sum from fewer than " + std::to_string(sa.min_aggregate()) + " devices" +
                          (config_.strategy == strategy_kind::ist ? " and trains every group on " + std::to_string(sa.replication) : std::string()) +
                          ": " + std::to_string(taking.size()) + " device" + (taking.size() == 1 ? "" : "s") + " can take part");
  core::round_plan plan;
  if (private_rounds()) {
    TESSERA_ASSIGN_OR_RETURN(plan, plan_private(taking));
  } else if (config_.strategy == strategy_kind::ist && !whole_model_round(taking, capacities, excluded)) {
    const std::size_t groups = config_.groups > 0 ? std::min(config_.groups, group_devices)
                                                  : core::default_group_count(full_, group_devices, config_.min_width);
    // A kept partition: every round of a span of repartition_every rounds cuts with the span's seed.
    const auto span = static_cast<std::uint64_t>(completed_ / config_.repartition_every);
    TESSERA_ASSIGN_OR_RETURN(plan, core::make_plan(full_, capacities, groups, {.min_width = config_.min_width},
                                                   core::plan_seed(config_.seed, span)));
  } else {
    plan = core::make_full_plan(full_, taking.size());
  }
  plan_seed_ = plan.seed;
  groups_ = plan.groups;

  const float lr = core::learning_rate_at(config_.lr, completed_);
  const bool momentum = config_.momentum != 0.0f;
  assignments_.clear();
  assignments_.reserve(taking.size());
  for (std::size_t i = 0; i < taking.size(); ++i) {
    const device_offer& o = taking[i];
    assignment a;
    a.device = o.id;
    a.index = assignments_.size();
    a.group = plan.device_group[i];
    a.sub = core::make_subnet(full_, config_.model.compensation, plan, a.group);
    a.codec = codec_for(o);
    const std::size_t need = core::bytes_needed(a.sub.arch, config_.batch, momentum, a.codec) + beside_arena(a.sub.arch);
    if (o.capacity <= 0 && need > o.budget_bytes) {  // the planner rounds widths; never send what the device must refuse
      excluded.push_back({o.id, "its subnet needs " + mib(need) + "; the budget is " + mib(o.budget_bytes)});
      continue;
    }
    a.task = {.arch = a.sub.arch,
              .steps = config_.local_steps,
              .batch = config_.batch,
              .sgd = {.learning_rate = lr, .momentum = config_.momentum, .weight_decay = config_.weight_decay,
                      .nesterov = config_.nesterov},
              .normalization = normalization_->empty() ? nullptr : normalization_,
              .clip_norm = private_rounds() ? dp_clip() : 0.0};
    a.blob_bytes = core::encoded_bytes(a.sub.arch, a.codec);
    a.upload_bytes = a.blob_bytes;
    assignments_.push_back(std::move(a));
  }
  if (assignments_.empty() && !private_rounds()) return make_error(errc::no_devices, "no device can take part in this round");
  secure_.reset();
  if (sa.enabled && !assignments_.empty()) TESSERA_TRY(plan_secure(plan));
  if (private_rounds()) {
    private_groups_.clear();
    for (std::size_t g = 0; g < plan.groups; ++g) private_groups_.push_back(core::make_subnet(full_, config_.model.compensation, plan, g));
    dp_sum_.assign(params_.size(), 0.0f);
    dp_clipped_ = 0;
    dp_accepted_ = 0;
  }
  aggregator_.reset();
  if (!server_opt_.identity()) trained_.assign(params_.size(), 0.0f);
  update_norm_max_ = 0;
  updates_bounded_ = 0;
  folded_ = 0;
  loss_weighted_ = 0;
  examples_ = 0;
  in_round_ = true;
  return excluded;
}

const assignment* engine::find(std::string_view device) const noexcept {
  if (!in_round_) return nullptr;
  for (const auto& a : assignments_)
    if (a.device == device) return &a;
  return nullptr;
}

assignment* engine::find(std::string_view device) noexcept {
  return const_cast<assignment*>(std::as_const(*this).find(device));
}

core::result<void> engine::encode_download(const assignment& a, std::span<std::byte> out) const {
  TESSERA_ASSERT(out.size() == a.blob_bytes);
  std::vector<float> local(core::param_count(a.sub.arch));
  core::gather(full_, a.sub, params_, local);
  if (auto e = core::encode(a.sub.arch, a.codec, local, out); !e)
    return core::make_error(core::errc::not_finite, "the model cannot be sent to " + a.device + ": " + e.error().message);
  return {};
}

core::result<void> engine::move(assignment& a, assignment_event e) {
  const auto next = next_state(a.state, e);
  if (!next)
    return make_error(errc::illegal_transition, "device " + a.device + ": '" + std::string(to_string(e)) + "' while " +
                                                    std::string(to_string(a.state)));
  a.state = *next;
  if (!is_open(a.state)) fold_ready();
  return {};
}

core::result<void> engine::sent(assignment& a) { return move(a, assignment_event::sent); }

core::result<void> engine::downloaded(assignment& a) { return move(a, assignment_event::downloaded); }

bool engine::all_reported() const noexcept {
  return std::none_of(assignments_.begin(), assignments_.end(), [](const assignment& a) { return is_open(a.state); });
}

// Adds ended assignments to the round's sums in device order, as far as no open one comes first.
void engine::fold_ready() {
  while (folded_ < assignments_.size() && !is_open(assignments_[folded_].state)) {
    assignment& a = assignments_[folded_++];
    if (a.state != assignment_state::accepted) continue;
    if (private_rounds() && !secure()) fold_private(a);
    else if (!secure()) {
      aggregator_.add(a.sub, a.trained, static_cast<double>(a.examples));
      mark_trained(a.sub);
    }
    loss_weighted_ += a.loss * static_cast<double>(a.examples);
    examples_ += static_cast<std::int64_t>(a.examples);
    a.trained = {};
  }
}

core::result<round_metrics> engine::close_round(core::example_table* validation) {
  TESSERA_ASSERT(in_round_);
  round_metrics m;
  m.round = current_round();
  m.strategy = std::string(to_string(config_.strategy));
  m.devices = assignments_.size();
  m.groups = groups_;
  m.plan_seed = plan_seed_;
  m.learning_rate = core::learning_rate_at(config_.lr, completed_);
  faults_ = {};
  for (auto& a : assignments_) {
    if (is_open(a.state)) a.state = assignment_state::straggler;  // the round waits no longer
    m.bytes_down += a.bytes_down;
    m.bytes_up += a.bytes_up;
    faults_.resent_bytes += a.resent_bytes;
    faults_.stragglers += a.state == assignment_state::straggler ? 1 : 0;
    faults_.refused += a.state == assignment_state::refused ? 1 : 0;
    faults_.rejected += a.state == assignment_state::rejected ? 1 : 0;
  }
  fold_ready();
  TESSERA_ASSERT(folded_ == assignments_.size());
  // The server optimizer steps from the model the round started from (assembly below replaces it).
  std::vector<float> previous;
  if (!server_opt_.identity()) previous.assign(params_.begin(), params_.end());
  if (secure_) {  // with differential privacy, the released sums go to dp_sum_
    TESSERA_TRY(apply_secure_sums());
    m.secagg_dropped = secure_outcome_.dropped;
    m.secagg_clipped = secure_outcome_.clipped;
    m.secagg_withheld = secure_outcome_.segments - secure_outcome_.released;
    secure_.reset();
  }
  if (private_rounds()) {
    TESSERA_TRY(apply_private_sums(m));
    dp_sum_ = {};
  } else if (!secure()) {
    aggregator_.finish(params_);
  }
  if (!server_opt_.identity()) {
    (void)server_opt_.step(previous, params_, trained_);
    trained_ = {};
  }
  if (!secure() && config_.strategy != strategy_kind::central) {
    m.update_norm_max = update_norm_max_;
    m.updates_bounded = updates_bounded_;
  }
  m.examples = examples_;
  m.train_loss = examples_ > 0 ? loss_weighted_ / static_cast<double>(examples_) : 0.0;
  ++completed_;
  in_round_ = false;

  if (validation != nullptr && evaluation_due()) {
    core::network net(full_);
    TESSERA_ASSIGN_OR_RETURN(const auto ev, core::evaluate(net, params_, *validation, 256, normalization_.get()));
    m.test_loss = ev.loss;
    if (config_.model.task == core::task_kind::classification) m.test_accuracy = ev.accuracy;
    if (config_.patience_on != patience_kind::federated) note_score(m.test_accuracy ? *m.test_accuracy : -ev.loss);
  }
  return m;
}

void engine::note_score(double score) {
  if (!stopping_.have_best || score > stopping_.best_score) {
    stopping_.have_best = true;
    stopping_.best_score = score;
    stopping_.evals_since_best = 0;
  } else if (config_.patience > 0 && ++stopping_.evals_since_best >= config_.patience) {
    stopping_.stopped = true;
  }
}

bool engine::evaluation_due() const noexcept {
  // The last round always evaluates, also when the run stops early (its privacy budget).
  return !in_round_ && completed_ > 0 && (completed_ % config_.eval_every == 0 || completed_ == config_.rounds || !privacy_stop_.empty());
}

std::vector<evaluator> engine::plan_evaluation(std::vector<device_offer> offers, std::vector<excluded_device>& excluded) const {
  std::sort(offers.begin(), offers.end(), [](const auto& a, const auto& b) { return natural_less(a.id, b.id); });
  std::vector<evaluator> out;
  for (const auto& o : offers) {
    if (o.validation_examples == 0) continue;
    const core::codec_kind codec = codec_for(o);
    const std::size_t need = core::inference_bytes(full_, config_.batch, codec);
    if (o.capacity <= 0 && need > o.budget_bytes) {
      excluded.push_back({o.id, "scoring the whole model needs " + mib(need) + "; the budget is " + mib(o.budget_bytes)});
      continue;
    }
    out.push_back({.id = o.id, .codec = codec, .blob_bytes = core::encoded_bytes(full_, codec)});
  }
  return out;
}

core::training_task engine::evaluation_task() const {
  return {.arch = full_,
          .steps = 1,
          .batch = config_.batch,
          .sgd = {},
          .normalization = normalization_->empty() ? nullptr : normalization_};
}

core::result<void> engine::encode_model(core::codec_kind codec, std::span<std::byte> out) const {
  TESSERA_ASSERT(out.size() == core::encoded_bytes(full_, codec));
  return core::encode(full_, codec, params_, out);
}

void engine::note_federated(const federated_scores& scores, round_metrics& m) {
  scores.fill(m, config_.model.task == core::task_kind::classification);
  if (!m.fed_devices) return;
  // auto: the hub's own figure when it evaluated this round (close_round filled test_loss), else these.
  const bool watch = config_.patience_on == patience_kind::federated ||
                     (config_.patience_on == patience_kind::automatic && !m.test_loss);
  if (watch) note_score(m.fed_accuracy ? *m.fed_accuracy : -*m.fed_loss);
}

}  // namespace tessera::rounds
