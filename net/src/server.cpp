#include "tessera/net/server.hpp"

#include <array>
#include <optional>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include "tessera/net/tls_adopt.hpp"

namespace tessera::net {
namespace {

// Where a connection stands before its handshake: its first TLS record (a ClientHello: type 22, version
// 3.x, a length within a record's) has arrived whole, not yet, or it is not TLS or is gone.
enum class first_record { whole, partial, refused };

first_record first_record_of(tcp::socket& socket) {
  boost::system::error_code ec;
  std::array<std::uint8_t, 5> header{};
  socket.non_blocking(true, ec);
  const std::size_t n = ec ? 0 : socket.receive(asio::buffer(header), tcp::socket::message_peek, ec);
  boost::system::error_code ignored;
  const std::size_t queued = socket.available(ignored);
  socket.non_blocking(false, ignored);
  if (ec == asio::error::would_block) return first_record::partial;  // nothing yet
  if (ec || n == 0) return first_record::refused;                     // closed, reset
  if (header[0] != 22) return first_record::refused;                  // not a TLS handshake record
  if (n < header.size()) return first_record::partial;
  const std::size_t length = static_cast<std::size_t>(header[3]) << 8 | header[4];
  if (header[1] != 3 || length == 0 || length > (16u << 10) + 2048) return first_record::refused;
  return queued >= header.size() + length ? first_record::whole : first_record::partial;
}

}  // namespace

std::shared_ptr<server> server::create(asio::io_context& io, const crypto::tls_context& tls,
                                       const session_config& session_cfg, const server_config& cfg) {
  return std::make_shared<server>(io, tls, session_cfg, cfg);
}

server::server(asio::io_context& io, const crypto::tls_context& tls, const session_config& session_cfg,
               const server_config& cfg)
    : io_(io),
      strand_(asio::make_strand(io.get_executor())),
      tls_(adopt_tls(tls)),
      acceptor_(strand_),
      retry_timer_(strand_),
      session_cfg_(session_cfg),
      cfg_(cfg),
      silent_timer_(strand_) {}

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
  if (ec) {
    // Out of descriptors (EMFILE, ENFILE) or another transient error: wait a little before accepting
    // again instead of spinning on the same error.
    retry_timer_.expires_after(std::chrono::milliseconds(100));
    retry_timer_.async_wait(asio::bind_executor(strand_, [self = shared_from_this()](const boost::system::error_code& e) {
      if (!e) self->do_accept();
    }));
    return;
  }
  boost::system::error_code ignored;
  const auto remote = socket.remote_endpoint(ignored);
  if (authenticated_ >= cfg_.max_sessions || ignored) {
    // Full (or the peer already gone): no TLS, no allocation beyond the socket we already have.
    socket.close(ignored);
    return do_accept();
  }
  const std::string source = remote.address().to_string();
  socket.set_option(tcp::no_delay(true), ignored);
  // A connection whose first TLS record is here whole goes straight to its handshake; the others wait
  // apart until it is (a byte, a FIN or a record header alone do not move a connection on).
  switch (first_record_of(socket)) {
    case first_record::whole: start_handshake(std::move(socket), source); break;
    case first_record::partial: wait_silent(std::move(socket), source); break;
    case first_record::refused: socket.close(ignored); break;
  }
  do_accept();
}

void server::start_handshake(tcp::socket socket, const std::string& source) {
  // Room in the handshake pool: the address's oldest pending connection goes if the address is at its
  // bound, else the oldest of all if the pool is full.
  if (auto it = pending_by_source_.find(source); it != pending_by_source_.end() && it->second.size() >= cfg_.max_handshakes_per_source)
    evict(it->second.begin()->first);
  else if (pending_.size() >= cfg_.max_handshakes && !pending_.empty())
    evict(pending_.begin()->first);
  auto s = std::make_shared<session>(std::move(socket), tls_, role::hub, session_cfg_);
  const std::uint64_t seq = next_seq_++;
  sessions_[s.get()] = {.s = s, .source = source, .seq = seq, .authenticated = false, .id = {}};
  pending_[seq] = s.get();
  pending_by_source_[source][seq] = s.get();
  update_counts();
  s->on_.finished = [self = shared_from_this(), raw = s.get()] {
    asio::post(self->strand_, [self, raw] { self->on_session_finished(raw); });
  };
  s->on_.authenticated = [self = shared_from_this(), raw = s.get()] {
    asio::post(self->strand_, [self, raw] { self->on_authenticated(raw); });
  };
  asio::dispatch(s->strand(), [self = shared_from_this(), s] {
    if (self->on_session_) self->on_session_(s);
    s->start();
  });
}

// ---- silent connections: a socket and a deadline each, until their first TLS record is here whole ---

void server::wait_silent(tcp::socket socket, const std::string& source) {
  // Room in the pool: the address's oldest silent connection goes if the address is at its bound, else
  // the oldest of all if the pool is full.
  std::optional<std::uint64_t> out;
  if (auto it = silent_.by_source.find(source); it != silent_.by_source.end() && it->second.size() >= cfg_.max_handshakes_per_source)
    out = *it->second.begin();
  else if (silent_.by_seq.size() >= cfg_.max_handshakes && !silent_.by_seq.empty())
    out = silent_.by_seq.begin()->first;
  if (out) {
    close_silent(*out);
    ++evicted_;
  }
  const std::uint64_t seq = next_seq_++;
  auto& c = silent_.by_seq[seq];
  c.socket = std::make_unique<tcp::socket>(std::move(socket));
  c.source = source;
  c.deadline = std::chrono::steady_clock::now() + session_cfg_.handshake_timeout;
  silent_.by_source[source].insert(seq);
  await_bytes(seq);
  if (silent_.by_seq.size() == 1) arm_silent_deadline();
  update_counts();
}

// Wakes when bytes arrive (edge-triggered: a record that came in part wakes it again with its rest).
void server::await_bytes(std::uint64_t seq) {
  silent_.by_seq.at(seq).socket->async_wait(
      tcp::socket::wait_read, asio::bind_executor(strand_, [self = shared_from_this(), seq](const boost::system::error_code& ec) {
        self->on_first_bytes(seq, ec);
      }));
}

void server::on_first_bytes(std::uint64_t seq, const boost::system::error_code& ec) {
  const auto it = silent_.by_seq.find(seq);
  if (it == silent_.by_seq.end()) return;  // closed already (pushed out, expired, stopping)
  const first_record state = ec || stopping_ ? first_record::refused : first_record_of(*it->second.socket);
  if (state == first_record::partial) return await_bytes(seq);  // its place and deadline stay
  auto socket = std::move(it->second.socket);
  const std::string source = it->second.source;
  close_silent(seq);  // out of the pool; the socket itself lives on, or closes as it goes
  if (state == first_record::whole) start_handshake(std::move(*socket), source);
}

// Forgets the silent connection `seq`, closing its socket if the pool still holds it.
void server::close_silent(std::uint64_t seq) {
  const auto it = silent_.by_seq.find(seq);
  if (it == silent_.by_seq.end()) return;
  if (auto by = silent_.by_source.find(it->second.source); by != silent_.by_source.end()) {
    by->second.erase(seq);
    if (by->second.empty()) silent_.by_source.erase(by);
  }
  boost::system::error_code ignored;
  if (it->second.socket) it->second.socket->close(ignored);
  silent_.by_seq.erase(it);
  update_counts();
}

// One timer for the pool: every silent connection waits handshake_timeout, so the oldest's deadline is
// the nearest.
void server::arm_silent_deadline() {
  if (silent_.by_seq.empty() || stopping_) return;
  silent_timer_.expires_at(silent_.by_seq.begin()->second.deadline);
  silent_timer_.async_wait(asio::bind_executor(strand_, [self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec) self->expire_silent();
  }));
}

void server::expire_silent() {
  const auto now = std::chrono::steady_clock::now();
  while (!silent_.by_seq.empty() && silent_.by_seq.begin()->second.deadline <= now) {
    close_silent(silent_.by_seq.begin()->first);
    ++silent_expired_;
  }
  arm_silent_deadline();
}

void server::drop_pending(session* s) {
  auto it = sessions_.find(s);
  if (it == sessions_.end()) return;
  pending_.erase(it->second.seq);
  if (auto by = pending_by_source_.find(it->second.source); by != pending_by_source_.end()) {
    by->second.erase(it->second.seq);
    if (by->second.empty()) pending_by_source_.erase(by);
  }
}

void server::evict(std::uint64_t seq) {
  const auto at = pending_.find(seq);
  if (at == pending_.end()) return;
  session* raw = at->second;
  drop_pending(raw);
  ++evicted_;
  if (auto s = sessions_[raw].s.lock()) {
    asio::dispatch(s->strand(), [s] { s->fail(make_error(errc::evicted, "pushed out of the handshake pool by newer connections"), close_mode::hard); });
  }
}

void server::on_authenticated(session* raw) {
  auto it = sessions_.find(raw);
  if (it == sessions_.end()) return;
  drop_pending(raw);
  auto s = it->second.s.lock();
  if (!s) return;
  if (authenticated_ >= cfg_.max_sessions) {
    s->refuse(errc::server_full, "the hub holds its max_sessions sessions", "server_full");
    update_counts();
    return;
  }
  it->second.authenticated = true;
  it->second.id = s->peer_device_id();
  ++authenticated_;
  // Two sessions of one device are the owner's to settle at the newer's HELLO: a link that broke
  // unnoticed gives way, a second agent with the same identity is turned away (hub_doors.cpp). Beyond
  // three (one that gave way and is still closing, the one the hub holds, a newcomer it probes for) the
  // newest but one goes, so one certificate never holds more than three sessions' buffers and the
  // session the hub holds is not pushed out by a newcomer.
  auto& same = by_identity_[it->second.id];
  if (same.size() >= 3) {
    session* middle = same.back();
    same.pop_back();
    if (auto m = sessions_.count(middle) ? sessions_[middle].s.lock() : nullptr)
      m->refuse(errc::replaced, "a newer connection of this device replaced this one", "replaced");
  }
  same.push_back(raw);
  update_counts();
}

void server::on_session_finished(session* s) {
  auto it = sessions_.find(s);
  if (it == sessions_.end()) return;
  drop_pending(s);
  if (it->second.authenticated) {
    --authenticated_;
    if (auto id = by_identity_.find(it->second.id); id != by_identity_.end()) {
      std::erase(id->second, s);
      if (id->second.empty()) by_identity_.erase(id);
    }
  }
  sessions_.erase(it);
  update_counts();
  check_drained();
}

void server::update_counts() {
  count_ = sessions_.size();
  authenticated_count_ = authenticated_;
  handshake_count_ = pending_.size();
  silent_count_ = silent_.by_seq.size();
}

void server::stop(std::function<void()> on_drained) {
  asio::dispatch(strand_, [self = shared_from_this(), on_drained = std::move(on_drained)]() mutable {
    if (self->stopping_) return;
    self->stopping_ = true;
    self->on_drained_ = std::move(on_drained);
    boost::system::error_code ignored;
    self->acceptor_.close(ignored);
    self->retry_timer_.cancel();
    self->silent_timer_.cancel();
    while (!self->silent_.by_seq.empty()) self->close_silent(self->silent_.by_seq.begin()->first);
    for (auto& [raw, e] : self->sessions_) {
      if (auto s = e.s.lock()) s->close();
    }
    self->check_drained();
  });
}

void server::set_tls(const crypto::tls_context& tls) {
  asio::dispatch(strand_, [self = shared_from_this(), ctx = adopt_tls(tls)]() mutable { self->tls_ = std::move(ctx); });
}

void server::check_drained() {
  if (!stopping_ || !sessions_.empty() || !on_drained_) return;
  auto done = std::move(on_drained_);
  on_drained_ = nullptr;
  done();
}

}  // namespace tessera::net
