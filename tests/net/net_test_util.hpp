// Helpers for the loopback TLS tests: a hub (server) that answers HELLO and accepts uploads, probing
// agents, a raw TLS peer that writes arbitrary bytes with delays, and a single-threaded event loop
// driven until a condition holds. Everything runs on one io_context in the test thread, so the tests
// are deterministic and need no locks.
#pragma once

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/write.hpp>
#include <openssl/ssl.h>

#include "../crypto/test_pki.hpp"
#include "frame_bytes.hpp"
#include "tessera/net/client.hpp"
#include "tessera/net/server.hpp"
#include "tessera/net/session.hpp"

namespace tessera::test {

namespace net = tessera::net;
namespace asio = boost::asio;
using namespace std::chrono_literals;
using tcp = asio::ip::tcp;

inline net::session_config fast_config() {
  net::session_config c;
  c.handshake_timeout = 1000ms;
  c.idle_timeout = 400ms;
  c.write_timeout = 1000ms;
  c.heartbeat_interval = 100ms;
  c.shutdown_timeout = 200ms;
  c.chunk_bytes = 64u << 10;
  c.transfer_window_bytes = 512u << 10;
  return c;
}

// Runs the loop until pred() holds or `limit` passes; returns pred().
template <class Pred>
bool run_until(asio::io_context& io, Pred pred, std::chrono::milliseconds limit = 2000ms) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    io.restart();
    io.run_for(2ms);
  }
  return true;
}

// Runs the loop for a fixed time (to show that something does *not* happen).
inline void run_for(asio::io_context& io, std::chrono::milliseconds d) {
  run_until(io, [] { return false; }, d);
}

inline std::shared_ptr<asio::ssl::context> asio_tls(const crypto::tls_context& tls) {
  return std::make_shared<asio::ssl::context>(static_cast<SSL_CTX*>(tls.native_handle_add_ref()));
}

inline net::digest digest_of(std::span<const std::byte> bytes) { return crypto::sha256_of(bytes); }

inline net::msg::hello hello_for(const std::string& id) {
  return {.device_id = id, .version = 1, .memory_budget_bytes = 1u << 20, .examples = 10, .codecs = {net::codec::f32},
          .resume = {}};
}

// The hub side: WELCOME on HELLO; an UPDATE announces an upload that is received into upload_buf and
// survives reconnects (resumed on the next HELLO from any session).
struct hub_fixture {
  asio::io_context io;
  std::shared_ptr<net::server> server;
  std::uint16_t port = 0;
  std::vector<core::error> closes;
  std::vector<std::string> hellos;
  std::vector<std::string> peer_ids;
  std::vector<std::byte> upload_buf;
  std::shared_ptr<net::incoming_transfer> upload;
  std::shared_ptr<net::outgoing_transfer> download;  // if set: ASSIGN + blob after every WELCOME
  int blobs_received = 0;
  int blobs_sent = 0;
  std::function<void(const std::shared_ptr<net::session>&)> extra;  // more per-session set-up

  explicit hub_fixture(const net::session_config& cfg = fast_config(), const net::server_config& server_cfg = {}) {
    server = net::server::create(io, test_pki::get().hub_tls(), cfg, server_cfg);
    server->on_session([this](const std::shared_ptr<net::session>& s) {
      std::weak_ptr<net::session> weak = s;
      s->on_message([this, weak](const net::message& m) {
        auto self = weak.lock();
        if (!self) return;
        if (const auto* h = std::get_if<net::msg::hello>(&m)) {
          hellos.push_back(h->device_id);
          peer_ids.push_back(self->peer_device_id());
          if (upload && !upload->complete()) self->expect_blob(upload);
          self->send(net::msg::welcome{100, net::default_max_payload, 64u << 10});
          if (download && !download->complete()) {
            // A device that already holds part of it says so in HELLO; the session resumes from the
            // larger of that and our own acknowledged offset.
            bool resuming = false;
            std::uint64_t held = 0;
            for (const auto& r : h->resume) {
              if (r.transfer != download->id()) continue;
              resuming = true;
              held = r.offset;
            }
            if (!resuming)
              self->send(net::msg::assign{.round = 1, .widths = {8, 4}, .hyper_json = R"({"lr":0.1})",
                                          .transfer = download->id(), .size = download->size(),
                                          .blob_codec = net::codec::f32, .sha256 = download->sha256()});
            self->send_blob(download, held);
          }
        } else if (const auto* u = std::get_if<net::msg::update>(&m)) {
          upload_buf.assign(static_cast<std::size_t>(u->size), std::byte{0});
          upload = std::make_shared<net::incoming_transfer>(u->transfer, upload_buf, u->sha256);
          self->expect_blob(upload);
        }
      });
      s->on_blob_received([this](const std::shared_ptr<net::incoming_transfer>&) { ++blobs_received; });
      s->on_blob_sent([this](const std::shared_ptr<net::outgoing_transfer>&) { ++blobs_sent; });
      s->on_closed([this](const core::error& e) { closes.push_back(e); });
      if (extra) extra(s);
    });
    port = server->listen("127.0.0.1", 0).value();
  }
  ~hub_fixture() {
    bool drained = false;
    server->stop([&] { drained = true; });  // a no-op if the test already stopped it
    run_until(io, [&] { return drained || server->session_count() == 0; }, 1000ms);
  }
};

// An agent-role session on a fresh connection; records what happens to it.
struct agent_probe {
  std::shared_ptr<net::session> s;
  bool ready = false;
  bool welcomed = false;
  std::optional<core::error> closed;
  std::vector<net::message> messages;
};

inline std::shared_ptr<agent_probe> start_agent(asio::io_context& io, std::shared_ptr<asio::ssl::context> tls,
                                                std::uint16_t port, std::optional<std::string> hello_id,
                                                const net::session_config& cfg = fast_config(),
                                                std::function<void(agent_probe&, const net::message&)> on_msg = {}) {
  auto p = std::make_shared<agent_probe>();
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  p->s = std::make_shared<net::session>(std::move(socket), std::move(tls), net::role::agent, cfg);
  std::weak_ptr<agent_probe> weak = p;
  p->s->on_ready([weak, hello_id] {
    auto probe = weak.lock();
    if (!probe) return;
    probe->ready = true;
    if (hello_id) probe->s->send(hello_for(*hello_id));
  });
  p->s->on_message([weak, on_msg](const net::message& m) {
    auto probe = weak.lock();
    if (!probe) return;
    probe->messages.push_back(m);
    if (std::holds_alternative<net::msg::welcome>(m)) probe->welcomed = true;
    if (on_msg) on_msg(*probe, m);
  });
  p->s->on_closed([weak](const core::error& e) {
    if (auto probe = weak.lock()) probe->closed = e;
  });
  p->s->start();
  return p;
}

// After any refusal the hub must still serve a well-behaved device.
inline bool still_serving(hub_fixture& hub) {
  auto ok = start_agent(hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_b)), hub.port, "dev-b");
  const bool welcomed = run_until(hub.io, [&] { return ok->welcomed; });
  ok->s->close();
  run_until(hub.io, [&] { return ok->closed.has_value(); });
  return welcomed;
}

// A TLS client that writes exactly the bytes it is given (valid or not), with delays, and records
// everything it receives. It never answers PINGs.
struct raw_peer : std::enable_shared_from_this<raw_peer> {
  enum class at_end { stay, half_close };  // half_close: TCP FIN without TLS close_notify
  struct step {
    std::chrono::milliseconds delay;
    std::vector<std::byte> bytes;
  };

  std::shared_ptr<asio::ssl::context> tls;
  asio::ssl::stream<tcp::socket> stream;
  asio::steady_timer timer;
  std::vector<step> steps;
  at_end end = at_end::stay;
  bool read_enabled = true;  // false: never read, so the hub's writes back up
  std::size_t next = 0;
  bool handshake_done = false;
  bool read_closed = false;
  bool steps_done = false;
  std::vector<std::byte> received;
  std::array<std::byte, 4096> buf{};
  std::chrono::steady_clock::time_point handshake_at{};

  raw_peer(asio::io_context& io, std::shared_ptr<asio::ssl::context> ctx)
      : tls(std::move(ctx)), stream(io, *tls), timer(io) {}

  void start(std::uint16_t port) {
    stream.lowest_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    stream.async_handshake(asio::ssl::stream_base::client, [self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec) {
        self->read_closed = true;
        return;
      }
      self->handshake_done = true;
      self->handshake_at = std::chrono::steady_clock::now();
      if (self->read_enabled) self->do_read();
      self->do_step();
    });
  }
  void do_read() {
    stream.async_read_some(asio::buffer(buf), [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
      if (ec) {
        self->read_closed = true;
        return;
      }
      self->received.insert(self->received.end(), self->buf.begin(), self->buf.begin() + static_cast<std::ptrdiff_t>(n));
      self->do_read();
    });
  }
  void do_step() {
    if (next == steps.size()) {
      steps_done = true;
      if (end == at_end::half_close) {
        // Only our sending side ends, so the hub's reply cannot bounce back as a reset.
        boost::system::error_code ignored;
        stream.lowest_layer().shutdown(tcp::socket::shutdown_send, ignored);
      }
      return;
    }
    timer.expires_after(steps[next].delay);
    timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->read_closed) return;
      asio::async_write(self->stream, asio::buffer(self->steps[self->next].bytes),
                        [self](const boost::system::error_code& ec2, std::size_t) {
                          if (ec2) return;
                          ++self->next;
                          self->do_step();
                        });
    });
  }
  // The frames received so far (stops at the first incomplete one).
  [[nodiscard]] std::vector<net::decoded_frame> frames() const {
    std::vector<net::decoded_frame> out;
    std::span<const std::byte> rest(received);
    while (!rest.empty()) {
      auto f = net::decode_frame(rest, net::default_max_payload);
      if (!f) break;
      out.push_back(f.value());
      rest = rest.subspan(f.value().frame_bytes);
    }
    return out;
  }
  [[nodiscard]] bool got_refuse() const {
    for (const auto& f : frames())
      if (f.header.type == net::frame_type::refuse) return true;
    return false;
  }
};

inline std::shared_ptr<raw_peer> start_raw(hub_fixture& hub, const crypto::cert_files& dev,
                                           std::vector<raw_peer::step> steps,
                                           raw_peer::at_end end = raw_peer::at_end::stay, bool read = true) {
  auto p = std::make_shared<raw_peer>(hub.io, asio_tls(test_pki::get().agent_tls(dev)));
  p->steps = std::move(steps);
  p->end = end;
  p->read_enabled = read;
  p->start(hub.port);
  return p;
}

}  // namespace tessera::test
