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
// device that lost its state gets its assignment again.
//
// Threads: io.run() may be called from several threads (tessera-hub runs io_threads of them). Each
// session (its TLS, its frames, its transfers' bytes) runs on its own strand, so handshakes and
// transfers use every core; everything the hub knows (the registry, the phase, the engine, the
// operator endpoint) lives on one strand, executor(), where the sessions deliver their messages
// (net::session::deliver_on). Call the service's methods there, or before io.run() starts.
//
// The service is a few parts (hub/src), each owned here: the device registry; the revocation lists;
// the round driver, which holds the hub's phase (phase.hpp: the states above as one value) and the
// timers that bound it; and the operator's desk, which serves the endpoint. hub_service itself keeps
// the doors: sessions arriving and leaving, and who may stay connected.
//
// With http.listen set, the operator endpoint (operator_endpoint.hpp; routes and documents in
// hub/src/operator_*.cpp) serves on the hub's strand: Prometheus /metrics, /api/status (the run and
// every device), /api/rounds (the per-round series), the status page at /, and, for operator
// certificates, POST /api/pause, /api/resume, /api/finish (after the current round, then export) and
// /api/devices/<id>/revoke.
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
#include <memory>
#include <set>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "tessera/core/config/log.hpp"
#include "tessera/hub/hub_config.hpp"
#include "tessera/hub/operator_endpoint.hpp"
#include "tessera/net/server.hpp"
#include "tessera/rounds/checkpoint.hpp"
#include "tessera/rounds/engine.hpp"
#include "tessera/rounds/recorder.hpp"
#include "tessera/rounds/statistics.hpp"

namespace tessera::hub {

// The parts (hub/src): what they read, the devices, who is revoked, the refused connections' log, the
// operator's figures, the round engine's driver, and the operator's desk (the endpoint).
struct hub_context;
class device_registry;
struct device_entry;
class revocations;
class refusal_log;
struct hub_figures;
class round_driver;
class operator_desk;

class hub_service {
 public:
  [[nodiscard]] static core::result<std::unique_ptr<hub_service>> create(boost::asio::io_context& io, const hub_config& config,
                                                                         core::log_sink log);
  ~hub_service();
  hub_service(const hub_service&) = delete;
  hub_service& operator=(const hub_service&) = delete;

  void on_round(std::function<void(const rounds::round_metrics&)> f);
  // Called once when the service stops (finished, failed, or stop()).
  void on_stopped(std::function<void()> f) { on_stopped_ = std::move(f); }
  // Binds the listening socket and starts; returns the bound port (listen port 0 picks one).
  [[nodiscard]] core::result<std::uint16_t> start();
  // Stops accepting, closes every session; io.run() then returns.
  void stop();

  [[nodiscard]] bool finished() const noexcept;
  // A fatal error that ended the run (empty if none).
  [[nodiscard]] const std::string& failure() const noexcept;
  [[nodiscard]] const rounds::engine& engine() const noexcept;
  [[nodiscard]] std::int64_t resumed_from() const noexcept;
  // The operator endpoint's bound port (0: none); set by start().
  [[nodiscard]] std::uint16_t http_port() const noexcept;
  // The strand the hub's state lives on: its timers, the sessions' handlers and the endpoint run there.
  [[nodiscard]] boost::asio::any_io_executor executor() const { return strand_; }

  // Operator actions (the endpoint's POSTs); `by` names the operator for the log.
  // No round starts while paused; the round in progress runs to its end.
  void pause(const std::string& by);
  void resume(const std::string& by);
  [[nodiscard]] bool paused() const noexcept;
  // The run ends after the round in progress (at once between rounds) and writes the model, as after its
  // last round.
  void finish_after_round(const std::string& by);
  // Refuses the device from now on (its open session closed at once, its assignment ended), kept in
  // checkpoint_dir/revoked-devices.json across restarts. Returns the certificate serial it last used (for
  // the CA's CRL: `tessera-pki revoke --serial`), empty if it never connected here.
  [[nodiscard]] core::result<std::string> revoke_device(const std::string& id, const std::string& by);

 private:
  hub_service(boost::asio::io_context& io, const hub_config& config, core::log_sink log);
  void log(core::log_level level, const std::string& text) const;
  // hub_doors.cpp: sessions arriving (HELLO) and leaving; who may stay connected.
  void attach(const std::shared_ptr<net::session>& s);
  void on_hello(const std::shared_ptr<net::session>& s, const net::msg::hello& h);
  void admit(const std::shared_ptr<net::session>& s, const net::msg::hello& h);
  void let_go(device_entry& d, std::shared_ptr<net::session> older);
  void welcome_waiting(device_entry& d);
  void refuse_revoked(net::session& s, const std::string& why);
  void refuse_duplicate(const std::shared_ptr<net::session>& s, const net::session& holder);
  void turn_away(const net::session& s, const std::string& code, const std::string& why);
  void tell_run_finished();
  void on_closed(const std::shared_ptr<net::session>& s, const core::error& why);
  // The CRL is polled every 250 ms and at every round start: when it changed, new connections get it,
  // and every open session whose certificate it now revokes is closed, its assignment ended.
  void watch_revocations();
  void reload_revocations();
  void close_revoked();
  // The run is over, or stop(): the sessions, the listeners and the CRL's timer go.
  void shut_down();

  boost::asio::io_context& io_;
  boost::asio::any_io_executor strand_;
  std::unique_ptr<const hub_context> ctx_;
  std::function<void()> on_stopped_;
  std::unique_ptr<device_registry> devices_;
  std::unique_ptr<revocations> revoked_;
  std::unique_ptr<refusal_log> refused_;
  std::unique_ptr<hub_figures> figures_;
  std::unique_ptr<round_driver> rounds_;
  std::unique_ptr<operator_desk> desk_;
  std::shared_ptr<net::server> server_;
  boost::asio::steady_timer crl_timer_;
};

}  // namespace tessera::hub
