// The round driver's phases around a round: the fleet's statistics before round 1, the evaluation on
// the devices after it, and a secure round's protocol between its uploads and its close. Each phase's
// state and messages are its own class (fleet_statistics, device_evaluation, secure_steps); this times
// them and moves the phase on when they say so.
#include "round_driver.hpp"

namespace tessera::hub {

using core::log_level;

// ---- statistics -----------------------------------------------------------------------------------

void round_driver::start_statistics(std::vector<rounds::device_offer> offers) {
  fleet_statistics stats(ctx_, devices_);
  if (auto ok = stats.begin(std::move(offers)); !ok) {
    ctx_.say(log_level::warning, "the fleet's statistics cannot start: " + ok.error().message);
    wait_again();
    return;
  }
  phase_.emplace<statistics_phase>(std::move(stats));
  wait_timer_.cancel();
  ask_statistics();
}

void round_driver::ask_statistics() {
  fleet_statistics& stats = in<statistics_phase>()->stats;
  if (stats.ask()) return end_statistics_pass();
  deadline_timer_.expires_after(core::seconds_to_ms(ctx_.config.round_deadline_s));
  deadline_timer_.async_wait([this, pass = stats.pass()](const boost::system::error_code& ec) {
    auto* sp = in<statistics_phase>();
    if (ec || sp == nullptr || sp->stats.pass() != pass) return;
    sp->stats.time_out();
    end_statistics_pass();
  });
}

void round_driver::drop_from_statistics(const std::string& id, const std::string& why) {
  if (auto* sp = in<statistics_phase>(); sp != nullptr && sp->stats.drop(id, why)) end_statistics_pass();
}

void round_driver::end_statistics_pass() {
  deadline_timer_.cancel();
  rounds::stats_gathering& g = in<statistics_phase>()->stats.gathering();
  const int pass = g.pass();
  if (auto ok = g.finish_pass(); !ok) {
    ctx_.say(log_level::warning, "the fleet's statistics (pass " + std::to_string(pass) + "): " + ok.error().message + "; starting again");
    enter_waiting(clock_type::now());
    arm_wait_timer();
    return;
  }
  if (g.at() == rounds::stats_gathering::phase::spread) return ask_statistics();
  auto normalization = g.normalization();
  if (!normalization) return finish("the fleet's statistics: " + normalization.error().message);
  const nlohmann::json summary = g.summary();
  if (auto ok = engine_->set_normalization(std::move(normalization).value(), summary); !ok)
    return finish("the fleet's statistics: " + ok.error().message);
  ctx_.say(log_level::info, "the fleet's input statistics: " + summary.dump());
  enter_waiting(clock_type::now() - std::chrono::hours(1));  // the fleet has waited already
  // Checkpointed before round 1: a restarted hub does not ask again.
  if (auto saved = recorder_.save_state(*engine_, devices_.records()); !saved) return finish(saved.error().message);
  maybe_start_round();
  if (between_rounds()) arm_wait_timer();
}

// ---- evaluation on the devices --------------------------------------------------------------------

void round_driver::start_evaluation(rounds::round_metrics m, clock_type::time_point started) {
  auto evaluators = device_evaluation::plan(ctx_, *engine_, devices_);
  if (evaluators.empty()) return after_round(m, started);
  device_evaluation& eval =
      phase_.emplace<evaluating_phase>(started, device_evaluation(ctx_, *engine_, devices_, std::move(m), std::move(evaluators))).eval;
  eval.send_all();
  if (eval.done()) return end_evaluation();
  deadline_timer_.expires_after(core::seconds_to_ms(ctx_.config.round_deadline_s));
  deadline_timer_.async_wait([this, round = eval.round()](const boost::system::error_code& ec) {
    auto* ep = in<evaluating_phase>();
    if (ec || ep == nullptr || ep->eval.round() != round) return;
    ep->eval.time_out();
    end_evaluation();
  });
}

void round_driver::drop_from_evaluation(const std::string& id, const std::string& why) {
  if (auto* ep = in<evaluating_phase>(); ep != nullptr && ep->eval.drop(id, why)) end_evaluation();
}

void round_driver::end_evaluation() {
  deadline_timer_.cancel();
  evaluating_phase& ep = *in<evaluating_phase>();
  const auto started = ep.started;
  rounds::round_metrics m = ep.eval.finish();
  after_round(m, started);  // leaves the phase
}

// ---- secure aggregation ---------------------------------------------------------------------------

void round_driver::start_secure(clock_type::time_point started) {
  phase_.emplace<secure_phase>(started, secure_steps(ctx_, *engine_, devices_));
  arm_secure_step();
}

void round_driver::arm_secure_step() {
  secure_timer_.expires_after(core::seconds_to_ms(ctx_.config.secure_step_s));
  secure_timer_.async_wait([this, round = engine_->current_round(), step = in<secure_phase>()->steps.at()](const boost::system::error_code& ec) {
    auto* sp = in<secure_phase>();
    if (ec || sp == nullptr || !engine_->in_round() || engine_->current_round() != round || sp->steps.at() != step) return;
    ctx_.say(log_level::warning, "round " + std::to_string(round) + ": the secure aggregation's " + std::string(secure_steps::name(step)) +
                                     " step ran out of secure_step_s: going on with the devices that answered");
    end_secure_step();
  });
}

// The step ends: everyone answered, or its time ran out.
void round_driver::end_secure_step() {
  switch (in<secure_phase>()->steps.end_step()) {
    case secure_steps::next::wait: return;
    case secure_steps::next::close_round: return close_round();
    case secure_steps::next::uploads:
      secure_timer_.cancel();
      if (engine_->all_reported()) end_collection();
      return;
    case secure_steps::next::timed_step:
      arm_secure_step();
      if (in<secure_phase>()->steps.done()) end_secure_step();
      return;
  }
}

// Every update is in, or the round's deadline passed. A secure round unmasks first.
void round_driver::end_collection() {
  if (stopped()) return;  // as the deadline: a round stop() interrupted is not closed
  auto* sp = in<secure_phase>();
  if (sp == nullptr) return close_round();
  if (sp->steps.past_uploads()) return;  // already checking or unmasking
  deadline_timer_.cancel();
  if (sp->steps.begin_unmask() == secure_steps::next::close_round) return close_round();
  arm_secure_step();
  if (sp->steps.done()) end_secure_step();
}

}  // namespace tessera::hub
