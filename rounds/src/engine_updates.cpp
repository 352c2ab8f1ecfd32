// The engine's checks of what a device sends back: its claim (UPDATE) against the assignment, the
// upload handed to the aggregation (which decodes and checks it), and the refusals and rejections that
// end an assignment. The rest of the round is in engine.cpp.
#include "tessera/rounds/engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "tessera/core/math/codec.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/train/train.hpp"
#include "tessera/rounds/error.hpp"
#include "secure_aggregation.hpp"

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
                                              (!a.segments.empty() ? "masked input" : a.sub.arch.frozen > 0 ? "update (the layers after the frozen ones)" : "subnet") +
                                              " is " + std::to_string(a.upload_bytes) + " bytes");
  else if (u.steps != static_cast<std::uint64_t>(a.task.steps))
    bad = make_error(errc::steps_mismatch, "update after " + std::to_string(u.steps) + " steps, " +
                                               std::to_string(a.task.steps) + " were assigned");
  else if (u.examples == 0 || u.examples > most)
    bad = make_error(errc::examples_out_of_range, "update claims " + std::to_string(u.examples) + " examples; " +
                                                      std::to_string(a.task.steps) + " steps of batch " +
                                                      std::to_string(a.task.batch) + " hold at most " + std::to_string(most));
  else if (a.segments.empty() && !u.loss)
    bad = make_error(errc::bad_values, "update reports no loss");
  else if (a.segments.empty() && !std::isfinite(*u.loss))
    bad = make_error(errc::loss_not_finite, "update reports a non-finite loss");
  else if (const std::uint64_t most_clipped = aggregation_->most_clipped(a); u.clipped > most_clipped)
    bad = make_error(errc::bad_values, "update claims " + std::to_string(u.clipped) +
                                           (a.segments.empty() ? " clipped changes, more than the " + std::to_string(most_clipped) + " it may claim"
                                                               : std::string(" clipped values, more than it holds")));
  if (!bad) {
    reject(a, bad.error());
    return bad;
  }
  a.examples = u.examples;
  a.steps = u.steps;
  // A secure round's figures are the masked sums': a loss or clipped count beside them is not kept.
  a.loss = a.segments.empty() ? u.loss : std::nullopt;
  a.clipped = a.segments.empty() ? u.clipped : 0;
  return move(a, assignment_event::announced);
}

core::result<void> engine::receive(assignment& a, std::span<const std::byte> blob) {
  if (a.state != assignment_state::uploading)
    return make_error(errc::illegal_transition, "device " + a.device + ": an upload while " + std::string(to_string(a.state)));
  if (auto ok = aggregation_->receive(view(), a, blob); !ok) {
    reject(a, ok.error());
    return ok.error();
  }
  return move(a, assignment_event::received);
}

core::result<void> engine::receive_encoded(assignment& a, const crypto::secagg_encoded& e) {
  TESSERA_ASSERT(secure_ != nullptr && secure_->open());
  if (a.state != assignment_state::uploading)
    return make_error(errc::illegal_transition, "device " + a.device + ": an upload while " + std::string(to_string(a.state)));
  if (auto ok = secure_->add_encoded(a, e, assignments_.size()); !ok) {
    reject(a, ok.error());
    return ok.error();
  }
  return move(a, assignment_event::received);
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
