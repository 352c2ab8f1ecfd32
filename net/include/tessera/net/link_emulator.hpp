// tessera/net/link_emulator.hpp — a TCP relay that behaves like a slow, flaky link, for tests and benchmarks.
//
// Connections accepted on the emulator's port are relayed to a target (host:port). Each direction of
// each connection is a separate pipe with the profile's bandwidth (serialisation delay: bytes arrive
// no faster than the rate), one-way latency plus seeded uniform jitter (never reordering: TCP is a
// stream), periodic stalls during which the link delivers nothing in either direction, and cuts: a
// connection is closed abruptly after a number of bytes or a time since it opened. The queue between
// the two sockets is bounded (about one second of traffic plus the latency), so a sender feels the
// link's pace through TCP's own flow control, as on a real slow link. Everything is seeded: the same
// profile and seed give the same jitter draws. Runs on one io_context thread.
//
//   net::link_profile p{.rate_bits_per_s = 1'000'000, .latency = 100ms};
//   auto link = net::link_emulator::create(io, p, "127.0.0.1", hub_port);
//   auto port = link->listen("127.0.0.1", 0).value();   // agents dial this port instead of the hub's
//   ...
//   auto s = link->stats();                             // bytes each way, connections, cuts, stalls
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "tessera/core/base/error.hpp"

namespace tessera::net {

struct link_profile {
  std::uint64_t rate_bits_per_s = 0;             // each direction; 0: unlimited
  std::chrono::milliseconds latency{0};          // one way
  std::chrono::milliseconds jitter{0};           // extra delay drawn uniformly in [0, jitter]
  std::chrono::milliseconds stall_every{0};      // the link freezes for stall_for, every stall_every
  std::chrono::milliseconds stall_for{0};
  std::chrono::milliseconds cut_every{0};        // a connection is cut this long after it opened
  std::uint64_t cut_after_bytes = 0;             // or once this many bytes crossed it (both ways)
  std::uint64_t seed = 1;
};

struct link_stats {
  std::uint64_t bytes_to_target = 0;    // delivered towards the target (agent → hub: uploads)
  std::uint64_t bytes_from_target = 0;  // delivered back (downloads)
  std::uint64_t connections = 0;
  std::uint64_t cuts = 0;
  std::uint64_t stalls = 0;             // stall windows begun since the start
};

class link_emulator : public std::enable_shared_from_this<link_emulator> {
 public:
  [[nodiscard]] static std::shared_ptr<link_emulator> create(boost::asio::io_context& io, const link_profile& profile,
                                                             std::string target_host, std::uint16_t target_port);
  [[nodiscard]] core::result<std::uint16_t> listen(const std::string& address, std::uint16_t port);
  // Stops accepting and closes every connection.
  void stop();
  [[nodiscard]] link_stats stats() const;

  struct impl;
  link_emulator(boost::asio::io_context& io, const link_profile& profile, std::string target_host, std::uint16_t target_port);
  ~link_emulator();

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace tessera::net
