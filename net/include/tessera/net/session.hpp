// tessera/net/session.hpp — one mutually authenticated TLS 1.3 connection speaking the frame protocol.
//
// A session is used by both sides (role::hub accepts, role::agent dials). It owns its socket, runs every
// handler on its own strand, and enforces on every operation a deadline from session_config:
//   handshake     handshake_timeout from start()
//   read          idle_timeout without a single byte received (progress, not completion: a slow link
//                 that keeps moving is never cut; a silent peer is dropped)
//   write         write_timeout without a single byte written
//   shutdown      shutdown_timeout for the close_notify exchange, then the socket is closed
// Heartbeats: when nothing was sent for heartbeat_interval a PING goes out; PINGs are answered with a
// PONG. Either keeps the peer's idle deadline from firing during long local training.
// Bounds: frames ≤ max_frame_payload (checked from the header, before reading or allocating), at most
// max_queued_control frames waiting to be written, at most transfer_window_bytes unacknowledged per blob.
// Hub role: after the handshake the device id is taken from the peer certificate; the first frame must
// be a HELLO with that same id, otherwise the session sends REFUSE and closes (errc::identity_mismatch).
// Any malformed frame ends the session with its typed error (REFUSE with the reason, then close).
//
//   connecting ──handshake──▶ open ──close()/error──▶ closing (flush, REFUSE, close_notify) ──▶ closed
//        └────────── timeout / TLS failure ─────────────────────────────────────────────────▶ closed
//
//   auto s = std::make_shared<net::session>(std::move(socket), ssl_ctx, net::role::agent, cfg);
//   s->on_ready([s] { s->send(net::msg::hello{.device_id = "pi-07"}); });
//   s->on_message([](const net::message& m) { ... });          // HELLO, WELCOME, ASSIGN, UPDATE, RESULT, REFUSE
//   s->on_blob_received([](const auto& in) { use(in->data()); });
//   s->on_closed([](const core::error& why) { ... });            // exactly once
//   s->start();
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "tessera/core/error.hpp"
#include "tessera/net/frame.hpp"
#include "tessera/net/messages.hpp"
#include "tessera/net/token_bucket.hpp"
#include "tessera/net/transfer.hpp"

namespace tessera::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

enum class role { hub, agent };

struct session_config {
  std::chrono::milliseconds handshake_timeout{10'000};
  std::chrono::milliseconds idle_timeout{30'000};        // no byte received for this long: drop the peer
  std::chrono::milliseconds write_timeout{30'000};       // a pending write with no progress for this long
  std::chrono::milliseconds heartbeat_interval{10'000};  // keep well under the peer's idle_timeout
  std::chrono::milliseconds shutdown_timeout{2'000};
  std::uint32_t max_frame_payload = default_max_payload;  // what we accept; ≤ hard_max_payload
  std::uint32_t chunk_bytes = 256u << 10;                  // data bytes per CHUNK we send
  std::uint64_t transfer_window_bytes = 2u << 20;          // unacknowledged bytes per outgoing blob
  std::size_t max_queued_control = 256;                    // control frames waiting to be written
  // Rate caps for metered links, bytes per second of TLS payload (0: none). Sending and receiving are
  // paced by token buckets holding at most 50 ms of traffic (at least 4 KiB), so a cap holds over
  // any window longer than that; paused time does not count against the write deadline, and reads
  // are sized so a pause never approaches the idle deadline.
  std::uint64_t send_rate = 0;
  std::uint64_t receive_rate = 0;
};

class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket socket, std::shared_ptr<asio::ssl::context> tls, role r, const session_config& config);
  ~session();
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  // Handlers run on the session's strand. Set them before start().
  void on_ready(std::function<void()> f) { on_ready_ = std::move(f); }
  void on_message(std::function<void(const message&)> f) { on_message_ = std::move(f); }
  void on_blob_received(std::function<void(const std::shared_ptr<incoming_transfer>&)> f) {
    on_blob_received_ = std::move(f);
  }
  void on_blob_sent(std::function<void(const std::shared_ptr<outgoing_transfer>&)> f) { on_blob_sent_ = std::move(f); }
  void on_closed(std::function<void(const core::error&)> f) { on_closed_ = std::move(f); }

  void start();
  // All of these may be called from any thread; from a handler they take effect before it returns.
  void send(message m);
  // Starts or resumes sending a blob from max(last ACK, peer_offset); a no-op if already sending here.
  void send_blob(std::shared_ptr<outgoing_transfer> t, std::uint64_t peer_offset = 0);
  // Registers a blob this side will receive and tells the peer how much of it is already here (ACK).
  void expect_blob(std::shared_ptr<incoming_transfer> t);
  // Drops the chunks of a blob this side refused (its UPDATE or ASSIGN was rejected) instead of treating
  // them as a protocol error; the sender, receiving no ACK, stops after one window.
  void discard_blob(std::uint64_t id);
  // Flushes queued frames, exchanges close_notify, closes; on_closed reports errc::stopped.
  void close();
  // Sends REFUSE{reason} and closes; on_closed reports `code`.
  void refuse(errc code, std::string reason);

  // Hub role: the device id of the peer certificate (empty before on_ready).
  [[nodiscard]] const std::string& peer_device_id() const noexcept { return peer_id_; }
  [[nodiscard]] std::uint64_t bytes_received() const noexcept { return bytes_rx_; }
  [[nodiscard]] std::uint64_t bytes_sent() const noexcept { return bytes_tx_; }
  [[nodiscard]] asio::strand<asio::any_io_executor> strand() const { return strand_; }

 private:
  friend class server;
  friend class client;
  using clock = std::chrono::steady_clock;
  enum class read_state { header, payload, chunk_header, chunk_skip, chunk_data };
  struct out_frame {
    std::vector<std::byte> head;                    // a whole control frame, or a CHUNK's two headers
    std::span<const std::byte> body;                // CHUNK data, in the sender's blob
    std::shared_ptr<outgoing_transfer> transfer;    // keeps the blob's owner alive while queued
    std::uint64_t offset = 0;                       // CHUNK: where body starts in the blob
  };

  void on_handshake(const boost::system::error_code& ec);
  void do_read();
  void on_read(const boost::system::error_code& ec, std::size_t n);
  bool on_frame_part();  // false: the session is failing, stop reading
  bool handle_message(message m);
  bool handle_ack(const msg::ack& a);
  bool begin_chunk();
  bool end_chunk();
  void enqueue(std::vector<std::byte> frame);
  void pump_blobs();
  void do_write();
  void on_write(const boost::system::error_code& ec, std::size_t n);
  void do_tick();
  void on_tick();
  // Graceful: flush, REFUSE if a reason is given, close_notify. Hard: close the socket now.
  void fail(core::error why, bool graceful, bool send_refuse);
  void continue_close();
  void on_shutdown();
  void finish();

  asio::strand<asio::any_io_executor> strand_;
  std::shared_ptr<asio::ssl::context> tls_;
  asio::ssl::stream<tcp::socket> stream_;
  asio::steady_timer watchdog_;
  role role_;
  session_config config_;

  std::function<void()> on_ready_;
  std::function<void(const message&)> on_message_;
  std::function<void(const std::shared_ptr<incoming_transfer>&)> on_blob_received_;
  std::function<void(const std::shared_ptr<outgoing_transfer>&)> on_blob_sent_;
  std::function<void(const core::error&)> on_closed_;
  std::function<void()> on_finished_;  // server/client bookkeeping, after on_closed_

  // Lifecycle.
  bool started_ = false;
  bool open_ = false;        // handshake done
  bool closing_ = false;
  bool closed_ = false;
  bool got_hello_ = false;
  bool read_pending_ = false;
  bool write_pending_ = false;
  bool tick_pending_ = false;
  bool shutdown_started_ = false;
  bool transport_broken_ = false;  // no close_notify possible (I/O error or a write cut mid-record)
  core::error close_reason_;
  std::string peer_id_;
  clock::time_point started_at_{}, last_rx_{}, last_tx_{}, last_tx_progress_{}, close_started_{};
  std::uint64_t bytes_rx_ = 0, bytes_tx_ = 0, ping_seq_ = 0;

  // Reading: the current target region and how much of it is filled.
  read_state rstate_ = read_state::header;
  std::array<std::byte, header_bytes> header_buf_{};
  std::array<std::byte, chunk_header_bytes> chunk_header_buf_{};
  std::vector<std::byte> payload_;   // control payloads and discarded chunk bytes; ≤ max_frame_payload
  std::span<std::byte> target_;
  std::size_t filled_ = 0;
  frame_header header_{};
  chunk_header chunk_{};
  std::uint64_t chunk_skip_ = 0;     // leading bytes of this chunk already held (a resend)
  std::shared_ptr<incoming_transfer> chunk_in_;

  // Rate caps (session_config::send_rate, receive_rate).
  token_bucket send_bucket_, receive_bucket_;
  asio::steady_timer send_timer_, receive_timer_;
  bool send_paused_ = false, receive_paused_ = false;

  // Writing.
  std::deque<out_frame> queue_;
  std::size_t queued_control_ = 0;
  std::size_t written_ = 0;  // bytes of queue_.front() already written

  static constexpr std::size_t k_max_peer_acks = 64;  // ACKs for transfers not (yet) sent on this session
  std::map<std::uint64_t, std::uint64_t> peer_acks_;
  std::map<std::uint64_t, std::shared_ptr<outgoing_transfer>> outgoing_;
  std::map<std::uint64_t, std::shared_ptr<incoming_transfer>> incoming_;
  static constexpr std::size_t k_max_discarded = 16;
  std::deque<std::uint64_t> discarded_;
};

}  // namespace tessera::net
