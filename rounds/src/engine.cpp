#include "tessera/rounds/engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include "tessera/core/base/seeds.hpp"
#include "tessera/core/math/codec.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/train/train.hpp"
#include "tessera/rounds/error.hpp"
#include "cohort.hpp"
#include "private_aggregation.hpp"
#include "secure_aggregation.hpp"

namespace tessera::rounds {

engine::engine(const run_config& config, std::vector<float> params, std::int64_t completed, early_stop stopping)
    : config_(config),
      full_(config.model.full_arch()),
      params_(std::move(params)),
      completed_(completed),
      server_opt_(config.server_optimizer, params_.size()),
      server_state_pending_(completed > 0 && server_opt_.stateful()),
      aggregation_(make_aggregation(config_, params_.size())),
      secure_(dynamic_cast<secure_aggregation*>(aggregation_.get())),
      private_(dynamic_cast<private_aggregation*>(aggregation_.get())),
      stopping_(stopping) {
  TESSERA_ASSERT(params_.size() == core::param_count(full_));
  if (private_ != nullptr) secure_ = private_->secure_part();
  if (private_ != nullptr) private_->set_cap(cohort_size());
}

engine::~engine() = default;
engine::engine(engine&&) noexcept = default;
engine& engine::operator=(engine&&) noexcept = default;

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

core::codec_kind engine::codec_for(const device_offer& offer) const noexcept {
  const bool speaks = std::find(offer.codecs.begin(), offer.codecs.end(), config_.codec) != offer.codecs.end();
  return speaks ? config_.codec : core::codec_kind::f32;
}

core::codec_kind engine::frozen_codec_for(const device_offer& offer) const noexcept {
  const core::codec_kind held = config_.slt.frozen_codec;
  return std::find(offer.codecs.begin(), offer.codecs.end(), held) != offer.codecs.end() ? held : core::codec_kind::f32;
}

core::result<double> engine::capacity(const device_offer& offer) const {
  if (offer.examples == 0) return core::make_error(core::errc::invalid_argument, "it holds no examples");
  if (config_.strategy == strategy_kind::slt) return stage_capacity(offer, stage());
  if (config_.strategy != strategy_kind::ist) {
    if (offer.capacity > 0) return 1.0;
    const std::size_t need = core::bytes_needed(full_, config_.memory_rows(), config_.momentum != 0.0f, codec_for(offer)) + beside_arena(full_);
    if (offer.budget_bytes < need)
      return core::make_error(core::errc::over_budget, "FedAvg trains the whole model, which needs " + core::mib_text(need) +
                                                           "; the budget is " + core::mib_text(offer.budget_bytes));
    return 1.0;
  }
  if (offer.capacity > 0) return std::min(offer.capacity, 1.0);
  const bool momentum = config_.momentum != 0.0f;
  const core::codec_kind codec = codec_for(offer);
  const double c = core::capacity_for_budget(full_, config_.memory_rows(), momentum, codec,
                                             static_cast<std::size_t>(offer.budget_bytes), config_.min_width,
                                             aggregation_->masked_segments(), aggregation_->clips());
  if (c <= 0) {
    core::mlp_arch narrow = full_;
    for (std::size_t l = 1; l + 1 < narrow.widths.size(); ++l) narrow.widths[l] = std::min(narrow.widths[l], config_.min_width);
    return core::make_error(core::errc::over_budget, "the narrowest subnet (min_width " + std::to_string(config_.min_width) +
                                                         ") needs " + core::mib_text(core::bytes_needed(narrow, config_.memory_rows(), momentum, codec) + beside_arena(narrow)) +
                                                         "; the budget is " + core::mib_text(offer.budget_bytes));
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

// No device can take part: why, for the first few left out (an operator's first question).
static core::error no_device_error(const std::vector<excluded_device>& excluded) {
  std::string why = "no device can take part in this round";
  if (excluded.empty()) return make_error(errc::no_devices, why);
  why += " (";
  for (std::size_t i = 0; i < excluded.size() && i < 3; ++i) why += (i > 0 ? "; " : "") + excluded[i].id + ": " + excluded[i].reason;
  if (excluded.size() > 3) why += "; and " + std::to_string(excluded.size() - 3) + " more";
  return make_error(errc::no_devices, why + ")");
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
  refusals_.offered = offers.size();
  // A private round's sample is its cohort (drawn and capped by the sampler, which accounts for the cap).
  cohort_.drawn_from.reset();
  if (!private_rounds() && cohort_size() > 0 && offers.size() > cohort_size()) {
    cohort_.drawn_from = offers.size();
    TESSERA_ASSIGN_OR_RETURN(offers, draw_from(std::move(offers), cohort_size(), cohort_.seeded, config_.seed, current_round(), "tessera cohort v1"));
  }
  TESSERA_ASSIGN_OR_RETURN(offers, aggregation_->sample(view(), std::move(offers)));
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
  auto admitted = aggregation_->admit(view(), taking, excluded);
  if (!admitted && admitted.error().code == errc::no_devices) return no_device_error(excluded);
  TESSERA_ASSIGN_OR_RETURN(const std::size_t group_devices, std::move(admitted));
  capacities.resize(taking.size());
  TESSERA_ASSIGN_OR_RETURN(const core::round_plan plan, this->plan(taking, capacities, group_devices, excluded));
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
    if (a.sub.arch.frozen > 0) a.sub.arch.frozen_codec = frozen_codec_for(o);
    a.codec = codec_for(o);
    // Under secure aggregation the devices of a group check that they were sent the same model (the
    // digest they sign, crypto/secagg.hpp): one codec for everyone, so a device without it sits out.
    if (config_.secure_aggregation.enabled && a.codec != config_.codec) {
      excluded.push_back({o.id, "under secure aggregation every device is sent the model as " + std::string(core::to_string(config_.codec)) +
                                    ", which it does not take (its 'codecs')"});
      continue;
    }
    const std::size_t need = core::bytes_needed(a.sub.arch, config_.memory_rows(), momentum, a.codec) + beside_arena(a.sub.arch);
    if (o.capacity <= 0 && need > o.budget_bytes) {  // the planner rounds widths; never send what the device must refuse
      excluded.push_back({o.id, "its subnet needs " + core::mib_text(need) + "; the budget is " + core::mib_text(o.budget_bytes)});
      continue;
    }
    a.task = {.arch = a.sub.arch,
              .steps = config_.local_steps,
              .batch = config_.batch,
              .micro_batch = config_.micro_batch,
              .sgd = {.learning_rate = lr, .momentum = config_.momentum, .weight_decay = config_.weight_decay},
              .normalization = normalization_->empty() ? nullptr : normalization_,
              .clip_norm = aggregation_->task_clip()};
    a.blob_bytes = core::encoded_bytes(a.sub.arch, a.codec);
    a.upload_bytes = core::update_bytes(a.sub.arch, a.codec);  // the blob, less any frozen layers
    assignments_.push_back(std::move(a));
  }
  if (assignments_.empty() && !aggregation_->runs_empty()) return no_device_error(excluded);
  by_device_.resize(assignments_.size());
  std::iota(by_device_.begin(), by_device_.end(), std::size_t{0});
  std::sort(by_device_.begin(), by_device_.end(), [this](std::size_t i, std::size_t j) { return assignments_[i].device < assignments_[j].device; });
  TESSERA_TRY(aggregation_->begin(view(), plan, assignments_));
  reached_ = reached_mask(full_, !server_opt_.identity());
  folded_ = 0;
  trained_ = {};
  in_round_ = true;
  return excluded;
}

// The aggregation's own plan, or the cut of a plain or secure round: a whole-model round, a fresh or
// kept IST cut for `group_devices`, or FedAvg's whole model.
core::result<core::round_plan> engine::plan(std::vector<device_offer>& taking, std::span<const double> capacities,
                                            std::size_t group_devices, std::vector<excluded_device>& excluded) {
  TESSERA_ASSIGN_OR_RETURN(auto own, aggregation_->own_plan(view(), taking));
  if (own) return std::move(*own);
  if (config_.strategy == strategy_kind::slt) return stage_plan(capacities, group_devices);
  if (config_.strategy != strategy_kind::ist) return core::make_full_plan(full_, taking.size());
  if (whole_model_round(taking, capacities, excluded)) return core::make_full_plan(full_, taking.size());
  if (completed_ >= config_.rounds - config_.whole_model_rounds && !notes_.whole_model_unheld) {
    notes_.whole_model_unheld = true;
    notes_.pending.push_back("round " + std::to_string(completed_ + 1) + " is one of the last " + std::to_string(config_.whole_model_rounds) +
                             " (whole_model_rounds), but no device of this round holds the whole model, which needs " +
                             core::mib_text(whole_model_bytes()) + ": such rounds train subnets until one does");
  }
  const std::size_t groups = config_.groups > 0 ? std::min(config_.groups, group_devices)
                                                : core::default_group_count(full_, group_devices, config_.min_width);
  // A kept partition: every round of a span of repartition_every rounds cuts with the span's seed.
  const auto span = static_cast<std::uint64_t>(completed_ / config_.repartition_every);
  return core::make_plan(full_, capacities, groups, {.min_width = config_.min_width, .cut = config_.cut, .roll = span},
                         core::plan_seed(config_.seed, span));
}

// A binary search over the round's assignments by id: the hub looks a device up at every message, and
// its status page every device of the fleet.
const assignment* engine::find(std::string_view device) const noexcept {
  if (!in_round_) return nullptr;
  const auto it = std::lower_bound(by_device_.begin(), by_device_.end(), device,
                                   [this](std::size_t i, std::string_view id) { return std::string_view(assignments_[i].device) < id; });
  return it != by_device_.end() && assignments_[*it].device == device ? &assignments_[*it] : nullptr;
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
    aggregation_->fold(view(), a, reached_);
    const auto examples = static_cast<std::int64_t>(a.examples);
    trained_.examples += examples;
    if (a.loss) {
      trained_.loss_weighted += *a.loss * static_cast<double>(examples);
      trained_.loss_examples += examples;
    }
    a.trained = {};
  }
}

// After a round's assignments ended: whether no update reached the model (faults_.untrained, with how
// its devices ended), and the run's end when every device refused it too many rounds in a row.
core::result<void> engine::note_untrained() {
  const auto accepted = [](const assignment& a) { return a.state == assignment_state::accepted; };
  const bool none = std::none_of(assignments_.begin(), assignments_.end(), accepted);
  faults_.untrained = none && !aggregation_->runs_empty();
  // A cohort drawn at random stands for the fleet: k of them in a row refusing, the fleet refuses.
  const bool whole_fleet = assignments_.size() >= std::max(refusals_.population, refusals_.offered) || cohort_.drawn_from.has_value();
  const bool all_declined = faults_.untrained && !assignments_.empty() && whole_fleet && faults_.stragglers == 0;
  refusals_.streak = all_declined ? refusals_.streak + 1 : 0;
  if (!none) return {};
  std::string why;
  for (std::size_t i = 0; i < assignments_.size() && i < 3; ++i) {
    const assignment& a = assignments_[i];
    why += (i > 0 ? "; " : "") + a.device + " " + std::string(to_string(a.state)) +
           (a.reason.message.empty() ? std::string() : ": " + a.reason.message);
  }
  if (assignments_.size() > 3) why += "; and " + std::to_string(assignments_.size() - 3) + " more";
  faults_.why_untrained = assignments_.empty() ? "no device was assigned" : why;
  if (refusals_.streak < k_refused_rounds_limit) return {};
  refusals_.streak = 0;
  return make_error(errc::nobody_trains, "every device refused round " + std::to_string(current_round()) + " or had its update rejected, " +
                                             std::to_string(k_refused_rounds_limit) + " rounds in a row (" + why +
                                             "): no device will train this run as it is set. Change the run's settings or the devices' "
                                             "policies, then start the hub again; it resumes from its last checkpoint");
}

core::result<round_metrics> engine::close_round(core::example_table* validation) {
  TESSERA_ASSERT(in_round_);
  round_metrics m;
  m.round = current_round();
  m.strategy = std::string(to_string(config_.strategy));
  m.devices = assignments_.size();
  m.ready = cohort_.drawn_from;
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
  if (auto noted = note_untrained(); !noted || faults_.untrained) {
    (void)aggregation_->finish(view(), assignments_, params_, reached_, m);  // ends its round; nothing was added
    reached_ = {};
    in_round_ = false;
    if (!noted) return std::move(noted).error();
    return m;
  }
  // The server optimizer steps from the model the round started from (assembly below replaces it).
  std::vector<float> previous;
  if (!server_opt_.identity()) previous.assign(params_.begin(), params_.end());
  TESSERA_TRY(aggregation_->finish(view(), assignments_, params_, reached_, m));
  if (secure_ != nullptr && private_ == nullptr && secure_->outcome().released == 0) {
    // Masked uploads arrived but no sum was released (too few survivors): nothing reached the model.
    faults_.untrained = true;
    faults_.why_untrained = secure_->outcome().withheld.empty() ? "no sum released" : secure_->outcome().withheld;
    reached_ = {};
    in_round_ = false;
    return m;
  }
  if (!aggregation_->stop_reason().empty()) stopping_.stopped = true;
  if (!server_opt_.identity()) {
    (void)server_opt_.step(previous, params_, reached_.flags());
    reached_ = {};
  }
  m.examples = trained_.examples;
  if (trained_.loss_examples > 0) m.train_loss = trained_.loss_weighted / static_cast<double>(trained_.loss_examples);
  ++completed_;
  in_round_ = false;

  if (validation != nullptr && evaluation_due()) {
    core::network net(full_);
    TESSERA_ASSIGN_OR_RETURN(const auto ev, core::evaluate(net, params_, *validation, 256, normalization_.get()));
    m.test_loss = ev.loss;
    if (config_.model.task == core::task_kind::classification) m.test_accuracy = ev.accuracy;
    if (config_.evaluation.patience_on != patience_kind::federated) note_score(m.test_accuracy ? *m.test_accuracy : -ev.loss);
  }
  return m;
}

}  // namespace tessera::rounds
