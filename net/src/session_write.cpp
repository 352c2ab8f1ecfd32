// The session's calls from its owner (send a message or a blob, expect or drop a blob, close, refuse)
// and its write side: the queue by priority and the write loop that drains it within the link's rate.
// session.cpp holds the handshake, the read side, the watchdog and the end.
#include <algorithm>
#include <utility>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>

#include "tessera/net/session.hpp"

namespace tessera::net {

void session::send(message m) {
  asio::dispatch(strand_, [self = shared_from_this(), m = std::move(m)] {
    if (self->lifecycle_.stopped()) return;
    self->enqueue(encode_message(m));
  });
}

void session::send_blob(std::shared_ptr<outgoing_transfer> t, std::uint64_t peer_offset) {
  asio::dispatch(strand_, [self = shared_from_this(), t = std::move(t), peer_offset] {
    if (self->lifecycle_.stopped()) return;
    switch (self->transfers_.attach(t, peer_offset)) {
      case transfer_table::attach_result::already_here: return;
      case transfer_table::attach_result::complete:
        if (self->on_.blob_sent) self->to_owner([h = self->on_.blob_sent, t] { h(t); });
        return;
      case transfer_table::attach_result::attached: self->pump_blobs(); return;
    }
  });
}

void session::expect_blob(std::shared_ptr<incoming_transfer> t) {
  asio::dispatch(strand_, [self = shared_from_this(), t = std::move(t)] {
    if (self->lifecycle_.stopped()) return;
    // Tell the sender where to resume; on a fresh transfer this is ACK 0 and harmless.
    self->enqueue(encode_message(self->transfers_.attach(t)));
  });
}

void session::discard_blob(std::uint64_t id) {
  asio::dispatch(strand_, [self = shared_from_this(), id] { self->transfers_.discard(id); });
}

void session::forget_blob(std::uint64_t id) {
  asio::dispatch(strand_, [self = shared_from_this(), id] {
    self->transfers_.forget(id);
    self->queue_.drop_chunks_of(id, self->write_pending_);
  });
}

void session::close() {
  asio::dispatch(strand_, [self = shared_from_this()] {
    self->fail(make_error(errc::stopped, "closed by this side"), close_mode::graceful);
  });
}

void session::refuse(errc code, std::string reason, std::string wire_code, bool lasting) {
  asio::dispatch(strand_, [self = shared_from_this(), code, reason = std::move(reason), wire = std::move(wire_code), lasting]() mutable {
    self->refuse_code_ = std::move(wire);
    self->refuse_lasting_ = lasting;
    self->fail(make_error(code, reason), close_mode::refuse);
  });
}

void session::abandon(errc code, std::string reason) {
  asio::dispatch(strand_, [self = shared_from_this(), code, reason = std::move(reason)]() mutable {
    self->fail(make_error(code, std::move(reason)), close_mode::hard);  // finish(): its transfers detached, nothing more read
  });
}

void session::probe(std::chrono::milliseconds within, std::function<void(bool)> done) {
  asio::dispatch(strand_, [self = shared_from_this(), within, done = std::move(done)]() mutable {
    if (self->lifecycle_.stopped() || !self->lifecycle_.heard_from_peer()) {
      done(false);
      return;
    }
    self->probe_.waiting.push_back(std::move(done));
    if (self->probe_.waiting.size() > 1) return;  // the PING already sent answers for this one too
    self->probe_.from_seq = ++self->ping_seq_;
    self->activity_.last_tx = clock::now();
    self->enqueue(encode_message(msg::ping{self->probe_.from_seq}));
    self->probe_.within = within;
    self->arm_probe(self->probe_.from_seq);
  });
}

void session::arm_probe(std::uint64_t seq) {
  probe_.timer.expires_after(probe_.within);
  probe_.timer.async_wait([self = shared_from_this(), seq](const boost::system::error_code& ec) {
    if (ec || self->probe_.from_seq != seq || self->probe_.waiting.empty()) return;  // answered, or a later probe's
    if (self->owner_.busy) self->arm_probe(seq);  // its answer may be unread behind our own pause
    else self->end_probe(false);
  });
}

void session::end_probe(bool answered) {
  if (probe_.waiting.empty()) return;
  probe_.timer.cancel();
  auto waiting = std::move(probe_.waiting);
  probe_.waiting.clear();
  for (auto& done : waiting) done(answered);
}

void session::enqueue(std::vector<std::byte> frame) {
  if (lifecycle_.closed()) return;
  if (!queue_.push_control(std::move(frame))) {
    // The peer is not reading what we send: refuse to buffer without bound.
    fail(make_error(errc::queue_full, std::to_string(queue_.control_frames()) + " control frames waiting"),
         close_mode::hard);
    return;
  }
  if (!write_pending_ && lifecycle_.may_write()) do_write();
}

void session::pump_blobs() {
  if (!lifecycle_.established()) return;
  transfers_.next_chunks([this](const std::shared_ptr<outgoing_transfer>& t, std::uint64_t offset,
                                std::span<const std::byte> data) { queue_.push_chunk(t, offset, data); });
  if (!write_pending_ && !queue_.empty()) do_write();
}

void session::do_write() {
  if (queue_.empty() || write_pending_ || send_cap_.waiting || !lifecycle_.may_write()) return;
  const std::span<const std::byte> bytes = queue_.pending();
  std::size_t n = bytes.size();
  if (send_cap_.bucket.limited()) {
    const std::size_t want = std::min(n, send_cap_.bucket.step_bytes());
    n = send_cap_.bucket.allow(want, clock::now());
    if (n == 0) {
      send_cap_.waiting = true;
      send_cap_.timer.expires_after(send_cap_.bucket.wait_for(want));
      send_cap_.timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        self->send_cap_.waiting = false;
        if (ec || self->lifecycle_.closed()) return;
        self->do_write();
        if (!self->write_pending_ && self->lifecycle_.closing()) self->continue_close();
      });
      return;
    }
    send_cap_.bucket.spend(n);
  }
  write_pending_ = true;
  activity_.last_tx_progress = clock::now();
  stream_.async_write_some(asio::buffer(bytes.data(), n), on_strand(&session::on_write));
}

void session::on_write(const boost::system::error_code& ec, std::size_t n) {
  write_pending_ = false;
  if (lifecycle_.closed()) {
    queue_.clear();
    return;
  }
  if (ec) {
    if (ec == asio::error::operation_aborted && lifecycle_.closing()) {
      lifecycle_.transport_failed();  // a write cut mid-record: no close_notify can follow
      continue_close();
      return;
    }
    fail(make_error(errc::connection_lost, "write: " + ec.message()), close_mode::hard);
    return;
  }
  activity_.last_tx = activity_.last_tx_progress = clock::now();
  bytes_tx_ += n;
  if (queue_.consume(n)) pump_blobs();
  if (!queue_.empty()) do_write();
  else if (lifecycle_.closing()) continue_close();
}

}  // namespace tessera::net
