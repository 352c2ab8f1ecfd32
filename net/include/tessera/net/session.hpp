// tessera/net/session.hpp — one mutually authenticated TLS 1.3 connection speaking the frame protocol.
//
// A session is used by both sides (role::hub accepts, role::agent dials). It owns its socket, runs every
// handler on its own strand, and enforces on every operation a deadline from session_config:
//   handshake     handshake_timeout from start()
//   HELLO         the hub's side: the same handshake_timeout from start(), for the TLS handshake and HELLO
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
// The lifecycle is one state (session_lifecycle.hpp has the whole diagram and its tests):
//
//   handshaking ─TLS─▶ greeting ─HELLO─▶ open ─close()/refuse()/error─▶ flushing ─▶ shutting_down ─▶ closed
//        │       (hub only: the agent goes straight to open)      (queued frames,  (close_notify)    ▲
//        │                                                         then REFUSE)                     │
//        └──────────── timeouts, TLS failure, resets: a hard close, from every state ───────────────┘
//
// The parts, each socket-free and tested alone: frame_reader.hpp (the only decoder; chunk data land in
// the transfer's memory), transfer_table.hpp (windows, ACKs, resume, take-over), write_queue.hpp,
// token_bucket.hpp (rate caps) and session_lifecycle.hpp (states, close steps, watchdog).
//
//   auto s = std::make_shared<net::session>(std::move(socket), ssl_ctx, net::role::agent, cfg);
//   s->on_ready([s] { s->send(net::msg::hello{.device_id = "pi-07"}); });
//   s->on_message([](const net::message& m) { ... });          // HELLO, WELCOME, ASSIGN, UPDATE, RESULT, REFUSE
//   s->on_blob_received([](const auto& in) { use(in->data()); });
//   s->on_closed([](const core::error& why) { ... });            // exactly once
//   s->start();
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "tessera/core/base/error.hpp"
#include "tessera/net/frame_reader.hpp"
#include "tessera/net/messages.hpp"
#include "tessera/net/session_config.hpp"
#include "tessera/net/session_lifecycle.hpp"
#include "tessera/net/token_bucket.hpp"
#include "tessera/net/transfer.hpp"
#include "tessera/net/transfer_table.hpp"
#include "tessera/net/write_queue.hpp"

namespace tessera::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket socket, std::shared_ptr<asio::ssl::context> tls, role r, const session_config& config);
  ~session();
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  // Handlers run on the session's strand (or the owner's executor: deliver_on). Set them before start().
  void on_ready(std::function<void()> f) { on_.ready = std::move(f); }
  void on_message(std::function<void(const message&)> f) { on_.message = std::move(f); }
  void on_blob_received(std::function<void(const std::shared_ptr<incoming_transfer>&)> f) {
    on_.blob_received = std::move(f);
  }
  void on_blob_sent(std::function<void(const std::shared_ptr<outgoing_transfer>&)> f) { on_.blob_sent = std::move(f); }
  void on_closed(std::function<void(const core::error&)> f) { on_.closed = std::move(f); }
  // The four handlers above run on `owner` (the hub's strand, where all its state lives) instead of
  // the session's strand, in the order the session saw their events, on_closed last. While the handler
  // of a message is waiting or running, the session reads no further frame: what it calls on the
  // session (expect_blob after an UPDATE) takes effect before the next frame, as when it ran here.
  // Set before start().
  void deliver_on(asio::any_io_executor owner) { owner_.executor = std::move(owner); }

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
  // Lets go of blob `id`, received or sent (its owner moved on, e.g. a superseded assignment): the
  // session keeps no reference to it once a CHUNK being read into it or written from it is done; its
  // further chunks are dropped, its unsent ones not sent.
  void forget_blob(std::uint64_t id);
  // Flushes queued frames, exchanges close_notify, closes; on_closed reports errc::stopped.
  void close();
  // Sends REFUSE{reason} and closes; on_closed reports `code`.
  // `wire_code` (optional) travels in the REFUSE beside the reason (core::error_name of the cause);
  // `lasting`: reconnecting will not cure it, and the peer waits its longest backoff (msg::refuse).
  void refuse(errc code, std::string reason, std::string wire_code = {}, bool lasting = false);
  // Whether the peer still answers: sends a PING and calls `done(true)` on the strand when its PONG (or
  // any other bytes: the PONG may queue behind a blob) comes back within `within`, `done(false)` when
  // nothing does or the session ends first. Probes that overlap share one PING. While reading waits for
  // the owner (deliver_on), the silence is this side's: the probe waits on, `within` again.
  void probe(std::chrono::milliseconds within, std::function<void(bool answered)> done);
  // Ends the session at once, as a broken link (no REFUSE, no close_notify: for a peer that stopped
  // answering). As after any end, once on_closed runs the session touches none of the transfers it
  // held, and they may go to a session on another thread.
  void abandon(errc code, std::string reason);
  // Whether the session has ended (its on_closed is under way or done); from any thread.
  [[nodiscard]] bool ended() const noexcept { return owner_.ended.load(std::memory_order_acquire); }

  // Hub role: the device id of the peer certificate (empty before on_ready).
  [[nodiscard]] const std::string& peer_device_id() const noexcept { return peer_.device_id; }
  // Hub role: the peer certificate's serial, lowercase hex (empty before on_ready).
  [[nodiscard]] const std::string& peer_serial() const noexcept { return peer_.serial; }
  // Whether the session is closing or closed; on its strand only (e.g. inside a handler).
  [[nodiscard]] bool stopped() const noexcept { return lifecycle_.stopped(); }
  // The peer's address and port as the socket saw them when the session began ("?" if unknown).
  [[nodiscard]] const std::string& peer_address() const noexcept { return peer_.address; }
  // Why the TLS handshake failed, as a short label for counting (certificate_revoked, unknown_ca,
  // certificate_expired, no_certificate, wrong_purpose, protocol_version, closed, tls_error); empty
  // when it did not fail.
  [[nodiscard]] const std::string& tls_failure() const noexcept { return peer_.tls_failure; }
  [[nodiscard]] std::uint64_t bytes_received() const noexcept { return bytes_rx_; }
  [[nodiscard]] std::uint64_t bytes_sent() const noexcept { return bytes_tx_; }
  [[nodiscard]] asio::strand<asio::any_io_executor> strand() const { return strand_; }

 private:
  friend class server;
  friend class client;
  using clock = std::chrono::steady_clock;

  void on_handshake(const boost::system::error_code& ec);
  void do_read();
  void on_read(const boost::system::error_code& ec, std::size_t n);
  // Each returns false when the session is failing and reading must stop.
  bool on_control();
  bool on_ack(const msg::ack& a);
  bool on_chunk_begin();
  bool on_chunk_end();
  void enqueue(std::vector<std::byte> frame);
  void pump_blobs();
  void do_write();
  void on_write(const boost::system::error_code& ec, std::size_t n);
  void do_tick();
  void on_tick();
  void fail(core::error why, close_mode mode);
  void continue_close();
  void finish();
  void end_probe(bool answered);
  void arm_probe(std::uint64_t seq);
  // Runs an owner's handler: here when there is no owner executor, else posted to it. hand_over() also
  // pauses reading until the handler has run (then resume_reading()); it returns false when it did.
  void to_owner(std::function<void()> f);
  bool hand_over(std::function<void()> f);
  void resume_reading();
  // A completion handler that runs `f` on the strand and keeps the session alive until then.
  template <class... Args>
  auto on_strand(void (session::*f)(Args...)) {
    return asio::bind_executor(strand_, [self = shared_from_this(), f](Args... args) { ((*self).*f)(args...); });
  }

  asio::strand<asio::any_io_executor> strand_;
  std::shared_ptr<asio::ssl::context> tls_;
  asio::ssl::stream<tcp::socket> stream_;
  asio::steady_timer watchdog_;
  role role_;
  session_config config_;

  // What the owner (on_ready() etc.) and the server or client that made the session are told.
  struct callbacks {
    std::function<void()> ready;
    std::function<void(const net::message&)> message;
    std::function<void(const std::shared_ptr<incoming_transfer>&)> blob_received;
    std::function<void(const std::shared_ptr<outgoing_transfer>&)> blob_sent;
    std::function<void(const core::error&)> closed;
    std::function<void()> finished;       // server/client bookkeeping, after closed
    std::function<void()> authenticated;  // server bookkeeping: the TLS handshake verified the peer
  };
  // One direction's rate cap (session_config::send_rate or receive_rate) and the timer that waits it out.
  struct rate_cap {
    explicit rate_cap(const asio::strand<asio::any_io_executor>& strand) : timer(strand) {}
    token_bucket bucket;
    asio::steady_timer timer;
    bool waiting = false;  // the timer is running (the send side stops writing meanwhile)
  };
  // Hub role: who the peer is, from its certificate; or why the handshake failed.
  struct peer_facts {
    std::string device_id;
    std::string serial;       // lowercase hex
    std::string tls_failure;  // a short label (see tls_failure())
    std::string address = "?";
  };
  // probe(): who waits for the PONG to the PING numbered `from_seq` (or a later one), until `timer`.
  struct probe_state {
    explicit probe_state(const asio::strand<asio::any_io_executor>& strand) : timer(strand) {}
    std::uint64_t from_seq = 0;
    std::chrono::milliseconds within{};
    std::vector<std::function<void(bool)>> waiting;
    asio::steady_timer timer;
  };

  // deliver_on(): where the owner's handlers run; whether reading waits for one; whether finish() ran.
  struct owner_link {
    asio::any_io_executor executor;
    bool busy = false;
    std::atomic<bool> ended{false};
  };

  callbacks on_;
  owner_link owner_;
  session_lifecycle lifecycle_;
  // Operations in flight (not lifecycle: each is one outstanding completion handler).
  bool read_pending_ = false;
  bool write_pending_ = false;
  peer_facts peer_;
  std::string refuse_code_;  // the code a refuse() sends in its REFUSE
  bool refuse_lasting_ = false;
  probe_state probe_;
  session_activity activity_;
  std::uint64_t bytes_rx_ = 0, bytes_tx_ = 0, ping_seq_ = 0;

  frame_reader reader_;
  transfer_table::chunk_route chunk_;  // where the data of the CHUNK being read go
  rate_cap send_cap_, receive_cap_;
  write_queue queue_;
  transfer_table transfers_;
};

}  // namespace tessera::net
