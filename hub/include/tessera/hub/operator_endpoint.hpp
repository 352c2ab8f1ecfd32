// tessera/hub/operator_endpoint.hpp — the hub's operator endpoint: HTTP/1.1 (Boost.Beast) on one
// executor (the hub's strand), plain on a loopback address or HTTPS with an operator client certificate.
//
// The endpoint knows HTTP, limits and who is asking; what to answer is the handler's (hub_operator.cpp
// routes /metrics, /api/*, the status page and the actions). Over TLS the hub's own context is used
// (TLS 1.3, the fleet's CA, its CRL, clientAuth): a client without a certificate or with one of another CA
// fails the handshake, and one that is not an operator's (a device's) gets 403 naming its role. Every
// request carries the operator's name from the certificate (empty over plain HTTP), so the handler decides
// what needs one (the actions do).
//
// Bounds: at most max_connections at once (more are closed on accept); a deadline on the TLS handshake,
// each request and each response (a stalled client is dropped); request headers ≤ 8 KiB and bodies ≤
// max_body_bytes, answered 431/413 and closed. Everything (accepting, TLS, the handler) runs on the
// executor it is given: a strand, or an io_context run by one thread.
//
//   auto ep = hub::operator_endpoint::create(strand, {.address = "127.0.0.1", .port = 9464, .tls = false},
//                                            std::nullopt, [](const hub::http_request& r) { return hub::http_response{...}; }, log);
//   auto port = ep->listen();   // result<uint16_t>
//   ...
//   ep->stop();                 // closes the acceptor and every connection
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "tessera/core/base/error.hpp"
#include "tessera/core/config/log.hpp"
#include "tessera/crypto/tls.hpp"

namespace tessera::hub {

struct http_request {
  std::string method;         // "GET", "POST", ...
  std::string path;           // the target up to '?'
  std::string query;          // after '?', without it
  std::string content_type;
  std::string body;
  std::string peer;           // the client's address
  std::string operator_name;  // from its certificate over HTTPS; empty over plain HTTP
};

struct http_response {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers{};  // extra fields (e.g. Allow)
};

struct endpoint_config {
  std::string address = "127.0.0.1";
  std::uint16_t port = 0;                       // 0 picks a free one
  bool tls = true;                              // HTTPS with an operator certificate required
  std::size_t max_connections = 64;
  std::chrono::milliseconds timeout{10'000};    // the handshake, each request, each response
  std::size_t max_body_bytes = 16 * 1024;
};

class operator_endpoint : public std::enable_shared_from_this<operator_endpoint> {
 public:
  using handler = std::function<http_response(const http_request&)>;

  // `tls` is required when config.tls is set.
  [[nodiscard]] static std::shared_ptr<operator_endpoint> create(boost::asio::any_io_executor ex, endpoint_config config,
                                                                 std::optional<crypto::tls_context> tls, handler h,
                                                                 core::log_sink log);
  [[nodiscard]] core::result<std::uint16_t> listen();
  // Connections accepted from now on use `tls` (the hub's context after its CRL changed).
  void set_tls(const crypto::tls_context& tls);
  void stop();
  [[nodiscard]] std::size_t connection_count() const noexcept;
  [[nodiscard]] std::uint64_t requests_served() const noexcept;
  [[nodiscard]] const endpoint_config& config() const noexcept { return config_; }

  operator_endpoint(boost::asio::any_io_executor ex, endpoint_config config, std::optional<crypto::tls_context> tls, handler h,
                    core::log_sink log);
  ~operator_endpoint();

  struct shared_state;  // what the connections share with the endpoint (operator_endpoint.cpp)

 private:
  void do_accept();
  void on_accept(const boost::system::error_code& ec, boost::asio::ip::tcp::socket socket);

  endpoint_config config_;
  std::shared_ptr<shared_state> state_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer retry_timer_;  // accept errors (out of descriptors): a pause, not a spin
};

// Loopback: 127.0.0.0/8 and ::1 (also "localhost"); plain HTTP is allowed only there.
[[nodiscard]] bool is_loopback_address(const std::string& address) noexcept;

}  // namespace tessera::hub
