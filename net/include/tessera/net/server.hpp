// tessera/net/server.hpp — accepts agents' connections and runs one hub-role session for each.
//
// The server owns the listening socket and the TLS context (built by crypto::make_hub_tls). It refuses
// connections beyond max_sessions by closing them at once, hands each new session to on_session so the
// hub can attach its handlers, and stops cleanly: close the acceptor, close every session (REFUSE-free
// close_notify, bounded by shutdown_timeout), then report on_drained once the last one is gone.
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
#include <map>
#include <memory>
#include <string>

#include "tessera/crypto/tls.hpp"
#include "tessera/net/session.hpp"

namespace tessera::net {

struct server_config {
  std::size_t max_sessions = 4096;
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

  server(asio::io_context& io, const crypto::tls_context& tls, const session_config& session_cfg,
         const server_config& cfg);

 private:
  void do_accept();
  void on_accept(const boost::system::error_code& ec, tcp::socket socket);
  void on_session_finished(session* s);
  void check_drained();

  asio::io_context& io_;
  asio::strand<asio::any_io_executor> strand_;
  std::shared_ptr<asio::ssl::context> tls_;
  tcp::acceptor acceptor_;
  session_config session_cfg_;
  server_config cfg_;
  std::function<void(const std::shared_ptr<session>&)> on_session_;
  std::function<void()> on_drained_;
  std::map<session*, std::weak_ptr<session>> sessions_;
  std::atomic<std::size_t> count_{0};
  bool stopping_ = false;
};

}  // namespace tessera::net
