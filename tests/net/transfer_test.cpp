// Blobs in both directions, resumable across broken links; server stop; client backoff.
#include <doctest/doctest.h>

#include <cstdio>

#include "net_test_util.hpp"

using namespace tessera::test;

namespace {

// A TCP relay between agent and hub that cuts each connection after `cut_after` bytes (both directions
// together), in the middle of whatever TLS record is passing. It forwards ciphertext; it cannot read it.
class cutting_relay {
 public:
  cutting_relay(asio::io_context& io, std::uint16_t target, std::uint64_t cut_after)
      : io_(io), acceptor_(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), target_(target),
        cut_after_(cut_after) {
    do_accept();
  }
  [[nodiscard]] std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  int cuts = 0;
  int connections = 0;
  std::uint64_t forwarded = 0;

  void close() {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
  }

 private:
  struct link : std::enable_shared_from_this<link> {
    tcp::socket a, b;
    std::array<std::byte, 65536> buf_ab{}, buf_ba{};
    std::uint64_t count = 0;
    bool dead = false;
    cutting_relay* relay;
    link(asio::io_context& io, cutting_relay* r) : a(io), b(io), relay(r) {}
    void kill(bool cut) {
      if (dead) return;
      dead = true;
      if (cut) ++relay->cuts;
      boost::system::error_code ignored;
      a.close(ignored);
      b.close(ignored);
    }
    void pump(tcp::socket& from, tcp::socket& to, std::array<std::byte, 65536>& buf) {
      from.async_read_some(asio::buffer(buf), [self = shared_from_this(), &from, &to, &buf](
                                                  const boost::system::error_code& ec, std::size_t n) {
        if (ec || self->dead) {
          self->kill(false);
          return;
        }
        const std::uint64_t room = self->relay->cut_after_ - self->count;
        const bool cut = n >= room;
        const std::size_t pass = cut ? static_cast<std::size_t>(room) : n;
        self->count += pass;
        self->relay->forwarded += pass;
        asio::async_write(to, asio::buffer(buf.data(), pass), [self, &from, &to, &buf, cut](
                                                                   const boost::system::error_code& ec2, std::size_t) {
          if (ec2 || cut) {
            self->kill(cut);
            return;
          }
          self->pump(from, to, buf);
        });
      });
    }
  };

  void do_accept() {
    auto l = std::make_shared<link>(io_, this);
    acceptor_.async_accept(l->a, [this, l](const boost::system::error_code& ec) {
      if (ec) return;
      ++connections;
      boost::system::error_code cec;
      l->b.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), target_), cec);
      if (cec) {
        l->kill(false);
      } else {
        l->pump(l->a, l->b, l->buf_ab);
        l->pump(l->b, l->a, l->buf_ba);
      }
      do_accept();
    });
  }

  asio::io_context& io_;
  tcp::acceptor acceptor_;
  std::uint16_t target_;
  std::uint64_t cut_after_;
};

}  // namespace

TEST_CASE("transfer: a blob goes down to the agent and another comes back up, both verified") {
  hub_fixture hub;
  const auto down = pattern(3u << 20, 11);
  const auto up = pattern((2u << 20) + 12345, 12);
  hub.download = std::make_shared<net::outgoing_transfer>(1, down);
  auto up_t = std::make_shared<net::outgoing_transfer>(2, up);
  std::vector<std::byte> got(down.size());
  std::shared_ptr<net::incoming_transfer> in;
  bool up_sent = false;
  auto agent = start_agent(
      hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_a)), hub.port, "dev-a", fast_config(),
      [&](agent_probe& probe, const net::message& m) {
        if (const auto* a = std::get_if<net::msg::assign>(&m)) {
          CHECK(a->size == down.size());
          CHECK(a->widths == std::vector<std::uint32_t>{8, 4});
          // Received parameters go straight into the caller's memory.
          in = std::make_shared<net::incoming_transfer>(a->transfer, got, a->sha256);
          probe.s->expect_blob(in);
        }
      });
  agent->s->on_blob_received([&](const std::shared_ptr<net::incoming_transfer>&) {
    agent->s->send(net::msg::update{.round = 1, .examples = 10, .steps = 3, .loss = 0.1, .transfer = 2,
                                    .size = up_t->size(), .blob_codec = net::codec::f32, .sha256 = up_t->sha256()});
    agent->s->send_blob(up_t);
  });
  agent->s->on_blob_sent([&](const std::shared_ptr<net::outgoing_transfer>&) { up_sent = true; });
  REQUIRE(run_until(hub.io, [&] { return hub.blobs_received == 1 && up_sent && hub.blobs_sent == 1; }, 5000ms));
  REQUIRE(in);
  CHECK(in->complete());
  CHECK(got == down);
  CHECK(hub.upload_buf == up);
  CHECK(hub.download->complete());
  CHECK(up_t->complete());
  CHECK(hub.closes.empty());
}

TEST_CASE("transfer: 64 MiB through a relay that cuts the link every 4 MiB arrives intact, resending only unacknowledged bytes") {
  auto cfg = fast_config();
  cfg.idle_timeout = 2000ms;  // generous under sanitizers; the cuts, not the deadlines, end connections here
  cfg.chunk_bytes = 256u << 10;
  cfg.transfer_window_bytes = 1u << 20;
  hub_fixture hub(cfg);
  cutting_relay relay(hub.io, hub.port, 4u << 20);

  const std::size_t size = 64u << 20;
  const auto blob = pattern(size, 21);
  auto out = std::make_shared<net::outgoing_transfer>(7, blob);
  bool announced = false, sent = false;
  int sessions = 0;
  auto agent = net::client::create(hub.io, test_pki::get().agent_tls(test_pki::get().dev_a), cfg,
                                   {.host = "127.0.0.1", .port = relay.port(), .backoff_initial = 5ms,
                                    .backoff_max = 50ms, .jitter = 0.5, .seed = 1});
  agent->on_session([&](const std::shared_ptr<net::session>& s) {
    ++sessions;
    std::weak_ptr<net::session> weak = s;
    s->on_ready([weak, &announced, &out] {
      auto self = weak.lock();
      if (!self) return;
      auto hello = hello_for("dev-a");
      self->send(hello);
      if (!announced) {
        announced = true;
        self->send(net::msg::update{.round = 1, .examples = 10, .steps = 1, .loss = 0.5, .transfer = out->id(),
                                    .size = out->size(), .blob_codec = net::codec::f32, .sha256 = out->sha256()});
        self->send_blob(out);
      }
    });
    s->on_message([weak, &out, &announced](const net::message& m) {
      // On a reconnect the hub re-registers the upload when it sees HELLO (and says how much it holds,
      // with an ACK sent before the WELCOME); the agent resumes on WELCOME.
      auto self = weak.lock();
      if (self && announced && std::holds_alternative<net::msg::welcome>(m) && !out->complete()) self->send_blob(out);
    });
    s->on_blob_sent([&sent](const std::shared_ptr<net::outgoing_transfer>&) { sent = true; });
  });
  agent->start();
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(run_until(hub.io, [&] { return hub.blobs_received == 1 && sent; }, 30000ms));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  agent->stop();
  relay.close();

  REQUIRE(hub.upload);
  CHECK(hub.upload->complete());
  CHECK(hub.upload_buf == blob);
  const std::uint64_t resent = out->bytes_sent_total() - size;
  MESSAGE("relay: " << relay.cuts << " cuts, " << sessions << " sessions, " << relay.forwarded
                    << " bytes relayed; blob bytes sent " << out->bytes_sent_total() << " (resent " << resent
                    << "), received by the hub "
                    << hub.upload->bytes_received_total() << ", unacknowledged at breaks " << out->unacked_at_breaks()
                    << "; " << seconds << " s");
  CHECK(relay.cuts >= 10);
  CHECK(sessions == relay.cuts + 1);
  // Only what was not acknowledged when a link broke is sent again ...
  CHECK(resent <= out->unacked_at_breaks());
  CHECK(resent <= static_cast<std::uint64_t>(relay.cuts) * cfg.transfer_window_bytes);
  // ... and nothing the hub already held reached it twice.
  CHECK(hub.upload->bytes_received_total() == size);
}

TEST_CASE("transfer: a download resumes after a cut from the offset the agent reports") {
  auto cfg = fast_config();
  cfg.idle_timeout = 2000ms;
  hub_fixture hub(cfg);
  cutting_relay relay(hub.io, hub.port, 3u << 20);
  const std::size_t size = 8u << 20;
  const auto blob = pattern(size, 31);
  hub.download = std::make_shared<net::outgoing_transfer>(9, blob);
  std::vector<std::byte> got(size);
  std::shared_ptr<net::incoming_transfer> in;
  bool done = false;
  auto agent = net::client::create(hub.io, test_pki::get().agent_tls(test_pki::get().dev_a), cfg,
                                   {.host = "127.0.0.1", .port = relay.port(), .backoff_initial = 5ms,
                                    .backoff_max = 50ms, .jitter = 0.0, .seed = 1});
  agent->on_session([&](const std::shared_ptr<net::session>& s) {
    std::weak_ptr<net::session> weak = s;
    s->on_ready([weak, &in] {
      auto self = weak.lock();
      if (!self) return;
      auto hello = hello_for("dev-a");
      if (in) hello.resume.push_back({in->id(), in->received()});
      self->send(hello);
    });
    s->on_message([weak, &in, &got](const net::message& m) {
      auto self = weak.lock();
      if (!self) return;
      if (const auto* a = std::get_if<net::msg::assign>(&m)) {
        in = std::make_shared<net::incoming_transfer>(a->transfer, got, a->sha256);
        self->expect_blob(in);
      } else if (std::holds_alternative<net::msg::welcome>(m) && in && !in->complete()) {
        self->expect_blob(in);  // resumed: the chunks follow the WELCOME
      }
    });
    s->on_blob_received([&done](const std::shared_ptr<net::incoming_transfer>&) { done = true; });
  });
  agent->start();
  REQUIRE(run_until(hub.io, [&] { return done && hub.blobs_sent == 1; }, 15000ms));
  agent->stop();
  relay.close();
  CHECK(got == blob);
  CHECK(relay.cuts >= 2);
  CHECK(in->bytes_received_total() == size);
  CHECK(hub.download->bytes_sent_total() - size <= static_cast<std::uint64_t>(relay.cuts) * cfg.transfer_window_bytes);
}

TEST_CASE("server: stop closes the acceptor and every session, then reports drained") {
  hub_fixture hub;
  auto a = start_agent(hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_a)), hub.port, "dev-a");
  auto b = start_agent(hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_b)), hub.port, "dev-b");
  REQUIRE(run_until(hub.io, [&] { return a->welcomed && b->welcomed; }));
  CHECK(hub.server->session_count() == 2);
  bool drained = false;
  const auto t0 = std::chrono::steady_clock::now();
  hub.server->stop([&] { drained = true; });
  REQUIRE(run_until(hub.io, [&] { return drained && a->closed && b->closed; }));
  MESSAGE("stop took " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
  CHECK(hub.server->session_count() == 0);
  REQUIRE(hub.closes.size() == 2);
  CHECK(hub.closes[0].code == net::errc::stopped);
  CHECK(a->closed->code == net::errc::closed_by_peer);
  // The port no longer accepts.
  tcp::socket probe(hub.io);
  boost::system::error_code ec;
  probe.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), hub.port), ec);
  CHECK(ec);
}

TEST_CASE("server: connections beyond max_sessions are closed before any TLS") {
  hub_fixture hub(fast_config(), {.max_sessions = 1});
  auto a = start_agent(hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_a)), hub.port, "dev-a");
  REQUIRE(run_until(hub.io, [&] { return a->welcomed; }));
  auto b = start_agent(hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_b)), hub.port, "dev-b");
  REQUIRE(run_until(hub.io, [&] { return b->closed.has_value(); }));
  CHECK(!b->welcomed);
  CHECK(b->closed->code == net::errc::tls_handshake);
  CHECK(hub.server->session_count() == 1);
  CHECK(hub.closes.empty());  // the refused connection never became a session
  CHECK(!a->closed.has_value());
}

// Silent TCP connections from one address (the flood of a client with no certificate), bound to
// another loopback address than the real device's.
std::vector<std::unique_ptr<tcp::socket>> silent_connections(asio::io_context& io, const std::string& from, std::uint16_t port, int n) {
  std::vector<std::unique_ptr<tcp::socket>> out;
  for (int i = 0; i < n; ++i) {
    auto s = std::make_unique<tcp::socket>(io);
    s->open(tcp::v4());
    s->bind(tcp::endpoint(asio::ip::make_address(from), 0));
    s->connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    out.push_back(std::move(s));
  }
  return out;
}

TEST_CASE("server: silent connections from one address cannot crowd out a device's handshake") {
  net::session_config cfg = fast_config();
  cfg.handshake_timeout = 10'000ms;  // the silent ones would hold their places this long
  hub_fixture hub(cfg, {.max_sessions = 4, .max_handshakes = 8, .max_handshakes_per_source = 4});
  auto flood = silent_connections(hub.io, "127.0.0.2", hub.port, 40);
  run_for(hub.io, 200ms);
  CHECK(hub.server->silent_count() == 4);   // the address's bound: each newer one pushed out its oldest
  CHECK(hub.server->handshake_count() == 0);  // none has begun a handshake: no TLS state for them
  CHECK(hub.server->evicted_count() == 36);
  CHECK(hub.server->authenticated_count() == 0);
  auto a = start_agent(hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_a)), hub.port, "dev-a");
  REQUIRE(run_until(hub.io, [&] { return a->welcomed; }));
  CHECK(hub.server->authenticated_count() == 1);
  // More silence from other addresses fills the pool; a pending handshake goes, never the device's session.
  auto more = silent_connections(hub.io, "127.0.0.3", hub.port, 4);
  auto yet = silent_connections(hub.io, "127.0.0.4", hub.port, 4);
  run_for(hub.io, 200ms);
  CHECK(hub.server->silent_count() == 8);
  CHECK(hub.server->evicted_count() == 36 + 4);
  CHECK(!a->closed.has_value());
  auto b = start_agent(hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_b)), hub.port, "dev-b");
  REQUIRE(run_until(hub.io, [&] { return b->welcomed; }));
  CHECK(hub.server->authenticated_count() == 2);
}

// Whether the hub still holds `s` open: whatever it sent is read, and no end of file or reset follows.
bool held_open(tcp::socket& s) {
  s.non_blocking(true);
  std::array<char, 4096> buf{};
  for (;;) {
    boost::system::error_code ec;
    (void)s.read_some(asio::buffer(buf), ec);
    if (ec == asio::error::would_block) return true;
    if (ec) return false;
  }
}

TEST_CASE("server: a silent connection gives its place before one mid-handshake, from the devices' own address") {
  net::session_config cfg = fast_config();
  cfg.handshake_timeout = 10'000ms;
  hub_fixture hub(cfg, {.max_sessions = 4, .max_handshakes = 8, .max_handshakes_per_source = 4});
  // Four connections from 127.0.0.1 that began a handshake and stalled: a real ClientHello sent from an
  // io_context that then never runs again, so the hub's answer is never read.
  asio::io_context stalled_io;
  const auto client_tls = asio_tls(test_pki::get().agent_tls(test_pki::get().dev_b));
  std::vector<std::unique_ptr<asio::ssl::stream<tcp::socket>>> stalled_tls;
  std::vector<tcp::socket*> stalled;
  for (int i = 0; i < 4; ++i) {
    auto s = std::make_unique<asio::ssl::stream<tcp::socket>>(stalled_io, *client_tls);
    s->lowest_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), hub.port));
    s->async_handshake(asio::ssl::stream_base::client, [](const boost::system::error_code&) {});
    stalled.push_back(&s->next_layer());
    stalled_tls.push_back(std::move(s));
  }
  stalled_io.poll();  // the ClientHellos go out
  REQUIRE(run_until(hub.io, [&] { return hub.server->handshake_count() == 4; }));
  // Forty silent connections from the same address push out only each other.
  auto flood = silent_connections(hub.io, "127.0.0.1", hub.port, 40);
  run_for(hub.io, 200ms);
  CHECK(hub.server->silent_count() == 4);
  CHECK(hub.server->handshake_count() == 4);
  CHECK(hub.server->evicted_count() == 36);
  for (auto* s : stalled) CHECK(held_open(*s));  // the hub's answer to read, but no end of file
  // A device from that address is a fifth handshake: the oldest stalled one goes, never the device.
  auto a = start_agent(hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_a)), hub.port, "dev-a");
  REQUIRE(run_until(hub.io, [&] { return a->welcomed; }));
  CHECK(hub.server->authenticated_count() == 1);
  run_for(hub.io, 100ms);
  for (std::size_t i = 0; i < stalled.size(); ++i) CHECK_MESSAGE(held_open(*stalled[i]) == (i > 0), "stalled connection " << i);
  // More silence after it changes nothing for the device.
  auto more = silent_connections(hub.io, "127.0.0.1", hub.port, 40);
  run_for(hub.io, 200ms);
  CHECK(!a->closed.has_value());
  CHECK(hub.server->silent_count() == 4);
}

TEST_CASE("server: a byte, a closed connection or a record header alone stays silent; what is not TLS is closed at once") {
  net::session_config cfg = fast_config();
  cfg.handshake_timeout = 10'000ms;
  hub_fixture hub(cfg, {.max_sessions = 4, .max_handshakes = 8, .max_handshakes_per_source = 4});
  const auto send = [&](std::vector<std::uint8_t> bytes) {
    auto s = std::make_unique<tcp::socket>(hub.io);
    s->connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), hub.port));
    if (!bytes.empty()) asio::write(*s, asio::buffer(bytes));
    return s;
  };
  auto one_byte = send({0x16});
  auto header = send({0x16, 0x03, 0x01, 0x02, 0x00});  // announces 512 bytes that never come
  auto half = send({0x16, 0x03, 0x01, 0x00, 0x08, 1, 2, 3});
  run_for(hub.io, 200ms);
  CHECK(hub.server->silent_count() == 3);
  CHECK(hub.server->handshake_count() == 0);
  auto http = send({'G', 'E', 'T', ' ', '/', ' '});  // not TLS: closed, no place taken
  auto gone = send({});
  gone->close();  // a FIN before anything: closed, no place taken
  run_for(hub.io, 200ms);
  CHECK(hub.server->silent_count() == 3);
  CHECK(hub.server->handshake_count() == 0);
  std::array<char, 8> buf{};
  boost::system::error_code ec;
  (void)http->read_some(asio::buffer(buf), ec);
  CHECK((ec == asio::error::eof || ec == asio::error::connection_reset));
  // The rest of the half record: whole now, it moves on to a handshake (which fails: it is no ClientHello).
  asio::write(*half, asio::buffer(std::array<std::uint8_t, 5>{4, 5, 6, 7, 8}));
  REQUIRE(run_until(hub.io, [&] { return hub.server->silent_count() == 2; }));
}

TEST_CASE("server: a silent connection is closed at the handshake deadline, with no session made for it") {
  net::session_config cfg = fast_config();
  cfg.handshake_timeout = 300ms;
  hub_fixture hub(cfg, {});
  auto quiet = silent_connections(hub.io, "127.0.0.1", hub.port, 3);
  run_for(hub.io, 100ms);
  CHECK(hub.server->silent_count() == 3);
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(run_until(hub.io, [&] { return hub.server->silent_count() == 0; }, 3000ms));
  CHECK(std::chrono::steady_clock::now() - start >= 150ms);
  CHECK(hub.server->silent_expired_count() == 3);
  CHECK(hub.server->session_count() == 0);
  for (auto& s : quiet) {  // the hub closed them: end of file
    std::array<char, 16> buf{};
    boost::system::error_code ec;
    (void)s->read_some(asio::buffer(buf), ec);
    CHECK(ec == asio::error::eof);
  }
}

TEST_CASE("server: two sessions of one device are left to the owner; a probe tells a peer that answers from one that is gone") {
  hub_fixture hub(fast_config(), {.max_sessions = 8});
  std::vector<std::shared_ptr<net::session>> at_hub;
  hub.extra = [&](const std::shared_ptr<net::session>& s) { at_hub.push_back(s); };
  auto first = start_agent(hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_a)), hub.port, "dev-a");
  REQUIRE(run_until(hub.io, [&] { return first->welcomed; }));
  auto second = start_agent(hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_a)), hub.port, "dev-a");
  REQUIRE(run_until(hub.io, [&] { return second->welcomed; }));
  CHECK(hub.server->authenticated_count() == 2);
  CHECK(!first->closed.has_value());
  REQUIRE(at_hub.size() == 2);
  CHECK(at_hub[0]->peer_address().starts_with("127.0.0.1:"));
  // The first agent answers a PING; two overlapping probes share it.
  std::vector<bool> answers;
  at_hub[0]->probe(2000ms, [&](bool answered) { answers.push_back(answered); });
  at_hub[0]->probe(2000ms, [&](bool answered) { answers.push_back(answered); });
  REQUIRE(run_until(hub.io, [&] { return answers.size() == 2; }));
  CHECK(answers == std::vector<bool>{true, true});
  // A peer that is gone: false (one that is silent gets false at the deadline: tests/federation, the flood).
  answers.clear();
  second->s->close();
  REQUIRE(run_until(hub.io, [&] { return second->closed.has_value(); }));
  at_hub[1]->probe(2000ms, [&](bool answered) { answers.push_back(answered); });
  REQUIRE(run_until(hub.io, [&] { return answers.size() == 1; }));
  CHECK(answers == std::vector<bool>{false});
}

TEST_CASE("client: backoff doubles up to its cap, jitter only shortens it") {
  asio::io_context io;
  auto exact = net::client::create(io, test_pki::get().agent_tls(test_pki::get().dev_a), fast_config(),
                                   {.host = "127.0.0.1", .port = 1, .backoff_initial = 10ms, .backoff_max = 100ms,
                                    .jitter = 0.0, .seed = 1});
  CHECK(exact->backoff_delay(1) == 10ms);
  CHECK(exact->backoff_delay(2) == 20ms);
  CHECK(exact->backoff_delay(4) == 80ms);
  CHECK(exact->backoff_delay(5) == 100ms);
  CHECK(exact->backoff_delay(60) == 100ms);
  auto jittered = net::client::create(io, test_pki::get().agent_tls(test_pki::get().dev_a), fast_config(),
                                      {.host = "127.0.0.1", .port = 1, .backoff_initial = 10ms,
                                       .backoff_max = 100ms, .jitter = 0.5, .seed = 7});
  bool varied = false;
  auto first = jittered->backoff_delay(5);
  for (int i = 0; i < 50; ++i) {
    const auto d = jittered->backoff_delay(5);
    CHECK(d >= 50ms);
    CHECK(d <= 100ms);
    varied = varied || d != first;
  }
  CHECK(varied);
}

TEST_CASE("client: reconnects on a timer with growing delays while the hub is unreachable") {
  asio::io_context io;
  std::uint16_t dead_port = 0;
  {
    tcp::acceptor a(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    dead_port = a.local_endpoint().port();
  }  // closed: connections to it are refused
  auto c = net::client::create(io, test_pki::get().agent_tls(test_pki::get().dev_a), fast_config(),
                               {.host = "127.0.0.1", .port = dead_port, .backoff_initial = 5ms,
                                .backoff_max = 40ms, .jitter = 0.0, .seed = 1});
  std::vector<std::chrono::milliseconds> delays;
  c->on_connect_failed([&](const tessera::core::error& e, std::chrono::milliseconds next) {
    CHECK(e.code == net::errc::connect_failed);
    delays.push_back(next);
  });
  c->start();
  REQUIRE(run_until(io, [&] { return delays.size() >= 5; }));
  c->stop();
  CHECK(delays[0] == 5ms);
  CHECK(delays[1] == 10ms);
  CHECK(delays[2] == 20ms);
  CHECK(delays[3] == 40ms);
  CHECK(delays[4] == 40ms);
}

TEST_CASE("transfer: the agent's rate caps pace its download and its upload, and the link survives the pacing") {
  hub_fixture hub;
  const auto down = pattern(1u << 20, 21);
  const auto up = pattern(512u << 10, 22);
  hub.download = std::make_shared<net::outgoing_transfer>(1, down);
  auto up_t = std::make_shared<net::outgoing_transfer>(2, up);
  std::vector<std::byte> got(down.size());
  std::shared_ptr<net::incoming_transfer> in;
  net::session_config capped = fast_config();
  capped.receive_rate = 1u << 20;  // 1 MiB/s down
  capped.send_rate = 256u << 10;   // 256 KiB/s up
  using clock = std::chrono::steady_clock;
  clock::time_point assigned{}, downloaded{}, uploaded{};
  auto agent = start_agent(hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_a)), hub.port, "dev-a", capped,
                           [&](agent_probe& probe, const net::message& m) {
                             if (const auto* a = std::get_if<net::msg::assign>(&m)) {
                               assigned = clock::now();
                               in = std::make_shared<net::incoming_transfer>(a->transfer, got, a->sha256);
                               probe.s->expect_blob(in);
                             }
                           });
  agent->s->on_blob_received([&](const std::shared_ptr<net::incoming_transfer>&) {
    downloaded = clock::now();
    agent->s->send(net::msg::update{.round = 1, .examples = 10, .steps = 3, .loss = 0.1, .transfer = 2,
                                    .size = up_t->size(), .blob_codec = net::codec::f32, .sha256 = up_t->sha256()});
    agent->s->send_blob(up_t);
  });
  agent->s->on_blob_sent([&](const std::shared_ptr<net::outgoing_transfer>&) { uploaded = clock::now(); });
  REQUIRE(run_until(hub.io, [&] { return hub.blobs_received == 1 && uploaded != clock::time_point{}; }, 20000ms));
  CHECK(got == down);
  CHECK(hub.upload_buf == up);
  CHECK(hub.closes.empty());  // 400 ms idle deadlines on both sides held throughout
  const double down_s = std::chrono::duration<double>(downloaded - assigned).count();
  const double up_s = std::chrono::duration<double>(uploaded - downloaded).count();
  MESSAGE("1 MiB down at a 1 MiB/s cap: " << down_s << " s; 512 KiB up at a 256 KiB/s cap: " << up_s << " s");
  // At most one 50 ms burst goes faster than the cap.
  CHECK(down_s >= 0.9);
  CHECK(up_s >= 1.9);
}
