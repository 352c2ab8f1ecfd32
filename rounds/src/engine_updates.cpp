// The engine's checks of what a device sends back: its claim (UPDATE), the blob against the claim and
// the values against what was sent (bounded updates), and the refusals and rejections that end an
// assignment. The rest of the round is in engine.cpp.
#include "tessera/rounds/engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "tessera/core/codec.hpp"
#include "tessera/core/mlp.hpp"
#include "tessera/core/train.hpp"
#include "tessera/rounds/error.hpp"
#include "engine_secure.hpp"

namespace tessera::rounds {

core::result<void> engine::announce(assignment& a, const update_claim& u) {
  const auto round = static_cast<std::uint64_t>(current_round());
  if (!in_round_ || u.round != round)
    return make_error(errc::wrong_round, "update for round " + std::to_string(u.round) + ", but round " +
                                             std::to_string(in_round_ ? round : round - 1) + (in_round_ ? " is open" : " is closed"));
  if (!is_open(a.state) || a.state == assignment_state::uploading)
    return make_error(errc::already_reported, "round " + std::to_string(round) + " already has this device's update (" +
                                                  std::string(to_string(a.state)) + ")");
  core::result<void> bad;
  const auto most = static_cast<std::uint64_t>(a.task.steps) * static_cast<std::uint64_t>(a.task.batch);
  if (u.codec != a.codec)
    bad = make_error(errc::codec_mismatch, "update in codec " + std::string(core::to_string(u.codec)) +
                                               ", the assignment's is " + std::string(core::to_string(a.codec)));
  else if (u.size != a.upload_bytes)
    bad = make_error(errc::size_mismatch, "update of " + std::to_string(u.size) + " bytes, the assigned " +
                                              (secure() ? "masked input" : "subnet") + " is " + std::to_string(a.upload_bytes) + " bytes");
  else if (u.steps != static_cast<std::uint64_t>(a.task.steps))
    bad = make_error(errc::steps_mismatch, "update after " + std::to_string(u.steps) + " steps, " +
                                               std::to_string(a.task.steps) + " were assigned");
  else if (u.examples == 0 || u.examples > most)
    bad = make_error(errc::examples_out_of_range, "update claims " + std::to_string(u.examples) + " examples; " +
                                                      std::to_string(a.task.steps) + " steps of batch " +
                                                      std::to_string(a.task.batch) + " hold at most " + std::to_string(most));
  else if (!std::isfinite(u.loss))
    bad = make_error(errc::loss_not_finite, "update reports a non-finite loss");
  else if (secure() && u.clipped > a.upload_bytes / crypto::secagg_value_bytes(config_.secure_aggregation.bits))
    bad = make_error(errc::bad_values, "update claims " + std::to_string(u.clipped) + " clipped values, more than it holds");
  else if (!secure() && u.clipped > (private_rounds() ? 1u : 0u))
    bad = make_error(errc::bad_values, "update claims " + std::to_string(u.clipped) + " clipped changes, more than its one");
  if (!bad) {
    reject(a, bad.error());
    return bad;
  }
  a.examples = u.examples;
  a.steps = u.steps;
  a.loss = u.loss;
  a.clipped = u.clipped;
  return move(a, assignment_event::announced);
}

core::result<void> engine::receive(assignment& a, std::span<const std::byte> blob) {
  if (a.state != assignment_state::uploading)
    return make_error(errc::illegal_transition, "device " + a.device + ": an upload while " + std::string(to_string(a.state)));
  if (secure()) {
    TESSERA_ASSERT(secure_ != nullptr && !secure_->plain);
    auto y = crypto::secagg_unpack(blob, secure_->params.bits);
    core::result<void> ok = y ? secure_->server.add_masked({.id = a.device, .y = std::move(y).value(), .clipped = a.clipped})
                              : core::result<void>(std::move(y).error());
    if (!ok) {
      core::error why = make_error(errc::bad_values, ok.error().message);
      reject(a, why);
      return why;
    }
    return move(a, assignment_event::received);
  }
  a.trained.resize(core::param_count(a.sub.arch));
  if (auto d = core::decode(a.sub.arch, a.codec, blob, a.trained); !d) {
    a.trained = {};
    core::error why = make_error(errc::bad_values, d.error().message);
    reject(a, why);
    return why;
  }
  if (auto bounded = bound_update(a); !bounded) {
    reject(a, bounded.error());
    return bounded.error();
  }
  return move(a, assignment_event::received);
}

// The bounds of a change from `sent` (max_update_norm, max_update_abs, or derived): with the shipped
// settings (lr 0.05, momentum 0.9) an honest device's change in a round is at most about half its
// subnet's norm and its largest value (measured over the Fashion-MNIST runs of examples/, FedAvg and
// IST; a run at four times the rate reached 6× the norm and 87× the largest value while diverging).
// The default is k·max(4, ‖sent‖) and k·max(1, max |sent|), k = 4 at an effective rate lr/(1 − momentum)
// of 0.5 and growing with it: room for honest devices, none for 1e30.
update_bounds engine::bounds_for(std::span<const float> sent, const core::sgd_options& sgd) const noexcept {
  double sq = 0, largest = 0;
  for (const float v : sent) {
    sq += static_cast<double>(v) * static_cast<double>(v);
    largest = std::max(largest, static_cast<double>(std::abs(v)));
  }
  const double effective = static_cast<double>(sgd.learning_rate) / (1.0 - static_cast<double>(sgd.momentum));
  const double k = 4.0 * std::max(1.0, effective / 0.5);
  return {.norm = config_.max_update_norm > 0 ? config_.max_update_norm : k * std::max(4.0, std::sqrt(sq)),
          .abs = config_.max_update_abs > 0 ? config_.max_update_abs : k * std::max(1.0, largest)};
}

// A decoded update against what the device was sent: within the bounds, or rejected with the figures,
// or (update_bound: clip) scaled to the norm and clamped to the largest value, and counted.
core::result<void> engine::bound_update(assignment& a) {
  std::vector<float> sent(a.trained.size());
  core::gather(full_, a.sub, params_, sent);
  double sq = 0, largest = 0;
  for (std::size_t i = 0; i < sent.size(); ++i) {
    const double d = static_cast<double>(a.trained[i]) - static_cast<double>(sent[i]);
    sq += d * d;
    largest = std::max(largest, std::abs(d));
  }
  const double norm = std::sqrt(sq);
  const update_bounds b = bounds_for(sent, a.task.sgd);
  if (config_.update_bound == update_bound_kind::off || (norm <= b.norm && largest <= b.abs)) {
    update_norm_max_ = std::max(update_norm_max_, norm);
    return {};
  }
  if (config_.update_bound == update_bound_kind::reject) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "its change passes the bounds: L2 norm %.4g (max_update_norm %.4g), largest value %.4g (max_update_abs %.4g)",
                  norm, b.norm, largest, b.abs);
    return make_error(errc::update_out_of_bounds, buf);
  }
  const double scale = norm > b.norm ? b.norm / norm : 1.0;
  for (std::size_t i = 0; i < sent.size(); ++i) {
    const double d = std::clamp((static_cast<double>(a.trained[i]) - static_cast<double>(sent[i])) * scale, -b.abs, b.abs);
    a.trained[i] = static_cast<float>(static_cast<double>(sent[i]) + d);
  }
  ++updates_bounded_;
  update_norm_max_ = std::max(update_norm_max_, std::min(norm, b.norm));
  return {};
}

void engine::refuse(assignment& a, std::string reason) {
  if (!is_open(a.state)) return;
  a.reason = core::make_error(core::errc::invalid_argument, std::move(reason));
  (void)move(a, assignment_event::refused);
}

void engine::reject(assignment& a, core::error why) {
  if (!is_open(a.state)) return;
  a.reason = std::move(why);
  a.trained = {};
  (void)move(a, assignment_event::rejected);
}

}  // namespace tessera::rounds
