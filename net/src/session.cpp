#include "tessera/net/session.hpp"

#include <algorithm>
#include <cstring>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "tessera/crypto/tls.hpp"

namespace tessera::net {
namespace {

// Protocol errors are the peer's fault and worth a REFUSE; transport errors leave nobody to tell.
core::error from_read_error(const boost::system::error_code& ec, bool mid_header, bool mid_payload) {
  const bool eof = ec == asio::error::eof;
  const bool truncated = ec == asio::ssl::error::stream_truncated;
  if (eof || truncated) {
    if (mid_header) return make_error(errc::truncated_header, "stream ended inside a frame header");
    if (mid_payload) return make_error(errc::truncated_payload, "stream ended inside a frame payload");
    if (eof) return make_error(errc::closed_by_peer, "peer closed the connection");
  }
  return make_error(errc::connection_lost, "read: " + ec.message());
}

std::chrono::milliseconds tick_period(const session_config& c) {
  auto p = std::min({c.idle_timeout, c.write_timeout, c.heartbeat_interval, c.handshake_timeout, c.shutdown_timeout}) / 4;
  return std::clamp(p, std::chrono::milliseconds(5), std::chrono::milliseconds(1000));
}

}  // namespace

outgoing_transfer::outgoing_transfer(std::uint64_t id, std::span<const std::byte> data)
    : id_(id), data_(data), sha256_(crypto::sha256_of(data)) {}

outgoing_transfer::outgoing_transfer(std::uint64_t id, std::span<const std::byte> data, const digest& sha256)
    : id_(id), data_(data), sha256_(sha256) {}

incoming_transfer::incoming_transfer(std::uint64_t id, std::span<std::byte> dest, const digest& expected)
    : id_(id), dest_(dest), expected_(expected) {}

session::session(tcp::socket socket, std::shared_ptr<asio::ssl::context> tls, role r, const session_config& config)
    : strand_(asio::make_strand(socket.get_executor())),
      tls_(std::move(tls)),
      stream_(std::move(socket), *tls_),
      watchdog_(strand_),
      role_(r),
      config_(config),
      send_timer_(strand_),
      receive_timer_(strand_) {
  // Chunks must fit the peer's frame limit together with their sub-header; a config that breaks this
  // is a programming error.
  config_.max_frame_payload = std::min(config_.max_frame_payload, hard_max_payload);
  TESSERA_ASSERT(config_.chunk_bytes >= 1 && config_.chunk_bytes + chunk_header_bytes <= config_.max_frame_payload);
  TESSERA_ASSERT(config_.transfer_window_bytes >= config_.chunk_bytes);
}

session::~session() = default;

void session::start() {
  asio::dispatch(strand_, [self = shared_from_this()] {
    if (self->started_) return;
    self->started_ = true;
    self->started_at_ = self->last_rx_ = self->last_tx_ = self->last_tx_progress_ = clock::now();
    self->send_bucket_ = token_bucket(self->config_.send_rate, self->started_at_);
    self->receive_bucket_ = token_bucket(self->config_.receive_rate, self->started_at_);
    self->do_tick();
    self->stream_.async_handshake(
        self->role_ == role::hub ? asio::ssl::stream_base::server : asio::ssl::stream_base::client,
        asio::bind_executor(self->strand_,
                            [self](const boost::system::error_code& ec) { self->on_handshake(ec); }));
  });
}

void session::on_handshake(const boost::system::error_code& ec) {
  if (closed_ || closing_) {
    continue_close();
    return;
  }
  if (ec) {
    std::string detail = "TLS handshake: " + ec.message();
    const long verify = SSL_get_verify_result(stream_.native_handle());
    if (verify != X509_V_OK) detail += std::string(" (peer certificate: ") + X509_verify_cert_error_string(verify) + ")";
    transport_broken_ = true;
    fail(make_error(errc::tls_handshake, detail), false, false);
    return;
  }
  if (role_ == role::hub) {
    // The device id is the certificate's, never what the peer claims later.
    const X509* cert = SSL_get0_peer_certificate(stream_.native_handle());
    core::result<std::string> id = make_error(errc::no_device_id, "no peer certificate");
    if (cert != nullptr) {
      const int n = i2d_X509(cert, nullptr);
      if (n > 0) {
        std::vector<std::uint8_t> der(static_cast<std::size_t>(n));
        unsigned char* p = der.data();
        if (i2d_X509(cert, &p) == n) id = crypto::device_id_from_der(der);
      }
    }
    if (!id) {
      fail(make_error(errc::no_device_id, id.error().message), true, true);
      return;
    }
    peer_id_ = id.value();
  }
  open_ = true;
  last_rx_ = last_tx_ = clock::now();
  if (!queue_.empty()) do_write();
  if (on_ready_) on_ready_();
  if (closing_) {
    continue_close();
    return;
  }
  rstate_ = read_state::header;
  target_ = header_buf_;
  filled_ = 0;
  do_read();
}

void session::do_read() {
  std::size_t want = target_.size() - filled_;
  if (receive_bucket_.limited()) {
    // Read no more than the bucket holds, so pacing pauses stay short; wait when it is empty.
    const auto now = clock::now();
    const std::size_t cap = receive_bucket_.step_bytes();
    want = receive_bucket_.allow(std::min(want, cap), now);
    if (want == 0) {
      receive_paused_ = true;
      receive_timer_.expires_after(receive_bucket_.wait_for(std::min(target_.size() - filled_, cap)));
      receive_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        self->receive_paused_ = false;
        if (ec || self->closed_) return;
        if (self->closing_) {
          self->continue_close();
          return;
        }
        self->last_rx_ = clock::now();  // our own pause is no silence of the peer
        self->do_read();
      });
      return;
    }
  }
  read_pending_ = true;
  stream_.async_read_some(asio::buffer(target_.data() + filled_, want),
                          asio::bind_executor(strand_, [self = shared_from_this()](const boost::system::error_code& ec,
                                                                                  std::size_t n) {
                            self->on_read(ec, n);
                          }));
}

void session::on_read(const boost::system::error_code& ec, std::size_t n) {
  read_pending_ = false;
  if (closed_) return;
  if (closing_) {  // reading was cancelled so close_notify can go out
    continue_close();
    return;
  }
  if (ec) {
    const bool mid_header = rstate_ == read_state::header && filled_ > 0;
    const bool mid_payload = rstate_ != read_state::header;
    if (ec != asio::error::eof) transport_broken_ = true;
    const bool orderly = ec == asio::error::eof;
    fail(from_read_error(ec, mid_header, mid_payload), orderly, false);
    return;
  }
  last_rx_ = clock::now();
  bytes_rx_ += n;
  receive_bucket_.spend(n);
  filled_ += n;
  if (filled_ < target_.size()) {
    do_read();
    return;
  }
  if (on_frame_part() && !closing_ && !closed_) do_read();
}

// One target region is complete: decide what the next one is.
bool session::on_frame_part() {
  switch (rstate_) {
    case read_state::header: {
      auto h = decode_header(header_buf_, config_.max_frame_payload);
      if (!h) {
        fail(std::move(h).error(), true, true);
        return false;
      }
      header_ = h.value();
      filled_ = 0;
      if (header_.type == frame_type::chunk) {
        rstate_ = read_state::chunk_header;
        target_ = chunk_header_buf_;
        return true;
      }
      // Sized only now, after the header passed the limit check; capacity is reused between frames.
      payload_.resize(header_.payload_bytes);
      rstate_ = read_state::payload;
      target_ = payload_;
      if (!target_.empty()) return true;
      [[fallthrough]];
    }
    case read_state::payload: {
      auto m = parse_message(header_.type, payload_);
      rstate_ = read_state::header;
      target_ = header_buf_;
      filled_ = 0;
      if (!m) {
        fail(std::move(m).error(), true, true);
        return false;
      }
      return handle_message(std::move(m).value());
    }
    case read_state::chunk_header:
      return begin_chunk();
    case read_state::chunk_skip: {
      if (!chunk_in_) {  // a discarded transfer's chunk: read and dropped whole
        rstate_ = read_state::header;
        target_ = header_buf_;
        filled_ = 0;
        return true;
      }
      filled_ = 0;
      rstate_ = read_state::chunk_data;
      const std::uint64_t start = chunk_.offset + chunk_skip_;
      const std::uint64_t n = header_.payload_bytes - chunk_header_bytes - chunk_skip_;
      target_ = chunk_in_->dest_.subspan(static_cast<std::size_t>(start), static_cast<std::size_t>(n));
      if (!target_.empty()) return true;
      return end_chunk();
    }
    case read_state::chunk_data:
      return end_chunk();
  }
  return false;
}

bool session::begin_chunk() {
  auto c = decode_chunk_header(chunk_header_buf_, header_.payload_bytes);
  if (!c) {
    fail(std::move(c).error(), true, true);
    return false;
  }
  chunk_ = c.value();
  auto it = incoming_.find(chunk_.transfer);
  if (it == incoming_.end() && std::find(discarded_.begin(), discarded_.end(), chunk_.transfer) != discarded_.end()) {
    // The caller refused this blob (its announcement was rejected): drop the bytes, ACK nothing, so
    // the sender stops after one window and reads the verdict.
    chunk_in_.reset();
    filled_ = 0;
    rstate_ = read_state::chunk_skip;
    payload_.resize(header_.payload_bytes - chunk_header_bytes);
    target_ = payload_;
    return true;
  }
  if (it == incoming_.end()) {
    fail(make_error(errc::unknown_transfer, "CHUNK for transfer " + std::to_string(chunk_.transfer) +
                                                " that was not announced"),
         true, true);
    return false;
  }
  chunk_in_ = it->second;
  if (chunk_in_->owner_ != this) {
    chunk_in_.reset();
    fail(make_error(errc::stopped, "transfer " + std::to_string(chunk_.transfer) + " resumed on a newer connection"),
         false, false);
    return false;
  }
  const std::uint64_t n = header_.payload_bytes - chunk_header_bytes;
  const std::uint64_t end = chunk_.offset + n;  // no overflow: decode_chunk_header checked it
  if (end > chunk_in_->size()) {
    fail(make_error(errc::chunk_out_of_range, "CHUNK [" + std::to_string(chunk_.offset) + ", " + std::to_string(end) +
                                                  ") beyond the declared size " + std::to_string(chunk_in_->size())),
         true, true);
    return false;
  }
  if (chunk_.offset > chunk_in_->received_) {
    fail(make_error(errc::chunk_out_of_range, "CHUNK at " + std::to_string(chunk_.offset) + " leaves a gap after " +
                                                  std::to_string(chunk_in_->received_) + " received bytes"),
         true, true);
    return false;
  }
  // Bytes we already hold are read into scratch and dropped, so the hashed prefix never changes.
  chunk_skip_ = std::min(n, chunk_in_->received_ - chunk_.offset);
  filled_ = 0;
  rstate_ = read_state::chunk_skip;
  payload_.resize(static_cast<std::size_t>(chunk_skip_));
  target_ = payload_;
  if (!target_.empty()) return true;
  return on_frame_part();
}

bool session::end_chunk() {
  auto in = std::move(chunk_in_);
  if (in->owner_ != this) {  // taken over while its bytes were arriving here: leave it alone
    fail(make_error(errc::stopped, "transfer " + std::to_string(in->id()) + " resumed on a newer connection"), false,
         false);
    return false;
  }
  const std::uint64_t n = header_.payload_bytes - chunk_header_bytes;
  const std::uint64_t fresh = n - chunk_skip_;
  const std::uint64_t start = chunk_.offset + chunk_skip_;
  in->bytes_received_total_ += n;
  if (fresh > 0) {
    in->hasher_.update(std::span<const std::byte>(in->dest_.subspan(static_cast<std::size_t>(start),
                                                                   static_cast<std::size_t>(fresh))));
    in->received_ = start + fresh;
  }
  rstate_ = read_state::header;
  target_ = header_buf_;
  filled_ = 0;
  if (in->received_ == in->size() && !in->verified_) {
    if (in->hasher_.finish() != in->expected_) {
      // The bytes are wrong somewhere: the next attempt must start over.
      in->received_ = 0;
      fail(make_error(errc::digest_mismatch, "transfer " + std::to_string(in->id()) + ": SHA-256 of " +
                                                 std::to_string(in->size()) + " bytes differs from the declared one"),
           true, true);
      return false;
    }
    in->verified_ = true;
    incoming_.erase(in->id());
    enqueue(encode_message(msg::ack{in->id(), in->received_}));
    if (on_blob_received_) on_blob_received_(in);
    return !closing_;
  }
  enqueue(encode_message(msg::ack{in->id(), in->received_}));
  return !closing_;
}

namespace {
// Which control messages each side may receive (DESIGN.md §3); anything else is a protocol error.
bool allowed_for(role r, frame_type t) noexcept {
  switch (t) {
    case frame_type::ack:
    case frame_type::ping:
    case frame_type::pong:
    case frame_type::refuse: return true;
    case frame_type::hello:
    case frame_type::update: return r == role::hub;
    case frame_type::welcome:
    case frame_type::assign:
    case frame_type::result: return r == role::agent;
    case frame_type::chunk: return false;
  }
  return false;
}
}  // namespace

bool session::handle_message(message m) {
  if (!allowed_for(role_, type_of(m)) || (got_hello_ && std::holds_alternative<msg::hello>(m))) {
    fail(make_error(errc::unexpected_message, std::string(to_string(type_of(m))) + " is not expected by the " +
                                                  (role_ == role::hub ? "hub" : "agent")),
         true, true);
    return false;
  }
  if (role_ == role::hub && !got_hello_) {
    const auto* h = std::get_if<msg::hello>(&m);
    if (h == nullptr) {
      fail(make_error(errc::unexpected_message, std::string(to_string(type_of(m))) + " before HELLO"), true, true);
      return false;
    }
    if (h->device_id != peer_id_) {
      fail(make_error(errc::identity_mismatch, "HELLO claims device '" + h->device_id + "' but the certificate is '" +
                                                   peer_id_ + "'"),
           true, true);
      return false;
    }
    got_hello_ = true;
  }
  if (const auto* p = std::get_if<msg::ping>(&m)) {
    enqueue(encode_message(msg::pong{p->seq}));
    return true;
  }
  if (std::holds_alternative<msg::pong>(m)) return true;  // its bytes already counted as progress
  if (const auto* a = std::get_if<msg::ack>(&m)) return handle_ack(*a);
  if (const auto* r = std::get_if<msg::refuse>(&m)) {
    if (on_message_) on_message_(m);
    fail(make_error(errc::refused, "peer refused: " + r->reason), true, false);
    return false;
  }
  if (on_message_) on_message_(m);
  return !closing_ && !closed_;
}

bool session::handle_ack(const msg::ack& a) {
  auto it = outgoing_.find(a.transfer);
  if (it == outgoing_.end()) {
    // Either late (the transfer completed) or early: a receiver announces what it holds when it
    // re-registers a transfer after a reconnect, possibly before we call send_blob. Remember the
    // latter, boundedly, so the resume starts there.
    if (peer_acks_.size() < k_max_peer_acks || peer_acks_.count(a.transfer) != 0)
      peer_acks_[a.transfer] = std::max(peer_acks_[a.transfer], a.offset);
    return true;
  }
  auto t = it->second;
  if (t->owner_ != this) {
    outgoing_.erase(it);
    return true;
  }
  if (a.offset > t->size()) {
    fail(make_error(errc::bad_field, "ACK: field 'offset': " + std::to_string(a.offset) + " beyond size " +
                                         std::to_string(t->size())),
         true, true);
    return false;
  }
  if (a.offset > t->acked_) t->acked_ = a.offset;
  // The receiver may hold more than we knew (ACKs lost with the previous connection): skip ahead.
  if (t->acked_ > t->next_) t->next_ = t->acked_;
  if (t->complete()) {
    outgoing_.erase(it);
    if (on_blob_sent_) on_blob_sent_(t);
    if (closing_ || closed_) return false;
  }
  pump_blobs();
  return true;
}

void session::send(message m) {
  asio::dispatch(strand_, [self = shared_from_this(), m = std::move(m)] {
    if (self->closing_ || self->closed_) return;
    self->enqueue(encode_message(m));
  });
}

void session::send_blob(std::shared_ptr<outgoing_transfer> t, std::uint64_t peer_offset) {
  asio::dispatch(strand_, [self = shared_from_this(), t = std::move(t), peer_offset] {
    if (self->closing_ || self->closed_) return;
    if (t->owner_ == self.get()) return;  // already going out here; restarting would resend the window
    // What the receiver says it holds (HELLO's resume state) counts like an ACK. Over-claiming only
    // hurts the receiver, whose digest check then fails.
    if (peer_offset <= t->size()) t->acked_ = std::max(t->acked_, peer_offset);
    if (auto it = self->peer_acks_.find(t->id()); it != self->peer_acks_.end()) {
      if (it->second <= t->size()) t->acked_ = std::max(t->acked_, it->second);
      self->peer_acks_.erase(it);
    }
    t->next_ = t->acked_;  // resume from what the receiver confirmed
    t->owner_ = self.get();
    if (t->complete()) {
      if (self->on_blob_sent_) self->on_blob_sent_(t);
      return;
    }
    self->outgoing_[t->id()] = t;
    self->pump_blobs();
  });
}

void session::expect_blob(std::shared_ptr<incoming_transfer> t) {
  asio::dispatch(strand_, [self = shared_from_this(), t = std::move(t)] {
    if (self->closing_ || self->closed_) return;
    t->owner_ = self.get();
    self->incoming_[t->id()] = t;
    // Tell the sender where to resume; on a fresh transfer this is ACK 0 and harmless.
    self->enqueue(encode_message(msg::ack{t->id(), t->received_}));
  });
}

void session::discard_blob(std::uint64_t id) {
  asio::dispatch(strand_, [self = shared_from_this(), id] {
    if (std::find(self->discarded_.begin(), self->discarded_.end(), id) != self->discarded_.end()) return;
    if (self->discarded_.size() >= k_max_discarded) self->discarded_.pop_front();
    self->discarded_.push_back(id);
  });
}

void session::close() {
  asio::dispatch(strand_, [self = shared_from_this()] {
    self->fail(make_error(errc::stopped, "closed by this side"), true, false);
  });
}

void session::refuse(errc code, std::string reason) {
  asio::dispatch(strand_, [self = shared_from_this(), code, reason = std::move(reason)] {
    self->fail(make_error(code, reason), true, true);
  });
}

void session::enqueue(std::vector<std::byte> frame) {
  if (closed_) return;
  if (queued_control_ >= config_.max_queued_control) {
    // The peer is not reading what we send: refuse to buffer without bound.
    fail(make_error(errc::queue_full, std::to_string(queued_control_) + " control frames waiting"), false, false);
    return;
  }
  ++queued_control_;
  queue_.push_back({std::move(frame), {}, nullptr});
  if (!write_pending_ && open_) do_write();
}

void session::pump_blobs() {
  if (closing_ || closed_ || !open_) return;
  std::erase_if(outgoing_, [this](const auto& kv) { return kv.second->owner_ != this; });
  for (auto& [id, t] : outgoing_) {
    while (t->next_ < t->size() && t->next_ - t->acked_ < config_.transfer_window_bytes) {
      const std::uint64_t n = std::min<std::uint64_t>(config_.chunk_bytes, t->size() - t->next_);
      out_frame f;
      f.head.resize(header_bytes + chunk_header_bytes);
      encode_header({frame_type::chunk, 0, static_cast<std::uint32_t>(chunk_header_bytes + n)},
                    std::span<std::byte, header_bytes>(f.head.data(), header_bytes));
      encode_chunk_header({t->id(), t->next_},
                          std::span<std::byte, chunk_header_bytes>(f.head.data() + header_bytes, chunk_header_bytes));
      f.body = t->data_.subspan(static_cast<std::size_t>(t->next_), static_cast<std::size_t>(n));
      f.transfer = t;
      f.offset = t->next_;
      queue_.push_back(std::move(f));
      t->next_ += n;
    }
  }
  if (!write_pending_ && !queue_.empty()) do_write();
}

void session::do_write() {
  if (queue_.empty() || write_pending_ || send_paused_ || closed_ || transport_broken_) return;
  const out_frame& f = queue_.front();
  // Asio's SSL stream writes one buffer per call; progress is tracked per call for the write deadline.
  asio::const_buffer buf;
  if (written_ < f.head.size()) buf = asio::buffer(f.head.data() + written_, f.head.size() - written_);
  else buf = asio::buffer(f.body.data() + (written_ - f.head.size()), f.body.size() - (written_ - f.head.size()));
  if (send_bucket_.limited()) {
    const std::size_t cap = send_bucket_.step_bytes();
    const std::size_t allowed = send_bucket_.allow(std::min(buf.size(), cap), clock::now());
    if (allowed == 0) {
      send_paused_ = true;
      send_timer_.expires_after(send_bucket_.wait_for(std::min(buf.size(), cap)));
      send_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        self->send_paused_ = false;
        if (ec || self->closed_) return;
        self->do_write();
        if (!self->write_pending_ && self->closing_) self->continue_close();
      });
      return;
    }
    buf = asio::buffer(buf.data(), allowed);
    send_bucket_.spend(allowed);
  }
  write_pending_ = true;
  last_tx_progress_ = clock::now();
  stream_.async_write_some(buf, asio::bind_executor(strand_, [self = shared_from_this()](
                                                                 const boost::system::error_code& ec, std::size_t n) {
                             self->on_write(ec, n);
                           }));
}

void session::on_write(const boost::system::error_code& ec, std::size_t n) {
  write_pending_ = false;
  if (closed_) {
    queue_.clear();
    return;
  }
  if (ec) {
    transport_broken_ = true;
    if (ec == asio::error::operation_aborted && closing_) {
      continue_close();
      return;
    }
    fail(make_error(errc::connection_lost, "write: " + ec.message()), false, false);
    return;
  }
  last_tx_ = last_tx_progress_ = clock::now();
  bytes_tx_ += n;
  const out_frame& f = queue_.front();
  if (f.transfer && written_ + n > f.head.size()) {
    f.transfer->bytes_sent_total_ += written_ + n - std::max(written_, f.head.size());
    f.transfer->sent_high_ = std::max(f.transfer->sent_high_, f.offset + (written_ + n - f.head.size()));
  }
  written_ += n;
  if (written_ == f.head.size() + f.body.size()) {
    if (!f.transfer) --queued_control_;
    queue_.pop_front();
    written_ = 0;
    pump_blobs();
  }
  if (!queue_.empty()) do_write();
  else if (closing_) continue_close();
}

void session::do_tick() {
  tick_pending_ = true;
  watchdog_.expires_after(tick_period(config_));
  watchdog_.async_wait([self = shared_from_this()](const boost::system::error_code&) {
    self->tick_pending_ = false;
    self->on_tick();
  });
}

void session::on_tick() {
  if (closed_) return;
  const auto now = clock::now();
  if (closing_) {
    if (now - close_started_ >= config_.shutdown_timeout) {
      finish();  // the peer did not answer close_notify in time, or a flush stalled
      return;
    }
  } else if (!open_) {
    if (now - started_at_ >= config_.handshake_timeout) {
      transport_broken_ = true;
      fail(make_error(errc::handshake_timeout, "no TLS handshake within " +
                                                   std::to_string(config_.handshake_timeout.count()) + " ms"),
           false, false);
      return;
    }
  } else {
    if (now - last_rx_ >= config_.idle_timeout) {
      transport_broken_ = true;
      fail(make_error(errc::idle_timeout, "no byte received for " + std::to_string(config_.idle_timeout.count()) + " ms"),
           false, false);
      return;
    }
    if (write_pending_ && now - last_tx_progress_ >= config_.write_timeout) {
      transport_broken_ = true;
      fail(make_error(errc::write_timeout, "no byte written for " + std::to_string(config_.write_timeout.count()) + " ms"),
           false, false);
      return;
    }
    if (queue_.empty() && !write_pending_ && now - last_tx_ >= config_.heartbeat_interval) {
      last_tx_ = now;
      enqueue(encode_message(msg::ping{++ping_seq_}));
    }
  }
  if (!closed_) do_tick();
}

void session::fail(core::error why, bool graceful, bool send_refuse) {
  if (closed_) return;
  if (closing_) {
    // Already closing: a later hard failure only hurries it up.
    if (!graceful) finish();
    return;
  }
  closing_ = true;
  close_started_ = clock::now();
  close_reason_ = std::move(why);
  if (!graceful || !open_ || transport_broken_) {
    finish();
    return;
  }
  // Nothing more goes out but what is queued: unsent chunks are dropped (a resume sends them again;
  // the one being written stays, its bytes are referenced by the pending write) and, if the peer
  // misbehaved, a REFUSE says why.
  const bool front_busy = write_pending_ || written_ > 0;
  std::deque<out_frame> kept;
  for (std::size_t i = 0; i < queue_.size(); ++i) {
    if (queue_[i].transfer && !(i == 0 && front_busy)) continue;
    kept.push_back(std::move(queue_[i]));
  }
  queue_.swap(kept);
  if (send_refuse) {
    queue_.push_back({encode_message(msg::refuse{close_reason_.message.substr(0, max_reason_chars)}), {}, nullptr});
    ++queued_control_;
  }
  continue_close();
}

// Steps of a graceful close, re-entered from each completion until done:
// flush the queue → cancel a pending read → close_notify → close the socket.
void session::continue_close() {
  if (closed_) return;
  if (!closing_) return;
  if (transport_broken_) {
    if (!write_pending_ && !read_pending_) finish();
    else {
      boost::system::error_code ignored;
      stream_.lowest_layer().cancel(ignored);
    }
    return;
  }
  if (write_pending_) return;
  if (!queue_.empty()) {
    do_write();
    return;
  }
  if (read_pending_) {
    boost::system::error_code ignored;
    stream_.lowest_layer().cancel(ignored);
    return;
  }
  if (shutdown_started_) return;
  shutdown_started_ = true;
  stream_.async_shutdown(asio::bind_executor(
      strand_, [self = shared_from_this()](const boost::system::error_code&) { self->on_shutdown(); }));
}

void session::on_shutdown() { finish(); }

void session::finish() {
  if (closed_) return;
  closed_ = true;
  closing_ = true;
  boost::system::error_code ignored;
  watchdog_.cancel();
  send_timer_.cancel();
  receive_timer_.cancel();
  stream_.lowest_layer().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.lowest_layer().close(ignored);
  // Detach the transfers: the next session resumes them from the last acknowledged offset.
  for (auto& [id, t] : outgoing_) {
    if (t->owner_ != this) continue;
    if (t->sent_high_ > t->acked_) t->unacked_at_breaks_ += t->sent_high_ - t->acked_;
    t->next_ = t->sent_high_ = t->acked_;
    t->owner_ = nullptr;
  }
  for (auto& [id, t] : incoming_)
    if (t->owner_ == this) t->owner_ = nullptr;
  outgoing_.clear();
  incoming_.clear();
  chunk_in_.reset();
  // A pending write may still reference the front frame's bytes until its (aborted) completion runs.
  if (!write_pending_) queue_.clear();
  queued_control_ = 0;
  if (close_reason_.message.empty()) close_reason_ = make_error(errc::stopped, "closed");
  auto closed = std::move(on_closed_);
  auto finished = std::move(on_finished_);
  // Handlers often capture the session itself: drop them so the session can be freed.
  on_ready_ = nullptr;
  on_message_ = nullptr;
  on_blob_received_ = nullptr;
  on_blob_sent_ = nullptr;
  if (closed) closed(close_reason_);
  if (finished) finished();
}

}  // namespace tessera::net
