// tessera/net/client.hpp — the agent's side: dial the hub, and dial again after every break.
//
// The client resolves and connects with one deadline (session_config::handshake_timeout), runs an
// agent-role session, and when that session closes for any reason but stop() schedules the next attempt
// on a timer: capped exponential backoff (backoff_initial · 2^(failures-1), at most backoff_max) with
// jitter (a random cut of up to `jitter` of the delay), so a fleet that lost its hub does not reconnect
// in lockstep. A session that completed its handshake resets the backoff.
//
// The host name is resolved again before every attempt, with net::resolver (c-ares: the hosts file,
// then DNS; no glibc NSS, so it works in a static agent): a hub that moved to another address keeps
// its fleet. A name that does not resolve fails the attempt with errc::resolve_failed.
//
//   auto tls = crypto::make_agent_tls({.ca_cert = ..., .hub_name = "hub.example.org"}).value();
//   auto c = net::client::create(io, tls, session_cfg, {.host = "hub.example.org", .port = 7443});
//   c->on_session([](const std::shared_ptr<net::session>& s) {
//     s->on_ready([s] { s->send(net::msg::hello{...}); });
//   });
//   c->start();
//   ...
//   c->stop();
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>

#include "tessera/crypto/tls.hpp"
#include "tessera/net/resolver.hpp"
#include "tessera/net/session.hpp"

namespace tessera::net {

struct client_config {
  std::string host = "localhost";
  std::uint16_t port = 7443;
  std::chrono::milliseconds backoff_initial{250};
  std::chrono::milliseconds backoff_max{30'000};
  double jitter = 0.5;           // 0: exact delays; 0.5: each delay is cut by a random 0..50 %
  std::uint64_t seed = 0;        // 0: seeded from std::random_device
  resolver_config dns{};         // default: the name servers of /etc/resolv.conf
};

class client : public std::enable_shared_from_this<client> {
 public:
  [[nodiscard]] static std::shared_ptr<client> create(asio::io_context& io, const crypto::tls_context& tls,
                                                      const session_config& session_cfg, const client_config& cfg);
  // Called for every new session before its handshake; set its handlers here.
  void on_session(std::function<void(const std::shared_ptr<session>&)> f) { on_session_ = std::move(f); }
  // Called when an attempt fails before a session exists, with the delay chosen for the next one.
  void on_connect_failed(std::function<void(const core::error&, std::chrono::milliseconds next)> f) {
    on_connect_failed_ = std::move(f);
  }
  void start();
  void stop();
  // The delay before attempt number `failures` + 1 (no jitter applied when jitter == 0).
  [[nodiscard]] std::chrono::milliseconds backoff_delay(unsigned failures);

  client(asio::io_context& io, const crypto::tls_context& tls, const session_config& session_cfg,
         const client_config& cfg);

 private:
  void do_connect();
  void on_resolved(core::result<resolver::endpoints> found, std::chrono::steady_clock::time_point deadline);
  void on_connected(const boost::system::error_code& ec);
  void schedule_retry(const core::error& why);

  asio::strand<asio::any_io_executor> strand_;
  std::shared_ptr<asio::ssl::context> tls_;
  session_config session_cfg_;
  client_config cfg_;
  resolver resolver_;
  tcp::socket socket_;
  asio::steady_timer timer_;       // connect deadline, then retry delay
  std::mt19937_64 rng_;
  std::function<void(const std::shared_ptr<session>&)> on_session_;
  std::function<void(const core::error&, std::chrono::milliseconds)> on_connect_failed_;
  std::weak_ptr<session> current_;
  static constexpr unsigned k_failures_at_most = 64;  // backoff_delay's doubling stops long before
  unsigned failures_ = 0;
  bool stopped_ = false;
  bool connecting_ = false;
};

}  // namespace tessera::net
