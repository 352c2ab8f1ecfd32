// tessera/net/link_config.hpp — a link's settings as hub and agent configure them, and their session_config.
//
// Both ends read the same fields with the same bounds (and document them in --help through the reader):
//   heartbeat_s, idle_timeout_s       PING when idle this long; drop a peer silent that long
//   chunk_kib, window_kib             bytes per CHUNK, and unacknowledged bytes per blob in flight
//   rate_limit{upload_bytes_per_s, download_bytes_per_s}    caps for metered links (agent)
//
//   net::link_settings link;
//   net::read_link_settings(r, link, /*rate_limits=*/true);
//   net::session_config sc = net::to_session_config(link);
#pragma once

#include <cstdint>

#include "tessera/core/config/json_config.hpp"
#include "tessera/net/session_config.hpp"

namespace tessera::net {

struct link_settings {
  double heartbeat_s = 10;
  double idle_timeout_s = 60;             // also the write deadline: no byte written for this long
  std::uint32_t chunk_kib = 256;
  std::uint32_t window_kib = 2048;
  std::uint64_t upload_bytes_per_s = 0;   // 0: no cap
  std::uint64_t download_bytes_per_s = 0;
};

// Reads the fields above (rate_limit only where `rate_limits`); errors are kept by the reader.
void read_link_settings(core::config_reader& r, link_settings& s, bool rate_limits);

// The session deadlines, chunking and pacing these settings give.
[[nodiscard]] session_config to_session_config(const link_settings& s);

}  // namespace tessera::net
