#include "tessera/net/session.hpp"

#include <algorithm>
#include <utility>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>

#include "tessera/crypto/tls.hpp"

namespace tessera::net {
namespace {

// Protocol errors are the peer's fault and worth a REFUSE; transport errors leave nobody to tell.
core::error from_read_error(const boost::system::error_code& ec, const frame_reader& reader) {
  const bool eof = ec == asio::error::eof;
  const bool truncated = ec == asio::ssl::error::stream_truncated;
  if (eof || truncated) {
    if (reader.in_header()) return make_error(errc::truncated_header, "stream ended inside a frame header");
    if (!reader.at_boundary()) return make_error(errc::truncated_payload, "stream ended inside a frame payload");
    if (eof) return make_error(errc::closed_by_peer, "peer closed the connection");
  }
  return make_error(errc::connection_lost, "read: " + ec.message());
}

// A TLS handshake's failure as a short, bounded label (the hub counts them by reason): the peer
// certificate's verification result when there is one, a peer that hung up, else what OpenSSL's error says.
std::string tls_failure_label(const boost::system::error_code& ec, const crypto::tls_handshake_failure& why) {
  if (!why.verify_label.empty()) return std::string(why.verify_label);
  if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated || ec == asio::error::connection_reset) return "closed";
  if (!why.error_label.empty()) return std::string(why.error_label);
  return "tls_error";
}

// A transfer taken over by a newer session (errc::stopped) is no fault of this peer: no REFUSE.
close_mode mode_for_transfer_error(const core::error& e) {
  return e.code == errc::stopped ? close_mode::hard : close_mode::refuse;
}

}  // namespace

session::session(tcp::socket socket, std::shared_ptr<asio::ssl::context> tls, role r, const session_config& config)
    : strand_(asio::make_strand(socket.get_executor())),
      tls_(std::move(tls)),
      stream_(std::move(socket), *tls_),
      watchdog_(strand_),
      role_(r),
      config_(config.checked()),
      lifecycle_(r),
      probe_(strand_),
      reader_(config_.max_frame_payload),
      send_cap_(strand_),
      receive_cap_(strand_),
      queue_(config_.max_queued_control),
      transfers_(config_.chunk_bytes, config_.transfer_window_bytes) {
  boost::system::error_code ec;
  const auto at = stream_.lowest_layer().remote_endpoint(ec);
  if (!ec) peer_.address = (at.address().is_v6() ? "[" + at.address().to_string() + "]" : at.address().to_string()) + ":" + std::to_string(at.port());
}

session::~session() = default;

void session::start() {
  asio::dispatch(strand_, [self = shared_from_this()] {
    if (!self->lifecycle_.start()) return;
    const auto now = clock::now();
    self->activity_ = {now, now, now, now};
    self->send_cap_.bucket = token_bucket(self->config_.send_rate, now);
    self->receive_cap_.bucket = token_bucket(self->config_.receive_rate, now);
    self->do_tick();
    self->stream_.async_handshake(
        self->role_ == role::hub ? asio::ssl::stream_base::server : asio::ssl::stream_base::client,
        self->on_strand(&session::on_handshake));
  });
}

void session::on_handshake(const boost::system::error_code& ec) {
  if (lifecycle_.stopped()) {
    continue_close();
    return;
  }
  if (ec) {
    const bool from_openssl = ec.category() == asio::error::get_ssl_category();
    const auto why = crypto::describe_handshake_failure(stream_.native_handle(), from_openssl ? static_cast<unsigned long>(ec.value()) : 0);
    std::string detail = "TLS handshake with " + peer_.address + ": ";
    // The sentence, then OpenSSL's own words (what a search for the error finds).
    if (!why.explanation.empty()) detail += why.explanation + " (" + ec.message() + (why.verify_error.empty() ? "" : ": " + why.verify_error) + ")";
    else detail += ec.message() + (why.verify_error.empty() ? "" : " (peer certificate: " + why.verify_error + ")");
    peer_.tls_failure = tls_failure_label(ec, why);
    fail(make_error(errc::tls_handshake, detail), close_mode::hard);
    return;
  }
  if (role_ == role::hub) {
    auto peer = crypto::peer_device(stream_.native_handle());
    if (!peer) {
      fail(make_error(errc::no_device_id, peer.error().message), close_mode::refuse);
      return;
    }
    peer_.device_id = std::move(peer.value().id);
    peer_.serial = std::move(peer.value().serial);
    if (on_.authenticated) on_.authenticated();
  }
  lifecycle_.handshake_done();
  activity_.last_rx = activity_.last_tx = clock::now();
  if (!queue_.empty()) do_write();
  if (on_.ready) on_.ready();
  if (lifecycle_.stopped()) {
    continue_close();
    return;
  }
  do_read();
}

void session::do_read() {
  const std::span<std::byte> into = reader_.buffer();
  std::size_t n = into.size();
  if (receive_cap_.bucket.limited()) {
    // Read no more than the bucket holds, so pacing pauses stay short; wait when it is empty.
    const std::size_t want = std::min(n, receive_cap_.bucket.step_bytes());
    n = receive_cap_.bucket.allow(want, clock::now());
    if (n == 0) {
      receive_cap_.timer.expires_after(receive_cap_.bucket.wait_for(want));
      receive_cap_.timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        if (ec || self->lifecycle_.closed()) return;
        if (self->lifecycle_.closing()) {
          self->continue_close();
          return;
        }
        self->activity_.last_rx = clock::now();  // our own pause is no silence of the peer
        self->do_read();
      });
      return;
    }
  }
  read_pending_ = true;
  stream_.async_read_some(asio::buffer(into.data(), n), on_strand(&session::on_read));
}

void session::on_read(const boost::system::error_code& ec, std::size_t n) {
  read_pending_ = false;
  if (lifecycle_.closed()) return;
  if (lifecycle_.closing()) {  // reading was cancelled so close_notify can go out
    continue_close();
    return;
  }
  if (ec) {
    // Under TLS 1.3 a client's handshake is over before the hub has checked its certificate: a refusal
    // of it arrives as the first read's alert, and is told as the handshake's.
    if (ec.category() == asio::error::get_ssl_category() && !lifecycle_.heard_from_peer()) {
      const auto why = crypto::describe_handshake_failure(stream_.native_handle(), static_cast<unsigned long>(ec.value()));
      if (!why.explanation.empty()) {
        fail(make_error(errc::tls_handshake, "TLS handshake with " + peer_.address + ": " + why.explanation + " (" + ec.message() + ")"),
             close_mode::hard);
        return;
      }
    }
    fail(from_read_error(ec, reader_), ec == asio::error::eof ? close_mode::graceful : close_mode::hard);
    return;
  }
  activity_.last_rx = clock::now();
  bytes_rx_ += n;
  // Bytes from the peer after a probe began answer it too: its PONG may queue behind a blob's chunks.
  if (n > 0 && !probe_.waiting.empty()) end_probe(true);
  receive_cap_.bucket.spend(n);
  bool go_on = true;
  switch (reader_.commit(n)) {
    case frame_event::need_more: break;
    case frame_event::control: go_on = on_control(); break;
    case frame_event::chunk_begin: go_on = on_chunk_begin(); break;
    case frame_event::chunk_end: go_on = on_chunk_end(); break;
    case frame_event::failed:
      fail(reader_.error(), close_mode::refuse);
      go_on = false;
      break;
  }
  if (go_on && !lifecycle_.stopped()) do_read();
}

bool session::on_control() {
  auto parsed = parse_message(reader_.header().type, reader_.payload());
  auto admitted = parsed ? lifecycle_.admit(parsed.value(), peer_.device_id) : core::result<void>(parsed.error());
  if (!admitted) {
    fail(std::move(admitted).error(), close_mode::refuse);
    return false;
  }
  const message& m = parsed.value();
  if (const auto* p = std::get_if<msg::ping>(&m)) {
    enqueue(encode_message(msg::pong{p->seq}));
    return true;
  }
  if (const auto* p = std::get_if<msg::pong>(&m)) {  // its bytes already counted as progress
    if (!probe_.waiting.empty() && p->seq >= probe_.from_seq) end_probe(true);
    return true;
  }
  if (const auto* a = std::get_if<msg::ack>(&m)) return on_ack(*a);
  if (const auto* r = std::get_if<msg::refuse>(&m)) {
    if (on_.message) to_owner([h = on_.message, m] { h(m); });
    fail(make_error(r->lasting ? errc::refused_lasting : errc::refused, "peer refused: " + r->reason), close_mode::graceful);
    return false;
  }
  if (on_.message && !hand_over([h = on_.message, m] { h(m); })) return false;
  return !lifecycle_.stopped();
}

void session::to_owner(std::function<void()> f) {
  // The session lives until the handler has run: it may weigh what it was (its peer, its TLS failure).
  if (owner_.executor) asio::post(owner_.executor, [self = shared_from_this(), f = std::move(f)] { f(); });
  else f();
}

bool session::hand_over(std::function<void()> f) {
  if (!owner_.executor) {
    f();
    return true;
  }
  owner_.busy = true;
  asio::post(owner_.executor, [self = shared_from_this(), f = std::move(f)] {
    f();
    asio::post(self->strand_, [self] { self->resume_reading(); });
  });
  return false;
}

void session::resume_reading() {
  owner_.busy = false;
  if (lifecycle_.stopped()) return;  // the close went on without a read to wait for
  activity_.last_rx = clock::now();  // the owner's turn is no silence of the peer
  do_read();
}

bool session::on_ack(const msg::ack& a) {
  auto outcome = transfers_.on_ack(a);
  if (!outcome) {
    fail(std::move(outcome).error(), close_mode::refuse);
    return false;
  }
  if (!outcome.value().moved) return true;
  if (const auto& done = outcome.value().completed) {
    if (on_.blob_sent) to_owner([h = on_.blob_sent, done] { h(done); });
    if (lifecycle_.stopped()) return false;
  }
  pump_blobs();
  return true;
}

bool session::on_chunk_begin() {
  auto route = transfers_.route_chunk(reader_.chunk(), reader_.chunk_data_bytes());
  if (!route) {
    fail(route.error(), mode_for_transfer_error(route.error()));
    return false;
  }
  chunk_ = std::move(route).value();
  if (chunk_.transfer) reader_.accept_chunk(chunk_.skip, chunk_.dest);
  else reader_.discard_chunk();  // a refused blob's chunk: read and dropped whole, never ACKed
  return true;
}

bool session::on_chunk_end() {
  const auto route = std::exchange(chunk_, {});
  if (!route.transfer) return true;
  auto done = transfers_.chunk_done(route);
  if (!done) {
    fail(done.error(), mode_for_transfer_error(done.error()));
    return false;
  }
  if (done.value().forgotten) return true;
  enqueue(encode_message(done.value().ack));
  if (done.value().completed && on_.blob_received) to_owner([h = on_.blob_received, t = route.transfer] { h(t); });
  return !lifecycle_.stopped();
}

void session::do_tick() {
  watchdog_.expires_after(watchdog_period(config_));
  watchdog_.async_wait([self = shared_from_this()](const boost::system::error_code&) { self->on_tick(); });
}

void session::on_tick() {
  if (lifecycle_.closed()) return;
  const auto now = clock::now();
  if (owner_.busy) activity_.last_rx = now;  // reading waits for the owner, not for the peer
  switch (const auto verdict = lifecycle_.check(config_, activity_, write_pending_, queue_.empty(), now)) {
    case watchdog_verdict::ok: break;
    case watchdog_verdict::ping:
      activity_.last_tx = now;
      enqueue(encode_message(msg::ping{++ping_seq_}));
      break;
    case watchdog_verdict::shutdown_timeout: finish(); return;
    default: fail(deadline_error(verdict, config_), close_mode::hard); return;
  }
  if (!lifecycle_.closed()) do_tick();
}

void session::fail(core::error why, close_mode mode) {
  switch (lifecycle_.close(std::move(why), mode, clock::now())) {
    case close_action::none: return;
    case close_action::finish: finish(); return;
    case close_action::flush: break;
  }
  // Nothing more goes out but what is queued: unsent chunks are dropped (a resume sends them again;
  // the one being written stays, its bytes are referenced by the pending write) and, if the peer
  // misbehaved, a REFUSE says why.
  queue_.drop_unsent_chunks(write_pending_);
  if (mode == close_mode::refuse)
    queue_.push_final(encode_message(msg::refuse{lifecycle_.reason().message.substr(0, max_reason_chars), refuse_code_, refuse_lasting_}));
  continue_close();
}

void session::continue_close() {
  boost::system::error_code ignored;
  switch (lifecycle_.next_close_step(write_pending_, read_pending_, queue_.empty())) {
    case close_step::wait: return;
    case close_step::write: do_write(); return;
    case close_step::cancel_io: stream_.lowest_layer().cancel(ignored); return;
    case close_step::finish: finish(); return;
    case close_step::shutdown:
      stream_.async_shutdown(asio::bind_executor(
          strand_, [self = shared_from_this()](const boost::system::error_code&) { self->finish(); }));
      return;
  }
}

void session::finish() {
  if (lifecycle_.closed()) return;
  lifecycle_.finish();
  boost::system::error_code ignored;
  watchdog_.cancel();
  send_cap_.timer.cancel();
  receive_cap_.timer.cancel();
  stream_.lowest_layer().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.lowest_layer().close(ignored);
  // Detach the transfers: the next session resumes them from the last acknowledged offset.
  transfers_.detach_all();
  chunk_ = {};
  // A pending write may still reference the front frame's bytes until its (aborted) completion runs.
  if (!write_pending_) queue_.clear();
  end_probe(false);
  auto closed = std::move(on_.closed);
  auto finished = std::move(on_.finished);
  // Handlers often capture the session itself: drop them so the session can be freed.
  on_.ready = nullptr;
  on_.message = nullptr;
  on_.blob_received = nullptr;
  on_.blob_sent = nullptr;
  owner_.ended.store(true, std::memory_order_release);
  if (closed) to_owner([closed = std::move(closed), why = lifecycle_.reason()] { closed(why); });
  if (finished) finished();
}

}  // namespace tessera::net
