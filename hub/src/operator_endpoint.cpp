// The operator endpoint's connections (operator_endpoint.hpp): one small class per connection, templated
// on its stream (plain TCP or TLS over TCP), each step with its deadline:
//
//   accept ─▶ [TLS handshake ─▶ role check] ─▶ read request ─▶ handler ─▶ write response ─┐
//                                                   ▲        keep-alive                      │
//                                                   └────────────────────────────────────────┘
//   any error, timeout or "Connection: close" ─▶ (TLS close_notify) ─▶ closed
#include "tessera/hub/operator_endpoint.hpp"

#include <arpa/inet.h>

#include <list>

#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "tessera/core/base/assert.hpp"
#include "tessera/crypto/error.hpp"
#include "tessera/crypto/pki.hpp"
#include "tessera/crypto/tls.hpp"
#include "tessera/net/tls_adopt.hpp"

namespace tessera::hub {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct operator_endpoint::shared_state {
  handler handle;
  core::log_sink log;
  std::shared_ptr<asio::ssl::context> tls;  // null for plain HTTP
  std::chrono::milliseconds timeout{};
  std::size_t max_body = 0;
  std::size_t live = 0;
  std::uint64_t served = 0;
  bool stopped = false;
  std::list<std::function<void()>> closers;  // one per live connection: closes it at stop()

  void note(core::log_level level, const std::string& text) const {
    if (log) log(level, text);
  }
};

namespace {

constexpr std::uint32_t k_header_limit = 8 * 1024;

template <class Stream>
class connection : public std::enable_shared_from_this<connection<Stream>> {
 public:
  // `keep`: what the stream needs alive as long as it lives (its TLS context).
  connection(Stream stream, std::shared_ptr<operator_endpoint::shared_state> state, std::string peer, std::shared_ptr<void> keep)
      : stream_(std::move(stream)), keep_(std::move(keep)), state_(std::move(state)), peer_(std::move(peer)) {}

  void start() {
    ++state_->live;
    closer_ = state_->closers.insert(state_->closers.end(), [weak = this->weak_from_this()] {
      if (auto self = weak.lock()) self->close_now();
    });
    registered_ = true;
    if constexpr (tls) {
      lowest().expires_after(state_->timeout);
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](const beast::error_code& ec) { self->on_handshake(ec); });
    } else {
      do_read();
    }
  }

  ~connection() {
    --state_->live;
    if (registered_) state_->closers.erase(closer_);
  }

 private:
  static constexpr bool tls = !std::is_same_v<Stream, beast::tcp_stream>;

  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }

  void on_handshake(const beast::error_code& ec) {
    if (ec) {
      // No certificate, another CA's, a revoked one, or not TLS 1.3: TLS already told the client.
      state_->note(core::log_level::warning, "operator endpoint: TLS handshake with " + peer_ + " failed: " + ec.message());
      return close_now();
    }
    if constexpr (tls) {
      // The operator's name in the TLS peer's certificate, or why there is none.
      auto who = crypto::peer_operator(stream_.native_handle());
      if (who) operator_ = std::move(who).value();
      else refusal_ = who.error().message;
    }
    do_read();
  }

  void do_read() {
    parser_.emplace();
    parser_->header_limit(k_header_limit);
    parser_->body_limit(state_->max_body);
    lowest().expires_after(state_->timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](const beast::error_code& ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(const beast::error_code& ec) {
    if (ec == http::error::end_of_stream) return do_close();
    if (ec == http::error::header_limit) return reply_error(431, "request headers over 8 KiB");
    if (ec == http::error::body_limit) return reply_error(413, "request body over " + std::to_string(state_->max_body) + " bytes");
    if (ec) return close_now();  // a timeout, a reset, garbage: nothing worth answering
    const auto& req = parser_->get();
    keep_alive_ = req.keep_alive();
    if (!refusal_.empty()) {
      state_->note(core::log_level::warning, "operator endpoint: " + peer_ + " refused: " + refusal_);
      keep_alive_ = false;
      return write(http_response{.status = 403, .content_type = "text/plain; charset=utf-8",
                                 .body = "refused: " + refusal_ + "\n"});
    }
    http_request r;
    r.method.assign(req.method_string().data(), req.method_string().size());
    const std::string_view target(req.target().data(), req.target().size());
    const auto q = target.find('?');
    r.path = std::string(target.substr(0, q));
    if (q != std::string_view::npos) r.query = std::string(target.substr(q + 1));
    const auto type = req[http::field::content_type];
    r.content_type.assign(type.data(), type.size());
    r.body = req.body();
    r.peer = peer_;
    r.operator_name = operator_;
    ++state_->served;
    http_response out;
    try {
      out = state_->handle(r);
    } catch (const std::exception& e) {
      // A bug in a route must not take the hub's thread down with it: this request fails, the hub goes on.
      state_->note(core::log_level::error, "operator endpoint: " + r.method + " " + r.path + " failed: " + e.what());
      keep_alive_ = false;
      out = http_response{.status = 500, .content_type = "text/plain; charset=utf-8", .body = "internal error\n"};
    }
    write(std::move(out));
  }

  void reply_error(unsigned status, const std::string& what) {
    keep_alive_ = false;
    write(http_response{.status = status, .content_type = "text/plain; charset=utf-8", .body = what + "\n"});
  }

  void write(http_response r) {
    response_.emplace(static_cast<http::status>(r.status), 11);
    auto& res = *response_;
    res.set(http::field::server, "tessera-hub");
    res.set(http::field::content_type, r.content_type);
    res.set(http::field::cache_control, "no-store");
    res.set("X-Content-Type-Options", "nosniff");
    for (const auto& [k, v] : r.headers) res.set(k, v);
    res.keep_alive(keep_alive_);
    res.body() = std::move(r.body);
    res.prepare_payload();
    lowest().expires_after(state_->timeout);
    http::async_write(stream_, res, [self = this->shared_from_this()](const beast::error_code& ec, std::size_t) {
      self->on_write(ec);
    });
  }

  void on_write(const beast::error_code& ec) {
    if (ec) return close_now();
    if (!keep_alive_ || state_->stopped) return do_close();
    do_read();
  }

  // An orderly end: close_notify over TLS (with its deadline), then the socket.
  void do_close() {
    if constexpr (tls) {
      lowest().expires_after(state_->timeout);
      stream_.async_shutdown([self = this->shared_from_this()](const beast::error_code&) { self->close_now(); });
    } else {
      beast::error_code ignored;
      lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
      close_now();
    }
  }

  void close_now() {
    beast::error_code ignored;
    lowest().socket().close(ignored);  // pending operations complete with operation_aborted
  }

  Stream stream_;
  std::shared_ptr<void> keep_;
  std::shared_ptr<operator_endpoint::shared_state> state_;
  std::string peer_;
  std::string operator_;  // the certificate's operator (HTTPS)
  std::string refusal_;   // why this client is not an operator (HTTPS with a device's certificate)
  beast::flat_buffer buffer_{k_header_limit};
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> response_;
  bool keep_alive_ = false;
  std::list<std::function<void()>>::iterator closer_;
  bool registered_ = false;
};

}  // namespace

bool is_loopback_address(const std::string& address) noexcept {
  if (address == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, address.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

std::shared_ptr<operator_endpoint> operator_endpoint::create(asio::any_io_executor ex, endpoint_config config,
                                                             std::optional<crypto::tls_context> tls, handler h,
                                                             core::log_sink log) {
  return std::make_shared<operator_endpoint>(std::move(ex), std::move(config), std::move(tls), std::move(h), std::move(log));
}

operator_endpoint::operator_endpoint(asio::any_io_executor ex, endpoint_config config, std::optional<crypto::tls_context> tls,
                                     handler h, core::log_sink log)
    : config_(std::move(config)), state_(std::make_shared<shared_state>()), acceptor_(ex), retry_timer_(ex) {
  TESSERA_ASSERT(!config_.tls || (tls && tls->valid()));
  state_->handle = std::move(h);
  state_->log = std::move(log);
  if (config_.tls) state_->tls = net::adopt_tls(*tls);
  state_->timeout = config_.timeout;
  state_->max_body = config_.max_body_bytes;
}

operator_endpoint::~operator_endpoint() { stop(); }

std::size_t operator_endpoint::connection_count() const noexcept { return state_->live; }
std::uint64_t operator_endpoint::requests_served() const noexcept { return state_->served; }

void operator_endpoint::set_tls(const crypto::tls_context& tls) {
  if (config_.tls) state_->tls = net::adopt_tls(tls);
}

core::result<std::uint16_t> operator_endpoint::listen() {
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(config_.address == "localhost" ? "127.0.0.1" : config_.address, ec);
  if (ec) return core::make_error(core::errc::invalid_argument, "http.listen: '" + config_.address + "' is not an IP address");
  const tcp::endpoint at(address, config_.port);
  const std::string where = config_.address + ":" + std::to_string(config_.port);
  if (acceptor_.open(at.protocol(), ec); ec) return core::make_error(core::errc::io, "http.listen " + where + ": " + ec.message());
  acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (acceptor_.bind(at, ec); ec) return core::make_error(core::errc::io, "http.listen " + where + ": " + ec.message());
  if (acceptor_.listen(asio::socket_base::max_listen_connections, ec); ec)
    return core::make_error(core::errc::io, "http.listen " + where + ": " + ec.message());
  const auto port = acceptor_.local_endpoint(ec).port();
  do_accept();
  return port;
}

void operator_endpoint::do_accept() {
  acceptor_.async_accept([weak = weak_from_this()](const boost::system::error_code& ec, tcp::socket socket) {
    if (auto self = weak.lock()) self->on_accept(ec, std::move(socket));
  });
}

void operator_endpoint::on_accept(const boost::system::error_code& ec, tcp::socket socket) {
  if (state_->stopped || ec == asio::error::operation_aborted) return;
  if (ec) {
    // Out of descriptors (or a transient error): wait a moment instead of spinning on accept.
    retry_timer_.expires_after(std::chrono::milliseconds(100));
    retry_timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& e) {
      if (auto self = weak.lock(); self && !e && !self->state_->stopped) self->do_accept();
    });
    return;
  }
  boost::system::error_code pe;
  const auto remote = socket.remote_endpoint(pe);
  const std::string peer = pe ? std::string("?") : remote.address().to_string();
  if (state_->live >= config_.max_connections) {
    boost::system::error_code ignored;
    socket.close(ignored);  // over the bound: closed before any TLS or HTTP
  } else if (config_.tls) {
    using tls_stream = beast::ssl_stream<beast::tcp_stream>;
    auto ctx = state_->tls;
    std::make_shared<connection<tls_stream>>(tls_stream(beast::tcp_stream(std::move(socket)), *ctx), state_, peer, ctx)->start();
  } else {
    std::make_shared<connection<beast::tcp_stream>>(beast::tcp_stream(std::move(socket)), state_, peer, nullptr)->start();
  }
  do_accept();
}

void operator_endpoint::stop() {
  if (state_->stopped) return;
  state_->stopped = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  retry_timer_.cancel();
  // Each closer closes its socket; the connection then ends and unregisters itself.
  const auto closers = state_->closers;
  for (const auto& close : closers) close();
}

}  // namespace tessera::hub
