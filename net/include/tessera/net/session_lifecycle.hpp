// tessera/net/session_lifecycle.hpp — a session's lifecycle as one state, its close steps and watchdog.
//
// Socket-free: the session asks this class what a message, a failure, a completion or a tick means
// and performs the answer (write, cancel, close_notify, close). tests/net/session_lifecycle_test.cpp
// walks every transition without a socket.
//
//   created ─start()─▶ handshaking ─TLS up─▶ greeting ─HELLO naming the certificate's id─▶ open
//                          │         (agent: TLS up ─▶ open)  │                             │
//                          │                                  └─────────────┬───────────────┘
//                          │                 close() / refuse() / protocol error / peer EOF
//                          │                                                ▼
//                          │      flushing: reads stop; queued frames, then any REFUSE, are written;
//                          │          │     chunks not yet begun are dropped (a resume resends them)
//                          │          ▼ queue written, pending read cancelled
//                          │      shutting_down: close_notify exchange
//                          │          │ answered
//                          ▼          ▼
//                        closed ◀─────┴──── from any state: TLS failure, a deadline, a reset, queue_full,
//                          ▲                take-over, any close before TLS is up; shutdown_timeout while
//                          │                flushing or shutting down
//                       aborting ◀── a write fails while flushing or shutting down: cancel, send nothing
//
//   session_lifecycle life(role::hub);
//   life.start();                                    // → handshaking
//   life.handshake_done();                           // → greeting
//   if (auto ok = life.admit(m, peer_id); !ok) refuse(ok.error());   // HELLO → open
//   if (life.close(why, close_mode::refuse, now) == close_action::flush) { ...queue REFUSE... }
//   switch (life.next_close_step(write_pending, read_pending, queue_empty)) { ... }
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/core/base/error.hpp"
#include "tessera/net/messages.hpp"
#include "tessera/net/session_config.hpp"

namespace tessera::net {

enum class session_state : std::uint8_t {
  created,        // constructed; start() not run yet
  handshaking,    // TLS handshake, under handshake_timeout
  greeting,       // hub: TLS done; the first frame must be a HELLO naming the certificate's device
  open,           // frames flow both ways, under idle/write deadlines, with heartbeats
  flushing,       // graceful close: no more reads; what is queued (and a REFUSE) is written
  shutting_down,  // close_notify exchange, under shutdown_timeout
  aborting,       // the transport failed during a graceful close: cancel pending I/O, then closed
  closed,         // socket closed, on_closed reported; final
};
[[nodiscard]] std::string_view to_string(session_state s) noexcept;

enum class close_mode {
  graceful,  // flush what is queued, close_notify
  refuse,    // the same, with a REFUSE{reason} last: the peer misbehaved
  hard,      // close the socket now: nothing can or should be sent
};
enum class close_action { none, flush, finish };                     // what close() asks of the session
enum class close_step { wait, write, cancel_io, shutdown, finish };  // the next step of a graceful close
enum class watchdog_verdict { ok, ping, handshake_timeout, hello_timeout, idle_timeout, write_timeout, shutdown_timeout };

// When the peer and the stream last showed progress; the watchdog measures deadlines from these.
struct session_activity {
  std::chrono::steady_clock::time_point started{}, last_rx{}, last_tx{}, last_tx_progress{};
};

class session_lifecycle {
 public:
  using clock = std::chrono::steady_clock;
  explicit session_lifecycle(role r) noexcept : role_(r) {}

  [[nodiscard]] session_state state() const noexcept { return state_; }
  // TLS is up and no close has begun: frames may be queued, written and read.
  [[nodiscard]] bool established() const noexcept { return state_ == session_state::greeting || state_ == session_state::open; }
  // Queued frames may be written: established, or flushing them before close_notify.
  [[nodiscard]] bool may_write() const noexcept { return established() || state_ == session_state::flushing; }
  [[nodiscard]] bool closing() const noexcept {
    return state_ == session_state::flushing || state_ == session_state::shutting_down || state_ == session_state::aborting;
  }
  [[nodiscard]] bool closed() const noexcept { return state_ == session_state::closed; }
  // Closing or closed: new work (send, send_blob, expect_blob) is dropped, reading has ended.
  [[nodiscard]] bool stopped() const noexcept { return closing() || closed(); }
  // The handshake completed at some point (a client then resets its backoff).
  [[nodiscard]] bool ever_established() const noexcept { return ever_established_; }
  // Whether a message from the peer was ever admitted: in TLS 1.3 a client's handshake completes
  // before the server has checked its certificate, so only a message proves the server took it.
  [[nodiscard]] bool heard_from_peer() const noexcept { return heard_from_peer_; }
  // Why it closes: set by the first close(); errc::stopped "closed" if none was given.
  [[nodiscard]] const core::error& reason() const noexcept { return reason_; }
  [[nodiscard]] clock::time_point close_started() const noexcept { return close_started_; }

  // created → handshaking; false (and no change) from any other state.
  bool start() noexcept;
  // handshaking → greeting (hub) or open (agent).
  void handshake_done() noexcept;
  // Whether this side may receive `m` now (DESIGN.md §3): unexpected_message, or identity_mismatch for
  // a HELLO whose id differs from `peer_id` (the certificate's). A hub's good HELLO: greeting → open.
  [[nodiscard]] core::result<void> admit(const message& m, const std::string& peer_id);
  // Begins closing for `why`. Before TLS is up, or when hard, the socket closes now (finish); otherwise
  // → flushing. While closing, only a hard close changes anything (it hurries the close up).
  [[nodiscard]] close_action close(core::error why, close_mode mode, clock::time_point now);
  // A write failed while closing: flushing/shutting_down → aborting.
  void transport_failed() noexcept;
  // The next step of a graceful close from what is in flight; flushing → shutting_down on `shutdown`.
  [[nodiscard]] close_step next_close_step(bool write_pending, bool read_pending, bool queue_empty) noexcept;
  // → closed. Returns the reason to report.
  const core::error& finish();

  // The watchdog: which deadline (if any) has passed at `now`, or whether a heartbeat is due.
  [[nodiscard]] watchdog_verdict check(const session_config& c, const session_activity& a, bool write_pending,
                                       bool queue_empty, clock::time_point now) const noexcept;

 private:
  role role_;
  session_state state_ = session_state::created;
  bool ever_established_ = false;
  bool heard_from_peer_ = false;
  core::error reason_;
  clock::time_point close_started_{};
};

// The error a session closes with for a handshake, idle or write timeout.
[[nodiscard]] core::error deadline_error(watchdog_verdict v, const session_config& c);
// How often the watchdog looks: a quarter of the shortest deadline, within [5 ms, 1 s].
[[nodiscard]] std::chrono::milliseconds watchdog_period(const session_config& c) noexcept;

}  // namespace tessera::net
