#include "tessera/net/session_lifecycle.hpp"

#include <algorithm>

#include "tessera/core/base/names.hpp"

namespace tessera::net {
namespace {

// Which control messages each side may receive (DESIGN.md §3); anything else is a protocol error.
bool allowed_for(role r, frame_type t) noexcept {
  switch (t) {
    case frame_type::ack:
    case frame_type::ping:
    case frame_type::pong:
    case frame_type::refuse: return true;
    case frame_type::hello:
    case frame_type::update:
    case frame_type::stats_reply:
    case frame_type::evaluation:
    case frame_type::secagg_keys:
    case frame_type::secagg_shares:
    case frame_type::secagg_unmask_reply:
    case frame_type::secagg_check_reply:
    case frame_type::secagg_masked_with: return r == role::hub;
    case frame_type::welcome:
    case frame_type::assign:
    case frame_type::result:
    case frame_type::stats:
    case frame_type::secagg_roster:
    case frame_type::secagg_inbox:
    case frame_type::secagg_unmask:
    case frame_type::secagg_check: return r == role::agent;
    case frame_type::chunk: return false;
  }
  return false;
}

}  // namespace

std::string_view to_string(session_state s) noexcept {
  static constexpr auto names = core::names_in_order<session_state>(
      {"created", "handshaking", "greeting", "open", "flushing", "shutting_down", "aborting", "closed"});
  return names.name(s);
}

bool session_lifecycle::start() noexcept {
  if (state_ != session_state::created) return false;
  state_ = session_state::handshaking;
  return true;
}

void session_lifecycle::handshake_done() noexcept {
  TESSERA_ASSERT(state_ == session_state::handshaking);
  state_ = role_ == role::hub ? session_state::greeting : session_state::open;
  ever_established_ = true;
}

core::result<void> session_lifecycle::admit(const message& m, const std::string& peer_id) {
  const frame_type t = type_of(m);
  const bool is_hello = std::holds_alternative<msg::hello>(m);
  if (!allowed_for(role_, t) || (state_ == session_state::open && is_hello))
    return make_error(errc::unexpected_message, std::string(to_string(t)) + " is not expected by the " +
                                                    (role_ == role::hub ? "hub" : "agent"));
  if (state_ != session_state::greeting) {
    heard_from_peer_ = true;
    return {};
  }
  if (!is_hello) return make_error(errc::unexpected_message, std::string(to_string(t)) + " before HELLO");
  const auto& h = std::get<msg::hello>(m);
  if (h.device_id != peer_id)
    return make_error(errc::identity_mismatch,
                      "HELLO claims device '" + h.device_id + "' but the certificate is '" + peer_id + "'");
  state_ = session_state::open;
  heard_from_peer_ = true;
  return {};
}

close_action session_lifecycle::close(core::error why, close_mode mode, clock::time_point now) {
  if (closed()) return close_action::none;
  if (closing()) return mode == close_mode::hard ? close_action::finish : close_action::none;
  reason_ = std::move(why);
  close_started_ = now;
  if (mode == close_mode::hard || !established()) return close_action::finish;
  state_ = session_state::flushing;
  return close_action::flush;
}

void session_lifecycle::transport_failed() noexcept {
  if (closing()) state_ = session_state::aborting;
}

// Steps of a graceful close, asked again after each completion until done:
// flush the queue → cancel a pending read → close_notify → close the socket.
close_step session_lifecycle::next_close_step(bool write_pending, bool read_pending, bool queue_empty) noexcept {
  switch (state_) {
    case session_state::aborting: return write_pending || read_pending ? close_step::cancel_io : close_step::finish;
    case session_state::flushing:
      if (write_pending) return close_step::wait;
      if (!queue_empty) return close_step::write;
      if (read_pending) return close_step::cancel_io;
      state_ = session_state::shutting_down;
      return close_step::shutdown;
    default: return close_step::wait;  // not closing, or close_notify already under way
  }
}

const core::error& session_lifecycle::finish() {
  state_ = session_state::closed;
  if (reason_.message.empty()) reason_ = make_error(errc::stopped, "closed");
  return reason_;
}

watchdog_verdict session_lifecycle::check(const session_config& c, const session_activity& a, bool write_pending,
                                          bool queue_empty, clock::time_point now) const noexcept {
  if (closed()) return watchdog_verdict::ok;
  // The peer did not answer close_notify in time, or a flush stalled.
  if (closing()) return now - close_started_ >= c.shutdown_timeout ? watchdog_verdict::shutdown_timeout : watchdog_verdict::ok;
  if (!established())
    return now - a.started >= c.handshake_timeout ? watchdog_verdict::handshake_timeout : watchdog_verdict::ok;
  // The hub's side between the handshake and HELLO: the same deadline from the connection's start, so
  // that a certificate's holder cannot keep sessions open by saying little (the idle deadline alone
  // would let it stay by sending a byte now and then).
  if (state_ == session_state::greeting && now - a.started >= c.handshake_timeout) return watchdog_verdict::hello_timeout;
  if (now - a.last_rx >= c.idle_timeout) return watchdog_verdict::idle_timeout;
  if (write_pending && now - a.last_tx_progress >= c.write_timeout) return watchdog_verdict::write_timeout;
  if (queue_empty && !write_pending && now - a.last_tx >= c.heartbeat_interval) return watchdog_verdict::ping;
  return watchdog_verdict::ok;
}

core::error deadline_error(watchdog_verdict v, const session_config& c) {
  switch (v) {
    case watchdog_verdict::handshake_timeout:
      return make_error(errc::handshake_timeout, "no TLS handshake within " + std::to_string(c.handshake_timeout.count()) + " ms");
    case watchdog_verdict::hello_timeout:
      return make_error(errc::handshake_timeout, "no HELLO within " + std::to_string(c.handshake_timeout.count()) + " ms of connecting");
    case watchdog_verdict::idle_timeout:
      return make_error(errc::idle_timeout, "no byte received for " + std::to_string(c.idle_timeout.count()) + " ms");
    case watchdog_verdict::write_timeout:
      return make_error(errc::write_timeout, "no byte written for " + std::to_string(c.write_timeout.count()) + " ms");
    case watchdog_verdict::ok:
    case watchdog_verdict::ping:
    case watchdog_verdict::shutdown_timeout: break;  // the close under way keeps its own reason
  }
  TESSERA_ASSERT(!"deadline_error: not an error verdict");
  return {};
}

std::chrono::milliseconds watchdog_period(const session_config& c) noexcept {
  const auto p = std::min({c.idle_timeout, c.write_timeout, c.heartbeat_interval, c.handshake_timeout, c.shutdown_timeout}) / 4;
  return std::clamp(p, std::chrono::milliseconds(5), std::chrono::milliseconds(1000));
}

}  // namespace tessera::net
