// tessera/hub/hub.hpp — the hub as a network service: registry, rounds over mutual TLS, checkpoints.
//
// The service accepts agents (net::server), keeps a registry of devices (id from the certificate,
// budget, examples, codecs, last seen, rounds done), and drives the round engine (rounds/engine.hpp)
// through this machine; the engine owns each assignment's state, the service reports what the
// sessions saw (sent, downloaded, announced, received, refused) and answers with the engine's verdict:
//
//        start / resume from the latest checkpoint
//              │
//              ▼
//        ┌───────────┐  max_devices ready, or min_devices ready after device_wait_s
//   ┌───▶│  waiting  │──────────────────────────────┐
//   │    └───────────┘                              ▼
//   │                                        ┌────────────┐ plan (capacity from each budget),
//   │                                        │  dispatch  │ ASSIGN + subnet download to each
//   │                                        └─────┬──────┘
//   │                                              ▼
//   │        UPDATE + upload: check round,   ┌────────────┐  a refusal (over budget) or a bad
//   │        transfer, size, digest, shapes, │  collect   │  update: left out, reason logged
//   │        finite values; RESULT back  ───▶│            │  and sent back (code and text)
//   │                                        └─────┬──────┘
//   │                     every update in, or round_deadline_s (stragglers keep old blocks)
//   │                                              ▼
//   │    ┌────────────┐    ┌──────────┐     ┌────────────┐
//   └────│ checkpoint │◀───│ validate │◀────│ aggregate  │  an update for a closed round is refused
//        └─────┬──────┘    └────┬─────┘     └────────────┘
//              │                │ every eval_every rounds: the whole model to the devices that hold
//              │                │ validation examples and whose budget holds it for inference; their
//              │                ▼ EVALUATIONs (or round_deadline_s) give the federated figures
//              │          evaluate on the devices
//              │ last round
//              ▼
//        export the model (safetensors) ──▶ finished
//
// Links may break at any point: a device that reconnects within the round resumes its download or
// upload from the last acknowledged byte (HELLO's resume state, the transfer objects kept here); a
// device that lost its state gets its assignment again. Everything runs on one thread: call io.run()
// from one thread only.
//
// With http.listen set, the operator endpoint (operator_endpoint.hpp, hub_operator.cpp) serves on the same
// thread: Prometheus /metrics, /api/status (the run and every device), /api/rounds (the per-round
// series), the status page at /, and, for operator certificates, POST /api/pause, /api/resume,
// /api/finish (after the current round, then export) and /api/devices/<id>/revoke.
//
//   asio::io_context io;
//   auto hub = hub::hub_service::create(io, config, core::stderr_log("hub")).value();
//   hub->on_round([](const rounds::round_metrics& m) { std::puts(m.to_line().c_str()); });
//   auto port = hub->start();             // listens; result<uint16_t>
//   io.run();                             // returns after the last round, once sessions are closed
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "tessera/core/log.hpp"
#include "tessera/hub/hub_config.hpp"
#include "tessera/hub/operator_endpoint.hpp"
#include "tessera/net/server.hpp"
#include "tessera/rounds/checkpoint.hpp"
#include "tessera/rounds/engine.hpp"
#include "tessera/rounds/recorder.hpp"
#include "tessera/rounds/statistics.hpp"

namespace tessera::hub {

struct hub_context;
struct device_entry;
class device_registry;
class revocations;
struct hub_figures;
class refusal_log;

class hub_service {
 public:
  [[nodiscard]] static core::result<std::unique_ptr<hub_service>> create(boost::asio::io_context& io, const hub_config& config,
                                                                         core::log_sink log);
  ~hub_service();
  hub_service(const hub_service&) = delete;
  hub_service& operator=(const hub_service&) = delete;

  void on_round(std::function<void(const rounds::round_metrics&)> f) { recorder_->on_round(std::move(f)); }
  // Called once when the service stops (finished, failed, or stop()).
  void on_stopped(std::function<void()> f) { on_stopped_ = std::move(f); }
  // Binds the listening socket and starts; returns the bound port (listen port 0 picks one).
  [[nodiscard]] core::result<std::uint16_t> start();
  // Stops accepting, closes every session; io.run() then returns.
  void stop();

  [[nodiscard]] bool finished() const noexcept { return finished_; }
  // A fatal error that ended the run (empty if none).
  [[nodiscard]] const std::string& failure() const noexcept { return failure_; }
  [[nodiscard]] const rounds::engine& engine() const noexcept { return *engine_; }
  [[nodiscard]] std::int64_t resumed_from() const noexcept { return resumed_from_; }
  // The operator endpoint's bound port (0: none); set by start().
  [[nodiscard]] std::uint16_t http_port() const noexcept { return http_port_; }

  // Operator actions (the endpoint's POSTs); `by` names the operator for the log.
  // No round starts while paused; the round in progress runs to its end.
  void pause(const std::string& by);
  void resume(const std::string& by);
  [[nodiscard]] bool paused() const noexcept { return paused_; }
  // The run ends after the round in progress (at once between rounds) and writes the model, as after its
  // last round.
  void finish_after_round(const std::string& by);
  // Refuses the device from now on (its open session closed at once, its assignment ended), kept in
  // checkpoint_dir/revoked-devices.json across restarts. Returns the certificate serial it last used (for
  // the CA's CRL: `tessera-pki revoke --serial`), empty if it never connected here.
  [[nodiscard]] core::result<std::string> revoke_device(const std::string& id, const std::string& by);

  // What the endpoint serves.
  [[nodiscard]] std::string metrics_text() const;
  [[nodiscard]] nlohmann::json status_json() const;
  [[nodiscard]] nlohmann::json rounds_json(std::int64_t since) const;  // the rounds after `since`
  [[nodiscard]] http_response handle_http(const http_request& r);

 private:
  // While the devices score the model of the round just closed (hub_eval.cpp).
  struct evaluation_phase {
    rounds::round_metrics metrics;
    std::uint64_t round = 0;
    std::vector<std::uint32_t> widths;  // the ASSIGN every evaluating device gets: the whole model
    std::string hyper_json;
    std::map<std::string, rounds::evaluator> waiting;  // asked, no answer yet
    // One encoded copy of the model per codec, shared by the devices' downloads.
    std::map<core::codec_kind, std::pair<std::shared_ptr<const std::vector<std::byte>>, net::digest>> model;
    rounds::federated_scores scores;
    std::uint64_t bytes_down = 0;  // of the model, to the devices (resent bytes included)
  };

  // A round's secure aggregation (hub_secure.cpp): the engine holds the protocol's server; this is
  // who answered which step, the step's deadline, and its timing for the log.
  struct secure_phase {
    enum class step { keys, shares, uploads, unmask };
    step at = step::keys;
    std::set<std::string> keyed, shared, replied;
    std::optional<crypto::secagg_roster> roster;
    std::optional<crypto::secagg_unmask_request> request;
    std::chrono::steady_clock::time_point step_started{};
    std::vector<std::pair<std::string, double>> timings;  // seconds each step took
  };

  hub_service(boost::asio::io_context& io, const hub_config& config, core::log_sink log);
  void log(core::log_level level, const std::string& text) const;
  void attach(const std::shared_ptr<net::session>& s);
  void on_hello(const std::shared_ptr<net::session>& s, const net::msg::hello& h);
  void on_update(const std::shared_ptr<net::session>& s, const net::msg::update& u);
  void on_refuse(const std::shared_ptr<net::session>& s, const net::msg::refuse& r);
  void on_upload(const std::shared_ptr<net::session>& s, const std::shared_ptr<net::incoming_transfer>& in);
  void on_download_sent(const std::string& id, const std::shared_ptr<net::outgoing_transfer>& out);
  void note_downloaded(device_entry& d, rounds::assignment& a, const net::outgoing_transfer& out);
  void on_closed(const std::shared_ptr<net::session>& s, const core::error& why);
  void send_assignment(device_entry& d, rounds::assignment& a);
  // Logs and answers RESULT{rejected, code, reason}; `transfer` (if not 0) is the announced upload,
  // whose chunks are dropped.
  void reject(const std::shared_ptr<net::session>& s, const std::string& id, const core::error& why, std::uint64_t transfer);
  void arm_wait_timer();
  void maybe_start_round();
  void start_round();
  // The fleet's statistics before round 1 (hub_stats.cpp), when the model standardizes its inputs.
  void start_statistics(std::vector<rounds::device_offer> offers);
  void ask_statistics();
  void on_stats_reply(const std::shared_ptr<net::session>& s, const net::msg::stats_reply& r);
  void drop_from_statistics(const std::string& id, const std::string& why);
  void end_statistics_pass();
  // A model whose statistics would not fit in one control frame is refused at start.
  [[nodiscard]] core::result<void> check_frame_room() const;
  void close_round();
  // After the round's figures: the evaluation on the devices when due (hub_eval.cpp), then the record.
  void start_evaluation(rounds::round_metrics m);
  void send_evaluation(device_entry& d, const std::string& id);
  void on_evaluation(const std::shared_ptr<net::session>& s, const net::msg::evaluation& e);
  void drop_from_evaluation(const std::string& id, const std::string& why);
  void end_evaluation();
  [[nodiscard]] bool evaluating(const std::string& id) const;
  void after_round(rounds::round_metrics& m);
  // Every update in, or the deadline: with secure aggregation the unmasking step comes first.
  void end_collection();
  void start_secure();
  void on_secure(const std::shared_ptr<net::session>& s, const net::message& m);
  void arm_secure_timer();
  void end_secure_step();
  void send_secure_step(device_entry& d, const std::string& id);  // the current step's message, to one device
  [[nodiscard]] bool secure_step_done() const;
  // The CRL is polled every 250 ms and at every round start: when it changed, new connections get it,
  // and every open session whose certificate it now revokes is closed, its assignment ended.
  void watch_revocations();
  void reload_revocations();
  void close_revoked();
  void finish(const std::string& failure);
  // hub_operator.cpp: the endpoint, the operator's revocations.
  [[nodiscard]] core::result<void> start_endpoint();
  [[nodiscard]] std::string state_name() const;

  boost::asio::io_context& io_;
  std::unique_ptr<const hub_context> ctx_;
  std::function<void()> on_stopped_;
  std::unique_ptr<revocations> revoked_;
  std::unique_ptr<hub_figures> obs_;
  std::shared_ptr<operator_endpoint> endpoint_;
  std::uint16_t http_port_ = 0;
  bool paused_ = false;
  bool finish_requested_ = false;
  std::unique_ptr<refusal_log> refused_;
  boost::asio::steady_timer crl_timer_;
  std::shared_ptr<net::server> server_;
  std::unique_ptr<rounds::engine> engine_;
  std::optional<rounds::recorder> recorder_;
  std::unique_ptr<core::memory_table> validation_;
  std::unique_ptr<rounds::stats_gathering> stats_;  // while the statistics are being gathered
  std::unique_ptr<evaluation_phase> eval_;          // while the devices score the model
  std::unique_ptr<secure_phase> secure_;            // while a secure round runs its protocol
  boost::asio::steady_timer secure_timer_;
  std::unique_ptr<device_registry> devices_;
  boost::asio::steady_timer wait_timer_;
  boost::asio::steady_timer deadline_timer_;
  std::chrono::steady_clock::time_point waiting_since_{}, round_started_{};
  std::int64_t resumed_from_ = 0;
  bool waiting_ = false;
  bool finished_ = false;
  bool stopping_ = false;
  std::string failure_;
};

}  // namespace tessera::hub
