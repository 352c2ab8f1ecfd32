// The operator's holds on the round driver (round_driver.hpp): pause, resume, and finish after the
// round in progress, as the operator endpoint's actions ask.
#include <boost/asio/post.hpp>

#include "round_driver.hpp"

namespace tessera::hub {

using core::log_level;

void round_driver::pause(const std::string& by) {
  if (holds_.pause || stopped()) return;
  holds_.pause = true;
  if (const auto* w = in<waiting_phase>()) {
    const auto since = w->since;
    phase_.emplace<paused_phase>(since);
  }
  ctx_.say(log_level::info, "operator " + by + " paused the run: no round starts until resumed" +
                                (engine_->in_round() ? " (round " + std::to_string(engine_->current_round()) + " runs to its end)" : ""));
}

void round_driver::resume(const std::string& by) {
  if (!holds_.pause || stopped()) return;
  holds_.pause = false;
  if (const auto* p = in<paused_phase>()) {
    const auto since = p->since;
    phase_.emplace<waiting_phase>(since);
  }
  ctx_.say(log_level::info, "operator " + by + " resumed the run");
  // Deferred: the endpoint's reply goes out before a round starts sending subnets.
  boost::asio::post(hub_, [this] { maybe_start_round(); });
}

void round_driver::finish_after_round(const std::string& by) {
  if (holds_.finish || stopped()) return;
  holds_.finish = true;
  const bool now = !busy(phase_);
  ctx_.say(log_level::info, "operator " + by + " asked the run to finish " +
                                (now ? std::string("now") : "after round " + std::to_string(engine_->current_round())) +
                                (ctx_.config.output_path.empty() ? "" : " and write " + ctx_.config.output_path));
  if (now) {
    boost::asio::post(hub_, [this] {
      if (!stopped()) finish("");
    });
  }
}

}  // namespace tessera::hub
