#include "tessera/net/client.hpp"

#include <algorithm>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include "tessera/net/tls_adopt.hpp"

namespace tessera::net {

std::shared_ptr<client> client::create(asio::io_context& io, const crypto::tls_context& tls,
                                       const session_config& session_cfg, const client_config& cfg) {
  return std::make_shared<client>(io, tls, session_cfg, cfg);
}

client::client(asio::io_context& io, const crypto::tls_context& tls, const session_config& session_cfg,
               const client_config& cfg)
    : strand_(asio::make_strand(io.get_executor())),
      tls_(adopt_tls(tls)),
      session_cfg_(session_cfg),
      cfg_(cfg),
      resolver_(strand_, cfg.dns),
      socket_(strand_),
      timer_(strand_),
      rng_(cfg.seed != 0 ? cfg.seed : std::random_device{}()) {}

std::chrono::milliseconds client::backoff_delay(unsigned failures) {
  if (failures == 0) return std::chrono::milliseconds(0);
  // Doubling stops at 2^20 so the shift never overflows; the cap applies long before that.
  const unsigned shift = std::min(failures - 1, 20u);
  const auto base = std::min<std::chrono::milliseconds::rep>(cfg_.backoff_initial.count() << shift,
                                                             cfg_.backoff_max.count());
  const double cut = cfg_.jitter > 0 ? std::uniform_real_distribution<double>(0.0, cfg_.jitter)(rng_) : 0.0;
  return std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(static_cast<double>(base) * (1.0 - cut)));
}

void client::start() {
  asio::dispatch(strand_, [self = shared_from_this()] {
    self->stopped_ = false;
    self->do_connect();
  });
}

void client::stop() {
  asio::dispatch(strand_, [self = shared_from_this()] {
    self->stopped_ = true;
    boost::system::error_code ignored;
    self->timer_.cancel();
    self->resolver_.cancel();
    self->socket_.close(ignored);
    if (auto s = self->current_.lock()) s->close();
  });
}

void client::do_connect() {
  if (stopped_ || connecting_) return;
  connecting_ = true;
  socket_ = tcp::socket(strand_);
  // One deadline for resolve + connect; the session then has its own for the handshake.
  const auto deadline = std::chrono::steady_clock::now() + session_cfg_.handshake_timeout;
  resolver_.async_resolve(cfg_.host, cfg_.port, deadline,
                          [self = shared_from_this(), deadline](core::result<resolver::endpoints> found) {
                            self->on_resolved(std::move(found), deadline);
                          });
}

void client::on_resolved(core::result<resolver::endpoints> found, std::chrono::steady_clock::time_point deadline) {
  if (stopped_) {
    connecting_ = false;
    return;
  }
  if (!found) {
    connecting_ = false;
    schedule_retry(found.error());
    return;
  }
  timer_.expires_at(deadline);
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || !self->connecting_) return;
    boost::system::error_code ignored;
    self->socket_.close(ignored);
  });
  asio::async_connect(socket_, std::move(found).value(),
                      [self = shared_from_this()](const boost::system::error_code& ec, const tcp::endpoint&) {
                        self->on_connected(ec);
                      });
}

void client::on_connected(const boost::system::error_code& ec) {
  connecting_ = false;
  timer_.cancel();
  if (stopped_) return;
  if (ec) {
    schedule_retry(make_error(errc::connect_failed, cfg_.host + ":" + std::to_string(cfg_.port) + ": " + ec.message()));
    return;
  }
  boost::system::error_code ignored;
  socket_.set_option(tcp::no_delay(true), ignored);
  auto s = std::make_shared<session>(std::move(socket_), tls_, role::agent, session_cfg_);
  current_ = s;
  // Runs inside the session's finish(), on its strand, so its fields are read race-free here.
  s->on_.finished = [self = shared_from_this(), raw = s.get()] {
    const bool was_open = raw->lifecycle_.heard_from_peer();
    core::error why = raw->lifecycle_.reason();
    asio::post(self->strand_, [self, was_open, why = std::move(why)] {
      // A session that got a message from the hub proves the path works: start the backoff over. (A
      // finished TLS handshake does not: a revoked certificate is refused right after it.) A refusal
      // that reconnecting will not cure waits the longest backoff instead.
      if (why.code == errc::refused_lasting) self->failures_ = k_failures_at_most;
      else if (was_open) self->failures_ = 0;
      if (self->stopped_) return;
      self->schedule_retry(why);
    });
  };
  asio::dispatch(s->strand(), [self = shared_from_this(), s] {
    if (self->on_session_) self->on_session_(s);
    s->start();
  });
}

void client::schedule_retry(const core::error& why) {
  if (stopped_) return;
  failures_ = std::min(failures_ + 1, k_failures_at_most);
  const auto delay = backoff_delay(failures_);
  if (on_connect_failed_) on_connect_failed_(why, delay);
  timer_.expires_after(delay);
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->stopped_) return;
    self->do_connect();
  });
}

}  // namespace tessera::net
