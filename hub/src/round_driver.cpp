// The round driver's life: set-up from the latest checkpoint, waiting for the fleet, a round's start and
// close, its record, and the run's end (the operator's holds: round_holds.cpp).
#include "round_driver.hpp"

#include "tessera/core/data/targets.hpp"
#include "tessera/rounds/checkpoint.hpp"
#include "tessera/rounds/error.hpp"

namespace tessera::hub {
namespace {

using core::log_level;
using rounds::assignment_state;
using rounds::is_open;

// The hub's own test set, if it holds one; checked against the model.
core::result<std::unique_ptr<core::memory_table>> load_validation(const hub_config& config) {
  if (!config.validation) return std::unique_ptr<core::memory_table>();
  TESSERA_ASSIGN_OR_RETURN(core::memory_table v, core::load_data(*config.validation, nullptr));
  auto table = std::make_unique<core::memory_table>(std::move(v));
  core::target_summary targets;
  targets.add(table->targets());
  TESSERA_TRY(core::check_targets(targets, config.model.task, config.model.outputs, *config.validation));
  if (table->feature_count() != config.model.inputs)
    return core::make_error(core::errc::invalid_spec, table->describe() + ": " + std::to_string(table->feature_count()) +
                                                          " features per example, but model.inputs is " + std::to_string(config.model.inputs));
  return table;
}

// The newest checkpoint in checkpoint_dir, or the previous one if the newest is missing or corrupt (a
// crash while it was being replaced, a damaged disk). Another run's checkpoint is refused, never passed
// over. Returns the rounds it holds (0: none, a fresh start).
core::result<std::int64_t> resume_checkpoint(const hub_context& ctx, device_registry& devices, rounds::engine& engine, rounds::recorder_settings& rs) {
  const hub_config& config = ctx.config;
  std::error_code ec;
  std::filesystem::create_directories(config.checkpoint_dir, ec);
  if (ec) return core::make_error(core::errc::io, config.checkpoint_dir + ": cannot create the checkpoint folder: " + ec.message());
  rs.checkpoint = std::filesystem::path(config.checkpoint_dir) / "hub.ckpt";
  TESSERA_ASSIGN_OR_RETURN(auto loaded, rounds::load_latest_checkpoint(rs.checkpoint, config.model, rs.seal_key ? &*rs.seal_key : nullptr));
  if (!loaded) return 0;
  const std::string file = loaded->file.string();
  devices.restore(loaded->state.registry);
  const std::int64_t round = loaded->state.round;
  if (auto ok = engine.restore(std::move(loaded->state)); !ok) return core::error{ok.error().code, file + ": " + ok.error().message};
  if (const auto& fb = loaded->fell_back_from)
    ctx.say(log_level::warning, "checkpoint " + fb->reason.message + "; resumed from the previous one (" + file + "), after round " +
                                    std::to_string(round));
  if (loaded->ledger_round)
    ctx.say(log_level::warning, "the privacy ledger records rounds up to " + std::to_string(*loaded->ledger_round) + ", past " + file +
                                    "'s round " + std::to_string(round) + ": ε stays at what they spent, " + std::to_string(engine.epsilon()));
  return round;
}

}  // namespace

core::result<std::unique_ptr<round_driver>> round_driver::create(boost::asio::any_io_executor hub, const hub_context& ctx,
                                                                 device_registry& devices, hub_figures& figures) {
  const hub_config& config = ctx.config;
  rounds::recorder_settings rs;
  if (!config.seal_key.empty()) {
    TESSERA_ASSIGN_OR_RETURN(rs.seal_key, crypto::sealing_key::load(config.seal_key));
  }
  TESSERA_ASSIGN_OR_RETURN(auto validation, load_validation(config));
  if (!config.audit_uploads.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(config.audit_uploads, ec);
    if (ec) return core::make_error(core::errc::io, config.audit_uploads + ": cannot create the audit_uploads folder: " + ec.message());
  }
  // Resume from the latest checkpoint, or start from the seeded initial model.
  std::vector<float> params(core::param_count(config.model.full_arch()));
  core::initialize(config.model, params);
  auto engine = std::make_unique<rounds::engine>(config, std::move(params), 0);
  std::int64_t resumed_from = 0;
  if (!config.checkpoint_dir.empty()) {
    TESSERA_ASSIGN_OR_RETURN(resumed_from, resume_checkpoint(ctx, devices, *engine, rs));
  }
  TESSERA_TRY(check_frame_room(config));
  TESSERA_ASSIGN_OR_RETURN(auto recorder, rounds::recorder::open(config, std::move(rs), ctx.log));
  return std::unique_ptr<round_driver>(new round_driver(std::move(hub), ctx, devices, figures, std::move(engine), std::move(recorder),
                                                        std::move(validation), resumed_from));
}

round_driver::round_driver(boost::asio::any_io_executor hub, const hub_context& ctx, device_registry& devices, hub_figures& figures,
                           std::unique_ptr<rounds::engine> engine, rounds::recorder recorder,
                           std::unique_ptr<core::memory_table> validation, std::int64_t resumed_from)
    : hub_(hub),
      ctx_(ctx),
      devices_(devices),
      figures_(figures),
      engine_(std::move(engine)),
      recorder_(std::move(recorder)),
      validation_(std::move(validation)),
      transfers_(ctx, *engine_, devices, figures),
      resumed_from_(resumed_from),
      wait_timer_(hub),
      deadline_timer_(hub),
      secure_timer_(hub) {}

const std::string& round_driver::failure() const noexcept {
  static const std::string none;
  const auto* f = std::get_if<failed_phase>(&phase_);
  return f != nullptr ? f->why : none;
}

bool round_driver::between_rounds() const noexcept {
  return std::holds_alternative<waiting_phase>(phase_) || std::holds_alternative<paused_phase>(phase_);
}

bool round_driver::uploads_over() const noexcept {
  const auto* sp = std::get_if<secure_phase>(&phase_);
  return sp != nullptr && sp->steps.past_uploads();
}

clock_type::time_point round_driver::round_started() const {
  if (const auto* t = std::get_if<training_phase>(&phase_)) return t->started;
  if (const auto* s = std::get_if<secure_phase>(&phase_)) return s->started;
  return clock_type::now();
}

bool round_driver::start() {
  log_run_plan();
  if (engine_->finished()) {
    // Raising rounds trains further only where the rounds ran out (not after an early stop or a spent ε).
    const bool ran_out = engine_->completed() >= ctx_.config.rounds;
    const std::string why = !engine_->privacy_stop().empty() ? ", " + engine_->privacy_stop() : ran_out ? "" : ", stopped early";
    ctx_.say(log_level::info, "the run in " + ctx_.config.checkpoint_dir + " is finished already (" + std::to_string(engine_->completed()) +
                                  " of " + std::to_string(ctx_.config.rounds) + " rounds" + why + "): " +
                                  (ctx_.config.output_path.empty() ? "" : "writing " + ctx_.config.output_path + " again and ") + "exiting. " +
                                  (ran_out && engine_->privacy_stop().empty() ? "Raise rounds to train further, or give" : "Give") +
                                  " another checkpoint_dir for a new run");
    finish("");
    return false;
  }
  enter_waiting(clock_type::now());
  arm_wait_timer();
  return true;
}

void round_driver::log_run_plan() const {
  for (const auto& note : rounds::plan_notes(ctx_.config)) ctx_.say(log_level::warning, note);
  const auto eps = [](double e) { return std::to_string(e); };
  if (resumed_from_ > 0)
    ctx_.say(log_level::info, "resumed from checkpoint after round " + std::to_string(resumed_from_) + " (" + std::to_string(devices_.size()) +
                                  " devices known" + (engine_->private_rounds() ? ", ε " + eps(engine_->epsilon()) + " spent" : "") +
                                  (engine_->epsilon_hub() ? " (against the hub " + eps(*engine_->epsilon_hub()) + ")" : "") + ")");
  if (!engine_->private_rounds()) return;
  const auto& d = ctx_.config.dp;
  const std::string who =
      engine_->secure() ? "differential privacy: each device adds its share of the noise under secure aggregation (Skellam in the ring; any " +
                              std::to_string(ctx_.config.secure_aggregation.min_aggregate()) + " contributors carry all of it)"
                        : "differential privacy: the hub adds the noise (no secure aggregation)";
  const std::string target =
      d.target_epsilon > 0 ? ", stopping before ε" +
                                 std::string(engine_->secure() && d.target_observer == rounds::dp_observer::hub ? " against the hub" : "") +
                                 " passes " + eps(d.target_epsilon)
                           : "";
  ctx_.say(log_level::info, who + ": devices sampled with q " + std::to_string(d.sample_rate) + ", changes clipped to " + std::to_string(d.clip) +
                                ", noise σ " + std::to_string(d.noise_multiplier) + " × clip, δ " + std::to_string(d.delta) + target +
                                (d.adaptive_clip ? "; the clip adapts toward the " + std::to_string(d.target_quantile) + " quantile of the changes' norms"
                                                 : ""));
}

bool round_driver::stop() {
  if (stopped()) return false;
  phase_.emplace<stopping_phase>();
  cancel_timers();
  return true;
}

void round_driver::cancel_timers() {
  wait_timer_.cancel();
  deadline_timer_.cancel();
  secure_timer_.cancel();
}

// ---- waiting --------------------------------------------------------------------------------------

void round_driver::enter_waiting(clock_type::time_point since) {
  if (stopped()) return;  // stop() came from a callback of the round just recorded
  if (holds_.pause) phase_.emplace<paused_phase>(since);
  else phase_.emplace<waiting_phase>(since);
}

void round_driver::wait_again() {
  if (auto* w = in<waiting_phase>()) w->since = clock_type::now();
}

void round_driver::arm_wait_timer() {
  // Re-check once a second: devices come and go, and device_wait_s runs out.
  wait_timer_.expires_after(std::chrono::seconds(1));
  wait_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !between_rounds()) return;
    maybe_start_round();
    if (between_rounds()) arm_wait_timer();
  });
}

void round_driver::maybe_start_round() {
  const auto* w = in<waiting_phase>();
  if (w == nullptr) return;  // paused, busy or stopped
  const std::size_t ready = devices_.ready_count();
  const bool waited = clock_type::now() - w->since >= core::seconds_to_ms(ctx_.config.device_wait_s);
  if (ready >= ctx_.config.max_devices || (waited && ready >= ctx_.config.min_devices)) return start_round();
  const std::string counts = std::to_string(ready) + " ready (" + std::to_string(devices_.connected_count()) + " connected)";
  const std::string round = "round " + std::to_string(engine_->current_round());
  if (waited)
    say_waiting(log_level::info, round + " waits for devices: " + counts + ", min_devices is " + std::to_string(ctx_.config.min_devices));
  else if (!said_waiting_.cannot_start)  // a reason why no round can start stays shown while the wait starts over
    waiting_for_ = round + " waits up to device_wait_s for more devices: " + counts + " of max_devices " + std::to_string(ctx_.config.max_devices);
}

const std::string& round_driver::waiting_for() const noexcept {
  static const std::string none;
  return std::holds_alternative<waiting_phase>(phase_) ? waiting_for_ : none;
}

void round_driver::say_waiting(log_level level, const std::string& why) {
  waiting_for_ = why;
  const auto now = clock_type::now();
  if (why == said_waiting_.why && now - said_waiting_.at < std::chrono::seconds(30)) return;
  said_waiting_ = {why, now};
  ctx_.say(level, why);
}

// ---- a round --------------------------------------------------------------------------------------

void round_driver::start_round() {
  const auto planning = clock_type::now();
  const hub_config& config = ctx_.config;
  if (holds_.finish) return finish("");
  if (before_round_) before_round_();
  engine_->set_round_cap(config.max_devices);  // a round's cohort (or private sample) is drawn at random within it
  if (engine_->needs_statistics()) return start_statistics(devices_.ready_offers());
  engine_->set_population(devices_.size());  // differential privacy: every registered device, connected or not
  auto excluded = engine_->begin_round(devices_.ready_offers());
  if (!excluded && excluded.error().code == rounds::errc::privacy_budget) {
    ctx_.say(log_level::info, "stopping: " + excluded.error().message);
    finish("");
    return;
  }
  if (!excluded) {
    say_waiting(log_level::warning, "round " + std::to_string(engine_->current_round()) + " cannot start: " + excluded.error().message);
    said_waiting_.cannot_start = true;
    wait_again();
    return;
  }
  for (const auto& e : excluded.value())
    ctx_.say(log_level::warning, "device " + e.id + " left out of round " + std::to_string(engine_->current_round()) + ": " + e.reason);
  for (const auto& note : engine_->take_notes()) ctx_.say(log_level::warning, note);
  dispatch(planning);
}

// The round's assignments go out; its deadline starts.
void round_driver::dispatch(clock_type::time_point planning) {
  phase_.emplace<training_phase>(planning);  // a round's seconds cover planning to checkpoint
  waiting_for_.clear();
  said_waiting_.cannot_start = false;
  wait_timer_.cancel();
  transfers_.forget_encodings();
  for (auto& a : engine_->assignments()) {
    device_entry& d = devices_[a.device];
    d.upload.reset();
    d.download.reset();
    transfers_.send_assignment(d, a);
  }
  if (engine_->secure_round_open()) start_secure(planning);
  deadline_timer_.expires_after(core::seconds_to_ms(ctx_.config.round_deadline_s));
  // The planning time tells this dispatch from a later one of the same round (an untrained round runs again).
  deadline_timer_.async_wait([this, planning](const boost::system::error_code& ec) {
    if (ec || stopped() || !engine_->in_round() || round_started() != planning) return;
    end_collection();
  });
  if (engine_->all_reported()) end_collection();  // every download failed to encode
}

void round_driver::close_round() {
  deadline_timer_.cancel();
  transfers_.forget_encodings();
  secure_timer_.cancel();
  for (const auto& a : engine_->assignments()) {
    if (is_open(a.state))
      ctx_.say(log_level::warning, "device " + a.device + " missed the deadline of round " + std::to_string(engine_->current_round()) +
                                       ": its neurons keep their values");
    devices_[a.device].upload.reset();  // a late upload still arriving is answered "round closed"
  }
  const auto started = round_started();
  auto m = engine_->close_round(validation_.get());
  if (!m) {
    finish("round " + std::to_string(engine_->current_round()) + ": " + m.error().message);
    return;
  }
  count_outcomes();
  if (engine_->last_faults().untrained) return run_again();
  if (const auto* sp = in<secure_phase>()) sp->steps.log_outcome(engine_->last_secure(), engine_->completed());
  // The release exists now and the evaluation below sends it out: its spending is recorded first.
  if (auto kept = recorder_.record_privacy(*engine_); !kept) {
    finish(kept.error().message);
    return;
  }
  const rounds::round_faults& f = engine_->last_faults();
  m.value().stragglers = f.stragglers;
  m.value().refused = f.refused;
  m.value().rejected = f.rejected;
  m.value().resent_bytes = f.resent_bytes;
  if (engine_->evaluation_due()) return start_evaluation(std::move(m).value(), started);
  after_round(m.value(), started);
}

// How the closed round's assignments ended, in the devices' records and the counters.
void round_driver::count_outcomes() {
  figures_.stragglers += static_cast<double>(engine_->last_faults().stragglers);
  for (const auto& a : engine_->assignments()) {
    device_entry& d = devices_[a.device];
    if (a.state == assignment_state::accepted) ++d.record.rounds_done;
    else ++d.record.rounds_missed;
  }
}

// A round no update reached does not count: the model stays as it was, and the same round runs again
// when the fleet allows (engine::close_round ends the run if every device keeps refusing).
void round_driver::run_again() {
  const std::string round = std::to_string(engine_->current_round());
  ctx_.say(log_level::warning, "round " + round + ": no device's update reached the model (" + engine_->last_faults().why_untrained +
                                   "): it does not count, and round " + round + " runs again");
  figures_.rounds_untrained += 1;
  if (holds_.finish) {  // asked during the round: it ends here, as after a round that counted
    ctx_.say(log_level::info, "finishing before round " + round + " as the operator asked");
    finish("");
    return;
  }
  enter_waiting(clock_type::now());
  maybe_start_round();
  if (between_rounds()) arm_wait_timer();
}

void round_driver::after_round(rounds::round_metrics& m, clock_type::time_point started) {
  if (auto saved = recorder_.record(*engine_, m, started, devices_.records()); !saved) {
    finish(saved.error().message);
    return;
  }
  figures_.observe_round(m);
  if (holds_.finish) {
    ctx_.say(log_level::info, "finishing after round " + std::to_string(m.round) + " as the operator asked");
    finish("");
    return;
  }
  if (engine_->finished()) {
    if (!engine_->privacy_stop().empty()) ctx_.say(log_level::info, "stopping: " + engine_->privacy_stop());
    finish("");
    return;
  }
  enter_waiting(clock_type::now());
  maybe_start_round();
  if (between_rounds()) arm_wait_timer();
}

// ---- the run's end --------------------------------------------------------------------------------

void round_driver::finish(const std::string& failure) {
  std::string why = failure;
  if (why.empty()) {
    if (auto saved = recorder_.finish(*engine_); !saved) why = saved.error().message;
  }
  if (!why.empty()) ctx_.say(log_level::error, why);
  const bool was_stopped = stopped();
  if (why.empty()) phase_.emplace<finished_phase>();
  else phase_.emplace<failed_phase>(std::move(why));
  if (was_stopped) return;
  cancel_timers();
  if (on_stopped_) on_stopped_();
}

}  // namespace tessera::hub
