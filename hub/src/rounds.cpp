#include "tessera/hub/rounds.hpp"

#include <algorithm>
#include <cmath>

#include "tessera/core/codec.hpp"
#include "tessera/core/mlp.hpp"
#include "tessera/core/rng.hpp"
#include "tessera/crypto/digest.hpp"

namespace tessera::hub {
namespace {

using core::errc;
using core::make_error;

std::string mib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

std::string_view to_string(assignment_state s) noexcept {
  switch (s) {
    case assignment_state::assigned: return "assigned";
    case assignment_state::accepted: return "accepted";
    case assignment_state::rejected: return "rejected";
    case assignment_state::refused: return "refused";
  }
  return "?";
}

round_engine::round_engine(const run_config& config, std::vector<float> params, std::int64_t completed)
    : config_(config), full_(config.model.full_arch()), params_(std::move(params)), completed_(completed), aggregator_(full_) {
  TESSERA_ASSERT(params_.size() == core::param_count(full_));
}

core::codec_kind round_engine::codec_for(const device_offer& offer) const noexcept {
  // The hub's preference if the device speaks it, else f32, which every device does.
  const bool speaks = std::find(offer.codecs.begin(), offer.codecs.end(), to_net(config_.codec)) != offer.codecs.end();
  return speaks ? config_.codec : core::codec_kind::f32;
}

core::result<double> round_engine::capacity(const device_offer& offer) const {
  const bool momentum = config_.momentum != 0.0f;
  const core::codec_kind codec = codec_for(offer);
  if (offer.examples == 0) return make_error(errc::invalid_argument, "it holds no examples");
  if (config_.strategy == strategy_kind::fedavg) {
    const std::size_t need = core::bytes_needed(full_, config_.batch, momentum, codec);
    if (offer.budget_bytes < need)
      return make_error(errc::over_budget, "FedAvg trains the whole model, which needs " + mib(need) + "; the budget is " +
                                               mib(offer.budget_bytes));
    return 1.0;
  }
  const double c = core::capacity_for_budget(full_, config_.batch, momentum, codec,
                                             static_cast<std::size_t>(offer.budget_bytes), config_.min_width);
  if (c <= 0) {
    core::mlp_arch narrow = full_;
    for (std::size_t l = 1; l + 1 < narrow.widths.size(); ++l) narrow.widths[l] = std::min(narrow.widths[l], config_.min_width);
    return make_error(errc::over_budget, "the narrowest subnet (min_width " + std::to_string(config_.min_width) + ") needs " +
                                             mib(core::bytes_needed(narrow, config_.batch, momentum, codec)) +
                                             "; the budget is " + mib(offer.budget_bytes));
  }
  return c;
}

core::result<std::vector<excluded_device>> round_engine::begin_round(std::vector<device_offer> offers) {
  TESSERA_ASSERT(!in_round_ && !finished());
  std::sort(offers.begin(), offers.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
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
  if (taking.empty()) return make_error(errc::invalid_argument, "no device can take part in this round");

  const auto round_index = static_cast<std::uint64_t>(completed_);
  core::round_plan plan;
  if (config_.strategy == strategy_kind::ist) {
    const std::size_t groups =
        config_.groups > 0 ? std::min(config_.groups, taking.size()) : core::default_group_count(full_, taking.size(), config_.min_width);
    auto p = core::make_plan(full_, capacities, groups, {.min_width = config_.min_width},
                             core::mix_seed(config_.seed, k_stream_plan + round_index));
    TESSERA_TRY(p);
    plan = std::move(p.value());
  } else {
    plan = core::make_full_plan(full_, taking.size());
  }
  plan_seed_ = plan.seed;
  groups_ = plan.groups;

  const float lr = core::learning_rate_at(config_.lr, completed_);
  const bool momentum = config_.momentum != 0.0f;
  assignments_.clear();
  assignments_.reserve(taking.size());
  std::vector<float> local;
  for (std::size_t i = 0; i < taking.size(); ++i) {
    const device_offer& o = taking[i];
    assignment a;
    a.device = o.id;
    a.index = i;
    a.group = plan.device_group[i];
    a.sub = core::make_subnet(full_, config_.model.compensation, plan, a.group);
    a.codec = codec_for(o);
    const std::size_t need = core::bytes_needed(a.sub.arch, config_.batch, momentum, a.codec);
    if (need > o.budget_bytes) {  // the planner rounds widths; never send what the device must refuse
      excluded.push_back({o.id, "its subnet needs " + mib(need) + "; the budget is " + mib(o.budget_bytes)});
      continue;
    }
    a.task = {.arch = a.sub.arch,
              .steps = config_.local_steps,
              .batch = config_.batch,
              .sgd = {.learning_rate = lr, .momentum = config_.momentum, .weight_decay = config_.weight_decay,
                      .nesterov = config_.nesterov}};
    local.resize(core::param_count(a.sub.arch));
    core::gather(full_, a.sub, params_, local);
    a.download.resize(core::encoded_bytes(a.sub.arch, a.codec));
    auto e = core::encode(a.sub.arch, a.codec, local, a.download);
    if (!e) return make_error(errc::not_finite, "the model cannot be sent to " + o.id + ": " + e.error().message);
    a.download_sha = crypto::sha256_of(a.download);
    a.upload_bytes = a.download.size();
    assignments_.push_back(std::move(a));
  }
  if (assignments_.empty()) return make_error(errc::invalid_argument, "no device can take part in this round");
  in_round_ = true;
  return excluded;
}

assignment* round_engine::find(const std::string& device) noexcept {
  if (!in_round_) return nullptr;
  for (auto& a : assignments_)
    if (a.device == device) return &a;
  return nullptr;
}

core::result<void> round_engine::check_update(const assignment& a, const net::msg::update& u) const {
  const auto round = static_cast<std::uint64_t>(current_round());
  if (!in_round_ || u.round != round)
    return make_error(errc::invalid_argument, "update for round " + std::to_string(u.round) + ", but round " +
                                                  std::to_string(in_round_ ? round : round - 1) +
                                                  (in_round_ ? " is open" : " is closed"));
  if (a.state != assignment_state::assigned)
    return make_error(errc::invalid_argument, "round " + std::to_string(round) + " already has this device's update (" +
                                                  std::string(to_string(a.state)) + ")");
  if (to_core(u.blob_codec) != a.codec)
    return make_error(errc::invalid_argument, "update in codec " + std::string(net::to_string(u.blob_codec)) +
                                                  ", the assignment's is " + std::string(core::to_string(a.codec)));
  if (u.size != a.upload_bytes)
    return make_error(errc::invalid_argument, "update of " + std::to_string(u.size) + " bytes, the assigned subnet is " +
                                                  std::to_string(a.upload_bytes) + " bytes");
  if (u.steps != static_cast<std::uint64_t>(a.task.steps))
    return make_error(errc::invalid_argument, "update after " + std::to_string(u.steps) + " steps, " +
                                                  std::to_string(a.task.steps) + " were assigned");
  const auto most = static_cast<std::uint64_t>(a.task.steps) * static_cast<std::uint64_t>(a.task.batch);
  if (u.examples == 0 || u.examples > most)
    return make_error(errc::invalid_argument, "update claims " + std::to_string(u.examples) + " examples; " +
                                                  std::to_string(a.task.steps) + " steps of batch " +
                                                  std::to_string(a.task.batch) + " hold at most " + std::to_string(most));
  if (!std::isfinite(u.loss)) return make_error(errc::not_finite, "update reports a non-finite loss");
  return {};
}

core::result<void> round_engine::accept_blob(assignment& a, std::span<const std::byte> blob) {
  a.trained.resize(core::param_count(a.sub.arch));
  auto d = core::decode(a.sub.arch, a.codec, blob, a.trained);
  if (!d) {
    a.trained.clear();
    a.trained.shrink_to_fit();
    return d;
  }
  a.state = assignment_state::accepted;
  return {};
}

bool round_engine::all_reported() const noexcept {
  return std::none_of(assignments_.begin(), assignments_.end(),
                      [](const assignment& a) { return a.state == assignment_state::assigned; });
}

core::result<round_metrics> round_engine::close_round(core::example_table* validation, double seconds) {
  TESSERA_ASSERT(in_round_);
  round_metrics m;
  m.round = current_round();
  m.strategy = std::string(to_string(config_.strategy));
  m.devices = assignments_.size();
  m.groups = groups_;
  m.plan_seed = plan_seed_;
  m.learning_rate = core::learning_rate_at(config_.lr, completed_);
  std::size_t stragglers = 0, refused = 0, rejected = 0;
  std::uint64_t resent = 0;
  double loss_weighted = 0;
  aggregator_.reset();
  for (auto& a : assignments_) {  // device order: the sums are reproducible
    m.bytes_down += a.bytes_down;
    m.bytes_up += a.bytes_up;
    resent += a.resent_bytes;
    switch (a.state) {
      case assignment_state::accepted:
        aggregator_.add(a.sub, a.trained, static_cast<double>(a.examples));
        loss_weighted += a.loss * static_cast<double>(a.examples);
        m.examples += static_cast<std::int64_t>(a.examples);
        break;
      case assignment_state::assigned: ++stragglers; break;
      case assignment_state::refused: ++refused; break;
      case assignment_state::rejected: ++rejected; break;
    }
  }
  aggregator_.finish(params_);
  m.train_loss = m.examples > 0 ? loss_weighted / static_cast<double>(m.examples) : 0.0;
  m.stragglers = stragglers;
  m.refused = refused;
  m.rejected = rejected;
  m.resent_bytes = resent;
  ++completed_;
  in_round_ = false;
  for (auto& a : assignments_) {  // the big buffers go now; the records stay for the caller
    a.trained = {};
    a.download = {};
  }

  const bool evaluate_now = validation != nullptr && (completed_ % config_.eval_every == 0 || completed_ == config_.rounds);
  if (evaluate_now) {
    core::network net(full_);
    auto ev = core::evaluate(net, params_, *validation);
    TESSERA_TRY(ev);
    m.test_loss = ev.value().loss;
    if (config_.model.task == core::task_kind::classification) m.test_accuracy = ev.value().accuracy;
    const double score = m.test_accuracy ? *m.test_accuracy : -ev.value().loss;
    if (!have_best_ || score > best_score_) {
      have_best_ = true;
      best_score_ = score;
      evals_since_best_ = 0;
    } else if (config_.patience > 0 && ++evals_since_best_ >= config_.patience) {
      stopped_early_ = true;
    }
  }
  m.seconds = seconds;
  return m;
}

}  // namespace tessera::hub
