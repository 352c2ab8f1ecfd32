// Internal: the round engine's driver on the network (hub.hpp draws a round's states). It holds the
// hub's phase (phase.hpp) and moves it: waits for the fleet, gathers its statistics, starts each round,
// ends its collection (a secure round's protocol first), has the devices score the model, records the
// round, and ends the run. The timers that bound each phase are its own; the sessions' messages come
// to it through hub_service, and the operator's pause, resume and finish through the desk.
//
//   TESSERA_ASSIGN_OR_RETURN(auto rounds, round_driver::create(hub_strand, ctx, devices, figures));
//   rounds->on_stopped([&] { /* close the sessions and the listeners */ });
//   rounds->start();      // waiting (or finished at once: the checkpoint's run was over)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "device_registry.hpp"
#include "hub_context.hpp"
#include "hub_figures.hpp"
#include "phase.hpp"
#include "round_transfers.hpp"
#include "tessera/rounds/engine.hpp"
#include "tessera/rounds/recorder.hpp"

namespace tessera::hub {

class round_driver {
 public:
  // The engine from the seeded model or the latest checkpoint (the devices' records come back with it),
  // the recorder, the hub's validation set; fails as the hub's start-up does.
  [[nodiscard]] static core::result<std::unique_ptr<round_driver>> create(boost::asio::any_io_executor hub, const hub_context& ctx,
                                                                          device_registry& devices, hub_figures& figures);
  round_driver(const round_driver&) = delete;
  round_driver& operator=(const round_driver&) = delete;

  void on_round(std::function<void(const rounds::round_metrics&)> f) { recorder_.on_round(std::move(f)); }
  // Before each round starts (hub_service reads the revocation list again).
  void before_round(std::function<void()> f) { before_round_ = std::move(f); }
  // Once, when the run ends by itself (finished or failed): the hub closes its sessions and listeners.
  void on_stopped(std::function<void()> f) { on_stopped_ = std::move(f); }

  // Logs what the run resumes and how it is private, then waits for the fleet (or finishes at once, when
  // the checkpoint's run was over). False if the run is over.
  bool start();
  // stop(): the phase becomes stopping and the timers stop. False if it had stopped already.
  bool stop();

  [[nodiscard]] const hub_phase& phase() const noexcept { return phase_; }
  [[nodiscard]] const operator_holds& holds() const noexcept { return holds_; }
  [[nodiscard]] const rounds::engine& engine() const noexcept { return *engine_; }
  [[nodiscard]] std::int64_t resumed_from() const noexcept { return resumed_from_; }
  [[nodiscard]] bool finished() const noexcept { return std::holds_alternative<finished_phase>(phase_); }
  // Between rounds: what the next round waits for (devices against min_devices, or why none can take
  // part); empty otherwise.
  [[nodiscard]] const std::string& waiting_for() const noexcept;
  [[nodiscard]] const std::string& failure() const noexcept;

  // What the devices send (round_events.cpp). `d` is the device's entry, its HELLO's figures taken.
  void on_hello(const std::shared_ptr<net::session>& s, device_entry& d, const net::msg::hello& h);
  void on_update(const std::shared_ptr<net::session>& s, const net::msg::update& u);
  void on_upload(const std::shared_ptr<net::session>& s, const std::shared_ptr<net::incoming_transfer>& in);
  void on_download_sent(const std::string& id, const std::shared_ptr<net::outgoing_transfer>& out);
  void on_refuse(const std::shared_ptr<net::session>& s, const net::msg::refuse& r);
  void on_stats_reply(const std::shared_ptr<net::session>& s, const net::msg::stats_reply& r);
  void on_evaluation(const std::shared_ptr<net::session>& s, const net::msg::evaluation& e);
  void on_secure(const std::shared_ptr<net::session>& s, const net::message& m);
  void on_disconnected(const std::string& id);
  // Their sessions are closed (revoked certificates): no phase waits for them any more.
  void on_revoked(const std::vector<std::string>& ids);

  // The operator's actions (the desk's POSTs; round_holds.cpp); `by` names the operator for the log.
  // No round starts while paused (the round in progress runs to its end); finish ends the run after
  // the round in progress (at once between rounds) and writes the model, as after its last round.
  void pause(const std::string& by);
  void resume(const std::string& by);
  void finish_after_round(const std::string& by);

 private:
  round_driver(boost::asio::any_io_executor hub, const hub_context& ctx, device_registry& devices, hub_figures& figures,
               std::unique_ptr<rounds::engine> engine, rounds::recorder recorder, std::unique_ptr<core::memory_table> validation,
               std::int64_t resumed_from);

  // The phase's state, or null in another phase.
  template <typename Phase>
  [[nodiscard]] Phase* in() noexcept { return std::get_if<Phase>(&phase_); }
  [[nodiscard]] bool stopped() const noexcept { return hub::stopped(phase_); }
  [[nodiscard]] bool between_rounds() const noexcept;
  [[nodiscard]] bool uploads_over() const noexcept;  // a secure round past its uploads (checking or unmasking)
  [[nodiscard]] clock_type::time_point round_started() const;

  // round_driver.cpp: waiting, a round's start and its end, the run's end.
  void log_run_plan() const;
  void enter_waiting(clock_type::time_point since);
  void wait_again();  // another device_wait_s for the fleet to change
  void arm_wait_timer();
  void maybe_start_round();
  void start_round();
  void dispatch(clock_type::time_point planning);
  void close_round();
  void count_outcomes();
  void run_again();
  void after_round(rounds::round_metrics& m, clock_type::time_point started);
  void finish(const std::string& failure);
  void cancel_timers();

  // round_phases.cpp: the statistics, the evaluation, the secure protocol.
  void start_statistics(std::vector<rounds::device_offer> offers);
  void ask_statistics();
  void drop_from_statistics(const std::string& id, const std::string& why);
  void end_statistics_pass();
  void start_evaluation(rounds::round_metrics m, clock_type::time_point started);
  template <class Find, class Over>
  void arm_phase_deadline(Find still, Over over);
  void drop_from_evaluation(const std::string& id, const std::string& why);
  void end_evaluation();
  void start_secure(clock_type::time_point started);
  // The secure protocol running now: a secure round's, or a masked statistics pass's (null: none).
  [[nodiscard]] secure_steps* active_steps() noexcept;
  void arm_secure_step();
  void end_secure_step();
  void advance_secure();
  [[nodiscard]] bool uploads_in();
  void secure_over();
  // Every update in, or the deadline: with secure aggregation the unmasking step comes first.
  void end_collection();
  // Why no round starts yet, said when it changes and at most every 30 s while it does not.
  void say_waiting(core::log_level level, const std::string& why);

  boost::asio::any_io_executor hub_;  // the hub's strand: every handler of the driver runs there
  const hub_context& ctx_;
  device_registry& devices_;
  hub_figures& figures_;
  std::unique_ptr<rounds::engine> engine_;
  rounds::recorder recorder_;
  std::unique_ptr<core::memory_table> validation_;
  round_transfers transfers_;
  std::int64_t resumed_from_ = 0;
  hub_phase phase_;
  operator_holds holds_;
  boost::asio::steady_timer wait_timer_;      // waiting: the fleet checked once a second
  boost::asio::steady_timer deadline_timer_;  // a round, a statistics pass, an evaluation: round_deadline_s
  boost::asio::steady_timer secure_timer_;    // a secure protocol's step: secure_step_s
  std::function<void()> before_round_;
  std::function<void()> on_stopped_;
  struct {
    std::string why;
    clock_type::time_point at{};
    bool cannot_start = false;  // the last try to start a round failed (why is in waiting_for_)
  } said_waiting_;
  std::string waiting_for_;  // what the waiting phase waits for, as the status page says it
};

}  // namespace tessera::hub
