#include <doctest/doctest.h>

#include <chrono>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "net_test_util.hpp"
#include "tessera/net/link_emulator.hpp"

using namespace tessera::test;

namespace {

using clock_type = std::chrono::steady_clock;

// A sink on 127.0.0.1 that accepts one connection and records when bytes arrive.
struct sink {
  asio::io_context& io;
  tcp::acceptor acceptor;
  tcp::socket socket;
  std::vector<std::byte> buf = std::vector<std::byte>(64u << 10);
  std::uint64_t received = 0;
  clock_type::time_point first{}, last{};
  bool closed = false;
  explicit sink(asio::io_context& i) : io(i), acceptor(i, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), socket(i) {
    acceptor.async_accept(socket, [this](const boost::system::error_code& ec) {
      if (!ec) read();
    });
  }
  std::uint16_t port() const { return acceptor.local_endpoint().port(); }
  void read() {
    socket.async_read_some(asio::buffer(buf), [this](const boost::system::error_code& ec, std::size_t n) {
      if (ec) {
        closed = true;
        return;
      }
      if (received == 0) first = clock_type::now();
      received += n;
      last = clock_type::now();
      read();
    });
  }
};

// Sends `bytes` through the link; returns when the send completed or failed.
struct source {
  tcp::socket socket;
  std::vector<std::byte> data;
  bool done = false, failed = false;
  clock_type::time_point started{};
  source(asio::io_context& io, std::uint16_t port, std::size_t bytes) : socket(io), data(bytes, std::byte{0x5a}) {
    socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    started = clock_type::now();
    asio::async_write(socket, asio::buffer(data), [this](const boost::system::error_code& ec, std::size_t) {
      done = true;
      failed = static_cast<bool>(ec);
    });
  }
};

}  // namespace

TEST_CASE("link emulator: bytes arrive no faster than the rate and no sooner than the latency") {
  asio::io_context io;
  sink s(io);
  auto link = net::link_emulator::create(io, {.rate_bits_per_s = 1'000'000, .latency = 150ms, .seed = 3}, "127.0.0.1", s.port());
  auto port = link->listen("127.0.0.1", 0);
  REQUIRE(port.ok());
  source src(io, port.value(), 250'000);  // 2 s at 1 Mbit/s
  REQUIRE(run_until(io, [&] { return s.received == 250'000; }, 10000ms));
  const double first_s = std::chrono::duration<double>(s.first - src.started).count();
  const double all_s = std::chrono::duration<double>(s.last - src.started).count();
  MESSAGE("first byte after " << first_s << " s, 250 kB after " << all_s << " s at 1 Mbit/s, 150 ms");
  CHECK(first_s >= 0.15);
  CHECK(all_s >= 2.0);
  CHECK(all_s < 4.0);
  CHECK(link->stats().bytes_to_target == 250'000);
  CHECK(link->stats().connections == 1);
}

TEST_CASE("link emulator: a connection is cut after its byte budget, and stalls hold everything back") {
  // One io_context per scenario, declared first: it must outlive (and never run after) the sockets and
  // handlers of its scenario.
  {
    asio::io_context io;
    sink s(io);
    auto link = net::link_emulator::create(io, {.cut_after_bytes = 100'000}, "127.0.0.1", s.port());
    auto port = link->listen("127.0.0.1", 0);
    REQUIRE(port.ok());
    source src(io, port.value(), 1'000'000);
    REQUIRE(run_until(io, [&] { return s.closed; }, 5000ms));
    CHECK(s.received <= 100'000);
    CHECK(link->stats().cuts == 1);
  }
  {
    asio::io_context io;
    sink s(io);
    // Stalls of 400 ms every 500 ms: a 1 Mbit/s transfer of 1.2 s needs at least two more stalls' time.
    auto link = net::link_emulator::create(io, {.rate_bits_per_s = 1'000'000, .stall_every = 500ms, .stall_for = 400ms},
                                           "127.0.0.1", s.port());
    auto port = link->listen("127.0.0.1", 0);
    REQUIRE(port.ok());
    source src(io, port.value(), 150'000);
    REQUIRE(run_until(io, [&] { return s.received == 150'000; }, 15000ms));
    const double all_s = std::chrono::duration<double>(s.last - src.started).count();
    MESSAGE("150 kB at 1 Mbit/s with 400 ms stalls every 500 ms: " << all_s << " s");
    CHECK(all_s >= 1.2 + 0.8);
    CHECK(link->stats().stalls >= 2);
  }
}
