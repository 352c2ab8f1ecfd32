// tessera/net/session_config.hpp — what a session is told: which side it is, its deadlines and bounds.
//
// Kept apart from session.hpp so that the socket-free parts of a session (session_lifecycle.hpp's
// watchdog, the tests) can read the same numbers without Asio. session.hpp includes it.
//
//   net::session_config c;
//   c.idle_timeout = std::chrono::seconds(30);   // drop a peer silent for this long
//   c.send_rate = 125'000;                       // 1 Mbit/s of TLS payload out
//   auto s = std::make_shared<net::session>(std::move(socket), tls, net::role::agent, c);
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "tessera/core/base/assert.hpp"
#include "tessera/net/frame.hpp"

namespace tessera::net {

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

  // What a session runs with: max_frame_payload clamped to hard_max_payload. A CHUNK that would not fit
  // that limit with its sub-header, or a window smaller than one chunk, is a programming error (asserts).
  [[nodiscard]] session_config checked() const {
    session_config c = *this;
    c.max_frame_payload = std::min(c.max_frame_payload, hard_max_payload);
    TESSERA_ASSERT(c.chunk_bytes >= 1 && c.chunk_bytes + chunk_header_bytes <= c.max_frame_payload);
    TESSERA_ASSERT(c.transfer_window_bytes >= c.chunk_bytes);
    return c;
  }
};

}  // namespace tessera::net
