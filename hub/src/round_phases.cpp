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
  auto drawn = engine_->draw_cohort(std::move(offers), "tessera statistics v1");
  if (auto ok = drawn ? stats.begin(std::move(drawn).value()) : core::result<void>(drawn.error()); !ok) {
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
  arm_phase_deadline(
      [this, pass = stats.pass()] {
        auto* sp = in<statistics_phase>();
        return sp != nullptr && sp->stats.pass() == pass ? &sp->stats : nullptr;
      },
      [this] { end_statistics_pass(); });
}

void round_driver::drop_from_statistics(const std::string& id, const std::string& why) {
  auto* sp = in<statistics_phase>();
  if (sp == nullptr || !sp->stats.drop(id, why)) return;
  if (sp->stats.secure() != nullptr) return advance_secure();
  end_statistics_pass();
}

void round_driver::end_statistics_pass() {
  deadline_timer_.cancel();
  secure_timer_.cancel();
  fleet_statistics& stats = in<statistics_phase>()->stats;
  rounds::stats_gathering& g = stats.gathering();
  const int pass = g.pass();
  if (auto ok = stats.finish_pass(); !ok) {
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
  arm_phase_deadline(
      [this, round = eval.round()] {
        auto* ep = in<evaluating_phase>();
        return ep != nullptr && ep->eval.round() == round ? &ep->eval : nullptr;
      },
      [this] { end_evaluation(); });
}

// A statistics pass's or an evaluation's round_deadline_s: `still()` finds the phase's state if it is
// still the one armed for. At the deadline a masked sum goes on to its unmasking with who uploaded;
// answers in the clear are over (time_out names who is missing). A masked sum's steps start now.
template <class Find, class Over>
void round_driver::arm_phase_deadline(Find still, Over over) {
  deadline_timer_.expires_after(core::seconds_to_ms(ctx_.config.round_deadline_s));
  deadline_timer_.async_wait([this, still, over](const boost::system::error_code& ec) {
    auto* state = ec ? nullptr : still();
    if (state == nullptr) return;
    if (state->secure() != nullptr) return end_collection();
    state->time_out();
    over();
  });
  if (still()->secure() != nullptr) {
    arm_secure_step();
    advance_secure();  // nobody connected: the keys step is over at once
  }
}

void round_driver::drop_from_evaluation(const std::string& id, const std::string& why) {
  auto* ep = in<evaluating_phase>();
  if (ep == nullptr || !ep->eval.drop(id, why)) return;
  if (ep->eval.secure() != nullptr) return advance_secure();
  end_evaluation();
}

void round_driver::end_evaluation() {
  deadline_timer_.cancel();
  secure_timer_.cancel();
  evaluating_phase& ep = *in<evaluating_phase>();
  const auto started = ep.started;
  rounds::round_metrics m = ep.eval.finish();
  after_round(m, started);  // leaves the phase
}

// ---- secure aggregation ---------------------------------------------------------------------------

void round_driver::start_secure(clock_type::time_point started) {
  phase_.emplace<secure_phase>(started, secure_steps(ctx_, std::make_unique<engine_party>(*engine_), devices_));
  arm_secure_step();
}

secure_steps* round_driver::active_steps() noexcept {
  if (auto* sp = in<secure_phase>()) return &sp->steps;
  if (auto* st = in<statistics_phase>()) return st->stats.secure();
  if (auto* ep = in<evaluating_phase>()) return ep->eval.secure();
  return nullptr;
}

void round_driver::arm_secure_step() {
  secure_steps& steps = *active_steps();
  secure_timer_.expires_after(core::seconds_to_ms(ctx_.config.secure_step_s));
  secure_timer_.async_wait([this, serial = steps.serial(), step = steps.at()](const boost::system::error_code& ec) {
    secure_steps* st = active_steps();
    if (ec || st == nullptr || st->serial() != serial || st->at() != step) return;
    ctx_.say(log_level::warning, st->party().what() + ": the secure aggregation's " + std::string(secure_steps::name(step)) +
                                     " step ran out of secure_step_s: going on with the devices that answered");
    end_secure_step();
  });
}

// The step ends: everyone answered, or its time ran out.
void round_driver::end_secure_step() {
  secure_steps& steps = *active_steps();
  switch (steps.end_step()) {
    case secure_steps::next::wait: return;
    case secure_steps::next::close_round: return secure_over();
    case secure_steps::next::uploads:
      secure_timer_.cancel();
      if (uploads_in()) end_collection();
      return;
    case secure_steps::next::timed_step:
      arm_secure_step();
      if (steps.done()) end_secure_step();
      return;
  }
}

// A participant of the secure protocol answered or left: its step may be over.
void round_driver::advance_secure() {
  secure_steps* st = active_steps();
  if (st == nullptr) return;
  if (st->at() == secure_steps::step::uploads) {
    if (uploads_in()) end_collection();
  } else if (st->done()) {
    end_secure_step();
  }
}

bool round_driver::uploads_in() {
  if (secure_steps* st = active_steps()) return st->party().all_uploaded();
  return engine_->all_reported();
}

// The protocol is over (released, or it cannot go on): what it summed ends.
void round_driver::secure_over() {
  if (in<statistics_phase>() != nullptr) return end_statistics_pass();
  if (in<evaluating_phase>() != nullptr) return end_evaluation();
  close_round();
}

// Every update is in, or the round's deadline passed. A secure round (or a masked statistics pass)
// unmasks first.
void round_driver::end_collection() {
  if (stopped()) return;  // as the deadline: a round stop() interrupted is not closed
  secure_steps* st = active_steps();
  if (st == nullptr) return close_round();
  if (st->past_uploads()) return;  // already checking or unmasking
  deadline_timer_.cancel();
  if (st->begin_unmask() == secure_steps::next::close_round) return secure_over();
  arm_secure_step();
  if (st->done()) end_secure_step();
}

}  // namespace tessera::hub
