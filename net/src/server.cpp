#include "tessera/net/server.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include "tls_adopt.hpp"

namespace tessera::net {

std::shared_ptr<server> server::create(asio::io_context& io, const crypto::tls_context& tls,
                                       const session_config& session_cfg, const server_config& cfg) {
  return std::make_shared<server>(io, tls, session_cfg, cfg);
}

server::server(asio::io_context& io, const crypto::tls_context& tls, const session_config& session_cfg,
               const server_config& cfg)
    : io_(io),
      strand_(asio::make_strand(io.get_executor())),
      tls_(detail::adopt_tls(tls)),
      acceptor_(strand_),
      session_cfg_(session_cfg),
      cfg_(cfg) {}

core::result<std::uint16_t> server::listen(const std::string& address, std::uint16_t port) {
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(address, ec);
  if (ec) return make_error(errc::connect_failed, "listen address '" + address + "': " + ec.message());
  const tcp::endpoint ep(addr, port);
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return make_error(errc::connect_failed, "listen on " + address + ":" + std::to_string(port) + ": " + ec.message());
  const std::uint16_t bound = acceptor_.local_endpoint().port();
  asio::dispatch(strand_, [self = shared_from_this()] { self->do_accept(); });
  return bound;
}

void server::do_accept() {
  if (stopping_) return;
  acceptor_.async_accept(io_.get_executor(),
                         asio::bind_executor(strand_, [self = shared_from_this()](const boost::system::error_code& ec,
                                                                                 tcp::socket socket) {
                           self->on_accept(ec, std::move(socket));
                         }));
}

void server::on_accept(const boost::system::error_code& ec, tcp::socket socket) {
  if (stopping_ || ec == asio::error::operation_aborted) return;
  if (!ec) {
    if (sessions_.size() >= cfg_.max_sessions) {
      // Over the bound: no TLS, no allocation beyond the socket we already have.
      boost::system::error_code ignored;
      socket.close(ignored);
    } else {
      boost::system::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      auto s = std::make_shared<session>(std::move(socket), tls_, role::hub, session_cfg_);
      sessions_[s.get()] = s;
      count_ = sessions_.size();
      s->on_finished_ = [self = shared_from_this(), raw = s.get()] {
        asio::post(self->strand_, [self, raw] { self->on_session_finished(raw); });
      };
      asio::dispatch(s->strand(), [self = shared_from_this(), s] {
        if (self->on_session_) self->on_session_(s);
        s->start();
      });
    }
  }
  // Transient accept errors (e.g. out of descriptors) must not stop the server: keep accepting.
  do_accept();
}

void server::on_session_finished(session* s) {
  sessions_.erase(s);
  count_ = sessions_.size();
  check_drained();
}

void server::stop(std::function<void()> on_drained) {
  asio::dispatch(strand_, [self = shared_from_this(), on_drained = std::move(on_drained)]() mutable {
    if (self->stopping_) return;
    self->stopping_ = true;
    self->on_drained_ = std::move(on_drained);
    boost::system::error_code ignored;
    self->acceptor_.close(ignored);
    for (auto& [raw, weak] : self->sessions_) {
      if (auto s = weak.lock()) s->close();
    }
    self->check_drained();
  });
}

void server::set_tls(const crypto::tls_context& tls) {
  asio::dispatch(strand_, [self = shared_from_this(), ctx = detail::adopt_tls(tls)]() mutable { self->tls_ = std::move(ctx); });
}

void server::check_drained() {
  if (!stopping_ || !sessions_.empty() || !on_drained_) return;
  auto done = std::move(on_drained_);
  on_drained_ = nullptr;
  done();
}

}  // namespace tessera::net
