// tessera/net/server.hpp — accepts agents' connections and runs one hub-role session for each.
//
// The server owns the listening socket and the TLS context (built by crypto::make_hub_tls). Three pools:
//   silent         connections whose first TLS record (the ClientHello) has not arrived whole: a socket
//                  and a deadline each, no TLS state. At most max_handshakes of them and
//                  max_handshakes_per_source from one address; a new one beyond either bound closes the
//                  oldest silent one (of that address, or of all). The whole record moves a connection
//                  on to the handshakes (a byte, a FIN or a header alone do not); handshake_timeout, a
//                  first byte that is not TLS's, or the peer's close ends it.
//   handshakes     connections whose TLS handshake has begun and not verified a device certificate
//                  yet, bounded the same way and apart: a new one beyond a bound pushes out the oldest
//                  pending handshake. So a flood of silent connections, even from the devices' own
//                  address (a NAT), only ever pushes out its own, never a device mid-handshake, and no
//                  connection before authentication costs an authenticated session its place;
//   sessions       verified devices, at most max_sessions (a connection arriving when they are full is
//                  closed before any TLS). Two sessions of one device identity are the owner's to
//                  settle (the hub probes the older at the newer's HELLO: hub_doors.cpp); a fourth
//                  replaces the newest but one (REFUSE, errc::replaced).
// It hands each new session to on_session so the hub can attach its handlers, and stops cleanly: close
// the acceptor, close every session (close_notify, bounded by shutdown_timeout), then report on_drained
// once the last one is gone.
//
//   auto tls = crypto::make_hub_tls(files).value();
//   auto srv = net::server::create(io, tls, session_cfg);
//   srv->on_session([](const std::shared_ptr<net::session>& s) { s->on_message(...); });
//   auto port = srv->listen("0.0.0.0", 7443);                    // 0 picks an ephemeral port
//   ...
//   srv->stop([] { std::puts("drained"); });
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tessera/crypto/tls.hpp"
#include "tessera/net/session.hpp"

namespace tessera::net {

struct server_config {
  std::size_t max_sessions = 4096;
  std::size_t max_handshakes = 256;
  std::size_t max_handshakes_per_source = 16;
};

class server : public std::enable_shared_from_this<server> {
 public:
  [[nodiscard]] static std::shared_ptr<server> create(asio::io_context& io, const crypto::tls_context& tls,
                                                      const session_config& session_cfg,
                                                      const server_config& cfg = {});
  // Called on the new session's strand before its handshake starts; set its handlers here.
  void on_session(std::function<void(const std::shared_ptr<session>&)> f) { on_session_ = std::move(f); }
  // Binds and starts accepting. Returns the bound port (useful with port 0).
  [[nodiscard]] core::result<std::uint16_t> listen(const std::string& address, std::uint16_t port);
  void stop(std::function<void()> on_drained = {});
  // Uses `tls` for connections accepted from now on (e.g. after the revocation list changed); sessions
  // already open keep theirs.
  void set_tls(const crypto::tls_context& tls);
  [[nodiscard]] std::size_t session_count() const noexcept { return count_.load(); }
  // Verified sessions, connections in their handshake, and silent ones (a snapshot, from any thread).
  [[nodiscard]] std::size_t authenticated_count() const noexcept { return authenticated_count_.load(); }
  [[nodiscard]] std::size_t handshake_count() const noexcept { return handshake_count_.load(); }
  [[nodiscard]] std::size_t silent_count() const noexcept { return silent_count_.load(); }
  // Silent connections closed at the handshake deadline, since the start.
  [[nodiscard]] std::uint64_t silent_expired_count() const noexcept { return silent_expired_.load(); }
  // Connections before authentication (silent or pending handshakes) pushed out to make room, since the start.
  [[nodiscard]] std::uint64_t evicted_count() const noexcept { return evicted_.load(); }

  server(asio::io_context& io, const crypto::tls_context& tls, const session_config& session_cfg,
         const server_config& cfg);

 private:
  void do_accept();
  void on_accept(const boost::system::error_code& ec, tcp::socket socket);
  void start_handshake(tcp::socket socket, const std::string& source);
  void wait_silent(tcp::socket socket, const std::string& source);
  void await_bytes(std::uint64_t seq);
  void on_first_bytes(std::uint64_t seq, const boost::system::error_code& ec);
  void close_silent(std::uint64_t seq);
  void arm_silent_deadline();
  void expire_silent();
  void on_session_finished(session* s);
  void on_authenticated(session* s);
  void evict(std::uint64_t seq);
  void drop_pending(session* s);
  void update_counts();
  void check_drained();

  struct silent_connection {
    std::unique_ptr<tcp::socket> socket;
    std::string source;
    std::chrono::steady_clock::time_point deadline;
  };
  struct silent_pool {
    std::map<std::uint64_t, silent_connection> by_seq;  // oldest first
    std::map<std::string, std::set<std::uint64_t>> by_source;
  };

  struct entry {
    std::weak_ptr<session> s;
    std::string source;  // the peer's address
    std::uint64_t seq = 0;  // arrival order
    bool authenticated = false;
    std::string id;      // the device, once authenticated
  };

  asio::io_context& io_;
  asio::strand<asio::any_io_executor> strand_;
  std::shared_ptr<asio::ssl::context> tls_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_timer_;  // accept errors (out of descriptors): a pause, not a spin
  session_config session_cfg_;
  server_config cfg_;
  std::function<void(const std::shared_ptr<session>&)> on_session_;
  std::function<void()> on_drained_;
  std::map<session*, entry> sessions_;
  std::map<std::uint64_t, session*> pending_;  // in their handshake, by arrival
  std::map<std::string, std::map<std::uint64_t, session*>> pending_by_source_;  // the same, per address
  std::map<std::string, std::vector<session*>> by_identity_;  // authenticated, oldest first, at most three
  silent_pool silent_;
  asio::steady_timer silent_timer_;  // the oldest silent connection's deadline
  std::size_t authenticated_ = 0;
  std::uint64_t next_seq_ = 0;
  std::atomic<std::size_t> count_{0}, authenticated_count_{0}, handshake_count_{0}, silent_count_{0};
  std::atomic<std::uint64_t> evicted_{0}, silent_expired_{0};
  bool stopping_ = false;
};

}  // namespace tessera::net
