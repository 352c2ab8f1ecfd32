// Deadlines measure progress: a silent peer is dropped, a slow but steady one is not, and heartbeats
// keep an otherwise quiet link (an agent in local training) open.
#include <doctest/doctest.h>

#include "net_test_util.hpp"

using namespace tessera::test;

TEST_CASE("idle: a silent peer is dropped at the idle deadline") {
  hub_fixture hub;  // idle_timeout 400 ms
  auto p = start_raw(hub, test_pki::get().dev_a, {});
  REQUIRE(run_until(hub.io, [&] { return p->handshake_done; }));
  REQUIRE(run_until(hub.io, [&] { return !hub.closes.empty(); }));
  const auto waited = std::chrono::steady_clock::now() - p->handshake_at;
  CHECK(hub.closes[0].code == net::errc::idle_timeout);
  CHECK(waited >= 380ms);
  CHECK(waited < 1000ms);
  CHECK(still_serving(hub));
}

TEST_CASE("idle: a peer sending slowly but steadily is not dropped") {
  // idle_timeout 400 ms; the HELLO deadline (the handshake's, from the connection) is set past the
  // dribble: that one is tested below.
  auto cfg = fast_config();
  cfg.handshake_timeout = 5000ms;
  hub_fixture hub(cfg);
  // A HELLO dribbled out a few bytes at a time over ~1.2 s: three idle periods, never 400 ms silent.
  const auto hello = net::encode_message(hello_for("dev-a"));
  std::vector<raw_peer::step> steps;
  const std::size_t pieces = 30;
  for (std::size_t i = 0; i < pieces; ++i) {
    const std::size_t a = hello.size() * i / pieces, b = hello.size() * (i + 1) / pieces;
    steps.push_back({40ms, std::vector<std::byte>(hello.begin() + static_cast<std::ptrdiff_t>(a),
                                                  hello.begin() + static_cast<std::ptrdiff_t>(b))});
  }
  auto p = start_raw(hub, test_pki::get().dev_a, std::move(steps));
  REQUIRE(run_until(hub.io, [&] { return p->handshake_done; }));
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(run_until(hub.io, [&] { return !hub.hellos.empty() || !hub.closes.empty(); }, 3000ms));
  CHECK(std::chrono::steady_clock::now() - start >= 1000ms);
  CHECK(hub.closes.empty());
  REQUIRE(hub.hellos.size() == 1);
  CHECK(hub.hellos[0] == "dev-a");
}

TEST_CASE("heartbeat: PING/PONG keep a quiet link open past several idle deadlines") {
  hub_fixture hub;  // both sides: heartbeat 100 ms, idle 400 ms
  auto agent = start_agent(hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_a)), hub.port, "dev-a");
  REQUIRE(run_until(hub.io, [&] { return agent->welcomed; }));
  const auto rx = agent->s->bytes_received();
  run_for(hub.io, 1200ms);  // "local training": no application message either way
  CHECK(hub.closes.empty());
  CHECK(!agent->closed.has_value());
  CHECK(agent->s->bytes_received() > rx);  // PINGs and PONGs flowed
}

TEST_CASE("handshake: a peer that never starts TLS is dropped at the handshake deadline") {
  auto cfg = fast_config();
  cfg.handshake_timeout = 300ms;
  hub_fixture hub(cfg);
  tcp::socket plain(hub.io);
  plain.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), hub.port));
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(run_until(hub.io, [&] { return hub.server->silent_expired_count() == 1; }));
  CHECK(std::chrono::steady_clock::now() - start >= 280ms);
  CHECK(hub.closes.empty());  // it never became a session
  std::array<char, 8> buf{};
  boost::system::error_code ec;
  (void)plain.read_some(asio::buffer(buf), ec);
  CHECK(ec == asio::error::eof);
}

TEST_CASE("handshake: a peer that starts TLS and stalls is dropped at the handshake deadline") {
  auto cfg = fast_config();
  cfg.handshake_timeout = 300ms;
  hub_fixture hub(cfg);
  asio::io_context stalled_io;  // sends its ClientHello, then never runs again
  const auto client_tls = asio_tls(test_pki::get().agent_tls(test_pki::get().dev_a));
  asio::ssl::stream<tcp::socket> stalled(stalled_io, *client_tls);
  stalled.lowest_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), hub.port));
  stalled.async_handshake(asio::ssl::stream_base::client, [](const boost::system::error_code&) {});
  stalled_io.poll();
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(run_until(hub.io, [&] { return !hub.closes.empty(); }));
  CHECK(hub.closes[0].code == net::errc::handshake_timeout);
  CHECK(std::chrono::steady_clock::now() - start >= 280ms);
}

TEST_CASE("hello: a device that completes TLS and then says nothing is dropped at the same deadline") {
  auto cfg = fast_config();
  cfg.handshake_timeout = 300ms;  // the idle deadline (fast_config) is longer: it must not be the one
  REQUIRE(cfg.idle_timeout > cfg.handshake_timeout);
  hub_fixture hub(cfg);
  const auto start = std::chrono::steady_clock::now();
  auto p = start_raw(hub, test_pki::get().dev_a, {}, raw_peer::at_end::stay, /*read=*/true);
  REQUIRE(run_until(hub.io, [&] { return !hub.closes.empty(); }, 3000ms));
  CHECK(p->handshake_done);
  CHECK(hub.closes[0].code == net::errc::handshake_timeout);
  CHECK(hub.closes[0].message == "no HELLO within 300 ms of connecting");
  CHECK(std::chrono::steady_clock::now() - start >= 280ms);
  CHECK(still_serving(hub));
}

TEST_CASE("write: a peer that stops reading is dropped at the write deadline, though it keeps talking") {
  auto cfg = fast_config();
  cfg.write_timeout = 300ms;
  cfg.transfer_window_bytes = 32u << 20;  // no ACKs will come: let the hub fill every socket buffer
  cfg.chunk_bytes = 256u << 10;
  const auto blob = pattern(32u << 20, 41);  // declared first: it must outlive the hub's sessions writing it
  hub_fixture hub(cfg);
  hub.download = std::make_shared<net::outgoing_transfer>(3, blob);
  // HELLO, then a PING every 50 ms (so the hub's idle deadline never fires), and never a read.
  std::vector<raw_peer::step> steps{{0ms, net::encode_message(hello_for("dev-a"))}};
  for (int i = 0; i < 40; ++i) steps.push_back({50ms, net::encode_message(net::msg::ping{static_cast<std::uint64_t>(i)})});
  auto p = start_raw(hub, test_pki::get().dev_a, std::move(steps), raw_peer::at_end::stay, /*read=*/false);
  REQUIRE(run_until(hub.io, [&] { return !hub.closes.empty(); }, 3000ms));
  CHECK(hub.closes[0].code == net::errc::write_timeout);
  CHECK(hub.download->bytes_sent_total() < blob.size());
  CHECK(still_serving(hub));
}
